"""Experiments on PulseDB (``dpukit-kv``): the stock db_bench on every kv mode.

Each run starts from an empty work directory under ``<build>/kv-runs/``, and
writes its SST files into a pool that ``dpukit-kv bench`` keeps across runs of
the same geometry (``<build>/kv-runs/kv-pools/``, removed when each experiment
ends: several GB each); the
host side (db_bench and, in async-host, the in-process engine) is pinned to
CPU 0 and the agent (the dpu side) to CPU 1, as the tool does by default.
"""

from __future__ import annotations

import functools
import shutil
from statistics import median
from typing import Any, Callable, Sequence

from dpukit.experiment_support import parameters_note, placement_note
from dpukit.experiments import Context, Point, experiment, median_run, skipped_in_quick_mode
from dpukit.paths import build_dir
from dpukit.plots import BarPanel, Series, bars_plot, line_plot
from dpukit.report import Section
from dpukit.units import fmt_sig

TOOL = "dpukit-kv"
MODES = ("vanilla", "filepool", "async-host", "pulsedb", "pulsedb-copy")
VALUE_SIZES = (128, 512, 1024, 2048)
QUEUE_SIZES = ("32M", "128M", "512M")
# What each mode label runs: pulsedb is the DMA path (the agent pulls
# RocksDB's buffers); pulsedb-copy copies every append through the ring.
MODE_ARGS: dict[str, list[Any]] = {
    "vanilla": ["--mode", "vanilla"],
    "filepool": ["--mode", "filepool"],
    "async-host": ["--mode", "async-host"],
    "pulsedb": ["--mode", "pulsedb", "--payload", "pull"],
    "pulsedb-copy": ["--mode", "pulsedb", "--payload", "copy"],
    "dcomp": ["--mode", "dcomp"],
}


def pools_dir():
    """Where ``dpukit-kv bench`` keeps its pools: ``kv-pools`` beside the work directories."""
    return build_dir() / "kv-runs" / "kv-pools"


def removing_pools(fn: Callable[[Context], Section]) -> Callable[[Context], Section]:
    """The experiment, then the pools its runs shared go (slots x slot size each, written out)."""
    @functools.wraps(fn)
    def run(ctx: Context) -> Section:
        try:
            return fn(ctx)
        finally:
            shutil.rmtree(pools_dir(), ignore_errors=True)
    return run


def scale(quick: bool) -> list[str]:
    """The RocksDB settings: the paper's (64 MB memtable and SST target, 256 MB
    L1) on about 1 GB of data in full mode; a quarter of everything in quick mode."""
    if quick:
        return ["--data", "256M", "--write-buffer", "16M", "--target-file", "16M", "--level-base", "64M"]
    return ["--data", "1G", "--write-buffer", "64M", "--target-file", "64M", "--level-base", "256M"]


def bench_args(ctx: Context, mode: str, workload: str, value: int, driver: str,
               settings: Sequence[Any] | None = None, tag: str = "") -> list[Any]:
    work = build_dir() / "kv-runs" / f"{mode}-{workload}-{value}-{driver}{tag}"
    return ["bench", *MODE_ARGS[mode], "--driver", driver, "--workload", workload, "--value-size", value,
            *(scale(ctx.quick) if settings is None else settings), "--work-dir", work]


def run_modes(ctx: Context, modes: Sequence[str], workload: str, value: int, *, driver: str = "db_bench",
              step0: int = 0, steps: int | None = None, settings: Sequence[Any] | None = None,
              tag: str = "") -> list[tuple[str, Point]]:
    """Every mode ``ctx.repeats`` times, round-robin (mode after mode, then
    again), so that a slow spell of this shared machine hits every mode
    alike; each mode's reported run is its median by throughput.
    ``settings`` replaces the RocksDB scale; ``tag`` tells the runs apart."""
    steps = steps or len(modes)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(1, ctx.repeats + 1):
        for i, mode in enumerate(modes, 1):
            note = f" run {rep}/{ctx.repeats}" if ctx.repeats > 1 else ""
            ctx.progress(f"{mode} {workload} value={value} ({driver}{tag}){note}", step0 + i, steps)
            label = f"{mode}-{workload}-{value}-{driver}{tag}" + (f"-r{rep}" if ctx.repeats > 1 else "")
            args = bench_args(ctx, mode, workload, value, driver, settings, tag)
            runs[mode].append(ctx.run_native(TOOL, args, label=label))
    return [(m, Point(runs[m], median_run(runs[m], "ops_per_sec"))) for m in modes]


# The summary's figures (dpukit.summary): claim -> the run figure it compares with vanilla's.
CLAIM_FIGURES = (("pulsedb.throughput", "ops_per_sec"), ("pulsedb.cpu", "host_whole_compaction_cpu_s"),
                 ("pulsedb.p99", "write_p99_us"))


