"""What a dataset IS, as opposed to where it lives: the identity that seeds every draw.

The same videos copied to another directory, mounted elsewhere on another node, or (later)
reached through a URL must give the same views, so no seed or pool key may contain the
dataset's path. A `DatasetIdentity` names the data by its tag and a digest of its usable videos'
relative paths and sizes; the path stays only where files are opened (and in local cache keys).

Files the scan left out are not part of the identity: planning never sees their sizes (the scan
records only their path and reason, and a remote dataset cannot be stat'ed here), and a file
left out is out of every epoch, so it changes the epoch permutations whatever the identity
says. A probe that failed transiently is not written to the scan index: the next mount probes
it again and, once it succeeds, plans with the same identity as before the failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from sandfs.config.schema import DatasetConfig
from sandfs.media.types import VideoInfo, listing_digest
from sandfs.plan.seeds import fingerprint


@dataclass(frozen=True, slots=True)
class DatasetIdentity:
    tag: str  # the config's dataset tag: the same files tagged train and val are two datasets
    digest: str  # SHA-256 (hex) of the sorted (relative path, size in bytes) of its videos
    num_videos: int

    @property
    def key(self) -> tuple[str, str]:
        """What seeds and pool keys use (hashable, repr-stable, location-free)."""
        return (self.tag, self.digest)


def dataset_identity(tag: str, videos: Iterable[VideoInfo]) -> DatasetIdentity:
    """The identity of the usable videos a scan found (any order)."""
    entries = [(v.rel_path, v.size_bytes) for v in videos]
    digest = listing_digest(entries)
    return DatasetIdentity(tag, digest, len(entries))


def data_fingerprint(dataset: DatasetConfig) -> object:
    """The dataset section as far as it decides draws: without the path, storage options and
    manifest (the identity stands for them), the labels (they never change a clip) and the
    shard (every rank draws the same permutation and clips)."""
    sampling = replace(dataset.sampling, shard=None)
    return fingerprint(replace(dataset, video_dataset_path="", labels="", sampling=sampling,
                               storage_options=(), manifest=None))
