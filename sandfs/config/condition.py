"""Safe `condition:` expressions over `epoch`, `iteration` and `task`.

The text is parsed with `ast` and checked against a tiny, typed language: integer and string
literals, the three names, `+ - * // %` and unary minus on integers, comparisons (chained ok) of
like types, and `and`/`or`/`not` over comparisons. The checked tree is then walked by `evaluate`;
nothing is ever compiled to code or passed to `eval`. Without `**`, and with the source and the
literals bounded, no expression can build a huge number or run for long.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

MAX_SOURCE_CHARS = 500
MAX_DEPTH = 50  # the checker and evaluator recurse: `- - - ... epoch` must not exhaust the stack
MAX_LITERAL = 10**18
MAX_RESULT_BITS = 1024  # belt and braces: results stay far below this without `**`


class ConditionError(ValueError):
    """A condition that passed validation could not be evaluated (e.g. `% (epoch - 3)` at
    epoch 3): the views that needed it fail, nothing else does."""

NAME_TYPES: dict[str, type] = {"epoch": int, "iteration": int, "task": str}

_ARITHMETIC: dict[type, tuple[str, Callable[[int, int], int]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
}
_COMPARISONS: dict[type, tuple[str, Callable[[Any, Any], bool]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
}
_ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)

# What to call the constructs we refuse, so that the message names them.
_REFUSED = {
    ast.Call: "function calls",
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Lambda: "lambda",
    ast.IfExp: "conditional expressions (x if c else y)",
    ast.NamedExpr: "assignment expressions (:=)",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.List: "lists",
    ast.Tuple: "tuples",
    ast.Set: "sets",
    ast.Dict: "dicts",
    ast.JoinedStr: "f-strings",
    ast.Starred: "starred expressions",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slices",
}
_OPERATOR_NAMES = {
    ast.Div: "'/' (use '//': integers only)",
    ast.Pow: "'**'",
    ast.LShift: "'<<'",
    ast.RShift: "'>>'",
    ast.BitAnd: "'&' (use 'and')",
    ast.BitOr: "'|' (use 'or')",
    ast.BitXor: "'^'",
    ast.MatMult: "'@'",
    ast.UAdd: "unary '+'",
    ast.Invert: "'~'",
    ast.In: "'in'",
    ast.NotIn: "'not in'",
    ast.Is: "'is'",
    ast.IsNot: "'is not'",
}


def compile_condition(text: str) -> ast.expr:
    """Parse and type-check `text`; return the tree for `evaluate`. Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"a condition must be a string, got {type(text).__name__}")
    source = text.strip()
    if not source:
        raise ValueError("the condition is empty")
    if len(source) > MAX_SOURCE_CHARS:
        raise ValueError(f"the condition is longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"invalid syntax: {e.msg}") from None
    except (RecursionError, MemoryError):
        raise ValueError("the condition is nested too deeply") from None
    if _depth(tree) > MAX_DEPTH:
        raise ValueError(f"the condition is nested more than {MAX_DEPTH} levels deep")
    kind = _check(tree)
    if kind is not bool:
        raise ValueError(
            f"a condition must be a comparison, or comparisons joined by and/or/not "
            f"(e.g. `epoch % 2 == 0`), not a bare {kind.__name__} expression"
        )
    return tree


def evaluate(tree: ast.expr, names: Mapping[str, object]) -> object:
    """Evaluate a tree from `compile_condition`. Raises ConditionError (e.g. division by
    zero)."""
    for name, kind in NAME_TYPES.items():
        if not isinstance(names.get(name), kind):
            raise ConditionError(
                f"condition needs {name} as {kind.__name__}, got {names.get(name)!r}")
    return _eval(tree, names)


def _depth(tree: ast.AST) -> int:
    """The tree's depth, found without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _check(node: ast.expr) -> type:
    """The static type (int, str or bool) of `node`; ValueError outside the language."""
    if isinstance(node, ast.Constant):
        return _check_literal(node.value)
    if isinstance(node, ast.Name):
        if node.id not in NAME_TYPES:
            raise ValueError(f"unknown name {node.id!r} (allowed: epoch, iteration, task)")
        return NAME_TYPES[node.id]
    if isinstance(node, ast.UnaryOp):
        return _check_unary(node)
    if isinstance(node, ast.BinOp):
        return _check_binary(node)
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _expect(value, bool, "and/or")
        return bool
    if isinstance(node, ast.Compare):
        return _check_compare(node)
    what = _REFUSED.get(type(node), type(node).__name__)
    raise ValueError(f"{what} cannot be used in a condition")


def _check_literal(value: object) -> type:
    if isinstance(value, bool) or value is None or value is ...:
        raise ValueError(f"the literal {value!r} is not allowed (only integers and strings)")
    if isinstance(value, int):
        if abs(value) > MAX_LITERAL:
            raise ValueError(f"integer literal larger than {MAX_LITERAL}")
        return int
    if isinstance(value, str):
        return str
    raise ValueError(
        f"{type(value).__name__} literals like {value!r} are not allowed "
        "(only integers and strings)"
    )


def _check_unary(node: ast.UnaryOp) -> type:
    if isinstance(node.op, ast.Not):
        _expect(node.operand, bool, "not")
        return bool
    if isinstance(node.op, ast.USub):
        _expect(node.operand, int, "unary '-'")
        return int
    raise ValueError(f"operator {_OPERATOR_NAMES[type(node.op)]} is not allowed")


def _check_binary(node: ast.BinOp) -> type:
    if type(node.op) not in _ARITHMETIC:
        raise ValueError(f"operator {_OPERATOR_NAMES.get(type(node.op), '?')} is not allowed")
    symbol = _ARITHMETIC[type(node.op)][0]
    _expect(node.left, int, f"'{symbol}'")
    _expect(node.right, int, f"'{symbol}'")
    is_division = isinstance(node.op, ast.FloorDiv | ast.Mod)
    if is_division and isinstance(node.right, ast.Constant) and node.right.value == 0:
        raise ValueError(f"division by zero ('{symbol} 0')")
    return int


def _check_compare(node: ast.Compare) -> type:
    operands = [node.left, *node.comparators]
    kinds = [_check(operand) for operand in operands]
    for op, left, right in zip(node.ops, kinds[:-1], kinds[1:], strict=True):
        if type(op) not in _COMPARISONS:
            raise ValueError(f"operator {_OPERATOR_NAMES.get(type(op), '?')} is not allowed")
        symbol = _COMPARISONS[type(op)][0]
        if left is not right:
            raise ValueError(f"'{symbol}' compares {left.__name__} with {right.__name__}")
        if left is bool and isinstance(op, _ORDERINGS):
            raise ValueError(f"'{symbol}' cannot order true/false values")
    return bool


def _expect(node: ast.expr, kind: type, where: str) -> None:
    found = _check(node)
    if found is not kind:
        raise ValueError(f"{where} needs {_a(kind)}, got {_a(found)}")


def _a(kind: type) -> str:
    return {int: "an integer", str: "a string", bool: "a comparison"}[kind]


def _eval(node: ast.expr, names: Mapping[str, object]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BinOp):
        return _eval_binary(node, names)
    if isinstance(node, ast.BoolOp):
        want = isinstance(node.op, ast.Or)  # `or` stops at the first true, `and` at the first false
        return want if any(_eval(v, names) is want for v in node.values) else not want
    return _eval_compare(node, names)


def _eval_binary(node: ast.BinOp, names: Mapping[str, object]) -> int:
    left, right = _eval(node.left, names), _eval(node.right, names)
    symbol, apply = _ARITHMETIC[type(node.op)]
    if right == 0 and symbol in ("//", "%"):
        raise ConditionError("integer division by zero")
    result = apply(left, right)
    if result.bit_length() > MAX_RESULT_BITS:
        raise ConditionError("integer result too large")
    return result


def _eval_compare(node: ast.Compare, names: Mapping[str, object]) -> bool:
    left = _eval(node.left, names)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = _eval(right_node, names)
        if not _COMPARISONS[type(op)][1](left, right):
            return False
        left = right
    return True
