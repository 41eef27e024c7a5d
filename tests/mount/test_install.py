"""Installing sandfs as the docs say, outside the checkout: the wheel, built from the tracked
sources, goes into a fresh venv by the docs' own `pip install` lines (offline: `--no-index`,
with this venv's dependencies made visible to it), then `sandfs --version`, `import
sandfs.torch` and a real mount work there. And the docs never install PyPI's unrelated
`sandfs` project."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from sandfs.distribution import DISTRIBUTION, foreign_sandfs
from tests.helpers.harness import forgiving_teardown, require_fuse, task_config, write_config
from tests.helpers.mountwatch import is_mounted

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
INSTALL_LINE = re.compile(r"^\s*(pip install .*?)\s*(#.*)?$")


def doc_install_lines() -> list[str]:
    """Every `pip install` line of a code block in the docs that installs sandfs."""
    lines = []
    for doc in DOCS:
        in_block = False
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("```"):
                in_block = not in_block
            elif in_block and (match := INSTALL_LINE.match(line)) and "SANDFS_SRC" in line:
                lines.append(match.group(1))
    return lines


def test_the_docs_install_sandfs_by_its_source_never_by_the_pypi_name():
    """`pip install sandfs` would fetch PyPI's unrelated project: no doc says it."""
    bare = re.compile(r"pip install\s+[\"']?sandfs\b(?!-views)")
    said = [f"{doc.name}: {line.strip()}" for doc in DOCS
            for line in doc.read_text().splitlines() if bare.search(line)]
    assert not said
    assert {"$SANDFS_SRC", "$SANDFS_SRC[ray]", "$SANDFS_SRC[remote]"} <= {
        line.split()[-1].strip("\"'") for line in doc_install_lines()}


def build_wheel(dest: Path) -> Path:
    """The wheel of the tracked sources (a copy: the build leaves nothing in the checkout)."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "sandfs", src / "sandfs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "-w", str(dest / "dist"), str(src)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (dest / "dist").glob("sandfs_views-*.whl")
    return wheel


def fresh_venv(dest: Path) -> Path:
    """A new venv that sees this venv's third-party packages (a folder of links to them, on
    its path through a .pth file) but not sandfs itself: pip finds the dependencies installed
    and needs no index."""
    venv = dest / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    ours = re.compile(r"^(sandfs|__editable__|_?_?editable___sandfs|distutils-precedence)",
                      re.IGNORECASE)
    deps = dest / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not ours.match(entry.name) and entry.name not in ("pip", "setuptools"):
            (deps / entry.name).symlink_to(entry)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "zz_test_deps.pth").write_text(f"{deps}\n")
    return venv


def run_in(venv: Path, command: str, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "HOME": os.environ["HOME"],
             "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env})
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_the_docs_install_lines_work_in_a_fresh_venv(tmp_path, dataset_dir):
    require_fuse()
    wheel = build_wheel(tmp_path)
    venv = fresh_venv(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sandfs").mkdir(parents=True)  # a folder named like the package, as a clone's
    for line in dict.fromkeys(doc_install_lines()):  # each distinct line once
        run_in(venv, line, elsewhere, SANDFS_SRC=str(wheel))
    listed = run_in(venv, "pip list --format=freeze", elsewhere)
    assert f"{DISTRIBUTION}==" in listed and "\nsandfs==" not in f"\n{listed}"
    assert run_in(venv, "sandfs --version", elsewhere).startswith("sandfs ")
    where = run_in(venv, "python -c 'import sandfs.torch, sandfs; print(sandfs.__file__)'",
                   tmp_path)
    assert where.startswith(str(venv))  # the installed package, not the checkout's
    config = write_config(tmp_path / "task.yaml", task_config(dataset_dir))
    mnt, cache = tmp_path / "mnt", tmp_path / "cache"
    mnt.mkdir()
    try:
        run_in(venv, f"sandfs mount {mnt} --config {config} --cache-dir {cache}", elsewhere)
        view = run_in(venv, "python -c 'import sys, sandfs.reading as r; "
                      f"print(r.read_view(sys.argv[1]).shape)' {mnt}/t0/0/0/view", elsewhere)
        assert view.strip() == str(np.load(mnt / "t0/0/0/view").shape)
        run_in(venv, f"sandfs unmount {mnt}", elsewhere)
        assert not is_mounted(mnt)
    finally:
        forgiving_teardown(mnt, None)


def test_the_pypi_sandfs_beside_it_is_named_not_a_strange_failure(tmp_path):
    """PyPI's `sandfs` installs an import package of the same name: with its dist-info beside
    this package the command says so and what to do."""
    (tmp_path / "sandfs").symlink_to(REPO / "sandfs")
    info = tmp_path / "sandfs-0.8.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sandfs\nVersion: 0.8.0\n"
                                   "Summary: A lazy, copy-on-write sandbox filesystem\n")
    done = subprocess.run([sys.executable, "-P", "-m", "sandfs", "status", str(tmp_path)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1
    assert "unrelated PyPI project 'sandfs' 0.8.0" in done.stderr
    assert "pip uninstall sandfs" in done.stderr
    (info / "METADATA").write_text("Name: sandfs\nSummary: A FUSE view filesystem that ...\n")
    assert foreign_sandfs(str(tmp_path)) is None  # this project under its former name
