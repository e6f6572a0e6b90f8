"""What an eval found, first: the papers' headline claims beside dpukit's figures.

Each :class:`Claim` is one headline figure of a paper, in the paper's words,
with the experiments that measure dpukit's counterpart. An experiment records
its figure with ``ctx.finding(claim, value, run, detail)`` while it builds its
section from its runs, so the figure is computed from the eval's run records,
the same way in the eval and in ``dpukit eval --render``; the eval keeps the
findings in its record (``runs/eval.meta.json``, each experiment's
``findings``). This module only places them: a column per dpu speed (the
speed the figure's runs record), met or missed against the paper's figure, a
link to the section that explains it, and for every figure the eval has not
got, why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from dpukit.report import Block, Bullets, Link, Paragraph, Table, anchor
from dpukit.units import fmt_sig

FULL, SLOW = "full", "bluefield"
COLUMNS = {FULL: "at full speed", SLOW: "at BlueField speed"}


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    words: str           # the paper's claim, in its words, and where it is made
    measured_as: str     # dpukit's counterpart
    unit: str            # "×", "%" (a signed change) or "Gbps"
    target: float        # the paper's figure: met at or beyond it
    higher: bool = True  # whether a higher figure is better
    low: float | None = None   # the paper's range ends here ("22–82 %"): between it and target is "in range"
    high: float | None = None  # the paper's range ends there ("1.5 to 2 times"): beyond it is "above"
    strictly: bool = False     # met only beyond the target ("the majority")
    sources: tuple[str, ...] = ()  # the experiments that record it, the preferred first
    # Why no experiment of this eval measures it at a speed, when they all ran.
    gaps: tuple[tuple[str, str], ...] = ()

    def fmt(self, value: float) -> str:
        if self.unit == "%":
            return f"{value:+.0f} %" if abs(value) >= 10 else f"{value:+.2g} %"
        if self.unit == "×":
            return f"{fmt_sig(value)}×"
        return f"{fmt_sig(value)} {self.unit}"

    def verdict(self, value: float) -> str:
        beyond = (value > self.target if self.strictly else value >= self.target) if self.higher else \
            value <= self.target
        if beyond:
            if self.high is not None and value > self.high:
                return f"met (above the paper's {self.target:g}–{self.high:g}{self.unit})"
            return "met"
        if self.low is not None and (value >= self.low if self.higher else value <= self.low):
            return f"in the paper's range ({self.fmt(self.low)} to {self.fmt(self.target)}), short of its headline"
        return "missed"

    def gap(self, column: str) -> str | None:
        return dict(self.gaps).get(column)


CLAIMS: tuple[Claim, ...] = (
    Claim("duet.throughput", "Duet",
          "throughput ≈ 7.1× traditional sketches (abstract; Fig. 5a, 1024-byte packets, over CMS, CS and ES)",
          "Duet's zero-loss Gbps over Count-Min's, 1024-byte packets, one dpu worker (the emulated wire does no "
          "work per byte: Gbps is the packet rate × the size)", "×", 7.1,
          sources=("measure.throughput",),
          gaps=((SLOW, "measure.bluefield runs 64-byte packets only, and measure.throughput runs at the eval's "
                       "dpu speed (`dpukit eval --dpu bluefield2` measures it there)"),
                (FULL, "measure.throughput runs at the eval's dpu speed, which was not the host's"))),
    Claim("duet.packet_rate", "Duet",
          "packet rate ≈ 28.9× traditional sketches (abstract; Fig. 5b, 64-byte packets)",
          "Duet's zero-loss Mpps over Count-Min's, 64-byte packets, one dpu worker", "×", 28.9,
          sources=("measure.bluefield", "measure.throughput")),
    Claim("duet.accuracy", "Duet",
          "measurement accuracy ≈ +50.1 % over traditional sketches (abstract; Figs. 7-8)",
          "Duet's ARE below Count-Min's at 600 KB on the backbone trace (every packet counted)", "%", 50.1,
          sources=("measure.accuracy",),
          gaps=((SLOW, "measure.accuracy counts every packet (a full ring makes the wire wait), so its error does "
                       "not depend on the dpu's speed; it runs once, at the eval's speed"),
                (FULL, "measure.accuracy ran at the eval's dpu speed, which was not the host's"))),
    Claim("nitrosketch.line_rate", "NitroSketch",
          "with NitroSketch, all sketches achieve 10 Gbps and 40 Gbps line rates (OVS-DPDK, CAIDA and "
          "datacenter traces; Fig. 8a)",
          "the slowest NitroSketch sketch's zero-loss Gbps, one dpu worker (the emulated wire does no work per "
          "byte: Gbps is the packet rate × the size)", "Gbps", 40.0,
          sources=("measure.throughput", "measure.bluefield"),
          gaps=((SLOW, "measure.bluefield runs NitroSketch in full mode only (quick mode keeps Count-Min, UnivMon "
                       "and Duet)"),)),
    Claim("pulsedb.throughput", "PulseDB",
          "write throughput up to +82 % over vanilla RocksDB (abstract; Fig. 10: 22–82 % by value size)",
          "PulseDB's write throughput against vanilla's, 1024-byte values", "%", 82.0, low=22.0,
          sources=("kv.modes", "kv.bluefield", "kv.stall")),
    Claim("pulsedb.cpu", "PulseDB",
          "host compaction CPU up to −42 % (abstract; Fig. 13: 12–42 % by value size)",
          "PulseDB's whole-host compaction CPU against vanilla's (RocksDB's threads and the kernel's)", "%",
          -42.0, higher=False, low=-12.0, sources=("kv.modes", "kv.bluefield", "kv.stall")),
    Claim("pulsedb.p99", "PulseDB",
          "P99 write latency −29 % (abstract; Table I, 1024-byte values)",
          "PulseDB's P99 write latency against vanilla's, 1024-byte values", "%", -29.0, higher=False,
          sources=("kv.stall", "kv.modes", "kv.bluefield")),
    Claim("flatproxy.latency", "FlatProxy",
          "latency −90 % against Envoy (abstract; Fig. 16)",
          "the node proxy's p50 at a fixed rate (fortio) against the Envoy sidecar pair's", "%", -90.0,
          higher=False, sources=("mesh.quick", "mesh.bluefield")),
    Claim("flatproxy.qps", "FlatProxy",
          "8× Envoy's qps (abstract; Figs. 17-18: \"up to 8 times\")",
          "the node proxy's max qps (wrk) over the Envoy sidecar pair's", "×", 8.0,
          sources=("mesh.quick", "mesh.bluefield")),
    Claim("dpubench.slower", "DPUBench",
          "\"For the majority of operators, the throughput is lower when deployed on the BlueField-2 compared to "
          "the Intel CPU\" (Fig. 12)",
          "share of Fig. 12's operators but RXPMatch and Compress whose dpu / host rate is below 1, on the Arm cores (one "
          "thread, largest size)", "% of operators", 50.0, strictly=True, sources=("bench.bluefield.ops",),
          gaps=((FULL, "Fig. 12 is BlueField-2's rate over the host's: at full speed the ratio says nothing"),)),
    Claim("dpubench.rxp_match", "DPUBench",
          "RXPMatch on BlueField-2 \"1.5 to 2 times higher\" than the Intel CPU, at peak (Fig. 12)",
          "regex on the RXP engine model at peak over the host's 1-thread rate × 12 cores", "×", 1.5, high=2.0,
          sources=("bench.bluefield.ops",),
          gaps=((FULL, "Fig. 12 is BlueField-2's rate over the host's: at full speed the ratio says nothing"),)),
    Claim("dpubench.compress", "DPUBench",
          "Compress on BlueField-2 \"1.5 to 2 times higher\" than the Intel CPU, at peak (Fig. 12)",
          "deflate on the compression engine model at peak over the host's 1-thread rate × 12 cores", "×", 1.5,
          high=2.0, sources=("bench.bluefield.ops",),
          gaps=((FULL, "Fig. 12 is BlueField-2's rate over the host's: at full speed the ratio says nothing"),)),
)
BY_KEY = {c.key: c for c in CLAIMS}


def full_speed(dpu: dict[str, Any]) -> bool:
    """A finding's speed is the host's (its factor is unknown only for a preset named otherwise)."""
    return dpu["factor"] >= 1.0 if dpu["factor"] is not None else dpu["name"] == "host"


def column_of(finding: dict[str, Any]) -> str:
    return FULL if full_speed(finding["dpu"]) else SLOW


@dataclass
class Cell:
    """One claim at one speed: the figure chosen, or why there is none."""

    finding: dict[str, Any] | None
    source: str | None  # the experiment whose figure it is
    why: str | None = None

    def text(self, claim: Claim) -> str:
        if self.finding is None:
            return "not measured in this run"
        f = self.finding
        speed = "" if full_speed(f["dpu"]) else f" at {f['dpu']['name']}"
        return f"{claim.fmt(f['value'])}{speed} ({f['detail']})"


@dataclass
class Row:
    claim: Claim
    cells: dict[str, Cell]

    def verdict(self) -> str:
        got = {c: cell.finding for c, cell in self.cells.items() if cell.finding is not None}
        if not got:
            return "not measured"
        verdicts = {c: self.claim.verdict(f["value"]) for c, f in got.items()}
        if len(set(verdicts.values())) == 1 and len(verdicts) == len(self.cells):
            return next(iter(verdicts.values()))
        return "; ".join(f"{v} {COLUMNS[c]}" for c, v in verdicts.items())


def rows(meta: dict[str, Any]) -> list[Row]:
    """Every claim with, at each speed, the figure of its first source that
    recorded one in this eval (``meta``: the eval's record), or why none did."""
    entries = {e["name"]: e for e in meta["experiments"]}
    out = []
    for claim in CLAIMS:
        cells = {}
        for column in COLUMNS:
            cell = None
            for source in claim.sources:
                entry = entries.get(source)
                found = [f for f in (entry or {}).get("findings", [])
                         if f["claim"] == claim.key and column_of(f) == column]
                if found:
                    cell = Cell(found[0], source)
                    break
            cells[column] = cell or Cell(None, None, _why(claim, column, entries))
        out.append(Row(claim, cells))
    return out


def _why(claim: Claim, column: str, entries: dict[str, dict[str, Any]]) -> str:
    """Why no source of ``claim`` recorded a figure at ``column``'s speed."""
    reasons = []
    ran = []
    absent = [f"`{s}`" for s in claim.sources if s not in entries]
    if absent:
        reasons.append(", ".join(absent[:-1]) + (" and " if len(absent) > 1 else "") + absent[-1]
                       + (" were" if len(absent) > 1 else " was") + " not run in this eval")
    for source in claim.sources:
        entry = entries.get(source)
        if entry is None:
            continue
        elif entry["status"] != "ok":
            reasons.append(f"`{source}` failed")
        elif entry.get("skipped"):
            reasons.append(f"`{source}` was {entry['skipped']}")
        elif "findings" not in entry:
            reasons.append(f"`{source}`'s section was kept as written by an older dpukit, which recorded no figures")
        else:
            ran.append(source)
    if ran:
        gap = claim.gap(column)
        reasons.append(gap if gap else " and ".join(f"`{s}`" for s in ran) + " recorded no figure at this speed")
    return "; ".join(reasons)


def section_links(meta: dict[str, Any], titles: Sequence[str]) -> dict[str, str]:
    """Experiment name -> the anchor of its section in the report."""
    return {e["name"]: anchor(t) for e, t in zip(meta["experiments"], titles)}


def _explained_in(row: Row, links: dict[str, str]) -> list[Link]:
    used = []
    for cell in row.cells.values():
        if cell.source and cell.source not in used:
            used.append(cell.source)
    return [Link(s, f"#{links[s]}") for s in used if s in links]


TABLE_COLUMNS = ["paper", "the paper's claim", "dpukit measures", COLUMNS[FULL], COLUMNS[SLOW], "met?",
                 "explained in"]


def summary_table(meta: dict[str, Any], titles: Sequence[str]) -> Table:
    links = section_links(meta, titles)
    body = [[r.claim.paper, r.claim.words, r.claim.measured_as, r.cells[FULL].text(r.claim),
             r.cells[SLOW].text(r.claim), r.verdict(), _explained_in(r, links)] for r in rows(meta)]
    return Table(TABLE_COLUMNS, body, caption="The papers' headline claims and this eval's figures",
                 align=["left"] * len(TABLE_COLUMNS))


def gaps(meta: dict[str, Any]) -> list[str]:
    """What this eval could not show, one line per claim (and speed, where
    the reasons differ), with why."""
    out = []
    for r in rows(meta):
        missing = {column: cell.why for column, cell in r.cells.items() if cell.finding is None}
        what = f"{r.claim.paper}, {r.claim.words.split(' (')[0]}"
        if len(missing) == len(COLUMNS) and len(set(missing.values())) == 1:
            out.append(f"{what}, at either speed: {next(iter(missing.values()))}.")
            continue
        out += [f"{what}, {COLUMNS[column]}: {why}." for column, why in missing.items()]
    return out


def summary_blocks(meta: dict[str, Any], titles: Sequence[str]) -> list[Block]:
    """The report's opening: the claims table, then what the run could not show."""
    blocks: list[Block] = [
        summary_table(meta, titles),
        Paragraph("Each figure is computed from this eval's runs (`runs/`) by the experiment named in the last "
                  "column, whose section says how; \"at BlueField speed\" is the dpu place time-dilated to the "
                  "speed named (docs/core.md). Met is at or beyond the paper's figure."),
    ]
    missing = gaps(meta)
    if missing:
        blocks += [Paragraph("What this run could not show, and why:"), Bullets(missing)]
    else:
        blocks.append(Paragraph("This run measured every claim at both speeds."))
    return blocks


def side_by_side(metas: Sequence[tuple[str, dict[str, Any]]], links: dict[str, str]) -> Table:
    """Two (or more) evals' summaries as one table: each eval's figures at
    both speeds and its verdict, claim by claim (``metas``: (label, record));
    ``links``: experiment name -> the anchor of its section."""
    per_eval = [(label, rows(meta)) for label, meta in metas]
    columns = ["paper", "the paper's claim"]
    for label, _ in per_eval:
        columns += [f"{label}: {COLUMNS[FULL]}", f"{label}: {COLUMNS[SLOW]}", f"{label}: met?"]
    columns.append("explained in")
    body = []
    for i, claim in enumerate(CLAIMS):
        row: list[Any] = [claim.paper, claim.words]
        used: list[Link] = []
        for _, eval_rows in per_eval:
            r = eval_rows[i]
            row += [r.cells[FULL].text(claim), r.cells[SLOW].text(claim), r.verdict()]
            used += [link for link in _explained_in(r, links) if link not in used]
        body.append(row + [used])
    return Table(columns, body, caption="The papers' headline claims and each eval's figures",
                 align=["left"] * len(columns))
