"""The pure plan: coverage, determinism, randomness, shapes — no decoding, no mount."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scistats

from sandfs.config.loader import load_task_config
from sandfs.config.yamlsafe import ConfigError
from sandfs.plan import interner as interner_module
from sandfs.plan.abstract import stream_paths
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import FAKE_DATASET, fake_videos, make_plan


def test_each_video_once_per_epoch_and_epochs_differ(tmp_path):
    plan = make_plan(tmp_path, epochs=4)
    orders = []
    for epoch in range(4):
        seen = [c.video_index for i in range(plan.iterations_per_epoch)
                for c in plan.view_plan(epoch, i).clips]
        assert sorted(seen) == list(range(10))
        orders.append(seen)
    assert len({tuple(o) for o in orders}) == 4
    assert plan.iterations_per_epoch == 3  # 10 videos / 4, the last batch short
    assert plan.view_plan(0, 2).shape == (2, 4, 32, 32, 3)


def test_drop_last_drops_the_tail(tmp_path):
    plan = make_plan(tmp_path, sampling={"drop_last": True})
    assert plan.iterations_per_epoch == 2
    assert all(len(plan.view_plan(0, i).clips) == 4 for i in range(2))


def test_plans_are_deterministic_and_name_independent(tmp_path):
    first = make_plan(tmp_path)
    second = make_plan(tmp_path, task="renamed")
    other_seed = make_plan(tmp_path, seed=1)
    for epoch, iteration in [(0, 0), (1, 2), (2, 1)]:
        a, b = first.view_plan(epoch, iteration), second.view_plan(epoch, iteration)
        assert a.clips == b.clips
    assert first.epoch_order(0).tolist() != other_seed.epoch_order(0).tolist()


def test_clips_lie_on_the_stride_and_inside_the_video(tmp_path):
    plan = make_plan(tmp_path, sampling={"frame_stride": 3, "frames_per_video": 5})
    for epoch in range(3):
        for i in range(plan.iterations_per_epoch):
            for clip in plan.view_plan(epoch, i).clips:
                frames = np.array(clip.frame_indices)
                assert np.all(np.diff(frames) == 3)
                assert frames[0] >= 0 and frames[-1] < 120


def test_clip_starts_are_uniform_over_the_valid_range(tmp_path):
    """Chi-square over many (video, epoch) draws: the frame pool keeps starts uniform."""
    plan = make_plan(tmp_path, videos=fake_videos(200, num_frames=64), epochs=60,
                     sampling={"frames_per_video": 8, "frame_stride": 2})
    span = plan.span_frames
    starts = [plan.clip_start(e, v, 0) for e in range(60) for v in plan.videos]
    counts = np.bincount(starts, minlength=64 - span + 1)
    assert len(counts) == 64 - span + 1
    assert scistats.chisquare(counts).pvalue > 0.01


def test_short_video_policies(tmp_path):
    short = fake_videos(4, num_frames=5)
    clamp = make_plan(tmp_path, videos=short, sampling={"frames_per_video": 4, "frame_stride": 2})
    assert clamp.clip_frames(0, 0, 0) == (0, 2, 4, 4)
    wrap = make_plan(tmp_path, videos=short, sampling={"frames_per_video": 4, "frame_stride": 2,
                                                      "short_video": "wrap"})
    assert wrap.clip_frames(0, 0, 0) == (0, 2, 4, 1)
    mixed = short[:2] + fake_videos(6)[2:]
    skip = make_plan(tmp_path, videos=mixed, sampling={"short_video": "skip"})
    assert len(skip.videos) == 4 and {b.reason for b in skip.skipped} == {"too_short"}


def test_random_branch_frequencies_follow_prob(tmp_path):
    plan = make_plan(tmp_path, videos=fake_videos(300), epochs=2)
    flips = [dict(c.branches)["maybe_flip"] == "0"
             for i in range(plan.iterations_per_epoch) for c in plan.view_plan(0, i).clips]
    assert 0.4 < np.mean(flips) < 0.6


def test_three_branches_of_a_third_each_are_drawn_alike(tmp_path):
    """0.333 three times is within the tolerance of 1, and the planner scales the branches
    to sum to 1: each takes a third, the last no more than the others."""
    third = [{"prob": 0.333, "config": [{"flip": {"direction": d}}]}
             for d in ("horizontal", "vertical")] + [{"prob": 0.333, "config": []}]
    augmentation = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"shape": [36, 48]}}]},
        {"name": "three", "branch_type": "random", "inputs": ["r"], "outputs": ["out"],
         "branches": third},
    ]
    plan = make_plan(tmp_path, videos=fake_videos(900), augmentation=augmentation,
                     sampling={"videos_per_batch": 4, "frames_per_video": 2})
    counts = np.bincount([int(dict(c.branches)["three"]) for epoch in (0, 1)
                          for i in range(plan.iterations_per_epoch)
                          for c in plan.view_plan(epoch, i).clips], minlength=3)
    assert scistats.chisquare(counts).pvalue > 0.01
    with pytest.raises(ConfigError, match=r"sum to 1 \(within 0.001\), got 0.99"):
        make_plan(tmp_path, augmentation=[augmentation[0], {
            **augmentation[1], "branches": [{**third[0], "prob": 0.66}, third[1]]}])


def test_multi_and_merge_streams(tmp_path):
    augmentation = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"shape": [36, 48]}}]},
        {"name": "views", "branch_type": "multi", "inputs": ["r"], "outputs": ["a", "b"],
         "config": [{"random_crop": {"size": [16, 16]}}]},
        {"name": "join", "branch_type": "merge", "inputs": ["a", "b"], "outputs": ["ab"]},
    ]
    plan = make_plan(tmp_path, augmentation=augmentation)
    assert len(stream_paths(plan.cfg)) == 2
    view = plan.view_plan(0, 0)
    assert view.shape == (8, 4, 16, 16, 3)
    first, second = view.clips[0], view.clips[4]  # stream-major: clip 0 of each stream
    assert (first.video_index, first.stream) == (second.video_index, 0) or second.stream == 1
    assert first.video_index == second.video_index and first.frame_indices == second.frame_indices
    assert first.ops[0] == second.ops[0]  # the shared resize
    assert first.ops[1] != second.ops[1]  # independent crops of the two views
    paths = stream_paths(plan.cfg)  # r forks into a and b, which merge into ab
    assert [[(ps.step.name, ps.output_index) for ps in p.steps] for p in paths] == [
        [("resize", 0), ("views", 0), ("join", 0)], [("resize", 0), ("views", 1), ("join", 0)]]


def test_conditional_branch_by_epoch(tmp_path):
    augmentation = [
        {"name": "resize", "branch_type": "single", "inputs": ["frame"], "outputs": ["r"],
         "config": [{"resize": {"shape": [32, 32]}}]},
        {"name": "late_reverse", "branch_type": "conditional", "inputs": ["r"],
         "outputs": ["out"],
         "branches": [{"condition": "epoch >= 1", "config": [{"inv_sample": True}]},
                      {"condition": "else", "config": []}]},
    ]
    plan = make_plan(tmp_path, augmentation=augmentation)
    early = plan.view_plan(0, 0).clips[0]
    late = plan.view_plan(1, 0).clips[0]
    assert list(early.frame_indices) == sorted(early.frame_indices)
    assert list(late.frame_indices) == sorted(late.frame_indices, reverse=True)
    assert dict(late.branches)["late_reverse"] == "epoch >= 1"
    assert dict(early.branches)["late_reverse"] == "else"


@pytest.mark.parametrize("layout", ["NTHWC", "NCTHW"])
def test_view_sizes_are_exact(tmp_path, layout):
    plan = make_plan(tmp_path, sampling={"layout": layout})
    shape = plan.view_plan(0, 0).shape
    assert shape == ((4, 4, 32, 32, 3) if layout == "NTHWC" else (4, 3, 4, 32, 32))
    header = 128
    assert plan.view_nbytes(0, 0) == header + int(np.prod(shape))
    last = plan.view_plan(0, 2).shape  # 10 videos: the epoch's last batch has 2
    assert last[0] == 2 and plan.view_nbytes(0, 2) == header + int(np.prod(last))


def test_plan_report_counts_sharing(tmp_path):
    from sandfs.plan.report import plan_report

    videos = fake_videos(8)
    identical = [make_plan(tmp_path, videos=videos, task=f"t{i}") for i in range(4)]
    report = plan_report(identical)
    window = report["windows"][0]
    assert window["views_by_task_count"] == {4: window["views"]}
    assert report["total"]["frames_decoded_independent"] == 4 * plan_report(
        identical[:1])["total"]["frames_decoded_independent"]
    assert report["savings"]["decode"] > 0.75  # one decode pass serves all four tasks


def test_a_checkpoint_round_trip_plans_the_same_and_an_old_version_is_ignored(tmp_path, caplog):
    from sandfs.plan.checkpoint import load_plan_state, save_plan_state
    from sandfs.plan.coordination import Coordination

    first = make_plan(tmp_path, k_epochs=2)
    views = [first.view_plan(epoch, 0) for epoch in range(4)]  # freezes windows 0 and 1
    save_plan_state(str(tmp_path), first.coordination.state())
    # after the restart another task shares the dataset: planned fresh, the pools would differ
    joined = load_task_config(write_config(tmp_path / "j.yaml", task_config(
        FAKE_DATASET, task="joined", sampling={"frames_per_video": 8, "frame_stride": 3})),
        check_paths=False)

    def replan(coordination: Coordination) -> TaskPlan:
        TaskPlan(joined, fake_videos(10), k_epochs=2, coordination=coordination)  # its identity
        return TaskPlan(first.cfg, fake_videos(10), k_epochs=2, coordination=coordination)

    fresh = replan(Coordination([first.cfg, joined]))
    assert [fresh.view_plan(epoch, 0) for epoch in range(4)] != views
    restored = Coordination([first.cfg, joined])
    restored.load(load_plan_state(str(tmp_path)))
    again = replan(restored)
    assert [again.view_plan(epoch, 0) for epoch in range(4)] == views

    old = first.coordination.state() | {"version": 1}
    save_plan_state(str(tmp_path), old)
    assert load_plan_state(str(tmp_path)) is None
    assert "ignoring the plan checkpoint" in caplog.text and "version 1" in caplog.text


def test_a_task_joining_at_mount_epoch_3_plans_its_epochs_into_the_mounts_windows(tmp_path):
    leader = make_plan(tmp_path, k_epochs=2, epochs=6)
    leader.plan_key(0)  # window 0 frozen before the join
    cfg = load_task_config(write_config(tmp_path / "j.yaml", task_config(
        FAKE_DATASET, task="joined", seed=7, epochs=6)), check_paths=False)
    leader.coordination.join(cfg, 3)
    joined = TaskPlan(cfg, fake_videos(10), k_epochs=2, coordination=leader.coordination)
    assert [joined.window_of(e) for e in range(6)] == [1, 2, 2, 3, 3, 4]
    assert list(joined.window_epochs(1)) == [0] and list(joined.window_epochs(2)) == [1, 2]
    # the same pool clips as the leader's epochs 3, 4 ...: the same frames (equal spans)
    for epoch in range(3):
        for video in range(10):
            assert joined.clip_frames(epoch, video, 0) == leader.clip_frames(epoch + 3, video, 0)
    # its own batch order all the same
    assert joined.batch_videos(0, 0) != leader.batch_videos(3, 0)
    # the offset is checkpointed: re-registered after a restart, the task plans the same
    from sandfs.plan.coordination import Coordination

    restored = Coordination([leader.cfg])
    restored.load(leader.coordination.state())
    restored.join(cfg, 0)
    again = TaskPlan(cfg, fake_videos(10), k_epochs=2, coordination=restored)
    assert again.epoch_offset == 3
    assert again.view_plan(1, 0) == joined.view_plan(1, 0)


def test_clips_of_a_window_share_their_equal_parts(tmp_path):
    """A window's clips hold one object for equal frame lists, op instances and branch
    records (a plan was 1,356 bytes a clip; Kinetics-400 is 1.2M clips a window)."""
    plan = make_plan(tmp_path, videos=fake_videos(40), epochs=2, k_epochs=2)
    clips = [c for i in range(plan.iterations_per_epoch) for e in range(2)
             for c in plan.view_plan(e, i).clips]
    for part in ("frame_indices", "ops", "step_depths", "branches"):
        values = [getattr(c, part) for c in clips]
        assert len({id(v) for v in values}) == len(set(values)), part


def test_the_interner_stays_bounded(monkeypatch):
    """Draws of continuous values never repeat: the table is cleared, never grows past its
    bound, and shares again from then on."""
    monkeypatch.setattr(interner_module, "INTERNED_MAX", 4)
    shared = interner_module.Interner()
    for n in range(10):
        shared(("b", n))
        assert len(shared._values) <= 4
    value = shared(("c", 1))
    assert shared(tuple(["c", 1])) is value
