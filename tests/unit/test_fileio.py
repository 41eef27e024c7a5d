"""atomic_write: a reader sees the old file or the new one, and a failed write leaves nothing."""

from __future__ import annotations

import json
import os
import stat

import pytest

from sandfs.fileio import (
    CHECKSUM_KEY,
    DAMAGED,
    DamagedFile,
    atomic_write,
    read_checked_json,
    remove_leftover_temps,
    write_checked_json,
)


def test_atomic_write_replaces_the_file_private_and_whole(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    atomic_write(str(path), b"new" * 100_000)
    assert path.read_bytes() == b"new" * 100_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_bytes(b"old")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic_write(str(path), b"new")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_link_in_the_temp_files_place_is_not_followed(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    monkeypatch.setattr("secrets.token_hex", lambda n: "fixed")
    (tmp_path / ".state.json.fixed.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic_write(str(tmp_path / "state.json"), b"new")
    assert victim.read_bytes() == b"precious"


def test_leftover_temps_of_a_killed_writer_are_removed(tmp_path):
    (tmp_path / ".state.json.1a2b.tmp").write_bytes(b"half")
    (tmp_path / ".other.json.1a2b.tmp").write_bytes(b"not ours")
    assert remove_leftover_temps(str(tmp_path / "state.json")) == 1
    assert os.listdir(tmp_path) == [".other.json.1a2b.tmp"]


@pytest.mark.parametrize("document", [{}, {"a": 1, "b": [1, 2], "c": {"d": "x"}}])
def test_a_checked_json_file_reads_back_and_stays_json(tmp_path, document):
    path = str(tmp_path / "state.json")
    write_checked_json(path, document)
    assert read_checked_json(path) == document
    with open(path, encoding="utf-8") as f:
        assert json.load(f)[CHECKSUM_KEY]  # still plain JSON


def test_every_flipped_byte_of_a_checked_json_file_is_found(tmp_path):
    path = tmp_path / "state.json"
    write_checked_json(str(path), {"pool": 12345, "windows": [0, 1]})
    raw = path.read_bytes()
    found = DAMAGED.count
    for at in range(len(raw)):
        path.write_bytes(raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:])
        with pytest.raises(DamagedFile):
            read_checked_json(str(path))
    assert DAMAGED.count == found + len(raw)
    path.write_bytes(b'{"pool": 12345}')  # unchecked: a file of another writer
    with pytest.raises(DamagedFile):
        read_checked_json(str(path))
