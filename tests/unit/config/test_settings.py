"""The settings of a mount: engine sections merged (first wins, with warnings), command line
overrides, sizes."""

import dataclasses
import os
import re
from pathlib import Path

import pytest

from sandfs.config.loader import load_task_config
from sandfs.config.pipeline import view_shape
from sandfs.config.settings import (
    BATCHES_IN_MEMORY,
    DECODE_WORKING_SET_BYTES,
    MIN_MEMORY_LIMIT,
    ON_DEMAND_MEMORY_SHARE,
    PROCESSES_FROM_CORES,
    check_views_fit,
    default_memory_limit,
    default_storage_budget,
    merge_engines,
    mount_settings,
    parse_size,
)
from sandfs.config.yamlsafe import ConfigError
from sandfs.errors import UserError
from sandfs.media.scan_workers import ScanPace
from sandfs.npy import npy_nbytes
from sandfs.registration import admit_upload
from sandfs.sched.policy import DISPLACE_HORIZON
from sandfs.tasks import ignored_engine_note
from tests.helpers.config_texts import BASE, edited

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
            "  decode_ahead: 0\n  plan_ahead: 8\n"
        ),
    )
    engine, warnings = merge_engines([first, second], {})
    assert engine.cache_dir == "/c1"
    assert engine.storage_budget_bytes == 2**30
    assert engine.workers == 3
    assert engine.k_epochs == 5
    assert engine.decode_ahead == 0
    assert engine.plan_ahead == 8
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
    with pytest.raises(ValueError, match="plan_ahead: expected an integer >= 1"):
        merge_engines([first], {"plan_ahead": 0})
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


# --- MountSettings ---------------------------------------------------------------------------


def _settings(text: str = BASE, overrides: dict | None = None, environ: dict | None = None,
              mountpoint: str | None = "/mnt/sand"):
    config = load_task_config("/cfg/task.yaml", text=text, check_paths=False)
    return mount_settings([config], overrides or {}, mountpoint, environ or {})


def _fitted(text: str):
    """The settings of a mount of `text`, its view checked against them."""
    settings, warnings = _settings(text)
    check_views_fit(load_task_config("/cfg/task.yaml", text=text, check_paths=False), settings)
    return settings, warnings


