"""Validation of the config values that name a remote dataset.

The config loader calls these on `video_dataset_path`, `dataset.storage_options` and
`dataset.manifest`; each raises `RemoteConfigError` with a message the loader puts at the value.
Nothing here imports fsspec, so a config can be checked without the `remote` extra.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "REMOTE_SCHEMES",
    "STREAMING_REFUSAL",
    "RemoteConfigError",
    "check_dataset_url",
    "check_manifest",
    "check_storage_options",
    "endpoint_of",
    "freeze_options",
    "is_remote_url",
    "thaw_options",
]

REMOTE_SCHEMES = ("s3", "http", "https")
# `input_source: streaming` keeps being refused: a remote dataset is fetched into the cache dir
# once at mount, because the scan decodes every video before the first epoch anyway.
STREAMING_REFUSAL = (
    "streaming is not supported; a remote video_dataset_path (s3://, http://, https://) is "
    "fetched once into the cache dir with input_source: file"
)
# keys sandfs sets itself (see connect.py); client_kwargs and config_kwargs are the user's,
# sandfs's bounds merged into them
RESERVED_OPTIONS = frozenset(
    {"asynchronous", "loop", "skip_instance_cache", "use_listings_cache"}
)
NESTED_OPTIONS = ("client_kwargs", "config_kwargs")  # mappings, as s3fs documents them
MAX_OPTION_DEPTH = 8
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
Scalar = str | bool | int | float
Option = Scalar | Mapping[str, "Option"]


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


def check_storage_options(options: object) -> dict[str, Option]:
    """A mapping of option names to strings, booleans, numbers or mappings of them, handed
    to fsspec as s3fs documents them (endpoint_url, anon, key, secret, client_kwargs:
    {region_name, endpoint_url}, config_kwargs: {s3: {addressing_style: path}}, ...)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise RemoteConfigError("storage_options must be a mapping of option names to values")
    checked: dict[str, Option] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise RemoteConfigError(f"storage_options key {key!r} is not an option name")
        if key in RESERVED_OPTIONS:
            raise RemoteConfigError(f"storage_options key {key!r} is set by sandfs itself")
        if key in NESTED_OPTIONS and not isinstance(value, Mapping):
            raise RemoteConfigError(f"storage_options {key}: expected a mapping, got "
                                    f"{type(value).__name__}")
        checked[key] = _option(key, value, 1)
    return checked


def _option(where: str, value: object, depth: int) -> Option:
    if isinstance(value, Scalar):
        return value
    if not isinstance(value, Mapping):
        raise RemoteConfigError(f"storage_options {where}: expected a string, boolean, number "
                                f"or mapping, got {type(value).__name__}")
    if depth >= MAX_OPTION_DEPTH:
        raise RemoteConfigError(f"storage_options {where}: nested deeper than "
                                f"{MAX_OPTION_DEPTH} levels")
    nested: dict[str, Option] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise RemoteConfigError(f"storage_options {where}: key {key!r} is not a name")
        nested[key] = _option(f"{where}.{key}", item, depth + 1)
    return nested


FrozenOptions = tuple[tuple[str, Any], ...]


def freeze_options(options: Mapping[str, Option]) -> FrozenOptions:
    """Checked options as sorted (key, value) pairs, mappings likewise: hashable, for a frozen
    config. `thaw_options` gives the mapping back."""
    return tuple(sorted((key, freeze_options(value) if isinstance(value, Mapping) else value)
                        for key, value in options.items()))


def thaw_options(frozen: FrozenOptions) -> dict[str, Option]:
    return {key: thaw_options(value) if isinstance(value, tuple) else value
            for key, value in frozen}


def endpoint_of(options: Mapping[str, Any]) -> str | None:
    """The endpoint the options name, at the top or in client_kwargs (s3fs takes both)."""
    client = options.get("client_kwargs")
    nested = client.get("endpoint_url") if isinstance(client, Mapping) else None
    return options.get("endpoint_url") or nested


def check_manifest(text: str, base_dir: str) -> str:
    """A manifest URL (normalised like a dataset URL) or a local path resolved against
    `base_dir` (the config file's folder); whether a local one exists is checked at mount."""
    if not isinstance(text, str) or not text.strip():
        raise RemoteConfigError("manifest must be a path or URL of a text file")
    if is_remote_url(text):
        return check_dataset_url(text)
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(text)))
