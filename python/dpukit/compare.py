"""``dpukit eval --render A --compare B``: two evals' sections side by side.

The report opens with both evals' summaries (the papers' claims beside each
eval's figures, ``dpukit.summary``) in one table. Both are rebuilt from their records (nothing is measured); tables that have
the same columns become one table with a first column naming the eval, so
e.g. the same experiment at ``--dpu host`` and ``--dpu bluefield3`` reads as
one table; other blocks follow each other, labelled.
"""

from __future__ import annotations

import os
from itertools import zip_longest
from pathlib import Path
from typing import Callable

from dpukit.evaluate import read_meta, rebuild_sections
from dpukit.paths import display_path
from dpukit.report import Block, Code, Image, Paragraph, Report, Section, Table, anchor
from dpukit.summary import side_by_side


def compare_evals(a: Path, b: Path, *, progress: Callable[[str], None] = lambda line: None) -> tuple[Path, Path]:
    """Writes ``A/compare-<B's name>/report.{md,html}``; returns their paths."""
    a, b = a.resolve(), b.resolve()
    meta_a, meta_b = read_meta(a), read_meta(b)
    out = a / f"compare-{b.name}"
    out.mkdir(exist_ok=True)
    la, lb = meta_a["dpu"]["name"], meta_b["dpu"]["name"]
    if la == lb:
        la, lb = a.name, b.name
    sides = []
    for label, src, meta, sub in ((la, a, meta_a, "A"), (lb, b, meta_b, "B")):
        sections = rebuild_sections(src, meta, plots_into=out / sub, progress=progress)
        by_name = {}
        for entry, sec in zip(meta["experiments"], sections):
            _relink_images(sec, out, out / sub, src)
            by_name[entry["name"]] = sec
        sides.append((label, by_name))
    (_, sa), (_, sb) = sides

    report = Report(f"dpukit evaluations side by side: {la} and {lb}")
    intro = Section("")
    intro.paragraph(f"Each experiment of `{display_path(a)}` ({la}) beside the same experiment of "
                    f"`{display_path(b)}` ({lb}), rebuilt from their runs. A table with the same columns in both "
                    "is one table here, its first column naming the eval.")
    rows = []
    for what, key in (("dpu speed", lambda m: f"{m['dpu']['name']} (F = {m['dpu']['factor']:g})"),
                      ("mode", lambda m: "quick" if m["quick"] else "full"),
                      ("started (UTC)", lambda m: m["started_utc"][:19].replace("T", " ")),
                      ("source", lambda m: m["source"] or ""),
                      ("machine", lambda m: f"{m['machine']['cpu_model']}, {m['machine']['cores']} cores"
                       if m["machine"] else "")):
        rows.append([what, key(meta_a), key(meta_b)])
    intro.table(["", la, lb], rows, caption="The two evals")
    titles = {**{e["name"]: s.title for e, s in zip(meta_b["experiments"], sb.values())},
              **{e["name"]: s.title for e, s in zip(meta_a["experiments"], sa.values())}}
    report.intro = [side_by_side(((la, meta_a), (lb, meta_b)), {n: anchor(t) for n, t in titles.items()}),
                    *intro.blocks]
    for name in [*sa, *(n for n in sb if n not in sa)]:
        x, y = sa.get(name), sb.get(name)
        if x is None or y is None:
            only, sec = (la, x) if y is None else (lb, y)
            merged = Section(sec.title, [Paragraph(f"Only in the {only} eval."), *sec.blocks], list(sec.commands))
        else:
            merged = Section(x.title, _pair_blocks(x.blocks, y.blocks, la, lb), [*x.commands, *y.commands])
        report.sections.append(merged)
    return report.write(out)


def _relink_images(sec: Section, out: Path, rebuilt: Path, original: Path) -> None:
    """Image paths relative to the comparison: the rebuilt plot if there is
    one, else the original eval's (a section kept as written)."""
    for b in sec.blocks:
        if isinstance(b, Image):
            target = rebuilt / b.path if (rebuilt / b.path).is_file() else original / b.path
            b.path = Path(os.path.relpath(target, out)).as_posix()


def _pair_blocks(xs: list[Block], ys: list[Block], la: str, lb: str) -> list[Block]:
    out: list[Block] = []
    for x, y in zip_longest(xs, ys):
        if isinstance(x, Table) and isinstance(y, Table) and x.columns == y.columns:
            rows = []
            for rx, ry in zip_longest(x.rows, y.rows):
                if rx is not None:
                    rows.append([la, *rx])
                if ry is not None:
                    rows.append([lb, *ry])
            caption = x.caption if x.caption == y.caption else f"{x.caption} / {y.caption}"
            align = None if x.align is None else ["left", *x.align]
            out.append(Table(["eval", *x.columns], rows, caption, align))
        elif isinstance(x, Paragraph) and isinstance(y, Paragraph) and x.text == y.text:
            out.append(x)
        else:
            for label, blk in ((la, x), (lb, y)):
                if blk is not None:
                    out.extend(_labelled(blk, label))
    return out


def _labelled(b: Block, label: str) -> list[Block]:
    if isinstance(b, Paragraph):
        return [Paragraph(f"{label}: {b.text}")]
    if isinstance(b, Table):
        return [Table(b.columns, b.rows, f"{label}: {b.caption}" if b.caption else label, b.align)]
    if isinstance(b, Image):
        return [Image(b.path, b.alt, f"{label}: {b.caption}" if b.caption else label)]
    assert isinstance(b, Code)
    return [Paragraph(f"{label}:"), b]
