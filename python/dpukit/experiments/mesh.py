"""Experiments on FlatProxy (``dpukit-mesh``): the node proxy against Envoy
sidecars and no proxy at all, as in the paper's §V (Fig. 17 latency vs qps,
Fig. 18b throughput vs connections, Fig. 19a jitter), and the node proxy's
memory over a soak.

The chains, their configurations, the load generators and one measured run
are the harness's (``dpukit.mesh_harness``, which the mesh tests use too).
Each experiment's sweep is data (a :class:`~dpukit.mesh_harness.Sweep`:
which topologies, which load phases at which points); its ``collect`` step
runs it, keeping every run as one ``dpukit.result/1`` JSON under ``runs/``
(with the load generator's command line and, in ``parameters.chain``, the
command line and configuration of every process of the chain), and a pure
``render`` step turns the runs into the section, its tables and plots.
``dpukit eval --render`` gives the render the runs read back from ``runs/``.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

from dpukit.errors import DpukitError
from dpukit.experiment_support import (add_chain_commands, error_note, flatproxy_findings, fmt_mr, goal_rows,
                                       rss_kib)
from dpukit.experiments import Context, experiment, skipped_in_quick_mode
from dpukit.mesh_harness import (JITTER_TOPOLOGIES, L4_TOPOLOGIES, LOOPBACK, TOOL, TOPOLOGIES, Chain,
                                 Phase, Sweep, Swept, Topology, access_log_lines, collect_sweep, collected,
                                 fortio_load, h2load_burst, node_proxy,
                                 http_topologies, just, measure, module_times, reset_peak_rss, run_chain,
                                 upstream_cx_active)
from dpukit.plots import BarPanel, Series, bars_plot, line_plot
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig


# -- summaries --------------------------------------------------------------------


def topology_note(swept: Swept) -> str:
    note = "Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in swept.topologies) + "."
    left = [f"`{name}` ({why})" for name, why in swept.left_out.items()]
    return note + (" Left out on this machine: " + "; ".join(left) + "." if left else "")


METHOD = (
    "The load generator and the service (`dpukit-mesh echo`, one thread) run on CPU 0 (host); every proxy "
    "is pinned to CPU 1 (dpu): Envoy 1.40 with `--concurrency 1` under `taskset -c 1`, the node proxy with "
    "`--dpu-cpus 1`. CPU time is utime+stime from /proc/PID/stat of every process of the chain before and "
    "after each load phase, and wait4's rusage of the load generator. host CPU counts the service and the "
    "Envoy sidecars (they live in the pods, on the host, in that architecture); dpu CPU counts the node "
    "proxy. Each chain gets one second of unmeasured wrk load first. Every run's JSON (with the command "
    "line and configuration of every process) is in `runs/`.")


# -- mesh.quick ---------------------------------------------------------------------

# Max qps, then latency at a fixed rate, against each chain.
QUICK = Sweep(http_topologies, (Phase("wrk", {"connections": 16, "seconds": 3}),
                                Phase("fortio", {"qps": 1000, "connections": 8, "seconds": 3})))
WRK, FORTIO = 0, 1  # QUICK's phases


@experiment(
    "mesh.quick",
    title="mesh.quick: direct, Envoy sidecars and the node proxy",
    description="Max qps (wrk, 16 connections) and latency at 1000 qps (fortio) through no proxy, an Envoy "
                "sidecar pair and the dpukit-mesh node proxy, with host and dpu CPU per 1,000 requests.",
    tools=[TOOL],
)
def quick(ctx: Context) -> Section:
    return render_quick(ctx, collect_sweep(ctx, QUICK))


def render_quick(ctx: Context, swept: Swept) -> Section:
    wrk, fortio = swept.phases[WRK].fixed, swept.phases[FORTIO].fixed
    wrk_runs = {n: swept.runs(n, WRK) for n in swept.names}
    fortio_runs = {n: swept.runs(n, FORTIO) for n in swept.names}
    rounds = swept.rounds

    def col(runs: dict[str, list[dict[str, Any]]], name: str, key: str, scale: float = 1.0) -> str:
        return fmt_mr([r["figures"][key] for r in runs[name]], scale)

    sec = Section("mesh.quick: direct, Envoy sidecars and the node proxy")
    sec.paragraph(topology_note(swept) + " " + METHOD)
    sec.paragraph(
        f"Max qps: `wrk -t1 -c{wrk['connections']} -d{wrk['seconds']}s`. Latency: `fortio load -qps {fortio['qps']} "
        f"-c {fortio['connections']} -t {fortio['seconds']}s`. "
        + ("Quick mode: one run per topology." if rounds == 1 else
           f"Full mode: {rounds} paired, interleaved rounds (topology after topology, then again); each cell "
           "is the median with the range of the rounds in parentheses."))
    sec.table(
        ["topology", "max qps (wrk)", "host CPU ms / 1k req", "dpu CPU ms / 1k req", "wrk CPU ms / 1k req",
         "errors", "non-2xx"],
        [[n, col(wrk_runs, n, "qps"), col(wrk_runs, n, "host_cpu_ms_per_1k"),
          col(wrk_runs, n, "dpu_cpu_ms_per_1k"), col(wrk_runs, n, "load_cpu_ms_per_1k"),
          fmt_int(sum(r["figures"]["errors"] for r in wrk_runs[n])),
          fmt_int(sum(r["figures"]["non_2xx"] for r in wrk_runs[n]))] for n in swept.names],
        caption=f"Maximum rate, {wrk['connections']} connections, and CPU per 1,000 requests at that rate")
    sec.table(
        ["topology", "achieved qps", "p50 ms", "p99 ms", "p99.9 ms", "host CPU ms / 1k req",
         "dpu CPU ms / 1k req", "fortio CPU ms / 1k req", "errors", "non-2xx"],
        [[n, col(fortio_runs, n, "qps"), col(fortio_runs, n, "p50_ms"),
          col(fortio_runs, n, "p99_ms"), col(fortio_runs, n, "p99_9_ms"),
          col(fortio_runs, n, "host_cpu_ms_per_1k"), col(fortio_runs, n, "dpu_cpu_ms_per_1k"),
          col(fortio_runs, n, "load_cpu_ms_per_1k"),
          fmt_int(sum(r["figures"]["errors"] for r in fortio_runs[n])),
          fmt_int(sum(r["figures"]["non_2xx"] for r in fortio_runs[n]))] for n in swept.names],
        caption=f"Latency at {fortio['qps']} qps, {fortio['connections']} connections, and CPU per 1,000 requests "
                "at that rate")

    def med(runs: dict[str, list[dict[str, Any]]], name: str, key: str) -> float:
        return statistics.median(r["figures"][key] for r in runs[name])

    names = swept.names
    path, rel = ctx.plot_path("summary")
    bars_plot(path, [
        BarPanel(f"max qps (wrk, {wrk['connections']} conns)", "requests / s",
                 {"": [med(wrk_runs, n, "qps") for n in names]}, fmt=lambda v: fmt_sig(v / 1000) + "k"),
        BarPanel(f"p99 at {fortio['qps']} qps", "ms", {"": [med(fortio_runs, n, "p99_ms") for n in names]}),
        BarPanel("host CPU per 1k req (max qps)", "ms", {"": [med(wrk_runs, n, "host_cpu_ms_per_1k") for n in names]}),
        BarPanel("dpu CPU per 1k req (max qps)", "ms", {"": [med(wrk_runs, n, "dpu_cpu_ms_per_1k") for n in names]}),
    ], names, title="Service mesh topologies on the emulated DPU", ncols=2, highlight="node-proxy")
    sec.image(rel, "Max qps, p99 latency and CPU per 1,000 requests per topology",
              f"Max qps (wrk), p99 at {fortio['qps']} qps (fortio), host and dpu CPU ms per 1,000 requests at max qps"
              + (" (medians)." if rounds > 1 else "."))
    flatproxy_findings(ctx, "node-proxy", ctx.dpu, wrk_runs, fortio_runs, fortio["qps"])
    goals = goal_rows(swept.topologies, wrk_runs, fortio_runs)
    if goals:
        sec.table(["node proxy", "max qps × sidecars (goal ≥ 4)", "added p99 × sidecars' (goal ≤ 0.3)",
                   "host CPU / 1k req × sidecars' (goal ≤ 0.2)"], goals,
                  caption="The issue's goals as paired ratios: each round's node proxy against the same round's "
                          "sidecar pair (median, range)")
        sec.paragraph(f"Added p99 is the topology's p99 at {fortio['qps']} qps minus the same round's direct p99. "
                      "Host CPU is at max qps: the service's CPU and, for the sidecars, the two Envoys'.")
    sec.paragraph(error_note(swept.records))
    add_chain_commands(sec, swept.records)
    return sec


# -- mesh.latency (Fig. 17) and mesh.throughput (Fig. 18b) --------------------------------


LATENCY_QPS = (250, 500, 1000, 2000, 4000)
THROUGHPUT_CONNS = (1, 4, 16, 64)
FULL_SECONDS = 5

LATENCY = Sweep(http_topologies, (Phase("fortio", {"connections": 8, "seconds": FULL_SECONDS}, "qps", LATENCY_QPS),))
THROUGHPUT = Sweep(http_topologies, (Phase("wrk", {"seconds": FULL_SECONDS}, "connections", THROUGHPUT_CONNS),))


def medians(runs: dict[Any, list[dict[str, Any]]], key: str) -> list[float]:
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
    return render_latency(ctx, sec, collect_sweep(ctx, LATENCY))


def render_latency(ctx: Context, sec: Section, swept: Swept) -> Section:
    fixed, qps = swept.phases[0].fixed, swept.points()
    sec.paragraph(topology_note(swept) + " " + METHOD)
    sec.paragraph(f"`fortio load -qps Q -c {fixed['connections']} -t {fixed['seconds']}s` per point; {swept.rounds} "
                  "interleaved rounds (one chain per topology and round, every rate against it); cells are medians "
                  "(range).")
    rows = []
    for n in swept.names:
        for q in qps:
            rs = swept.runs(n, 0, q)
            rows.append([n, fmt_int(q), fmt_mr([r["figures"]["qps"] for r in rs])]
                        + [fmt_mr([r["figures"][k] for r in rs]) for k in ("p50_ms", "p90_ms", "p99_ms", "p99_9_ms")]
                        + [fmt_mr([r["figures"]["host_cpu_ms_per_1k"] for r in rs]),
                           fmt_mr([r["figures"]["dpu_cpu_ms_per_1k"] for r in rs])])
    sec.table(["topology", "qps", "achieved", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "host CPU ms / 1k",
               "dpu CPU ms / 1k"], rows, caption="Latency vs offered rate")
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        path, rel = ctx.plot_path(f"latency-{label}")
        line_plot(path, [Series(n, qps, medians(swept.by_point(n), key)) for n in swept.names],
                  title=f"{label} latency vs offered rate", xlabel="qps", ylabel=f"{label} latency (ms)",
                  logx=True, xticks=qps, ymin_zero=True)
        sec.image(rel, f"{label} latency vs qps", f"{label} latency (median of rounds) vs offered qps, per topology.")
    sec.paragraph(error_note(swept.records))
    add_chain_commands(sec, swept.records)
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
    return render_throughput(ctx, sec, collect_sweep(ctx, THROUGHPUT))


def render_throughput(ctx: Context, sec: Section, swept: Swept) -> Section:
    conns = swept.points()
    sec.paragraph(topology_note(swept) + " " + METHOD)
    sec.paragraph(f"`wrk -t1 -cC -d{swept.phases[0].fixed['seconds']}s --latency` per point; {swept.rounds} "
                  "interleaved rounds; cells are medians (range).")
    rows = []
    for n in swept.names:
        for c in conns:
            rs = swept.runs(n, 0, c)
            rows.append([n, c, fmt_mr([r["figures"]["qps"] for r in rs]),
                         fmt_mr([r["figures"]["p99_ms"] for r in rs]),
                         fmt_mr([r["figures"]["host_cpu_ms_per_1k"] for r in rs]),
                         fmt_mr([r["figures"]["dpu_cpu_ms_per_1k"] for r in rs])])
    sec.table(["topology", "connections", "max qps", "p99 ms", "host CPU ms / 1k", "dpu CPU ms / 1k"], rows,
              caption="Maximum rate vs connections")
    path, rel = ctx.plot_path("throughput")
    line_plot(path, [Series(n, conns, medians(swept.by_point(n), "qps")) for n in swept.names],
              title="Max qps vs connections", xlabel="connections", ylabel="requests / s",
              logx=True, xticks=conns, ymin_zero=True, y_format=lambda v: f"{v / 1000:g}k")
    sec.image(rel, "max qps vs connections", "Max qps (median of rounds) vs connections, per topology.")
    sec.paragraph(error_note(swept.records))
    add_chain_commands(sec, swept.records)
    return sec


# -- mesh.soak ----------------------------------------------------------------------

SOAK_QPS, SOAK_CONNS = 2000, 8
SOAK_SAMPLE_S = 5.0
SOAK_SECONDS_ENV = "DPUKIT_MESH_SOAK_SECONDS"  # the soak's length (default 600)
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


def collect_soak(ctx: Context) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The burst, then the soak with the proxy's RSS sampled, then its
    modules' times: (the samples, the module times and the settings; the
    burst's and the soak's records)."""

    def run() -> dict[str, Any]:
        seconds = int(os.environ.get(SOAK_SECONDS_ENV, "600"))
        top = next(t for t in TOPOLOGIES if t.name == "node-proxy")
        samples: list[tuple[float, int]] = []
        modules: dict[str, tuple[float, int]] = {}

        def body(chain: Chain) -> None:
            proxy = next(p for p in chain.group.procs if p.name == "node-proxy")
            ctx.progress(f"node-proxy: {BURST_STREAMS} streams on one HTTP/2 connection", 1, 2)
            burst_rss(ctx, top, chain, proxy.pid)
            stop = threading.Event()
            sampler = threading.Thread(target=sample_rss, args=(proxy.pid, stop, samples), daemon=True)
            sampler.start()
            try:
                ctx.progress(f"node-proxy at {SOAK_QPS} qps for {seconds} s", 2, 2)
                measure(ctx, top, chain,
                        fortio_load(chain.url, SOAK_QPS, SOAK_CONNS, seconds, chain.work_dir / "fortio.json"),
                        label="node-proxy-soak",
                        parameters={"load": "fortio", "qps": SOAK_QPS, "connections": SOAK_CONNS, "seconds": seconds})
            finally:
                stop.set()
                sampler.join()
            modules.update(module_times(f"http://{LOOPBACK}:{chain.admin_port}"))

        run_chain(ctx, top, body)
        return {"topology": [top.name, top.description], "seconds": seconds, "qps": SOAK_QPS,
                "connections": SOAK_CONNS, "sample_s": SOAK_SAMPLE_S, "burst_streams": BURST_STREAMS,
                "settle_s": BURST_SETTLE_S, "samples": samples, "modules": modules}

    return collected(ctx, run)


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
    data, (burst, run) = collect_soak(ctx)
    return render_soak(ctx, sec, data, burst, run)


