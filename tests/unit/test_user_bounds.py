"""Per-user bounds in-process: quotas, registrations planned on their own threads, limits as
settings, and a checkpoint that cannot be saved (docs/deploy.md#limits)."""

from __future__ import annotations

import errno
import json
import logging
import resource
import threading
from dataclasses import replace

import pytest
import trio
import yaml

from sandfs.access import owner_of, stamped
from sandfs.bounds import LimitReached, Quota
from sandfs.config.limits import DEFAULT_LIMITS, Limits
from sandfs.config.loader import load_task_config
from sandfs.config.settings import mount_settings
from sandfs.daemon import raise_fd_limit
from sandfs.errors import UserError
from sandfs.plan.task import TaskPlan
from sandfs.plan.window import plan_window, view_key
from sandfs.ratelog import RateLimitedLog
from sandfs.sched.policy import NOT_NEEDED, JobState, pick_next
from sandfs.sched.windows import Position, WindowBook
from sandfs.tasks import ERRORS_PER_UID, TaskRegistry
from tests.helpers.plans import make_plan
from tests.helpers.users import NOBODY

OTHER = 4242


def task_cfg(tmp_path, name: str, uid: int):
    config = {"task": name, "seed": 0, "epochs": 1,
              "dataset": {"tag": "x", "input_source": "file", "video_dataset_path": "/data",
                          "sampling": {"videos_per_batch": 1, "frames_per_video": 1},
                          "augmentation": [{"name": "r", "branch_type": "single",
                                            "inputs": ["frame"], "outputs": ["o"],
                                            "config": [{"resize": {"shape": [8, 8]}}]}]}}
    cfg = load_task_config(tmp_path / f"{name}.yaml", text=yaml.safe_dump(config),
                           check_paths=False)
    return replace(cfg, access=stamped(cfg.access, uid, uid))


def test_a_quota_bounds_each_user_and_the_total_and_root_by_the_total_only():
    quota = Quota("things", per_uid=2, total=3, setting="things")
    quota.take(NOBODY)
    quota.take(NOBODY)
    with pytest.raises(LimitReached) as raised:
        quota.take(NOBODY)
    assert raised.value.errno == errno.EDQUOT and "things_per_uid" in str(raised.value)
    quota.take(0)
    with pytest.raises(LimitReached) as raised:
        quota.take(0)
    assert raised.value.errno == errno.ENOSPC and "things_total" in str(raised.value)
    quota.give(NOBODY)
    quota.take(OTHER)
    assert dict(quota.held) == {NOBODY: 1, 0: 1, OTHER: 1}


def at_zero(name: str) -> Position:
    return Position(0, 0)


def test_stuck_registrations_take_their_own_threads_and_few_of_them(tmp_path):
    """H2: registrations blocked in planning (a labels FIFO) hold the registration threads
    only: a user's third is refused at once, trio's default threads stay free."""
    release = threading.Event()

    def stuck_planner(cfg, leaders):
        release.wait(10)
        raise RuntimeError("released")

    registry = TaskRegistry([], task_planner=stuck_planner,
                            limits=replace(DEFAULT_LIMITS, registrations_per_uid=2))
    outcomes = []

    async def register(name: str, uid: int) -> None:
        try:
            await registry.register(task_cfg(tmp_path, name, uid), at_zero)
        except UserError as exc:
            outcomes.append((name, getattr(exc, "errno", None)))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for name in ("a", "b"):
                nursery.start_soon(register, name, NOBODY)
            await trio.sleep(0.2)
            await register("c", NOBODY)
            assert outcomes == [("c", errno.EAGAIN)]
            assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
            assert await trio.to_thread.run_sync(lambda: "free") == "free"
            release.set()

    trio.run(main)
    assert sorted(outcomes) == [("a", None), ("b", None), ("c", errno.EAGAIN)]
    assert not registry.registering.held


def test_a_user_past_tasks_per_uid_is_refused_before_planning(tmp_path):
    planned = []

    def planner(cfg, leaders):
        planned.append(cfg.task)
        raise RuntimeError("not planned")

    registry = TaskRegistry([], task_planner=planner,
                            limits=replace(DEFAULT_LIMITS, tasks_per_uid=1, tasks_total=5))
    registry.owners["held"] = owner_of(task_cfg(tmp_path, "held", NOBODY))
    with pytest.raises(LimitReached) as raised:
        trio.run(registry.register, task_cfg(tmp_path, "more", NOBODY), at_zero)
    assert raised.value.errno == errno.EDQUOT and "tasks_per_uid" in str(raised.value)
    assert planned == []


def test_a_checkpoint_that_cannot_be_saved_is_a_status_entry(tmp_path):
    """C5: out of fds, the checkpoint's write fails; the planning thread goes on."""
    class Coordination:
        changed = True

        def state(self) -> dict:
            return {}

    def full(state: dict) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    registry = TaskRegistry([], checkpoint=full)
    registry.tasks["t"] = type("Plan", (), {"coordination": Coordination()})()
    registry.window_planned()
    (failure,) = registry.state_failures()
    assert failure.path == "plan-state.json" and "Too many open files" in failure.reason


