#!/usr/bin/env python3
"""Checks that keep the docs usable; run by scripts/test.sh.

- README.md stays within its line budget (a user reads it in ten minutes).
- Every relative link and #anchor in README.md, CONTRIBUTING.md, docs/ and benchmarks/ resolves.
- Code cites docs by anchor (docs/performance.md#fresh-pages), never by section number: numbers
  move when a page is reorganized, anchors name the topic. A paper's sections (SAND's) are
  exempt.
- With --run-quickstart, the commands of README.md's Quickstart ("$ " lines) run, in order, from
  the repository root with .venv/bin on PATH; /tmp/sand in them becomes a fresh folder.

Usage: scripts/check_docs.py [--run-quickstart]. Prints one line per problem; exits 1 if any.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 350
DOC_GLOBS = ("README.md", "CONTRIBUTING.md", "docs/*.md", "benchmarks/*.md",
             "benchmarks/results/*.md")
CODE_GLOBS = ("sandfs/**/*.py", "tests/**/*.py", "benchmarks/**/*.py", "scripts/*", "examples/**/*",
              "configs/**/*.yaml", "pyproject.toml")
QUICKSTART_TMP = "/tmp/sand"

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# A section sign (U+00A7) before a number: a page's section 21, 4.5, ... cited by number.
_SECTION = re.compile("\u00a7" + r"\s?\d")
# A paper's sections stay citable by number: the sign shortly after "SAND" or "paper".
_PAPER = re.compile(r"(SAND|paper)[^;()]{0,24}$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def strip_code(lines: list[str]) -> list[str]:
    """The lines with fenced blocks blanked and inline code removed (links there are examples)."""
    out, fenced = [], False
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return out


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file defines: its headings' slugs (GitHub's -1, -2 for repeats)
    and explicit <a id="..."> / <a name="...">."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        found.update(_HTML_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def doc_files(root: Path) -> list[Path]:
    return sorted({p for pattern in DOC_GLOBS for p in root.glob(pattern) if p.is_file()})


def check_links(root: Path) -> list[str]:
    """Relative links that point at no file, or at an anchor the file does not define."""
    problems: list[str] = []
    cache: dict[Path, set[str]] = {}
    for doc in doc_files(root):
        lines = strip_code(doc.read_text(encoding="utf-8").splitlines())
        for lineno, line in enumerate(lines, 1):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path_part, _, anchor = target.partition("#")
                dest = (doc.parent / path_part).resolve() if path_part else doc
                where = f"{doc.relative_to(root)}:{lineno}"
                if not dest.exists():
                    problems.append(f"{where}: link to a missing file: {target}")
                    continue
                if anchor and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        problems.append(f"{where}: no anchor #{anchor} in {path_part or doc.name}")
    return problems


def section_citations(text: str) -> list[tuple[int, str]]:
    """(line, text) of each section-number citation that is not a paper's."""
    found = []
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        for m in _SECTION.finditer(line):
            before = line[: m.start()]
            if not before.strip(" #*\"'(") and lineno > 1:
                before = lines[lineno - 2] + " " + before  # a citation that wraps a line
            if not _PAPER.search(before.rstrip(" (,")):
                found.append((lineno, line.strip()))
    return found


def code_files(root: Path) -> list[Path]:
    files = {p for pattern in CODE_GLOBS for p in root.glob(pattern) if p.is_file()}
    return sorted(p for p in files if ".venv" not in p.parts and p.suffix not in {".md", ".png"})


def check_code_citations(root: Path) -> list[str]:
    problems = []
    for path in code_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in section_citations(text):
            problems.append(f"{path.relative_to(root)}:{lineno}: cite docs by #anchor, not by "
                            f"section number: {line}")
    return problems


def check_readme_budget(root: Path) -> list[str]:
    n = len((root / "README.md").read_text(encoding="utf-8").splitlines())
    if n > README_MAX_LINES:
        return [f"README.md: {n} lines, over its budget of {README_MAX_LINES}"]
    return []


def quickstart_commands(readme: str) -> list[str]:
    """The "$ " lines of the README's Quickstart section, in order."""
    commands, inside, fenced = [], False, False
    for line in readme.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip().lower() == "quickstart"
            continue
        if not inside:
            continue
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced and line.startswith("$ "):
            commands.append(line[2:].split("  #")[0].strip())
    return commands


def run_quickstart(root: Path) -> list[str]:
    commands = quickstart_commands((root / "README.md").read_text(encoding="utf-8"))
    if not commands:
        return ["README.md: the Quickstart quotes no '$ ' command"]
    work = Path(tempfile.mkdtemp(prefix="sandfs-quickstart."))
    env = dict(os.environ, PATH=f"{root / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    problems = []
    try:
        for command in commands:
            command = command.replace(QUICKSTART_TMP, str(work / "sand"))
            print(f"quickstart: $ {command}", flush=True)
            done = subprocess.run(["bash", "-c", command], cwd=root, env=env, check=False)
            if done.returncode != 0:
                problems.append(f"README.md quickstart: exit {done.returncode}: {command}")
                break
    finally:
        mountpoint = work / "sand"
        if subprocess.run(["findmnt", "-rn", "--mountpoint", str(mountpoint)],
                          capture_output=True, check=False).returncode == 0:
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-quickstart", action="store_true",
                        help="also run the README quickstart's commands (needs FUSE and .venv)")
    args = parser.parse_args(argv)
    problems = check_readme_budget(ROOT) + check_links(ROOT) + check_code_citations(ROOT)
    if args.run_quickstart and not problems:
        problems += run_quickstart(ROOT)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
