"""Experiments on PulseDB (``dpukit-kv``): the stock db_bench on every kv mode.

Each run starts from an empty work directory under ``<build>/kv-runs/``; the
host side (db_bench and, in async-host, the in-process engine) is pinned to
CPU 0 and the agent (the dpu side) to CPU 1, as the tool does by default.
"""

from __future__ import annotations

from typing import Any, Sequence

from dpukit.experiments import Context, Point, experiment, median_run
from dpukit.experiments.core import parameters_note, placement_note
from dpukit.paths import build_dir
from dpukit.plots import BarPanel, bars_plot
from dpukit.report import Section
from dpukit.units import fmt_sig

TOOL = "dpukit-kv"
MODES = ("vanilla", "filepool", "async-host", "pulsedb")
VALUE_SIZES = (128, 512, 1024, 2048)


def scale(quick: bool) -> list[str]:
    """The RocksDB settings: the paper's (64 MB memtable and SST target, 256 MB
    L1) on about 1 GB of data in full mode; a quarter of everything in quick mode."""
    if quick:
        return ["--data", "256M", "--write-buffer", "16M", "--target-file", "16M", "--level-base", "64M"]
    return ["--data", "1G", "--write-buffer", "64M", "--target-file", "64M", "--level-base", "256M"]


def bench_args(ctx: Context, mode: str, workload: str, value: int, driver: str) -> list[Any]:
    work = build_dir() / "kv-runs" / f"{mode}-{workload}-{value}-{driver}"
    return ["bench", "--mode", mode, "--driver", driver, "--workload", workload, "--value-size", value,
            *scale(ctx.quick), "--work-dir", work]


def run_modes(ctx: Context, modes: Sequence[str], workload: str, value: int, *, driver: str = "db_bench",
              step0: int = 0, steps: int | None = None) -> list[tuple[str, Point]]:
    """Every mode ``ctx.repeats`` times, round-robin (mode after mode, then
    again), so that a slow spell of this shared machine hits every mode
    alike; each mode's reported run is its median by throughput."""
    steps = steps or len(modes)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(1, ctx.repeats + 1):
        for i, mode in enumerate(modes, 1):
            note = f" run {rep}/{ctx.repeats}" if ctx.repeats > 1 else ""
            ctx.progress(f"{mode} {workload} value={value} ({driver}){note}", step0 + i, steps)
            label = f"{mode}-{workload}-{value}-{driver}" + (f"-r{rep}" if ctx.repeats > 1 else "")
            runs[mode].append(ctx.run_native(TOOL, bench_args(ctx, mode, workload, value, driver), label=label))
    return [(m, Point(runs[m], median_run(runs[m], "ops_per_sec"))) for m in modes]


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
            fmt_sig(f["dpu_cpu_s"]), fmt_sig(f["write_p99_us"]), fmt_sig(f["write_p999_us"]),
            fmt_sig(100 * f["stall_ratio"]),
        ])
    return rows


MODE_HEADERS = ["mode", "k ops/s", "× vanilla", "compaction MB/s", "host compaction CPU s", "× vanilla",
                "dpu CPU s", "P99 µs", "P99.9 µs", "stall %"]