def test_limits_are_settings_of_the_config_and_the_command_line(tmp_path):
    text = yaml.safe_dump({"task": "a", "seed": 0, "epochs": 1,
                           "dataset": {"tag": "x", "video_dataset_path": str(tmp_path),
                                       "sampling": {"videos_per_batch": 1,
                                                    "frames_per_video": 1},
                                       "augmentation": [
                                           {"name": "r", "branch_type": "single",
                                            "inputs": ["frame"], "outputs": ["o"],
                                            "config": [{"resize": {"shape": [8, 8]}}]}]},
                           "engine": {"limits": {"tasks_per_uid": 3, "upload_bytes": 1024}}})
    cfg = load_task_config(tmp_path / "a.yaml", text=text, check_paths=False)
    settings, _ = mount_settings([cfg], {"limits": ["tasks_per_uid=5"]}, str(tmp_path / "m"))
    assert settings.limits == replace(Limits(), tasks_per_uid=5, upload_bytes=1024)
    for flag in ("handles=3", "tasks_per_uid=0", "tasks_per_uid"):
        with pytest.raises(UserError, match="--limit"):
            mount_settings([cfg], {"limits": [flag]}, str(tmp_path / "m"))


def test_the_daemon_raises_its_soft_fd_limit_to_the_hard_one():
    was = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(was[0], 256), was[1]))
    try:
        raise_fd_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (was[1], was[1])
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, was)


def two_owners(tmp_path) -> tuple[TaskPlan, TaskPlan, WindowBook]:
    """Root's task `root` and nobody's `user` (registered on the live mount) in a book."""
    root = make_plan(tmp_path, task="root", epochs=10)
    joined = make_plan(tmp_path, task="user", epochs=10, seed=1)
    user = TaskPlan(replace(joined.cfg, access=stamped(joined.cfg.access, NOBODY, NOBODY)),
                    joined.videos, k_epochs=2)
    book = WindowBook([root])
    book.add_task(user)
    return root, user, book


def test_another_users_task_makes_nothing_ahead_until_it_is_read(tmp_path):
    """H4: a task another user registered and never read is planned into no window and its
    views are needed by no one (made on demand only); root's are made ahead."""
    root, user, book = two_owners(tmp_path)
    book.add_window(plan_window([root, user], 0))
    assert book.deadline_of(view_key(root, 0, 1)) == 1
    assert book.deadline_of(view_key(user, 0, 1)) == NOT_NEEDED
    assert book.wanted() == {0, 1} and book.planned_plans() == [root]
    book.positions["user"] = 2 * user.iterations_per_epoch * 5  # its window 5: not wanted
    assert book.wanted() == {0, 1}
    book.opened("user", 0, 0, moves=True)
    assert book.deadline_of(view_key(user, 0, 1)) == 1
    assert book.planned_plans() == [root, user]


def test_a_task_read_once_makes_nothing_ahead_once_idle(tmp_path):
    """H4 variant: another user's task read once, then left, goes back to on demand after
    idle_after_s: its batches leave the windows and no one needs them; read again, it is
    planned into new windows as before. Root's task never goes idle."""
    root, user, book = two_owners(tmp_path)
    book.opened("user", 0, 0, moves=True, now=100.0)
    book.add_window(plan_window([root, user], 0))
    assert book.idle(since=100.0) == [] and book.deadline_of(view_key(user, 0, 1)) == 1
    assert book.idle(since=160.5) == ["user"]  # root's was never opened: not idle either
    released = book.rest_task("user")
    assert view_key(user, 0, 1) in released and book.view(view_key(user, 0, 1)) is None
    assert book.view(view_key(root, 0, 1)) is not None
    assert book.deadline_of(view_key(user, 0, 1)) == NOT_NEEDED
    assert book.planned_plans() == [root] and book.idle(since=1e9) == []
    book.opened("user", 0, 1, moves=True, now=200.0)
    assert book.planned_plans() == [root, user] and book.wanted() == {0, 1}


def test_another_users_task_opens_views_only_so_far_past_its_reads(tmp_path):
    """M1: opening a view plans and freezes its window; another user's task may open views
    at most `ahead` windows past the furthest it read (its first open anywhere)."""
    *_, book = two_owners(tmp_path)
    book.opened("user", 2, 0, moves=True)  # window 1
    assert not book.too_far("user", 9, 3) and book.too_far("user", 10, 3)  # windows 4, 5
    book.opened("user", 9, 0, moves=True)  # opened, not read: no further
    assert book.too_far("user", 10, 3)
    book.read("user", 9)
    assert not book.too_far("user", 10, 3) and not book.too_far("user", 1, 3)
    book.opened("root", 0, 0, moves=True)
    assert not book.too_far("root", 9, 0)


