"""scripts/check_docs.py: the checks that keep the docs usable, and the repository passing them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from sandfs.config.loader import load_task_config

ROOT = Path(__file__).resolve().parents[2]
SECTION = "\u00a7"  # written as an escape so that this file cites no doc by number itself


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_docs = _load_checker()


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Threads and the GIL", "threads-and-the-gil"),
        ("The reader's side", "the-readers-side"),
        ("FUSE serving and the page cache", "fuse-serving-and-the-page-cache"),
        ("`.sand/status.json`", "sandstatusjson"),
        (f"{SECTION}13 Ownership and permissions", "13-ownership-and-permissions"),
        ("sandfs status --watch", "sandfs-status---watch"),
        ("decode_resize", "decode_resize"),
        ("Several tasks, the cache and restarts", "several-tasks-the-cache-and-restarts"),
    ],
)
def test_slug_is_githubs_anchor(heading, anchor):
    assert check_docs.slug(heading) == anchor


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_links_that_resolve_pass(tmp_path):
    root = _tree(tmp_path, {
        "README.md": "# X\n\nSee [memory](docs/perf.md#memory), [the page](docs/perf.md), "
                     "[an entry](docs/perf.md#perf-12), [here](#x) and [a site](https://a.b/c#d).\n",
        "docs/perf.md": "# Perf\n\n## Memory\n\n<a id=\"perf-12\"></a>\n## Old\n\n"
                        "[up](../README.md#x)\n",
    })
    assert check_docs.check_links(root) == []


def test_a_missing_file_and_a_missing_anchor_are_named(tmp_path):
    root = _tree(tmp_path, {
        "README.md": "# X\n\n[gone](docs/gone.md) and [no such](docs/perf.md#nope)\n",
        "docs/perf.md": "# Perf\n",
    })
    problems = check_docs.check_links(root)
    assert len(problems) == 2
    assert "README.md:3: link to a missing file: docs/gone.md" in problems
    assert "README.md:3: no anchor #nope in docs/perf.md" in problems


def test_links_in_code_are_examples_not_links(tmp_path):
    root = _tree(tmp_path, {
        "README.md": "# X\n\n```\n[a](missing.md)\n```\n\n`[b](missing.md#x)`\n",
    })
    assert check_docs.check_links(root) == []


def test_repeated_headings_get_numbered_anchors(tmp_path):
    path = _tree(tmp_path, {"a.md": "## Caveats\n\n## Caveats\n\n```\n## not a heading\n```\n"})
    assert check_docs.anchors(path / "a.md") == {"caveats", "caveats-1"}


@pytest.mark.parametrize(
    "text",
    [
        f"# the default (docs/performance.md {SECTION}8): per task",
        f'"""Sizes (docs/contract.md {SECTION}13)."""',
        f"    kernel's flusher costs it (docs/performance.md\n    {SECTION}18).",
        f"then the rest ({SECTION}27).",
        f"the stress tier (docs/testplan.md {SECTION}4.5)",
    ],
)
def test_section_number_citations_are_found(text):
    assert check_docs.section_citations(text)


@pytest.mark.parametrize(
    "text",
    [
        f'"""Pruning (SAND {SECTION}5.3, Algorithm 1)."""',
        f"by video (SAND {SECTION}5.2, {SECTION}5.4).",
        f"(the SAND paper, {SECTION}5.2): a SlowFast-like task",
        f"from SAND's abstract graph, which\n{SECTION}5.2 describes",
        "the default (docs/performance.md#memory): per task",
    ],
)
def test_paper_sections_and_anchors_are_not_citations_of_docs(text):
    assert check_docs.section_citations(text) == []


def test_the_readme_budget(tmp_path):
    (tmp_path / "README.md").write_text("line\n" * 350, encoding="utf-8")
    assert check_docs.check_readme_budget(tmp_path) == []
    (tmp_path / "README.md").write_text("line\n" * 351, encoding="utf-8")
    assert check_docs.check_readme_budget(tmp_path) == [
        "README.md: 351 lines, over its budget of 350"]


def test_quickstart_commands_are_the_dollar_lines_of_its_section():
    readme = (
        "# sandfs\n\n```\n$ not/quickstart.sh\n```\n\n## Quickstart\n\n"
        "```\n$ scripts/demo.sh\nsome output\n$ sandfs status /tmp/sand/mnt   # figures\n```\n\n"
        "Text with $ signs.\n\n## Next\n\n```\n$ not/this.sh\n```\n"
    )
    assert check_docs.quickstart_commands(readme) == [
        "scripts/demo.sh", "sandfs status /tmp/sand/mnt"]


def test_the_repository_passes_its_docs_checks():
    problems = (check_docs.check_readme_budget(ROOT) + check_docs.check_links(ROOT)
                + check_docs.check_code_citations(ROOT))
    assert problems == []
    assert check_docs.quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readmes_complete_config_is_valid(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A complete config.*?```yaml\n(.*?)```", readme, re.S)
    assert block, "README.md has no complete config"
    dataset = tmp_path / "videos"
    dataset.mkdir()
    text = re.sub(r"video_dataset_path: \S+", f"video_dataset_path: {dataset}", block.group(1))
    config_file = tmp_path / "task.yaml"
    config_file.write_text(text, encoding="utf-8")
    config = load_task_config(str(config_file))
    assert config.task == "slowfast_k400"
    assert config.dataset.sampling.frames_per_video == 32


def _documented(section: str) -> set[str]:
    """The backticked names in the first column of the table under `## section` in config.md."""
    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)`", body, re.M)) | {
        name for cell in re.findall(r"^\| (`[^|]+`) \|", body, re.M)
        for name in re.findall(r"`([^`]+)`", cell)}


def test_config_md_documents_every_key_the_loader_takes():
    from sandfs.config import loader, ownership, settings

    keys = {k for k in loader.TOP_KEYS if k not in ("dataset", "engine", "access")}
    keys |= {f"dataset.{k}" for k in loader.DATASET_KEYS if k != "sampling"}
    keys |= {f"dataset.sampling.{k}" for k in loader.SAMPLING_KEYS}
    keys |= {f"engine.{k}" for k in settings.ENGINE_FIELDS}
    keys |= {f"access.{k}" for k in ownership.ACCESS_KEYS}
    assert keys - _documented("Every key") == set()


def test_config_md_documents_every_built_in_step():
    from sandfs.ops import get_op, op_names

    built_in = {n for n in op_names() if type(get_op(n)).__module__.startswith("sandfs.")}
    assert built_in - _documented("Built-in steps") == set()


def _flags(parser) -> set[str]:
    """Every long option of a parser and of its subcommands, recursively."""
    import argparse

    found = set()
    for action in parser._actions:
        found |= {s for s in action.option_strings if s.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _flags(sub)
    return found


def test_commands_md_names_every_flag():
    from sandfs.cli import build_parser

    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert {f for f in _flags(build_parser()) if f != "--help"} - set(
        re.findall(r"--[a-z][a-z-]*", text)) == set()


def test_commands_md_names_every_environment_variable():
    from sandfs.config import settings
    from sandfs.media import types

    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    variables = {*types._LIMIT_ENV, settings.SCHEDULING_ENV, settings.PRUNE_ENV}
    assert variables - set(re.findall(r"SANDFS_[A-Z_]+", text)) == set()


def test_every_results_file_is_in_the_index():
    index = (ROOT / "benchmarks" / "results" / "INDEX.md").read_text(encoding="utf-8")
    files = {p.name for p in (ROOT / "benchmarks" / "results").glob("*.jsonl")}
    assert {name for name in files if f"`{name}`" not in index} == set()


def test_config_md_marks_exactly_the_keys_the_loader_requires(tmp_path):
    """A key is `required` in config.md if and only if a config without it is refused as
    missing it (dataset.tag was required but not marked so)."""
    import copy

    import yaml

    body = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    body = body.split("## Every key\n", 1)[1].split("\n## ", 1)[0]
    marked = set(re.findall(r"^\| `([^`]+)` \| required \|", body, re.M))
    demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    demo["dataset"]["video_dataset_path"] = str(tmp_path)

    def refused_as_missing(key: str) -> bool:
        cfg = copy.deepcopy(demo)
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            node = node[part]
        del node[leaf]
        path = tmp_path / "task.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        try:
            load_task_config(path, check_paths=False)
        except Exception as exc:  # UserError, one line naming the key
            return "required key is missing" in str(exc)
        return False

    def keys(node: dict, prefix: str = "") -> set[str]:
        found = set()
        for name, value in node.items():
            found.add(prefix + name)
            if isinstance(value, dict) and name != "engine":  # engine: never required
                found |= keys(value, f"{prefix}{name}.")
        return found

    in_demo = keys(demo)
    required = {key for key in in_demo if refused_as_missing(key)}
    assert "dataset.tag" in required
    assert required - {"dataset", "dataset.sampling"} == marked & in_demo  # containers: no row
