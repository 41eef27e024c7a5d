"""YAML as a config reads it: the 1.2 core schema with decimal integers only, no tags beyond the
standard ones, no duplicate keys, bounded aliases, and document-level errors as one line."""

import math
import pickle

import pytest

from sandfs.config import yamlsafe
from sandfs.config.loader import ConfigError, load_task_config
from sandfs.config.yamlsafe import read_yaml
from tests.helpers.config_texts import FILE, PROB22, edited, error_of, load


def test_config_error_is_one_line_and_picklable():
    err = ConfigError("a.yaml", 3, 4, "dataset.tag", "bad\nvalue\x1b[31m")
    assert str(err) == "a.yaml:3:4: dataset.tag: bad\\nvalue\\x1b[31m"
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


# --- YAML: 1.2 core scalars, no duplicate keys, no tags ------------------------------------


def test_yaml_scalars_follow_the_12_core_schema_with_decimal_integers():
    text = "\n".join(
        [
            "octal: 010",
            "hex: 0x10",
            "octal12: 0o10",
            "sexagesimal: 12:30",
            "exp: 1e3",
            "tilde: ~",
            "null_word: NULL",
            "empty:",
            "no: no",
            "yes_: yes",
            "on: on",
            "off: Off",
            "true_: TRUE",
            "false_: False",
            "inf: .inf",
            "ninf: -.Inf",
            "nan: .NaN",
            "under: 1_000",
            "neg: -5",
            "plus: +3",
            "half: .5",
            "zero: 0",
            "dot: 1.",
            "float: 0.25",
            "date: 2024-01-01",
            "quoted: '10'",
        ]
    )
    data = {k: v.data for k, v in read_yaml(text, FILE).data.items()}
    assert data["octal"] == "010"
    assert data["hex"] == "0x10"
    assert data["octal12"] == "0o10"
    assert data["sexagesimal"] == "12:30"
    assert data["exp"] == 1000.0
    assert isinstance(data["exp"], float)
    assert data["tilde"] is None
    assert data["null_word"] is None
    assert data["empty"] is None
    assert [data["no"], data["yes_"], data["on"], data["off"]] == ["no", "yes", "on", "Off"]
    assert data["true_"] is True
    assert data["false_"] is False
    assert data["inf"] == math.inf
    assert data["ninf"] == -math.inf
    assert math.isnan(data["nan"])
    assert data["under"] == "1_000"
    assert (data["neg"], data["plus"], data["zero"]) == (-5, 3, 0)
    assert (data["half"], data["dot"], data["float"]) == (0.5, 1.0, 0.25)
    assert data["date"] == "2024-01-01"
    assert data["quoted"] == "10"


def test_yaml_traps_read_as_strings_in_string_fields():
    config = load(edited(("task: demo", "task: no"), ("tag: train", "tag: 010")))
    assert config.task == "no"
    assert config.dataset.tag == "010"


def test_yaml_12_values_accepted_in_typed_fields():
    config = load(
        edited(
            (PROB22, "prob: 5e-1"),
            (
                "frames_per_video: 4 ",
                "frames_per_video: 4\n    drop_last: TRUE\n    frame_stride: ~",
            ),
        )
    )
    assert config.dataset.augmentation[1].branches[0].prob == 0.5
    assert config.dataset.sampling.drop_last is True
    assert config.dataset.sampling.frame_stride == 1  # null: the default


@pytest.mark.parametrize(
    "tagged",
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "!!python/name:os.system",
        "!!python/object/new:dict {}",
        "!!binary aGVsbG8=",
        "!!timestamp 2024-01-01",
        "!!set {a, b}",
        "!local thing",
    ],
)
def test_non_standard_tags_are_rejected(tagged):
    err = error_of(edited(("tag: train", f"tag: {tagged}")))
    assert (err.key, err.line) == ("dataset.tag", 5)
    assert "is not allowed: a config holds plain data only" in err.message