def test_a_window_is_not_planned_for_tasks_past_it(tmp_path):
    """16 tasks of a user far ahead were planned into every new window of root's task: its
    windows took as long to plan as 17 tasks'. A task past a window with no view open in it
    reaches it only reading back (on demand); one behind a window is planned into it."""
    root, user, book = two_owners(tmp_path)
    book.opened("user", 8, 0, moves=True)  # window 4
    assert book.planned_plans(0) == [root] and book.planned_plans(4) == [root, user]
    book.opened("user", 1, 0, moves=False)  # a view open behind: window 0 is its too
    assert book.planned_plans(0) == [root, user]


def test_owners_take_turns_at_planning_windows(tmp_path):
    """A user's windows far ahead and root's are planned in turns, not soonest first."""
    *_, book = two_owners(tmp_path)
    book.opened("user", 6, 0, moves=True)  # its windows 3 and 4 (k=2)
    todo = book.wanted()
    assert todo == {0, 1, 3, 4}
    order = []
    while todo:
        order.append(book.next_to_plan(todo))
        todo.discard(order[-1])
    assert order == [0, 3, 1, 4]


def test_view_dataset_reads_a_meta_past_the_xattr_limit_from_meta_json(tmp_path, monkeypatch):
    """M4: the kernel answers E2BIG for an xattr over 64 KiB; ViewDataset then reads
    ITERATION/meta.json, the same JSON."""
    from sandfs import torch as sandfs_torch

    meta = {"samples": [{"label_index": i, "frame_indices": list(range(64))}
                        for i in range(300)]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))

    def too_big(path, name):
        raise OSError(errno.E2BIG, "Argument list too long")

    monkeypatch.setattr(sandfs_torch.os, "getxattr", too_big)
    assert sandfs_torch.view_meta(tmp_path / "view") == meta
    assert len(json.dumps(meta)) > 64 << 10


def test_per_file_warnings_are_rate_limited(caplog):
    """L3: a walk over a huge tree logs `burst` warnings a period, then how many it dropped."""
    now = [0.0]
    warnings = RateLimitedLog(logging.getLogger("sandfs.test"), burst=3, period_s=60.0,
                              clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="sandfs.test"):
        for i in range(1000):
            warnings.warning("cannot list %s", i)
        now[0] = 61.0
        warnings.warning("cannot list %s", "late")
    assert [r.getMessage() for r in caplog.records] == [
        "cannot list 0", "cannot list 1", "cannot list 2",
        "997 more such warnings dropped in 61 s", "cannot list late"]


def test_workers_are_shared_fairly_between_owners():
    """H4: the owner with fewer jobs running goes first, among jobs some reader needs; a
    blocked reader's job first of all; with one owner, deadlines decide as before."""
    root = JobState("root", 0, False, deadline_iterations=0, remaining_work=5, owner_load=1)
    user = JobState("user", 0, False, deadline_iterations=7, remaining_work=5, owner_load=0)
    idle = JobState("idle", 0, False, deadline_iterations=NOT_NEEDED, remaining_work=1)
    blocked = JobState("blocked", 0, True, deadline_iterations=9, remaining_work=9, owner_load=3)
    assert pick_next([root, user, idle], memory_pressure=False) is user
    assert pick_next([root, idle], memory_pressure=False) is root
    assert pick_next([root, user, blocked], memory_pressure=False) is blocked
    alone = replace(user, owner_load=1)
    assert pick_next([root, alone], memory_pressure=False) is root


def test_the_window_book_knows_whose_batches_a_job_makes(tmp_path):
    root, user, book = two_owners(tmp_path)
    book.opened("user", 0, 0, moves=True)
    book.add_window(plan_window([root, user], 0))
    assert book.owners_of([view_key(root, 0, 0)]) == {-1}
    assert book.owners_of([view_key(root, 0, 0), view_key(user, 0, 1)]) == {-1, NOBODY}


def test_refusals_kept_per_writer_are_bounded():
    """A user refused under ever new names (the review's replay: 100,000 names took +83 MB and
    a 38 MB status.json) keeps only their latest ERRORS_PER_UID; another user's stay."""
    registry = TaskRegistry([])
    registry.refused("root-task", "bad root config", 0)
    for i in range(ERRORS_PER_UID * 3):
        registry.refused(f"flood{i}", "task files being written: limit", NOBODY)
    registry.refused("flood0", "again", NOBODY)  # a repeated name counts as the latest
    _, mine = registry.visible(NOBODY)
    assert len(mine) == ERRORS_PER_UID
    assert "flood0" in mine and f"flood{ERRORS_PER_UID * 3 - 1}" in mine
    assert "flood1" not in mine
    assert registry.task_errors["root-task"] == "bad root config"
    assert len(registry.task_errors) == ERRORS_PER_UID + 1
