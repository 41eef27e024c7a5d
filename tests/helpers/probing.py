"""Probe jobs over copies of one short video, and probe workers made to hang, sleep or die on
chosen files (a probe's fault injected in the worker process itself)."""

from __future__ import annotations

import os
import shutil

from sandfs.media import scan_workers
from sandfs.media.scan_workers import ProbeJob


def copies(tmp_path, dataset_dir, count: int) -> list[ProbeJob]:
    """`count` copies of one short video, v00.mp4 on, as probe jobs."""
    source = sorted(dataset_dir.rglob("*.mp4"))[0]
    jobs = []
    for i in range(count):
        path = tmp_path / f"v{i:02d}.mp4"
        shutil.copy(source, path)
        info = os.stat(path)
        jobs.append(ProbeJob(path.name, str(path), (info.st_dev, info.st_ino)))
    return jobs


def patch_probe(monkeypatch, condition: str, action: str) -> None:
    """Workers started from here on run `action` (a statement) before probing a path for
    which `condition` (an expression of `path` and `niced`, the worker's nice > 0) holds."""
    code = ("import os, sys, time; import sandfs.media.probe as p; real = p.probe_video\n"
            "def probe(path, *args):\n"
            "    niced = os.nice(0) > 0\n"
            f"    if {condition}: {action}\n"
            "    return real(path, *args)\n"
            "p.probe_video = probe\n"
            "from sandfs.media.probe_worker import worker_main\n"
            "worker_main(int(sys.argv[1]), int(sys.argv[2]), {nice}); os._exit(0)")
    monkeypatch.setattr(scan_workers, "_WORKER_CODE", code.replace("{", "{{")
                        .replace("}", "}}").replace("{{nice}}", "{nice}"))
