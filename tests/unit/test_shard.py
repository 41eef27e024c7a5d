"""Rank shards (`dataset.sampling.shard`): torch DistributedSampler semantics on the plan."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest

from sandfs.config.loader import load_task_config
from sandfs.config.schema import Shard
from sandfs.config.yamlsafe import ConfigError
from sandfs.plan import shard_from_env
from sandfs.plan.coordination import Coordination
from sandfs.plan.shard import rank_task_name, shard_configs, shard_positions
from sandfs.plan.task import TaskPlan
from tests.helpers.harness import task_config, write_config
from tests.helpers.plans import fake_videos, make_plan

CASES = [(n, w, drop) for n in (1, 3, 7, 8, 10, 13) for w in (1, 2, 3, 4, 8, 16)
         for drop in (False, True)]


def torch_sampler_indices(n: int, world: int, rank: int, drop_last: bool) -> list[int]:
    """DistributedSampler.__iter__ without shuffling, as torch writes it."""
    indices = list(range(n))
    if drop_last and n % world:
        num_samples = math.ceil((n - world) / world)
    else:
        num_samples = math.ceil(n / world)
    total = num_samples * world
    if not drop_last:
        padding = total - len(indices)
        if padding <= len(indices):
            indices += indices[:padding]
        else:
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
    else:
        indices = indices[:total]
    return indices[rank:total:world]


@pytest.mark.parametrize(("n", "world", "drop_last"), CASES)
def test_ranks_cover_every_position_once_and_agree_with_torch(n, world, drop_last):
    per_rank = [shard_positions(n, Shard(world, r), drop_last).tolist() for r in range(world)]
    assert per_rank == [torch_sampler_indices(n, world, r, drop_last) for r in range(world)]
    assert len({len(p) for p in per_rank}) == 1  # the same length on every rank
    counts = Counter(pos for p in per_rank for pos in p)
    if drop_last:
        assert all(c == 1 for c in counts.values()) and n - len(counts) == n % world
    else:
        assert set(counts) == set(range(n))
        assert sum(counts.values()) - n == -n % world  # padding repeats: at most world - 1


def sharded_plans(tmp_path, world: int, n: int, *, drop_last: bool, per_batch: int = 2,
                  seed: int = 0) -> tuple[TaskPlan, list[TaskPlan]]:
    """A 1-rank plan and the `world` rank plans of the same task, planned as a mount would."""
    config = task_config(tmp_path / "videos", task="slowfast", seed=seed, epochs=3,
                         sampling={"videos_per_batch": per_batch, "drop_last": drop_last})
    cfg = load_task_config(write_config(tmp_path / "t.yaml", config), check_paths=False)
    single = TaskPlan(cfg, fake_videos(n), k_epochs=2)
    configs = shard_configs(cfg, world)
    coordination = Coordination(configs)
    ranks = [TaskPlan(c, fake_videos(n), k_epochs=2, coordination=coordination)
             for c in configs]
    return single, ranks


@pytest.mark.parametrize(("n", "world", "drop_last"), [(10, 4, False), (10, 4, True),
                                                       (3, 4, False), (12, 3, False)])
def test_a_rank_reads_its_positions_of_the_one_permutation_with_the_same_clips(
        tmp_path, n, world, drop_last):
    single, ranks = sharded_plans(tmp_path, world, n, drop_last=drop_last)
    assert [r.name for r in ranks] == [f"slowfast.r{r}" for r in range(world)]
    assert len({r.iterations_per_epoch for r in ranks}) == 1 and ranks[0].iterations_per_epoch
    for epoch in range(3):
        permutation = single.epoch_order(epoch)
        for rank, plan in enumerate(ranks):
            positions = shard_positions(n, Shard(world, rank), drop_last)
            assert plan.epoch_order(epoch).tolist() == permutation[positions].tolist()
            for iteration in range(plan.iterations_per_epoch):
                view = plan.view_plan(epoch, iteration)
                expected = [single.resolve_clip(epoch, iteration, c.video_index, c.sample)
                            [c.stream] for c in view.clips]
                assert list(view.clips) == expected  # whichever rank holds the video
        read = Counter(v for plan in ranks for i in range(plan.iterations_per_epoch)
                       for v in plan.batch_videos(epoch, i))
        if drop_last:
            assert max(read.values()) == 1 and n - len(read) < world
        else:
            assert set(read) == set(range(n)) and sum(read.values()) - n < world


def test_sharded_plans_are_deterministic_and_ranks_differ(tmp_path):
    _, first = sharded_plans(tmp_path, 4, 13, drop_last=False)
    _, again = sharded_plans(tmp_path, 4, 13, drop_last=False)
    for a, b in zip(first, again, strict=True):
        assert [a.view_plan(e, i) for e in range(3) for i in range(a.iterations_per_epoch)] == \
               [b.view_plan(e, i) for e in range(3) for i in range(b.iterations_per_epoch)]
    keys = {plan.plan_key(0) for plan in first}  # their views are distinct cached objects
    assert len(keys) == 4
    _, other_seed = sharded_plans(tmp_path, 4, 13, drop_last=False, seed=1)
    assert other_seed[0].epoch_order(0).tolist() != first[0].epoch_order(0).tolist()


SHARD_YAML = """task: t
seed: 0
epochs: 1
dataset:
  tag: train
  input_source: file
  video_dataset_path: videos
  sampling:
    videos_per_batch: 2
    frames_per_video: 4
    shard: {shard}
  augmentation:
    - {{name: crop, branch_type: single, inputs: [frame], outputs: [out],
       config: [{{random_crop: {{size: [8, 8]}}}}]}}