def pulsedb_findings(ctx: Context, pulsedb: Sequence[dict[str, Any]], vanilla: Sequence[dict[str, Any]],
                     what: str) -> None:
    """PulseDB's change against vanilla of each claim's figure, in percent: the
    median of the per-round ratios (runs of the same round are paired)."""
    for claim, key in CLAIM_FIGURES:
        ratios = [p["figures"][key] / v["figures"][key] for p, v in zip(pulsedb, vanilla) if v["figures"][key]]
        if ratios:
            rounds = f", {len(ratios)} paired rounds" if len(ratios) > 1 else ""
            ctx.finding(claim, 100 * (median(ratios) - 1), pulsedb[0], what + rounds)


def ratio(x: float, base: float) -> str:
    return fmt_sig(x / base) if base else "-"


def mode_rows(points: Sequence[tuple[str, Point]]) -> list[list[Any]]:
    base = points[0][1].figures
    rows = []
    for mode, p in points:
        f = p.figures
        rows.append([
            mode, fmt_sig(f["ops_per_sec"] / 1000), ratio(f["ops_per_sec"], base["ops_per_sec"]),
            fmt_sig(f["compaction_mb_per_sec"]), fmt_sig(f["host_compaction_cpu_s"]),
            ratio(f["host_compaction_cpu_s"], base["host_compaction_cpu_s"]),
            fmt_sig(f["host_whole_compaction_cpu_s"]),
            ratio(f["host_whole_compaction_cpu_s"], base["host_whole_compaction_cpu_s"]),
            fmt_sig(f["dpu_cpu_s"]), fmt_sig(f["hw_cpu_s"]), fmt_sig(f["write_p99_us"]),
            ratio(f["write_p99_us"], base["write_p99_us"]), fmt_sig(f["write_p999_us"]),
            fmt_sig(100 * f["stall_ratio"]),
        ])
    return rows


MODE_HEADERS = ["mode", "k ops/s", "× vanilla", "compaction MB/s", "host compaction CPU s (threads)", "× vanilla",
                "whole-host compaction CPU s", "× vanilla", "dpu CPU s", "hw CPU s", "P99 µs", "× vanilla",
                "P99.9 µs", "stall %"]

CPU_NOTE = (
    "Host compaction CPU (threads) is the CPU time of the compaction threads (`rocksdb:low`) plus the plugin's "
    "own (`pulsedb:*`: the completion reaper; in async-host the write-persist engine), read per thread from "
    "/proc every 50 ms. Whole-host adds the kernel's work over the same run: the kernel threads' CPU time "
    "(kworker writeback, ksoftirqd, jbd2, kswapd; all of it charged to the host, though the agent's fsyncs wake "
    "jbd2 too) and the interrupt time on the host's CPU. dpu CPU is the agent's (or dcomp worker's) CPU time "
    "less its DMA threads', which is hw CPU (the DMA engine pulling payloads from host memory). "
    "See docs/kv.md, \"Where the CPU time goes\".")


@experiment(
    "kv.modes",
    title="kv.modes: db_bench on vanilla, filepool, async-host and pulsedb",
    description="Write throughput, compaction MB/s, host compaction CPU, dpu CPU, write latency and stall "
                "ratio of db_bench fillrandom (and overwrite in full mode) at 1024-byte values.",
    tools=[TOOL, "dpukit-agent"],
)
@removing_pools
def modes(ctx: Context) -> Section:
    workloads = ["fillrandom"] if ctx.quick else ["fillrandom", "overwrite"]
    sec = Section("kv.modes: db_bench on every mode, 1024-byte values")
    steps = len(workloads) * len(MODES)
    for w, workload in enumerate(workloads):
        points = run_modes(ctx, MODES, workload, 1024, step0=w * len(MODES), steps=steps)
        if workload == "fillrandom":
            by_mode = dict(points)
            pulsedb_findings(ctx, by_mode["pulsedb"].runs, by_mode["vanilla"].runs, "db_bench fillrandom")
        sec.table(MODE_HEADERS, mode_rows(points), caption=f"db_bench {workload}, 16-byte keys, 1024-byte values")
        path, rel = ctx.plot_path(f"modes-{workload}")
        base = points[0][1].figures
        bars_plot(path, [BarPanel("normalized to vanilla", "× vanilla", {
            "write throughput": [p.figures["ops_per_sec"] / base["ops_per_sec"] for _, p in points],
            "host compaction CPU (threads)": [p.figures["host_compaction_cpu_s"] / base["host_compaction_cpu_s"]
                                              for _, p in points],
            "whole-host compaction CPU": [p.figures["host_whole_compaction_cpu_s"]
                                          / base["host_whole_compaction_cpu_s"] for _, p in points],
        }, refline=(1.0, "vanilla"))], [m for m, _ in points], title=f"db_bench {workload}")
        sec.image(rel, f"{workload}: throughput and host compaction CPU per mode",
                  "Throughput and host compaction CPU of each mode, normalized to vanilla.")
    sec.paragraph(
        CPU_NOTE + " The stall ratio is `rocksdb.stall.micros` over writer time. "
        + ("Quick mode: a quarter of the data and memtable, one run per point." if ctx.quick else
           f"Each row is the median of {ctx.repeats} runs by throughput; the modes were run round-robin."))
    sec.paragraph(placement_note(ctx.runs))
    if ctx.runs:
        sec.paragraph(parameters_note(ctx.runs[0]))
    return sec