def test_standard_explicit_tags_are_checked():
    assert load(edited(("tag: train", "tag: !!str 010"))).dataset.tag == "010"
    err = error_of(edited(("seed: 0", "seed: !!int 010")))
    assert (err.key, err.line) == ("seed", 2)
    assert "'010' is not a valid !!int" in err.message


def test_duplicate_keys_are_rejected_at_any_depth():
    err = error_of(edited(("videos_per_batch: 2", "videos_per_batch: 2\n    videos_per_batch: 3")))
    assert (err.key, err.line, err.col) == ("dataset.sampling.videos_per_batch", 9, 5)
    assert "first given at line 8" in err.message


def test_anchors_and_aliases_work_but_cannot_explode():
    config = load(
        edited(
            ("config: [{center_crop", "config: &crop [{center_crop"),
            ("config: [{random_crop: {size: [16, 16]}}]", "config: *crop"),
        )
    )
    branches = config.dataset.augmentation[1].branches
    assert branches[0].ops == branches[1].ops
    laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    with pytest.raises(ConfigError, match="expands to more than"):
        read_yaml("\n".join(laughs), FILE)
    with pytest.raises(ConfigError, match="nested deeper"):
        read_yaml("a: &a [*a]", FILE)


def test_a_long_document_stops_at_the_budget_while_it_is_composed(monkeypatch):
    """The composer stops at MAX_NODES: the text after that point is never parsed (a syntax
    error there is not reached), and no tree of the whole text is built first."""
    monkeypatch.setattr(yamlsafe, "MAX_NODES", 1000)
    text = "x: [" + ",".join(["1"] * 5000) + "]\n" + "y: [unclosed\n"
    err = error_of(text)
    assert (err.key, err.line) == ("<yaml>", 1) and "more than 1000 values" in err.message
    built = []
    monkeypatch.setattr(yamlsafe._Builder, "build", lambda *a: built.append(a))
    error_of(text)
    assert built == []  # refused before any Value was built


def test_lines_count_from_first_line():
    with pytest.raises(ConfigError) as info:
        read_yaml("task: a\nseed: 0\n  epochs: 3\n", FILE, first_line=2)
    assert info.value.line == 4
    assert read_yaml("a: 1\n", FILE, first_line=2).data["a"].line == 2


@pytest.mark.parametrize(
    ("text", "line", "key", "fragment"),
    [
        ("", 1, "<document>", "the file is empty"),
        ("# only a comment\n", 1, "<document>", "the file is empty"),
        ("- a\n- b\n", 1, "<document>", "expected a mapping"),
        ("task: a\n---\ntask: b\n", 2, "<yaml>", "single document"),
        ("task: [a\n", 2, "<yaml>", ""),
        ("task: a\nseed: 0\n  epochs: 3\n", 3, "<yaml>", "a key indented deeper"),
        ("task: a\ndataset:\n  tag: x\n tag2: y\n", 4, "<yaml>", "bad indentation"),
        ("task: a\n\tseed: 0\n", 2, "<yaml>", "indent YAML with spaces only"),
        ("? [a, b]\n: c\n", 1, "<document>", "plain name"),
        ("task: x\nseed: \x07\n", 2, "<yaml>", "may not contain the character '\\x07'"),
        ("a: " + "[" * 1000 + "]" * 1000, 1, "<yaml>", "nested deeper than 64 levels"),
    ],
)
def test_document_level_errors(text, line, key, fragment):
    err = error_of(text)
    assert (err.key, err.line) == (key, line), str(err)
    assert fragment in err.message


def test_unreadable_files(tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_text("# padding\n" * 200_000)
    with pytest.raises(ConfigError, match=r"huge.yaml:1:1: <file>: larger than 1048576 bytes"):
        load_task_config(huge)
    with pytest.raises(ConfigError, match=r"missing.yaml:1:1: <file>: cannot read"):
        load_task_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_task_config(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"task: x\nseed: \xff\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:7: <file>: not valid UTF-8"):
        load_task_config(bad)
