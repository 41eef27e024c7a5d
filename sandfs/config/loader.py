"""Load task YAML files (SPEC section 2) into validated `TaskConfig`s.

Every problem is a `ConfigError` whose one-line `str()` is `FILE:LINE:COL: KEY: MESSAGE`, pointing
at the offending value (or at the enclosing mapping for a missing key). Relative paths in a config
are resolved against the config file's folder.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from functools import partial
from typing import Any

from sandfs.config import fields
from sandfs.config.pipeline import parse_pipeline
from sandfs.config.schema import DatasetConfig, EngineConfig, SamplingConfig, Shard, TaskConfig
from sandfs.config.yamlsafe import ConfigError, Value, read_yaml

__all__ = [
    "ConfigError",
    "load_task_config",
    "load_task_configs",
    "merge_engines",
    "parse_size",
]

MAX_CONFIG_BYTES = 1 << 20
MAX_SEED = 2**64 - 1
MAX_SIZE_BYTES = 2**63 - 1
MAX_TASK_NAME_CHARS = 255  # a task is a directory name on the mount
DEFAULT_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov")
LABEL_KINDS = ("dirname", "none")

TOP_KEYS = ("task", "seed", "epochs", "dataset", "engine")
DATASET_KEYS = (
    "tag",
    "input_source",
    "video_dataset_path",
    "extensions",
    "labels",
    "sampling",
    "augmentation",
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
)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "area")
# The `engine:` keys as written in YAML, and the EngineConfig field each one sets.
ENGINE_FIELDS = {
    "mountpoint": "mountpoint",
    "cache_dir": "cache_dir",
    "storage_budget": "storage_budget_bytes",
    "k_epochs": "k_epochs",
    "workers": "workers",
    "memory_limit": "memory_limit_bytes",
    "cache_format": "cache_format",
    "decode_ahead": "decode_ahead",
}
CACHE_FORMATS = ("auto", "raw", "lz4", "zstd", "png")
BASE_DIR_MARK = "# sandfs-base-dir:"  # a first line that anchors relative paths elsewhere

_TASK_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_EXTENSION_RE = re.compile(r"\.[^./\\\s]+")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SIZE_RE = re.compile(r"\s*([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*(?:([kmgtpe])(?:i?b)?|b)?\s*", re.I)
_SIZE_UNITS = "kmgtpe"  # binary multiples: k = 1024


def load_task_config(
    path: str | os.PathLike[str], *, text: str | None = None, check_paths: bool = True
) -> TaskConfig:
    """Load and validate one task config. `text` replaces reading `path` (which still names the
    file in errors and anchors relative paths, unless the text starts with a `BASE_DIR_MARK`
    line naming the folder to anchor them to: how `sandfs task add` hands a config to a live
    mount); `check_paths=False` skips the checks that the dataset directory and labels CSV
    exist."""
    file = os.fspath(path)
    if text is None:
        text = _read_text(file)
    elif len(text.encode()) > MAX_CONFIG_BYTES:
        raise _too_large(file)
    root = read_yaml(text, file)
    entries = fields.mapping(root, TOP_KEYS, required=("task", "seed", "epochs", "dataset"))
    base_dir = os.path.dirname(os.path.abspath(file))
    first_line = text.partition("\n")[0]
    if first_line.startswith(BASE_DIR_MARK):
        base_dir = first_line.removeprefix(BASE_DIR_MARK).strip()
    task = _task_name(entries["task"])
    seed = fields.integer(entries["seed"], minimum=0, maximum=MAX_SEED)
    epochs = fields.integer(entries["epochs"], minimum=1)
    dataset = _dataset(entries["dataset"], base_dir, check_paths)
    engine, engine_given = _engine(entries.get("engine"), base_dir)
    return TaskConfig(
        task=task,
        seed=seed,
        epochs=epochs,
        dataset=dataset,
        engine=engine,
        engine_given=engine_given,
        source_path=os.path.abspath(file),
        source_text=text,
    )


def load_task_configs(
    paths: Iterable[str | os.PathLike[str]], *, check_paths: bool = True
) -> list[TaskConfig]:
    """Load several configs; a task name given twice is an error at the second `task:`."""
    configs: list[TaskConfig] = []
    first_file: dict[str, str] = {}
    for path in paths:
        config = load_task_config(path, check_paths=check_paths)
        if config.task in first_file:
            task_value = read_yaml(config.source_text, os.fspath(path)).data["task"]
            raise task_value.error(
                f"task name {config.task!r} is already used by {first_file[config.task]}"
            )
        first_file[config.task] = os.fspath(path)
        configs.append(config)
    return configs


def merge_engines(
    configs: Sequence[TaskConfig], overrides: Mapping[str, Any]
) -> tuple[EngineConfig, list[str]]:
    """One engine for a mount: per key the first config that sets it wins (a warning for each
    config that sets another value), then non-None `overrides` (EngineConfig field names; CLI
    values: `workers` may be "auto", `storage_budget_bytes` a size string) win over all."""
    overridden = {name: _override(name, v) for name, v in overrides.items() if v is not None}
    settings: dict[str, Any] = {}
    origin: dict[str, str] = {}
    warnings = []
    for config in configs:
        for yaml_key, name in ENGINE_FIELDS.items():
            if name not in config.engine_given or name in overridden:
                continue  # a CLI value settles any disagreement silently
            value = getattr(config.engine, name)
            if name not in settings:
                settings[name], origin[name] = value, config.source_path
            elif value != settings[name]:
                warnings.append(
                    f"engine.{yaml_key}: {config.source_path} sets {_show(name, value)} but "
                    f"{origin[name]} (given first) sets {_show(name, settings[name])}; "
                    f"using {_show(name, settings[name])}"
                )
    return EngineConfig(**{**settings, **overridden}), warnings


def parse_size(text: str | int) -> int:
    """Bytes from `4096`, `512M`, `200G`, `1.5T`, `10GiB` (K/M/G/T/P/E are powers of 1024;
    a trailing B or iB is optional). Raises ValueError."""
    is_int = isinstance(text, int) and not isinstance(text, bool)
    size = text if is_int else _size_from_text(text)
    if not 1 <= size <= MAX_SIZE_BYTES:
        raise ValueError(f"a size must be between 1 byte and {MAX_SIZE_BYTES}, got {text!r}")
    return size


def _size_from_text(text: object) -> int:
    match = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"expected a size like 200G, 512M, 1.5T, 10GiB or a number of bytes, got {text!r}"
        )
    number, unit = Fraction(match.group(1)), (match.group(2) or "").lower()
    if not unit and number.denominator != 1:
        raise ValueError(f"a number of bytes must be whole, got {text!r}")
    scale = 1024 ** (_SIZE_UNITS.index(unit) + 1) if unit else 1
    return int(number * scale)  # a fractional unit rounds down to whole bytes (0.3K -> 307)


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


def _dataset(value: Value, base_dir: str, check_paths: bool) -> DatasetConfig:
    required = ("tag", "video_dataset_path", "sampling", "augmentation")
    entries = fields.mapping(value, DATASET_KEYS, required=required)
    tag = fields.string(entries["tag"], what="a dataset tag")
    input_source = _optional(entries, "input_source", _input_source, "file")
    path = _dataset_path(entries["video_dataset_path"], base_dir, check_paths)
    extensions = _optional(entries, "extensions", _extensions, DEFAULT_EXTENSIONS)
    labels = _optional(
        entries, "labels", partial(_labels, base_dir=base_dir, check_paths=check_paths), "dirname"
    )
    sampling = _sampling(entries["sampling"])
    source_hw = sampling.decode_resize[0] if sampling.decode_resize else None
    augmentation = parse_pipeline(entries["augmentation"], sampling.frames_per_video, source_hw)
    return DatasetConfig(
        tag=tag,
        input_source=input_source,
        video_dataset_path=path,
        extensions=extensions,
        labels=labels,
        sampling=sampling,
        augmentation=augmentation,
    )


def _input_source(value: Value) -> str:
    if fields.choice(value, ("file", "streaming")) == "streaming":
        raise value.error("streaming is not supported by this build; use file")
    return "file"


def _dataset_path(value: Value, base_dir: str, check_paths: bool) -> str:
    text = fields.string(value, what="a directory of videos")
    if _URL_RE.match(text):
        raise value.error(
            "URLs are not supported by this build; give a local directory (input_source: file)"
        )
    # the real directory: the same data reached through a symlink is the same dataset (the
    # path seeds the draws and decides which tasks share frames)
    path = os.path.realpath(_resolve(text, base_dir))
    if check_paths and not os.path.isdir(path):
        problem = "is not a directory" if os.path.exists(path) else "does not exist"
        raise value.error(f"the dataset directory {path} {problem}")
    return path


def _extensions(value: Value) -> tuple[str, ...]:
    extensions: list[str] = []
    for item in fields.sequence(value, "file extensions like .mp4", min_len=1):
        text = fields.string(item, what="a file extension like .mp4").lower()
        if not _EXTENSION_RE.fullmatch(text):
            raise item.error(f"an extension starts with '.' like .mp4, got {item.data!r}")
        if text not in extensions:
            extensions.append(text)
    return tuple(extensions)


def _labels(value: Value, *, base_dir: str, check_paths: bool) -> str:
    what = "dirname, none or the path of a .csv file (video,label)"
    text = fields.string(value, what=what)
    if text in LABEL_KINDS:
        return text
    if not text.lower().endswith(".csv"):
        raise value.error(f"expected {what}, got {text!r}{fields.did_you_mean(text, LABEL_KINDS)}")
    path = _resolve(text, base_dir)
    if check_paths and not os.path.isfile(path):
        raise value.error(f"the labels file {path} does not exist")
    return path


def _sampling(value: Value) -> SamplingConfig:
    required = ("videos_per_batch", "frames_per_video")
    entries = fields.mapping(value, SAMPLING_KEYS, required=required)
    positive = partial(fields.integer, minimum=1)
    return SamplingConfig(
        videos_per_batch=positive(entries["videos_per_batch"]),
        frames_per_video=positive(entries["frames_per_video"]),
        frame_stride=_optional(entries, "frame_stride", positive, 1),
        samples_per_video=_optional(entries, "samples_per_video", positive, 1),
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
    )


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


def _engine(value: Value | None, base_dir: str) -> tuple[EngineConfig, frozenset[str]]:
    """The engine section and the EngineConfig fields it sets (a null value sets nothing)."""
    if value is None or value.data is None:
        return EngineConfig(), frozenset()
    readers: dict[str, Callable[[Value], Any]] = {
        "mountpoint": partial(_path_setting, base_dir=base_dir),
        "cache_dir": partial(_path_setting, base_dir=base_dir),
        "storage_budget": _budget,
        "k_epochs": partial(fields.integer, minimum=1),
        "workers": _workers,
        "memory_limit": _budget,
        "cache_format": partial(fields.choice, choices=CACHE_FORMATS),
        "decode_ahead": partial(fields.integer, minimum=0),
    }
    settings = {
        ENGINE_FIELDS[key]: readers[key](item)
        for key, item in fields.mapping(value, tuple(ENGINE_FIELDS)).items()
        if item.data is not None
    }
    return EngineConfig(**settings), frozenset(settings)


def _path_setting(value: Value, *, base_dir: str) -> str:
    return _resolve(fields.string(value, what="a path"), base_dir)


def _budget(value: Value) -> int:
    if not isinstance(value.data, int | str) or isinstance(value.data, bool):
        raise value.error(f"expected a size like 200G or 512M, got {fields.describe(value)}")
    try:
        return parse_size(value.data)
    except ValueError as e:
        raise value.error(str(e)) from None


def _workers(value: Value) -> int | None:
    if value.data == "auto":
        return None
    if not isinstance(value.data, int) or isinstance(value.data, bool):
        raise value.error(f"expected auto or an integer >= 1, got {fields.describe(value)}")
    return fields.integer(value, minimum=1)


def _optional(
    entries: Mapping[str, Value], key: str, read: Callable[[Value], Any], default: Any
) -> Any:
    """An optional key: absent or null gives the default."""
    item = entries.get(key)
    return default if item is None or item.data is None else read(item)


def _resolve(text: str, base_dir: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))


# --- engine overrides --------------------------------------------------------------------------


def _override(name: str, value: Any) -> Any:
    """Check one CLI override; ValueError names the EngineConfig field."""
    if name in ("mountpoint", "cache_dir"):
        return os.path.abspath(os.path.expanduser(os.fspath(value)))
    if name == "cache_format":
        if value not in CACHE_FORMATS:
            raise ValueError(f"{name}: expected one of {', '.join(CACHE_FORMATS)}, got {value!r}")
        return value
    if name in ("storage_budget_bytes", "memory_limit_bytes"):
        try:
            return parse_size(value)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    if name == "workers" and value == "auto":
        return None
    if name in ("workers", "k_epochs", "decode_ahead"):
        least = 0 if name == "decode_ahead" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
        return value
    raise ValueError(f"unknown engine setting {name!r}; known: {', '.join(ENGINE_FIELDS.values())}")


def _show(name: str, value: Any) -> str:
    if name == "workers" and value is None:
        return "auto"
    return str(value)
