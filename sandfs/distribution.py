"""What sandfs is called where it is installed.

The distribution (what pip installs, lists and uninstalls) is `sandfs-views`: the name `sandfs`
on PyPI belongs to an unrelated project ("a lazy, copy-on-write sandbox filesystem for agents")
that also installs an import package named `sandfs`. The two cannot share an environment: each
overwrites the other's `sandfs/__init__.py`. `foreign_sandfs()` tells the CLI when that project
is installed beside this one, so it says so instead of failing somewhere odd.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "sandfs-views"
SUMMARY_MARK = "FUSE view filesystem"  # in this project's Summary, under either name


def foreign_sandfs() -> str | None:
    """Why this environment holds PyPI's unrelated `sandfs` project as well, or None."""
    try:
        other = metadata.distribution("sandfs")
    except metadata.PackageNotFoundError:
        return None
    if SUMMARY_MARK in (other.metadata.get("Summary") or ""):
        return None  # this project, installed under its former name
    return (f"this environment also holds the unrelated PyPI project 'sandfs' "
            f"{other.version}, which installs an import package of the same name: remove it "
            f"(pip uninstall sandfs) and reinstall {DISTRIBUTION}")