def render_soak(ctx: Context, sec: Section, data: dict[str, Any], burst: dict[str, Any],
                run: dict[str, Any]) -> Section:
    f = run["figures"]
    samples = data["samples"]
    qps, streams = data["qps"], data["burst_streams"]
    rss = [kib for _, kib in samples]
    half = len(rss) // 2
    b = burst["figures"]
    sec.paragraph(f"First `h2load -n {streams} -c 1 -m {streams}`: {streams} streams opened at "
                  "once on one HTTP/2 connection (the listener's max_concurrent_streams lets 1,024 run together; "
                  "each goes to the HTTP/1.1 service on an upstream connection of its own, pooled when it ends). "
                  f"The proxy's VmRSS before, its VmHWM during the burst (reset before it: "
                  f"{'yes' if b['rss_peak_since'] == 'burst' else 'refused here, so the peak since the start'}) "
                  f"and its VmRSS {data['settle_s']:g} s after.")
    sec.table(["streams", "succeeded", "non-2xx", "RSS before MiB", "RSS peak MiB", "RSS after MiB",
               "upstream connections after"],
              [[fmt_int(b["requests"]), fmt_int(b["requests"] - b["errors"]), fmt_int(b["non_2xx"]),
                f"{b['rss_before_kib'] / 1024:.1f}", f"{b['rss_peak_kib'] / 1024:.1f}",
                f"{b['rss_after_kib'] / 1024:.1f}", fmt_int(b["upstream_cx_active_after"])]],
              caption="The burst of HTTP/2 streams (what stays after it: the pooled upstream connections)")
    name, description = data["topology"]
    sec.paragraph(f"Then `fortio load -qps {qps} -c {data['connections']} -t {data['seconds']}s` through `{name}` "
                  f"({description}); the proxy's VmRSS every {data['sample_s']:g} s. " + METHOD)
    sec.table(["requests", "achieved qps", "errors", "non-2xx", "p50 ms", "p99 ms", "p99.9 ms",
               "RSS first / last / max MiB", "RSS max, first half / second half MiB"],
              [[fmt_int(f["requests"]), fmt_sig(f["qps"]), fmt_int(f["errors"]), fmt_int(f["non_2xx"]),
                fmt_sig(f["p50_ms"]), fmt_sig(f["p99_ms"]), fmt_sig(f["p99_9_ms"]),
                f"{rss[0] / 1024:.1f} / {rss[-1] / 1024:.1f} / {max(rss) / 1024:.1f}",
                f"{max(rss[:half] or rss) / 1024:.1f} / {max(rss[half:]) / 1024:.1f}"]],
              caption="The soak run")
    sec.table(["module", "ns per call", "calls"],
              [[m, fmt_sig(ns), fmt_int(c)] for m, (ns, c) in data["modules"].items()],
              caption="Time in each processing module, measured by the module itself (paper Table III)")
    path, rel = ctx.plot_path("soak-rss")
    line_plot(path, [Series("node proxy RSS", [t for t, _ in samples], [k / 1024 for k in rss], "-")],
              title=f"node proxy RSS at {qps} qps", xlabel="seconds", ylabel="MiB", ymin_zero=True)
    sec.image(rel, "node proxy RSS over the soak", "The node proxy's resident memory during the soak.")
    sec.paragraph(error_note([burst, run]))
    add_chain_commands(sec, [burst, run])
    return sec