@experiment(
    "kv.values",
    title="kv.values: vanilla against pulsedb across value sizes",
    description="db_bench fillrandom and overwrite at 128, 512, 1024 and 2048-byte values (full mode only).",
    tools=[TOOL, "dpukit-agent"],
)
@removing_pools
def values(ctx: Context) -> Section:
    sec = Section("kv.values: vanilla against pulsedb across value sizes")
    if ctx.quick:
        sec.paragraph("Skipped in quick mode (it runs db_bench 16 times per repetition); "
                      "`dpukit eval --only kv.values`.")
        return sec
    workloads = ("fillrandom", "overwrite")
    steps = 2 * len(VALUE_SIZES) * len(workloads)
    step = 0
    panels = []
    for workload in workloads:
        rows, tput, cpu, whole = [], [], [], []
        for value in VALUE_SIZES:
            pts = dict(run_modes(ctx, ("vanilla", "pulsedb"), workload, value, step0=step, steps=steps))
            step += 2
            v, p = pts["vanilla"].figures, pts["pulsedb"].figures
            tput.append(p["ops_per_sec"] / v["ops_per_sec"])
            cpu.append(p["host_compaction_cpu_s"] / v["host_compaction_cpu_s"] if v["host_compaction_cpu_s"] else 0)
            whole.append(p["host_whole_compaction_cpu_s"] / v["host_whole_compaction_cpu_s"]
                         if v["host_whole_compaction_cpu_s"] else 0)
            rows.append([value, fmt_sig(v["ops_per_sec"] / 1000), fmt_sig(p["ops_per_sec"] / 1000),
                         fmt_sig(tput[-1]), fmt_sig(v["host_compaction_cpu_s"]), fmt_sig(p["host_compaction_cpu_s"]),
                         fmt_sig(cpu[-1]), fmt_sig(whole[-1]), fmt_sig(p["dpu_cpu_s"]), fmt_sig(p["hw_cpu_s"])])
        sec.table(["value bytes", "vanilla k ops/s", "pulsedb k ops/s", "× vanilla",
                   "vanilla host compaction CPU s", "pulsedb host compaction CPU s", "× vanilla",
                   "whole-host × vanilla", "pulsedb dpu CPU s", "pulsedb hw CPU s"], rows,
                  caption=f"db_bench {workload}")
        panels.append(BarPanel(workload, "pulsedb / vanilla", {
            "write throughput": tput, "host compaction CPU (threads)": cpu, "whole-host compaction CPU": whole},
            refline=(1.0, "vanilla")))
    path, rel = ctx.plot_path("values")
    bars_plot(path, panels, [str(v) for v in VALUE_SIZES], title="pulsedb against vanilla by value size (bytes)")
    sec.image(rel, "pulsedb against vanilla by value size", "pulsedb normalized to vanilla at each value size.")
    sec.paragraph(CPU_NOTE + f" Median of {ctx.repeats} runs by throughput, vanilla and pulsedb run in turn.")
    sec.paragraph(placement_note(ctx.runs))
    return sec


@experiment(
    "kv.queue",
    title="kv.queue: pulsedb across request queue sizes (Fig. 17)",
    description="db_bench fillrandom at 1024-byte values with each queue pair's request ring at 32, 128 and "
                "512 MB, both payload paths (full mode only).",
    tools=[TOOL, "dpukit-agent"],
)
@removing_pools
def queue(ctx: Context) -> Section:
    sec = Section("kv.queue: pulsedb across request queue sizes")
    if skipped_in_quick_mode(ctx, sec, "kv.queue"):
        return sec
    modes = ("pulsedb", "pulsedb-copy")
    steps = len(QUEUE_SIZES) * len(modes)
    rows, series = [], {m: [] for m in modes}
    for i, q in enumerate(QUEUE_SIZES):
        pts = dict(run_modes(ctx, modes, "fillrandom", 1024, step0=i * len(modes), steps=steps,
                             settings=[*scale(False), "--queue", q], tag=f"-q{q}"))
        for m in modes:
            f = pts[m].figures
            series[m].append(f["ops_per_sec"] / 1000)
            rows.append([q, m, fmt_sig(f["ops_per_sec"] / 1000), fmt_sig(f["write_p99_us"]),
                         fmt_sig(f["host_whole_compaction_cpu_s"]), fmt_sig(100 * f["stall_ratio"])])
    sec.table(["request queue", "mode", "k ops/s", "P99 µs", "whole-host compaction CPU s", "stall %"], rows,
              caption="db_bench fillrandom, 1024-byte values; completion queue 1 MB")
    path, rel = ctx.plot_path("queue")
    bars_plot(path, [BarPanel("write throughput", "k ops/s", series)], list(QUEUE_SIZES),
              title="pulsedb throughput by request queue size")
    sec.image(rel, "throughput by request queue size", "Write throughput of both payload paths by queue size.")
    sec.paragraph(
        "The request queue holds the payload bytes a queue pair can have posted and not yet taken by the agent "
        "(the paper sweeps 32-512 MB per thread, Fig. 17). With the DMA path only appends shorter than 64 KB "
        f"go through it. Median of {ctx.repeats} runs by throughput.")
    sec.paragraph(placement_note(ctx.runs))
    return sec


