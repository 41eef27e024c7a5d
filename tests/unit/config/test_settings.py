"""The settings of a mount: engine sections merged (first wins, with warnings), command line
overrides, sizes."""

from pathlib import Path

import pytest
from base_config import edited

from sandfs.config import load_task_config, merge_engines, parse_size

# --- engines, sizes, several configs -----------------------------------------------------------


def _with_engine(task: str, engine: str) -> str:
    return edited(
        ("task: demo", f"task: {task}"),
        (
            "engine:                          # 26\n  storage_budget: 1G             # 27\n",
            "engine:\n" + engine,
        ),
    )


def test_merge_engines_first_wins_with_warnings_and_cli_overrides():
    first = load_task_config(
        "a.yaml",
        check_paths=False,
        text=_with_engine("a", "  cache_dir: /c1\n  storage_budget: 1G\n"),
    )
    second = load_task_config(
        "b.yaml",
        check_paths=False,
        text=_with_engine(
            "b", "  cache_dir: /c2\n  storage_budget: 1024M\n  workers: 3\n  k_epochs: ~\n"
            "  decode_ahead: 0\n"
        ),
    )
    engine, warnings = merge_engines([first, second], {})
    assert engine.cache_dir == "/c1"
    assert engine.storage_budget_bytes == 2**30
    assert engine.workers == 3
    assert engine.k_epochs == 5
    assert engine.decode_ahead == 0
    assert len(warnings) == 1
    assert "engine.cache_dir" in warnings[0]
    assert "a.yaml" in warnings[0]
    assert "b.yaml" in warnings[0]
    overridden, warnings = merge_engines(
        [first, second],
        {
            "cache_dir": "rel",
            "storage_budget_bytes": "2G",
            "workers": "auto",
            "k_epochs": 2,
            "decode_ahead": 5,
            "mountpoint": None,
        },
    )
    assert warnings == []  # the CLI settles the cache_dir disagreement
    assert overridden.cache_dir == str(Path.cwd() / "rel")
    assert overridden.storage_budget_bytes == 2 * 2**30
    assert overridden.workers is None
    assert overridden.k_epochs == 2
    assert overridden.decode_ahead == 5
    assert overridden.mountpoint is None
    with pytest.raises(ValueError, match="workers"):
        merge_engines([first], {"workers": 0})
    with pytest.raises(ValueError, match="decode_ahead: expected an integer >= 0"):
        merge_engines([first], {"decode_ahead": -1})
    with pytest.raises(ValueError, match="unknown engine setting"):
        merge_engines([first], {"budget": "1G"})


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096),
        (4096, 4096),
        ("512M", 512 * 2**20),
        ("200G", 200 * 2**30),
        ("1.5T", 3 * 2**39),
        ("10GiB", 10 * 2**30),
        ("10gb", 10 * 2**30),
        ("2 k", 2048),
        ("100B", 100),
        ("0.3K", 307),
        ("1E", 2**60),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "",
        "G",
        "-1G",
        "0",
        0,
        "1.5",
        "1e3",
        "1 GB extra",
        "ten",
        "8E",
        "1Gi",
        True,
        1.5,
        None,
    ],
)
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match=r"size|bytes"):
        parse_size(text)
