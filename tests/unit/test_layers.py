"""Imports flow one way (STYLE.md): config -> plan -> cache/sched -> materialize -> fuse ->
daemon -> cli, with media, ops and the small shared modules as leaves; only media imports av and
only the FUSE layer and the daemon import pyfuse3."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "sandfs"
RANK = {  # a module may import modules of the same or a lower rank only
    "ops": 0, "media": 0, "faults": 0, "errors": 0, "stats": 0, "npy": 0, "mountwatch": 0,
    "fileio": 0, "status": 0,
    "config": 1, "access": 1,
    "plan": 2, "cache": 2,
    "materialize": 3,
    "sched": 4,
    "service": 5, "reference": 5, "tasks": 5,
    "fuse": 6,
    "daemon": 7,
    "cli": 8, "__main__": 8, "__init__": 8,
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