"""


def load_shard(tmp_path, shard: str):
    path = tmp_path / "t.yaml"
    path.write_text(SHARD_YAML.format(shard=shard))
    return load_task_config(path, check_paths=False).dataset.sampling.shard


def test_the_shard_config_is_read_and_checked(tmp_path):
    assert load_shard(tmp_path, "{world_size: 4, rank: 3}") == Shard(4, 3)
    assert load_shard(tmp_path, "null") is None
    bad = {"{world_size: 0, rank: 0}": r"t\.yaml:11:25: .*world_size: must be at least 1",
           "{world_size: 4, rank: 4}": r"t\.yaml:11:34: .*rank: must be less than world_size 4",
           "{world_size: 4, rank: -1}": r"t\.yaml:11:34: .*rank: must be at least 0",
           "{world_size: 4}": r"t\.yaml:11:5: .*shard.rank: required key is missing",
           "{world_size: 2, rank: 0, ranks: 1}": r"t\.yaml:11:.*unknown key 'ranks'"}
    for text, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_shard(tmp_path, text)


def test_shard_from_env_reads_torchrun_variables():
    assert shard_from_env({}) is None
    assert shard_from_env({"WORLD_SIZE": "4", "RANK": "3"}) == Shard(4, 3)
    assert rank_task_name("slowfast", Shard(4, 3)) == "slowfast.r3"
    for environ, message in (({"WORLD_SIZE": "4"}, "RANK is not set"),
                             ({"WORLD_SIZE": "4", "RANK": "4"}, "less than WORLD_SIZE=4"),
                             ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0: must be at least"),
                             ({"WORLD_SIZE": "two", "RANK": "0"}, "not an integer")):
        with pytest.raises(ValueError, match=message):
            shard_from_env(environ)


def test_a_rank_joining_a_live_mount_starts_at_epoch_0(tmp_path):
    """A plain task joining while another task on its dataset reads epoch 2 starts its
    windows there (it shares the frames being decoded); a rank never does: its clips must not
    depend on when it joined, or two runs of one job would differ."""
    from sandfs.sched.windows import Position
    from sandfs.tasks import TaskRegistry

    leader = make_plan(tmp_path, videos=fake_videos(12), epochs=5)
    registry = TaskRegistry([leader])
    at_epoch_2 = lambda name: Position(2, 0)  # noqa: E731
    joining = make_plan(tmp_path, videos=fake_videos(12), task="late", epochs=5).cfg
    assert registry.leading_epochs(joining, at_epoch_2) == {leader.identity.key: 2}
    sampling = replace(joining.dataset.sampling, shard=Shard(4, 1))
    rank = replace(joining, dataset=replace(joining.dataset, sampling=sampling))
    assert registry.leading_epochs(rank, at_epoch_2) == {}
