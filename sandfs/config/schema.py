"""Validated task configuration: frozen, hashable dataclasses built by `sandfs.config.loader`.

Nothing here reads files. `line` fields are kept out of equality so that two configs that differ
only in layout compare (and hash) equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

BranchType = Literal["single", "conditional", "random", "multi", "merge"]
ShortVideoPolicy = Literal["repeat_last", "wrap", "skip"]
Layout = Literal["NTHWC", "NCTHW"]


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One augmentation op as configured, e.g. `resize: {shape: [256, 320]}`.

    `params` holds the op's normalized parameters (validated by the op registry) as sorted
    (key, value) pairs; lists become tuples so the spec is hashable.
    """

    name: str
    params: tuple[tuple[str, Any], ...]
    line: int = field(default=0, compare=False)

    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed `condition:` expression over `epoch`, `iteration` and `task` (safe, no eval)."""

    source: str
    tree: Any = field(compare=False, hash=False, repr=False)  # evaluator's compiled form

    def holds(self, *, epoch: int, iteration: int, task: str) -> bool:
        from sandfs.config.condition import evaluate

        return bool(evaluate(self.tree, {"epoch": epoch, "iteration": iteration, "task": task}))


@dataclass(frozen=True, slots=True)
class Branch:
    """One branch of a `random` (with prob), `conditional` (with condition; None = else) or
    `multi` (one branch per output) step."""

    ops: tuple[OpSpec, ...]
    prob: float | None = None
    condition: Condition | None = None
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class AugStep:
    """A named DAG entry. `single` uses `ops`; `random`/`conditional`/`multi` use `branches`;
    `merge` has several inputs, one output and no ops."""

    name: str
    branch_type: BranchType
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    ops: tuple[OpSpec, ...] = ()
    branches: tuple[Branch, ...] = ()
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class Shard:
    """This task is rank `rank` of `world_size` data-parallel ranks (DistributedSampler)."""

    world_size: int
    rank: int


TEST_VIEW_CROP_STEPS = ("random_crop", "center_crop")  # test_views places these crops itself


@dataclass(frozen=True, slots=True)
class TestViews:
    """Evaluation sampling: `clips` uniformly spaced clips x `crops` fixed crops per video, every
    video once per epoch in sorted order (samples_per_video = clips * crops)."""

    clips: int
    crops: int  # 1: center; 3: both ends and the center along the long side


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    videos_per_batch: int
    frames_per_video: int
    frame_stride: int = 1
    samples_per_video: int = 1
    drop_last: bool = False
    short_video: ShortVideoPolicy = "repeat_last"
    layout: Layout = "NTHWC"
    # ((H, W), interpolation): frames are scaled in the decoder's own colour conversion (fused,
    # AVION) before the augmentation steps; None: steps start from the full-size RGB frame
    decode_resize: tuple[tuple[int, int], str] | None = None
    shard: Shard | None = None  # None: the task reads every video of each epoch
    test_views: TestViews | None = None  # None: training sampling (random, shuffled)


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    tag: str
    input_source: Literal["file", "streaming"]
    video_dataset_path: str  # absolute, resolved against the config file's folder; or a URL
    extensions: tuple[str, ...]  # lower case, with the dot
    labels: str  # "dirname" | "none" | absolute path of a CSV (video,label)
    sampling: SamplingConfig
    augmentation: tuple[AugStep, ...]
    # a remote dataset: options handed to fsspec (`remote.options.freeze_options`: sorted
    # items, mappings likewise), and a file listing its videos
    storage_options: tuple[tuple[str, Any], ...] = ()
    manifest: str | None = None  # absolute path or URL


@dataclass(frozen=True, slots=True)
class EngineConfig:
    mountpoint: str | None = None
    cache_dir: str | None = None
    storage_budget_bytes: int | None = None  # None: no budget given
    k_epochs: int = 5
    workers: int | None = None  # None: auto (the machine's cores)
    memory_limit_bytes: int | None = None  # None: what the run needs (default_memory_limit)
    cache_format: str = "auto"  # auto | raw | lz4 | zstd | png (all lossless)
    decode_ahead: int = 3  # later windows whose frames a decode pass keeps on disk for them
    # batches a reader may come within of its window's last planned one before more is planned
    plan_ahead: int = 64
    execution: str = "auto"  # auto | threads | processes: where video jobs run (settings.py)
    metrics_port: int | None = None  # serve GET /metrics on 127.0.0.1:PORT (None: no server)
    limits: tuple[tuple[str, int], ...] = ()  # (name, value) of config/limits.py's Limits
    scan: tuple[tuple[str, int], ...] = ()  # (name, value) of the background scan's ScanPace


@dataclass(frozen=True, slots=True)
class AccessConfig:
    """The `access:` section: who owns the task's tree and with which mode (None: not given;
    see `sandfs.access.owner_of`), and who registered the task (None: `sandfs mount`)."""

    owner: int | None = None  # uid
    group: int | None = None  # gid
    mode: int | None = None  # of the task's files: read bits only, the owner's included
    registrar: int | None = None  # uid of the FUSE request that wrote .sand/tasks/NAME.yaml
    registrar_gid: int | None = None


@dataclass(frozen=True, slots=True)
class TaskConfig:
    task: str
    seed: int
    epochs: int
    dataset: DatasetConfig
    engine: EngineConfig
    engine_given: frozenset[str] = field(default=frozenset(), compare=False)  # keys the file set
    source_path: str = field(default="", compare=False)
    source_text: str = field(default="", compare=False, repr=False)
    access: AccessConfig = field(default=AccessConfig(), compare=False)
