"""Experiments on FlatProxy (``dpukit-mesh``): the node proxy against Envoy
sidecars and no proxy at all, as in the paper's §V (Fig. 17 latency vs qps,
Fig. 18b throughput vs connections).

The chains, their configurations, the load generators and one measured run
are the harness's (``dpukit.mesh_harness``, which the mesh tests use too).
Every run is kept as one ``dpukit.result/1`` JSON under ``runs/`` with the
load generator's command line and, in ``parameters.chain``, the command line
and configuration of every process of the chain.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from typing import Any, Callable, Sequence

from dpukit.errors import DpukitError
from dpukit.experiments import Context, experiment, skipped_in_quick_mode
# Names other modules still import from here (mesh_tls, mesh_xds, measure,
# measure_soak, test_mesh_xds): the harness's, re-exported until they import
# dpukit.mesh_harness themselves.
from dpukit.mesh_harness import (DPU_CPU, HOST_CPU, JITTER_TOPOLOGIES, L4_TOPOLOGIES, LEFT_OUT,  # noqa: F401
                                 LOOPBACK, TOOL, TOPOLOGIES, TOPOLOGIES_ENV, Chain, Load, Topology, _base_id,
                                 bootstrap_yaml, envoy_path, fortio_load, fortio_path, go_tool_path, h2load_burst,
                                 iperf3_load, machine, measure, module_times, one_listener_yaml, parse_fortio,
                                 parse_h2load, parse_iperf3, parse_sockperf, parse_wrk, reset_peak_rss, rss_kib,
                                 run_chain, sockperf_load, start_iperf_server, start_l4_proxy, start_service,
                                 tcp_bootstrap_yaml, topologies, upstream_cx_active, wait_ready, wrk_load)
from dpukit.plots import BarPanel, Series, bars_plot, line_plot
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig


# -- summaries --------------------------------------------------------------------


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt_mr(values: Sequence[float], scale: float = 1.0) -> str:
    """'median' or 'median (min–max)' when there are several runs."""
    vals = [v * scale for v in values]
    med, lo, hi = median_range(vals)
    return fmt_sig(med) if len(vals) == 1 else f"{fmt_sig(med)} ({fmt_sig(lo)}–{fmt_sig(hi)})"


def error_note(records: Sequence[dict[str, Any]]) -> str:
    bad = [r for r in records if r["figures"]["errors"] or r["figures"]["non_2xx"]]
    if not bad:
        return f"All {len(records)} load runs: 0 errors and 0 non-2xx answers."
    parts = [f"{r['parameters']['topology']} ({r['tool']}): {r['figures']['errors']} errors, "
             f"{r['figures']['non_2xx']} non-2xx" for r in bad]
    return f"WARNING: {len(bad)} of {len(records)} load runs had errors or non-2xx answers: " + "; ".join(parts) + "."


def topology_note(tops: Sequence[Topology]) -> str:
    note = "Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in tops) + "."
    left = [f"`{name}` ({why})" for name, why in LEFT_OUT.items() if all(t.name != name for t in tops)]
    return note + (" Left out on this machine: " + "; ".join(left) + "." if left else "")


METHOD = (
    "The load generator and the service (`dpukit-mesh echo`, one thread) run on CPU 0 (host); every proxy "
    "is pinned to CPU 1 (dpu): Envoy 1.40 with `--concurrency 1` under `taskset -c 1`, the node proxy with "
    "`--dpu-cpus 1`. CPU time is utime+stime from /proc/PID/stat of every process of the chain before and "
    "after each load phase, and wait4's rusage of the load generator. host CPU counts the service and the "
    "Envoy sidecars (they live in the pods, on the host, in that architecture); dpu CPU counts the node "
    "proxy. Each chain gets one second of unmeasured wrk load first. Every run's JSON (with the command "
    "line and configuration of every process) is in `runs/`.")


def add_chain_commands(sec: Section, records: Sequence[dict[str, Any]]) -> None:
    """The chain's command lines (the load generators' are added by the eval)."""
    seen: set[tuple[str, ...]] = set()
    for r in records:
        for p in r["parameters"]["chain"]:
            key = tuple(str(a) for a in p["command_line"])
            # Ports, Envoy's --base-id and temporary paths differ per run; show each topology's chain once.
            shape = (p["name"], *(re.sub(r"\d{4,6}|/tmp/\S+", "*", a) for a in key))
            if shape not in seen:
                seen.add(shape)
                sec.add_command(list(key))


# -- mesh.quick ---------------------------------------------------------------------


@experiment(
    "mesh.quick",
    title="mesh.quick: direct, Envoy sidecars and the node proxy",
    description="Max qps (wrk, 16 connections) and latency at 1000 qps (fortio) through no proxy, an Envoy "
                "sidecar pair and the dpukit-mesh node proxy, with host and dpu CPU per 1,000 requests.",
    tools=[TOOL],
)
def quick(ctx: Context) -> Section:
    tops = topologies(quick=ctx.quick)
    seconds = 3
    wrk_conns, fortio_qps, fortio_conns = 16, 1000, 8
    rounds = ctx.repeats
    wrk_runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tops}
    fortio_runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tops}
    steps = rounds * len(tops)
    step = 0
    # Paired, interleaved rounds: topology after topology, then again, so that
    # a slow spell of this shared machine hits every topology alike.
    for rnd in range(1, rounds + 1):
        for top in tops:
            step += 1
            note = f" round {rnd}/{rounds}" if rounds > 1 else ""
            ctx.progress(f"{top.name}{note}", step, steps)
            suffix = f"-r{rnd}" if rounds > 1 else ""

            def body(chain: Chain, top: Topology = top, suffix: str = suffix) -> None:
                wrk_runs[top.name].append(measure(
                    ctx, top, chain, wrk_load(chain.url, wrk_conns, seconds), label=f"{top.name}-wrk{suffix}",
                    parameters={"load": "wrk", "connections": wrk_conns, "seconds": seconds}))
                fortio_runs[top.name].append(measure(
                    ctx, top, chain,
                    fortio_load(chain.url, fortio_qps, fortio_conns, seconds, chain.work_dir / "fortio.json"),
                    label=f"{top.name}-fortio{suffix}",
                    parameters={"load": "fortio", "qps": fortio_qps, "connections": fortio_conns,
                                "seconds": seconds}))

            run_chain(ctx, top, body)

    def col(runs: dict[str, list[dict[str, Any]]], name: str, key: str, scale: float = 1.0) -> str:
        return fmt_mr([r["figures"][key] for r in runs[name]], scale)

    sec = Section("mesh.quick: direct, Envoy sidecars and the node proxy")
    sec.paragraph(topology_note(tops) + " " + METHOD)
    sec.paragraph(
        f"Max qps: `wrk -t1 -c{wrk_conns} -d{seconds}s`. Latency: `fortio load -qps {fortio_qps} -c {fortio_conns} "
        f"-t {seconds}s`. "
        + ("Quick mode: one run per topology." if rounds == 1 else
           f"Full mode: {rounds} paired, interleaved rounds (topology after topology, then again); each cell "
           "is the median with the range of the rounds in parentheses."))
    sec.table(
        ["topology", "max qps (wrk)", "host CPU ms / 1k req", "dpu CPU ms / 1k req", "wrk CPU ms / 1k req",
         "errors", "non-2xx"],
        [[t.name, col(wrk_runs, t.name, "qps"), col(wrk_runs, t.name, "host_cpu_ms_per_1k"),
          col(wrk_runs, t.name, "dpu_cpu_ms_per_1k"), col(wrk_runs, t.name, "load_cpu_ms_per_1k"),
          fmt_int(sum(r["figures"]["errors"] for r in wrk_runs[t.name])),
          fmt_int(sum(r["figures"]["non_2xx"] for r in wrk_runs[t.name]))] for t in tops],
        caption=f"Maximum rate, {wrk_conns} connections, and CPU per 1,000 requests at that rate")
    sec.table(
        ["topology", "achieved qps", "p50 ms", "p99 ms", "p99.9 ms", "host CPU ms / 1k req",
         "dpu CPU ms / 1k req", "fortio CPU ms / 1k req", "errors", "non-2xx"],
        [[t.name, col(fortio_runs, t.name, "qps"), col(fortio_runs, t.name, "p50_ms"),
          col(fortio_runs, t.name, "p99_ms"), col(fortio_runs, t.name, "p99_9_ms"),
          col(fortio_runs, t.name, "host_cpu_ms_per_1k"), col(fortio_runs, t.name, "dpu_cpu_ms_per_1k"),
          col(fortio_runs, t.name, "load_cpu_ms_per_1k"),
          fmt_int(sum(r["figures"]["errors"] for r in fortio_runs[t.name])),
          fmt_int(sum(r["figures"]["non_2xx"] for r in fortio_runs[t.name]))] for t in tops],
        caption=f"Latency at {fortio_qps} qps, {fortio_conns} connections, and CPU per 1,000 requests at that rate")

    def med(runs: dict[str, list[dict[str, Any]]], name: str, key: str) -> float:
        return statistics.median(r["figures"][key] for r in runs[name])

    names = [t.name for t in tops]
    path, rel = ctx.plot_path("summary")
    bars_plot(path, [
        BarPanel("max qps (wrk, 16 conns)", "requests / s", {"": [med(wrk_runs, n, "qps") for n in names]},
                 fmt=lambda v: fmt_sig(v / 1000) + "k"),
        BarPanel(f"p99 at {fortio_qps} qps", "ms", {"": [med(fortio_runs, n, "p99_ms") for n in names]}),
        BarPanel("host CPU per 1k req (max qps)", "ms", {"": [med(wrk_runs, n, "host_cpu_ms_per_1k") for n in names]}),
        BarPanel("dpu CPU per 1k req (max qps)", "ms", {"": [med(wrk_runs, n, "dpu_cpu_ms_per_1k") for n in names]}),
    ], names, title="Service mesh topologies on the emulated DPU", ncols=2, highlight="node-proxy")
    sec.image(rel, "Max qps, p99 latency and CPU per 1,000 requests per topology",
              "Max qps (wrk), p99 at 1000 qps (fortio), host and dpu CPU ms per 1,000 requests at max qps"
              + (" (medians)." if rounds > 1 else "."))
    goals = goal_rows(tops, wrk_runs, fortio_runs)
    if goals:
        sec.table(["node proxy", "max qps × sidecars (goal ≥ 4)", "added p99 × sidecars' (goal ≤ 0.3)",
                   "host CPU / 1k req × sidecars' (goal ≤ 0.2)"], goals,
                  caption="The issue's goals as paired ratios: each round's node proxy against the same round's "
                          "sidecar pair (median, range)")
        sec.paragraph("Added p99 is the topology's p99 at 1000 qps minus the same round's direct p99. Host CPU is "
                      "at max qps: the service's CPU and, for the sidecars, the two Envoys'.")
    sec.paragraph(error_note([*sum(wrk_runs.values(), []), *sum(fortio_runs.values(), [])]))
    add_chain_commands(sec, ctx.runs)
    return sec


def goal_rows(tops: Sequence[Topology], wrk_runs: dict[str, list[dict[str, Any]]],
              fortio_runs: dict[str, list[dict[str, Any]]]) -> list[list[str]]:
    """Per node-proxy topology: round-by-round ratios to the sidecar pair (rounds are paired by index)."""
    names = {t.name for t in tops}
    if not {"direct", "envoy-sidecars"} <= names:
        return []
    side_w, side_f, direct_f = wrk_runs["envoy-sidecars"], fortio_runs["envoy-sidecars"], fortio_runs["direct"]
    rows = []
    for t in tops:
        if not t.name.startswith("node-proxy"):
            continue
        qps, p99, cpu = [], [], []
        for i, (w, f) in enumerate(zip(wrk_runs[t.name], fortio_runs[t.name])):
            qps.append(w["figures"]["qps"] / side_w[i]["figures"]["qps"])
            base = direct_f[i]["figures"]["p99_ms"]
            p99.append((f["figures"]["p99_ms"] - base) / (side_f[i]["figures"]["p99_ms"] - base))
            cpu.append(w["figures"]["host_cpu_ms_per_1k"] / side_w[i]["figures"]["host_cpu_ms_per_1k"])
        rows.append([t.name, fmt_mr(qps), fmt_mr(p99), fmt_mr(cpu)])
    return rows


# -- mesh.latency (Fig. 17) --------------------------------------------------------------


LATENCY_QPS = (250, 500, 1000, 2000, 4000)
THROUGHPUT_CONNS = (1, 4, 16, 64)
FULL_SECONDS = 5


def sweep(ctx: Context, tops: Sequence[Topology], points: Sequence[int], kind: str,
          make_load: Callable[[Chain, int], Load],
          params: Callable[[int], dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """For each round and topology: one chain, every point against it."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {t.name: {p: [] for p in points} for t in tops}
    steps = ctx.repeats * len(tops) * len(points)
    step = 0
    for rnd in range(1, ctx.repeats + 1):
        for top in tops:

            def body(chain: Chain, top: Topology = top, rnd: int = rnd) -> None:
                nonlocal step
                for point in points:
                    step += 1
                    ctx.progress(f"{top.name} {kind}={point} round {rnd}/{ctx.repeats}", step, steps)
                    runs[top.name][point].append(measure(
                        ctx, top, chain, make_load(chain, point), label=f"{top.name}-{kind}{point}-r{rnd}",
                        parameters=params(point)))

            run_chain(ctx, top, body)
    return runs


