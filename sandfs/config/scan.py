"""The background scan's pace (docs/config.md#the-scan): a config's `engine: scan:` mapping,
into the `ScanPace` a mount's lazy scans run with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from sandfs.config import fields as yaml_fields
from sandfs.config.yamlsafe import Value
from sandfs.media.scan_workers import DEFAULT_PACE, PACE_BOUNDS, ScanPace

NAMES = tuple(f.name for f in fields(ScanPace))


def read_scan_section(value: Value) -> tuple[tuple[str, int], ...]:
    """`engine: scan:` of one config: the (name, value) pairs it sets."""
    return tuple((name, yaml_fields.integer(item, minimum=PACE_BOUNDS[name][0],
                                            maximum=PACE_BOUNDS[name][1]))
                 for name, item in yaml_fields.mapping(value, NAMES).items())


def scan_pace(configured: Sequence[tuple[str, int]]) -> ScanPace:
    return replace(DEFAULT_PACE, **dict(configured))
