"""The config values that name a remote dataset: what is accepted, and the message otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sandfs.remote as remote
from sandfs.remote import (
    RemoteConfigError,
    check_dataset_url,
    check_manifest,
    check_storage_options,
    dataset_digest,
    is_remote_url,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("s3://bucket/prefix/", "s3://bucket/prefix"),
    ("HTTPS://host:8080/data/", "https://host:8080/data"),
    ("http://127.0.0.1:9/", "http://127.0.0.1:9"),
])
def test_urls_are_normalised(text, expected):
    assert is_remote_url(text)
    assert check_dataset_url(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("ftp://host/data", "ftp:// is not supported"),
    ("gs://bucket/x", "gs:// is not supported"),
    ("s3:///prefix", "names no bucket"),
    ("http://host/data?x=1", "query or fragment"),
    ("http://host/a/../b", "'..'"),
])
def test_bad_urls_say_what_is_allowed(text, message):
    with pytest.raises(RemoteConfigError, match=message):
        check_dataset_url(text)


def test_local_paths_are_not_urls():
    assert not is_remote_url("/data/videos")
    assert not is_remote_url("relative/s3:/x")


def test_storage_options_are_flat_scalars():
    options = {"endpoint_url": "http://x", "anon": True, "max_concurrency": 2, "t": 1.5}
    assert check_storage_options(options) == options
    assert check_storage_options(None) == {}
    with pytest.raises(RemoteConfigError, match="mapping"):
        check_storage_options(["anon"])
    with pytest.raises(RemoteConfigError, match="anon: expected a string, boolean or number"):
        check_storage_options({"anon": [True]})
    with pytest.raises(RemoteConfigError, match="set by sandfs itself"):
        check_storage_options({"config_kwargs": "x"})
    with pytest.raises(RemoteConfigError, match="not an option name"):
        check_storage_options({"end point": "x"})


def test_manifest_is_a_url_or_a_path_against_the_config_folder():
    assert check_manifest("list.txt", "/etc/sand") == "/etc/sand/list.txt"
    assert check_manifest("/abs/list.txt", "/etc/sand") == "/abs/list.txt"
    assert check_manifest("s3://b/list.txt", "/etc/sand") == "s3://b/list.txt"
    with pytest.raises(RemoteConfigError):
        check_manifest("  ", "/etc/sand")


def test_the_copy_is_named_by_what_selects_the_files_not_by_credentials():
    base = dataset_digest("s3://b/p", {"endpoint_url": "http://e"}, None, (".mp4",))
    assert base == dataset_digest("s3://b/p/", {"endpoint_url": "http://e", "key": "k"}, None,
                                  (".MP4",))
    assert base != dataset_digest("s3://b/p", {"endpoint_url": "http://f"}, None, (".mp4",))
    assert base != dataset_digest("s3://b/p", {"endpoint_url": "http://e"}, "m.txt", (".mp4",))


def test_a_daemon_for_local_data_never_imports_the_fetching_machinery():
    """The config checks URLs with `sandfs.remote.options` and the daemon reports zeros from
    `sandfs.remote.stats`; copying a dataset (thread pools, fsspec's connections) is imported
    only for a remote one, and the package still offers every name it lists."""
    code = ("import sys, sandfs.config.loader, sandfs.daemon\n"
            "print(sorted(m for m in sys.modules if m.startswith('sandfs.remote.')))\n"
            "import sandfs.remote as remote\n"
            "print(all(getattr(remote, name) is not None for name in remote.__all__))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    loaded, offered = done.stdout.splitlines()
    assert loaded == "['sandfs.remote.options', 'sandfs.remote.stats']"
    assert offered == "True"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        remote.nothing  # noqa: B018
