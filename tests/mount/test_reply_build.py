"""The pyfuse3 that serves the mount: the build of third_party/pyfuse3 (replies made without
the GIL) where setup could build it, and views byte-identical through it: whole, partial and
O_DIRECT reads from concurrent processes, and a reader killed in the middle of its reads."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pyfuse3
import pytest

from sandfs.fuse.mountpoint import replies_release_gil
from tests.helpers.plans import build_plan
from tests.helpers.reference import reference_view

# reads a view whole (plain or O_DIRECT), then in unaligned pieces; prints each view's digests
READER = """
import hashlib, os, random, sys
from sandfs.reading import open_view
rng = random.Random(int(sys.argv[1]))
paths = sys.argv[2:]
rng.shuffle(paths)
for path in paths:
    with open(open_view(path, rng.random() < 0.5), "rb", buffering=0) as f:
        whole = f.read()
    pieces, offset = [], 0
    with open(path, "rb", buffering=0) as f:
        while piece := os.pread(f.fileno(), rng.choice([1, 4095, 65537, 1 << 20]), offset):
            pieces.append(piece)
            offset += len(piece)
    print(path, hashlib.sha256(whole).hexdigest(), hashlib.sha256(b"".join(pieces)).hexdigest())
"""
# reads every view over and over until killed
SPINNER = """
import sys
while True:
    for path in sys.argv[1:]:
        with open(path, "rb", buffering=0) as f:
            while f.read(4096):
                pass
"""


def test_setup_installed_the_pyfuse3_whose_replies_release_the_gil():
    if replies_release_gil():
        assert "+sandfs." in version("pyfuse3")  # and pip knows it by its own version
        return
    failed = Path(sys.prefix) / ".pyfuse3-build-failed"
    if failed.exists():
        pytest.skip(f"setup could not build the patched pyfuse3: {failed.read_text().strip()}")
    pytest.fail(f"pyfuse3 {pyfuse3.__version__} is a stock build: scripts/setup.sh installs "
                f"the patched one (third_party/pyfuse3/install.sh {sys.prefix})")


def test_views_are_byte_identical_through_the_installed_pyfuse3(mounted, config_path):
    plan = build_plan(config_path)
    keys = [(e, i) for e in range(plan.epochs) for i in range(plan.iterations_per_epoch)]
    paths = {str(mounted.path("t0", str(e), str(i), "view")): (e, i) for e, i in keys}
    digests = {p: hashlib.sha256(reference_view(plan, *key)).hexdigest()
               for p, key in paths.items()}
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    spinner = subprocess.Popen([sys.executable, "-c", SPINNER, *paths], env=env)
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(seed), *paths], env=env,
                                stdout=subprocess.PIPE, text=True) for seed in range(6)]
    time.sleep(0.5)  # the spinner is inside its reads by then
    spinner.send_signal(signal.SIGKILL)
    spinner.wait(timeout=30)
    outputs = [reader.communicate(timeout=120) for reader in readers]
    assert [reader.returncode for reader in readers] == [0] * len(readers)
    lines = [line.split() for out, _ in outputs for line in out.splitlines()]
    assert len(lines) == len(readers) * len(paths)
    wrong = [path for path, whole, pieces in lines if {whole, pieces} != {digests[path]}]
    assert wrong == []
    with open(next(iter(paths)), "rb") as f:  # the mount still serves after the kill
        assert hashlib.sha256(f.read()).hexdigest() == digests[next(iter(paths))]
