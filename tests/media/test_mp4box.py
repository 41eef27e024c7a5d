"""The MP4/MOV sample-table reader (`media/mp4box.py`): where it answers, it says what the
demuxing probe says; malformed boxes get a clear refusal (NotPlain: the demuxing probe decides)
in bounded memory, never a crash or a hang; and a table that lies is caught at first decode."""

from __future__ import annotations

import dataclasses
import random
import struct
import tracemalloc
from pathlib import Path

import pytest

from sandfs.media import mp4box, probe
from sandfs.media.decode import ScanMismatch, decode_frames
from sandfs.media.scan import scan_dataset
from sandfs.media.synth import write_test_video
from sandfs.media.types import PACKETS, MediaLimits, ProbeFacts

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"}


def demuxed(path: Path, monkeypatch) -> object:
    with monkeypatch.context() as patch:
        patch.setattr(probe, "SAMPLE_TABLE_SUFFIXES", ())
        return probe.probe_video(str(path), MediaLimits())


def tables(path: Path) -> ProbeFacts | None:
    return probe._from_sample_tables(str(path), None, MediaLimits())


def test_where_the_tables_answer_they_say_what_the_packets_say(corpus, monkeypatch):
    answered = set()
    for rel_path, _ in sorted(corpus.files.items()):
        path = corpus.root / rel_path
        if path.suffix not in (".mp4", ".mov") or path.is_symlink() or not path.is_file():
            continue
        fast = tables(path)
        if fast is None:
            continue
        answered.add(rel_path)
        slow = demuxed(path, monkeypatch)
        assert isinstance(slow, ProbeFacts), (rel_path, slow)
        assert fast.counted_by == mp4box.SAMPLE_TABLES
        assert dataclasses.replace(fast, counted_by=slow.counted_by) == slow, rel_path
    # plain H.264: answered; 4:4:4, 10-bit, rotated, truncated: left to the demuxing probe
    assert {"valid/plain.mp4", "valid/vfr.mp4", "valid/portrait_64x96.mp4"} <= answered
    assert not answered & {"valid/odd_321x241.mp4", "valid/h264_10bit.mp4",
                           "valid/rotate90.mp4"}


@pytest.mark.parametrize("options", [{}, {"bframes": 3, "b_adapt": False},
                                     {"container_options": {"movflags": "faststart"}}],
                         ids=["plain", "b-frames", "faststart"])
@pytest.mark.parametrize("suffix", [".mp4", ".mov"])
def test_b_frames_and_layouts_match_the_demuxing_probe(tmp_path, monkeypatch, options, suffix):
    path = tmp_path / f"v{suffix}"
    write_test_video(path, num_frames=50, width=64, height=48, noise=True, gop=12, **options)
    fast = tables(path)
    assert fast is not None
    assert dataclasses.replace(fast, counted_by=PACKETS) == demuxed(path, monkeypatch)


# -- malformed boxes --------------------------------------------------------------------------


def box_spots(data: bytes) -> list[tuple[bytes, int]]:
    """(type, offset of its header) of every box of the moov tree, the top level's too."""
    spots = []

    def walk(start: int, end: int) -> None:
        for kind, body, stop in mp4box._boxes(data, start, end):
            spots.append((kind, body - 8))
            if kind in CONTAINERS:
                walk(body, stop)

    walk(0, len(data))
    return spots


def mutants(data: bytes) -> list[bytes]:
    """The plain file cut short, with box lengths that lie (0, 1 with a huge 64-bit one, under
    a header, past the file), table counts of 2^32-1, and seeded random bytes in its moov."""
    cuts = [data[:n] for n in range(0, len(data), max(1, len(data) // 150))]
    lies = []
    for kind, at in box_spots(data):
        for length in (0, 4, 7, 0xFFFFFFFF):
            lies.append(data[:at] + struct.pack(">I", length) + data[at + 4:])
        lies.append(data[:at] + struct.pack(">I", 1) + data[at + 4:at + 8]
                    + struct.pack(">Q", 1 << 62) + data[at + 16:])
        if kind in {b"stts", b"ctts", b"stss", b"stsc", b"stsz", b"stco", b"elst", b"stsd"}:
            count_at = at + (16 if kind == b"stsz" else 12)
            lies.append(data[:count_at] + b"\xff\xff\xff\xff" + data[count_at + 4:])
    moov = next(at for kind, at in box_spots(data) if kind == b"moov")
    rng = random.Random(37)
    flips = []
    for _ in range(300):
        mutant = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutant[rng.randrange(moov, len(data))] = rng.randrange(256)
        flips.append(bytes(mutant))
    return cuts + lies + flips


def test_malformed_boxes_get_a_clear_refusal_in_bounded_memory(tmp_path):
    source = tmp_path / "plain.mp4"
    write_test_video(source, num_frames=30, width=64, height=48, gop=12,
                     container_options={"movflags": "faststart"})
    data = source.read_bytes()
    path = tmp_path / "mutant.mp4"
    refused = answered = 0
    tracemalloc.start()
    try:
        for mutant in mutants(data):
            path.write_bytes(mutant)
            with path.open("rb") as file:
                try:
                    facts = mp4box.sample_table_facts(file, MediaLimits())
                except mp4box.NotPlain as refusal:
                    assert str(refusal)
                    refused += 1
                else:
                    assert facts.num_frames <= MediaLimits().max_frames
                    answered += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused > 300 and answered  # some random bytes land where nothing checks them
    assert peak < 8 << 20, peak  # no table of 2^32 rows was ever made


def test_a_truncated_file_gets_the_demuxing_probes_refusal(tmp_path, monkeypatch):
    path = tmp_path / "cut.mp4"
    write_test_video(path, num_frames=40, width=64, height=48, noise=True, gop=12,
                     container_options={"movflags": "faststart"})
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 7 // 10])  # the moov is whole
    assert tables(path) is None
    refusal = probe.probe_video(str(path), MediaLimits())
    assert refusal == demuxed(path, monkeypatch) and refusal.reason == "corrupt_frames"


def test_a_table_that_lies_about_the_picture_fails_at_first_decode(tmp_path):
    """The tables are not checked by a decoder at probe time: a frame of another size than
    they said fails its decode (ScanMismatch: EIO for the views that need it)."""
    root = tmp_path / "data"
    root.mkdir()
    path = root / "lying.mp4"
    write_test_video(path, num_frames=20, width=64, height=48, gop=12)
    data = bytearray(path.read_bytes())
    entry = data.index(b"avc1", data.index(b"stsd")) + 4  # the entry's body: width at 24
    assert struct.unpack_from(">H", data, entry + 24)[0] == 64
    struct.pack_into(">H", data, entry + 24, 32)
    path.write_bytes(bytes(data))
    (video,) = scan_dataset(root, [".mp4"]).videos
    assert video.width == 32  # what the tables said
    with pytest.raises(ScanMismatch, match="64x48 frame"):
        decode_frames(video, [0])