def medians(runs: dict[int, list[dict[str, Any]]], key: str) -> list[float]:
    return [statistics.median(r["figures"][key] for r in rs) for rs in runs.values()]


@experiment(
    "mesh.latency",
    title="mesh.latency: latency vs qps (Fig. 17)",
    description="p50/p90/p99/p99.9 at 250-4000 qps (fortio, 8 connections) per topology (full mode only).",
    tools=[TOOL],
)
def latency(ctx: Context) -> Section:
    sec = Section("mesh.latency: latency vs qps (Fig. 17)")
    if skipped_in_quick_mode(ctx, sec, "mesh.latency"):
        return sec
    tops, conns = topologies(), 8
    runs = sweep(ctx, tops, LATENCY_QPS, "qps",
                 lambda chain, q: fortio_load(chain.url, q, conns, FULL_SECONDS, chain.work_dir / "fortio.json"),
                 lambda q: {"load": "fortio", "qps": q, "connections": conns, "seconds": FULL_SECONDS})
    sec.paragraph(topology_note(tops) + " " + METHOD)
    sec.paragraph(f"`fortio load -qps Q -c {conns} -t {FULL_SECONDS}s` per point; {ctx.repeats} interleaved rounds "
                  "(one chain per topology and round, every rate against it); cells are medians (range).")
    rows = []
    for t in tops:
        for q in LATENCY_QPS:
            rs = runs[t.name][q]
            rows.append([t.name, fmt_int(q), fmt_mr([r["figures"]["qps"] for r in rs])]
                        + [fmt_mr([r["figures"][k] for r in rs]) for k in ("p50_ms", "p90_ms", "p99_ms", "p99_9_ms")]
                        + [fmt_mr([r["figures"]["host_cpu_ms_per_1k"] for r in rs]),
                           fmt_mr([r["figures"]["dpu_cpu_ms_per_1k"] for r in rs])])
    sec.table(["topology", "qps", "achieved", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "host CPU ms / 1k",
               "dpu CPU ms / 1k"], rows, caption="Latency vs offered rate")
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        path, rel = ctx.plot_path(f"latency-{label}")
        line_plot(path, [Series(t.name, list(LATENCY_QPS), medians(runs[t.name], key)) for t in tops],
                  title=f"{label} latency vs offered rate", xlabel="qps", ylabel=f"{label} latency (ms)",
                  logx=True, xticks=LATENCY_QPS, ymin_zero=True)
        sec.image(rel, f"{label} latency vs qps", f"{label} latency (median of rounds) vs offered qps, per topology.")
    sec.paragraph(error_note([r for t in runs.values() for rs in t.values() for r in rs]))
    add_chain_commands(sec, ctx.runs)
    return sec


