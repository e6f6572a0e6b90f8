"""DPUBench at BlueField-2 speed: the operators and the end-to-end programs
with the dpu place time-dilated to ``bluefield2`` (docs/core.md), beside the
same work at full speed, against what the paper reports for BlueField-2
(Fig. 12's text for the operators, Figs. 14-16 for the end-to-end programs).

Both experiments are a ``collect`` step, which runs the tools and returns
records, and a ``render`` step, which turns the records into the section.
The operators are runs of ``dpukit-bench run`` (``ctx.run_native``); the
end-to-end records come from :mod:`dpukit.bench_e2e` and are kept with
``ctx.measured``, so that ``dpukit eval --render`` rebuilds both sections.

Time dilation slows every instruction of a dpu thread by the same factor F.
A real Arm core does not: memory-bound work (copies, table lookups that miss
the caches) is bound by the memory system, not by F. The operators that
BlueField-2 runs on an engine (regular expressions, compression and
decompression, public key) do not use the Arm cores at all: the operator
experiment runs them on the engine backend (core's engine model, timed on a
virtual clock, docs/bench.md) over threads x jobs in flight, and puts each
operator on its best BlueField place at its peak beside the host's.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Sequence

from dpukit.experiments import Context, experiment, skipped_in_quick_mode
from dpukit.experiments.bench import TOOL, OperatorInfo, list_operators, run_bench
from dpukit.plots import BarPanel, LinePanel, Series, bars_plot, line_panels
from dpukit.report import Section
from dpukit.units import fmt_sig

SPEED = "bluefield2"  # the paper's platform, whatever speed the eval runs at
OPS_TITLE = f"bench.bluefield.ops: every operator at {SPEED} speed against Fig. 12"
E2E_TITLE = f"bench.bluefield.e2e: the end-to-end programs with their dpu side at {SPEED} (Figs. 14-16)"

# Fig. 12's text: "For the majority of operators, the throughput is lower
# when deployed on the BlueField-2 compared to the Intel CPU. However, two
# exceptions are observed for the RXPMatch and Compress operators", whose
# peak is 1.5 to 2 times the Intel CPU's (both run on BlueField-2's engines,
# through DOCA). It gives no other number.
PAPER_ENGINE_RATIO = (1.5, 2.0)
PAPER_ENGINE_OPS = ("rxp_match", "compress")
# The operators of Table 4 and Fig. 11's text (SHA-1 and Compress), in our
# names; the others (crc32c, aes_cbc, memcpy) are not in the paper's Fig. 12.
PAPER_OPS = ("lpm", "tcp_seg", "ip_frag", "checksum", "crc", "toeplitz", "lz77", "huffman", "snappy", "compress",
             "aes", "md5", "sha1", "sha256", "rsa", "dsa", "ecdsa", "rxp_match")
# BlueField-2's engines (the paper's §2.2 and Fig. 2). The paper's card had
# encryption disabled, so its public-key operators ran on the Arm cores.
ENGINES = {"rxp_match": "RegEx (RXP)", "compress": "compression (deflate)", "decompress": "decompression (inflate)",
           "rsa": "public key (PKA)", "dsa": "public key (PKA)", "ecdsa": "public key (PKA)"}
# The paper's platforms (§2.2, §4.2.1, §4.2.3): the Intel host has 12
# physical cores (two Xeon E5-2620 v3), BlueField-2 8 Arm cores.
PAPER_HOST_CORES = 12
BLUEFIELD_ARM_CORES = 8
# Bound by memory more than by the core: a copy, and LPM, whose pool of
# addresses is made so that lookups are not cache-hot (docs/bench.md).
MEMORY_BOUND = ("memcpy", "lpm")


def ops_sizes(quick: bool) -> list[int]:
    return [1024] if quick else [64, 1024]


def ops_rounds(quick: bool) -> int:
    return 1 if quick else 3


def ops_timing(quick: bool) -> list[Any]:
    if quick:
        return ["--warmup", 0.02, "--min-time", 0.05, "--repetitions", 3]
    return ["--warmup", 0.05, "--min-time", 0.1, "--repetitions", 3]


def engine_sweep(quick: bool) -> tuple[list[int], list[int]]:
    """Submitting threads and jobs in flight per thread of the engine runs:
    up to BlueField-2's 8 Arm cores, and deep enough to saturate."""
    if quick:
        return [1, 4, 8], [1, 64]
    return [1, 2, 4, 8], [1, 4, 16, 64]


def all_cpus() -> str:
    """Every CPU this process may use: the host's peak here."""
    import os
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def shared_cpu() -> str:
    """Both places run on this CPU (the last one this process may use), so
    that host and dpu differ by the dilation alone, not by which CPU they got."""
    import os
    return str(max(os.sched_getaffinity(0)))


# -- bench.bluefield.ops: every operator at bluefield2 against Fig. 12 --------


def collect_ops(ctx: Context) -> dict[str, Any]:
    """Every operator (lib backend, one thread) on the host place and on the
    dpu place at ``SPEED``, per operator the two places one after the other,
    their order alternating (ABBA), for ``ops_rounds`` rounds."""
    ops = [OperatorInfo(**o) for o in ctx.measured(
        "operators", lambda: [dataclasses.asdict(o) for o in list_operators() if o.scenario != "program"])]
    sizes, rounds, cpu = ops_sizes(ctx.quick), ops_rounds(ctx.quick), ctx.measured("cpu", shared_cpu)
    runs: list[dict[str, Any]] = []
    steps, step = rounds * len(ops) * 2, 0
    for rnd in range(rounds):
        for i, op in enumerate(ops):
            order = [("host", "host"), ("dpu", SPEED)]
            if (rnd + i) % 2:
                order.reverse()
            for place, speed in order:
                step += 1
                ctx.progress(f"round {rnd + 1}: {op.name} on {place}" + (f" at {speed}" if place == "dpu" else ""),
                             step, steps)
                args = ["--ops", op.name, "--backend", "lib", "--sizes", ",".join(map(str, sizes)), "--threads", 1,
                        "--place", place, "--host-cpus", cpu, "--dpu-cpus", cpu, "--dpu-speed", speed,
                        *ops_timing(ctx.quick)]
                r = run_bench(ctx, args, f"{op.name}-{place}-r{rnd}")
                runs.append({"round": rnd, "op": op.name, "place": place, "result": r})
    # The host at this machine's peak: the lib backend on every CPU here.
    cpus = ctx.measured("all_cpus", all_cpus)
    n = len(cpus.split(","))
    peak_runs: list[dict[str, Any]] = []
    for i, op in enumerate(ops):
        ctx.progress(f"{op.name} on the host at {n} threads", i + 1, len(ops))
        args = ["--ops", op.name, "--backend", "lib", "--sizes", ",".join(map(str, sizes)),
                "--threads", ",".join(str(t) for t in range(1, n + 1)), "--place", "host", "--host-cpus", cpus,
                *ops_timing(ctx.quick)]
        peak_runs.append({"op": op.name, "result": run_bench(ctx, args, f"{op.name}-host-peak")})
    # The operators with an engine: the engine backend at SPEED's card over
    # threads x depth, its dpu threads and its executor (the hw place) on the
    # shared CPU. An executor on another CPU makes the dpu threads pay for
    # the engine's shared state moving between CPUs (4x the dpu CPU per job at
    # 8 threads x 64, docs/bench.md), which a card's doorbell does not cost.
    threads, depths = engine_sweep(ctx.quick)
    engine_runs: list[dict[str, Any]] = []
    engine_ops = [op for op in ops if "engine" in op.backends]
    for i, op in enumerate(engine_ops):
        ctx.progress(f"{op.name} on the engine at {SPEED}", i + 1, len(engine_ops))
        args = ["--ops", op.name, "--backend", "engine", "--sizes", ",".join(map(str, sizes)),
                "--threads", ",".join(map(str, threads)), "--depth", ",".join(map(str, depths)),
                "--place", "dpu", "--dpu-cpus", cpu, "--hw-cpus", cpu, "--dpu-speed", SPEED, *ops_timing(ctx.quick)]
        engine_runs.append({"op": op.name, "result": run_bench(ctx, args, f"{op.name}-engine")})
    return {"ops": [dataclasses.asdict(o) for o in ops], "sizes": sizes, "rounds": rounds, "cpu": cpu,
            "runs": runs, "all_cpus": cpus, "peak_runs": peak_runs, "engine_runs": engine_runs,
            "engine_threads": threads, "engine_depths": depths}