# -- mesh.l4 ------------------------------------------------------------------------

L4_STREAMS = (1, 4, 16)
L4 = Sweep(just(L4_TOPOLOGIES), (Phase("iperf3", {"seconds": FULL_SECONDS}, "streams", L4_STREAMS),))


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
    return render_l4(ctx, sec, collect_sweep(ctx, L4))


def render_l4(ctx: Context, sec: Section, swept: Swept) -> Section:
    streams, seconds = swept.points(), swept.phases[0].fixed["seconds"]

    def cpu_per_gb(r: dict[str, Any], place: str) -> float:
        return r["cpu_ns"][place] / 1e9 / (r["figures"]["bytes"] / 1e9)

    sec.paragraph("Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in swept.topologies) + ". "
                  f"`iperf3 -c -t {seconds} -P N -J` on CPU 0 against `iperf3 -s` on CPU 0; every proxy on "
                  f"CPU 1. {swept.rounds} interleaved rounds; cells are medians (range). CPU is per GB received.")
    rows = [[t, n, fmt_mr([r["figures"]["gbps"] for r in swept.runs(t, 0, n)]),
             fmt_mr([cpu_per_gb(r, "host") for r in swept.runs(t, 0, n)]),
             fmt_mr([cpu_per_gb(r, "dpu") for r in swept.runs(t, 0, n)])]
            for t in swept.names for n in streams]
    sec.table(["topology", "streams", "Gbps", "host CPU s / GB", "dpu CPU s / GB"], rows,
              caption="TCP throughput through tcp_proxy")
    path, rel = ctx.plot_path("l4")
    line_plot(path, [Series(t, streams, medians(swept.by_point(t), "gbps")) for t in swept.names],
              title="TCP throughput vs streams", xlabel="iperf3 streams", ylabel="Gbps", logx=True,
              xticks=streams, ymin_zero=True)
    sec.image(rel, "TCP throughput vs streams", "Gbps (median of rounds) vs parallel streams, per topology.")
    add_chain_commands(sec, swept.records)
    return sec