@experiment(
    "mesh.throughput",
    title="mesh.throughput: max qps vs connections (Fig. 18b)",
    description="wrk max qps at 1, 4, 16 and 64 connections per topology (full mode only).",
    tools=[TOOL],
)
def throughput(ctx: Context) -> Section:
    sec = Section("mesh.throughput: max qps vs connections (Fig. 18b)")
    if skipped_in_quick_mode(ctx, sec, "mesh.throughput"):
        return sec
    tops = topologies()
    runs = sweep(ctx, tops, THROUGHPUT_CONNS, "conns",
                 lambda chain, c: wrk_load(chain.url, c, FULL_SECONDS),
                 lambda c: {"load": "wrk", "connections": c, "seconds": FULL_SECONDS})
    sec.paragraph(topology_note(tops) + " " + METHOD)
    sec.paragraph(f"`wrk -t1 -cC -d{FULL_SECONDS}s --latency` per point; {ctx.repeats} interleaved rounds; "
                  "cells are medians (range).")
    rows = []
    for t in tops:
        for c in THROUGHPUT_CONNS:
            rs = runs[t.name][c]
            rows.append([t.name, c, fmt_mr([r["figures"]["qps"] for r in rs]),
                         fmt_mr([r["figures"]["p99_ms"] for r in rs]),
                         fmt_mr([r["figures"]["host_cpu_ms_per_1k"] for r in rs]),
                         fmt_mr([r["figures"]["dpu_cpu_ms_per_1k"] for r in rs])])
    sec.table(["topology", "connections", "max qps", "p99 ms", "host CPU ms / 1k", "dpu CPU ms / 1k"], rows,
              caption="Maximum rate vs connections")
    path, rel = ctx.plot_path("throughput")
    line_plot(path, [Series(t.name, list(THROUGHPUT_CONNS), medians(runs[t.name], "qps")) for t in tops],
              title="Max qps vs connections", xlabel="connections", ylabel="requests / s",
              logx=True, xticks=THROUGHPUT_CONNS, ymin_zero=True, y_format=lambda v: f"{v / 1000:g}k")
    sec.image(rel, "max qps vs connections", "Max qps (median of rounds) vs connections, per topology.")
    sec.paragraph(error_note([r for t in runs.values() for rs in t.values() for r in rs]))
    add_chain_commands(sec, ctx.runs)
    return sec