FILE_BUFFERS = ("64K", "256K", "1M", "4M")


@experiment(
    "kv.buffer",
    title="kv.buffer: the payload paths across RocksDB's writable_file_max_buffer_size",
    description="db_bench fillrandom at 1024-byte values on vanilla, pulsedb (pull) and pulsedb-copy with "
                "each SST writer appending 64 KB, 256 KB, 1 MB and 4 MB at a time (full mode only).",
    tools=[TOOL, "dpukit-agent"],
)
@removing_pools
def buffer(ctx: Context) -> Section:
    sec = Section("kv.buffer: the payload paths across the file writer's buffer size")
    if skipped_in_quick_mode(ctx, sec, "kv.buffer"):
        return sec
    modes = ("vanilla", "pulsedb", "pulsedb-copy")
    steps = len(FILE_BUFFERS) * len(modes)
    rows = []
    series: dict[str, list[float]] = {m: [] for m in modes[1:]}
    cpu: dict[str, list[float]] = {m: [] for m in modes[1:]}
    for i, size in enumerate(FILE_BUFFERS):
        pts = dict(run_modes(ctx, modes, "fillrandom", 1024, step0=i * len(modes), steps=steps,
                             settings=[*scale(False), "--file-buffer", size], tag=f"-b{size}"))
        base = pts["vanilla"].figures
        for m in modes:
            f = pts[m].figures
            plugin = f.get("plugin", {})
            pulls = plugin.get("pulls", 0)
            wait_us = 1000 * plugin.get("pull_wait_ms", 0) / pulls if pulls else 0
            rows.append([size, m, fmt_sig(f["ops_per_sec"] / 1000), ratio(f["ops_per_sec"], base["ops_per_sec"]),
                         fmt_sig(f["host_whole_compaction_cpu_s"]),
                         ratio(f["host_whole_compaction_cpu_s"], base["host_whole_compaction_cpu_s"]),
                         pulls or "-", fmt_sig(wait_us) if pulls else "-", fmt_sig(f["hw_cpu_s"]),
                         fmt_sig(f["write_p99_us"])])
            if m in series:
                series[m].append(f["ops_per_sec"] / base["ops_per_sec"])
                cpu[m].append(f["host_whole_compaction_cpu_s"] / base["host_whole_compaction_cpu_s"]
                              if base["host_whole_compaction_cpu_s"] else 0)
    sec.table(["file buffer", "mode", "k ops/s", "× vanilla", "whole-host compaction CPU s", "× vanilla",
               "pulls", "mean pull wait µs", "hw CPU s", "P99 µs"], rows,
              caption="db_bench fillrandom, 1024-byte values; × vanilla is against vanilla at the same buffer size")
    path, rel = ctx.plot_path("buffer")
    bars_plot(path, [BarPanel("write throughput", "× vanilla", series, refline=(1.0, "vanilla")),
                     BarPanel("whole-host compaction CPU", "× vanilla", cpu, refline=(1.0, "vanilla"))],
              list(FILE_BUFFERS), title="pulsedb against vanilla by writable_file_max_buffer_size")
    sec.image(rel, "payload paths by file buffer size",
              "Throughput and whole-host compaction CPU of both payload paths against vanilla at each buffer size.")
    sec.paragraph(
        "`writable_file_max_buffer_size` is what a RocksDB file writer gathers before each `Append` to the file "
        "system, so on the DMA path it is the size of one pull, whose round trip (descriptor, doorbell, the "
        "agent's pull, the completion) the compaction thread waits for. Appends shorter than 64 KB are copied "
        "through the ring instead. " + CPU_NOTE + f" Median of {ctx.repeats} runs by throughput, round-robin.")
    sec.paragraph(placement_note(ctx.runs))
    return sec


# The compaction-bound regime (docs/kv.md, "A compaction-bound regime"):
# more data than kv.modes, four writers, one compaction thread, smaller
# memtables and L0 triggers that make RocksDB throttle writers once L0->L1
# falls behind.
STALL_MODES = ("vanilla", "async-host", "pulsedb", "pulsedb-copy", "dcomp")
STALL_SETTINGS: list[Any] = ["--data", "4G", "--threads", 4, "--compaction-threads", 1, "--write-buffer", "32M",
                             "--target-file", "64M", "--level-base", "256M", "--l0-slowdown", 5, "--l0-stop", 8]


