"""Every bad value in a task config gives one line `FILE:LINE:COL: KEY: MESSAGE` pointing at it
and saying what is allowed."""

import re

import pytest

from tests.helpers.config_texts import (
    BRANCHES,
    CONDITIONAL,
    FILE,
    PROB22,
    PROB24,
    STEP1,
    edited,
    error_of,
)
from tests.helpers.reliability import record

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
    ("epochs-too-many", [("epochs: 3", "epochs: 1000001")], "epochs", 3, "at most 1000000"),
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
        "streaming is not supported; a remote video_dataset_path",
    ),
    (
        "input-source-typo",
        [("tag: train ", "tag: train\n  input_source: fil")],
        "dataset.input_source",
        6,
        "did you mean 'file'?",
    ),
    (
        "dataset-url-scheme",
        [("path: videos", "path: ftp://host/train")],
        "dataset.video_dataset_path",
        6,
        "URL scheme ftp:// is not supported; use s3://, http://, https://",
    ),
    (
        "dataset-url-no-bucket",
        [("path: videos", "path: s3:///train")],
        "dataset.video_dataset_path",
        6,
        "names no bucket",
    ),
    (
        "storage-options-list",
        [("tag: train ", "tag: train\n  storage_options: {client_kwargs: {region: [x]}}")],
        "dataset.storage_options",
        6,
        "storage_options client_kwargs.region: expected a string, boolean, number or mapping, "
        "got list",
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
    ("prob-sum", [(PROB22, "prob: 0.4")], f"{STEP1}.branches", 22,
     "sum to 1 (within 0.001), got 0.9"),
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
    one_line = re.fullmatch(rf"{FILE}:\d+:\d+: {re.escape(key)}: [^\n]+", str(err))
    record("bad_configs", tried=1, refused_in_one_file_line_col_line=int(bool(one_line)))
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
