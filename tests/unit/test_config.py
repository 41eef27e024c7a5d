"""Task config loading and validation (TESTPLAN section 9): every bad config gives one line
`FILE:LINE:COL: KEY: MESSAGE` pointing at the offending value; YAML 1.1 traps are pinned."""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path

import pytest

from sandfs.config import (
    ConfigError,
    EngineConfig,
    compile_condition,
    evaluate,
    load_task_config,
    load_task_configs,
    merge_engines,
    parse_size,
)
from sandfs.config.yamlsafe import read_yaml

REPO = Path(__file__).resolve().parents[2]
FILE = "task.yaml"

# The line numbers in the comments are what the error table below refers to.
BASE = """\
task: demo                       # 1
seed: 0                          # 2
epochs: 3                        # 3
dataset:                         # 4
  tag: train                     # 5
  video_dataset_path: videos     # 6
  sampling:                      # 7
    videos_per_batch: 2          # 8
    frames_per_video: 4          # 9
  augmentation:                  # 10
    - name: resize               # 11
      branch_type: single        # 12
      inputs: [frame]            # 13
      outputs: [resized]         # 14
      config:                    # 15
        - resize: {shape: [32, 48]}                   # 16
    - name: crop                 # 17
      branch_type: random        # 18
      inputs: [resized]          # 19
      outputs: [out]             # 20
      branches:                  # 21
        - prob: 0.5              # 22
          config: [{center_crop: {size: [16, 16]}}]   # 23
        - prob: 0.5              # 24
          config: [{random_crop: {size: [16, 16]}}]   # 25
engine:                          # 26
  storage_budget: 1G             # 27
"""


def load(text: str, **kwargs):
    kwargs.setdefault("check_paths", False)
    return load_task_config(FILE, text=text, **kwargs)


def edited(*replacements: tuple[str, str]) -> str:
    text = BASE
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} must occur once in BASE"
        text = text.replace(old, new)
    return text


