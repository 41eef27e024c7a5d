"""The object cache: pruning under a budget (pure, `prune`), cache formats (`formats`), and the
on-disk store (`ObjectStore`: temp + fsync + rename, checksums, eviction, recovery)."""

from sandfs.cache.disk import Stack
from sandfs.cache.formats import CODECS, choose_format
from sandfs.cache.keys import ObjectKey
from sandfs.cache.prune import ObjectGraph, PrunePlan, prune, recompute_seconds
from sandfs.cache.recovery import CacheDirError, RecoveryReport, StoreBusyError
from sandfs.cache.store import ObjectStore

__all__ = ["CODECS", "CacheDirError", "ObjectGraph", "ObjectKey", "ObjectStore", "PrunePlan",
           "RecoveryReport", "Stack", "StoreBusyError", "choose_format", "prune",
           "recompute_seconds"]
