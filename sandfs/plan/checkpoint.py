"""The plan checkpoint: the coordination state of the last run (which windows were planned how),
kept in the cache dir so that a restarted daemon plans the same views for them."""

from __future__ import annotations

import logging
import os

from sandfs.fileio import read_checked_json, write_checked_json
from sandfs.plan.coordination import STATE_VERSION

log = logging.getLogger(__name__)

PLAN_STATE = "plan-state.json"


def load_plan_state(cache_dir: str) -> dict | None:
    """The checkpoint of the last run, if any (a damaged or foreign one is ignored: the
    windows are planned afresh and checkpointed again)."""
    path = os.path.join(cache_dir, PLAN_STATE)
    try:
        state = read_checked_json(path)
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"version {state.get('version')!r}, this sandfs plans with "
                             f"version {STATE_VERSION}")
        return state
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the plan checkpoint %s: %s", path, exc)
        return None


def save_plan_state(cache_dir: str, state: dict) -> None:
    write_checked_json(os.path.join(cache_dir, PLAN_STATE), state)
