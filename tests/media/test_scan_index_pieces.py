"""The scan index's columns are written a piece of rows at a time, the same bytes as its
document dumped whole: at 250,000 rows the whole text took ~220 MB at once at the scan's end."""

from __future__ import annotations

from sandfs.fileio import read_checked_json, write_checked_json
from sandfs.media import scan_index
from sandfs.media.scan import scan_dataset
from tests.media.test_scan_shared_facts import alike_and_other


def test_the_index_written_in_pieces_is_its_document_dumped_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(scan_index, "ROWS_PER_PIECE", 3)  # 4 videos: two pieces a column
    alike_and_other(tmp_path / "videos")
    index = tmp_path / "scan.json"
    scan_dataset(tmp_path / "videos", [".mp4"], workers=1, index_path=index)
    document = read_checked_json(str(index))
    assert document["count"] == 4 and list(document)[-1] == "rows"
    assert len(document["rows"]["rel_path"].split("\0")) == 4
    write_checked_json(str(tmp_path / "whole.json"), document)
    assert index.read_bytes() == (tmp_path / "whole.json").read_bytes()
