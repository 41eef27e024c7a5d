"""One writer per piece of scheduler state (the table in `sandfs/sched/__init__.py`): outside
its owner's module nothing assigns, deletes or mutates it; and the scheduler's modules import
one another without a cycle, type-only imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import sandfs.sched

SCHED = Path(sandfs.sched.__file__).parent
# (the attribute holding the owner, the state) -> the owner's module; None: any holder
OWNED = {("board", "demanded"): "board", ("board", "waiting"): "board",
         ("carry", "nbytes"): "carry", ("carry", "carried"): "carry",
         ("carry", "frames_on_disk"): "carry",
         ("passes", "paused"): "passes", ("passes", "fruitless"): "passes",
         ("passes", "handed_over"): "passes", ("passes", "pausing"): "passes",
         ("board", "ready"): "board", (None, "readers_left"): "board",
         (None, "running"): "scheduler", ("board", "disk_plans"): "board",
         ("board", "urgency"): "board"}
MUTATORS = {"add", "discard", "remove", "pop", "popitem", "clear", "update", "setdefault",
            "append", "extend", "move_to_end", "__setitem__", "__delitem__", "refine", "drop",
            "add_entries", "add_many", "forget_window", "rebuild"}


def owned(node: ast.expr) -> tuple[str | None, str] | None:
    """The owned state `node` is (x.board.demanded) or is an item of (x.board.waiting[k])."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute):
        return None
    holder = node.value
    holder_name = (holder.attr if isinstance(holder, ast.Attribute)
                   else holder.id if isinstance(holder, ast.Name) else None)
    for key in ((holder_name, node.attr), (None, node.attr)):
        if key in OWNED:
            return key
    return None


def is_own_attribute(target: ast.expr) -> bool:
    return (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
            and target.value.id == "self")


def writes(tree: ast.AST):
    """(line, state) of every assignment, deletion or mutating call of owned state."""
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):  # `self.running = running` names a reference only
            targets = [t for t in node.targets if not is_own_attribute(t)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS):
            targets = [node.func.value]
        for target in targets:
            state = owned(target)
            if state is not None:
                yield node.lineno, state


def test_each_piece_of_scheduler_state_is_written_by_its_owner_only():
    intruders = []
    for path in sorted(SCHED.glob("*.py")):
        for line, state in writes(ast.parse(path.read_text())):
            owner = OWNED[state]
            # in its owner's module the state is `self.demanded`: holder `self`, not `board`
            if path.stem != owner:
                intruders.append(f"{path.name}:{line} writes {'.'.join(filter(None, state))} "
                                 f"(owner: {owner})")
    assert not intruders, "\n".join(intruders)


def test_the_check_sees_each_kind_of_write():
    code = ("board.demanded.add(k)\nx.board.waiting[k] += 1\ndel self.running[k]\n"
            "self.carry.nbytes -= n\npasses.paused[k] = s\nboard.demanded\n"
            "self.running = running\nself.running[k] = job\n")
    assert [state for _, state in sorted(writes(ast.parse(code)))] == [
        ("board", "demanded"), ("board", "waiting"), (None, "running"), ("carry", "nbytes"),
        ("passes", "paused"), (None, "running")]


def sched_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "sandfs.sched":
                names |= {alias.name for alias in node.names}
            elif node.module.startswith("sandfs.sched."):
                names.add(node.module.removeprefix("sandfs.sched.").split(".")[0])
    return names


def test_the_scheduler_modules_import_one_another_without_a_cycle():
    graph = {path.stem: sched_imports(path) for path in SCHED.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> None:
        if module in stack:
            raise AssertionError("import cycle: " + " -> ".join(
                [*stack[stack.index(module):], module]))
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
