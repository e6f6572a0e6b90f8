"""A small report model rendered to Markdown and to HTML.

A :class:`Report` is a title, some front-matter paragraphs and a list of
:class:`Section` s; a section holds blocks (:class:`Paragraph`,
:class:`Table`, :class:`Image`, :class:`Code`) and the exact command lines
that produced its numbers. Text is plain text everywhere, except that a
paragraph may mark ``code`` with backticks. Images are referenced by paths
relative to the report, so the report directory can be moved as a whole.
"""

from __future__ import annotations

import dataclasses
import html
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

from dpukit.paths import display_path

@dataclass
class Link:
    """A table cell that links: ``href`` is an in-page anchor (``#section``)
    or a path relative to the report."""

    text: str
    href: str


# A list of links is a cell too (several sections explain one row).
Cell = Union[str, int, float, None, Link, list[Link]]


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    """A list of plain-text items (each may mark ``code`` with backticks)."""

    items: list[str]


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    # One of "left" / "right" per column; None = numbers right, text left.
    align: list[str] | None = None

    def alignments(self) -> list[str]:
        if self.align is not None:
            if len(self.align) != len(self.columns):
                raise ValueError("align must have one entry per column")
            return list(self.align)
        out = []
        for i in range(len(self.columns)):
            cells = [r[i] for r in self.rows if i < len(r) and r[i] not in (None, "")]
            out.append("right" if cells and all(_looks_numeric(c) for c in cells) else "left")
        return out


@dataclass
class Image:
    path: str  # relative to the report file, with forward slashes
    alt: str
    caption: str = ""


@dataclass
class Code:
    text: str


Block = Union[Paragraph, Bullets, Table, Image, Code]


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)

    def paragraph(self, text: str) -> Section:
        self.blocks.append(Paragraph(text))
        return self

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Cell]], caption: str = "",
              align: Sequence[str] | None = None) -> Section:
        rows = [list(r) for r in rows]
        for r in rows:
            if len(r) != len(columns):
                raise ValueError(f"row {r!r} has {len(r)} cells for {len(columns)} columns")
        self.blocks.append(Table(list(columns), rows, caption, list(align) if align else None))
        return self

    def image(self, path: str | Path, alt: str, caption: str = "") -> Section:
        self.blocks.append(Image(Path(path).as_posix(), alt, caption))
        return self

    def code(self, text: str) -> Section:
        self.blocks.append(Code(text))
        return self

    def add_command(self, argv: Sequence[str]) -> Section:
        """Record one command line (argv) that produced numbers in this section."""
        # Paths inside the repository are shown relative to it, so that a
        # command reads the same on every machine.
        command = [display_path(Path(a)) if str(a).startswith("/") else str(a) for a in argv]
        if command not in self.commands:  # a command run once per round is listed once
            self.commands.append(command)
        return self

    def add_runs(self, runs: Iterable[dict]) -> Section:
        """Record the ``command_line`` of each native run result."""
        for run in runs:
            self.add_command(run["command_line"])
        return self


