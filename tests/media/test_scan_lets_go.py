"""A complete lazy scan lets go of what only the scan reads (what it found, kept for its
index; the shared facts' lookup) and gives the freed memory back
(docs/design.md#memory-beyond-the-plan)."""

from __future__ import annotations

import os
import threading

from sandfs.media import scan as scan_module
from sandfs.media.scan import scan_dataset, start_lazy_scan
from tests.media.test_scan_shared_facts import alike_and_other


def test_a_complete_lazy_scan_lets_go_of_its_results_then_trims(tmp_path, monkeypatch):
    alike_and_other(tmp_path / "videos")
    index = os.fspath(tmp_path / "scan.json")
    events, real = [], scan_module._Listing.let_go

    def let_go(listing):
        events.append(("saved", os.path.exists(index)))
        real(listing)
        events.append(("held", len(listing.found), sum(map(len, listing.shared.values()))))

    monkeypatch.setattr(scan_module._Listing, "let_go", let_go)
    monkeypatch.setattr(scan_module, "trim_free_memory", lambda: events.append(("trim",)))
    scan, thread = start_lazy_scan(tmp_path / "videos", [".mp4"], stop=threading.Event(),
                                   workers=1, index_path=index)
    scan.probes.wait_all()
    thread.join(10)
    assert events == [("saved", True), ("held", 0, 0), ("trim",)]
    assert all(scan.probes.known(f"{n}.mp4") is not None for n in "abcd")
    warm = scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=index)
    assert warm.num_probed == 0 and len(warm.videos) == 4  # the index was whole
