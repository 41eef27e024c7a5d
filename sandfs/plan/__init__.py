"""Pure planning: which clips, frames and augmentation draws make up every view."""

from sandfs.plan.shard import shard_from_env

__all__ = ["shard_from_env"]
