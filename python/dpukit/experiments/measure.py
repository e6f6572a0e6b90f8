"""Experiments on Duet and NitroSketch (``dpukit-measure``): accuracy vs memory,
speed and drops, convergence, and worker scaling.

Every experiment replays a synthetic trace written by ``dpukit-measure gen``.
Traces are cached under ``<build>/traces/`` (see :mod:`dpukit.measure_traces`), so a
second evaluation reuses them until the tool is rebuilt; the ``gen`` command
line is recorded in each section either way.

Each experiment is a ``collect`` step, which runs the tool (through
``ctx.run_native``, so that every run is kept under ``runs/``) and returns
what it ran, and a pure ``render`` step, which turns that into the section,
its tables and plots. ``dpukit eval --render`` runs the same ``collect``
with the runs read back from ``runs/`` (and the values measured outside the
tool from the eval's record), so nothing runs again.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from dpukit.experiment_support import machine, parameters_note, placement_note, repeats_note
from dpukit.dpu_speed import resolve_dpu_speed
from dpukit.experiments import Context, Point, experiment, median_run
from dpukit.machine_load import background_busy, background_note
from dpukit.measure_queues import LiveQueuesRun, LiveUnavailable, missing_requirements, run_live_queues
from dpukit.measure_traces import TOOL, TraceFile, ensure_trace, trace_note
from dpukit.paths import tool_path
from dpukit.plots import BarPanel, Line, Panel, bars_plot, panels_plot
from dpukit.report import Section
from dpukit.units import fmt_bytes, fmt_bytes_short, fmt_int, fmt_sig, fmt_thousands

KB = 1024  # the tool's "KB" is 1024 bytes

# Every algorithm the tool knows, in report order.
ALGOS = ("cms", "cs", "elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon", "duet")
# The paper's Duet, 32-bit sketch counters (`--duet-counter-bits 32`), beside the default 16-bit Duet.
DUET32 = "duet-32bit"
# The ones run under an offered rate that saturates the baselines.
RATE_ALGOS = ("cms", "cs", "elastic", "nitro-cms", "duet")
SPEED_MEMORY = 500 * KB
PRESETS = ("backbone", "datacenter")

# (figures.metrics key, label, plotted on a log axis)
METRICS = (
    ("are", "ARE", True),
    ("aae", "AAE", True),
    ("rmse", "RMSE", True),
    ("wmre", "WMRE", True),
    ("hh_f1", "HH F1", False),
)


def memory_arg(nbytes: int) -> str:
    """307200 -> '300KB' (the tool's spelling, K = 1024)."""
    return f"{nbytes // KB}KB" if nbytes % KB == 0 else str(nbytes)


# The budget of the summary's accuracy figure (dpukit.summary): the paper's "600 KB is a small amount of
# memory for a DPU" (EXP2), in both modes' sweeps.
ACCURACY_CLAIM_MEMORY = 600 * KB


def accuracy_memories(quick: bool) -> list[int]:
    kbs = [300, 600] if quick else [300, 400, 500, 600]
    return [k * KB for k in kbs]


# -- reading results -----------------------------------------------------------


def metric(figures: dict[str, Any], key: str) -> float:
    """A metric from ``figures.metrics`` (NaN where the tool wrote null)."""
    v = figures.get("metrics", {}).get(key)
    return float("nan") if v is None else float(v)


def drop_pct(figures: dict[str, Any]) -> float:
    return 100.0 * figures["drops"] / figures["packets"] if figures["packets"] else float("nan")


def dpu_busy(run: dict[str, Any]) -> float:
    """dpu CPU time over wall time (1.0 = one dpu CPU busy for the whole run)."""
    wall = run["figures"]["seconds"] * 1e9
    return run["cpu_ns"]["dpu"] / wall if wall > 0 else float("nan")


def polling_caveat(cms: dict[str, Any], duet: dict[str, Any]) -> str:
    """Where a dpu side was busy (polling included) nearly the whole run, its
    CPU time per packet is about its wall time per packet: say what that means."""
    busy = {"Count-Min": dpu_busy(cms), "Duet": dpu_busy(duet)}
    full = [name for name, b in busy.items() if b > 0.9]
    if not full:
        return ""
    shown = ", ".join(f"{name} {100 * b:.0f} %" for name, b in busy.items())
    return (f" dpu CPU time over wall time: {shown}. Where it is near 100 % the worker never found its ring "
            "empty: it was the slower side, and its queue's wire waited for room in the ring.")


def sketch_path_ns(run: dict[str, Any]) -> float:
    """dpu CPU ns per packet that reached a dpu worker (Duet: not counted in hw)."""
    f = run["figures"]
    reached = f["packets"] - f.get("hw", {}).get("packets", 0)
    return run["cpu_ns"]["dpu"] / reached if reached > 0 else float("nan")


def grid_index(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """``compare``'s ``figures.grid`` keyed by (algorithm, memory budget in bytes)."""
    return {(g["algo"], int(g["memory_bytes"])): g for g in result["figures"]["grid"]}


def read_estimates(path: Path) -> list[tuple[int, float]]:
    """(true count, estimate) of every flow in a ``run --dump-estimates`` CSV."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append((int(r["true_count"]), float(r["estimate"])))
    return rows


def relative_error(rows: Sequence[tuple[int, float]], min_true: float = 0) -> float:
    """Mean |estimate - true| / true over the flows with ``true >= min_true``
    (all flows: ARE; ``min_true`` = the heavy threshold: the heavy flows' error)."""
    errs = [abs(e - t) / t for t, e in rows if t >= min_true and t > 0]
    return sum(errs) / len(errs) if errs else float("nan")


def saturating_rate(cms_dpu_ns_per_packet: float, factor: float = 1.5) -> int:
    """``factor`` times the packet rate one fully busy Count-Min worker sustains,
    rounded to two significant digits (packets/s)."""
    pps = factor * 1e9 / cms_dpu_ns_per_packet
    mag = 10 ** max(0, math.floor(math.log10(pps)) - 1)
    return int(round(pps / mag) * mag)


def prefix_series(total: int, points: int) -> list[int]:
    """``points`` prefix lengths halving down from ``total`` (a geometric series
    ending at the trace length)."""
    return [max(1, round(total / 2 ** k)) for k in range(points - 1, -1, -1)]


def parse_cpus(text: str) -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def timing_repeats(ctx: Context) -> int:
    """Runs per timing point: 3 in both modes (a quick-mode run lasts a few
    tens of milliseconds, too short to trust one)."""
    return max(3, ctx.repeats)


def fmt_pps(pps: float) -> str:
    return f"{fmt_thousands(pps)} packets/s"


def fmt_ratio(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.2f}×"


# -- plot styles ---------------------------------------------------------------

_BASE_COLOR = {"cms": "tab:blue", "cs": "tab:orange", "univmon": "tab:green", "elastic": "tab:purple",
               "duet": "tab:red"}
_BASE_MARKER = {"cms": "o", "cs": "s", "univmon": "^", "elastic": "D", "duet": "*"}


def algo_style(algo: str, sample_p: float | None = None) -> dict[str, Any]:
    """One look per algorithm: a NitroSketch variant shares its base sketch's
    colour and marker, dashed (dotted for p = 0.01), with hollow markers."""
    base = algo.removeprefix("nitro-")
    style: dict[str, Any] = {"color": _BASE_COLOR.get(base, "tab:gray"), "marker": _BASE_MARKER.get(base, "x"),
                             "linestyle": "-", "linewidth": 1.6, "markersize": 5}
    if algo.startswith("nitro-"):
        style["linestyle"] = ":" if sample_p is not None and sample_p < 0.05 else "--"
        style["markerfacecolor"] = "none"
    if algo == DUET32:
        style.update(color=_BASE_COLOR["duet"], marker=_BASE_MARKER["duet"], linestyle="--", linewidth=2.4,
                     markersize=9, markerfacecolor="none")
    if algo == "duet":
        style.update(linewidth=2.4, markersize=9)
    return style


# -- measure.accuracy ----------------------------------------------------------

ACCURACY_TITLE = "measure.accuracy: error vs memory, every sketch and Duet (Duet Figs. 7-8)"


@experiment(
    "measure.accuracy",
    title=ACCURACY_TITLE,
    description="ARE, AAE, RMSE, WMRE and heavy-hitter F1 of 8 algorithms (and Duet with 16-bit counters) vs memory on a backbone and a datacenter trace.",
    tools=[TOOL],
)
def accuracy(ctx: Context) -> Section:
    mems = accuracy_memories(ctx.quick)
    traces, results = collect_accuracy(ctx, mems)
    return render_accuracy(ctx, mems, traces, results)


def collect_accuracy(ctx: Context, mems: Sequence[int]) -> tuple[list[TraceFile], dict[str, dict[str, Any]]]:
    """Every trace, and per trace preset ``compare``'s result over ALGOS with the 32-bit Duet's grid added."""
    traces = [ensure_trace(ctx, p) for p in PRESETS]
    results: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(traces, 1):
        ctx.progress(f"compare {len(ALGOS)} algorithms x {len(mems)} budgets on {t.spec.preset}", i, len(traces))
        results[t.spec.preset] = ctx.run_native(
            TOOL, ["compare", "--trace", t.path, "--algos", ",".join(ALGOS),
                   "--memory", ",".join(memory_arg(m) for m in mems)],
            label=f"compare-{t.spec.preset}")
        duet32 = ctx.run_native(
            TOOL, ["compare", "--trace", t.path, "--algos", "duet", "--duet-counter-bits", "32",
                   "--memory", ",".join(memory_arg(m) for m in mems)],
            label=f"compare-{t.spec.preset}-duet32")
        results[t.spec.preset]["figures"]["grid"] += [dict(g, algo=DUET32) for g in duet32["figures"]["grid"]]
    return traces, results


def render_accuracy(ctx: Context, mems: Sequence[int], traces: Sequence[TraceFile],
                    results: dict[str, dict[str, Any]]) -> Section:
    sec = Section(ACCURACY_TITLE)
    for t in traces:
        sec.add_command(t.command)
    first = results[PRESETS[0]]
    grid0 = first["figures"]["grid"]
    top = grid0[0]["top"] if grid0 else None
    drops = sum(g["drops"] for r in results.values() for g in r["figures"]["grid"])
    sec.paragraph(
        f"`{TOOL} compare` replays each trace once per algorithm and memory budget "
        f"({', '.join(fmt_bytes(m) for m in mems)}; the tool's `KB` is 1024 bytes) with one dpu worker, "
        "as fast as possible: a full ring makes the wire wait instead of dropping, so every packet is "
        f"counted ({fmt_int(drops)} drops in all) and the errors do not depend on timing. Each grid ran "
        + ("once (quick mode). " if ctx.quick else
           "once, not three times: apart from timing the runs are deterministic for a given seed (hashes and "
           "NitroSketch's sampling are seeded); only Duet's hardware insertions are timed, which can move a "
           "flow's promotion by a few packets. ")
        + "ARE, AAE and RMSE are taken over every flow of the trace, WMRE over the flow-size distribution; "
        f"heavy hitters are the flows with at least the tool's default threshold of 0.05 % of the packets "
        f"({fmt_int(top) if top is not None else '?'} packets on the {PRESETS[0]} trace), and F1 compares the "
        "reported heavy flows with the true ones. NitroSketch runs with its default sampling probability "
        f"p = {first.get('parameters', {}).get('sample_p', '?')}; Duet's budget covers its Count-Min and its "
        "promoted-flow records, not the hardware table "
        "(the paper counts only the sketch). `duet` has 16-bit sketch counters, the default: a flow leaves the "
        "sketch at TOP, so its counters only ever hold light flows, and half-width counters give it twice as "
        "many in the same bytes; `duet-32bit` is the paper's Duet (`--duet-counter-bits 32`).")
    sec.paragraph(trace_note(traces, {p: r["figures"]["flows"] for p, r in results.items()}))
    sec.paragraph(placement_note(ctx.runs))
    note = parameters_note(first, skip=("trace",))
    if note:
        sec.paragraph(note)

    for t in traces:
        preset = t.spec.preset
        res = results[preset]
        grid = grid_index(res)
        algos = [a for a in (*ALGOS, DUET32) if any((a, m) in grid for m in mems)]
        f = res["figures"]
        g0 = next(iter(grid.values()))
        sec.paragraph(f"The {preset} trace: {fmt_int(f['packets'])} packets, {fmt_int(f['flows'])} flows, "
                      f"heavy threshold {fmt_int(g0['top'])} packets, "
                      f"{fmt_int(g0['metrics'].get('hh_true', 0))} heavy flows.")
        for key, label, _log in METRICS:
            rows = []
            for a in algos:
                rows.append([a] + [fmt_sig(metric(grid[(a, m)], key)) if (a, m) in grid else "n/a" for m in mems])
            better = "higher is better" if key == "hh_f1" else "lower is better"
            sec.table(["algorithm"] + [fmt_bytes(m) for m in mems], rows,
                      caption=f"{preset}: {label} vs memory ({better})")
        sec.paragraph(accuracy_summary(preset, grid, algos, mems))
        if preset == "backbone" and ("duet", ACCURACY_CLAIM_MEMORY) in grid and ("cms", ACCURACY_CLAIM_MEMORY) in grid:
            duet_are = metric(grid[("duet", ACCURACY_CLAIM_MEMORY)], "are")
            cms_are = metric(grid[("cms", ACCURACY_CLAIM_MEMORY)], "are")
            ctx.finding("duet.accuracy", 100 * (1 - duet_are / cms_are) if cms_are else math.nan, res,
                        f"ARE {fmt_sig(duet_are)} against {fmt_sig(cms_are)}")

        path, rel = ctx.plot_path(f"{preset}")
        panels = []
        for key, label, log in METRICS:
            lines = [Line(a, mems, [metric(grid[(a, m)], key) for m in mems], algo_style(a)) for a in algos]
            panels.append(Panel(label, label, lines, logy=log, ylim=(0, 1.02) if key == "hh_f1" else None))
        panels_plot(path, panels, title=f"Accuracy vs memory, {preset} trace", xlabel="memory (bytes)",
                    xticks=mems, xtick_format=fmt_bytes_short)
        sec.image(rel, f"Accuracy vs memory on the {preset} trace",
                  f"{preset} trace: ARE, AAE, RMSE, WMRE (log y where all values are positive) and heavy-hitter "
                  "F1 vs memory, one line per algorithm; NitroSketch variants are dashed in their base sketch's "
                  "colour.")
    return sec


def accuracy_summary(preset: str, grid: dict[tuple[str, int], dict[str, Any]], algos: Sequence[str],
                     mems: Sequence[int]) -> str:
    """Who wins ARE and HH F1 at each budget, and where Duet stands."""
    parts = []
    for m in mems:
        here = [a for a in algos if (a, m) in grid]
        are = {a: metric(grid[(a, m)], "are") for a in here}
        f1 = {a: metric(grid[(a, m)], "hh_f1") for a in here}
        best_are = min((a for a in here if not math.isnan(are[a])), key=lambda a: are[a], default=None)
        best_f1 = max((a for a in here if not math.isnan(f1[a])), key=lambda a: f1[a], default=None)
        text = f"at {fmt_bytes(m)} the lowest ARE is {best_are} ({fmt_sig(are[best_are])})" if best_are else \
            f"at {fmt_bytes(m)} no ARE"
        if best_f1:
            tied = [a for a in here if not math.isnan(f1[a]) and f1[a] >= f1[best_f1] - 1e-12]
            text += f" and the best HH F1 {fmt_sig(f1[best_f1])} ({', '.join(tied)})"
        if "duet" in here and best_are and best_are != "duet":
            text += f"; Duet: ARE {fmt_sig(are['duet'])}, HH F1 {fmt_sig(f1['duet'])}"
        parts.append(text)
    duet_hw = ""
    m = mems[-1]
    if ("duet", m) in grid and "hw" in grid[("duet", m)]:
        hw = grid[("duet", m)]["hw"]
        duet_hw = (f" At {fmt_bytes(m)} Duet's hardware table counted {fmt_sig(100 * hw['share_of_packets'])} % of "
                   f"the packets ({fmt_int(hw['inserts'])} rules inserted, {fmt_int(hw['refused'])} refused).")
    return f"On the {preset} trace, " + "; ".join(parts) + "." + duet_hw


# -- measure.speed -------------------------------------------------------------

SPEED_TITLE = "measure.speed: dpu CPU per packet, throughput, and drops under load (Duet Fig. 5)"


@experiment(
    "measure.speed",
    title=SPEED_TITLE,
    description="dpu CPU ns/packet and Mpps of every algorithm at 500 KB; drops and error at a rate that saturates Count-Min.",
    tools=[TOOL],
)
def speed(ctx: Context) -> Section:
    return render_speed(ctx, collect_speed(ctx))


@dataclass
class SpeedRuns:
    trace: TraceFile
    repeats: int
    free: dict[str, Point]    # (a) every algorithm as fast as possible
    rate: int                 # (b)'s offered rate, from (a)'s Count-Min
    loaded: dict[str, Point]  # (b) RATE_ALGOS at that rate
    busy: Any                 # the machine's background load before and after
    busy_after: Any


def collect_speed(ctx: Context) -> SpeedRuns:
    t = ensure_trace(ctx, "backbone")
    busy = ctx.measured("busy_before", background_busy)
    reps = timing_repeats(ctx)
    steps = len(ALGOS) + len(RATE_ALGOS)
    base = ["run", "--trace", t.path, "--memory", memory_arg(SPEED_MEMORY)]
    free: dict[str, Point] = {}
    for i, algo in enumerate(ALGOS, 1):
        free[algo] = ctx.run_point(TOOL, base + ["--algo", algo], label=f"{algo}-fast",
                                   key="dpu_cpu_ns_per_packet", detail=f"{algo} as fast as possible",
                                   step=i, steps=steps, repeats=reps)
    cms_ns = free["cms"].figures["dpu_cpu_ns_per_packet"]
    rate = saturating_rate(cms_ns)
    loaded: dict[str, Point] = {}
    for j, algo in enumerate(RATE_ALGOS, len(ALGOS) + 1):
        loaded[algo] = ctx.run_point(TOOL, base + ["--algo", algo, "--rate", rate], label=f"{algo}-rate{rate}",
                                     key="drops", detail=f"{algo} at {fmt_pps(rate)}", step=j, steps=steps,
                                     repeats=reps)
    busy_after = ctx.measured("busy_after", background_busy)
    return SpeedRuns(t, reps, free, rate, loaded, busy, busy_after)


def render_speed(ctx: Context, runs: SpeedRuns) -> Section:
    t, reps, free, rate, loaded = runs.trace, runs.repeats, runs.free, runs.rate, runs.loaded
    busy, busy_after = runs.busy, runs.busy_after
    cms_ns = free["cms"].figures["dpu_cpu_ns_per_packet"]
    sec = Section(SPEED_TITLE)
    sec.add_command(t.command)
    duet_ns = free["duet"].figures["dpu_cpu_ns_per_packet"]
    ratio = duet_ns / cms_ns if cms_ns else float("nan")
    cms_work = free["cms"].figures["dpu_work_ns_per_packet"]
    duet_work = free["duet"].figures["dpu_work_ns_per_packet"]
    verdict = "meets" if ratio <= 0.5 else "does not meet"
    sec.paragraph(
        f"Headline: Duet spends {fmt_sig(duet_ns)} ns of dpu CPU per packet, {fmt_ratio(ratio)} Count-Min's "
        f"{fmt_sig(cms_ns)} ns, measured side by side in this evaluation at {fmt_bytes(SPEED_MEMORY)} on the "
        f"backbone trace; this {verdict} the target of at most half of Count-Min's. Duet's hardware table "
        f"counted {fmt_sig(100 * free['duet'].figures.get('hw', {}).get('share_of_packets', float('nan')))} % "
        "of the packets in the hardware table, so they never reached a dpu worker; per packet that did reach it, "
        f"Duet's dpu side spent {fmt_sig(sketch_path_ns(free['duet'].median))} ns (Count-Min: every packet "
        f"reaches its worker). Counting only the workers' time inside packet batches (`dpu work`: no "
        f"polling, no wake-ups), Duet spends {fmt_sig(duet_work)} ns per packet against Count-Min's "
        f"{fmt_sig(cms_work)} ns ({fmt_ratio(duet_work / cms_work if cms_work else float('nan'))})."
        + polling_caveat(free["cms"].median, free["duet"].median))
    sec.paragraph(
        f"(a) `{TOOL} run --algo A --memory 500KB` replays the backbone trace through the emulated datapath "
        "(one wire per RSS queue, in its dpu worker's own loop: the hardware flow-table match for Duet and the "
        "rx ring; the worker updating the sketch) as fast as possible, so a full ring makes the wire wait and "
        "nothing is dropped. `dpu CPU ns/packet` is the CPU time of the dpu threads (the worker, and Duet's "
        "control thread) divided by every packet of the trace, including the ones Duet counts in hardware; "
        "`hw CPU ns/packet` is the wire's share of the worker thread's time (its match and ring, the table's "
        "firmware), which the worker's clock leaves out. A worker that finds its ring empty waits until an "
        "interrupt would wake it, so its CPU time is its work plus its wake-ups. `dpu busy` is the dpu CPU "
        "time over the run's wall time: near 100 % the worker never waited. "
        + repeats_note(reps, "dpu_cpu_ns_per_packet"))
    sec.paragraph(
        f"(b) The same runs with `--rate {rate}`: 1.5 times the rate one fully busy Count-Min worker sustains "
        f"(1.5 × 10⁹ / {fmt_sig(cms_ns)} ns, rounded to two digits: {fmt_pps(rate)}). Each queue's wire sends "
        "its share of that rate on its clock and a full ring is a counted drop, as on a DPU whose Arm cores fall behind; "
        "errors are against the ground truth of every offered packet, so drops show up as underestimates. "
        + repeats_note(reps, "drops"))
    sec.paragraph(trace_note([t], {"backbone": free["cms"].figures["flows"]}))
    sec.paragraph(placement_note(ctx.runs))
    if busy is not None or busy_after is not None:
        sec.paragraph(background_note(busy, busy_after))
    note = parameters_note(free["cms"].median, skip=("trace",))
    if note:
        sec.paragraph(note)

    rows = []
    for algo in ALGOS:
        f = free[algo].figures
        hw_share = f.get("hw", {}).get("share_of_packets")
        rows.append([
            algo, fmt_sig(f["throughput_mpps"]), fmt_sig(f["dpu_cpu_ns_per_packet"]),
            fmt_ratio(f["dpu_cpu_ns_per_packet"] / cms_ns if cms_ns else float("nan")),
            fmt_sig(f["dpu_work_ns_per_packet"]),
            fmt_ratio(f["dpu_work_ns_per_packet"] / cms_work if cms_work else float("nan")),
            fmt_sig(100 * dpu_busy(free[algo].median)) + " %", fmt_sig(f["hw_cpu_ns_per_packet"]),
            "-" if hw_share is None else fmt_sig(100 * hw_share) + " %",
            fmt_sig(metric(f, "are")), fmt_sig(metric(f, "hh_f1")), fmt_int(f["drops"]),
        ])
    sec.table(["algorithm", "Mpps", "dpu CPU ns/pkt", "vs cms", "dpu work ns/pkt", "vs cms", "dpu busy",
               "hw CPU ns/pkt", "counted in hw",
               "ARE", "HH F1", "drops"], rows,
              caption=f"(a) As fast as possible, one dpu worker, {fmt_bytes(SPEED_MEMORY)}")
    path, rel = ctx.plot_path("cpu")
    bars_plot(path, [
        BarPanel("dpu CPU per packet", "ns / packet", {"dpu": [free[a].figures["dpu_cpu_ns_per_packet"] for a in ALGOS]},
                 refline=(cms_ns / 2, "half of cms (the target for duet)")),
        BarPanel("throughput", "Mpps", {"Mpps": [free[a].figures["throughput_mpps"] for a in ALGOS]}),
    ], list(ALGOS), title=f"As fast as possible, backbone trace, {fmt_bytes(SPEED_MEMORY)}", ncols=2,
        highlight="duet", highlight_color=_BASE_COLOR["duet"])
    sec.image(rel, "dpu CPU ns per packet and throughput per algorithm",
              "dpu CPU time per packet (left) and packets per second (right) per algorithm, one dpu worker.")

    rows = []
    for algo in RATE_ALGOS:
        f, f0 = loaded[algo].figures, free[algo].figures
        rows.append([
            algo, fmt_sig(rate / 1e6), fmt_sig(f["throughput_mpps"]), fmt_int(f["drops"]),
            fmt_sig(drop_pct(f)) + " %", fmt_sig(metric(f, "are")), fmt_sig(metric(f0, "are")),
            fmt_sig(metric(f, "hh_f1")), fmt_sig(metric(f0, "hh_f1")),
            fmt_sig(f["dpu_cpu_ns_per_packet"]),
        ])
    sec.table(["algorithm", "offered Mpps", "wire Mpps", "drops", "dropped", "ARE", "ARE no drops",
               "HH F1", "HH F1 no drops", "dpu CPU ns/pkt"], rows,
              caption=f"(b) Offered {fmt_pps(rate)}, one dpu worker, {fmt_bytes(SPEED_MEMORY)}; "
                      "'no drops' = the same algorithm as fast as possible, from (a)")
    short = [r for r in RATE_ALGOS if loaded[r].figures["throughput_mpps"] < 0.9 * rate / 1e6]
    if short:
        sec.paragraph(
            "The wire rate (packets / run time) fell short of the offered rate for " + ", ".join(short)
            + ": the wire could not pace that fast, so the dpu side saw less than the offered load.")
    path, rel = ctx.plot_path("drops")
    cats = list(RATE_ALGOS)
    bars_plot(path, [
        BarPanel("dropped packets", "% of packets", {"at rate": [drop_pct(loaded[a].figures) for a in cats]},
                 fmt=lambda v: f"{v:.3g}"),
        BarPanel("ARE", "ARE", {"no drops": [metric(free[a].figures, "are") for a in cats],
                                f"at {fmt_thousands(rate)}/s": [metric(loaded[a].figures, "are") for a in cats]},
                 logy=True),
        BarPanel("heavy-hitter F1", "F1", {"no drops": [metric(free[a].figures, "hh_f1") for a in cats],
                                           f"at {fmt_thousands(rate)}/s": [metric(loaded[a].figures, "hh_f1")
                                                                           for a in cats]},
                 fmt=lambda v: f"{v:.2f}"),
    ], cats, title=f"Offered {fmt_pps(rate)} (1.5 × Count-Min's capacity), backbone trace", highlight="duet", highlight_color=_BASE_COLOR["duet"])
    sec.image(rel, "Drops and error under an offered rate",
              "Dropped packets (left), ARE (middle, log y) and heavy-hitter F1 (right) at the offered rate, "
              "beside the same algorithm without drops.")
    return sec


# -- measure.convergence -------------------------------------------------------

CONVERGENCE_TITLE = "measure.convergence: error vs packets seen, and Duet's hardware table over time (NitroSketch Figs. 11-12)"

# (algorithm, NitroSketch sampling probability or None)
CONVERGENCE_VARIANTS: tuple[tuple[str, float | None], ...] = (
    ("cms", None), ("nitro-cms", 0.1), ("nitro-cms", 0.01),
    ("cs", None), ("nitro-cs", 0.1), ("nitro-cs", 0.01),
    ("duet", None),
)


def variant_name(algo: str, p: float | None) -> str:
    return algo if p is None else f"{algo} p={p:g}"


@experiment(
    "measure.convergence",
    title=CONVERGENCE_TITLE,
    description="NitroSketch (p = 0.1, 0.01), vanilla sketches and Duet: error vs packets seen; Duet's hw entries over time.",
    tools=[TOOL],
)
def convergence(ctx: Context) -> Section:
    return render_convergence(ctx, collect_convergence(ctx))


@dataclass
class ConvergenceRuns:
    trace: TraceFile
    prefixes: list[int]
    # (a) variant -> prefix -> (figures, heavy-flow relative error)
    sweep: dict[str, dict[int, tuple[dict[str, Any], float]]]
    # (b) one Duet run at timeline_rate, sampled every `every` packets
    timeline_seconds: float
    timeline_rate: int
    every: int
    timeline: dict[str, Any]


def collect_convergence(ctx: Context) -> ConvergenceRuns:
    t = ensure_trace(ctx, "backbone")
    prefixes = prefix_series(t.spec.packets, 5 if ctx.quick else 8)
    timeline_seconds = 0.5 if ctx.quick else 2.0
    timeline_rate = int(round(t.spec.packets / timeline_seconds))
    every = max(1, t.spec.packets // 100)
    steps = len(CONVERGENCE_VARIANTS) * len(prefixes) + 1
    step = 0
    # variant -> prefix -> (figures, heavy-flow relative error)
    sweep: dict[str, dict[int, tuple[dict[str, Any], float]]] = {}
    ctx.runs_dir.mkdir(parents=True, exist_ok=True)
    for algo, p in CONVERGENCE_VARIANTS:
        name = variant_name(algo, p)
        sweep[name] = {}
        for n in prefixes:
            step += 1
            label = f"{algo}{'' if p is None else f'-p{p:g}'}-n{n}"
            csv_path = ctx.runs_dir / f"{ctx.name}-{label}.estimates.csv"
            args = ["run", "--trace", t.path, "--algo", algo, "--memory", memory_arg(SPEED_MEMORY),
                    "--packets", n, "--dump-estimates", csv_path]
            if p is not None:
                args += ["--sample-p", p]
            ctx.progress(f"{name}, first {fmt_int(n)} packets", step, steps)
            r = ctx.run_native(TOOL, args, label=label)
            f = r["figures"]

            def heavy_hitter_error(csv_path: Path = csv_path, top: Any = f["top"]) -> float:
                try:
                    return relative_error(read_estimates(csv_path), top)
                finally:
                    csv_path.unlink(missing_ok=True)  # large; the command line regenerates it

            # Kept in the eval's record: the per-flow dump is removed, and --render reads this instead.
            hh_re = ctx.measured(f"{label}.heavy_hitter_error", heavy_hitter_error)
            sweep[name][n] = (f, hh_re)
    step += 1
    ctx.progress(f"duet timeline at {fmt_pps(timeline_rate)}", step, steps)
    tl_run = ctx.run_native(
        TOOL, ["run", "--trace", t.path, "--algo", "duet", "--memory", memory_arg(SPEED_MEMORY),
               "--rate", timeline_rate, "--timeline-every", every], label="duet-timeline")
    return ConvergenceRuns(t, prefixes, sweep, timeline_seconds, timeline_rate, every, tl_run)


def render_convergence(ctx: Context, runs: ConvergenceRuns) -> Section:
    t, prefixes, sweep, every = runs.trace, runs.prefixes, runs.sweep, runs.every
    timeline_seconds, timeline_rate, tl_run = runs.timeline_seconds, runs.timeline_rate, runs.timeline
    sec = Section(CONVERGENCE_TITLE)
    sec.add_command(t.command)
    names = list(sweep)
    sec.paragraph(
        f"(a) `{TOOL} run --packets N` replays only the first N packets of the backbone trace, for N in "
        f"{', '.join(fmt_int(n) for n in prefixes)} (each half the next), at {fmt_bytes(SPEED_MEMORY)}, one "
        "dpu worker, as fast as possible (no drops). Errors are against the ground truth of those N packets, "
        "and the heavy threshold is the tool's default 0.05 % of them, so it grows with N. NitroSketch "
        "samples row updates with probability p (0.1 and 0.01; each sampled update adds 1/p), which makes "
        "single-packet flows noisy, so besides ARE over every flow the tables show the relative error of the "
        "heavy flows alone (the flows at or above the threshold), the error NitroSketch's paper plots; it is "
        "computed from the per-flow CSV that `--dump-estimates` writes (deleted after reading: it is large, "
        "and the command line writes it again). Each point ran once: the sampling is seeded, so a point is "
        "deterministic apart from Duet's timed hardware insertions.")
    sec.paragraph(
        f"(b) One Duet run over the whole trace at an offered {fmt_pps(timeline_rate)} (so it lasts about "
        f"{timeline_seconds:g} s) with `--timeline-every {every}`: the run's own thread samples the hardware table's "
        "occupancy and Duet's promotion count every that many packets. Rules enter the table no faster than "
        "the emulated insertion rate (77,000/s by default) and age out after 1 s idle.")
    sec.paragraph(trace_note([t], {"backbone": sweep[names[0]][prefixes[-1]][0]["flows"]}))
    sec.paragraph(placement_note(ctx.runs))

    cols = ["variant"] + [fmt_thousands(n) for n in prefixes]
    sec.table(cols, [[nm] + [fmt_sig(metric(sweep[nm][n][0], "are")) for n in prefixes] for nm in names],
              caption="(a) ARE over every flow vs packets seen")
    sec.table(cols, [[nm] + [fmt_sig(sweep[nm][n][1]) for n in prefixes] for nm in names],
              caption="(a) Relative error of the heavy flows vs packets seen")
    sec.table(cols, [[nm] + [fmt_sig(metric(sweep[nm][n][0], "hh_f1")) for n in prefixes] for nm in names],
              caption="(a) Heavy-hitter F1 vs packets seen")
    sec.paragraph(convergence_summary(sweep, prefixes))

    path, rel = ctx.plot_path("error-vs-packets")
    panels = []
    for title, ylabel, get, log in (
        ("ARE, every flow", "ARE", lambda f, e: metric(f, "are"), True),
        ("relative error, heavy flows", "mean relative error", lambda f, e: e, True),
        ("heavy-hitter F1", "F1", lambda f, e: metric(f, "hh_f1"), False),
    ):
        lines = []
        for (algo, p), nm in zip(CONVERGENCE_VARIANTS, names):
            lines.append(Line(nm, prefixes, [get(*sweep[nm][n]) for n in prefixes], algo_style(algo, p)))
        panels.append(Panel(title, ylabel, lines, logy=log, ylim=(0, 1.02) if not log else None))
    panels_plot(path, panels, title=f"Error vs packets seen, backbone trace, {fmt_bytes(SPEED_MEMORY)}",
                xlabel="packets seen", logx=True, xticks=prefixes, xtick_format=fmt_thousands)
    sec.image(rel, "Error vs packets seen",
              "ARE over every flow, relative error of the heavy flows (log y) and heavy-hitter F1 vs packets "
              "seen (log x). Dashed: NitroSketch p = 0.1; dotted: p = 0.01; solid: vanilla sketches and Duet.")

    tf = tl_run["figures"]
    timeline = tf.get("timeline", [])
    hw, duet = tf.get("hw", {}), tf.get("duet", {})
    peak = max((pt["hw_entries"] for pt in timeline), default=0)
    sec.table(["seconds", "wire Mpps", "drops", "timeline samples", "peak hw entries", "final hw entries",
               "promotions", "installed", "refused", "aged", "counted in hw", "ARE", "HH F1"], [[
                   fmt_sig(tf["seconds"]), fmt_sig(tf["throughput_mpps"]), fmt_int(tf["drops"]),
                   fmt_int(len(timeline)), fmt_int(peak), fmt_int(hw.get("entries", 0)),
                   fmt_int(duet.get("promotions", 0)), fmt_int(duet.get("installed", 0)),
                   fmt_int(hw.get("refused", 0)), fmt_int(hw.get("aged", 0)),
                   fmt_sig(100 * hw.get("share_of_packets", float("nan"))) + " %",
                   fmt_sig(metric(tf, "are")), fmt_sig(metric(tf, "hh_f1"))]],
              caption=f"(b) Duet at {fmt_pps(timeline_rate)}, backbone trace, {fmt_bytes(SPEED_MEMORY)}")
    if timeline:
        path, rel = ctx.plot_path("duet-timeline")
        xs = [pt["seconds"] for pt in timeline]
        plain = {"marker": None, "linewidth": 1.8}
        panels_plot(path, [
            Panel("hardware table", "flows", [
                Line("hw entries", xs, [pt["hw_entries"] for pt in timeline], plain | {"color": "tab:red"}),
                Line("promotions (cumulative)", xs, [pt["promotions"] for pt in timeline],
                     plain | {"color": "tab:gray", "linestyle": "--"})], ymin_zero=True),
            Panel("packets replayed", "packets, cumulative", [
                Line("packets replayed", xs, [pt["packets"] for pt in timeline], plain | {"color": "tab:blue"})],
                ymin_zero=True, yfmt=fmt_thousands),
            Panel("drops", "packets dropped, cumulative", [
                Line("drops", xs, [pt["drops"] for pt in timeline], plain | {"color": "tab:purple"})],
                ymin_zero=True),
        ], title=f"Duet over time at {fmt_pps(timeline_rate)}, backbone trace", xlabel="seconds")
        sec.image(rel, "Duet hardware table occupancy over time",
                  "Hardware-table entries and cumulative promotions (left), packets replayed (middle: the slope "
                  "is the wire rate) and cumulative drops (right) vs time, sampled as the wires pass every "
                  f"{fmt_int(every)} packets.")
    else:
        sec.paragraph(f"The timeline run returned no samples (`figures.timeline` is empty).")
    return sec


def convergence_summary(sweep: dict[str, dict[int, tuple[dict[str, Any], float]]], prefixes: Sequence[int]) -> str:
    """NitroSketch's heavy-flow error against its vanilla sketch at the first and last prefix."""
    parts = []
    first, last = prefixes[0], prefixes[-1]
    for nitro, vanilla in (("nitro-cms", "cms"), ("nitro-cs", "cs")):
        for p in (0.1, 0.01):
            nm = variant_name(nitro, p)
            if nm not in sweep or vanilla not in sweep:
                continue
            parts.append(
                f"{nm}: heavy-flow error {fmt_sig(sweep[nm][first][1])} after {fmt_thousands(first)} packets, "
                f"{fmt_sig(sweep[nm][last][1])} after {fmt_thousands(last)} (vanilla {vanilla}: "
                f"{fmt_sig(sweep[vanilla][first][1])} → {fmt_sig(sweep[vanilla][last][1])})")
    if "duet" in sweep:
        parts.append(f"duet: {fmt_sig(sweep['duet'][first][1])} → {fmt_sig(sweep['duet'][last][1])}")
    return ("Heavy-flow relative error, first to last prefix: " + "; ".join(parts) + ".") if parts else ""


# -- measure.throughput --------------------------------------------------------

THROUGHPUT_TITLE = "measure.throughput: the highest offered rate with no drops (Duet Fig. 5)"
# (label, the tool's arguments); "none" is the datapath with no sketch: the worker's per-packet floor.
THROUGHPUT_VARIANTS: tuple[tuple[str, list[str]], ...] = (
    ("none", ["--algo", "none"]),
    ("cms", ["--algo", "cms"]),
    ("cs", ["--algo", "cs"]),
    ("elastic", ["--algo", "elastic"]),
    ("univmon", ["--algo", "univmon"]),
    ("nitro-cms p=0.01", ["--algo", "nitro-cms", "--sample-p", "0.01"]),
    ("nitro-cms p=0.001", ["--algo", "nitro-cms", "--sample-p", "0.001"]),
    ("nitro-cs p=0.01", ["--algo", "nitro-cs", "--sample-p", "0.01"]),
    ("nitro-cs p=0.001", ["--algo", "nitro-cs", "--sample-p", "0.001"]),
    ("nitro-univmon p=0.01", ["--algo", "nitro-univmon", "--sample-p", "0.01"]),
    ("nitro-univmon p=0.001", ["--algo", "nitro-univmon", "--sample-p", "0.001"]),
    ("duet", ["--algo", "duet"]),
    (DUET32, ["--algo", "duet", "--duet-counter-bits", "32"]),
)
THROUGHPUT_QUICK = ("none", "cms", "univmon", "nitro-univmon p=0.01", "duet")
PACKET_SIZES = (64, 1024)


@experiment(
    "measure.throughput",
    title=THROUGHPUT_TITLE,
    description="Zero-loss rate (binary search over --rate) of every algorithm and NitroSketch at p = 0.01 and "
                "0.001, at 64- and 1024-byte packets, one polling dpu worker, after a warm-up pass.",
    tools=[TOOL],
)
def throughput(ctx: Context) -> Section:
    return render_throughput(ctx, collect_throughput(ctx))


@dataclass
class ThroughputRuns:
    trace: TraceFile
    variants: list[tuple[str, list[str]]]
    runs: dict[tuple[str, int], list[dict[str, Any]]]  # (variant, packet size) -> its zero-loss runs, by round
    busy: Any
    busy_after: Any


def collect_throughput(ctx: Context) -> ThroughputRuns:
    t = ensure_trace(ctx, "backbone")
    variants = [v for v in THROUGHPUT_VARIANTS if not ctx.quick or v[0] in THROUGHPUT_QUICK]
    busy = ctx.measured("busy_before", background_busy)
    steps = ctx.repeats * len(PACKET_SIZES) * len(variants)
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {(v, size): [] for v, _ in variants for size in PACKET_SIZES}
    step = 0
    # Paired rounds: every variant at every size once, then again, so that a
    # slow spell of this shared machine falls on all of them alike.
    for rep in range(1, ctx.repeats + 1):
        for size in PACKET_SIZES:
            for name, args in variants:
                step += 1
                note = f" round {rep}/{ctx.repeats}" if ctx.repeats > 1 else ""
                ctx.progress(f"{name} at {size} B{note}", step, steps)
                runs[(name, size)].append(ctx.run_native(
                    TOOL, ["zero-loss", "--trace", t.path, "--memory", memory_arg(SPEED_MEMORY), "--poll",
                           "--passes", 2, "--packet-size", size, *args],
                    label=f"zero-loss-{name.replace(' ', '-')}-{size}" + (f"-r{rep}" if ctx.repeats > 1 else "")))
    busy_after = ctx.measured("busy_after", background_busy)
    return ThroughputRuns(t, variants, runs, busy, busy_after)


def render_throughput(ctx: Context, collected: ThroughputRuns) -> Section:
    t, variants, runs = collected.trace, collected.variants, collected.runs
    busy, busy_after = collected.busy, collected.busy_after
    points = {k: Point(v, median_run(v, "zero_loss_pps")) for k, v in runs.items()}

    def mpps(name: str, size: int) -> float:
        return points[(name, size)].figures["zero_loss_mpps"]

    def spread(name: str, size: int) -> str:
        values = sorted(r["figures"]["zero_loss_mpps"] for r in runs[(name, size)])
        return f"{fmt_sig(values[0])}–{fmt_sig(values[-1])}" if len(values) > 1 else "-"

    def hw_share(name: str, size: int) -> float | None:
        return points[(name, size)].figures.get("at_rate", {}).get("hw", {}).get("share_of_packets")

    def handled_ns(name: str, size: int) -> float | None:
        """The dpu worker's time inside its batches per packet it handled, at the zero-loss rate."""
        if (name, size) not in points:
            return None
        return points[(name, size)].figures.get("at_rate", {}).get("dpu_work_ns_per_worker_packet")

    sec = Section(THROUGHPUT_TITLE)
    sec.add_command(t.command)
    headline = []
    for size in PACKET_SIZES:
        share = hw_share("duet", size)
        cms = mpps("cms", size)
        if share is not None and share < 1 and cms > 0:
            limit = cms / (1 - share)
            headline.append(
                f"at {size}-byte packets Duet takes {fmt_sig(mpps('duet', size))} Mpps with no drops, "
                f"{fmt_ratio(mpps('duet', size) / cms)} Count-Min's {fmt_sig(cms)}; its hardware table counted "
                f"{fmt_sig(100 * share)} % of the packets, which sets a limit of {fmt_sig(limit)} Mpps "
                f"(1 / (1 − share) × Count-Min's rate): Duet reaches {fmt_ratio(mpps('duet', size) / limit)} of it")
    floor = mpps("none", PACKET_SIZES[0])
    headline_text = ("Headline: " + "; ".join(headline) + ". The datapath with no sketch (`none`: the wire "
                     f"and a worker that only reads each packet's key) takes {fmt_sig(floor)} Mpps.")
    duet_ns, cms_ns = handled_ns("duet", PACKET_SIZES[0]), handled_ns("cms", PACKET_SIZES[0])
    if duet_ns and cms_ns:
        headline_text += (
            f" Duet's worker spends {fmt_sig(duet_ns)} ns on each packet it handles, Count-Min's "
            f"{fmt_sig(cms_ns)} ({fmt_ratio(duet_ns / cms_ns)}): the limit prices the packets the hardware leaves "
            "at Count-Min's average packet, but they are the light flows' packets, whose counters and headers are "
            f"seldom in the worker's caches, so a worker that is the bottleneck reaches at most "
            f"{fmt_ratio(cms_ns / duet_ns)} of the limit.")
    sec.paragraph(headline_text)
    throughput_findings(ctx, points)
    nitro_um = "nitro-univmon p=0.01"
    if ("univmon", PACKET_SIZES[0]) in points and (nitro_um, PACKET_SIZES[0]) in points:
        um, num = mpps("univmon", PACKET_SIZES[0]), mpps(nitro_um, PACKET_SIZES[0])
        sec.paragraph(
            f"NitroSketch over UnivMon at p = 0.01 takes {fmt_sig(num)} Mpps against vanilla UnivMon's "
            f"{fmt_sig(um)} ({fmt_ratio(num / um if um else float('nan'))}); the paper's claim is at least 10×. "
            "Every packet still pays for one hash to find its UnivMon level (the sub-streams are chosen by a "
            "hash of the flow), which sampling cannot skip; see docs/measure.md.")
    sec.paragraph(
        f"`{TOOL} zero-loss` searches for the highest `--rate` at which a replay of the trace drops nothing "
        "(binary search from twice the unpaced rate down, to 2 %; a probe passes when no worker ring overflowed "
        "and the wire really offered the rate; a failed probe is run once more before its rate is given up). "
        "The trace is replayed twice, the first pass as fast as possible and unmeasured, so that Duet's heavy "
        "flows are in the hardware table when the measured pass begins (the paper's EXP3: Duet converges first). "
        "The dpu worker polls its ring, as a DPDK worker does (a worker that sleeps when idle drops at about "
        "6 Mpps here, whatever its algorithm: the wake-up, not the sketch, sets that rate); Duet's control path "
        "then runs on the worker between batches. The wire's work (RSS queue, a dense flow id for the emulated "
        "hardware table's O(1) match) is planned once when the trace is loaded. The emulation does no work per "
        "byte, so the 1024-byte rate in packets is the 64-byte one measured again and Gbps scales with the size. "
        + (f"Median of {ctx.repeats} rounds, every variant and size in each round; the range is over the rounds."
           if ctx.repeats > 1 else "One round (quick mode)."))
    sec.paragraph(trace_note([t], {"backbone": points[("cms", PACKET_SIZES[0])].figures.get("at_rate", {})
                                   .get("flows", 0)}))
    sec.paragraph(placement_note(ctx.runs))
    if busy is not None or busy_after is not None:
        sec.paragraph(background_note(busy, busy_after))
    for size in PACKET_SIZES:
        cms = mpps("cms", size)
        rows = []
        for name, _ in variants:
            f = points[(name, size)].figures
            share = hw_share(name, size)
            rows.append([name, fmt_sig(f["zero_loss_mpps"]), spread(name, size), fmt_sig(f["zero_loss_gbps"]),
                         fmt_ratio(f["zero_loss_mpps"] / cms if cms else float("nan")),
                         "-" if share is None else fmt_sig(100 * share) + " %",
                         "-" if share is None or share >= 1 else fmt_sig(cms / (1 - share)),
                         fmt_sig(f["unpaced_pps"] / 1e6),
                         "-" if handled_ns(name, size) is None else fmt_sig(handled_ns(name, size))])
        sec.table(["algorithm", "zero-loss Mpps", "range", "Gbps", "× cms", "counted in hw",
                   "limit Mpps (cms / (1 − share))", "unpaced Mpps", "worker ns per packet it handled"], rows,
                  caption=f"{size}-byte packets, one polling dpu worker, {fmt_bytes(SPEED_MEMORY)}")
    names = [n for n, _ in variants]
    path, rel = ctx.plot_path("throughput")
    bars_plot(path, [
        BarPanel("zero-loss packet rate", "Mpps", {f"{size} B": [mpps(n, size) for n in names]
                                                   for size in PACKET_SIZES}),
        BarPanel("zero-loss throughput", "Gbps", {f"{size} B": [points[(n, size)].figures["zero_loss_gbps"]
                                                                for n in names] for size in PACKET_SIZES}),
    ], names, title="Highest offered rate with no drops, backbone trace", ncols=1,
        highlight="duet", highlight_color=_BASE_COLOR["duet"])
    sec.image(rel, "zero-loss rate per algorithm",
              "The highest offered rate each algorithm takes with no drops, in packets (top) and bits (bottom) "
              "per second, at 64- and 1024-byte packets.")
    return sec


def throughput_findings(ctx: Context, points: dict[tuple[str, int], Point]) -> None:
    """The summary's figures (dpukit.summary): Duet over Count-Min in Gbps at 1024 B and in Mpps at 64 B,
    and the slowest NitroSketch's Gbps at 1024 B."""
    for size, claim, key in ((1024, "duet.throughput", "zero_loss_gbps"), (64, "duet.packet_rate", "zero_loss_mpps")):
        if ("duet", size) in points and ("cms", size) in points:
            duet, cms = points[("duet", size)].figures[key], points[("cms", size)].figures[key]
            ctx.finding(claim, duet / cms if cms > 0 else math.nan, points[("duet", size)].median,
                        f"{fmt_sig(duet)} against {fmt_sig(cms)} {key.rsplit('_', 1)[1].capitalize()}, {size} B")
    nitro = [(points[(n, s)].figures["zero_loss_gbps"], n) for n, s in points if n.startswith("nitro-") and s == 1024]
    if nitro:
        gbps, name = min(nitro)
        ctx.finding("nitrosketch.line_rate", gbps, points[(name, 1024)].median, f"{name}, 1024 B")


# -- measure.bluefield ---------------------------------------------------------

BLUEFIELD_TITLE = ("measure.bluefield: the zero-loss rate with the dpu at BlueField-2 speed, beside full speed "
                   "(Duet Fig. 5: 7.1× and 28.9×)")
# Every algorithm once (NitroSketch at p = 0.01); quick mode keeps Duet and the two baselines the issue names.
BLUEFIELD_VARIANTS = tuple(v for v in THROUGHPUT_VARIANTS
                           if v[0] in ("none", "cms", "cs", "elastic", "univmon", "nitro-cms p=0.01",
                                       "nitro-cs p=0.01", "nitro-univmon p=0.01", "duet"))
BLUEFIELD_QUICK = ("cms", "univmon", "duet")
# The paper's platform, and the speed it is compared with. bluefield2 is the whole model: F, and the Arm's
# packet path and table management (docs/core.md).
BLUEFIELD_SPEEDS = ("host", "bluefield2")
# The NIC's costs varied at bluefield2, for Duet and the baselines it is compared with: none (F alone, the model
# before issue 32), and the packet path at the one public single-core figure of mlx5's own receive + transmit:
# XDP_TX, 60-byte packets, 9.0 Mpps on one host core (Linux net-next "net/mlx5e: Permit XDP with non-linear legacy
# RQ", NVIDIA, 2022-03-18), 111 ns a packet there and 1/F as long on an Arm core. The kernel's path, where DPDK's
# is shorter: an upper figure, beside the preset's lower one (DPDK's loop without a NIC's descriptors).
NIC_F_ONLY, NIC_XDP_TX = "bluefield2-f-only", "bluefield2-xdp-tx"
NIC_VARIANTS = (NIC_F_ONLY, NIC_XDP_TX)
NIC_LABELS = {"bluefield2": "bluefield2 (F + packet path + rules)", NIC_F_ONLY: "bluefield2, F only",
              NIC_XDP_TX: "bluefield2, XDP_TX packet path"}
XDP_TX_HOST_NS = 1e9 / 9.0e6
NIC_ALGOS = ("cms", "cs", "elastic", "univmon", "duet")
NIC_QUICK = ("cms", "duet")
# The paper's baselines ran one instance on each of eight Arm cores (EXP1), and Duet on the same eight.
PAPER_ARM_CORES = 8
# 100 GbE at 1024-byte frames (+ 20 bytes of preamble and gap): the most any algorithm could take at Fig. 5a's size.
LINE_MPPS_1024 = 100e9 / ((1024 + 20) * 8) / 1e6
# Duet's gains the paper reports (EXP1): Fig. 5a, throughput at 1024-byte packets; Fig. 5b, packet rate at 64 B.
PAPER_GAIN_GBPS_1024 = 7.1
PAPER_GAIN_MPPS_64 = 28.9
PAPER_BASELINE_MPPS_64 = 0.3  # Fig. 5b: "the packet processing rates of CMS, CS, and ES are approximately 0.3 Mpps"
# The paper's baselines in Fig. 5 (UnivMon is not among them; the issue asks for it too).
PAPER_BASELINES = ("cms", "cs", "elastic")
GAIN_OVER = ("cms", "cs", "elastic", "univmon")
# A search ends at this fraction of its unpaced rate: on a busy machine, probes that drop on the
# worker losing its CPU would otherwise halve down to rates whose replays take seconds each.
BLUEFIELD_LOW_FRACTION = 0.1


def capacity_mpps(run: dict[str, Any]) -> float:
    """Packets per second of dpu CPU time, as fast as possible (every pass): what one dpu CPU
    takes when nothing else runs on it, which a busy machine does not move as it moves the wall clock."""
    ns = run["figures"]["dpu_cpu_ns_per_packet"]
    return 1e3 / ns if ns > 0 else float("nan")


def zero_loss_pps(run: dict[str, Any]) -> float:
    return run["figures"]["zero_loss_pps"]


def paired_gains(runs: dict[tuple[str, str], list[dict[str, Any]]], num: str, den: str,
                 speed: str, value: Any = zero_loss_pps) -> list[float]:
    """``num``'s ``value`` (default the zero-loss rate) over ``den``'s at ``speed``, one ratio per round
    (the rounds are paired)."""
    out = []
    for a, b in zip(runs.get((num, speed), []), runs.get((den, speed), [])):
        x, y = value(a), value(b)
        out.append(x / y if x > 0 and y > 0 else float("nan"))  # 0: the search's floor dropped, no rate
    return out


def median_and_range(values: Sequence[float]) -> tuple[float, str]:
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return float("nan"), "-"
    med = vals[(len(vals) - 1) // 2]
    return med, (f"{fmt_sig(vals[0])}–{fmt_sig(vals[-1])}" if len(vals) > 1 else "-")


@experiment(
    "measure.bluefield",
    title=BLUEFIELD_TITLE,
    description="Zero-loss rate of every algorithm (NitroSketch at p = 0.01) with the dpu at host speed and at "
                "bluefield2 (--dpu-speed, time dilation of the dpu workers and Duet's control path; the wire and "
                "the hardware table at full speed), side by side in interleaved rounds, 64-byte packets, one "
                "polling dpu worker; Duet's gain over Count-Min, Count Sketch, Elastic and UnivMon at bluefield2 "
                "against the paper's 7.1× and 28.9×.",
    tools=[TOOL],
)
def bluefield(ctx: Context) -> Section:
    return render_bluefield(ctx, collect_bluefield(ctx))


@dataclass
class BluefieldRuns:
    trace: TraceFile
    variants: list[tuple[str, list[str]]]
    runs: dict[tuple[str, str], list[dict[str, Any]]]      # (variant, speed) -> its zero-loss runs, by round
    capacity: dict[tuple[str, str], list[dict[str, Any]]]  # the same points as fast as possible, by round
    busy: Any
    busy_after: Any


def nic_args(config: str, bf2_factor: float) -> list[Any]:
    """The tool's options for a column of measure.bluefield: a speed, or a NIC variant at bluefield2."""
    if config == NIC_F_ONLY:
        return ["--dpu-speed", "bluefield2", "--packet-path-ns", 0, "--rule-cost-us", 0]
    if config == NIC_XDP_TX:
        return ["--dpu-speed", "bluefield2", "--packet-path-ns", f"{XDP_TX_HOST_NS / bf2_factor:.1f}"]
    return ["--dpu-speed", config]


def bluefield_configs(name: str, quick: bool) -> tuple[str, ...]:
    """What an algorithm runs at: both speeds, and the NIC variants for Duet and its baselines."""
    algo = name.split()[0]
    return BLUEFIELD_SPEEDS + (NIC_VARIANTS if algo in (NIC_QUICK if quick else NIC_ALGOS) else ())


def collect_bluefield(ctx: Context) -> BluefieldRuns:
    t = ensure_trace(ctx, "backbone")
    variants = [v for v in BLUEFIELD_VARIANTS if not ctx.quick or v[0] in BLUEFIELD_QUICK]
    reps = ctx.repeats
    precision = 0.1 if ctx.quick else 0.05
    # Asked of the native model once, and kept with the runs, so a re-render asks nothing.
    bf2_factor = ctx.measured("bluefield2_factor", lambda: resolve_dpu_speed("bluefield2").factor)
    busy = ctx.measured("busy_before", background_busy)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(n, sp): [] for n, _ in variants
                                                          for sp in bluefield_configs(n, ctx.quick)}
    capacity: dict[tuple[str, str], list[dict[str, Any]]] = {k: [] for k in runs}
    step, steps = 0, reps * len(runs)
    # Paired rounds: every algorithm at every speed, then again, so a slow spell of the machine falls on all alike.
    for rep in range(1, reps + 1):
        for name, args in variants:
            for speed in bluefield_configs(name, ctx.quick):
                step += 1
                note = f" round {rep}/{reps}" if reps > 1 else ""
                ctx.progress(f"{name} at {speed}{note}", step, steps)
                speed_args = nic_args(speed, bf2_factor)
                runs[(name, speed)].append(ctx.run_native(
                    TOOL, ["zero-loss", "--trace", t.path, "--memory", memory_arg(SPEED_MEMORY), "--poll",
                           "--passes", 2, "--packet-size", 64, "--precision", precision,
                           "--low-fraction", BLUEFIELD_LOW_FRACTION, *speed_args, *args],
                    label=f"zero-loss-{name.replace(' ', '-')}-{speed}" + (f"-r{rep}" if reps > 1 else "")))
                # The same point as fast as possible: its dpu CPU per packet.
                capacity[(name, speed)].append(ctx.run_native(
                    TOOL, ["run", "--trace", t.path, "--memory", memory_arg(SPEED_MEMORY), "--poll", "--passes", 2,
                           "--packet-size", 64, *speed_args, *args],
                    label=f"run-{name.replace(' ', '-')}-{speed}" + (f"-r{rep}" if reps > 1 else "")))
    busy_after = ctx.measured("busy_after", background_busy)
    return BluefieldRuns(t, variants, runs, capacity, busy, busy_after)


def render_bluefield(ctx: Context, collected: BluefieldRuns) -> Section:
    """The report of measure.bluefield from its runs alone."""
    t, variants, runs, capacity = collected.trace, collected.variants, collected.runs, collected.capacity
    busy, busy_after = collected.busy, collected.busy_after
    names = [n for n, _ in variants]
    host, bf = BLUEFIELD_SPEEDS
    points = {k: Point(v, median_run(v, "zero_loss_pps")) for k, v in runs.items()}
    factor = {sp: points[(names[0], sp)].median["placement"]["dpu_speed"]["factor"] for sp in BLUEFIELD_SPEEDS}

    def mpps(name: str, speed: str) -> float:
        v = points[(name, speed)].figures["zero_loss_mpps"]
        return v if v > 0 else float("nan")

    def rate_cell(name: str, speed: str) -> str:
        f = points[(name, speed)].figures
        if f["zero_loss_pps"] > 0:
            return fmt_sig(f["zero_loss_mpps"])
        return f"none: dropped at the floor, {fmt_sig(f['refused_pps'] / 1e6)}"

    def spread(name: str, speed: str) -> str:
        return median_and_range([r["figures"]["zero_loss_mpps"] or float("nan") for r in runs[(name, speed)]])[1]

    def at_rate(name: str, speed: str) -> dict[str, Any]:
        return points[(name, speed)].figures.get("at_rate", {})

    def duet_bound(speed: str) -> float | None:
        """1 / (1 − Duet's hardware share) × Count-Min's worker ns per packet / Duet's per packet it handled."""
        if ("cms", speed) not in points or ("duet", speed) not in points:
            return None
        share = at_rate("duet", speed).get("hw", {}).get("share_of_packets")
        cms_ns = at_rate("cms", speed).get("dpu_work_ns_per_worker_packet")
        duet_ns = at_rate("duet", speed).get("dpu_work_ns_per_worker_packet")
        if share is None or share >= 1 or not cms_ns or not duet_ns:
            return None
        return cms_ns / duet_ns / (1 - share)

    sec = Section(BLUEFIELD_TITLE)
    sec.add_command(t.command)
    gains = {(base, sp): median_and_range(paired_gains(runs, "duet", base, sp))
             for base in GAIN_OVER for sp in BLUEFIELD_SPEEDS if (base, sp) in runs and ("duet", sp) in runs}
    cap_gains = {(base, sp): median_and_range(paired_gains(capacity, "duet", base, sp, capacity_mpps))
                 for base in GAIN_OVER for sp in BLUEFIELD_SPEEDS if (base, sp) in capacity and ("duet", sp) in capacity}
    for sp in BLUEFIELD_SPEEDS:
        if ("cms", sp) in gains:
            ctx.finding("duet.packet_rate", gains[("cms", sp)][0], points[("duet", sp)].median,
                        f"{fmt_sig(mpps('duet', sp))} against {fmt_sig(mpps('cms', sp))} Mpps, 64 B, paired rounds")
        nitro = [(points[(n, sp)].figures["zero_loss_gbps"], n) for n in names if n.startswith("nitro-")]
        if nitro:
            gbps, name = min(nitro)
            ctx.finding("nitrosketch.line_rate", gbps, points[(name, sp)].median, f"{name}, 64 B")
    if ("cms", bf) in gains:
        parts = [f"{'Count-Min' if b == 'cms' else b} {fmt_ratio(gains[(b, bf)][0])}"
                 for b in GAIN_OVER if (b, bf) in gains]
        cap_parts = [f"{'Count-Min' if b == 'cms' else b} {fmt_ratio(cap_gains[(b, bf)][0])}"
                     for b in GAIN_OVER if (b, bf) in cap_gains]
        sec.paragraph(
            f"Headline: with the dpu at {bf} (F = {factor[bf]:g}), Duet takes {fmt_sig(mpps('duet', bf))} Mpps "
            f"with no drops at 64-byte packets, Count-Min {fmt_sig(mpps('cms', bf))}; Duet's gain: "
            + ", ".join(parts) + f" (at {host} speed: over Count-Min {fmt_ratio(gains[('cms', host)][0])}). "
            f"In packets per dpu CPU-second, as fast as possible, Duet's gain at {bf}: " + ", ".join(cap_parts)
            + f" (at {host} speed: over Count-Min {fmt_ratio(cap_gains[('cms', host)][0])}). The "
            f"paper reports {PAPER_GAIN_MPPS_64}× in packet rate at 64 B (Fig. 5b) and {PAPER_GAIN_GBPS_1024}× in "
            "throughput at 1024 B (Fig. 5a), over Count-Min, Count Sketch and Elastic; below, why the emulation's "
            "gain is not the paper's.")
    sec.paragraph(
        f"`{TOOL} zero-loss --dpu-speed S` as in measure.throughput (a binary search over the offered rate, "
        f"to {fmt_sig(100 * (0.1 if ctx.quick else 0.05))} %, no lower than {BLUEFIELD_LOW_FRACTION:g} of the "
        "unpaced rate; 2 passes, the first an unmeasured warm-up; one polling dpu worker; "
        f"{fmt_bytes(SPEED_MEMORY)}), each algorithm at `--dpu-speed {host}` and `--dpu-speed {bf}` given "
        "explicitly, so both speeds are in this report whatever `dpukit eval --dpu` says. At F < 1 the dpu "
        "worker's own work (its bursts, Duet's polled control path) is time-dilated: after it, the worker "
        "stays busy for (1/F − 1) × the CPU time it took, so it takes F of the packets per second. The wire's "
        "work (the hardware table's match, the rx ring, the table's firmware) runs in the same loop but is the "
        "NIC's: it is excluded from the dilation, as are the worker's idle waits. "
        + (f"Median of {ctx.repeats} paired rounds (every algorithm at both speeds in each); ranges over the "
           "rounds; gains are per-round ratios, median and range." if ctx.repeats > 1 else "One round (quick mode)."))
    sec.paragraph(placement_note(ctx.runs))
    if busy is not None or busy_after is not None:
        sec.paragraph(background_note(busy, busy_after))
    rows = []
    for n in names:
        h, b = mpps(n, host), mpps(n, bf)
        share = at_rate(n, bf).get("hw", {}).get("share_of_packets")
        handled = at_rate(n, bf).get("dpu_work_ns_per_worker_packet")
        rows.append([n, rate_cell(n, host), spread(n, host), rate_cell(n, bf), spread(n, bf),
                     fmt_ratio(b / h),
                     fmt_ratio(b / mpps("cms", bf) if ("cms", bf) in points else float("nan")),
                     "-" if share is None else fmt_sig(100 * share) + " %",
                     "-" if handled is None else fmt_sig(handled)])
    sec.table(["algorithm", f"{host} Mpps", "range", f"{bf} Mpps", "range", f"{bf} / {host}", f"× cms at {bf}",
               "counted in hw", f"worker ns per packet it handled ({bf})"], rows,
              caption=f"Zero-loss rate, 64-byte packets, one polling dpu worker, {fmt_bytes(SPEED_MEMORY)}")
    def cap(name: str, speed: str) -> tuple[float, str]:
        return median_and_range([capacity_mpps(r) for r in capacity[(name, speed)]])

    crows = []
    for n in names:
        (h, hr), (b, br) = cap(n, host), cap(n, bf)
        crows.append([n, fmt_sig(h), hr, fmt_sig(b), br, fmt_ratio(b / h if h else float("nan")),
                      fmt_ratio(median_and_range([x / y for x, y in zip(
                          (capacity_mpps(r) for r in capacity[(n, bf)]),
                          (capacity_mpps(r) for r in capacity[(n, host)]))])[0])])
    sec.table(["algorithm", f"{host}: Mpps per dpu CPU", "range", f"{bf}: Mpps per dpu CPU", "range",
               f"{bf} / {host} (medians)", f"{bf} / {host} (per round, median)"], crows,
              caption="The same points as fast as possible (`run --poll --passes 2`): packets per second of dpu CPU "
                      "time over both passes. CPU time is what a busy machine disturbs least: a worker that loses "
                      "its CPU drops packets at any offered rate, but spends no CPU meanwhile")
    grows = []
    for base in GAIN_OVER:
        if (base, bf) not in gains:
            continue
        paper = base in PAPER_BASELINES
        grows.append([base, fmt_ratio(gains[(base, host)][0]), gains[(base, host)][1],
                      fmt_ratio(gains[(base, bf)][0]), gains[(base, bf)][1],
                      fmt_ratio(cap_gains[(base, host)][0]), cap_gains[(base, host)][1],
                      fmt_ratio(cap_gains[(base, bf)][0]), cap_gains[(base, bf)][1],
                      f"{PAPER_GAIN_MPPS_64}×" if paper else "not in Fig. 5",
                      f"{PAPER_GAIN_GBPS_1024}×" if paper else "not in Fig. 5"])
    sec.table(["Duet over", f"zero-loss gain at {host}", "range", f"zero-loss gain at {bf}", "range",
               f"per dpu CPU at {host}", "range", f"per dpu CPU at {bf}", "range",
               "paper, 64 B packet rate (Fig. 5b)", "paper, 1024 B throughput (Fig. 5a)"], grows,
              caption="Duet's zero-loss rate over each baseline's, per paired round. The emulation does no work "
                      "per byte, so its gain in Gbps at 1024 B is its gain in packets (measure.throughput measures "
                      "both sizes).")
    nic_table(sec, runs, capacity, names)
    sec.paragraph(
        "Why the gain is not the paper's. On BlueField-2 a sketch-only baseline has every packet steered to the "
        "Arm cores, which receive it, update the sketch and forward it back (DPDK); the paper's baselines reach "
        "about 0.3 Mpps on eight Arm cores at 64 B (Fig. 5b). The paper puts that on the Arm cores' weaker "
        "computation and on the synchronisation between cores; its §II adds the diversion of packets from the "
        "forwarding pipeline to the Arm cores and the flow-table management (Tables I and II). Duet's heavy flows "
        "never reach the Arm cores: the eSwitch counts and forwards them at line rate. Here the wire (the "
        "table's match, the rx ring) is the NIC's and free for every algorithm; a worker pays for the packet's "
        "path through its core, the sketch and reading the packet, all slowed by F for the baselines and for "
        "Duet's worker alike (Duet's worker only sees the packets the hardware does not count), so the gain "
        "stays bounded by 1 / (1 − the hardware's share) × Count-Min's cost per packet over Duet's worker's "
        "cost per packet it handles, whatever F"
        + (f" (here {fmt_ratio(bound)} at {bf})" if (bound := duet_bound(bf)) else "")
        + "; a dearer packet path raises that bound towards 1 / (1 − the hardware's share), and Duet's rules "
        "lower it (the NIC table above). What F does change is every absolute rate (the first table's "
        f"{bf} / {host} column; F = {factor[bf]:g}). " + nic_explanation(points, capacity, bf))
    path, rel = ctx.plot_path("bluefield")
    bars_plot(path, [
        BarPanel("zero-loss packet rate, 64 B", "Mpps (log)", {sp: [None if math.isnan(mpps(n, sp)) else mpps(n, sp)
                                                                    for n in names]
                                                               for sp in BLUEFIELD_SPEEDS}, logy=True),
    ], names, title=f"Highest offered rate with no drops: dpu at {host} and at {bf}", ncols=1)
    sec.image(rel, "zero-loss rate at host and BlueField-2 speed",
              f"The highest offered rate each algorithm takes with no drops, with the dpu at {host} speed and at "
              f"{bf} (F = {factor[bf]:g}), 64-byte packets, on a log axis.")
    return sec


def nic_table(sec: Section, runs: dict[tuple[str, str], list[dict[str, Any]]],
              capacity: dict[tuple[str, str], list[dict[str, Any]]], names: Sequence[str]) -> None:
    """Duet's gain under each model of the NIC at bluefield2, and the rates on the paper's eight Arm cores."""
    configs = ("bluefield2",) + NIC_VARIANTS
    bases = [b for b in GAIN_OVER if all((b, c) in runs and ("duet", c) in runs for c in configs)]
    if not bases:
        return
    rows = []
    for base in bases:
        row: list[Any] = [base]
        for c in configs:
            med, rng = median_and_range(paired_gains(runs, "duet", base, c))
            cmed, crng = median_and_range(paired_gains(capacity, "duet", base, c, capacity_mpps))
            row += [f"{fmt_ratio(med)} [{rng}]", f"{fmt_ratio(cmed)} [{crng}]"]
        paper = base in PAPER_BASELINES
        row += [f"{PAPER_GAIN_MPPS_64}× / {PAPER_GAIN_GBPS_1024}×" if paper else "not in Fig. 5"]
        rows.append(row)
    header = ["Duet over"]
    for c in configs:
        header += [f"zero-loss, {NIC_LABELS[c]}", "per dpu CPU"]
    path_ns = {c: runs[("duet", c)][0]["parameters"].get("dpu_packet_path", {}).get("packet_ns") for c in configs}
    sec.table(header + ["paper, 64 B / 1024 B"], rows,
              caption="Duet's gain at bluefield2 under each model of the NIC, median [range] over the paired "
                      "rounds: the whole model (the Arm's packet path at "
                      f"{fmt_sig(path_ns['bluefield2'] or 0)} ns a packet, DPDK's loop without a NIC, a lower "
                      "bound; each rule Duet installs or removes at Duet Table II's cost); F alone, as before "
                      f"issue 32; and the packet path at {fmt_sig(path_ns[NIC_XDP_TX] or 0)} ns, mlx5's XDP_TX on "
                      "one core slowed by 1/F, an upper figure (docs/core.md)")
    cores = os.cpu_count() or 1
    crow = []
    for n in [x for x in names if x.split()[0] in NIC_ALGOS]:
        row = [n]
        for c in configs:
            pts = runs.get((n, c))
            if not pts:
                row += ["-", "-"]
                continue
            mpps = median_and_range([r["figures"]["zero_loss_mpps"] or float("nan") for r in pts])[0]
            eight = PAPER_ARM_CORES * mpps
            row += [fmt_sig(eight), fmt_sig(min(eight, LINE_MPPS_1024) * (1024 + 20) * 8 / 1e3)]
        crow.append(row)
    header = ["algorithm"]
    for c in configs:
        header += [f"Mpps at 64 B, {NIC_LABELS[c]}", "Gb/s at 1024 B"]
    sec.table(header, crow,
              caption=f"On the paper's {PAPER_ARM_CORES} Arm cores: one worker's zero-loss rate × "
                      f"{PAPER_ARM_CORES}, as such (this machine has {cores} cores; the paper's baselines ran one "
                      "instance per core sharing nothing; Duet's workers share the hardware table, and "
                      "measure.scaling measures how they scale). At 1024 B a 100 Gb/s line caps every algorithm "
                      f"at {fmt_sig(LINE_MPPS_1024)} Mpps (wire bits, with preamble and gap). The paper: the "
                      "baselines about 0.3 Mpps at 64 B and below 10 Gb/s at 1024 B, Duet about 9 Mpps and 40 Gb/s")


def nic_explanation(points: dict[tuple[str, str], Point], capacity: dict[tuple[str, str], list[dict[str, Any]]],
                    bf: str) -> str:
    """What the model's packet path explains of the paper's gain, and what it leaves."""
    if ("cms", bf) not in capacity or not capacity[("cms", bf)]:
        return ""
    cms_ns = sorted(r["figures"]["dpu_cpu_ns_per_packet"] for r in capacity[("cms", bf)])
    cms_ns_med = cms_ns[(len(cms_ns) - 1) // 2]
    path = points[("cms", bf)].median["parameters"].get("dpu_packet_path", {})
    paper_ns = PAPER_ARM_CORES / (PAPER_BASELINE_MPPS_64 * 1e6) * 1e9
    share = (points[("duet", bf)].figures.get("at_rate", {}).get("hw", {}).get("share_of_packets")
             if ("duet", bf) in points else None)
    cap = ""
    if share is not None and 0 < share < 1:
        # The gain if Duet's worker paid per packet what a baseline's does: only the packets it never sees count.
        cap = (f" With Duet's worker paying per packet what a baseline's pays, the gain is at most 1 / (1 − "
               f"{fmt_sig(100 * share)} %) = {fmt_ratio(1 / (1 - share))}, the share of packets the hardware "
               f"counted on this trace; the paper's {PAPER_GAIN_MPPS_64}× would need "
               f"{fmt_sig(100 * (1 - 1 / PAPER_GAIN_MPPS_64))} % of the packets in hardware, or Duet's Arm cores "
               "doing far less a packet than the baselines'.")
    return (f"The model now bills that diversion: each packet a worker takes from its ring costs "
            f"{fmt_sig(path.get('packet_ns', 0))} ns of a dpu core (DPDK's receive and transmit) and each rule Duet "
            f"installs or removes {fmt_sig(path.get('rule_ns', 0) / 1e3)} µs and more with more entries; packets "
            "the hardware table absorbs pay neither. Count-Min's dpu core then spends "
            f"{fmt_sig(cms_ns_med)} ns a packet at {bf}; the paper's baselines spent about {fmt_int(round(paper_ns))} ns "
            f"({PAPER_BASELINE_MPPS_64} Mpps on {PAPER_ARM_CORES} cores). That gap, {fmt_sig(paper_ns / cms_ns_med)}× "
            "per packet, is what is left: no public per-packet figure for a DPDK path on an Arm core comes near it "
            "(mlx5's XDP_TX, the kernel's, is the third column of the NIC table), so it lies in the paper's "
            "baseline implementation or setup, which the paper does not describe; the parameters are not tuned to "
            "reach it." + cap)


# -- measure.scaling -----------------------------------------------------------

SCALING_TITLE = "measure.scaling: dpu workers (RSS queues)"
# `none` (the datapath alone), every sketch, and Duet; quick mode keeps three.
# "duet" is its default, a sketch partition per worker; "duet-shared" the paper's one sketch for all of them.
SCALING_ALGOS = ("none", "cms", "cs", "elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon", "duet",
                 "duet-shared")
SCALING_QUICK = ("none", "cms", "duet", "duet-shared")
SCALING_GOAL = 0.8  # of N x the 1-worker rate, up to 8 workers (issue 24)
SCALING_GOAL_MAX = 8
LIVE_QUEUE_ALGOS = ("cms", "duet")


def scaling_algo_args(label: str) -> list[str]:
    """The tool's options for a row label of SCALING_ALGOS."""
    return ["--algo", "duet", "--duet-sketch", "shared"] if label == "duet-shared" else ["--algo", label]


def worker_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores there are (the last the core count itself when not a power of two)."""
    out, w = [], 1
    while w <= cores:
        out.append(w)
        w *= 2
    if out[-1] != cores:
        out.append(cores)
    return out


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def scaling_cpus(workers: int, cpus: Sequence[int]) -> str:
    """The dpu CPUs for `workers` workers: a CPU each past the first (left to the host side) where there are
    enough, otherwise every CPU (then a worker shares one with the host side's threads)."""
    rest = list(cpus[1:]) if len(cpus) > workers else list(cpus)
    return ",".join(str(c) for c in rest[:workers])


def scaling_verdict(rates: dict[int, float], cores: int, clean: set[int]) -> str:
    """Whether the rates meet SCALING_GOAL x N x the 1-worker rate for N <= SCALING_GOAL_MAX, over the
    worker counts in `clean` (a core each); the others cannot show it."""
    one = rates.get(1, 0.0)
    judged = [w for w in sorted(rates) if 1 < w <= SCALING_GOAL_MAX and w in clean]
    if not one or not judged:
        return "cannot be checked here"
    worst = min(rates[w] / (w * one) for w in judged)
    return f"{'met' if worst >= SCALING_GOAL else 'missed'} (worst {fmt_sig(worst)} of N × 1 worker)"


@experiment(
    "measure.scaling",
    title=SCALING_TITLE,
    description="none, every sketch and Duet at 1, 2, 4, ... dpu workers up to the cores there are: "
                "as-fast-as-possible Mpps and zero-loss Mpps (64-byte packets), against the goal of "
                "0.8 x N x the 1-worker rate; live on a veth with 1 and 2 queues where root.",
    tools=[TOOL],
)
def scaling(ctx: Context) -> Section:
    return render_scaling(ctx, collect_scaling(ctx))


@dataclass
class LiveQueues:
    loops: int  # tcpreplay's passes over the trace
    # The eval's record of the runs: {"unavailable": why not run (or None), "runs": [LiveQueuesRun as a dict]}
    got: dict[str, Any]


@dataclass
class ScalingRuns:
    trace: TraceFile
    repeats: int
    cores: int  # usable CPUs
    machine: dict[str, Any]
    workers: list[int]
    algos: Sequence[str]
    precision: float  # the zero-loss search's
    configs: list[tuple[str, int]]  # (algorithm, workers) in the order they ran
    points: dict[tuple[str, int], Point]  # as fast as possible
    zero: dict[tuple[str, int], dict[str, Any]]  # the zero-loss search
    busy: Any
    busy_after: Any
    live: LiveQueues


def collect_scaling(ctx: Context) -> ScalingRuns:
    t = ensure_trace(ctx, "backbone")
    busy = ctx.measured("busy_before", background_busy)
    reps = 1 if ctx.quick else timing_repeats(ctx)
    cpus = ctx.measured("usable_cpus", usable_cpus)
    cores = len(cpus)
    mach = ctx.measured("machine", machine)
    workers = worker_counts(cores)
    algos = SCALING_QUICK if ctx.quick else SCALING_ALGOS
    common = ["--trace", t.path, "--memory", memory_arg(SPEED_MEMORY), "--poll", "--passes", 2]
    precision = 0.1 if ctx.quick else 0.02
    configs = [(a, w) for w in workers for a in algos]  # workers outer: a slow spell falls on every algorithm
    points: dict[tuple[str, int], Point] = {}
    zero: dict[tuple[str, int], dict[str, Any]] = {}
    steps = 2 * len(configs)
    step = 0
    for algo, w in configs:
        where = ["--workers", w, "--dpu-cpus", scaling_cpus(w, cpus)]
        step += 1
        points[(algo, w)] = ctx.run_point(
            TOOL, ["run", *common, *scaling_algo_args(algo), *where], label=f"{algo}-w{w}", key="throughput_mpps",
            detail=f"{algo}, {w} worker(s), as fast as possible", step=step, steps=steps, repeats=reps)
        step += 1
        ctx.progress(f"{algo}, {w} worker(s), zero-loss search", step, steps)
        zero[(algo, w)] = ctx.run_native(
            TOOL, ["zero-loss", *common, "--packet-size", 64, "--precision", precision, *scaling_algo_args(algo),
                   *where],
            label=f"zero-loss-{algo}-w{w}")
    busy_after = ctx.measured("busy_after", background_busy)
    return ScalingRuns(t, reps, cores, mach, workers, algos, precision, configs, points, zero, busy, busy_after,
                       collect_live_queues(ctx, cores))


def render_scaling(ctx: Context, runs: ScalingRuns) -> Section:
    t, reps, cores, mach, workers, algos = runs.trace, runs.repeats, runs.cores, runs.machine, runs.workers, runs.algos
    precision, configs, points, zero = runs.precision, runs.configs, runs.points, runs.zero
    busy, busy_after = runs.busy, runs.busy_after
    # A worker count has a CPU per worker (and one left for the rest) only below the core count.
    clean = {w for w in workers if w < cores}

    sec = Section(SCALING_TITLE)
    sec.add_command(t.command)
    sec.paragraph(
        f"Machine: {mach['cpu_model']}, {cores} usable CPU(s) of {mach['cores']} (every run's JSON records its "
        "machine: the core count and the CPU model, so that a many-core run can be set beside this one). "
        f"`{TOOL} run --workers N --poll --passes 2` and `{TOOL} zero-loss` (64-byte packets, to "
        f"{fmt_sig(100 * precision)} %) at {fmt_bytes(SPEED_MEMORY)} on the backbone trace, N = "
        f"{', '.join(str(w) for w in workers)}: RSS spreads the flows over N queues, one polling dpu worker each, "
        "each queue replayed by its own wire context. Each sketch gives every worker its own instance with an "
        "equal share of the budget. Duet's workers share one hardware table and its records; its sketch budget "
        "is split into a partition per worker (`duet`, the default: RSS keeps a flow's packets on one worker, so "
        "no counter is written from two cores) or is one sketch they all update with atomic increments "
        "(`duet-shared`, its paper's design). " + repeats_note(reps, "throughput_mpps") + " The zero-loss search runs once per point.")
    sec.paragraph(
        f"Goal (issue 24): at least {SCALING_GOAL} × N × the 1-worker rate up to {SCALING_GOAL_MAX} workers, or "
        "the memory system's limit shown. "
        + ("It can be checked at N = " + ", ".join(str(w) for w in sorted(clean) if w > 1) + "."
           if any(w > 1 for w in clean) else
           f"On this machine it cannot be checked: with {cores} CPU(s), N = {max(workers)} workers leave no CPU "
           "of their own to the rest of the run (the control path, the other helpers' load), so the "
           f"{max(workers)}-worker rows show what splitting the work costs, not how a DPU with a core per "
           "worker scales; 4 and 8 workers need a larger machine (run `dpukit eval --only measure.scaling` there)."))
    sec.paragraph(trace_note([t], {"backbone": points[configs[0]].figures.get("flows", 0)}))
    sec.paragraph(placement_note(ctx.runs))
    if busy is not None or busy_after is not None:
        sec.paragraph(background_note(busy, busy_after))

    def mpps(algo: str, w: int) -> float:
        return points[(algo, w)].figures["throughput_mpps"]

    def zl(algo: str, w: int) -> float:
        return zero[(algo, w)]["figures"]["zero_loss_mpps"]

    rows = []
    for algo in algos:
        for w in workers:
            f = points[(algo, w)].figures
            rows.append([algo, w, points[(algo, w)].median["placement"]["dpu_cpus"], fmt_sig(mpps(algo, w)),
                         fmt_ratio(mpps(algo, w) / (w * mpps(algo, 1)) if mpps(algo, 1) else float("nan")),
                         fmt_sig(zl(algo, w)),
                         fmt_ratio(zl(algo, w) / (w * zl(algo, 1)) if zl(algo, 1) else float("nan")),
                         fmt_sig(f.get("dpu_work_ns_per_worker_packet", float("nan"))),
                         fmt_sig(f["dpu_cpu_ns_per_packet"]), fmt_sig(f.get("hw_cpu_ns_per_packet", float("nan"))),
                         "-" if algo == "none" else fmt_sig(metric(f, "are"))])
    sec.table(["algorithm", "workers", "dpu CPUs", "Mpps", "÷ (N × 1 worker)", "zero-loss Mpps",
               "÷ (N × 1 worker)", "worker ns per packet it handled", "dpu CPU ns/pkt", "hw CPU ns/pkt", "ARE"],
              rows,
              caption=f"Workers, backbone trace, {fmt_bytes(SPEED_MEMORY)}, {cores} CPU(s) ({mach['cpu_model']})")
    sec.table(["algorithm", f"goal: ≥ {SCALING_GOAL} × N × 1 worker (as fast as possible)", "zero-loss"],
              [[a, scaling_verdict({w: mpps(a, w) for w in workers}, cores, clean),
                scaling_verdict({w: zl(a, w) for w in workers}, cores, clean)] for a in algos],
              caption="The scaling goal per algorithm")
    path, rel = ctx.plot_path("workers")
    groups = {f"{w} worker{'s' if w > 1 else ''}": [(a, w) for a in algos] for w in workers}
    bars_plot(path, [
        BarPanel("as fast as possible", "Mpps", {g: [mpps(*c) for c in cs] for g, cs in groups.items()}),
        BarPanel("zero loss, 64 B", "Mpps", {g: [zl(*c) for c in cs] for g, cs in groups.items()}),
    ], list(algos), title=f"dpu workers, backbone trace, {fmt_bytes(SPEED_MEMORY)}, {cores} CPU(s)", ncols=2)
    sec.image(rel, "Throughput and zero-loss rate vs workers",
              "Packets per second as fast as possible (left) and with no drops (right) per algorithm and number "
              "of dpu workers.")
    render_live_queues(ctx, sec, runs.live, cores)
    return sec


LIVE_QUEUES_TITLE = "Live, one AF_XDP socket and dpu worker per veth queue"


def collect_live_queues(ctx: Context, cores: int) -> LiveQueues:
    """`live` on a veth with 1 and 2 (up to the cores) queues, native XDP, tcpreplay as fast as it sends."""
    t = ensure_trace(ctx, "backbone")
    loops = 1 if ctx.quick else 3
    queue_counts = [q for q in (1, 2) if q <= max(cores, 1)]

    def collect() -> dict[str, Any]:
        if why := missing_requirements():
            return {"unavailable": why, "runs": []}
        exe = tool_path(TOOL)
        work = ctx.runs_dir
        work.mkdir(parents=True, exist_ok=True)
        runs = []
        try:
            step, steps = 0, len(queue_counts) * len(LIVE_QUEUE_ALGOS)
            for q in queue_counts:
                for algo in LIVE_QUEUE_ALGOS:
                    step += 1
                    ctx.progress(f"live, {q} queue(s), {algo}", step, steps)
                    runs.append(run_live_queues(exe, t.path, work, queues=q, algo=algo, loops=loops,
                                                heavy_threshold=1000))
        except LiveUnavailable as e:
            return {"unavailable": str(e), "runs": []}
        return {"unavailable": None, "runs": [asdict(r) for r in runs]}

    # Kept in the eval's record: these runs start live, tcpreplay and a veth
    # outside ctx.run_native, and --render must not.
    return LiveQueues(loops, ctx.measured("live_queues", collect))


def render_live_queues(ctx: Context, sec: Section, live: LiveQueues, cores: int) -> None:
    title, loops, got = LIVE_QUEUES_TITLE, live.loops, live.got
    if got["unavailable"]:
        sec.paragraph(f"{title}: not run, {got['unavailable']}.")
        return
    runs = [LiveQueuesRun(**{**r, "per_queue": {int(k): v for k, v in r["per_queue"].items()}}) for r in got["runs"]]
    for r in runs:
        r.result["figures"]["tcpreplay"] = {"sent": r.sent, "seconds": r.send_seconds, "argv": r.replay_argv}
        r.result["figures"]["per_queue"] = {str(k): v for k, v in r.per_queue.items()}
        # The section's runs, added after its placement note, which speaks of the sweep's runs alone.
        ctx.runs.append(r.result)
    rows = []
    for r in runs:
        f = r.figures
        spread = " / ".join(fmt_int(r.per_queue[k].get("xdp_packets", 0)) for k in sorted(r.per_queue))
        measured = f["hw_packets"] + f["dpu_packets"]
        flow_frames = f["frames"] - f["not_a_flow"]  # the pcap's, and any IPv4 frame of the kernel's own
        rows.append([r.queues, r.algo, fmt_int(r.sent), fmt_sig(r.send_pps / 1e3), spread,
                     fmt_int(f["hw_packets"]), fmt_int(f["dpu_packets"]), fmt_int(f["drops"]),
                     fmt_sig(100 * f["drops"] / max(r.sent, 1)) + " %",
                     "yes" if measured + f["drops"] == flow_frames
                     else f"no ({fmt_int(measured + f['drops'])} of {fmt_int(flow_frames)})"])
    sec.paragraph(
        f"{title}: `{TOOL} live --iface <veth> --native --algo A` on a veth pair created with N receive and "
        "transmit queues (`ip link add … numtxqueues N numrxqueues N type veth peer … numtxqueues N "
        "numrxqueues N`), while `tcpreplay --topspeed` sends the backbone trace "
        f"{loops} time(s) from the other end in a network namespace of its own. veth hands each frame to the "
        "receive queue numbered as the transmit queue the sender's kernel picked by a hash of its flow, so the "
        "flows spread over the queues as RSS spreads them; each queue's frames (the per-queue XDP counters of "
        "`ethtool -S`) go to that queue's AF_XDP socket and worker. tcpreplay's own rate is the offered load: "
        "on this machine the sender, the veth's XDP (run in the sender's softirq) and the workers share "
        f"{cores} CPU(s), so the rates say what this VM's sender reaches, not what the workers could take.")
    sec.table(["queues", "algorithm", "sent", "sent kpps (tcpreplay)", "frames per queue", "hw packets",
               "dpu packets", "drops", "drops %", "hw + dpu + drops = flow frames seen"], rows,
              caption="Live on a veth, native XDP, one worker per queue")
