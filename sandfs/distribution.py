"""What sandfs is called where it is installed.

The distribution (what pip installs, lists and uninstalls) is `sandfs-views`: the name `sandfs`
on PyPI belongs to an unrelated project ("a lazy, copy-on-write sandbox filesystem for agents")
that also installs an import package named `sandfs`. The two cannot share an environment: each
overwrites the other's `sandfs/__init__.py`. `foreign_sandfs()` tells the CLI when that project
is installed beside this one, so it says so instead of failing somewhere odd. It reads the
folder this package was imported from, not importlib.metadata (35-45 ms to import: a fifth of
what `sandfs mount` takes to start serving).
"""

from __future__ import annotations

import glob
import os

DISTRIBUTION = "sandfs-views"
SUMMARY_MARK = "FUSE view filesystem"  # in this project's Summary, under either name


def foreign_sandfs(where: str | None = None) -> str | None:
    """Why the folder holding this `sandfs` package (or `where`) also holds PyPI's unrelated
    `sandfs` project, or None."""
    where = where or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for info in glob.glob(os.path.join(glob.escape(where), "sandfs-*.dist-info")):
        summary = _summary(os.path.join(info, "METADATA"))
        if summary is not None and SUMMARY_MARK not in summary:
            version = os.path.basename(info).removeprefix("sandfs-").removesuffix(".dist-info")
            return (f"{where} also holds the unrelated PyPI project 'sandfs' {version}, which "
                    f"installs an import package of the same name: remove it "
                    f"(pip uninstall sandfs) and reinstall {DISTRIBUTION}")
    return None  # none, or this project installed under its former name


def _summary(metadata_path: str) -> str | None:
    try:
        with open(metadata_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Summary:"):
                    return line.removeprefix("Summary:").strip()
                if not line.strip():
                    break  # the headers end at the first blank line
    except OSError:
        return None
    return ""
