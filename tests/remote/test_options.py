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
from sandfs.remote.connect import bounded_options
from sandfs.remote.options import endpoint_of, freeze_options, thaw_options


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


def test_storage_options_as_fsspec_users_write_them():
    options = {"endpoint_url": "http://x", "anon": True, "max_concurrency": 2, "t": 1.5,
               "client_kwargs": {"region_name": "eu-west-1", "endpoint_url": "http://ceph"},
               "config_kwargs": {"s3": {"addressing_style": "path"}}}
    assert check_storage_options(options) == options
    assert thaw_options(freeze_options(options)) == options
    hash(freeze_options(options))  # a frozen config's field
    assert endpoint_of(options) == "http://x"
    assert endpoint_of({"client_kwargs": {"endpoint_url": "http://ceph"}}) == "http://ceph"
    assert check_storage_options(None) == {}
    with pytest.raises(RemoteConfigError, match="mapping"):
        check_storage_options(["anon"])
    with pytest.raises(RemoteConfigError, match="anon: expected a string, boolean, number or"):
        check_storage_options({"anon": [True]})
    with pytest.raises(RemoteConfigError, match=r"client_kwargs\.headers\.x: expected"):
        check_storage_options({"client_kwargs": {"headers": {"x": [1]}}})
    with pytest.raises(RemoteConfigError, match="client_kwargs: expected a mapping"):
        check_storage_options({"client_kwargs": "x"})
    with pytest.raises(RemoteConfigError, match="set by sandfs itself"):
        check_storage_options({"skip_instance_cache": False})
    with pytest.raises(RemoteConfigError, match="not an option name"):
        check_storage_options({"end point": "x"})
    deep: dict = {"v": 1}
    for _ in range(10):
        deep = {"k": deep}
    with pytest.raises(RemoteConfigError, match="nested deeper than 8 levels"):
        check_storage_options({"config_kwargs": deep})


def test_sandfs_bounds_merge_into_the_users_options():
    user = {"key": "k", "client_kwargs": {"region_name": "eu-west-1",
                                          "endpoint_url": "http://ceph"},
            "config_kwargs": {"s3": {"addressing_style": "path"}, "connect_timeout": 3,
                              "read_timeout": 600, "retries": {"mode": "standard"}}}
    merged, notes = bounded_options("s3", user, 10.0)
    assert merged["client_kwargs"] == user["client_kwargs"]  # region and endpoint kept
    assert merged["config_kwargs"] == {
        "s3": {"addressing_style": "path"},  # the user's addressing kept
        "connect_timeout": 3,  # the user's is tighter
        "read_timeout": 10.0,  # sandfs's is
        "retries": {"mode": "standard", "total_max_attempts": 1}}
    assert merged["key"] == "k" and merged["skip_instance_cache"] is True
    assert notes == ["config_kwargs.read_timeout=10.0 (not 600)",
                     "config_kwargs.retries.total_max_attempts=1"]
    assert user["config_kwargs"]["read_timeout"] == 600  # the caller's mapping untouched
    merged, notes = bounded_options("https", {"client_kwargs": {"timeout": 5,
                                                                "trust_env": True}}, 10.0)
    assert merged["client_kwargs"] == {"trust_env": True, "timeout": {
        "total": 5, "connect": 10.0, "sock_connect": 10.0, "sock_read": 10.0}}
    assert len(notes) == 3


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
