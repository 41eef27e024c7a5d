"""Imports flow one way, as docs/design.md#which-module-owns-what draws it: leaves (media, ops,
status and the small shared modules) -> config -> plan and cache -> materialize -> sched ->
service and tasks -> fuse -> daemon -> cli. Only media imports av; only the FUSE layer and the
daemon import pyfuse3; no two modules import each other, even through a function-level import."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sandfs"
RANK = {  # a module may import modules of the same or a lower rank only
    "ops": 0, "media": 0, "faults": 0, "errors": 0, "stats": 0, "npy": 0,
    "fileio": 0, "status": 0, "remote": 0, "readiness": 0, "workerproc": 0, "pids": 0,
    "runtime": 0, "distribution": 0, "launch": 0, "openat": 0, "mounttable": 0,
    "placement": 0, "threads": 0, "ratelog": 0,
    "config": 1, "access": 1, "bounds": 1,
    "plan": 2, "cache": 2,
    "materialize": 3,
    "sched": 4, "execution": 4,  # where sched's video jobs run
    "service": 5, "tasks": 5, "metrics": 5, "startup": 5,
    "fuse": 6, "registration": 6,
    "daemon": 7,
    "cli": 8, "__main__": 8, "__init__": 8, "watch": 8,
    "torch": 9, "client": 9, "reading": 9, "ray": 10,  # client side: what a training script imports
}


def layer(module_path: Path) -> str:
    parts = module_path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported(module_path: Path) -> list[str]:
    tree = ast.parse(module_path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "sandfs":
            names += [f"sandfs.{alias.name}" for alias in node.names  # from sandfs import ops
                      if (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").exists()]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way(module):
    own = layer(module)
    for name in imported(module):
        top = name.split(".")[0]
        if top == "av":
            assert own == "media", f"{module.name} imports av: only sandfs/media may"
        if top == "pyfuse3":
            assert own in ("fuse", "daemon"), f"{module.name} imports pyfuse3"
        if top != "sandfs":
            continue
        target = name.split(".")[1]
        assert RANK[target] <= RANK[own], f"{module.name} ({own}) imports {name} ({target})"


def test_every_module_has_a_layer():
    assert {layer(m) for m in MODULES} <= set(RANK)


def module_name(module_path: Path) -> str:
    parts = module_path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULE_NAMES = {module_name(m) for m in MODULES}


def runtime_imports(module_path: Path) -> set[str]:
    """The sandfs modules a module imports when it runs (`if TYPE_CHECKING:` blocks left
    out), a `from package import submodule` counted as the submodule."""
    tree = ast.parse(module_path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test).endswith("TYPE_CHECKING")
                   for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULE_NAMES else node.module)
    return found & MODULE_NAMES


def test_no_import_cycles():
    """Between modules, imports inside functions included: a cycle means two rooms that
    should be one, or a record that belongs in a third."""
    graph = nx.DiGraph()
    for module in MODULES:
        own = module_name(module)
        graph.add_edges_from((own, target) for target in runtime_imports(module)
                             if target != own and not own.startswith(f"{target}."))
    assert list(nx.simple_cycles(graph)) == []