def _range(v: Sequence[float]) -> str:
    return f"{fmt_sig(statistics.median(v))} [{fmt_sig(min(v))}-{fmt_sig(max(v))}]" if v else "-"


def ops_ratios(data: dict[str, Any]) -> dict[str, Any]:
    """Per (operator, size): host and dpu Mops per round, their paired ratios
    (per wall second, ``wall``, and per second of the threads' own CPU time,
    ``ratio``), and the dpu points' dilation (added / work CPU time); the
    factor F."""
    pts: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    factor = None
    unavailable: dict[str, str] = {}
    for run in data["runs"]:
        fig = run["result"]["figures"]
        if run["place"] == "dpu":
            factor = fig["dpu_speed"]["factor"]
        for u in fig["unavailable"]:
            unavailable.setdefault(u["op"], u["why"])
        for p in fig["points"]:
            pts[(run["op"], run["place"], p["size"], run["round"])] = p
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for op in data["ops"]:
        for size in data["sizes"]:
            host, dpu, ratio, wall, dil = [], [], [], [], []
            for rnd in range(data["rounds"]):
                h, d = pts.get((op["name"], "host", size, rnd)), pts.get((op["name"], "dpu", size, rnd))
                if not h or not d:
                    continue
                host.append(h["mops"])
                dpu.append(d["mops"])
                wall.append(d["mops"] / h["mops"])
                # Per CPU second, the figure other load on the machine does not move.
                ratio.append(d["mops_per_cpu_second"] / h["mops_per_cpu_second"])
                w = d.get("dilation", {}).get("work_cpu_ns", 0)
                if w:
                    dil.append(d["dilation"]["dilated_cpu_ns"] / w)
            out[(op["name"], size)] = {"host": host, "dpu": dpu, "ratio": ratio, "wall": wall, "dilation": dil}
    return {"points": out, "factor": factor, "unavailable": unavailable}