@dataclass
class Report:
    title: str
    intro: list[Block] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        s = Section(title)
        self.sections.append(s)
        return s

    # -- Markdown ----------------------------------------------------------

    def to_markdown(self) -> str:
        out = [f"# {_md_line(self.title)}", ""]
        for b in self.intro:
            out += _md_block(b)
        if len(self.sections) > 1:
            out.append("Contents:")
            out.append("")
            for i, s in enumerate(self.sections, 1):
                out.append(f"{i}. [{_md_line(s.title)}](#{anchor(s.title)})")
            out.append("")
        for s in self.sections:
            out += [f'<a id="{anchor(s.title)}"></a>', "", f"## {_md_line(s.title)}", ""]
            for b in s.blocks:
                out += _md_block(b)
            if s.commands:
                out += ["Commands that produced these numbers:", ""]
                out += _md_fence("\n".join(shlex.join(c) for c in s.commands), "sh")
        return "\n".join(out).rstrip() + "\n"

    # -- HTML --------------------------------------------------------------

    def to_html(self) -> str:
        e = _h
        body = [f"<h1>{e(self.title)}</h1>"]
        for b in self.intro:
            body.append(_html_block(b))
        if len(self.sections) > 1:
            body.append('<nav><ol class="toc">')
            for s in self.sections:
                body.append(f'<li><a href="#{e(anchor(s.title))}">{e(s.title)}</a></li>')
            body.append("</ol></nav>")
        for s in self.sections:
            body.append(f'<section id="{e(anchor(s.title))}">')
            body.append(f"<h2>{e(s.title)}</h2>")
            for b in s.blocks:
                body.append(_html_block(b))
            if s.commands:
                n = len(s.commands)
                body.append(f"<details><summary>Commands that produced these numbers ({n})</summary>")
                body.append("<pre><code>" + e("\n".join(shlex.join(c) for c in s.commands)) + "</code></pre>")
                body.append("</details>")
            body.append("</section>")
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{e(self.title)}</title>\n<style>\n{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body)
            + "\n</body>\n</html>\n"
        )

    def write(self, directory: str | Path, stem: str = "report") -> tuple[Path, Path]:
        """Write ``<stem>.md`` and ``<stem>.html`` into ``directory``."""
        directory = Path(directory)
        md = directory / f"{stem}.md"
        htm = directory / f"{stem}.html"
        md.write_text(self.to_markdown(), encoding="utf-8")
        htm.write_text(self.to_html(), encoding="utf-8")
        return md, htm


# -- helpers ---------------------------------------------------------------

_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?\s*[%a-zA-Zµ/]*$")


def _looks_numeric(cell: Cell) -> bool:
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        return True
    return bool(_NUMERIC.match(str(cell).strip()))


def _cell_text(cell: Cell) -> str:
    if cell is None:
        return ""
    if isinstance(cell, Link):
        return cell.text
    if isinstance(cell, list):
        return ", ".join(_cell_text(c) for c in cell)
    if isinstance(cell, float):
        return f"{cell:.6g}"
    return str(cell)


def anchor(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug or "section"


def _h(text: object) -> str:
    return html.escape(str(text), quote=True)


def _md_line(text: str) -> str:
    """One line of Markdown text: no line breaks, no stray HTML."""
    text = " ".join(str(text).split())
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _md_inline(text: str) -> str:
    """Paragraph text: keep `code` spans literal, neutralise HTML elsewhere."""
    parts = re.split(r"(`[^`]*`)", str(text))
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else _md_line_keep(p) for p in parts)


def _md_line_keep(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _md_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        text = _md_cell(cell.text).replace("[", "\\[").replace("]", "\\]")
        return f"[{text}](<{cell.href}>)"
    if isinstance(cell, list):
        return ", ".join(_md_cell(c) for c in cell)
    text = " ".join(_cell_text(cell).split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _md_fence(text: str, lang: str = "") -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, text, fence, ""]


def _md_block(b: Block) -> list[str]:
    if isinstance(b, Paragraph):
        return [_md_inline(b.text), ""]
    if isinstance(b, Code):
        return _md_fence(b.text)
    if isinstance(b, Bullets):
        return [f"- {_md_inline(' '.join(i.split()))}" for i in b.items] + [""]
    if isinstance(b, Image):
        alt = b.alt.replace("[", "\\[").replace("]", "\\]")
        lines = [f"![{_md_line(alt)}](<{b.path}>)", ""]
        if b.caption:
            lines += [f"*{_md_line(b.caption)}*", ""]
        return lines
    if isinstance(b, Table):
        out = []
        if b.caption:
            out += [f"**{_md_line(b.caption)}**", ""]
        out.append("| " + " | ".join(_md_cell(c) for c in b.columns) + " |")
        out.append("|" + "|".join("---:" if a == "right" else ":---" for a in b.alignments()) + "|")
        for r in b.rows:
            out.append("| " + " | ".join(_md_cell(c) for c in r) + " |")
        return out + [""]
    raise TypeError(f"unknown block {b!r}")


def _html_inline(text: str) -> str:
    parts = re.split(r"(`[^`]*`)", str(text))
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) > 1:
            out.append(f"<code>{_h(p[1:-1])}</code>")
        else:
            out.append(_h(p))
    return "".join(out)


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{_h(cell.href)}">{_h(cell.text)}</a>'
    if isinstance(cell, list):
        return ", ".join(_html_cell(c) for c in cell)
    return _h(_cell_text(cell))


