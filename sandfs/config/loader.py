"""Load task YAML files into validated `TaskConfig`s (the format: docs/contract.md).

Every problem is a `ConfigError` whose one-line `str()` is `FILE:LINE:COL: KEY: MESSAGE`, pointing
at the offending value (or at the enclosing mapping for a missing key). Relative paths in a config
are resolved against the config file's folder.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from sandfs import ops as op_registry
from sandfs.config import fields
from sandfs.config.ownership import read_access_section
from sandfs.config.pipeline import parse_pipeline
from sandfs.config.schema import (
    TEST_VIEW_CROP_STEPS,
    AugStep,
    DatasetConfig,
    SamplingConfig,
    Shard,
    TaskConfig,
    TestViews,
)
from sandfs.config.settings import read_engine_section
from sandfs.config.yamlsafe import ConfigError, Value, read_yaml
from sandfs.errors import UserError
from sandfs.placement import resolve_outside_mounts
from sandfs.remote.options import (
    STREAMING_REFUSAL,
    FrozenOptions,
    RemoteConfigError,
    check_dataset_url,
    check_manifest,
    check_storage_options,
    freeze_options,
    is_remote_url,
)

__all__ = ["ConfigError", "load_task_config", "load_task_configs"]

MAX_CONFIG_BYTES = 1 << 20
MAX_SEED = 2**64 - 1
MAX_EPOCHS = 1_000_000
MAX_TASK_NAME_CHARS = 255  # a task is a directory name on the mount
DEFAULT_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov")
LABEL_KINDS = ("dirname", "none")

TOP_KEYS = ("task", "seed", "epochs", "dataset", "engine", "access")
DATASET_KEYS = (
    "tag",
    "input_source",
    "video_dataset_path",
    "extensions",
    "labels",
    "sampling",
    "augmentation",
    "storage_options",
    "manifest",
)
SAMPLING_KEYS = (
    "videos_per_batch",
    "frames_per_video",
    "frame_stride",
    "samples_per_video",
    "drop_last",
    "short_video",
    "layout",
    "decode_resize",
    "shard",
    "test_views",
)
TEST_VIEW_CROPS = (1, 3)
MAX_TEST_CLIPS = 1000
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "area")
BASE_DIR_MARK = "# sandfs-base-dir:"  # a first line that anchors relative paths elsewhere

_TASK_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_EXTENSION_RE = re.compile(r"\.[^./\\\s]+")


def load_task_config(
    path: str | os.PathLike[str], *, text: str | None = None, check_paths: bool = True,
    before_paths: Callable[[TaskConfig], TaskConfig] | None = None,
    shown_as: str | None = None,
) -> TaskConfig:
    """Load and validate one task config, parsing its text once. `text` replaces reading
    `path` (which still names the file in errors and anchors relative paths, unless the text
    starts with a `BASE_DIR_MARK` line naming the folder to anchor them to: how `sandfs task
    add` hands a config to a live mount; errors then name that folder's file and count lines
    from the line after the mark, as in the user's own file). `before_paths` sees (and may
    amend) the config while its dataset path is still as written (the owner's check must not
    resolve it: `sandfs.access`), before it is resolved and before the checks that the dataset
    directory and labels CSV exist; `check_paths=False` skips those checks. `shown_as`: the
    name errors give the file when the text has no such mark (a task file written to a mount's
    `.sand/tasks/`), `path` still anchoring its relative paths."""
    file = os.fspath(path)
    if text is None:
        text = _read_text(file)
    elif len(text.encode()) > MAX_CONFIG_BYTES:
        raise _too_large(shown_as or file)
    base_dir, first_line = os.path.dirname(os.path.abspath(file)), 1
    if text.startswith(BASE_DIR_MARK):
        base_dir = text.partition("\n")[0].removeprefix(BASE_DIR_MARK).strip()
        file, first_line = os.path.join(base_dir, os.path.basename(file)), 0
    elif shown_as is not None:
        file = shown_as
    root = read_yaml(text, file, first_line=first_line)
    entries = fields.mapping(root, TOP_KEYS, required=("task", "seed", "epochs", "dataset"))
    task = _task_name(entries["task"])
    seed = fields.integer(entries["seed"], minimum=0, maximum=MAX_SEED)
    epochs = fields.integer(entries["epochs"], minimum=1, maximum=MAX_EPOCHS)
    dataset = _dataset(entries["dataset"], base_dir)
    engine, engine_given = read_engine_section(entries.get("engine"), base_dir)
    config = TaskConfig(
        task=task,
        seed=seed,
        epochs=epochs,
        dataset=dataset,
        engine=engine,
        engine_given=engine_given,
        source_path=os.path.abspath(file),
        source_text=text,
        access=read_access_section(entries.get("access")),
    )
    if before_paths is not None:
        config = before_paths(config)
    config = _resolved(config, entries["dataset"])
    if check_paths:
        _check_paths(config.dataset, entries["dataset"])
    return config


def load_task_configs(
    paths: Iterable[str | os.PathLike[str]], *, check_paths: bool = True,
    before_paths: Callable[[TaskConfig], TaskConfig] | None = None,
) -> list[TaskConfig]:
    """Load several configs; a task name given twice is an error at the second `task:`."""
    configs: list[TaskConfig] = []
    first_file: dict[str, str] = {}
    for path in paths:
        config = load_task_config(path, check_paths=check_paths, before_paths=before_paths)
        if config.task in first_file:
            task_value = read_yaml(config.source_text, os.fspath(path)).data["task"]
            raise task_value.error(
                f"task name {config.task!r} is already used by {first_file[config.task]}"
            )
        first_file[config.task] = os.fspath(path)
        configs.append(config)
    return configs


def _resolved(config: TaskConfig, value: Value) -> TaskConfig:
    """`config` with its local dataset's real directory: the same data reached through a
    symlink is the same dataset (the path seeds the draws and decides which tasks share
    frames). A path into a sandfs mount is refused before anything in it is touched (a live
    mount's daemon checks a task's paths in its own event loop)."""
    path = config.dataset.video_dataset_path
    if is_remote_url(path):
        return config
    real = _outside_mounts(value.data["video_dataset_path"], path)
    return replace(config, dataset=replace(config.dataset, video_dataset_path=real))


def _check_paths(dataset: DatasetConfig, value: Value) -> None:
    """The dataset directory and the labels CSV exist (errors at their values)."""
    entries = value.data
    path = dataset.video_dataset_path
    if not is_remote_url(path) and not os.path.isdir(path):
        problem = "is not a directory" if os.path.exists(path) else "does not exist"
        raise entries["video_dataset_path"].error(f"the dataset directory {path} {problem}")
    labels = dataset.labels
    if labels in LABEL_KINDS:
        return
    real = _outside_mounts(entries["labels"], labels)
    if not os.path.isfile(real):  # a FIFO, socket or device is no labels file either
        problem = "is not a regular file" if os.path.exists(real) else "does not exist"
        raise entries["labels"].error(f"the labels file {labels} {problem}")


def _outside_mounts(value: Value, path: str) -> str:
    """The real path; one into a sandfs mount is an error at `value`."""
    try:
        return resolve_outside_mounts(path)
    except UserError as exc:
        raise value.error(str(exc)) from None


# --- sections ----------------------------------------------------------------------------------


def _read_text(file: str) -> str:
    try:
        if not stat.S_ISREG(os.stat(file).st_mode):
            raise ConfigError(file, 1, 1, "<file>", "not a regular file")
        with open(file, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(file, 1, 1, "<file>", f"cannot read: {e.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _too_large(file)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(file, line, col, "<file>", "not valid UTF-8") from None


def _too_large(file: str) -> ConfigError:
    return ConfigError(file, 1, 1, "<file>", f"larger than {MAX_CONFIG_BYTES} bytes")


def _task_name(value: Value) -> str:
    name = fields.string(value, pattern=_TASK_NAME_RE, what="a task name [A-Za-z0-9_.-]+")
    if name.startswith("."):
        raise value.error("a task name may not start with '.' (the mount reserves .sand)")
    if len(name) > MAX_TASK_NAME_CHARS:
        raise value.error(f"a task name may have at most {MAX_TASK_NAME_CHARS} characters")
    return name


def _dataset(value: Value, base_dir: str) -> DatasetConfig:
    required = ("tag", "video_dataset_path", "sampling", "augmentation")
    entries = fields.mapping(value, DATASET_KEYS, required=required)
    tag = fields.string(entries["tag"], what="a dataset tag")
    input_source = _optional(entries, "input_source", _input_source, "file")
    path = _dataset_path(entries["video_dataset_path"], base_dir)
    extensions = _optional(entries, "extensions", _extensions, DEFAULT_EXTENSIONS)
    labels = _optional(entries, "labels", partial(_labels, base_dir=base_dir), "dirname")
    sampling = _sampling(entries["sampling"])
    source_hw = sampling.decode_resize[0] if sampling.decode_resize else None
    augmentation = parse_pipeline(entries["augmentation"], sampling.frames_per_video, source_hw)
    if sampling.test_views:
        _check_test_views(entries["augmentation"], augmentation, sampling.test_views,
                          entries["sampling"])
    return DatasetConfig(
        tag=tag,
        input_source=input_source,
        video_dataset_path=path,
        extensions=extensions,
        labels=labels,
        sampling=sampling,
        augmentation=augmentation,
        storage_options=_optional(entries, "storage_options", _storage_options, ()),
        manifest=_optional(entries, "manifest", partial(_manifest, base_dir=base_dir), None),
    )


def _input_source(value: Value) -> str:
    if fields.choice(value, ("file", "streaming")) == "streaming":
        raise value.error(STREAMING_REFUSAL)
    return "file"


def _dataset_path(value: Value, base_dir: str) -> str:
    text = fields.string(value, what="a directory of videos, or an s3:// or http(s):// URL")
    if is_remote_url(text):
        return _remote(value, check_dataset_url, text)
    return fields.resolve_path(text, base_dir)  # as written; resolved by `_resolved`


def _remote(value: Value, check: Callable[..., Any], *args: Any) -> Any:
    """A remote-dataset check, its complaint as the usual FILE:LINE:COL error."""
    try:
        return check(*args)
    except RemoteConfigError as exc:
        raise value.error(str(exc)) from None


def _storage_options(value: Value) -> FrozenOptions:
    if not isinstance(value.data, dict):
        raise value.error("storage_options must be a mapping of option names to values")
    return freeze_options(_remote(value, check_storage_options, fields.plain(value)))


def _manifest(value: Value, *, base_dir: str) -> str:
    return _remote(value, check_manifest, fields.string(value, what="a path or URL"), base_dir)


def _extensions(value: Value) -> tuple[str, ...]:
    extensions: list[str] = []
    for item in fields.sequence(value, "file extensions like .mp4", min_len=1):
        text = fields.string(item, what="a file extension like .mp4").lower()
        if not _EXTENSION_RE.fullmatch(text):
            raise item.error(f"an extension starts with '.' like .mp4, got {item.data!r}")
        if text not in extensions:
            extensions.append(text)
    return tuple(extensions)


def _labels(value: Value, *, base_dir: str) -> str:
    what = "dirname, none or the path of a .csv file (video,label)"
    text = fields.string(value, what=what)
    if text in LABEL_KINDS:
        return text
    if not text.lower().endswith(".csv"):
        raise value.error(f"expected {what}, got {text!r}{fields.did_you_mean(text, LABEL_KINDS)}")
    return fields.resolve_path(text, base_dir)


def _sampling(value: Value) -> SamplingConfig:
    required = ("videos_per_batch", "frames_per_video")
    entries = fields.mapping(value, SAMPLING_KEYS, required=required)
    positive = partial(fields.integer, minimum=1)
    test_views = _optional(entries, "test_views", _test_views, None)
    given = entries.get("samples_per_video")
    if test_views and given is not None and given.data is not None:
        raise entries["samples_per_video"].error(
            "test_views sets the clips of a video (clips x crops); drop samples_per_video")
    per_video = test_views.clips * test_views.crops if test_views else 1
    return SamplingConfig(
        videos_per_batch=positive(entries["videos_per_batch"]),
        frames_per_video=positive(entries["frames_per_video"]),
        frame_stride=_optional(entries, "frame_stride", positive, 1),
        samples_per_video=_optional(entries, "samples_per_video", positive, per_video),
        drop_last=_optional(entries, "drop_last", fields.boolean, False),
        short_video=_optional(
            entries,
            "short_video",
            partial(fields.choice, choices=("repeat_last", "wrap", "skip")),
            "repeat_last",
        ),
        layout=_optional(
            entries, "layout", partial(fields.choice, choices=("NTHWC", "NCTHW")), "NTHWC"
        ),
        decode_resize=_optional(entries, "decode_resize", _decode_resize, None),
        shard=_optional(entries, "shard", _shard, None),
        test_views=test_views,
    )


def _test_views(value: Value) -> TestViews:
    """`test_views: {clips: T, crops: S}`: T uniformly spaced clips, S in (1, 3) fixed crops."""
    entries = fields.mapping(value, ("clips", "crops"), required=("clips",))
    clips = fields.integer(entries["clips"], minimum=1, maximum=MAX_TEST_CLIPS)
    crops = _optional(entries, "crops", partial(fields.integer, minimum=1), 1)
    if crops not in TEST_VIEW_CROPS:
        raise entries["crops"].error(
            f"expected 1 (center) or 3 (both ends and center of the long side), got {crops}")
    return TestViews(clips, crops)


def _check_test_views(value: Value, steps: tuple[AugStep, ...], views: TestViews,
                      sampling: Value) -> None:
    """A test_views task's views are deterministic: no random branch, no random op but the crop
    (which test_views places), at most one crop per op list, and a crop when crops > 1."""
    by_name = {step.name: step for step in steps}
    crops_found = 0
    for item in fields.sequence(value, "augmentation steps"):
        step = by_name[item.data["name"].data]
        if step.branch_type == "random":
            raise item.data["branch_type"].error(
                f"step {step.name!r}: a random branch is not allowed with test_views (its views "
                "are deterministic); use single or conditional")
        key = "config" if step.ops else "branches"
        for ops in [step.ops, *(branch.ops for branch in step.branches)]:
            crops = [spec.name for spec in ops if spec.name in TEST_VIEW_CROP_STEPS]
            if len(crops) > 1:
                raise item.key_error(key, f"step {step.name!r}: test_views places one crop per "
                                     f"op list, got {', '.join(crops)}")
            crops_found += len(crops)
            for spec in ops:
                op = op_registry.get_op(spec.name)
                if spec.name not in TEST_VIEW_CROP_STEPS and op.draws(spec.param_dict()):
                    raise item.key_error(
                        key, f"step {step.name!r}: {spec.name} is random; test_views allows "
                        "only deterministic ops besides the crop (a flip needs p: 1.0)")
    if views.crops > 1 and not crops_found:
        raise sampling.key_error(
            "test_views", f"crops: {views.crops} needs a center_crop or random_crop step (its "
            "size is the size of the crops)")


def _shard(value: Value) -> Shard:
    """`shard: {world_size: W, rank: R}` with W >= 1 and 0 <= R < W."""
    entries = fields.mapping(value, ("world_size", "rank"), required=("world_size", "rank"))
    world_size = fields.integer(entries["world_size"], minimum=1)
    rank = fields.integer(entries["rank"], minimum=0)
    if rank >= world_size:
        raise entries["rank"].error(f"must be less than world_size {world_size}, got {rank}")
    return Shard(world_size, rank)


def _decode_resize(value: Value) -> tuple[tuple[int, int], str]:
    """`decode_resize: {shape: [H, W], interpolation: bilinear}`."""
    entries = fields.mapping(value, ("shape", "interpolation"), required=("shape",))
    shape = fields.sequence(entries["shape"], "[H, W]", min_len=2)
    if len(shape) != 2:
        raise entries["shape"].error(f"expected [H, W], got {len(shape)} numbers")
    height, width = (fields.integer(v, minimum=1, maximum=1 << 14) for v in shape)
    interpolation = _optional(
        entries, "interpolation", partial(fields.choice, choices=INTERPOLATIONS), "bilinear"
    )
    return (height, width), interpolation


def _optional(
    entries: Mapping[str, Value], key: str, read: Callable[[Value], Any], default: Any
) -> Any:
    """An optional key: absent or null gives the default."""
    item = entries.get(key)
    return default if item is None or item.data is None else read(item)
