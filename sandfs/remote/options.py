"""Validation of the config values that name a remote dataset.

The config loader calls these on `video_dataset_path`, `dataset.storage_options` and
`dataset.manifest`; each raises `RemoteConfigError` with a message the loader puts at the value.
Nothing here imports fsspec, so a config can be checked without the `remote` extra.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = [
    "REMOTE_SCHEMES",
    "STREAMING_REFUSAL",
    "RemoteConfigError",
    "check_dataset_url",
    "check_manifest",
    "check_storage_options",
    "is_remote_url",
]

REMOTE_SCHEMES = ("s3", "http", "https")
# `input_source: streaming` keeps being refused: a remote dataset is fetched into the cache dir
# once at mount, because the scan decodes every video before the first epoch anyway.
STREAMING_REFUSAL = (
    "streaming is not supported; a remote video_dataset_path (s3://, http://, https://) is "
    "fetched once into the cache dir with input_source: file"
)
# keys sandfs sets itself to bound every request (see connect.py)
RESERVED_OPTIONS = frozenset(
    {"asynchronous", "loop", "skip_instance_cache", "config_kwargs", "client_kwargs",
     "use_listings_cache"}
)
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
Scalar = str | bool | int | float


class RemoteConfigError(ValueError):
    """A bad remote-dataset value in a config; `str()` says what is allowed."""


def is_remote_url(text: str) -> bool:
    """Whether a dataset path is written as a URL (any scheme: unknown ones are refused by
    `check_dataset_url` rather than taken for a local folder named 'ftp:')."""
    return bool(_URL_RE.match(text))


def check_dataset_url(text: str) -> str:
    """The URL, normalised: scheme lower case, no trailing '/'."""
    scheme, _, rest = text.partition("://")
    scheme = scheme.lower()
    if scheme not in REMOTE_SCHEMES:
        allowed = ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
        raise RemoteConfigError(f"URL scheme {scheme}:// is not supported; use {allowed} "
                                f"or a local directory")
    parts = urlsplit(f"{scheme}://{rest}")
    if not parts.netloc:
        what = "bucket" if scheme == "s3" else "host"
        raise RemoteConfigError(f"the URL {text!r} names no {what}")
    if parts.query or parts.fragment:
        raise RemoteConfigError(f"the URL {text!r} has a query or fragment; give the folder")
    if any(part in (".", "..") for part in parts.path.split("/")):
        raise RemoteConfigError(f"the URL {text!r} has '.' or '..' in its path")
    return f"{scheme}://{rest}".rstrip("/")


def check_storage_options(options: object) -> dict[str, Scalar]:
    """A flat mapping of option names to strings, booleans or numbers, handed to fsspec
    (endpoint_url, anon, key, secret, region_name, ...)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise RemoteConfigError("storage_options must be a mapping of option names to values")
    checked: dict[str, Scalar] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise RemoteConfigError(f"storage_options key {key!r} is not an option name")
        if key in RESERVED_OPTIONS:
            raise RemoteConfigError(f"storage_options key {key!r} is set by sandfs itself")
        if not isinstance(value, Scalar):
            raise RemoteConfigError(f"storage_options {key}: expected a string, boolean or "
                                    f"number, got {type(value).__name__}")
        checked[key] = value
    return checked


def check_manifest(text: str, base_dir: str) -> str:
    """A manifest URL (normalised like a dataset URL) or a local path resolved against
    `base_dir` (the config file's folder); whether a local one exists is checked at mount."""
    if not isinstance(text, str) or not text.strip():
        raise RemoteConfigError("manifest must be a path or URL of a text file")
    if is_remote_url(text):
        return check_dataset_url(text)
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))