def _html_block(b: Block) -> str:
    if isinstance(b, Paragraph):
        return f"<p>{_html_inline(b.text)}</p>"
    if isinstance(b, Code):
        return f"<pre><code>{_h(b.text)}</code></pre>"
    if isinstance(b, Bullets):
        return "<ul>\n" + "\n".join(f"<li>{_html_inline(i)}</li>" for i in b.items) + "\n</ul>"
    if isinstance(b, Image):
        cap = f"<figcaption>{_h(b.caption)}</figcaption>" if b.caption else ""
        return f'<figure><img src="{_h(b.path)}" alt="{_h(b.alt)}">{cap}</figure>'
    if isinstance(b, Table):
        aligns = b.alignments()
        rows = ["<table>"]
        if b.caption:
            rows.append(f"<caption>{_h(b.caption)}</caption>")
        rows.append("<thead><tr>" + "".join(
            f'<th class="{a}">{_h(c)}</th>' for c, a in zip(b.columns, aligns)) + "</tr></thead>")
        rows.append("<tbody>")
        for r in b.rows:
            rows.append("<tr>" + "".join(
                f'<td class="{a}">{_html_cell(c)}</td>' for c, a in zip(r, aligns)) + "</tr>")
        rows.append("</tbody></table>")
        return "\n".join(rows)
    raise TypeError(f"unknown block {b!r}")


_CSS = """\
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 64rem;
       margin: 2rem auto; padding: 0 1rem; color: #1d1d1f; line-height: 1.45; }
h1 { border-bottom: 2px solid #ccc; padding-bottom: .3rem; }
h2 { margin-top: 2.5rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: .92rem; }
caption { text-align: left; font-weight: 600; padding-bottom: .3rem; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; }
th { background: #f3f3f3; }
td.right, th.right { text-align: right; font-variant-numeric: tabular-nums; }
td.left, th.left { text-align: left; }
tbody tr:nth-child(even) { background: #fafafa; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: .9rem; color: #555; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .9em; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; font-size: .82rem; }
details { margin: 1rem 0; }
summary { cursor: pointer; color: #444; }
"""


# -- kept as data ------------------------------------------------------------
# A section written as JSON and read back, for the eval's record
# (runs/eval.meta.json): what a rebuild uses for a section it cannot rebuild.

_BLOCKS = {"paragraph": Paragraph, "bullets": Bullets, "table": Table, "image": Image, "code": Code}


def section_to_json(s: Section) -> dict:
    kinds = {cls: name for name, cls in _BLOCKS.items()}
    blocks = [{"kind": kinds[type(b)], **dataclasses.asdict(b)} for b in s.blocks]
    return {"title": s.title, "blocks": blocks, "commands": [list(c) for c in s.commands]}


def section_from_json(data: dict) -> Section:
    blocks: list[Block] = []
    for b in data["blocks"]:
        fields = dict(b)
        if fields["kind"] == "table":
            fields["rows"] = [[_cell_from_json(c) for c in r] for r in fields["rows"]]
        blocks.append(_BLOCKS[fields.pop("kind")](**fields))
    return Section(data["title"], blocks, [list(c) for c in data["commands"]])


def _cell_from_json(cell: Any) -> Cell:
    if isinstance(cell, dict):
        return Link(**cell)
    if isinstance(cell, list):
        return [Link(**c) for c in cell]
    return cell