@experiment(
    "kv.stall",
    title="kv.stall: every mode where vanilla RocksDB stalls",
    description="dpukit-kvbench fill --drain of 4 GB with 4 writers, one compaction thread, 32 MB memtables and "
                "L0 triggers 5/8: "
                "throughput, P99/P99.9, stall ratio, host CPU both ways, dpu and hw CPU (full mode only).",
    tools=[TOOL, "dpukit-agent", "dpukit-kvbench"],
)
@removing_pools
def stall(ctx: Context) -> Section:
    sec = Section("kv.stall: every mode in a compaction-bound regime")
    if skipped_in_quick_mode(ctx, sec, "kv.stall", " (4 GB per run)"):
        return sec
    points = run_modes(ctx, STALL_MODES, "fillrandom", 1024, driver="kvbench", settings=STALL_SETTINGS,
                       tag="-stall")
    pulsedb_findings(ctx, dict(points)["pulsedb"].runs, dict(points)["vanilla"].runs,
                     "kvbench fill, vanilla stalling")
    sec.table(MODE_HEADERS, mode_rows(points), caption="dpukit-kvbench fill --drain, 4 GB, 1024-byte values")
    base = points[0][1].figures
    path, rel = ctx.plot_path("stall")
    bars_plot(path, [
        BarPanel("normalized to vanilla", "× vanilla", {
            "write throughput": [p.figures["ops_per_sec"] / base["ops_per_sec"] for _, p in points],
            "P99 latency": [p.figures["write_p99_us"] / base["write_p99_us"] for _, p in points],
            "whole-host compaction CPU": [p.figures["host_whole_compaction_cpu_s"]
                                          / base["host_whole_compaction_cpu_s"] for _, p in points],
        }, refline=(1.0, "vanilla")),
        BarPanel("write stall ratio", "%", {"stall": [100 * p.figures["stall_ratio"] for _, p in points]}),
    ], [m for m, _ in points], title="compaction-bound regime")
    sec.image(rel, "the compaction-bound regime", "Throughput, P99 and whole-host compaction CPU against "
              "vanilla, and each mode's stall ratio.")
    sec.paragraph(
        "Settings: `" + " ".join(map(str, STALL_SETTINGS)) + "`, the RocksDB threads on the host CPU and the agent "
        "(or dcomp worker) on the other. Throughput and latency cover the writes; compaction CPU covers the "
        "writes and the drain. " + CPU_NOTE + f" Median of {ctx.repeats} runs by throughput, round-robin.")
    sec.paragraph(placement_note(ctx.runs))
    return sec


@experiment(
    "kv.dcomp",
    title="kv.dcomp: vanilla, pulsedb and DComp on the same driver",
    description="dpukit-kvbench fill, drained, at 1024-byte values: the DComp "
                "baseline needs RocksDB's CompactionService, which db_bench cannot install.",
    tools=[TOOL, "dpukit-agent", "dpukit-kvbench"],
)
@removing_pools
def dcomp(ctx: Context) -> Section:
    modes = ("vanilla", "pulsedb", "dcomp")
    workloads = ["fillrandom"]  # an overwrite run (fill, drain, overwrite, drain) takes minutes per point
    sec = Section("kv.dcomp: vanilla, pulsedb and DComp, dpukit-kvbench")
    steps = len(workloads) * len(modes)
    for w, workload in enumerate(workloads):
        points = run_modes(ctx, modes, workload, 1024, driver="kvbench", step0=w * len(modes), steps=steps)
        sec.table(MODE_HEADERS, mode_rows(points),
                  caption=f"dpukit-kvbench {'fill' if workload == 'fillrandom' else 'overwrite'} --drain, "
                          "1024-byte values")
    sec.paragraph(
        "The same RocksDB settings as kv.modes, driven by `dpukit-kvbench` (every key written once; `--drain` "
        "waits for compaction to finish, so each mode does the same compaction work). Throughput and latency "
        "cover the writes; compaction MB/s and CPU cover the writes and the drain. dcomp's dpu CPU is its "
        "worker process's (`OpenAndCompact` per job, L1 and deeper; L0→L1 stays on the host). "
        + ("Quick mode: one run per point." if ctx.quick else
           f"Median of {ctx.repeats} runs by throughput, the modes run round-robin."))
    sec.paragraph(placement_note(ctx.runs))
    return sec


YCSB_PHASES = ("load", "a", "b", "c", "d", "e", "f")


@experiment(
    "kv.ycsb",
    title="kv.ycsb: YCSB Load and A-F, vanilla against pulsedb",
    description="dpukit-kvbench ycsb: load, then workloads A-F on what it loaded (full mode only).",
    tools=[TOOL, "dpukit-agent", "dpukit-kvbench"],
)
@removing_pools
def ycsb(ctx: Context) -> Section:
    sec = Section("kv.ycsb: YCSB Load and A-F, vanilla against pulsedb")
    if ctx.quick:
        sec.paragraph("Skipped in quick mode (seven phases per mode); `dpukit eval --only kv.ycsb`.")
        return sec
    # A quarter of kv.modes' data (about 250,000 records, 250,000 operations per phase), one run per mode:
    # the seven phases take minutes.
    modes = ("vanilla", "pulsedb")
    points = {}
    for i, mode in enumerate(modes, 1):
        ctx.progress(f"{mode} ycsb load, a-f", i, len(modes))
        work = build_dir() / "kv-runs" / f"{mode}-ycsb"
        points[mode] = ctx.run_native(
            TOOL, ["bench", "--mode", mode, "--driver", "kvbench", "--workload", "ycsb", "--value-size", 1024,
                   *scale(True), "--work-dir", work], label=f"{mode}-ycsb")
    rows = []
    for phase in YCSB_PHASES:
        v = points["vanilla"]["figures"]["ycsb"][phase]
        p = points["pulsedb"]["figures"]["ycsb"][phase]
        rows.append([phase.upper() if phase != "load" else "Load", fmt_sig(v["ops_per_sec"] / 1000),
                     fmt_sig(p["ops_per_sec"] / 1000), ratio(p["ops_per_sec"], v["ops_per_sec"])])
    sec.table(["phase", "vanilla k ops/s", "pulsedb k ops/s", "× vanilla"], rows,
              caption="YCSB, 16-byte keys, 1024-byte values, zipfian 0.99 (D: latest; E: scans of 1-100)")
    v, p = points["vanilla"]["figures"], points["pulsedb"]["figures"]
    sec.paragraph(
        f"Host compaction CPU over the seven phases: vanilla {fmt_sig(v['host_compaction_cpu_s'])} s, pulsedb "
        f"{fmt_sig(p['host_compaction_cpu_s'])} s (agent {fmt_sig(p['dpu_cpu_s'])} s). One run per mode, each "
        "phase drained before the next; the quick-mode scale of kv.modes (16 MB memtables and SSTs).")
    sec.paragraph(placement_note(ctx.runs))
    return sec


