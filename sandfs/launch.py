"""The command line that starts sandfs in a child process, whatever folder the caller is in.

`python -m sandfs` puts the working directory first on the module path: run from the folder
holding a clone (its `sandfs/` directory) it imports that folder, not the installed package
(a folder without `__init__.py` even wins over an editable install, whose finder is asked
last). `-P` keeps the working directory off the path, and PYTHONPATH loses any entry holding
another `sandfs` (Ray adds a job's working_dir there).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds sandfs/


def sandfs_argv(*args: str) -> list[str]:
    """`sandfs ARGS...` run by this interpreter, the working directory off its path."""
    return [sys.executable, "-P", "-m", "sandfs", *args]


def sandfs_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` with no PYTHONPATH entry that would shadow this sandfs package."""
    env = dict(environ)
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    kept = [e for e in entries if not _shadows(e)]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _shadows(entry: str) -> bool:
    path = os.path.abspath(entry)
    return path != PACKAGE_PARENT and os.path.isdir(os.path.join(path, "sandfs"))