def engine_results(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per operator run on the engine backend: its points by (size, threads,
    depth), the engine's spec as the run recorded it, or why it is
    unavailable at ``SPEED``."""
    out: dict[str, dict[str, Any]] = {}
    for run in data.get("engine_runs", []):
        fig = run["result"]["figures"]
        e = out.setdefault(run["op"], {"points": {}, "spec": None, "why": None, "depths": {}})
        for u in fig["unavailable"]:
            if "depth" in u:  # deeper than the engine's queue: that depth only
                e["depths"][u["depth"]] = u["why"]
            else:
                e["why"] = u["why"]
        for p in fig["points"]:
            e["points"][(p["size"], p["threads"], p["depth"])] = p
            e["spec"] = p["engine"]["spec"]
    return out


def engine_peak(e: dict[str, Any], size: int) -> dict[str, Any] | None:
    """The engine point with the most Mops at ``size`` (over threads x depth)."""
    pts = [p for (sz, _, _), p in e["points"].items() if sz == size]
    return max(pts, key=lambda p: p["mops"]) if pts else None


def host_peaks(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(operator, size) -> the host's point with the most Mops on this
    machine's CPUs (the lib backend, 1 to N threads)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for run in data.get("peak_runs", []):
        for p in run["result"]["figures"]["points"]:
            k = (run["op"], p["size"])
            if k not in out or p["mops"] > out[k]["mops"]:
                out[k] = p
    return out


def engine_rate(point: dict[str, Any], size: int) -> tuple[float, str] | None:
    """The engine's modelled rate for the jobs of an engine ``point`` at
    ``size`` (jobs/s) and the figure's source; None when the spec has none."""
    spec, e = point["engine"]["spec"], point["engine"]
    if "bytes_per_s" in spec:
        f = spec["bytes_per_s"]
        return f["value"] / size, f["source"]
    f = spec.get("ops_per_s", {}).get(e.get("operation", ""))
    return (f["value"], f["source"]) if f else None


def source_kind(source: str) -> str:
    return "guess" if source.startswith("guess") else "sourced"


def paper_cell(op: str) -> str:
    if op in PAPER_ENGINE_OPS:
        return f"{PAPER_ENGINE_RATIO[0]:g}-{PAPER_ENGINE_RATIO[1]:g} (peak, on its engine)"
    if op in PAPER_OPS:
        return "< 1 (no figure given)"
    return "not in Fig. 12"


def verdict(op: str, ratio: float | None) -> str:
    """How the emulated ratio stands against the paper's, in words."""
    if ratio is None:
        return "-"
    if op in PAPER_ENGINE_OPS:
        lo, hi = PAPER_ENGINE_RATIO
        return (f"on the Arm cores: {fmt_sig(ratio)} against {lo:g}-{hi:g}, "
                f"{fmt_sig(lo / ratio)}-{fmt_sig(hi / ratio)}x too slow; the paper ran it on the engine "
                "(the table at peak below)")
    notes = []
    if op in PAPER_OPS:
        notes.append("direction as the paper's (< 1); no magnitude to check" if ratio < 1
                     else "wrong direction: the paper has < 1")
    if op in ENGINES:
        notes.append("the engine was disabled on the paper's card; with it, the Arm cores would not do this work")
    if op in MEMORY_BOUND:
        notes.append("memory-bound: dilated by F like compute, which a real Arm core's memory system is not")
    return "; ".join(notes) or "-"


def peak_verdict(op: str, ratio: float | None) -> str:
    """An engine operator's ratio at peak against Fig. 12's text."""
    if ratio is None or op not in PAPER_ENGINE_OPS:
        return "-"
    lo, hi = PAPER_ENGINE_RATIO
    direction = "direction as the paper's (> 1)" if ratio > 1 else "wrong direction (the paper has > 1)"
    where = "within" if lo <= ratio <= hi else ("above" if ratio > hi else "below")
    return f"{direction}; {fmt_sig(ratio)} is {where} its {lo:g}-{hi:g}"


def render_peaks(ctx: Context, sec: Section, data: dict[str, Any], r: dict[str, Any]) -> None:
    """Each operator on its best BlueField place at peak beside the host's
    peak, the engines' parameters with their sources, and the saturation."""
    big = data["sizes"][-1]
    eng = engine_results(data)
    peaks = host_peaks(data)
    n = len(data.get("all_cpus", "").split(",")) if data.get("all_cpus") else 0
    threads, depths = data.get("engine_threads", []), data.get("engine_depths", [])
    sec.paragraph(
        f"At peak, each operator on its best BlueField-2 place: the operators with an engine on the engine backend "
        f"(`--backend engine --place dpu --dpu-speed {SPEED}`: core's engine model of BlueField-2, its jobs "
        f"computed by the lib backend's code on the hw place's thread, {', '.join(map(str, threads))} submitting "
        f"dpu threads x {', '.join(map(str, depths))} jobs in flight each; the peak is the best of that sweep), "
        f"timed on a virtual clock: each dpu thread's own CPU time per loop step / F (building, posting and "
        f"polling jobs), advanced to the next modelled completion when it can only wait; so these figures are "
        f"model time, not wall time (docs/bench.md). The others on the Arm cores: one dilated thread's rate x "
        f"BlueField-2's {BLUEFIELD_ARM_CORES} cores, an extrapolation. The host: the lib backend at 1 thread, at "
        f"this machine's peak ({n} CPUs, 1 to {n} threads) and, labelled as an extrapolation, its 1-thread "
        f"rate x the paper's {PAPER_HOST_CORES} host cores (two Xeon E5-2620 v3; Fig. 11's text: the operators "
        "that run on cores scale linearly up to the core count). Fig. 12's 1.5-2x for RXPMatch and Compress is "
        "BlueField-2's peak against the Intel CPU's, so the ratio against the 12-core extrapolation is the one "
        "to compare; the engines' rates are what their sources give (most are named guesses: the table below "
        "says which), not fitted to Fig. 12.")
    rows = []
    for op in data["ops"]:
        name = op["name"]
        p = r["points"][(name, big)]
        host1 = statistics.median(p["host"]) if p["host"] else None
        e = eng.get(name)
        pk = engine_peak(e, big) if e else None
        if pk:
            bf = pk["mops"]
            place = (f"engine: {pk['engine']['name']}, {pk['threads']} threads x {pk['depth']} in flight, "
                     f"busy {100 * pk['engine']['busy_fraction']:.0f}%")
            rate = engine_rate(pk, big)
            model = fmt_sig(rate[0] / 1e6) if rate else "-"
            basis = f"rate: {source_kind(rate[1])}" if rate else "-"
        else:
            bf = statistics.median(p["dpu"]) * BLUEFIELD_ARM_CORES if p["dpu"] else None
            place = f"Arm cores: 1 dilated thread x {BLUEFIELD_ARM_CORES} (extrapolated)"
            if e and e["why"]:
                place += "; no engine: " + e["why"]
            model, basis = "-", "-"
        hp = peaks.get((name, big))
        host12 = host1 * PAPER_HOST_CORES if host1 else None
        ratio12 = bf / host12 if bf and host12 else None
        rows.append([name, place, fmt_sig(bf) if bf else "-", model,
                     fmt_sig(host1) if host1 else "-",
                     f"{fmt_sig(hp['mops'])} ({hp['threads']} threads)" if hp else "-",
                     fmt_sig(host12) if host12 else "-",
                     fmt_sig(ratio12) if ratio12 else "-",
                     fmt_sig(bf / hp["mops"]) if bf and hp else "-",
                     paper_cell(name), peak_verdict(name, ratio12), basis])
        if name in PAPER_ENGINE_OPS and ratio12:
            ctx.finding(f"dpubench.{name}", ratio12, SPEED, f"{fmt_sig(bf)} against {fmt_sig(host12)} Mops, {big} B")
    sec.table(["operator", "best BlueField-2 place", f"BlueField-2 Mops at peak, {big} B", "engine's modelled Mops",
               "host Mops, 1 thread", f"host Mops, this machine's peak ({n} CPUs)",
               f"host Mops, 1 thread x {PAPER_HOST_CORES} cores (extrapolated)",
               f"BlueField-2 / host x {PAPER_HOST_CORES}", "BlueField-2 / host here",
               "paper (Fig. 12's text)", "against the paper", "engine's rate"], rows,
              caption=f"At peak: each operator on its best BlueField-2 place against the host ({big} B)")
    # The engines' parameters and where they come from.
    rows = []
    seen = set()
    for name, e in eng.items():
        spec = e["spec"]
        if not spec or (spec["kind"], spec["generation"]) in seen:
            continue
        seen.add((spec["kind"], spec["generation"]))
        figs = [("rate (B/s)", spec["bytes_per_s"])] if "bytes_per_s" in spec else \
            [(f"{k} (ops/s)", f) for k, f in spec.get("ops_per_s", {}).items() if k.endswith("_sign")]
        figs += [("latency (ns)", spec["latency_ns"]), ("queue depth", spec["queue_depth"]),
                 ("parallel units", spec["parallel"])]
        for label, f in figs:
            rows.append([f"{spec['generation']} {spec['name']}", label, fmt_sig(f["value"]), f["source"]])
    if rows:
        sec.table(["engine", "figure", "value", "source (a named guess where it starts with 'guess')"], rows,
                  caption="The engines' parameters as the runs recorded them (core's EngineSpec)")
    # Saturation: per engine operator at the largest size, Gbps over depth per thread count.
    panels, sat_rows = [], []
    for name, e in eng.items():
        pts = {(t, d): p for (sz, t, d), p in e["points"].items() if sz == big}
        if not pts:
            continue
        series = [Series(f"{t} threads", depths, [pts[(t, d)]["gbps"] if (t, d) in pts else float("nan")
                                                   for d in depths]) for t in threads]
        rate = engine_rate(next(iter(pts.values())), big)
        if rate:
            gbps = rate[0] * 8 * big / 1e9
            series.append(Series("engine's modelled rate", depths, [gbps] * len(depths), "k--"))
        panels.append(LinePanel(name, series))
        for t in threads:
            sat_rows.append([name, t] + [f"{fmt_sig(pts[(t, d)]['gbps'])} ({100 * pts[(t, d)]['engine']['busy_fraction']:.0f}%)"
                                         if (t, d) in pts else "-" for d in depths]
                            + [fmt_sig(statistics.median([pts[(t, d)]["engine"]["dpu_cpu_ns_per_job"] for d in depths
                                                          if (t, d) in pts]))])
    if sat_rows:
        sec.table(["operator", "threads", *[f"{d} in flight: Gbps (engine busy)" for d in depths],
                   "dpu CPU ns per job (median over depth)"], sat_rows,
                  caption=f"The engines' saturation at {big} B: Gbps in model time, the engine's busy share")
        sec.paragraph(
            "The dpu CPU per job is the submitting thread's own CPU time (before / F) per job: building and "
            "posting jobs, polling completions, and its share of the engine's state (the model's lock, the "
            "executor's work queue), less one read of its CPU clock per loop step (a system call a driver does "
            "not make; `engine.clock_read_ns` in each point). hw CPU (the executor computing the library's "
            "code) is recorded in each point and never enters the model time.")
    if panels:
        path, rel = ctx.plot_path("saturation")
        line_panels(path, panels, title=f"BlueField-2's engines ({SPEED}): throughput in model time over jobs in "
                    f"flight per thread, {big} B", xlabel="jobs in flight per thread", ylabel="Gbps", ncols=4)
        sec.image(rel, "engine saturation", "Per engine operator, Gbps over jobs in flight per thread (one line "
                  "per number of submitting dpu threads) against the engine's modelled rate (dashed): an engine "
                  "is bound by its own rate, not by the cores that feed it.")


# The dpu speed model's promise on the runner's loop (core's speed_check.h,
# issue 31's bounds): on a compute-bound operator, throughput F × the host's
# within 6 %, dpu CPU per unit of work 1/F within 5 %.
PROMISE_OP = "sha256"
PROMISE_THROUGHPUT_TOLERANCE, PROMISE_CPU_TOLERANCE = 0.06, 0.05


def promise_paragraph(sec: Section, r: dict[str, Any], size: int) -> None:
    """The model's promise on bench's runner, from PROMISE_OP's paired rounds
    (it was a unit test, BenchDpuSpeed.TheRunnerAtHalfSpeedKeepsTheModelsPromise:
    a timing figure, measured here)."""
    p, factor = r["points"].get((PROMISE_OP, size)), r["factor"]
    if not p or not p["wall"] or not factor:
        return
    cpu = [1 / x for x in p["ratio"]]  # dpu CPU per unit / host's: the inverse of the per-CPU-second ratio
    qps_ok = abs(statistics.median(p["wall"]) / factor - 1) <= PROMISE_THROUGHPUT_TOLERANCE
    cpu_ok = abs(statistics.median(cpu) * factor - 1) <= PROMISE_CPU_TOLERANCE
    sec.paragraph(
        f"**The model's promise on the runner** ({PROMISE_OP}, compute-bound, {size} B, the pairs above): "
        f"throughput dpu / host {_range(p['wall'])} against F = {fmt_sig(factor)} ± "
        f"{PROMISE_THROUGHPUT_TOLERANCE:.0%} (goal): {'met' if qps_ok else 'missed'}; CPU per unit of work dpu / "
        f"host {_range(cpu)} against 1/F = {fmt_sig(1 / factor)} ± {PROMISE_CPU_TOLERANCE:.0%} (goal): "
        f"{'met' if cpu_ok else 'missed'}.")


def render_ops(ctx: Context, data: dict[str, Any]) -> Section:
    sec = Section(OPS_TITLE)
    r = ops_ratios(data)
    factor = r["factor"]
    sizes, big = data["sizes"], data["sizes"][-1]
    sec.paragraph(
        f"`dpukit-bench run --backend lib --threads 1`, each operator on the host place and on the dpu place at "
        f"`--dpu-speed {SPEED}` (F = {fmt_sig(factor) if factor else '?'}: each dpu timing thread is time-dilated, "
        f"docs/core.md), both places pinned to CPU {data['cpu']} so that they differ by the dilation alone; "
        f"{data['rounds']} round(s), per operator the two places one after the other, their order alternating; "
        "the ratio is dpu / host within each round of the units of work per second of the timing thread's own "
        "CPU time (dilation included), which other load on this shared machine does not lower, its median over "
        "the rounds shown with the range in brackets; the wall-clock ratio is beside it. The paper's column is what Fig. 12's text says of BlueField-2 against its Intel "
        "CPU: most operators are slower; RXPMatch and Compress, which run on BlueField-2's engines through DOCA, "
        f"reach {PAPER_ENGINE_RATIO[0]:g}-{PAPER_ENGINE_RATIO[1]:g}x at their peak. It gives no other number.")
    sec.paragraph(
        "One factor for every operator is the model's distortion. Dilation slows each instruction of a dpu thread "
        "by F, whatever bounds it. On a real Arm core the ratio differs per operator: memory-bound work (memcpy, "
        "LPM's cache-missing lookups) is bound by the memory system, not the core, so it does not slow by F; "
        "regular expressions, compression and public-key signatures have engines on BlueField-2 and do not run on "
        "the Arm cores at all. This table is the Arm cores' figure for every operator; for the two operators the "
        "paper measured on engines it is too slow by the factor in the last column, and the table at peak below "
        "puts them on their engines. The public-key engine was disabled on the paper's card "
        "(encryption disabled), so its RSA, DSA and ECDSA figures are the Arm cores', which F models; the table "
        "at peak shows what the PKA's model gives where the card has it.")
    rows = []
    for op in data["ops"]:
        name = op["name"]
        cells: list[Any] = [name + (f" [engine: {ENGINES[name]}]" if name in ENGINES else "")
                            + (" [memory-bound]" if name in MEMORY_BOUND else "")]
        for size in sizes:
            p = r["points"][(name, size)]
            cells.append(_range(p["ratio"]) if p["ratio"] else ("unavailable" if name in r["unavailable"] else "-"))
        p = r["points"][(name, big)]
        cells += [_range(p["wall"]), fmt_sig(statistics.median(p["host"])) if p["host"] else "-",
                  fmt_sig(statistics.median(p["dpu"])) if p["dpu"] else "-", paper_cell(name),
                  verdict(name, statistics.median(p["ratio"]) if p["ratio"] else None)]
        rows.append(cells)
    cores = [statistics.median(r["points"][(n, big)]["ratio"]) for n in PAPER_OPS
             if n not in PAPER_ENGINE_OPS and r["points"].get((n, big), {}).get("ratio")]
    if cores:
        slower = sum(x < 1 for x in cores)
        ctx.finding("dpubench.slower", 100 * slower / len(cores), SPEED,
                    f"{slower} of {len(cores)} operators, {big} B")
    sec.table(["operator", *[f"dpu / host, {s} B" for s in sizes], f"wall-clock dpu / host, {big} B",
               f"host Mops, {big} B", f"dpu Mops, {big} B",
               "paper (Fig. 12's text)", "against the paper"], rows,
              caption=f"The dpu place at {SPEED} against the host place, per operator (lib backend, one thread)")
    dil = [x for p in r["points"].values() for x in p["dilation"]]
    if dil and factor:
        sec.paragraph(
            f"The dilation's own accounting over every dpu point: busy time added / the bursts' CPU time = "
            f"{_range(dil)} against 1/F - 1 = {fmt_sig(1 / factor - 1)}. Per CPU second the ratio is F up to the "
            "runner's own loop and what other threads do to the caches; the wall-clock ratio also carries the "
            "machine's other load, which differs between the two runs of a pair.")
    promise_paragraph(sec, r, big)
    names = [op["name"] + (" *" if op["name"] in ENGINES else "") for op in data["ops"]]
    values = {f"emulated, {s} B": [statistics.median(r["points"][(op["name"], s)]["ratio"])
                                   if r["points"][(op["name"], s)]["ratio"] else float("nan") for op in data["ops"]]
              for s in sizes}
    mid = sum(PAPER_ENGINE_RATIO) / 2
    values[f"paper, Fig. 12's text ({PAPER_ENGINE_RATIO[0]:g}-{PAPER_ENGINE_RATIO[1]:g}x, bar at {mid:g})"] = [
        mid if op["name"] in PAPER_ENGINE_OPS else float("nan") for op in data["ops"]]
    path, rel = ctx.plot_path("ratios")
    bars_plot(path, [BarPanel(f"throughput, dpu at {SPEED} / host", "ratio (log)", values, logy=True,
                              annotate=False, refline=(1.0, "equal to the host"))], names,
              title=f"DPUBench operators: the dpu place at {SPEED} against the host (* an engine on BlueField-2)",
              ncols=1)
    sec.image(rel, "dpu / host per operator", f"Per operator, the dpu place at {SPEED} over the host place "
              "(log scale), beside the only ratios Fig. 12's text gives: RXPMatch and Compress on BlueField-2's "
              "engines. * marks the operators with an engine on BlueField-2.")
    render_peaks(ctx, sec, data, r)
    unavailable = dict(r["unavailable"])
    for name, e in engine_results(data).items():
        if e["why"]:
            unavailable[f"{name} (engine, {SPEED})"] = e["why"]
        for d, why in e["depths"].items():
            unavailable[f"{name} (engine, {SPEED}, {d} in flight)"] = why
    if unavailable:
        sec.table(["operator", "why not"], sorted(unavailable.items()), caption="Backends that do not exist here")
    return sec


# -- Table 5's programs at bluefield2, with and without the engines ------------

# The programs that use an engine operator (§4.3: "IPS and Url-Filter (which
# utilize the RXPMatch operator) and ... File-Compress (which utilize the
# Compress operator) are more suitable for deployment on the BlueField-2").
ENGINE_PROGRAMS = ("program_url_filter", "program_ips", "program_file_compress")


def program_engine_sweep(quick: bool) -> tuple[list[int], list[int]]:
    """The engine runs of the programs: quick mode only the peak's corner."""
    return ([8], [64]) if quick else engine_sweep(False)


def collect_programs(ctx: Context) -> dict[str, Any]:
    """The three programs (one run each way, all three in it): lib at one
    thread on the host place and on the dpu place at ``SPEED`` (paired, the
    order alternating over the rounds, both on one CPU), and the engine
    backend at ``SPEED`` over threads x depth."""
    # The operators' CPU (collect_ops records it under "cpu" in the same experiment).
    sizes, rounds, cpu = ops_sizes(ctx.quick), ops_rounds(ctx.quick), ctx.measured("programs_cpu", shared_cpu)
    ops = ",".join(ENGINE_PROGRAMS)
    runs: list[dict[str, Any]] = []
    for rnd in range(rounds):
        order = [("host", "host"), ("dpu", SPEED)]
        if rnd % 2:
            order.reverse()
        for place, speed in order:
            ctx.progress(f"round {rnd + 1}: the programs on {place}" + (f" at {speed}" if place == "dpu" else ""))
            args = ["--ops", ops, "--backend", "lib", "--sizes", ",".join(map(str, sizes)), "--threads", 1,
                    "--place", place, "--host-cpus", cpu, "--dpu-cpus", cpu, "--dpu-speed", speed,
                    *ops_timing(ctx.quick)]
            runs.append({"round": rnd, "place": place, "result": run_bench(ctx, args, f"programs-{place}-r{rnd}")})
    threads, depths = program_engine_sweep(ctx.quick)
    ctx.progress(f"the programs on the engines at {SPEED}")
    args = ["--ops", ops, "--backend", "engine", "--sizes", ",".join(map(str, sizes)),
            "--threads", ",".join(map(str, threads)), "--depth", ",".join(map(str, depths)),
            "--place", "dpu", "--dpu-cpus", cpu, "--hw-cpus", cpu, "--dpu-speed", SPEED, *ops_timing(ctx.quick)]
    engine = run_bench(ctx, args, "programs-engine")
    return {"programs": list(ENGINE_PROGRAMS), "sizes": sizes, "rounds": rounds, "cpu": cpu, "runs": runs,
            "engine_run": engine, "engine_threads": threads, "engine_depths": depths}


def program_figures(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(program, size) -> host and dpu Mops per round, their paired ratio
    per CPU second, and the engine's peak point (None when unavailable)."""
    pts: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for run in data["runs"]:
        for p in run["result"]["figures"]["points"]:
            pts[(p["op"], run["place"], p["size"], run["round"])] = p
    eng: dict[tuple[str, int], dict[str, Any]] = {}
    for p in data["engine_run"]["figures"]["points"]:
        k = (p["op"], p["size"])
        if k not in eng or p["mops"] > eng[k]["mops"]:
            eng[k] = p
    out = {}
    for name in data["programs"]:
        for size in data["sizes"]:
            host, dpu, ratio = [], [], []
            for rnd in range(data["rounds"]):
                h, d = pts.get((name, "host", size, rnd)), pts.get((name, "dpu", size, rnd))
                if h and d:
                    host.append(h["mops"])
                    dpu.append(d["mops"])
                    ratio.append(d["mops_per_cpu_second"] / h["mops_per_cpu_second"])
            out[(name, size)] = {"host": host, "dpu": dpu, "ratio": ratio, "engine": eng.get((name, size))}
    return out


def render_programs(ctx: Context, sec: Section, data: dict[str, Any]) -> None:
    """Url-Filter, IPS and File-Compress at ``SPEED``: on the Arm cores, with
    their engine operator on the engine, beside the host."""
    figs = program_figures(data)
    threads, depths = data["engine_threads"], data["engine_depths"]
    sec.paragraph(
        "Table 5's programs that use an engine operator, which §4.3 calls more suitable for BlueField-2: "
        "Url-Filter (rxp_match), IPS (rxp_match, then tcp_seg) and File-Compress (compress), each one unit of work "
        "per packet. Host: the lib backend, one thread. Arm cores: the lib backend on the dpu place at "
        f"`--dpu-speed {SPEED}`, one dilated thread (paired with the host on CPU {data['cpu']}, {data['rounds']} "
        f"round(s)), and that x BlueField-2's {BLUEFIELD_ARM_CORES} cores, an extrapolation. With the engine: "
        f"`--backend engine`, the program's engine operator as the engine's jobs and the rest (IPS's tcp_seg) on "
        f"the submitting dpu thread when each job completes, {', '.join(map(str, threads))} threads x "
        f"{', '.join(map(str, depths))} in flight, the best point, in model time (its dpu threads' own CPU / F and "
        "the engine's modelled completions). The host x "
        f"{PAPER_HOST_CORES} is the paper's 12-core host, extrapolated from one thread.")
    rows = []
    for name in data["programs"]:
        for size in data["sizes"]:
            f = figs[(name, size)]
            host = statistics.median(f["host"]) if f["host"] else None
            dpu = statistics.median(f["dpu"]) if f["dpu"] else None
            e = f["engine"]
            arm8 = dpu * BLUEFIELD_ARM_CORES if dpu else None
            where = (f"{e['engine']['name']}, {e['threads']} x {e['depth']}, busy "
                     f"{100 * e['engine']['busy_fraction']:.0f}%") if e else "-"
            rows.append([name, size, fmt_sig(host) if host else "-", fmt_sig(dpu) if dpu else "-",
                         _range(f["ratio"]) if f["ratio"] else "-", fmt_sig(arm8) if arm8 else "-",
                         fmt_sig(e["mops"]) if e else "-", where,
                         fmt_sig(e["engine"]["dpu_cpu_ns_per_job_at_speed"]) if e else "-",
                         fmt_sig(e["mops"] / arm8) if e and arm8 else "-",
                         fmt_sig(e["mops"] / (host * PAPER_HOST_CORES)) if e and host else "-"])
    sec.table(["program", "bytes", "host Mops, 1 thread", f"Arm core at {SPEED}, Mops", "Arm core / host per CPU s",
               f"Arm cores x {BLUEFIELD_ARM_CORES} (extrapolated)", "with the engine, Mops at peak",
               "engine point", "dpu ns per job at F", f"engine / Arm cores x {BLUEFIELD_ARM_CORES}",
               f"engine / host x {PAPER_HOST_CORES}"], rows,
              caption=f"Table 5's programs at {SPEED}: on the Arm cores and with their engine operator on the engine, "
                      "beside the host")
    unavailable = {u["op"]: u["why"] for u in data["engine_run"]["figures"]["unavailable"] if "depth" not in u}
    if unavailable:
        sec.table(["program", "why not on the engine"], sorted(unavailable.items()),
                  caption="Programs the engine backend could not run")


@experiment(
    "bench.bluefield.ops",
    title=OPS_TITLE,
    description=f"Every operator on the host place and on the dpu place time-dilated to {SPEED}, side by side; the "
                "engine operators on BlueField-2's engines (engine backend, model time) over threads x depth; each "
                "operator at peak on its best BlueField place beside the host, against Fig. 12's text; Url-Filter, "
                "IPS and File-Compress on the Arm cores and with their engine operator on the engine.",
    tools=[TOOL],
)
def bluefield_ops(ctx: Context) -> Section:
    sec = render_ops(ctx, collect_ops(ctx))
    render_programs(ctx, sec, collect_programs(ctx))
    return sec


# -- bench.bluefield.e2e: the end-to-end programs at bluefield2 ---------------

E2E_SIZES = {"flowtable": [64, 1024], "apprecog": [64, 256, 1024]}
# Flow table: where the paper's hw table helps most (fast rates); app
# recognition: a slow rate (Fig. 15's CPU) and an unloaded one (Fig. 16's delay).
E2E_INTERVALS = {"flowtable": [1, 5], "apprecog": [20, 100]}
E2E_ROUNDS = 3
# (label, server configuration); the dpu speed is always given, so that the
# eval's own --dpu does not change these modes.
FLOW_MODES = [
    ("sw on host", {"program": "flowtable", "table": "sw", "place": "host", "dpu_speed": "host"}),
    ("hw, misses on dpu at full speed", {"program": "flowtable", "table": "hw", "place": "dpu", "dpu_speed": "host"}),
    (f"hw, misses on dpu at {SPEED}", {"program": "flowtable", "table": "hw", "place": "dpu", "dpu_speed": SPEED}),
    (f"sw on dpu at {SPEED}", {"program": "flowtable", "table": "sw", "place": "dpu", "dpu_speed": SPEED}),
]
APP_MODES = [
    ("host", {"program": "apprecog", "place": "host", "dpu_speed": "host"}),
    ("dpu at full speed", {"program": "apprecog", "place": "dpu", "dpu_speed": "host"}),
    (f"dpu at {SPEED}", {"program": "apprecog", "place": "dpu", "dpu_speed": SPEED}),
    # The paper's card: the matching on the RXP (DOCA RegEx), the dpu thread
    # only posting jobs and polling; then also the compress action on the
    # deflate engine, where the card compresses.
    (f"dpu at {SPEED}, RXP", {"program": "apprecog", "place": "dpu", "dpu_speed": SPEED, "engine": "regex"}),
    (f"dpu at {SPEED}, RXP + deflate", {"program": "apprecog", "place": "dpu", "dpu_speed": SPEED,
                                       "engine": "regex,compress"}),
]
ENGINE_MODES = {label for label, cfg in APP_MODES if cfg.get("engine")}


def measure_e2e(tool: Any, out_dir: Any, programs: Sequence[tuple[str, list, list[int], list[float]]], *,
                rounds: int = E2E_ROUNDS, seconds: float = 1.0, network: str = "auto",
                progress: Any = None) -> list[dict[str, Any]]:
    """For each (program, modes, sizes, intervals): :func:`bench_e2e.run_configs`
    over the modes' server configurations, each record labelled with its mode."""
    from dpukit import bench_e2e

    records = []
    for program, modes, sizes, intervals in programs:
        if progress:
            progress(f"{program}: " + ", ".join(label for label, _ in modes))
        recs = bench_e2e.run_configs(tool, [cfg for _, cfg in modes], sizes, intervals, seconds, out_dir,
                                     rounds=rounds, mode=network)
        label_of = {_mode_key(cfg): label for label, cfg in modes}
        for r in recs:
            r["mode"] = label_of[_mode_key(r)]
        records += recs
    return records


def collect_e2e(ctx: Context) -> list[dict[str, Any]]:
    """The sweeps over FLOW_MODES and APP_MODES, kept in the eval's record
    (they run processes of their own, outside ``ctx.run_native``)."""
    from dpukit.paths import tool_path

    programs = [("flowtable", FLOW_MODES, E2E_SIZES["flowtable"], E2E_INTERVALS["flowtable"]),
                ("apprecog", APP_MODES, E2E_SIZES["apprecog"], E2E_INTERVALS["apprecog"])]
    return ctx.measured("e2e_records", lambda: measure_e2e(
        tool_path(TOOL), ctx.runs_dir / "bench.bluefield.e2e", programs, progress=ctx.progress))


def _mode_key(r: dict[str, Any]) -> tuple:
    speed = r["dpu_speed"]["name"] if isinstance(r["dpu_speed"], dict) else r["dpu_speed"]
    return (r["program"], r.get("table") if r["program"] == "flowtable" else None, r["place"], speed,
            r.get("engine") or None)


def e2e_summary(records: Sequence[dict[str, Any]]) -> dict[tuple, dict[str, list[float]]]:
    """(program, mode, size, interval) -> each figure over the rounds."""
    out: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        g = out.setdefault((r["program"], r["mode"], r["size"], r["interval_us"]), {})
        vals = {"sent_kpps": r["client_pps"] / 1e3, "served_kpps": r["throughput_pps"] / 1e3, "loss": r["loss"],
                **{f"util_{p}": r["utilization"][p] for p in ("host", "dpu", "hw")}}
        if "rtt_us" in r:
            vals.update(rtt_p50=r["rtt_us"]["p50"], rtt_p99=r["rtt_us"]["p99"])
        d = r.get("dilation") or {}
        if d.get("work_cpu_ns"):
            vals["dilated_per_work"] = d["dilated_cpu_ns"] / d["work_cpu_ns"]
        e = r.get("engine_figures") or {}
        if e.get("regex", {}).get("jobs"):
            # Jobs the executor computed after their modelled completion: the
            # emulator's CPU (shared with every server thread), not the engine, set their pace.
            vals["late_share"] = e["regex"]["late_jobs"] / e["regex"]["jobs"]
            vals["rxp_latency_us"] = e["regex"]["mean_latency_ns"] / 1e3
        for k, v in vals.items():
            g.setdefault(k, []).append(v)
    return out


def _med(g: dict[str, list[float]], key: str, scale: float = 1.0) -> str:
    v = g.get(key)
    return _range([x * scale for x in v]) if v else "-"


def render_e2e(ctx: Context, records: list[dict[str, Any]]) -> Section:
    sec = Section(E2E_TITLE)
    if not records:
        sec.paragraph("No records.")
        return sec
    s = e2e_summary(records)
    problems = sorted({p for r in records for p in r.get("problems", [])})
    r0 = records[0]
    sec.paragraph(
        "`dpukit-bench e2e-client` sends UDP datagrams for 1 s per point to `dpukit-bench e2e-server` "
        f"(network: {r0['note']}), {E2E_ROUNDS} rounds, the modes interleaved within each round; medians over the "
        "rounds, ranges in brackets. Each server is given its `--dpu-speed` (host or "
        f"{SPEED}); only its dpu place's threads are dilated, the host place and the NIC thread (hw) never. "
        f"CPUs: {r0['cpus'].get('note', '')}. So on this machine a dilated dpu thread's added busy time also "
        "takes the CPU from the host and NIC threads beside it, which separate Arm cores would not: the figures "
        "of the dpu modes at reduced speed are pessimistic for the host side. Server CPU is CPU time per place "
        "over the load window (1.0 = one CPU).")
    if problems:
        sec.paragraph("Problems found by the records' checks: " + "; ".join(problems[:10]))

    # Fig. 14: the flow table.
    rows = []
    for label, _ in FLOW_MODES:
        for size in E2E_SIZES["flowtable"]:
            for iv in E2E_INTERVALS["flowtable"]:
                g = s.get(("flowtable", label, size, float(iv)))
                if not g:
                    continue
                rows.append([label, size, iv, _med(g, "sent_kpps"), _med(g, "served_kpps"), _med(g, "loss"),
                             _med(g, "util_host", 100), _med(g, "util_dpu", 100), _med(g, "util_hw", 100),
                             _med(g, "dilated_per_work")])
    sec.table(["flow table", "bytes", "interval us", "sent kpps", "served kpps", "loss", "host CPU %", "dpu CPU %",
               "hw CPU %", "dpu dilated / work"], rows,
              caption=f"Fig. 14: the software table on the host, the emulated hardware table with its miss path on "
                      f"the dpu at full speed and at {SPEED}, and the software table on the dpu at {SPEED}")
    sec.paragraph(
        "Fig. 14's finding: the hardware table serves more and loses less than the software one at small "
        "packets and fast rates. Here the hardware table's hits stay at the NIC's speed at any dpu speed; only "
        "its misses (the first packets of each flow, until its entry is in) wait for the dpu. The software table "
        f"moved onto the dpu at {SPEED} shows what the Arm cores alone would serve. The emulated table is a CPU "
        "thread on the server's CPU here, so its rate is a thread's, not a NIC's, and at reduced dpu speed it "
        "loses CPU to the miss path's added busy time.")

    # Fig. 15: host CPU at a slow rate; Fig. 16: the process delay unloaded.
    iv_cpu, iv_rtt = E2E_INTERVALS["apprecog"]

    def app_points(iv: float, figure: str):
        """Per size and mode at interval ``iv``: the figures, and the median of
        ``figure`` against the host mode's (the ratio - 1), "-" for the host."""
        for size in E2E_SIZES["apprecog"]:
            host = s.get(("apprecog", "host", size, float(iv)))
            for label, _ in APP_MODES:
                g = s.get(("apprecog", label, size, float(iv)))
                if not g:
                    continue
                h = statistics.median(host[figure]) if host and label != "host" else 0
                yield size, label, g, (statistics.median(g[figure]) / h - 1 if h > 0 else None)

    rows = [[size, label, _med(g, "served_kpps"), _med(g, "loss"), _med(g, "util_host", 100),
             "-" if vs is None else f"{-100 * vs:.0f}%", _med(g, "util_dpu", 100), _med(g, "util_hw", 100),
             _med(g, "dilated_per_work"), _med(g, "late_share")]
            for size, label, g, vs in app_points(iv_cpu, "util_host")]
    sec.table(["bytes", "app recognition", "served kpps", "loss", "host CPU %", "host CPU saved", "dpu CPU %",
               "hw CPU % (engines' executors)", "dpu dilated / work", "RXP jobs late"], rows,
              caption=f"Fig. 15 at a {iv_cpu} us interval: the paper saves 10-20 % of the server CPU at slow rates "
                      "by moving the recognition to BlueField-2")
    rows = [[size, label, _med(g, "rtt_p50"), "-" if vs is None else f"{100 * vs:+.0f}%", _med(g, "rtt_p99"),
             _med(g, "loss"), _med(g, "rxp_latency_us"), _med(g, "late_share")]
            for size, label, g, vs in app_points(iv_rtt, "rtt_p50")]
    sec.table(["bytes", "app recognition", "RTT p50 us", "p50 against host", "RTT p99 us", "loss",
               "RXP job latency us (modelled)", "RXP jobs late"], rows,
              caption=f"Fig. 16 at a {iv_rtt} us interval: the paper's process delay is 10-15 % lower with the "
                      "recognition on BlueField-2 (its RegEx engine)")
    sec.paragraph(
        "Fig. 16's 10-15 % lower delay comes from BlueField-2's RegEx engine doing the matching. On the Arm cores "
        f"at {SPEED} the matching runs on a slower core and the delay can only grow; when the dpu cannot keep up, "
        "requests queue and are lost there. The RXP modes (`e2e-server --engine regex`, and `regex,compress` with "
        "the compress action on the deflate engine) put it on core's model of the card's engines: the dpu thread "
        "builds and posts one job per request and polls for completions, and pays only that (dilated); the jobs "
        "are Hyperscan and ISA-L on the engine's executor thread (hw CPU), completing at the model's time (5 us "
        "latency, a named guess, plus the job at the RXP's rate) or, when the executor had no CPU in time, when "
        "it has computed them ('late'). On this machine the executor shares the server's one CPU with every "
        "other server thread, so most jobs are late and the RXP's latency here is the emulator's, not the "
        "card's. The host CPU of each mode includes the kernel's "
        "receive work that interrupted its threads (this kernel has no IRQ time accounting): a dpu thread that "
        "is busy longer, as a dilated one is, is interrupted more often, so the host's share can fall further at "
        "reduced dpu speed than the work moved explains.")

    # The plots.
    flow_cats = [f"{size} B, {iv} us" for size in E2E_SIZES["flowtable"] for iv in E2E_INTERVALS["flowtable"]]

    def flow_vals(key: str, scale: float = 1.0) -> dict[str, list[float]]:
        return {label: [statistics.median(s[("flowtable", label, size, float(iv))][key]) * scale
                        if ("flowtable", label, size, float(iv)) in s else float("nan")
                        for size in E2E_SIZES["flowtable"] for iv in E2E_INTERVALS["flowtable"]]
                for label, _ in FLOW_MODES}

    path, rel = ctx.plot_path("flowtable")
    bars_plot(path, [BarPanel("served", "kpps", flow_vals("served_kpps"), annotate=False),
                     BarPanel("loss", "loss ratio", flow_vals("loss"), annotate=False)], flow_cats,
              title=f"Flow table (Fig. 14) with the dpu at full speed and at {SPEED} (medians)", ncols=1)
    sec.image(rel, "flow table", f"Flow table: served kpps and loss per mode, the dpu at full speed and at {SPEED}.")
    app_cats = [f"{size} B" for size in E2E_SIZES["apprecog"]]

    def app_vals(key: str, iv: float, scale: float = 1.0) -> dict[str, list[float]]:
        return {label: [statistics.median(s[("apprecog", label, size, float(iv))][key]) * scale
                        if ("apprecog", label, size, float(iv)) in s else float("nan")
                        for size in E2E_SIZES["apprecog"]] for label, _ in APP_MODES}

    path, rel = ctx.plot_path("apprecog")
    bars_plot(path, [BarPanel(f"host CPU at {iv_cpu} us (Fig. 15)", "% of one CPU", app_vals("util_host", iv_cpu, 100),
                              fmt=lambda v: f"{v:.0f}"),
                     BarPanel(f"dpu CPU at {iv_cpu} us", "% of one CPU", app_vals("util_dpu", iv_cpu, 100),
                              fmt=lambda v: f"{v:.0f}"),
                     BarPanel(f"RTT p50 at {iv_rtt} us (Fig. 16)", "us (log)", app_vals("rtt_p50", iv_rtt),
                              logy=True, fmt=lambda v: f"{v:.0f}")], app_cats,
              title=f"App recognition (Figs. 15-16) with the dpu at full speed, at {SPEED} and with {SPEED}'s engines "
          "(medians)", ncols=3)
    sec.image(rel, "app recognition", f"App recognition: the host's and the dpu's CPU at a {iv_cpu} us interval and "
              f"the round trip at {iv_rtt} us, per mode.")
    srv = ["dpukit-bench", "e2e-server", "--program", "apprecog", "--place", "dpu", "--dpu-speed", SPEED,
           "--host-cpus", r0["cpus"]["host"], "--dpu-cpus", r0["cpus"]["dpu"], "--hw-cpus", r0["cpus"]["hw"]]
    cli = ["dpukit-bench", "e2e-client", "--program", "apprecog", "--server", "SERVER", "--size", "64",
           "--interval", str(iv_cpu), "--duration", "1"]
    sec.add_command(srv)
    sec.add_command(srv + ["--engine", "regex,compress"])
    sec.add_command(cli)
    return sec


@experiment(
    "bench.bluefield.e2e",
    title=E2E_TITLE,
    description=f"Flow table and app recognition with the dpu place at full speed and at {SPEED} (app recognition "
                f"also with its matching on {SPEED}'s RXP and its compress on the deflate engine), beside the host, "
                "against Figs. 14-16 (full mode).",
    tools=[TOOL],
)
def bluefield_e2e(ctx: Context) -> Section:
    sec = Section(E2E_TITLE)
    if skipped_in_quick_mode(ctx, sec, "bench.bluefield.e2e"):
        return sec
    return render_e2e(ctx, collect_e2e(ctx))
