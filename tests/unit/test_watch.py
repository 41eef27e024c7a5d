"""`sandfs status --watch`: the table drawn from fixed status readings, rates between two
readings, "not answering" for a hung daemon, and Ctrl-C ending it with status 0."""

from __future__ import annotations

import copy
import io

from rich.console import Console

from sandfs.errors import UserError
from sandfs.watch import Reading, render_watch, watch

STATUS = {
    "uptime_seconds": 42.0, "pid": 4321, "workers": 3, "memory_bytes": 3 << 20,
    "memory_limit_bytes": 64 << 20,
    "tasks": {"t0": {"epoch": 1, "iteration": 5, "ready_ahead": 4, "views_served": 20,
                     "stall_seconds": 0.75, "epochs": 3, "iterations_per_epoch": 8,
                     "videos": 12}},
    "frames_decoded": 400, "frames_decoded_independent": 1000, "views_materialized": 21,
    "cache": {"bytes_used": 10 << 20, "budget_bytes": 100 << 20, "hits": 3, "misses": 1,
              "corrupt_detected": 1},
    "queues": {"demand": 2, "prematerialize": 7},
    "bad_videos": [{"path": "x.mp4", "reason": "corrupt", "detail": "bad header"}],
    "task_errors": {}, "remote": {"errors": 0},
}


def text_of(renderable) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def later(seconds: float, served: int) -> Reading:
    status = copy.deepcopy(STATUS)
    status["tasks"]["t0"]["views_served"] = served
    return Reading(100.0 + seconds, status)


def test_the_table_shows_each_task_and_the_daemon():
    text = text_of(render_watch("/mnt/sand", later(0, 20), None))
    assert "/mnt/sand" in text and "pid 4321" in text
    row = next(line for line in text.splitlines() if "t0" in line).split()
    assert row[1:8] == ["t0", "│", "1/3", "│", "5/8", "│", "4"]  # epoch, iteration, ready ahead
    assert "0.75" in row
    assert "2.50x fewer frames" in text  # decoding saved: 1000 independent / 400 decoded
    assert "0.75" in text.split("cache hit rate")[1].splitlines()[0]  # 3 hits of 4 reads
    assert "10.0 MiB of 100.0 MiB" in text and "demand 2, prematerialize 7" in text
    assert text.split("failures")[1].split()[1] == "2"  # a bad video, a corrupt object


def test_a_long_task_name_is_shown_whole_at_80_columns():
    status = copy.deepcopy(STATUS)
    name = "slowfast_r50_k400_lr0.1_wd1e-4_mixup.r3"
    status["tasks"] = {name: status["tasks"]["t0"]}
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(render_watch("/mnt/sand", Reading(100.0, status), None))
    assert name in console.file.getvalue()


def test_batches_per_second_come_from_two_readings():
    text = text_of(render_watch("/m", later(2.0, 30), later(0.0, 20)))
    cells = [cell.strip() for cell in next(line for line in text.splitlines()
                                           if "t0" in line).split("│")]
    assert cells[6] == "5.0"  # 10 views in 2 s


def test_a_daemon_that_does_not_answer_is_shown_not_waited_for():
    text = text_of(render_watch("/m", Reading(1.0, None, "no answer within 2s"), None))
    assert "not answering: no answer within 2s" in text


def test_watch_stops_after_its_iterations_and_survives_a_hang():
    answers = iter([STATUS, UserError("did not answer"), STATUS])

    def read():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None)
    assert watch("/m", read, 0.01, iterations=3, console=console) == 0
    text = out.getvalue()  # not a terminal: each refresh is appended
    assert text.count(" t0 ") == 2 and text.count("not answering: did not answer") == 1


def test_ctrl_c_ends_the_watch_with_status_zero():
    def read():
        raise KeyboardInterrupt

    console = Console(file=io.StringIO(), width=160, color_system=None)
    assert watch("/m", read, 0.01, console=console) == 0
