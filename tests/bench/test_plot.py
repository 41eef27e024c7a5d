"""benchmarks/plot.py: PNG figures from fixed benchmark records; bad lines are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from plot import main, read_records, run_figures

FIXTURE = Path(__file__).parent / "fixtures" / "bench_records.jsonl"
FIGURES = {"throughput.png", "gpu_busy.png", "frames_decoded.png", "reuse.png"}


def test_every_figure_is_a_valid_png(tmp_path, capsys):
    assert main([str(FIXTURE), "--out-dir", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == FIGURES
    assert set(capsys.readouterr().out.split()) == {str(tmp_path / name) for name in FIGURES}
    for name in FIGURES:
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 300
            image.verify()


def test_figures_without_records_are_left_out_with_a_note(tmp_path, capsys):
    raw_only = tmp_path / "raw.jsonl"
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    raw_only.write_text("".join(json.dumps(r) + "\n" for r in lines
                                if r.get("mode") == "raw" and r["record"] == "run"))
    assert main([str(raw_only), "--out-dir", str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"throughput.png",
                                                               "frames_decoded.png"}
    assert "no records for reuse.png" in capsys.readouterr().err


@pytest.mark.parametrize(("line", "error"), [
    ("{not json", "bad.jsonl:2: not JSON"),
    ("[1, 2]", "bad.jsonl:2: expected an object with a 'record' key"),
    ('{"record": "run", "scenario": "single", "mode": "raw", "batches_per_s": 3}',
     "throughput.png: a record lacks a field"),
])
def test_bad_lines_are_named(tmp_path, capsys, line, error):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(FIXTURE.read_text().splitlines()[1] + "\n" + line + "\n")
    assert main([str(bad), "--out-dir", str(tmp_path / "out")]) == 1
    assert error in capsys.readouterr().err


def test_one_scenario_at_two_run_lengths_draws_as_two_groups(tmp_path):
    files = []
    for epochs, bps in ((10, 7.0), (30, 9.0)):
        path = tmp_path / f"e{epochs}.jsonl"
        path.write_text(json.dumps({"record": "params", "epochs": epochs}) + "\n" + json.dumps(
            {"record": "run", "scenario": "slowfast224", "mode": "raw", "system": "sandfs",
             "batches_per_s": bps}) + "\n")
        files.append(path)
    figures = run_figures(read_records(files), "batches_per_s", "raw")
    assert {s: f["sandfs"].median for s, f in figures.items()} == {
        "slowfast224\n10 epochs": 7.0, "slowfast224\n30 epochs": 9.0}
