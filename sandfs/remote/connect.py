"""Open an fsspec filesystem for a dataset URL with every request bounded in time, and say
which failures are worth retrying. fsspec (and s3fs / aiohttp) are imported here, lazily, so
that sandfs without the `remote` extra still serves local datasets."""

from __future__ import annotations

import copy
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandfs.errors import UserError

__all__ = ["RemoteError", "Store", "describe_error", "is_retryable", "open_store"]

log = logging.getLogger(__name__)

INSTALL_HINT = "install the remote extra (pip install 'sandfs-views[remote]')"
# the package each protocol needs besides fsspec
_BACKENDS = {"s3": "s3fs", "http": "aiohttp", "https": "aiohttp"}
# failures a retry cannot cure
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class RemoteError(UserError):
    """A remote dataset cannot be listed or fetched: one line, the mount fails."""


@dataclass(frozen=True, slots=True)
class Store:
    """An fsspec filesystem and how its paths are spelled."""

    fs: Any
    protocol: str  # "s3", "http" or "https"
    root: str  # the dataset folder as the filesystem names it, no trailing '/'

    @property
    def is_http(self) -> bool:
        return self.protocol in ("http", "https")

    def path_of(self, rel_path: str) -> str:
        """Where a file under the dataset lives (HTTP names are URL-quoted)."""
        if self.is_http:
            from urllib.parse import quote

            return f"{self.root}/{quote(rel_path)}"
        return f"{self.root}/{rel_path}"

    def get_kwargs(self) -> dict[str, Any]:
        # one GET per file: s3fs would otherwise split big files into parallel ranged GETs
        return {} if self.is_http else {"max_concurrency": 1}


def open_store(url: str, storage_options: Mapping[str, Any], timeout_s: float) -> Store:
    """The filesystem for `url` (normalised by `options.check_dataset_url`), opened with the
    user's options and sandfs's bounds merged in (`bounded_options`): every connect and every
    read waits at most `timeout_s`, and the backends' own retries are turned off because the
    fetcher retries with its own bounded backoff."""
    protocol = url.partition("://")[0]
    fsspec = _require("fsspec")
    _require(_BACKENDS[protocol])
    options, notes = bounded_options(protocol, storage_options, timeout_s)
    if notes:
        log.info("%s: sandfs's bounds merged into storage_options: %s", url, "; ".join(notes))
    try:
        if protocol != "s3":
            import aiohttp

            client = options["client_kwargs"]
            client["timeout"] = aiohttp.ClientTimeout(**client["timeout"])
        fs = fsspec.filesystem(protocol, **options)
    except (TypeError, ValueError) as exc:
        raise RemoteError(f"{url}: bad storage_options: {exc}") from exc
    if protocol == "s3":
        fs.retries = 1  # s3fs retries up to 5 times with its own sleeps otherwise
        root = fs._strip_protocol(url).rstrip("/")
    else:
        root = url
    return Store(fs=fs, protocol=protocol, root=root)


def bounded_options(protocol: str, storage_options: Mapping[str, Any], timeout_s: float
                    ) -> tuple[dict[str, Any], list[str]]:
    """The user's options (client_kwargs and config_kwargs as s3fs documents them) with
    sandfs's bounds merged in, and a note for each bound sandfs set."""
    if protocol == "s3":
        bounds: dict[str, Any] = {"config_kwargs": {
            "connect_timeout": timeout_s, "read_timeout": timeout_s,
            "retries": {"total_max_attempts": 1}}}
    else:  # aiohttp's ClientTimeout fields; `timeout: N` alone is a total
        bounds = {"client_kwargs": {"timeout": {
            "connect": timeout_s, "sock_connect": timeout_s, "sock_read": timeout_s}}}
    options = copy.deepcopy(dict(storage_options))
    client = options.get("client_kwargs")
    if isinstance(client, dict) and isinstance(client.get("timeout"), int | float):
        client["timeout"] = {"total": client["timeout"]}
    merged, notes = merge_bounds(options, bounds)
    merged["skip_instance_cache"] = True  # a fresh client: no session from a dead server
    return merged, notes


def merge_bounds(user: Mapping[str, Any], bounds: Mapping[str, Any], where: str = ""
                 ) -> tuple[dict[str, Any], list[str]]:
    """`user` with `bounds` merged in: a bound the user left out is added, a number the user
    set is kept where it is tighter (no larger), else the bound replaces it; every other
    option of the user's is kept as written. Notes name what the bounds set."""
    merged, notes = dict(user), []
    for key, bound in bounds.items():
        name, given = f"{where}{key}", user.get(key)
        if isinstance(bound, Mapping):
            inner, inner_notes = merge_bounds(given if isinstance(given, Mapping) else {},
                                              bound, f"{name}.")
            merged[key], notes = inner, notes + inner_notes
        elif _is_number(given) and given <= bound:
            continue  # the user's is tighter
        else:
            merged[key] = bound
            notes.append(f"{name}={bound}" + ("" if given is None else f" (not {given!r})"))
    return merged, notes


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RemoteError(f"remote datasets need the package {module}: {INSTALL_HINT}") from exc


def is_retryable(exc: BaseException) -> bool:
    """Network trouble (refused, reset, timed out, 5xx) is retried; a missing file or a denied
    request is not. fsspec's HTTP `info` turns any failure into FileNotFoundError, so the
    cause decides."""
    if isinstance(exc, _PERMANENT):
        cause = exc.__cause__
        return cause is not None and is_retryable(cause) and not _is_client_status(cause)
    status = _http_status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    return isinstance(exc, OSError) or _is_backend(exc)  # timeouts and resets are OSErrors


def _http_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)  # botocore.exceptions.ClientError
    if isinstance(response, dict):
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code if isinstance(code, int) else None
    return None


def _is_client_status(exc: BaseException) -> bool:
    status = _http_status(exc)
    return status is not None and 400 <= status < 500 and status not in (408, 429)


def _is_backend(exc: BaseException) -> bool:
    # aiohttp's and botocore's connection errors that are not OSErrors; missing credentials
    # stay missing
    if "Credentials" in type(exc).__name__:
        return False
    return type(exc).__module__.split(".")[0] in ("aiohttp", "botocore", "aiobotocore", "urllib3")


def describe_error(exc: BaseException) -> str:
    """A short one-line reason: the exception's type and first line, its cause when that says
    more (fsspec wraps network errors in FileNotFoundError)."""
    if isinstance(exc, _PERMANENT) and exc.__cause__ is not None and is_retryable(exc):
        exc = exc.__cause__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return f"not found ({text})" if text else "not found"
    if isinstance(exc, PermissionError):
        return f"access denied ({text})" if text else "access denied"
    if isinstance(exc, TimeoutError) or "Timeout" in name:  # botocore's are not TimeoutErrors
        return "timed out"
    return f"{name}: {text[:200]}" if text else name
