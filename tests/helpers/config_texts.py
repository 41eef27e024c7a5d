"""The task config every config test edits: BASE (its line numbers are in the comments) and
helpers that load an edited copy of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandfs.config.loader import ConfigError, load_task_config

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
