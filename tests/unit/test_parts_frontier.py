"""A reader's frontier in a window planned in parts (`WindowParts.next`) after it went back:
the part past where it went back to is due while the workers are busy."""

from __future__ import annotations

from sandfs.sched.parts import WindowParts
from tests.helpers.plans import fake_videos, make_plan


def test_a_reader_back_before_a_batch_not_planned_has_its_part_due(tmp_path):
    """Batches 0, 30 and 31 planned; a reader at 30, then back at 0 (not ready: its position
    moves): the part of batch 1 is due, the workers busy."""
    plan = make_plan(tmp_path, videos=fake_videos(160), epochs=2, k_epochs=2)

    def videos(index: int) -> set[str]:
        return {plan.listed[i].path for i in plan.batch_slots(0, index)}

    parts = WindowParts(0, videos(0) | videos(30) | videos(31), [plan.name])

    def due(position: int) -> frozenset[str] | None:
        return parts.next([plan], {plan.name: position}, ahead=2, batches=1,
                          sweep=lambda: False)

    assert due(30) is None  # its frontier, 32, is 2 batches ahead
    assert due(0) == videos(1) - parts.planned
