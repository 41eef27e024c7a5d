"""`condition:` expressions: what they evaluate to, and the hostile ones refused at load time."""

import re

import pytest

from sandfs.config.condition import ConditionError, compile_condition, evaluate

# --- conditions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "epoch", "iteration", "task", "expected"),
    [
        ("epoch < 5", 4, 0, "t", True),
        ("epoch < 5", 5, 0, "t", False),
        ("0 <= epoch < 10 and iteration % 2 == 0", 3, 4, "t", True),
        ("0 <= epoch < 10 and iteration % 2 == 0", 3, 5, "t", False),
        ("not (epoch == 1 or task != 'ssl')", 2, 0, "ssl", True),
        ('task == "ssl" or epoch * 2 - 1 > iteration // 3', 4, 20, "x", True),
        ("-epoch + 3 >= -iteration", 5, 1, "x", False),
        ("iteration > 10000", 0, 10001, "x", True),
        ("task < 'b'", 0, 0, "a", True),
        ("(epoch > 1) == (iteration > 1)", 0, 0, "x", True),
    ],
)
def test_condition_values(source, epoch, iteration, task, expected):
    tree = compile_condition(source)
    assert evaluate(tree, {"epoch": epoch, "iteration": iteration, "task": task}) is expected


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("__import__('os').system('ls')", "function calls"),
        ("epoch.real > 1", "attribute access"),
        ("task[0] == 'a'", "subscripts"),
        ("(lambda: 1)() == 1", "function calls"),
        ("(lambda: 1) == 1", "lambda"),
        ("x > 1", "unknown name 'x'"),
        ("__builtins__ == 1", "unknown name '__builtins__'"),
        ("epoch > 1.5", "float literals"),
        ("epoch ** 99999999 > 1", "'**'"),
        ("epoch / 2 > 1", "'/'"),
        ("epoch > 10000000000000000000", "literal larger"),
        ("'a' * 1000000000 == task", "'*' needs an integer, got a string"),
        ("task + 1 == 2", "'+' needs an integer, got a string"),
        ("task == 1", "compares str with int"),
        ("epoch in (1, 2)", "tuples"),
        ("epoch in [1]", "lists"),
        ("epoch is 1", "'is'"),
        ("epoch", "not a bare int expression"),
        ("epoch > 1 if task else 0", "conditional expressions"),
        ("[x for x in ()]", "comprehensions"),
        ("(y := 1) == 1", "assignment expressions"),
        ("f'{epoch}' == task", "f-strings"),
        ("epoch & 1 == 1", "'&'"),
        ("True", "literal True"),
        ("epoch % 0 == 1", "division by zero"),
        ("epoch >", "invalid syntax"),
        ("import os", "invalid syntax"),
        ("epoch == 1; 2", "invalid syntax"),
        ("", "empty"),
        ("epoch == 1 " + "or epoch == 1 " * 40, "longer than 500"),
        ("(" * 300 + "epoch" + ")" * 300 + " == 1", "longer than 500"),
        ("-" * 400 + "epoch == 1", "nested more than 50 levels"),
        ("not " * 100 + "epoch == 1", "nested more than 50 levels"),
    ],
)
def test_hostile_conditions_are_refused(source, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        compile_condition(source)


def test_deep_but_reasonable_conditions_compile():
    assert compile_condition("-" * 40 + "epoch == 1")
    assert compile_condition("(" * 190 + "epoch" + ")" * 190 + " == 1")


def test_runtime_division_by_zero_is_a_condition_error():
    tree = compile_condition("iteration // (epoch - epoch) == 0")
    with pytest.raises(ConditionError, match=r"^integer division by zero$"):
        evaluate(tree, {"epoch": 1, "iteration": 2, "task": "t"})
    with pytest.raises(ConditionError, match="needs epoch as int"):
        evaluate(tree, {"epoch": "1", "iteration": 2, "task": "t"})
