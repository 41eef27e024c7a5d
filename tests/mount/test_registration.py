"""Every way a task comes into a mount runs the same checks: each refusal `sandfs mount` makes
is made, with the same one-line reason, by `sandfs task add`, a YAML written to .sand/tasks/,
`sandfs.client.register_task` and `sandfs.ray.task`, and leaves nothing registered. One real
mount serves the whole table (its healthy task read before and after)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandfs import cli, client
from sandfs.config.yamlsafe import ConfigError
from sandfs.errors import UserError
from tests.helpers.harness import Mounted, mount_sandfs, task_config, write_config

ENGINE = {"k_epochs": 2, "workers": 2, "memory_limit": "256M"}
NOBODY = 65534


def crop_step(size: list[int]) -> dict:
    return {"name": "crop", "branch_type": "single", "inputs": ["frame"],
            "outputs": ["cropped"], "config": [{"random_crop": {"size": size}}]}


def bad_condition_step() -> dict:
    return {"name": "pick", "branch_type": "conditional", "inputs": ["frame"],
            "outputs": ["picked"],
            "branches": [{"condition": "volume > 2", "config": [{"flip": {}}]},
                         {"condition": "else", "config": []}]}


# name -> (what the config changes, a fragment of the reason); `{root}`: the test's folder
REFUSALS: dict[str, tuple[Callable[[Path, Path], dict], str]] = {
    "schema": (lambda d, root: {"seed": "x"}, "seed: expected an integer"),
    "oversize": (lambda d, root: {"augmentation": [crop_step([8192, 8192])]},
                 "does not fit the 201326592 bytes that memory_limit 268435456 keeps"),
    "condition": (lambda d, root: {"augmentation": [bad_condition_step()]},
                  "unknown name 'volume'"),
    "shard": (lambda d, root: {"sampling": {"shard": {"world_size": 2, "rank": 2}}},
              "must be less than world_size 2"),
    "owner": (lambda d, root: {"access": {"owner": NOBODY}},
              f"its owner (uid {NOBODY}) may not list"),
    "labels": (lambda d, root: {"dataset": {"labels": str(root / "missing.csv")}},
               "the labels file"),
    "remote": (lambda d, root: {"dataset": {"video_dataset_path": "ftp://host/videos"}},
               "URL scheme ftp:// is not supported"),
    "layout": (lambda d, root: {"dataset": {"video_dataset_path": str(root)}},
               "is the dataset directory"),
}


def bad_config(root: Path, dataset: Path, name: str) -> Path:
    """root/NAME.yaml: the healthy config with one refusal's change."""
    change = REFUSALS[name][0](dataset, root)
    sampling = change.pop("sampling", {})
    augmentation = change.pop("augmentation", None)
    dataset_change = change.pop("dataset", {})
    config = task_config(dataset, task=name, engine=ENGINE, sampling=sampling,
                         **({"augmentation": augmentation} if augmentation else {}))
    config["dataset"] |= dataset_change
    return write_config(root / f"{name}.yaml", config | change)


# -- the five ways in, each giving the reason it was refused with (None: accepted) -----------

REFUSED_BY = re.compile(r"^the daemon (at \S+ )?refused task \S+: ")


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return REFUSED_BY.sub("", lines[0].removeprefix("sandfs: "))


def by_mount(m: Mounted, path: Path, capsys, monkeypatch) -> str | None:
    def accepted(*_args):
        raise AssertionError("sandfs mount accepted the config")

    monkeypatch.setattr(cli, "mount_background", accepted)
    capsys.readouterr()
    code = cli.main(["mount", str(m.mountpoint), "--config", str(path), "--cache-dir",
                     str(m.cache_dir)])
    assert code != 0
    return one_line(capsys.readouterr().err)


def by_task_add(m: Mounted, path: Path, capsys, monkeypatch) -> str | None:
    capsys.readouterr()
    code = cli.main(["task", "add", str(m.mountpoint), str(path)])
    assert code != 0
    return one_line(capsys.readouterr().err)


def by_copy(m: Mounted, path: Path, capsys, monkeypatch) -> str | None:
    name = path.stem
    with pytest.raises(OSError), open(m.path(".sand", "tasks", f"{name}.yaml"), "x") as f:
        f.write(path.read_text())
    return client.read_status(str(m.mountpoint))["task_errors"][name]


