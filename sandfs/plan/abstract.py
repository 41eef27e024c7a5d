"""The streams of one task's augmentation DAG (SAND §5.2's abstract graph, which
config/pipeline.py has already checked as a graph: acyclic, one final output): no videos, no
randomness yet.

A batch is the concatenation of *streams*: one per path from `frame` to the final output (a
`multi` step forks paths, a `merge` joins them, in input order).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandfs.config.schema import AugStep, TaskConfig

SOURCE = "frame"
ROOT = "video"


@dataclass(frozen=True, slots=True)
class PathStep:
    step: AugStep
    output_index: int  # which output of a multi step this path follows (0 otherwise)


@dataclass(frozen=True, slots=True)
class StreamPath:
    """The DAG entries one stream passes through, from `frame` to the final output."""

    steps: tuple[PathStep, ...]


def final_output(cfg: TaskConfig) -> str:
    consumed = {name for step in cfg.dataset.augmentation for name in step.inputs}
    produced = [o for step in cfg.dataset.augmentation for o in step.outputs]
    finals = [o for o in produced if o not in consumed]
    if len(finals) != 1:  # the config loader rejects this; kept as an internal invariant
        raise ValueError(f"augmentation must end in exactly one output, got {finals}")
    return finals[0]


def stream_paths(cfg: TaskConfig) -> tuple[StreamPath, ...]:
    """Every path from `frame` to the final output, in the batch's concatenation order."""
    producer = {
        out: (step, index)
        for step in cfg.dataset.augmentation
        for index, out in enumerate(step.outputs)
    }

    def paths_to(stream: str) -> list[tuple[PathStep, ...]]:
        if stream == SOURCE:
            return [()]
        step, index = producer[stream]
        upstream = [p for src in step.inputs for p in paths_to(src)]
        return [(*p, PathStep(step, index)) for p in upstream]

    return tuple(StreamPath(p) for p in paths_to(final_output(cfg)))