def error_of(text: str, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(text, **kwargs)
    return info.value


STEP1 = "dataset.augmentation[1]"
CONDITIONAL = ("branch_type: random", "branch_type: conditional")
PROB22 = "prob: 0.5              # 22"
PROB24 = "prob: 0.5              # 24"
BRANCHES = BASE[BASE.index("      branches:") : BASE.index("engine:")]  # lines 21-25

# (case id, edits of BASE, expected key path, expected line, a fragment of the message)
BAD_CONFIGS = [
    ("seed-missing", [("seed: 0 ", "# no seed")], "seed", 1, "required key is missing"),
    ("seed-negative", [("seed: 0", "seed: -1")], "seed", 2, "at least 0"),
    ("seed-octal-trap", [("seed: 0", "seed: 010")], "seed", 2, "leading zeros"),
    ("seed-hex-trap", [("seed: 0", "seed: 0x10")], "seed", 2, "only decimal"),
    ("seed-separator", [("seed: 0", "seed: 1_000")], "seed", 2, "separators"),
    ("seed-too-big", [("seed: 0", "seed: 18446744073709551616")], "seed", 2, "at most"),
    (
        "seed-duplicate",
        [("seed: 0 ", "seed: 0\nseed: 1")],
        "seed",
        3,
        "duplicate key (first given at line 2)",
    ),
    ("epochs-zero", [("epochs: 3", "epochs: 0")], "epochs", 3, "at least 1"),
    ("epochs-float", [("epochs: 3", "epochs: 2.5")], "epochs", 3, "got the number 2.5"),
    ("epochs-sexagesimal-trap", [("epochs: 3", "epochs: 12:30")], "epochs", 3, "base-60"),
    ("epochs-custom-tag", [("epochs: 3", "epochs: !custom 3")], "epochs", 3, "tag !custom"),
    (
        "task-python-tag",
        [("task: demo", "task: !!python/object/apply:os.system [ls]")],
        "task",
        1,
        "tag !!python/object/apply:os.system is not allowed",
    ),
    ("task-bad-chars", [("task: demo", "task: my task!")], "task", 1, "[A-Za-z0-9_.-]+"),
    ("task-dot", [("task: demo", "task: .sand")], "task", 1, "may not start with '.'"),
    ("task-null", [("task: demo", "task: ~")], "task", 1, "got null"),
    (
        "top-unknown-key",
        [("epochs: 3 ", "epochs: 3\nseeds: 1")],
        "seeds",
        4,
        "did you mean 'seed'?",
    ),
    (
        "sampling-not-mapping",
        [
            ("sampling:  ", "sampling: 8 #"),
            ("    videos_per_batch: 2          # 8\n", ""),
            ("    frames_per_video: 4          # 9\n", ""),
        ],
        "dataset.sampling",
        7,
        "expected a mapping",
    ),
    ("tag-missing", [("tag: train", "# no tag")], "dataset.tag", 4, "required key"),
    (
        "streaming",
        [("tag: train ", "tag: train\n  input_source: streaming")],
        "dataset.input_source",
        6,
        "streaming is not supported by this build; use file",
    ),
    (
        "input-source-typo",
        [("tag: train ", "tag: train\n  input_source: fil")],
        "dataset.input_source",
        6,
        "did you mean 'file'?",
    ),
    (
        "dataset-url",
        [("path: videos", "path: s3://bucket/train")],
        "dataset.video_dataset_path",
        6,
        "URLs are not supported",
    ),
    (
        "extension-no-dot",
        [("tag: train ", "tag: train\n  extensions: [.mp4, webm]")],
        "dataset.extensions[1]",
        6,
        "starts with '.'",
    ),
    (
        "labels-typo",
        [("tag: train ", "tag: train\n  labels: dirnme")],
        "dataset.labels",
        6,
        "did you mean 'dirname'?",
    ),
    (
        "batch-zero",
        [("videos_per_batch: 2", "videos_per_batch: 0")],
        "dataset.sampling.videos_per_batch",
        8,
        "at least 1",
    ),
    (
        "frames-missing",
        [("frames_per_video: 4", "# none")],
        "dataset.sampling.frames_per_video",
        7,
        "required key is missing",
    ),
    (
        "frames-inf",
        [("frames_per_video: 4", "frames_per_video: .inf")],
        "dataset.sampling.frames_per_video",
        9,
        "got the number .inf",
    ),
    (
        "drop-last-no-trap",
        [("frames_per_video: 4 ", "frames_per_video: 4\n    drop_last: no")],
        "dataset.sampling.drop_last",
        10,
        "only true and false are booleans",
    ),
    (
        "short-video",
        [("frames_per_video: 4 ", "frames_per_video: 4\n    short_video: loop")],
        "dataset.sampling.short_video",
        10,
        "repeat_last, wrap, skip",
    ),
    (
        "layout",
        [("frames_per_video: 4 ", "frames_per_video: 4\n    layout: NHWC")],
        "dataset.sampling.layout",
        10,
        "NTHWC, NCTHW",
    ),
    (
        "sampling-unknown",
        [("frames_per_video: 4 ", "frames_per_video: 4\n    stride: 2")],
        "dataset.sampling.stride",
        10,
        "did you mean 'frame_stride'?",
    ),
    (
        "branch-type",
        [("branch_type: single", "branch_type: sequence")],
        "dataset.augmentation[0].branch_type",
        12,
        "single, conditional, random, multi, merge",
    ),
    (
        "single-with-branches",
        [("config:   ", "branches: #")],
        "dataset.augmentation[0].branches",
        15,
        "a single step takes no 'branches'",
    ),
    (
        "config-not-list",
        [
            ("config:   ", "config: {resize: {shape: [8, 8]}} #"),
            ("        - resize: {shape: [32, 48]}                   # 16\n", ""),
        ],
        "dataset.augmentation[0].config",
        15,
        "expected a list of ops",
    ),
    (
        "op-unknown",
        [("- resize: {shape", "- resze: {shape")],
        "dataset.augmentation[0].config[0].resze",
        16,
        "unknown op 'resze'",
    ),
    (
        "op-bad-param",
        [("shape: [32, 48]", "shape: [32]")],
        "dataset.augmentation[0].config[0].resize.shape",
        16,
        "[H, W]",
    ),
    (
        "op-nan-param",
        [("shape: [32, 48]", "shape: [32, .nan]")],
        "dataset.augmentation[0].config[0].resize.shape[1]",
        16,
        "finite",
    ),
    (
        "op-params-scalar",
        [("{shape: [32, 48]}", "5")],
        "dataset.augmentation[0].config[0].resize",
        16,
        "parameters as a mapping",
    ),
    (
        "op-two-keys",
        [("{center_crop: {size: [16, 16]}}", "{center_crop: {size: 8}, flip: {}}")],
        f"{STEP1}.branches[0].config[0]",
        23,
        "one-key mapping",
    ),
    (
        "input-unknown",
        [("inputs: [frame]", "inputs: [fram]")],
        "dataset.augmentation[0].inputs[0]",
        13,
        "did you mean 'frame'?",
    ),
    (
        "two-inputs-single",
        [("inputs: [frame]", "inputs: [frame, frame2]")],
        "dataset.augmentation[0].inputs",
        13,
        "exactly 1 input",
    ),
    (
        "output-frame",
        [("outputs: [resized]", "outputs: [frame]")],
        "dataset.augmentation[0].outputs[0]",
        14,
        "decoded source",
    ),
    (
        "duplicate-step-name",
        [("name: crop", "name: resize")],
        f"{STEP1}.name",
        17,
        "already used (line 11)",
    ),
    (
        "stream-produced-twice",
        [("outputs: [out]", "outputs: [resized]")],
        f"{STEP1}.outputs[0]",
        20,
        "already an output of step 'resize'",
    ),
    (
        "cycle",
        [("inputs: [frame]", "inputs: [out]")],
        "dataset.augmentation[0].inputs",
        13,
        "cycle: resize -> crop -> resize",
    ),
    (
        "two-finals",
        [
            ("branch_type: single", "branch_type: multi"),
            ("outputs: [resized]", "outputs: [resized, extra]"),
        ],
        f"{STEP1}.outputs",
        20,
        "2 final outputs (extra, out)",
    ),
    ("prob-sum", [(PROB22, "prob: 0.4")], f"{STEP1}.branches", 22, "sum to 1, got 0.9"),
    ("prob-nan", [(PROB22, "prob: .nan")], f"{STEP1}.branches[0].prob", 22, "finite"),
    ("prob-range", [(PROB22, "prob: 1.5")], f"{STEP1}.branches[0].prob", 22, "[0, 1]"),
    (
        "prob-string",
        [(PROB22, "prob: '0.5'")],
        f"{STEP1}.branches[0].prob",
        22,
        "expected a number, got the string '0.5'",
    ),
    (
        "branch-shapes-differ",
        [("random_crop: {size: [16, 16]}", "random_crop: {size: 8}")],
        f"{STEP1}.branches[1]",
        24,
        "branch 0 gives 16x16 uint8, 4 frames, branch 1 gives 8x8",
    ),
    (
        "unknown-final-size",
        [
            ("resize: {shape: [32, 48]}", "flip: {}"),
            ("[{center_crop: {size: [16, 16]}}]", "[]"),
            ("[{random_crop: {size: [16, 16]}}]", "[]"),
        ],
        f"{STEP1}.outputs",
        20,
        "needs a resize or crop so that batches stack",
    ),
    (
        "condition-misspelt",
        [CONDITIONAL, (PROB22, "conditon: epoch > 1")],
        f"{STEP1}.branches[0].conditon",
        22,
        "did you mean 'condition'?",
    ),
    (
        "condition-call",
        [CONDITIONAL, (PROB22, "condition: open('/etc/passwd')"), (PROB24, "condition: else")],
        f"{STEP1}.branches[0].condition",
        22,
        "function calls cannot be used",
    ),
    (
        "else-not-last",
        [CONDITIONAL, (PROB22, "condition: else"), (PROB24, "condition: epoch > 1")],
        f"{STEP1}.branches[0].condition",
        22,
        "'else' must be the last branch",
    ),
    (
        "merge-one-input",
        [("branch_type: random", "branch_type: merge"), (BRANCHES, "")],
        f"{STEP1}.inputs",
        19,
        "at least 2 input",
    ),
    (
        "budget-words",
        [("storage_budget: 1G", "storage_budget: lots")],
        "engine.storage_budget",
        27,
        "expected a size like 200G",
    ),
    (
        "budget-float",
        [("storage_budget: 1G", "storage_budget: 1.5")],
        "engine.storage_budget",
        27,
        "expected a size",
    ),
    (
        "workers-zero",
        [("storage_budget: 1G ", "storage_budget: 1G\n  workers: 0")],
        "engine.workers",
        28,
        "at least 1",
    ),
    (
        "decode-ahead-negative",
        [("storage_budget: 1G ", "storage_budget: 1G\n  decode_ahead: -1")],
        "engine.decode_ahead",
        28,
        "at least 0",
    ),
    (
        "workers-word",
        [("storage_budget: 1G ", "storage_budget: 1G\n  workers: many")],
        "engine.workers",
        28,
        "expected auto or an integer",
    ),
    (
        "engine-unknown",
        [("storage_budget: 1G", "budget: 1G")],
        "engine.budget",
        27,
        "allowed keys: mountpoint, cache_dir, storage_budget",
    ),
    (
        "merge-with-config",
        [("branch_type: random", "branch_type: merge"), (BRANCHES, "      config: []\n")],
        f"{STEP1}.config",
        21,
        "a merge step takes no 'config'",
    ),
    ("yaml-syntax", [("seed: 0", "seed: [0")], "<yaml>", 3, ""),
]


@pytest.mark.parametrize(
    ("edits", "key", "line", "fragment"),
    [case[1:] for case in BAD_CONFIGS],
    ids=[case[0] for case in BAD_CONFIGS],
)
def test_bad_config_points_at_file_line_and_key(edits, key, line, fragment):
    err = error_of(edited(*edits))
    assert (err.file, err.key, err.line) == (FILE, key, line), str(err)
    assert fragment in err.message
    assert re.fullmatch(rf"{FILE}:{line}:\d+: {re.escape(key)}: .+", str(err))
    assert "\n" not in str(err)


def test_bad_config_table_is_large_enough():
    assert len(BAD_CONFIGS) >= 30


def test_error_column_points_at_the_value():
    err = error_of(edited(("seed: 0", "seed: -1")))
    assert str(err).startswith("task.yaml:2:7: seed: ")
    err = error_of(edited(("epochs: 3 ", "epochs: 3\nseeds: 1")))
    assert (err.line, err.col) == (4, 1)  # an unknown key: at the key itself


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


@pytest.mark.parametrize(
    ("text", "line", "key", "fragment"),
    [
        ("", 1, "<document>", "the file is empty"),
        ("# only a comment\n", 1, "<document>", "the file is empty"),
        ("- a\n- b\n", 1, "<document>", "expected a mapping"),
        ("task: a\n---\ntask: b\n", 2, "<yaml>", "single document"),
        ("task: [a\n", 2, "<yaml>", ""),
        ("? [a, b]\n: c\n", 1, "<document>", "plain name"),
        ("task: x\nseed: \x07\n", 2, "<yaml>", "may not contain the character '\\x07'"),
        ("a: " + "[" * 1000 + "]" * 1000, 1, "<yaml>", "nested too deeply"),
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


# --- good configs: every branch type parsed into the schema --------------------------------

SPEC_EXAMPLE = """\
task: slowfast_k400
seed: 0
epochs: 100
dataset:
  tag: train
  input_source: file
  video_dataset_path: /data/k400/train
  extensions: [.MP4, .webm, .mkv, .avi, .mp4]
  labels: dirname
  sampling:
    videos_per_batch: 8
    frames_per_video: 32
    frame_stride: 2
    samples_per_video: 1
    drop_last: false
  augmentation:
    - name: resize
      branch_type: single
      inputs: [frame]
      outputs: [resized]
      config:
        - resize: {shape: [256, 320], interpolation: bilinear}
    - name: maybe_flip
      branch_type: random
      inputs: [resized]
      outputs: [flipped]
      branches:
        - prob: 0.5
          config: [{flip: {direction: horizontal}}]
        - prob: 0.5
          config: []
    - name: crop
      branch_type: single
      inputs: [flipped]
      outputs: [cropped]
      config:
        - random_crop: {size: [224, 224]}
engine:
  mountpoint: /mnt/sand
  cache_dir: /local/nvme/sand
  storage_budget: 200G
  k_epochs: 5
  workers: auto
"""

# Figure 9 of the paper, with its typos fixed: quoted strings, `inv_sample: true`, `config: None`.
FIGURE_9 = """\
task: fig9
seed: 7
epochs: 2
dataset:
  tag: "train"
  input_source: file
  video_dataset_path: data/train
  sampling:
    videos_per_batch: 8
    frames_per_video: 16
    frame_stride: 4
    samples_per_video: 2
  augmentation:
    - name: "augment_resize"
      branch_type: "single"
      inputs: ["frame"]
      outputs: ["augmented_frame_0"]
      config:
        - resize:
            shape: [256, 320]
            interpolation: "bilinear"
    - name: "conditional branch"
      branch_type: "conditional"
      inputs: ["augmented_frame_0"]
      outputs: ["augmented_frame_1"]
      branches:
        - condition: "iteration > 10000"
          config:
            - inv_sample:
                true
        - condition: "else"
          config:
            None
    - name: "random_branch"
      branch_type: "random"
      inputs: ["augmented_frame_1"]
      outputs: ["augmented_frame_2"]
      branches:
        - prob: 0.5
          config:
            - flip: {p: 0.5}
        - prob: 0.5
          config:
"""


def test_spec_example_loads():
    config = load(SPEC_EXAMPLE)
    dataset = config.dataset
    assert (config.task, config.seed, config.epochs) == ("slowfast_k400", 0, 100)
    assert dataset.extensions == (".mp4", ".webm", ".mkv", ".avi")  # lowered, deduplicated
    assert dataset.labels == "dirname"
    assert dataset.sampling.frame_stride == 2
    assert dataset.sampling.short_video == "repeat_last"
    assert dataset.sampling.layout == "NTHWC"
    resize, flip, crop = dataset.augmentation
    assert resize.ops[0].name == "resize"
    assert resize.ops[0].param_dict()["shape"] == (256, 320)
    assert [b.prob for b in flip.branches] == [0.5, 0.5]
    assert flip.branches[1].ops == ()
    assert crop.ops[0].param_dict() == {"size": (224, 224)}
    assert config.engine.storage_budget_bytes == 200 * 2**30
    assert config.engine.workers is None
    assert config.engine_given == {
        "mountpoint",
        "cache_dir",
        "storage_budget_bytes",
        "k_epochs",
        "workers",
    }
    assert hash(config) == hash(load(SPEC_EXAMPLE))


def test_figure_9_loads_with_defaults():
    config = load(FIGURE_9)
    dataset = config.dataset
    assert dataset.input_source == "file"
    assert dataset.extensions == (".mp4", ".webm", ".mkv", ".avi", ".mov")
    assert dataset.labels == "dirname"
    assert dataset.video_dataset_path == str(Path.cwd() / "data" / "train")
    assert dataset.sampling.samples_per_video == 2
    assert dataset.sampling.drop_last is False
    conditional = dataset.augmentation[1]
    assert conditional.name == "conditional branch"
    first, other = conditional.branches
    assert first.ops[0].name == "inv_sample"
    assert first.ops[0].params == ()
    assert first.condition.source == "iteration > 10000"
    assert first.condition.holds(epoch=0, iteration=10001, task="fig9")
    assert not first.condition.holds(epoch=0, iteration=10000, task="fig9")
    assert other.condition is None
    assert other.ops == ()
    assert config.engine == EngineConfig()
    assert config.engine_given == frozenset()


def test_example_full_uses_every_branch_type():
    path = REPO / "configs" / "example-full.yaml"
    config = load_task_config(path, check_paths=False)
    steps = {step.name: step for step in config.dataset.augmentation}
    assert {s.branch_type for s in steps.values()} == {
        "single",
        "conditional",
        "random",
        "multi",
        "merge",
    }
    assert config.dataset.video_dataset_path == str(REPO / "demo-data" / "videos")
    multi = steps["two_views"]
    assert multi.outputs == ("view_a", "view_b")
    assert len(multi.branches) == 2
    assert multi.branches[0].ops != multi.branches[1].ops
    assert steps["join"].inputs == ("view_a_final", "view_b")
    assert steps["join"].ops == steps["join"].branches == ()
    assert steps["schedule"].branches[-1].condition is None
    assert config.source_path == str(path)


def test_multi_with_one_config_gives_one_branch_per_output():
    text = edited(
        ("branch_type: single", "branch_type: multi"),
        ("outputs: [resized]", "outputs: [resized, other]"),
        ("outputs: [out]", "outputs: [a]"),
        ("[{center_crop: {size: [16, 16]}}]", "[{flip: {}}]"),
        ("[{random_crop: {size: [16, 16]}}]", "[]"),
        (
            "- name: crop",
            "- name: join\n      branch_type: merge\n"
            "      inputs: [a, other]\n      outputs: [out]\n"
            "    - name: crop",
        ),
    )
    config = load(text)
    multi = config.dataset.augmentation[0]
    assert len(multi.branches) == 2
    assert multi.branches[0].ops == multi.branches[1].ops
    assert multi.branches[0].ops[0].name == "resize"
    # stored in a topological order
    assert [s.name for s in config.dataset.augmentation] == ["resize", "crop", "join"]


def test_multi_branch_count_must_match_outputs():
    text = edited(
        ("branch_type: single", "branch_type: multi"),
        ("outputs: [resized]", "outputs: [resized, other]"),
        ("config:   ", "branches: [{config: []}] #"),
        ("        - resize: {shape: [32, 48]}                   # 16\n", ""),
    )
    err = error_of(text)
    assert (err.key, err.line) == ("dataset.augmentation[0].branches", 15)
    assert "one branch per output: 2 outputs, 1 branches" in err.message


def test_conditional_without_else_must_keep_the_shape():
    text = edited(CONDITIONAL, (PROB22, "condition: epoch < 2"), (PROB24, "condition: task == 'x'"))
    err = error_of(text)
    assert (err.key, err.line) == (f"{STEP1}.branches", 22)
    assert "add an else branch" in err.message


def test_steps_may_be_listed_in_any_order():
    reordered = BASE.split("    - name: crop")
    head, steps_tail = reordered[0].split("    - name: resize")
    crop, engine = ("    - name: crop" + reordered[1]).split("engine:")
    config = load(head + crop + "    - name: resize" + steps_tail + "engine:" + engine)
    assert [s.name for s in config.dataset.augmentation] == ["resize", "crop"]


def test_paths_resolve_against_the_config_folder_and_are_checked(tmp_path):
    (tmp_path / "videos").mkdir()
    (tmp_path / "labels.csv").write_text("video,label\n")
    config_file = tmp_path / "task.yaml"
    text = edited(
        ("tag: train", "tag: train\n  labels: labels.csv"),
        ("storage_budget: 1G", "cache_dir: cache"),
    )
    config = load_task_config(config_file, text=text)
    assert config.dataset.video_dataset_path == str(tmp_path / "videos")
    assert config.dataset.labels == str(tmp_path / "labels.csv")
    assert config.engine.cache_dir == str(tmp_path / "cache")
    (tmp_path / "labels.csv").unlink()
    with pytest.raises(ConfigError, match=r"task.yaml:6:11: dataset.labels: the labels file"):
        load_task_config(config_file, text=text)
    (tmp_path / "videos").rmdir()
    with pytest.raises(ConfigError, match=r":7:23: dataset.video_dataset_path: .* does not exist"):
        load_task_config(config_file, text=text)
    (tmp_path / "videos").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        load_task_config(config_file, text=text)


def test_a_dataset_reached_through_a_symlink_is_its_real_directory(tmp_path):
    """The dataset path seeds the draws and decides sharing: a symlink must not make the same
    data another dataset."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = edited(("video_dataset_path: videos ", "video_dataset_path: link "))
    config = load_task_config(tmp_path / "task.yaml", text=text)
    assert config.dataset.video_dataset_path == str(tmp_path / "real")


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


def test_runtime_division_by_zero_is_a_value_error():
    tree = compile_condition("iteration // (epoch - epoch) == 0")
    with pytest.raises(ValueError, match="division by zero"):
        evaluate(tree, {"epoch": 1, "iteration": 2, "task": "t"})
    with pytest.raises(ValueError, match="needs epoch as int"):
        evaluate(tree, {"epoch": "1", "iteration": 2, "task": "t"})


# --- engines, sizes, several configs -----------------------------------------------------------


def _with_engine(task: str, engine: str) -> str:
    return edited(
        ("task: demo", f"task: {task}"),
        (
            "engine:                          # 26\n  storage_budget: 1G             # 27\n",
            "engine:\n" + engine,
        ),
    )


def test_merge_engines_first_wins_with_warnings_and_cli_overrides():
    first = load_task_config(
        "a.yaml",
        check_paths=False,
        text=_with_engine("a", "  cache_dir: /c1\n  storage_budget: 1G\n"),
    )
    second = load_task_config(
        "b.yaml",
        check_paths=False,
        text=_with_engine(
            "b", "  cache_dir: /c2\n  storage_budget: 1024M\n  workers: 3\n  k_epochs: ~\n"
            "  decode_ahead: 0\n"
        ),
    )
    engine, warnings = merge_engines([first, second], {})
    assert engine.cache_dir == "/c1"
    assert engine.storage_budget_bytes == 2**30
    assert engine.workers == 3
    assert engine.k_epochs == 5
    assert engine.decode_ahead == 0
    assert len(warnings) == 1
    assert "engine.cache_dir" in warnings[0]
    assert "a.yaml" in warnings[0]
    assert "b.yaml" in warnings[0]
    overridden, warnings = merge_engines(
        [first, second],
        {
            "cache_dir": "rel",
            "storage_budget_bytes": "2G",
            "workers": "auto",
            "k_epochs": 2,
            "decode_ahead": 5,
            "mountpoint": None,
        },
    )
    assert warnings == []  # the CLI settles the cache_dir disagreement
    assert overridden.cache_dir == str(Path.cwd() / "rel")
    assert overridden.storage_budget_bytes == 2 * 2**30
    assert overridden.workers is None
    assert overridden.k_epochs == 2
    assert overridden.decode_ahead == 5
    assert overridden.mountpoint is None
    with pytest.raises(ValueError, match="workers"):
        merge_engines([first], {"workers": 0})
    with pytest.raises(ValueError, match="decode_ahead: expected an integer >= 0"):
        merge_engines([first], {"decode_ahead": -1})
    with pytest.raises(ValueError, match="unknown engine setting"):
        merge_engines([first], {"budget": "1G"})


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        (4096, 4096),
        ("512M", 512 * 2**20),
        ("200G", 200 * 2**30),
        ("1.5T", 3 * 2**39),
        ("10GiB", 10 * 2**30),
        ("10gb", 10 * 2**30),
        ("2 k", 2048),
        ("100B", 100),
        ("0.3K", 307),
        ("1E", 2**60),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "",
        "G",
        "-1G",
        "0",
        0,
        "1.5",
        "1e3",
        "1 GB extra",
        "ten",
        "8E",
        "1Gi",
        True,
        1.5,
        None,
    ],
)
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match=r"size|bytes"):
        parse_size(text)


def test_duplicate_task_names_point_at_the_second_file(tmp_path):
    paths = []
    for name in ("one.yaml", "two.yaml"):
        path = tmp_path / name
        path.write_text(edited(("seed: 0", "seed: 1")) if name == "two.yaml" else BASE)
        paths.append(path)
    with pytest.raises(ConfigError) as info:
        load_task_configs(paths, check_paths=False)
    assert str(info.value).startswith(f"{paths[1]}:1:7: task: task name 'demo' is already used")
    assert str(paths[0]) in info.value.message
    renamed = tmp_path / "three.yaml"
    renamed.write_text(edited(("task: demo", "task: other")))
    configs = load_task_configs([paths[0], renamed], check_paths=False)
    assert [c.task for c in configs] == ["demo", "other"]
    assert configs[0].dataset == configs[1].dataset  # the data section, not the name


def test_decode_resize_fixes_the_source_size(tmp_path):
    from tests.helpers.harness import task_config, write_config

    flip_only = [{"name": "flip", "branch_type": "single", "inputs": ["frame"],
                  "outputs": ["f"], "config": [{"flip": {"direction": "horizontal"}}]}]
    ok = write_config(tmp_path / "ok.yaml", task_config(
        tmp_path, augmentation=flip_only, sampling={"decode_resize": {"shape": [36, 48]}}))
    cfg = load_task_config(ok, check_paths=False)
    assert cfg.dataset.sampling.decode_resize == ((36, 48), "bilinear")
    no_size = write_config(tmp_path / "no.yaml", task_config(tmp_path, augmentation=flip_only))
    with pytest.raises(ConfigError, match="batches stack"):
        load_task_config(no_size, check_paths=False)
    for bad, fragment in (({"shape": [36]}, "expected"), ({"shape": [0, 4]}, "at least 1"),
                          ({"shape": [8, 8], "interpolation": "lanczos"}, "one of"),
                          ({"size": 8}, "shape")):
        path = write_config(tmp_path / "bad.yaml", task_config(
            tmp_path, sampling={"decode_resize": bad}))
        with pytest.raises(ConfigError, match=fragment) as caught:
            load_task_config(path, check_paths=False)
        assert "dataset.sampling.decode_resize" in str(caught.value)