# -- mesh.soak ----------------------------------------------------------------------

SOAK_QPS, SOAK_CONNS = 2000, 8
SOAK_SAMPLE_S = 5.0
# Before the soak, one HTTP/2 connection opens more streams at once than
# max_concurrent_streams (1,024) lets run together.
BURST_STREAMS = 1025
BURST_SETTLE_S = 1.0  # after the burst, before "after" is read



def burst_rss(ctx: Context, top: Topology, chain: Chain, pid: int) -> dict[str, Any]:
    """BURST_STREAMS streams at once on one HTTP/2 connection through the node
    proxy: the run's record, its figures with the proxy's RSS before, at the
    peak and BURST_SETTLE_S after (KiB)."""
    before = rss_kib(pid)
    peak_of_burst = reset_peak_rss(pid)

    def rss_after() -> dict[str, Any]:
        peak = rss_kib(pid, "VmHWM")
        time.sleep(BURST_SETTLE_S)
        return {"rss_before_kib": before, "rss_peak_kib": peak, "rss_after_kib": rss_kib(pid),
                "rss_peak_since": "burst" if peak_of_burst else "start",
                "upstream_cx_active_after": upstream_cx_active(f"http://{LOOPBACK}:{chain.admin_port}")}

    return measure(ctx, top, chain, h2load_burst(chain.url, BURST_STREAMS), label="node-proxy-h2-burst",
                   parameters={"load": "h2load", "streams": BURST_STREAMS, "connections": 1},
                   after_load=rss_after)


