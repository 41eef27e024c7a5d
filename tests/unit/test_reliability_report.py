"""scripts/reliability.py sums what the measuring tests recorded, and only that."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.helpers.reliability import REPORT_ENV, record

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability.py"


def load_script():
    spec = importlib.util.spec_from_file_location("reliability_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_records_are_appended_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(REPORT_ENV, raising=False)
    record("kill9", cycles=3)  # nowhere to write: nothing happens
    report = tmp_path / "counts.jsonl"
    monkeypatch.setenv(REPORT_ENV, str(report))
    record("kill9", cycles=3, wrong_views=0)
    record("kill9", cycles=50, wrong_views=1)
    record("permission_probes", tried=12, leaked=0)
    script = load_script()
    assert script.REPORT_ENV == REPORT_ENV
    assert script.summed(report.read_text().splitlines()) == {
        "kill9": {"cycles": 53, "wrong_views": 1, "runs": 2},
        "permission_probes": {"tried": 12, "leaked": 0, "runs": 1},
    }
    assert json.loads(report.read_text().splitlines()[0]) == {
        "figure": "kill9", "cycles": 3, "wrong_views": 0}


def test_every_measuring_test_exists_and_records():
    root = SCRIPT.parent.parent
    for node in load_script().MEASURING_TESTS:
        path, name = node.split("::")
        text = (root / path).read_text()
        assert f"def {name}(" in text, node
        assert "record(" in text, node