# ---------------------------------------------------------------------------
# kv.bluefield: the compaction-bound regime with the dpu at a BlueField-3's
# speed beside full speed (issue 25). Every dpu-side loop (the agent's, the
# DComp worker's jobs) is time-dilated by 1/F; the host is untouched.

BLUEFIELD_SPEEDS = ("host", "bluefield3")
# A short compaction-bound regime: two writers, one compaction thread, small
# memtables and L0 triggers 4/8 (RocksDB compacts L0 at 4 files), so L0->L1
# falling behind stalls the writers; about 13 s a run here.
BLUEFIELD_SETTINGS: list[Any] = ["--data", "256M", "--threads", 2, "--compaction-threads", 1, "--write-buffer", "8M",
                                 "--target-file", "8M", "--level-base", "32M", "--l0-slowdown", 4, "--l0-stop", 8]
BLUEFIELD_QUICK_SETTINGS: list[Any] = ["--data", "128M", "--threads", 2, "--compaction-threads", 1,
                                       "--write-buffer", "4M", "--target-file", "4M", "--level-base", "16M",
                                       "--l0-slowdown", 4, "--l0-stop", 8]


def bluefield_configs(quick: bool) -> list[tuple[str, str, str, list[Any]]]:
    """(label, mode, dpu speed, extra args) of every configuration of a round:
    the side by side at both speeds, then (full mode) PulseDB Fig. 3's sweep at
    bluefield3, DComp with more or fewer whole compactions forced onto the dpu
    (its L1+ point at share 1 is the side by side's dcomp@bluefield3)."""
    side = [("vanilla", "vanilla", "host", []),
            ("dcomp@host", "dcomp", "host", []), ("dcomp@bluefield3", "dcomp", "bluefield3", []),
            ("pulsedb@host", "pulsedb", "host", []), ("pulsedb@bluefield3", "pulsedb", "bluefield3", [])]
    if quick:
        return side
    return side + [
        ("pulsedb-copy@bluefield3", "pulsedb-copy", "bluefield3", []),
        ("dcomp share 0@bluefield3", "dcomp", "bluefield3", ["--dcomp-share", 0]),
        ("dcomp L1+ share 0.5@bluefield3", "dcomp", "bluefield3", ["--dcomp-share", 0.5]),
        ("dcomp L0+@bluefield3", "dcomp", "bluefield3", ["--dcomp-first-level", 0]),
    ]


# Fig. 3's points, fewest compactions on the dpu first: (label, what is sent).
FIG3_POINTS = (("dcomp share 0@bluefield3", "none (all on the host)"),
               ("dcomp L1+ share 0.5@bluefield3", "half of L1+"),
               ("dcomp@bluefield3", "L1+ (DComp)"),
               ("dcomp L0+@bluefield3", "L0+ (L0->L1 too)"))


FIG3_ONLY = {label for label, _ in FIG3_POINTS} - {"dcomp@bluefield3"}


def collect_bluefield(ctx: Context) -> dict[str, list[dict[str, Any]]]:
    """Runs every configuration once per round, rounds interleaved (each round
    every configuration in turn, every other round in reverse order), each
    with an explicit --dpu-speed, so both speeds are in one report whatever
    ``dpukit eval --dpu`` says. Returns label -> one run per round."""
    configs = bluefield_configs(ctx.quick)
    settings = BLUEFIELD_QUICK_SETTINGS if ctx.quick else BLUEFIELD_SETTINGS
    runs: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in configs}
    steps = ctx.repeats * len(configs)
    for rep in range(ctx.repeats):
        order = configs if rep % 2 == 0 else list(reversed(configs))
        for i, (label, mode, speed, extra) in enumerate(order, 1):
            ctx.progress(f"{label} (round {rep + 1}/{ctx.repeats})", rep * len(configs) + i, steps)
            work = build_dir() / "kv-runs" / f"bluefield-{mode}"
            args = ["bench", *MODE_ARGS[mode], "--driver", "kvbench", "--workload", "fillrandom", "--value-size", 1024,
                    *settings, *extra, "--dpu-speed", speed, "--work-dir", work]
            runs[label].append(ctx.run_native(TOOL, args, label=f"{label}-r{rep + 1}"))
    return runs


