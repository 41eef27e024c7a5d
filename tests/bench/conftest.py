"""The benchmarks are scripts, not a package: their folder goes on sys.path for these tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