# -- mesh.jitter (Fig. 19a) ------------------------------------------------------------

JITTER_SIZES = (64, 1024)
JITTER_MPS = 5000
JITTER = Sweep(just(JITTER_TOPOLOGIES), (Phase("sockperf", {"mps": JITTER_MPS, "seconds": FULL_SECONDS},
                                               "message_bytes", JITTER_SIZES),))


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
    return render_jitter(ctx, sec, collect_sweep(ctx, JITTER))


def render_jitter(ctx: Context, sec: Section, swept: Swept) -> Section:
    sizes, fixed = swept.points(), swept.phases[0].fixed
    sec.paragraph("Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in swept.topologies) + ". "
                  f"`sockperf ping-pong --tcp -t {fixed['seconds']} -m N --mps {fixed['mps']}` on CPU 0 against "
                  "`sockperf server --tcp` on CPU 0; every proxy on CPU 1. sockperf's latency is half the round "
                  f"trip, in µs; jitter is its standard deviation. {swept.rounds} interleaved rounds; cells are "
                  "medians (range). Lost: messages sent but not answered in the measured window.")

    def col(name: str, n: int, key: str) -> str:
        return fmt_mr([r["figures"][key] for r in swept.runs(name, 0, n)])

    rows = [[t, n, col(t, n, "avg_us"), col(t, n, "std_dev_us"), col(t, n, "p50_us"),
             col(t, n, "p99_us"), col(t, n, "p99_9_us"), col(t, n, "max_us"),
             fmt_int(sum(r["figures"]["lost"] for r in swept.runs(t, 0, n)))]
            for t in swept.names for n in sizes]
    sec.table(["topology", "message bytes", "avg µs", "jitter (std-dev) µs", "p50 µs", "p99 µs", "p99.9 µs",
               "max µs", "lost"], rows, caption="Latency and its jitter through tcp_proxy")
    path, rel = ctx.plot_path("jitter")
    names = swept.names

    def med(name: str, n: int, key: str) -> float:
        return statistics.median(r["figures"][key] for r in swept.runs(name, 0, n))

    bars_plot(path, [BarPanel(f"jitter (std-dev), {n} B", "µs", {"": [med(name, n, "std_dev_us") for name in names]})
                     for n in sizes]
              + [BarPanel(f"p99.9, {n} B", "µs", {"": [med(name, n, "p99_9_us") for name in names]}) for n in sizes],
              names, title="Latency jitter through tcp_proxy", ncols=2, highlight="node-proxy")
    sec.image(rel, "Latency jitter through tcp_proxy", "Standard deviation and p99.9 of sockperf latency "
              "(medians of rounds) per topology and message size.")
    add_chain_commands(sec, swept.records)
    return sec


