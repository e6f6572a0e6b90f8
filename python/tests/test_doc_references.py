"""Every reference in the repository resolves inside it: no file points to
the design or the papers in a folder outside the repository (the design is
docs/architecture.md, which cites the papers), and every relative Markdown
link in README.md and docs/*.md names a file, and a heading, that exist."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "build", "results", ".tools", "__pycache__", ".pytest_cache", ".mypy_cache"}
# Built from pieces so that this file does not match itself.
OUTSIDE = re.compile(r"\b" + "ARCHITECTURE" + r"\.md\b|\b" + "papers" + r"/[\w.*-]+\.md\b")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")


def repository_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        yield rel, data.decode("utf-8", errors="replace")


def test_no_file_refers_to_the_design_or_papers_outside_the_repository():
    found = [f"{rel}:{n}: {line.strip()}"
             for rel, text in repository_files()
             for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "refer to docs/architecture.md (its section, or its Papers list) instead:\n" + "\n".join(found)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with code spans removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub("", line)


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def markdown_pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_markdown_links_resolve(page):
    broken = []
    for n, line in prose_lines(page.read_text(encoding="utf-8")):
        targets = [m.group(1) for m in LINK.finditer(line)]
        if m := REF_DEF.match(line):
            targets.append(m.group(1))
        for target in targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto: ...
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}:{n}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}:{n}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_checks_see_what_they_should():
    # The link check must find links, or it proves nothing.
    assert slug("3.4 bench: DPUBench") == "34-bench-dpubench"
    assert slug("Papers") == "papers"
    assert slug("measure — Duet and NitroSketch") == "measure--duet-and-nitrosketch"
    assert [m.group(1) for m in LINK.finditer("see [a](docs/a.md#x) and ![p](p.png) `[c](no.md)`")] == [
        "docs/a.md#x", "p.png", "no.md"]
    assert "papers" in anchors(ROOT / "docs" / "architecture.md")
    assert OUTSIDE.search("see " + "ARCHITECTURE" + ".md §2") and OUTSIDE.search("(" + "papers" + "/duet.md)")
