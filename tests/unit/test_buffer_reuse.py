"""A new batch is filled in the buffer of a batch every reader has read (fresh pages cost the
kernel a zeroing each), never in one anything can still read: a reader's open file keeps the
memoryview it was served, a reply in flight a slice of it."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

from sandfs.npy import npy_header
from sandfs.plan.window import view_key
from sandfs.sched import board as board_module
from sandfs.sched.board import BatchBoard, ReadyView, ViewState
from sandfs.sched.carry import CarryBook
from sandfs.sched.memory import MemoryLedger
from sandfs.sched.ondemand import OnDemandObjects
from sandfs.sched.windows import WindowBook
from sandfs.service import ViewService
from sandfs.stats import Stats
from tests.helpers.harness import task_config, write_config
from tests.helpers.operations import CTX, Client, serving
from tests.helpers.plans import build_plan, fake_videos, make_plan
from tests.helpers.reference import reference_view

# 10 videos, 4 a batch: iterations 0 and 1 of an epoch hold 4 clips, iteration 2 two
FULL, SHORT = (0, 0), (0, 2)
MORE_FULL = [(0, 1), (1, 0), (1, 1), (2, 0)]


@pytest.fixture
def plan(tmp_path):
    return make_plan(tmp_path, videos=fake_videos(10))


REREAD_KEPT = board_module.REREAD_KEPT


@pytest.fixture(autouse=True)
def every_read_batch_reusable(monkeypatch):
    """The buffer mechanics, with no read batch kept back for a second read (that rule has its
    own test, `test_the_batches_read_last_stay_for_a_second_read`)."""
    monkeypatch.setattr(board_module, "REREAD_KEPT", 0)


def planned(board: BatchBoard, plan, where: tuple[int, int]):
    key = view_key(plan, *where)
    board.plan(key, ViewState.planned(plan, *where))
    return key


def made(board: BatchBoard, plan, where: tuple[int, int], value: int, readers=("t",)):
    """A batch filled with `value` and ready for `readers`, in a read batch's buffer if one
    may be reused (as the ledger asks when memory is short)."""
    key = planned(board, plan, where)
    board.reuse_buffer(key)
    board.buffer(key)[...] = value
    state = board.views[key]
    state.in_memory = set(range(state.slots))
    assert board.complete_if_full(key, lambda: set(readers)) is state
    return key


def read_and_close(board: BatchBoard, key, task: str = "t") -> bytes:
    return bytes(board.take(key, task).data)


def address(board: BatchBoard, key) -> int:
    """Where a batch's buffer lies (an int: holding the buffer itself would pin it)."""
    holder = board.ready.get(key) or board.views[key].buffer
    return holder.whole.ctypes.data


def expected_bytes(plan, where: tuple[int, int], value: int) -> bytes:
    view = plan.view_plan(*where)
    return npy_header(view.shape, view.dtype) + np.full(view.shape, value, view.dtype).tobytes()


def test_a_new_batch_is_filled_in_the_buffer_of_one_every_reader_has_read(plan):
    board = BatchBoard()
    first = made(board, plan, FULL, 7)
    where, used = address(board, first), board.memory_bytes
    read_and_close(board, first)  # read, and closed: nothing holds it
    second = made(board, plan, MORE_FULL[0], 9)
    assert first not in board.ready and address(board, second) == where
    assert board.memory_bytes == used  # its memory moved to the new batch; nothing more taken
    served = np.load(io.BytesIO(board.take(second, "t").data))
    view = plan.view_plan(*MORE_FULL[0])
    assert served.shape == view.shape and served.dtype == view.dtype and (served == 9).all()


@pytest.mark.parametrize("holder", ["open_file", "reply_in_flight", "numpy_view"])
def test_a_batch_a_reader_still_holds_is_never_overwritten(plan, holder):
    """operations.py keeps the memoryview it was served on the open file (`handle.data`) and
    answers each read with `memoryview(handle.data)[off:off + size]`, which shares that
    memoryview's buffer, not the object: either one alone must keep the batch's bytes."""
    board = BatchBoard()
    first = made(board, plan, FULL, 7)
    data = board.take(first, "t").data  # every reader has read it: only the reference stays
    held = {"open_file": data, "reply_in_flight": memoryview(data)[100:200],
            "numpy_view": np.frombuffer(data, np.uint8)[200:]}[holder]
    del data
    where = address(board, first)
    for value, more in enumerate(MORE_FULL[:2], 1):
        key = made(board, plan, more, value)
        assert address(board, key) != where
        read_and_close(board, key)  # read and closed: the next batch may take this one
    assert first in board.ready
    whole = expected_bytes(plan, FULL, 7)
    assert bytes(held) == {"open_file": whole, "reply_in_flight": whole[100:200],
                           "numpy_view": whole[200:]}[holder]
    del held  # the reader is done: now its buffer is free
    assert address(board, made(board, plan, MORE_FULL[2], 3)) == where


def test_a_batch_of_another_size_is_not_reused(plan):
    board = BatchBoard()
    short = made(board, plan, SHORT, 7)
    read_and_close(board, short)
    full = made(board, plan, FULL, 9)
    assert short in board.ready and address(board, full) != address(board, short)
    assert board.memory_bytes == board.ready[short].nbytes + board.ready[full].nbytes


def test_a_batch_not_read_by_every_reader_is_not_reused(plan):
    board = BatchBoard()
    unread = made(board, plan, FULL, 7, readers=("t", "u"))
    read_and_close(board, unread)  # "u" has still to read it
    later = made(board, plan, MORE_FULL[0], 9)
    assert address(board, later) != address(board, unread)
    assert bytes(board.take(unread, "u").data) == expected_bytes(plan, FULL, 7)