def test_mount_settings_resolve_every_default_once(tmp_path):
    settings, warnings = _settings(environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert warnings == []
    assert settings.mountpoint == "/mnt/sand"
    assert settings.cache_dir.startswith(f"{tmp_path}/sandfs/")  # named from the mountpoint
    assert settings.cache_dir == _settings(environ={"XDG_CACHE_HOME": str(tmp_path)})[0].cache_dir
    assert settings.workers >= 1
    assert settings.storage_budget_bytes == 2**30  # the config's
    assert settings.storage_budget_given  # so the store may fill it
    assert settings.memory_limit_bytes > 0
    assert (settings.scheduling, settings.prune_mode) == ("priority", "algorithm1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.workers = 3


def test_plan_ahead_reaches_the_mount_settings():
    assert _settings()[0].plan_ahead == 64
    text = edited(("  storage_budget: 1G", "  storage_budget: 1G\n  plan_ahead: 8"))
    assert _settings(text)[0].plan_ahead == 8


def test_memory_is_split_between_on_demand_objects_and_prepared_batches():
    settings = dataclasses.replace(_settings()[0], memory_limit_bytes=1000)
    assert (settings.on_demand_memory_bytes, settings.batch_memory_bytes) == (250, 750)


def test_the_default_memory_limit_is_what_the_tasks_and_workers_need():
    """Not a share of the machine: BATCHES_IN_MEMORY views of every distinct task, a decode
    working set per worker, and the on-demand share on top; within half of RAM. Identical
    trials of a search (another name, the same dataset and seed) hold one set of batches."""
    config = load_task_config("/cfg/task.yaml", text=BASE, check_paths=False)
    view = npy_nbytes(*view_shape(config.dataset))
    one = default_memory_limit([config], 2, physical_bytes=1 << 40)
    trials = [dataclasses.replace(config, task=f"trial{i}") for i in range(4)]
    assert default_memory_limit(trials, 2, physical_bytes=1 << 40) == one
    other_seed = dataclasses.replace(config, task="other", seed=config.seed + 1)
    two = default_memory_limit([*trials, other_seed], 2, physical_bytes=1 << 40)
    scheduler_share = 1 - ON_DEMAND_MEMORY_SHARE
    assert one == max(MIN_MEMORY_LIMIT, int((view * BATCHES_IN_MEMORY
                                             + 2 * DECODE_WORKING_SET_BYTES) / scheduler_share))
    assert two - one == pytest.approx(view * BATCHES_IN_MEMORY / scheduler_share, abs=1)
    assert default_memory_limit([config], 64, physical_bytes=4 << 30) == 2 << 30  # half of RAM
    assert default_memory_limit([], 2, physical_bytes=8 << 30) == 2 << 30  # no task yet: 1/4
    assert default_memory_limit([], 2, physical_bytes=512 << 20) == MIN_MEMORY_LIMIT
    assert BATCHES_IN_MEMORY == DISPLACE_HORIZON  # what the scheduler keeps
    settings = _settings()[0]
    assert settings.memory_limit_bytes == default_memory_limit([config], settings.workers)


def test_the_cli_overrides_and_its_errors_name_the_flag():
    settings, _ = _settings(overrides={"workers": "3", "k_epochs": 2, "cache_dir": "rel"})
    assert (settings.workers, settings.k_epochs) == (3, 2)
    assert settings.cache_dir == str(Path.cwd() / "rel")
    for overrides, message in (
        ({"workers": "none"}, "--workers: expected a positive integer or auto, got 'none'"),
        ({"workers": "0"}, "--workers: expected a positive integer or auto, got 0"),
        ({"k_epochs": 0}, "--k-epochs: expected an integer >= 1, got 0"),
        ({"decode_ahead": -1}, "--decode-ahead: expected an integer >= 0, got -1"),
        ({"storage_budget_bytes": "lots"}, "--budget: expected a size like 200G"),
    ):
        with pytest.raises(UserError, match=re.escape(message)):
            _settings(overrides=overrides)
    with pytest.raises(UserError, match="no mountpoint"):
        _settings(mountpoint=None)


def test_the_ablations_come_from_the_environment_and_are_checked():
    settings, _ = _settings(environ={"SANDFS_SCHEDULING": "fifo", "SANDFS_PRUNE": "leaves"})
    assert (settings.scheduling, settings.prune_mode) == ("fifo", "leaves")
    with pytest.raises(UserError, match="SANDFS_SCHEDULING: expected priority or fifo"):
        _settings(environ={"SANDFS_SCHEDULING": "lifo"})
    with pytest.raises(UserError, match=r"SANDFS_PRUNE: expected algorithm1 or leaves"):
        _settings(environ={"SANDFS_PRUNE": "all"})
    with pytest.raises(UserError, match="SANDFS_MAX_PIXELS"):
        _settings(environ={"SANDFS_MAX_PIXELS": "many"})


def test_a_view_larger_than_the_batch_memory_is_refused_naming_task_size_and_limit():
    huge = edited(("resize: {shape: [32, 48]}", "resize: {shape: [8192, 8192]}"),
                  ("[{center_crop: {size: [16, 16]}}]", "[{center_crop: {size: [8192, 8192]}}]"),
                  ("[{random_crop: {size: [16, 16]}}]", "[{random_crop: {size: [8192, 8192]}}]"),
                  ("storage_budget: 1G", "memory_limit: 1G"))
    with pytest.raises(UserError) as caught:
        _fitted(huge)
    message = str(caught.value)
    view_nbytes = 2 * 4 * 8192 * 8192 * 3 + 128  # 2 videos x 4 frames, RGB, .npy header
    assert "task demo" in message and "/cfg/task.yaml" in message
    assert f"a view of {view_nbytes} bytes (2x4x8192x8192x3 uint8)" in message
    assert f"memory_limit {2**30}" in message and "\n" not in message
    fits = edited(("storage_budget: 1G", "memory_limit: 9K"))  # 6912 bytes for batches
    assert _fitted(fits)[0].batch_memory_bytes == 6912
    with pytest.raises(UserError, match=r"a view of 6272 bytes .* does not fit the 6144 bytes"):
        _fitted(edited(("storage_budget: 1G", "memory_limit: 8K")))


def test_view_shape_counts_every_path_and_the_layout():
    head = BASE[: BASE.index("  augmentation:")]
    two_paths = head + """\
    layout: NCTHW
  augmentation:
    - {name: views, branch_type: multi, inputs: [frame], outputs: [a, b],
       branches: [{config: [{resize: {shape: [20, 30]}}]}, {config: [{resize: {shape: [20, 30]}}]}]}
    - {name: join, branch_type: merge, inputs: [a, b], outputs: [out]}
"""
    config = load_task_config("t.yaml", text=two_paths, check_paths=False)
    assert view_shape(config.dataset) == ((4, 3, 4, 20, 30), "uint8")  # 2 videos x 2 paths


def test_without_a_budget_the_disk_bound_is_the_default_and_not_given(tmp_path):
    text = re.sub(r"  storage_budget: 1G[^\n]*\n", "", BASE)
    settings, _ = _settings(text, environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert not settings.storage_budget_given  # the store sizes itself (cache/sizing.py)
    assert settings.storage_budget_bytes == default_storage_budget(settings.cache_dir)
    given, _ = _settings(text, {"storage_budget_bytes": "3G"},
                         environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert given.storage_budget_given and given.storage_budget_bytes == 3 << 30


def cores(monkeypatch, count: int) -> None:
    """This process may run on `count` cores (its affinity), whatever the machine has."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(count)))


@pytest.mark.parametrize(("usable", "workers", "mode"), [
    (2, None, "threads"), (PROCESSES_FROM_CORES - 1, None, "threads"),
    (PROCESSES_FROM_CORES, None, "processes"), (64, None, "processes"),
    (64, 2, "threads"),  # two workers keep to two cores: the GIL is no bound there
    (64, PROCESSES_FROM_CORES, "processes"), (2, 64, "threads"),
])
def test_auto_execution_follows_the_cores_the_workers_can_use(monkeypatch, usable, workers,
                                                              mode):
    cores(monkeypatch, usable)
    settings, _ = _settings(overrides={"workers": workers})
    assert (settings.execution, settings.execution_setting) == (mode, "auto")
    assert settings.workers == (workers or usable)  # the default: the usable cores


def test_the_execution_setting_is_auto_by_default_and_checked(monkeypatch):
    cores(monkeypatch, 64)
    assert _settings()[0].execution == "processes"
    for given in ("threads", "processes", "auto"):
        resolved = "processes" if given == "auto" else given
        settings, _ = _settings(overrides={"execution": given})  # --execution
        assert (settings.execution, settings.execution_setting) == (resolved, given)
        config = load_task_config("a.yaml", check_paths=False,
                                  text=_with_engine("a", f"  execution: {given}\n"))  # YAML
        assert merge_engines([config], {})[0].execution == given
    with pytest.raises(UserError, match=re.escape("--execution: expected one of auto, threads, "
                                                  "processes, got 'forks'")):
        _settings(overrides={"execution": "forks"})
    with pytest.raises(Exception, match="auto"):
        load_task_config("a.yaml", check_paths=False,
                         text=_with_engine("a", "  execution: forks\n"))


def test_a_task_uploaded_to_a_live_mount_has_its_execution_checked_then_ignored(
        tmp_path, monkeypatch):
    """`.sand/tasks/NAME.yaml`: the mount's execution is kept, as every engine key is."""
    cores(monkeypatch, 2)
    settings, _ = _settings()
    (tmp_path / "videos").mkdir()
    writer = (os.getuid(), os.getgid())
    text = _with_engine("late", "  execution: processes\n")
    cfg = admit_upload("late.yaml", text, writer, config_dir=str(tmp_path), settings=settings)
    assert cfg.engine.execution == "processes" and settings.execution == "threads"
    assert "execution" in ignored_engine_note(cfg)
    with pytest.raises(Exception, match="auto"):
        admit_upload("late.yaml", text.replace("execution: processes", "execution: forks"),
                     writer, config_dir=str(tmp_path), settings=settings)


def test_the_scan_section_sets_the_background_scan_s_pace(tmp_path):
    """`engine: scan:` (docs/config.md#the-scan): what it sets, the defaults for the rest;
    unknown names and values out of range name their line."""
    config = load_task_config("a.yaml", check_paths=False, text=_with_engine(
        "a", "  scan:\n    ahead_videos: 512\n    background_nice: 19\n    held_every_ms: 250\n"))
    settings, _ = mount_settings([config], {}, str(tmp_path / "mnt"))
    assert settings.scan_pace == ScanPace(ahead_videos=512, background_nice=19,
                                          held_every_ms=250)
    assert mount_settings([load_task_config("b.yaml", check_paths=False, text=BASE)], {},
                          str(tmp_path / "mnt"))[0].scan_pace == ScanPace()
    for engine, message in [("  scan:\n    ahead: 1\n", "unknown key 'ahead'"),
                            ("  scan:\n    background_nice: 20\n", "must be at most 19"),
                            ("  scan:\n    background_workers: 0\n", "must be at least 1"),
                            ("  scan:\n    held_every_ms: 0\n", "must be at least 1")]:
        with pytest.raises(ConfigError, match=rf"c.yaml:\d+:\d+: engine.scan.*{message}"):
            load_task_config("c.yaml", check_paths=False, text=_with_engine("c", engine))