def paired(runs: dict[str, list[dict[str, Any]]], label: str, base: str, key: str = "ops_per_sec") -> list[float]:
    """label's figure over base's, round by round (runs of the same round are paired)."""
    return [a["figures"][key] / b["figures"][key] if b["figures"][key] else float("nan")
            for a, b in zip(runs[label], runs[base])]


def med_range(xs: Sequence[float], scale: float = 1.0) -> str:
    if not xs:
        return "-"
    m = fmt_sig(median(xs) * scale)
    return m if len(xs) == 1 else f"{m} [{fmt_sig(min(xs) * scale)}–{fmt_sig(max(xs) * scale)}]"


def figure(runs: dict[str, list[dict[str, Any]]], label: str, key: str) -> list[float]:
    return [r["figures"].get(key, 0) for r in runs[label]]


def dpu_share(run: dict[str, Any]) -> float:
    """The fraction of compaction output the dcomp worker wrote (0 outside dcomp)."""
    f = run["figures"]
    return f.get("compaction_write_bytes_dpu", 0) / f["compaction_write_bytes"] if f["compaction_write_bytes"] else 0


def stall_order(runs: dict[str, list[dict[str, Any]]], speed: str) -> tuple[list[float], bool]:
    """Median stall ratios of vanilla, dcomp and pulsedb at `speed`, and whether
    they fall in Table II's order (vanilla > dcomp > pulsedb)."""
    ratios = [median(figure(runs, label, "stall_ratio"))
              for label in ("vanilla", f"dcomp@{speed}", f"pulsedb@{speed}")]
    return ratios, ratios[0] > ratios[1] > ratios[2]