def test_a_batch_that_failed_while_being_filled_gives_no_buffer(plan):
    board = BatchBoard()
    failed = planned(board, plan, FULL)
    target = board.buffer(failed)  # a failing job's worker may still write into it
    board.fail(failed, "broken video")
    assert failed not in board.ready and board.state_of(failed) == "failed"
    later = planned(board, plan, MORE_FULL[0])
    assert not np.shares_memory(board.buffer(later), target)


def test_the_ledger_takes_a_read_batch_s_buffer_before_evicting_any(plan, monkeypatch):
    """With memory full, reserving a batch takes a read batch's buffer of its size and frees
    nothing: evicting one first would leave the new batch fresh pages to zero. Even the
    batches read last, which free memory would spare, give theirs: they would be evicted."""
    monkeypatch.setattr(board_module, "REREAD_KEPT", REREAD_KEPT)
    board = BatchBoard()
    read = [made(board, plan, where, 1) for where in (FULL, MORE_FULL[0])]
    for key in read:
        read_and_close(board, key)
    oldest = address(board, read[0])
    ledger = MemoryLedger(board.memory_bytes, book=WindowBook([plan]), board=board,
                          carry=CarryBook(None, memory_limit_bytes=1 << 30, decode_ahead=0),
                          running={}, store=None)
    new = planned(board, plan, MORE_FULL[1])
    assert ledger.reserve_buffer(new, ledger.free_bytes, demanded=False) == (True, 0)
    assert list(board.ready) == [read[1]] and address(board, new) == oldest
    assert ledger.free_bytes == 0


def test_with_memory_free_a_new_batch_still_takes_a_read_batchs_buffer(plan):
    """Its pages are mapped already: fresh ones cost more to touch (on a VM that gives free
    memory back to its host) than building the read batch again costs whoever re-reads it."""
    board = BatchBoard()
    read = made(board, plan, FULL, 1)
    read_and_close(board, read)
    start = np.asarray(board.ready[read].whole).ctypes.data  # no reference kept: it would share
    end = start + board.ready[read].nbytes
    ledger = MemoryLedger(10 * board.memory_bytes, book=WindowBook([plan]), board=board,
                          carry=CarryBook(None, memory_limit_bytes=1 << 30, decode_ahead=0),
                          running={}, store=None)
    new = planned(board, plan, MORE_FULL[0])
    free = ledger.free_bytes
    assert ledger.reserve_buffer(new, free, demanded=False) == (True, free)  # nothing more
    assert read not in board.ready
    assert start <= board.buffer(new).ctypes.data < end


def test_the_batches_read_last_stay_for_a_second_read(plan, monkeypatch):
    """A client that opens a view again right after reading it (a retry, a header read before
    the data) finds it in memory: the REREAD_KEPT batches read last give no buffer away, the
    one read before them does."""
    monkeypatch.setattr(board_module, "REREAD_KEPT", REREAD_KEPT)
    board = BatchBoard()
    read = [made(board, plan, where, 1) for where in (FULL, *MORE_FULL[:REREAD_KEPT])]
    for key in read:
        read_and_close(board, key)
    oldest = address(board, read[0])
    new = made(board, plan, MORE_FULL[REREAD_KEPT], 5)
    assert address(board, new) == oldest
    assert [key for key in read if key in board.ready] == read[1:]
    again = made(board, plan, MORE_FULL[REREAD_KEPT + 1], 6)  # the last read ones stay
    assert address(board, again) not in {address(board, key) for key in read[1:]}


def test_a_ready_batch_counts_its_own_references_only():
    """`unshared` compares with what a batch held by the board alone counts: any one more
    reference, of any kind, makes it shared."""
    ready = ReadyView(np.empty(64, np.uint8), set())
    assert ready.unshared()
    view = ready.data
    assert not ready.unshared()
    piece = view[8:16]
    del view
    assert not ready.unshared()
    del piece
    assert ready.unshared()


async def test_a_view_held_open_reads_its_own_bytes_after_later_batches(
        tmp_path, dataset_dir, monkeypatch):
    """Through the FUSE handlers: a reader keeps a view open, half read, while the task reads
    on and later batches take the buffers of those read before; the rest of the held view is
    still its own bytes."""
    reused = []
    real = board_module.npy_buffer
    monkeypatch.setattr(board_module, "npy_buffer", lambda shape, dtype, into=None: (
        reused.append(into is not None), real(shape, dtype, into))[1])
    plan = build_plan(write_config(tmp_path / "t.yaml", task_config(dataset_dir)))
    one = plan.view_nbytes(0, 0)
    service = ViewService([plan], engine=OnDemandObjects(workers=1, memory_budget_bytes=64 << 20),
                          stats=Stats(), memory_limit_bytes=4 * one)  # memory short
    later = [(e, i) for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)][1:]
    async with serving(service) as ops:
        client = Client(ops)
        fh = (await ops.open(await client.inode("t0/0/0/view"), os.O_RDONLY, CTX)).fh
        head = await ops.read(fh, 0, one // 2)  # a reply not sent yet: held too
        for epoch, iteration in later:
            assert await client.read(f"t0/{epoch}/{iteration}/view") == \
                reference_view(plan, epoch, iteration)
        rest = bytes(await ops.read(fh, one // 2, one))
        await ops.release(fh)
    assert bytes(head) + rest == reference_view(plan, 0, 0)
    assert any(reused), "no batch took a read batch's buffer: the test shows nothing"