def by_client(m: Mounted, path: Path, capsys, monkeypatch) -> str | None:
    with pytest.raises((ConfigError, UserError)) as caught:
        client.register_task(m.mountpoint, path, hold=False)
    return one_line(str(caught.value))


def by_ray(m: Mounted, path: Path, capsys, monkeypatch) -> str | None:
    """`sandfs.ray.task` on a node whose daemon actor serves `m` already (no cluster: the
    actor lookup answers with this mount)."""
    sandray = pytest.importorskip("sandfs.ray")
    actor = SimpleNamespace(ensure_mount=SimpleNamespace(
        remote=lambda task, text: sandray.MountInfo(str(m.mountpoint), None)))
    monkeypatch.setattr(sandray, "_actor_for", lambda node_id, settings: actor)
    monkeypatch.setattr(sandray.ray, "get_runtime_context",
                        lambda: SimpleNamespace(get_node_id=lambda: "node0"))
    monkeypatch.setattr(sandray.ray, "get", lambda answer: answer)
    with pytest.raises((ConfigError, UserError)) as caught, sandray.task(path, shard=None):
        pass
    return one_line(str(caught.value))


WAYS_IN = {"mount": by_mount, "task add": by_task_add, "copy": by_copy,
           "client": by_client, "ray": by_ray}


def registered(m: Mounted) -> tuple:
    """What a registration would leave: tasks, their files, directories and scan files."""
    status = client.read_status(str(m.mountpoint))
    scans = sorted(p.name for p in Path(m.cache_dir).rglob("scan-*"))
    return (sorted(status["tasks"]), sorted(os.listdir(m.mountpoint)),
            sorted(os.listdir(m.path(".sand", "tasks"))), scans)


def test_every_way_in_refuses_what_the_mount_refuses_for_the_same_reason(
        tmp_path, dataset_dir, capsys, monkeypatch):
    healthy = write_config(tmp_path / "t0.yaml", task_config(dataset_dir, engine=ENGINE))
    with mount_sandfs(tmp_path, [healthy]) as m:
        first = m.path("t0", "0", "0", "view").read_bytes()
        before = registered(m)
        assert before[:3] == (["t0"], [".sand", "t0"], ["t0.yaml"])
        for name, (_change, fragment) in REFUSALS.items():
            path = bad_config(tmp_path, dataset_dir, name)
            reasons = {}
            for way, refuse in WAYS_IN.items():
                with monkeypatch.context() as patch:
                    reasons[way] = refuse(m, path, capsys, patch)
                assert registered(m) == before, (name, way)
            assert fragment in reasons["mount"], (name, reasons["mount"])
            assert str(path) in reasons["mount"]  # the user's file, not the daemon's copy
            # a plain copy is named by the file written: the daemon never sees the user's
            written = str(m.path(".sand", "tasks", f"{path.stem}.yaml"))
            assert reasons.pop("copy") == reasons["mount"].replace(str(path), written), name
            assert set(reasons.values()) == {reasons["mount"]}, (name, reasons)
        assert m.path("t0", "0", "0", "view").read_bytes() == first
        assert m.path("t0", "1", "0", "view").read_bytes()
        # refused uploads are logged as warnings, the layout one as its own line
        m.expected_log_errors = 0


def test_a_ray_nodes_first_task_is_refused_for_the_mounts_reason(tmp_path, dataset_dir, capsys,
                                                                 monkeypatch):
    """On a node without a mount, `sandfs.ray.task` has the node's daemon actor start one with
    the task: a refusal comes back as `sandfs mount`'s one line, not a log dump."""
    sandray = pytest.importorskip("sandfs.ray")
    path = bad_config(tmp_path, dataset_dir, "oversize")
    settings = sandray.DaemonSettings(mountpoint=f"{tmp_path}/{{node}}/mnt",
                                      cache_dir=f"{tmp_path}/{{node}}/cache")
    actor = sandray.NodeDaemon(settings, "node0")
    prepared = client.prepare_task(path)
    with pytest.raises(UserError) as caught:
        actor.ensure_mount(prepared.config.task, prepared.text)
    capsys.readouterr()
    mounted = Mounted(Path(actor.mountpoint), None, tmp_path / "unused.log", Path(actor.cache_dir))
    assert str(caught.value) == by_mount(mounted, path, capsys, monkeypatch)
    assert not os.listdir(actor.mountpoint)