def render_bluefield(runs: dict[str, list[dict[str, Any]]], quick: bool, plots: Any = None) -> Section:
    """The report section from the runs alone. ``plots(stem)`` gives (path,
    relative name) of a plot file; without it no plot is drawn."""
    sec = Section("kv.bluefield: vanilla, DComp and PulseDB with the dpu at BlueField-3 speed")
    labels = [c[0] for c in bluefield_configs(quick) if c[0] in runs and runs[c[0]]]
    rounds = len(runs["vanilla"])
    rows = []
    for label in labels:
        if label in FIG3_ONLY:
            continue  # their own table below
        r0 = runs[label][0]
        rows.append([
            label.split("@")[0], r0["placement"]["dpu_speed"]["name"] if label != "vanilla" else "-",
            med_range(figure(runs, label, "ops_per_sec"), 1e-3),
            "1.00" if label == "vanilla" else med_range(paired(runs, label, "vanilla")),
            med_range(figure(runs, label, "stall_ratio"), 100),
            fmt_sig(median(figure(runs, label, "write_p99_us"))),
            fmt_sig(median(figure(runs, label, "write_p999_us"))),
            fmt_sig(median(figure(runs, label, "host_whole_compaction_cpu_s"))),
            fmt_sig(median(figure(runs, label, "dpu_cpu_s"))),
            fmt_sig(100 * median([dpu_share(r) for r in runs[label]])) if label.startswith("dcomp") else "-",
        ])
    sec.table(["mode", "dpu speed", "k ops/s [range]", "× vanilla [range]", "stall % [range]", "P99 µs",
               "P99.9 µs", "whole-host compaction CPU s", "dpu CPU s", "compaction output on the dpu %"], rows,
              caption="dpukit-kvbench fill --drain, 1024-byte values; × vanilla is the median of the per-round "
                      "ratios against vanilla's run of the same round")

    checks = []
    for speed in BLUEFIELD_SPEEDS:
        for p in ("pulsedb", "pulsedb-copy"):
            if f"{p}@{speed}" not in runs or f"dcomp@{speed}" not in runs:
                continue
            r = paired(runs, f"{p}@{speed}", f"dcomp@{speed}")
            goal = speed == "bluefield3"
            checks.append([f"{p} / dcomp write throughput", speed, med_range(r),
                           "≥ 1.1 (11–33 %)" if goal else "-",
                           ("met" if median(r) >= 1.1 else "missed") if goal else "-"])
        st, ok = stall_order(runs, speed)
        checks.append(["stall %: vanilla > dcomp > pulsedb", speed,
                       " > ".join(fmt_sig(100 * x) for x in st), "58.2 > 50.3 > 38.9 (Table II)",
                       ("holds" if ok else "does not hold") if speed == "bluefield3" else ("yes" if ok else "no")])
    sec.table(["against the paper", "dpu speed", "measured (median [range])", "paper", "at BlueField-3"], checks,
              caption="PulseDB's comparison with DComp (Figs. 10-11, Table II) on this machine")

    fig3 = [(label, what) for label, what in FIG3_POINTS if label in runs and runs[label]]
    if len(fig3) < 2:  # quick mode runs the side by side only
        fig3 = []
    if fig3:
        base = fig3[0][0]
        frows = []
        for label, what in fig3:
            frows.append([what, fmt_sig(100 * median([dpu_share(r) for r in runs[label]])),
                          med_range(figure(runs, label, "ops_per_sec"), 1e-3), med_range(paired(runs, label, base)),
                          med_range(figure(runs, label, "stall_ratio"), 100),
                          fmt_sig(median(figure(runs, label, "dpu_cpu_s")))])
        sec.table(["compactions sent to the dpu", "compaction output on the dpu %", "k ops/s [range]",
                   "× all on the host [range]", "stall % [range]", "dpu CPU s"], frows,
                  caption="PulseDB Fig. 3 on this machine: DComp at bluefield3 with more whole compactions forced "
                          "onto the dpu (--dcomp-share, --dcomp-first-level)")
    if plots is not None:
        modes = [m for m in ("dcomp", "pulsedb", "pulsedb-copy") if f"{m}@bluefield3" in runs]

        def per_mode(speed: str, value: Any) -> list[float | None]:  # None: not run at that speed
            return [value("vanilla")] + [value(f"{m}@{speed}") if f"{m}@{speed}" in runs else None for m in modes]

        tput = {speed: per_mode(speed, lambda lb: 1.0 if lb == "vanilla" else median(paired(runs, lb, "vanilla")))
                for speed in BLUEFIELD_SPEEDS}
        stalls = {speed: per_mode(speed, lambda lb: 100 * median(figure(runs, lb, "stall_ratio")))
                  for speed in BLUEFIELD_SPEEDS}
        path, rel = plots("bluefield")
        bars_plot(path, [BarPanel("write throughput", "× vanilla", tput, refline=(1.0, "vanilla")),
                         BarPanel("write stall ratio (Table II)", "%", stalls)],
                  ["vanilla", *modes], title="the dpu at full speed (host) and at BlueField-3 speed (bluefield3)")
        sec.image(rel, "throughput and stall ratio at both dpu speeds",
                  "Write throughput against vanilla (median of per-round ratios) and the stall ratio (median) of "
                  "each mode with the dpu at full speed and at bluefield3; vanilla has no dpu side.")
        if fig3:
            path, rel = plots("bluefield-fig3")
            xs = [100 * median([dpu_share(r) for r in runs[label]]) for label, _ in fig3]
            ys = [median(paired(runs, label, fig3[0][0])) for label, _ in fig3]
            series = [Series("DComp, dpu at bluefield3", xs, ys)]
            if "dcomp@host" in runs and runs["dcomp@host"]:
                series.append(Series("DComp L1+, dpu at host speed",
                                     [100 * median([dpu_share(r) for r in runs["dcomp@host"]])],
                                     [median(paired(runs, "dcomp@host", fig3[0][0]))], "s"))
            line_plot(path, series, title="Fig. 3: whole compactions forced onto a slow dpu",
                      xlabel="compaction output written on the dpu (%)", ylabel="write throughput × all on host",
                      ymin_zero=True)
            sec.image(rel, "DComp's throughput as more compactions go to the dpu",
                      "DComp's write throughput, normalized to the same configuration with every compaction on the "
                      "host, against the share of compaction output its worker wrote.")
    settings = BLUEFIELD_QUICK_SETTINGS if quick else BLUEFIELD_SETTINGS
    sec.paragraph(
        "Settings: `" + " ".join(map(str, settings)) + "`, `--driver kvbench` (DComp needs RocksDB's "
        "CompactionService), RocksDB's threads on the host CPU and the agent or the DComp worker on the other. "
        "At `--dpu-speed bluefield3` (F = 0.455, PulseDB Fig. 2) every dpu-side thread is time-dilated: after each "
        "unit of work (a DComp job's output file, an agent request) it stays busy (1/F − 1) × that unit's CPU "
        "time, so dpu CPU includes the dilation; the pulls' copies (hw: the DMA engine's) and the host are not "
        "slowed. "
        f"{rounds} round(s); every configuration once per round, every other round in reverse order; "
        "ratios are per round, against the run of the same round. " + CPU_NOTE)
    return sec


@experiment(
    "kv.bluefield",
    title="kv.bluefield: vanilla, DComp and PulseDB with the dpu at BlueField-3 speed beside full speed",
    description="dpukit-kvbench fill --drain in a compaction-bound regime, the dpu at host speed and at bluefield3 "
                "(time-dilated): throughput, stall ratio (Table II's order), PulseDB against DComp, and in full "
                "mode DComp with more compactions forced onto the slow dpu (Fig. 3).",
    tools=[TOOL, "dpukit-agent", "dpukit-kvbench"],
)
@removing_pools
def bluefield(ctx: Context) -> Section:
    runs = collect_bluefield(ctx)
    sec = render_bluefield(runs, ctx.quick, ctx.plot_path)
    for speed in BLUEFIELD_SPEEDS:
        pulsedb_findings(ctx, runs[f"pulsedb@{speed}"], runs["vanilla"], "kvbench fill, compaction-bound")
    sec.paragraph(placement_note(ctx.runs))
    return sec
