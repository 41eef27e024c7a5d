"""A video's kept clips as bits over its uses (`sched/objects.py` `KeptClips`, `kept_window`):
admission asks for each pending clip of a job, on the event loop, so an ask must not walk the
video's uses; bits past the 32nd of a narrow index column are not lost."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from sandfs.plan.window import ClipUse, ViewKey
from sandfs.sched.objects import KeptClips, Spot, kept_window


class Walked(Sequence[ClipUse]):
    """A video's uses that count how often they are walked."""

    def __init__(self, uses: list[ClipUse]) -> None:
        self.uses, self.walks = uses, 0

    def __getitem__(self, index):  # type: ignore[override]
        return self.uses[index]

    def __len__(self) -> int:
        return len(self.uses)

    def __iter__(self) -> Iterator[ClipUse]:
        self.walks += 1
        return iter(self.uses)


def uses(count: int) -> list[ClipUse]:
    return [ClipUse(ViewKey("p", 0, b), b % 8, None, (("a", b),)) for b in range(count)]


def test_asking_for_each_of_a_job_s_clips_walks_the_uses_once():
    walked = Walked(uses(200))
    clips = KeptClips(walked, sum(1 << i for i in range(0, 200, 2)))  # half kept
    assert "spot" not in clips and walked.walks == 0
    assert [Spot.of(u) in clips for u in walked.uses] == [i % 2 == 0 for i in range(200)]
    first = walked.walks
    assert sum(Spot.of(u) in clips for u in walked.uses) == 100
    assert walked.walks == first  # found at the first ask, not walked again (O(uses²) a job)
    assert Spot(ViewKey("p", 0, 2), 3) not in clips  # a kept batch, another slot
    assert len(clips) == 100 and set(clips) == {Spot.of(u) for u in walked.uses[::2]}


def test_a_use_past_the_32nd_of_an_int32_column_keeps_its_bit():
    video = uses(50)
    within = np.array([0, 31, 40, 49], np.int32)
    kept = kept_window(["v"], [video], np.zeros(4, np.int32), within)
    assert set(kept["v"].clips) == {Spot.of(video[i]) for i in (0, 31, 40, 49)}
