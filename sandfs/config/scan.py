"""The background scan's pace (docs/config.md#the-scan): a config's `engine: scan:` mapping,
into the `ScanPace` a mount's lazy scans run with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from sandfs.config import fields as yaml_fields
from sandfs.config.yamlsafe import Value
from sandfs.media.scan_workers import DEFAULT_PACE, ScanPace

NAMES = tuple(f.name for f in fields(ScanPace))
MINIMUMS = {"ahead_videos": 0, "background_nice": 0}  # the others: 1
MAXIMUMS = {"background_nice": 19}


def read_scan_section(value: Value) -> tuple[tuple[str, int], ...]:
    """`engine: scan:` of one config: the (name, value) pairs it sets."""
    return tuple((name, yaml_fields.integer(item, minimum=MINIMUMS.get(name, 1),
                                            maximum=MAXIMUMS.get(name)))
                 for name, item in yaml_fields.mapping(value, NAMES).items())


def scan_pace(configured: Sequence[tuple[str, int]]) -> ScanPace:
    return replace(DEFAULT_PACE, **dict(configured))