@experiment(
    "kv.modes",
    title="kv.modes: db_bench on vanilla, filepool, async-host and pulsedb",
    description="Write throughput, compaction MB/s, host compaction CPU, dpu CPU, write latency and stall "
                "ratio of db_bench fillrandom (and overwrite in full mode) at 1024-byte values.",
    tools=[TOOL, "dpukit-agent"],
)
def modes(ctx: Context) -> Section:
    workloads = ["fillrandom"] if ctx.quick else ["fillrandom", "overwrite"]
    sec = Section("kv.modes: db_bench on every mode, 1024-byte values")
    steps = len(workloads) * len(MODES)
    for w, workload in enumerate(workloads):
        points = run_modes(ctx, MODES, workload, 1024, step0=w * len(MODES), steps=steps)
        sec.table(MODE_HEADERS, mode_rows(points), caption=f"db_bench {workload}, 16-byte keys, 1024-byte values")
        path, rel = ctx.plot_path(f"modes-{workload}")
        base = points[0][1].figures
        bars_plot(path, [BarPanel("normalized to vanilla", "× vanilla", {
            "write throughput": [p.figures["ops_per_sec"] / base["ops_per_sec"] for _, p in points],
            "host compaction CPU": [p.figures["host_compaction_cpu_s"] / base["host_compaction_cpu_s"]
                                    for _, p in points],
        }, refline=(1.0, "vanilla"))], [m for m, _ in points], title=f"db_bench {workload}")
        sec.image(rel, f"{workload}: throughput and host compaction CPU per mode",
                  "Throughput and host compaction CPU of each mode, normalized to vanilla.")
    sec.paragraph(
        "Host compaction CPU is the CPU time of db_bench's compaction threads (`rocksdb:low`) plus the "
        "plugin's own threads (`pulsedb:*`: the completion reaper, and in async-host the write-persist engine), "
        "read per thread from /proc every 50 ms. dpu CPU is the agent's CPU time. The stall ratio is "
        "`rocksdb.stall.micros` over writer time. "
        + ("Quick mode: a quarter of the data and memtable, one run per point." if ctx.quick else
           f"Each row is the median of {ctx.repeats} runs by throughput; the modes were run round-robin."))
    sec.paragraph(placement_note(ctx.runs))
    if ctx.runs:
        sec.paragraph(parameters_note(ctx.runs[0]))
    return sec


@experiment(
    "kv.values",
    title="kv.values: vanilla against pulsedb across value sizes",
    description="db_bench fillrandom at 128, 512, 1024 and 2048-byte values (full mode only).",
    tools=[TOOL, "dpukit-agent"],
)
def values(ctx: Context) -> Section:
    sec = Section("kv.values: vanilla against pulsedb across value sizes")
    if ctx.quick:
        sec.paragraph("Skipped in quick mode (it runs db_bench eight times); `dpukit eval --only kv.values`.")
        return sec
    rows = []
    steps = 2 * len(VALUE_SIZES)
    step = 0
    tput, cpu = [], []
    for value in VALUE_SIZES:
        pts = dict(run_modes(ctx, ("vanilla", "pulsedb"), "fillrandom", value, step0=step, steps=steps))
        step += 2
        v, p = pts["vanilla"].figures, pts["pulsedb"].figures
        tput.append(p["ops_per_sec"] / v["ops_per_sec"])
        cpu.append(p["host_compaction_cpu_s"] / v["host_compaction_cpu_s"] if v["host_compaction_cpu_s"] else 0)
        rows.append([value, fmt_sig(v["ops_per_sec"] / 1000), fmt_sig(p["ops_per_sec"] / 1000), fmt_sig(tput[-1]),
                     fmt_sig(v["host_compaction_cpu_s"]), fmt_sig(p["host_compaction_cpu_s"]), fmt_sig(cpu[-1]),
                     fmt_sig(p["dpu_cpu_s"])])
    sec.table(["value bytes", "vanilla k ops/s", "pulsedb k ops/s", "× vanilla", "vanilla host compaction CPU s",
               "pulsedb host compaction CPU s", "× vanilla", "pulsedb dpu CPU s"], rows,
              caption="db_bench fillrandom")
    path, rel = ctx.plot_path("values")
    bars_plot(path, [BarPanel("pulsedb / vanilla", "× vanilla", {"write throughput": tput, "host compaction CPU": cpu},
                              refline=(1.0, "vanilla"))], [str(v) for v in VALUE_SIZES],
              title="pulsedb against vanilla by value size (bytes)")
    sec.image(rel, "pulsedb against vanilla by value size", "pulsedb normalized to vanilla at each value size.")
    sec.paragraph(placement_note(ctx.runs))
    return sec


@experiment(
    "kv.dcomp",
    title="kv.dcomp: vanilla, pulsedb and DComp on the same driver",
    description="dpukit-kvbench fill, drained, at 1024-byte values: the DComp "
                "baseline needs RocksDB's CompactionService, which db_bench cannot install.",
    tools=[TOOL, "dpukit-agent", "dpukit-kvbench"],
)
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