def sample_rss(pid: int, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            out.append((time.monotonic() - t0, rss_kib(pid)))
        except (OSError, DpukitError):
            return
        stop.wait(SOAK_SAMPLE_S)



@experiment(
    "mesh.soak",
    title="mesh.soak: the node proxy after a burst of HTTP/2 streams and under a fixed rate for 10 minutes",
    description="1025 streams at once on one HTTP/2 connection (h2load), the proxy's RSS before, at the peak and "
                "after; then fortio at 2000 qps for 600 s through the node proxy: errors, non-2xx, the proxy's RSS "
                "over time, and each processing module's time per call (full mode only).",
    tools=[TOOL],
)
def soak(ctx: Context) -> Section:
    sec = Section("mesh.soak: the node proxy after a burst of HTTP/2 streams and under a fixed rate for 10 minutes")
    if skipped_in_quick_mode(ctx, sec, "mesh.soak", " (it runs for 10 minutes)"):
        return sec
    seconds = int(os.environ.get("DPUKIT_MESH_SOAK_SECONDS", "600"))
    top = next(t for t in TOPOLOGIES if t.name == "node-proxy")
    samples: list[tuple[float, int]] = []
    result: dict[str, Any] = {}

    def body(chain: Chain) -> None:
        proxy = next(p for p in chain.group.procs if p.name == "node-proxy")
        ctx.progress(f"node-proxy: {BURST_STREAMS} streams on one HTTP/2 connection", 1, 2)
        result["burst"] = burst_rss(ctx, top, chain, proxy.pid)
        stop = threading.Event()
        sampler = threading.Thread(target=sample_rss, args=(proxy.pid, stop, samples), daemon=True)
        sampler.start()
        try:
            ctx.progress(f"node-proxy at {SOAK_QPS} qps for {seconds} s", 2, 2)
            result["run"] = measure(
                ctx, top, chain, fortio_load(chain.url, SOAK_QPS, SOAK_CONNS, seconds, chain.work_dir / "fortio.json"),
                label="node-proxy-soak",
                parameters={"load": "fortio", "qps": SOAK_QPS, "connections": SOAK_CONNS, "seconds": seconds})
        finally:
            stop.set()
            sampler.join()
        result["modules"] = module_times(f"http://{LOOPBACK}:{chain.admin_port}")

    run_chain(ctx, top, body)
    f = result["run"]["figures"]
    rss = [kib for _, kib in samples]
    half = len(rss) // 2
    b = result["burst"]["figures"]
    sec.paragraph(f"First `h2load -n {BURST_STREAMS} -c 1 -m {BURST_STREAMS}`: {BURST_STREAMS} streams opened at "
                  "once on one HTTP/2 connection (the listener's max_concurrent_streams lets 1,024 run together; "
                  "each goes to the HTTP/1.1 service on an upstream connection of its own, pooled when it ends). "
                  f"The proxy's VmRSS before, its VmHWM during the burst (reset before it: "
                  f"{'yes' if b['rss_peak_since'] == 'burst' else 'refused here, so the peak since the start'}) "
                  f"and its VmRSS {BURST_SETTLE_S:g} s after.")
    sec.table(["streams", "succeeded", "non-2xx", "RSS before MiB", "RSS peak MiB", "RSS after MiB",
               "upstream connections after"],
              [[fmt_int(b["requests"]), fmt_int(b["requests"] - b["errors"]), fmt_int(b["non_2xx"]),
                f"{b['rss_before_kib'] / 1024:.1f}", f"{b['rss_peak_kib'] / 1024:.1f}",
                f"{b['rss_after_kib'] / 1024:.1f}", fmt_int(b["upstream_cx_active_after"])]],
              caption="The burst of HTTP/2 streams (what stays after it: the pooled upstream connections)")
    sec.paragraph(f"Then `fortio load -qps {SOAK_QPS} -c {SOAK_CONNS} -t {seconds}s` through `node-proxy` "
                  f"({top.description}); the proxy's VmRSS every {SOAK_SAMPLE_S:g} s. " + METHOD)
    sec.table(["requests", "achieved qps", "errors", "non-2xx", "p50 ms", "p99 ms", "p99.9 ms",
               "RSS first / last / max MiB", "RSS max, first half / second half MiB"],
              [[fmt_int(f["requests"]), fmt_sig(f["qps"]), fmt_int(f["errors"]), fmt_int(f["non_2xx"]),
                fmt_sig(f["p50_ms"]), fmt_sig(f["p99_ms"]), fmt_sig(f["p99_9_ms"]),
                f"{rss[0] / 1024:.1f} / {rss[-1] / 1024:.1f} / {max(rss) / 1024:.1f}",
                f"{max(rss[:half] or rss) / 1024:.1f} / {max(rss[half:]) / 1024:.1f}"]],
              caption="The soak run")
    sec.table(["module", "ns per call", "calls"],
              [[m, fmt_sig(ns), fmt_int(c)] for m, (ns, c) in result["modules"].items()],
              caption="Time in each processing module, measured by the module itself (paper Table III)")
    path, rel = ctx.plot_path("soak-rss")
    line_plot(path, [Series("node proxy RSS", [t for t, _ in samples], [k / 1024 for k in rss], "-")],
              title=f"node proxy RSS at {SOAK_QPS} qps", xlabel="seconds", ylabel="MiB", ymin_zero=True)
    sec.image(rel, "node proxy RSS over the soak", "The node proxy's resident memory during the soak.")
    sec.paragraph(error_note([result["burst"], result["run"]]))
    add_chain_commands(sec, ctx.runs)
    return sec


# -- mesh.l4 ------------------------------------------------------------------------

L4_STREAMS = (1, 4, 16)




@experiment(
    "mesh.l4",
    title="mesh.l4: TCP throughput through tcp_proxy vs connections",
    description="iperf3 Gbps with 1, 4 and 16 streams directly, through an Envoy tcp_proxy pair and through "
                "the dpukit-mesh tcp_proxy, with CPU per GB (full mode only).",
    tools=[TOOL],
)
def l4(ctx: Context) -> Section:
    sec = Section("mesh.l4: TCP throughput through tcp_proxy vs connections")
    if skipped_in_quick_mode(ctx, sec, "mesh.l4"):
        return sec
    tops = list(L4_TOPOLOGIES)
    runs = sweep(ctx, tops, L4_STREAMS, "streams", lambda chain, n: iperf3_load(chain.entry_port, n, FULL_SECONDS),
                 lambda n: {"load": "iperf3", "streams": n, "seconds": FULL_SECONDS})

    def cpu_per_gb(r: dict[str, Any], place: str) -> float:
        return r["cpu_ns"][place] / 1e9 / (r["figures"]["bytes"] / 1e9)

    sec.paragraph("Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in tops) + ". "
                  f"`iperf3 -c -t {FULL_SECONDS} -P N -J` on CPU 0 against `iperf3 -s` on CPU 0; every proxy on "
                  f"CPU 1. {ctx.repeats} interleaved rounds; cells are medians (range). CPU is per GB received.")
    rows = [[t.name, n, fmt_mr([r["figures"]["gbps"] for r in runs[t.name][n]]),
             fmt_mr([cpu_per_gb(r, "host") for r in runs[t.name][n]]),
             fmt_mr([cpu_per_gb(r, "dpu") for r in runs[t.name][n]])]
            for t in tops for n in L4_STREAMS]
    sec.table(["topology", "streams", "Gbps", "host CPU s / GB", "dpu CPU s / GB"], rows,
              caption="TCP throughput through tcp_proxy")
    path, rel = ctx.plot_path("l4")
    line_plot(path, [Series(t.name, list(L4_STREAMS), medians(runs[t.name], "gbps")) for t in tops],
              title="TCP throughput vs streams", xlabel="iperf3 streams", ylabel="Gbps", logx=True,
              xticks=L4_STREAMS, ymin_zero=True)
    sec.image(rel, "TCP throughput vs streams", "Gbps (median of rounds) vs parallel streams, per topology.")
    add_chain_commands(sec, ctx.runs)
    return sec


# -- mesh.jitter (Fig. 19a) ------------------------------------------------------------

JITTER_SIZES = (64, 1024)
JITTER_MPS = 5000




@experiment(
    "mesh.jitter",
    title="mesh.jitter: latency jitter through tcp_proxy (Fig. 19a)",
    description="sockperf ping-pong latency, its standard deviation and tail, directly, through an Envoy "
                "tcp_proxy pair and through the dpukit-mesh tcp_proxy (full mode only).",
    tools=[TOOL],
)
def jitter(ctx: Context) -> Section:
    sec = Section("mesh.jitter: latency jitter through tcp_proxy (Fig. 19a)")
    if skipped_in_quick_mode(ctx, sec, "mesh.jitter"):
        return sec
    tops = list(JITTER_TOPOLOGIES)
    runs = sweep(ctx, tops, JITTER_SIZES, "bytes",
                 lambda chain, n: sockperf_load(chain.entry_port, n, FULL_SECONDS, JITTER_MPS),
                 lambda n: {"load": "sockperf", "message_bytes": n, "mps": JITTER_MPS, "seconds": FULL_SECONDS})
    sec.paragraph("Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in tops) + ". "
                  f"`sockperf ping-pong --tcp -t {FULL_SECONDS} -m N --mps {JITTER_MPS}` on CPU 0 against "
                  "`sockperf server --tcp` on CPU 0; every proxy on CPU 1. sockperf's latency is half the round "
                  f"trip, in µs; jitter is its standard deviation. {ctx.repeats} interleaved rounds; cells are "
                  "medians (range). Lost: messages sent but not answered in the measured window.")

    def col(name: str, n: int, key: str) -> str:
        return fmt_mr([r["figures"][key] for r in runs[name][n]])

    rows = [[t.name, n, col(t.name, n, "avg_us"), col(t.name, n, "std_dev_us"), col(t.name, n, "p50_us"),
             col(t.name, n, "p99_us"), col(t.name, n, "p99_9_us"), col(t.name, n, "max_us"),
             fmt_int(sum(r["figures"]["lost"] for r in runs[t.name][n]))]
            for t in tops for n in JITTER_SIZES]
    sec.table(["topology", "message bytes", "avg µs", "jitter (std-dev) µs", "p50 µs", "p99 µs", "p99.9 µs",
               "max µs", "lost"], rows, caption="Latency and its jitter through tcp_proxy")
    path, rel = ctx.plot_path("jitter")
    names = [t.name for t in tops]
    bars_plot(path, [
        BarPanel(f"jitter (std-dev), {n} B", "µs", {"": [statistics.median(r["figures"]["std_dev_us"]
                                                                        for r in runs[name][n]) for name in names]})
        for n in JITTER_SIZES
    ] + [
        BarPanel(f"p99.9, {n} B", "µs", {"": [statistics.median(r["figures"]["p99_9_us"] for r in runs[name][n])
                                              for name in names]})
        for n in JITTER_SIZES
    ], names, title="Latency jitter through tcp_proxy", ncols=2, highlight="node-proxy")
    sec.image(rel, "Latency jitter through tcp_proxy", "Standard deviation and p99.9 of sockperf latency "
              "(medians of rounds) per topology and message size.")
    add_chain_commands(sec, ctx.runs)
    return sec
