"""The window book's index from a batch to its active window: `deadline_of`, `owners_of`,
`view` and `readers_of` look up one window, and agree with a walk of every window while
windows are added, extended, joined, released and dropped."""

from __future__ import annotations

import gc
import tracemalloc

from sandfs.plan.window import plan_window, view_key
from sandfs.sched.policy import NOT_NEEDED
from sandfs.sched.windows import WindowBook
from tests.helpers.plans import fake_videos, make_plan


def walked(book: WindowBook, key) -> tuple:
    """What the book's lookups answer, found by walking every active window."""
    readers = [r for w in book.windows.values() for r in w.readers.get(key, ())]
    ahead = [pos - at for task, pos in readers if task not in book.unread
             for at in (book.positions[task], *book.open_positions[task]) if pos >= at]
    views = [(i, w.views[key]) for i, w in book.windows.items() if key in w.views]
    return (min(ahead, default=NOT_NEEDED), {book.owners[t] for t, _ in readers},
            views[0] if views else None, {t for t, _ in readers})


def answered(book: WindowBook, key) -> tuple:
    return (book.deadline_of(key), book.owners_of([key]), book.view(key),
            book.readers_of(key))


def every_key(book: WindowBook, plans) -> list:
    return [view_key(p, e, i) for p in plans for e in range(p.epochs)
            for i in range(p.iterations_per_epoch)]


def test_lookups_agree_with_a_walk_of_every_window(tmp_path):
    for name in "abc":
        (tmp_path / name).mkdir()
    first = make_plan(tmp_path / "a", task="a", epochs=6, k_epochs=2)
    other = make_plan(tmp_path / "b", task="b", epochs=6, k_epochs=2, seed=3)
    twin = make_plan(tmp_path / "c", task="c", epochs=6, k_epochs=2)  # a's pipeline and seed
    book = WindowBook([first])
    plans = [first, other, twin]

    def check() -> None:
        for key in every_key(book, plans):
            assert answered(book, key) == walked(book, key), key

    lead = frozenset(first.listed[i].path for i in first.batch_slots(0, 0))
    book.add_window(plan_window([first], 0, lead=lead))
    book.opened("a", 0, 1, moves=True)
    check()
    book.extend(0, plan_window([first], 0, skip=lead))
    book.add_window(plan_window([first], 1))
    check()
    for joined in (other, twin):  # a new pipeline, then one sharing every batch
        book.add_task(joined)
        book.unread.discard(joined.name)
        for window in (0, 1):
            book.merge(window, plan_window([joined], window))
    book.opened("b", 1, 0, moves=True)
    check()
    assert book.readers_of(view_key(first, 0, 0)) == {"a", "c"}
    book.remove_task("b")
    check()
    book.drop_window(0)
    check()
    assert book.view(view_key(first, 0, 0)) is None
    assert book.view(view_key(first, 2, 0))[0] == 1


def test_a_lookup_reads_only_its_own_window(tmp_path):
    """Other windows are not walked: a window that cannot be read is never touched."""
    plan = make_plan(tmp_path, epochs=8, k_epochs=2)
    book = WindowBook([plan])
    for window in range(4):
        book.add_window(plan_window([plan], window))
    key = view_key(plan, 5, 1)  # window 2
    unreadable = book.windows[3]
    unreadable.readers, unreadable.views = None, None  # any walk over it raises
    assert book.deadline_of(key) == 5 * plan.iterations_per_epoch + 1
    assert book.view(key)[0] == 2 and book.readers_of(key) == {plan.name}
    assert book.owners_of([key]) == {book.owners[plan.name]}


def test_a_plan_key_in_two_windows_finds_each_batch_in_its_own(tmp_path):
    """Test views' plan key names no window: the index holds it for both, and a lookup
    still answers from the window the batch is in."""
    crop = {"name": "crop", "branch_type": "single", "inputs": ["frame"], "outputs": ["out"],
            "config": [{"random_crop": {"size": [32, 32]}}]}
    plan = make_plan(tmp_path, epochs=4, k_epochs=2, augmentation=[crop],
                     sampling={"samples_per_video": None, "test_views": {"clips": 2, "crops": 3}})
    assert plan.plan_key(0) == plan.plan_key(1)
    book = WindowBook([plan])
    for window in (0, 1):
        book.add_window(plan_window([plan], window))
    for key in every_key(book, [plan]):
        assert answered(book, key) == walked(book, key), key
    book.drop_window(0)
    assert book.view(view_key(plan, 0, 0)) is None
    assert book.view(view_key(plan, 2, 0))[0] == 1


def test_the_index_holds_a_few_plan_keys_not_a_key_a_batch(tmp_path):
    """A window's batches are rows whose keys are made when read: an index of them held a
    new key (and int) a batch, ~100 bytes, beside the plan."""
    plan = make_plan(tmp_path, fake_videos(3000), sampling={"videos_per_batch": 8})
    window = plan_window([plan], 0)
    book = WindowBook([plan])
    gc.collect()
    tracemalloc.start()
    try:
        book.add_window(window)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(window.readers) > 500
    assert held / len(window.readers) < 5, held
    key = next(iter(window.readers))
    assert book.view(key) == (0, window.views[key])
