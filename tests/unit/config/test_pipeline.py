"""The augmentation pipeline: every branch type parsed into the schema, shapes that must agree,
steps in any order."""

from pathlib import Path

from sandfs.config.loader import load_task_config
from sandfs.config.schema import EngineConfig
from tests.helpers.config_texts import (
    BASE,
    CONDITIONAL,
    PROB22,
    PROB24,
    REPO,
    STEP1,
    edited,
    error_of,
    load,
)

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