# -- mesh.access_log: what writing Istio's access log adds to the tail ---------------------

ACCESS_LOG_TOPOLOGIES = (
    Topology("node-proxy", "client → dpukit-mesh (rtc, 1 worker) → service, no access log", node_proxy("rtc", 1)),
    Topology("node-proxy-logged", "the same node proxy writing Istio's access log line per request to a file",
             node_proxy("rtc", 1, access_log=True), after_load=access_log_lines),
)
ACCESS_LOG_QPS = 1000


def access_log_sweep(quick: bool) -> Sweep:
    return Sweep(just(ACCESS_LOG_TOPOLOGIES),
                 (Phase("fortio", {"qps": ACCESS_LOG_QPS, "connections": 8, "seconds": 5 if quick else 15}),),
                 rounds=3 if quick else 5)


@experiment(
    "mesh.access_log",
    title="mesh.access_log: the latency an access log adds",
    description="p50 and p99 at 1000 qps (fortio) through the node proxy without and with Istio's access log "
                "written to a file, in paired interleaved rounds; the goal is p99 with the log ≤ 1.05× without.",
    tools=[TOOL],
)
def access_log(ctx: Context) -> Section:
    return render_access_log(ctx, collect_sweep(ctx, access_log_sweep(ctx.quick)))


def render_access_log(ctx: Context, swept: Swept) -> Section:
    fixed = swept.phases[0].fixed
    off, on = swept.runs("node-proxy"), swept.runs("node-proxy-logged")
    sec = Section("mesh.access_log: the latency an access log adds")
    sec.paragraph(
        f"`fortio load -qps {fixed['qps']} -c {fixed['connections']} -t {fixed['seconds']}s` through the node proxy "
        "(rtc, 1 worker on the dpu CPU; client and service on the host CPU) without an access log and with Istio's "
        "default line for every request into a file (`envoy.access_loggers.file`, flushed every 500 ms by the "
        f"proxy's flusher thread). {swept.rounds} paired rounds, the two proxies interleaved; cells are medians "
        "(range).")

    def col(runs: list[dict[str, Any]], key: str) -> str:
        return fmt_mr([r["figures"][key] for r in runs])

    sec.table(["topology", "achieved qps", "p50 ms", "p99 ms", "p99.9 ms", "dpu CPU ms / 1k req", "log lines"],
              [[name, col(runs, "qps"), col(runs, "p50_ms"), col(runs, "p99_ms"), col(runs, "p99_9_ms"),
                col(runs, "dpu_cpu_ms_per_1k"),
                fmt_mr([r["figures"].get("access_log_lines", 0) for r in runs])]
               for name, runs in (("node-proxy", off), ("node-proxy-logged", on))],
              caption=f"Latency at {fixed['qps']} qps without and with the access log")
    p99 = [b["figures"]["p99_ms"] / a["figures"]["p99_ms"] for a, b in zip(off, on)]
    cpu = [b["figures"]["dpu_cpu_ms_per_1k"] / a["figures"]["dpu_cpu_ms_per_1k"] for a, b in zip(off, on)]
    met = statistics.median(p99) <= 1.05
    sec.table(["ratio (logged ÷ not)", "median (range)", "goal"],
              [["p99", fmt_mr(p99), "≤ 1.05: " + ("met" if met else "MISSED")],
               ["dpu CPU per request", fmt_mr(cpu), "—"]],
              caption="Each round's logged run against the same round's run without the log")
    unlogged = [r for r in on if r["figures"].get("access_log_lines", 0) < r["figures"]["requests"]]
    sec.paragraph("Every logged run wrote at least a line per measured request (the file also holds the warm-up's)."
                  if not unlogged else
                  f"WARNING: {len(unlogged)} logged runs wrote fewer lines than they served requests.")
    sec.paragraph(error_note(swept.records))
    add_chain_commands(sec, swept.records)
    return sec
