"""mesh.bluefield: how many dpu CPUs at BlueField-3 speed the node proxy needs
to reach the Envoy sidecar pair's max qps on host cores, and its added p99
there (issue 25).

The chains are the harness's (``dpukit.mesh_harness``: its topologies, loads
and measured runs, reused, not copied): the Envoy sidecar pair on the dpu CPU
as mesh.quick runs it (Envoy counted as host CPU: in that architecture it runs
in the pods), and the node
proxy (rtc, TCP to the service) with ``--dpu-speed bluefield3`` on 1, then 2
dpu CPUs, and at host speed beside it. Every loop of the proxy (workers,
pipeline stages, the control plane's and the xDS stream's) is dilated to the
speed (docs/core.md, docs/mesh.md): a write first pays for the work before
it, so a reply leaves only once that work is paid for, and each batch of
events is paid for at its end. The wire is loopback TCP on the same
kernel, so the proxy's kernel time on its thread is dilated too (a BlueField's
Arm cores run their own network stack).

The experiment is a sweep described as data (the harness's Sweep: these
topologies, wrk's max qps, then fortio at each fixed rate), collected by the
harness, and a pure ``render`` step (runs -> section, table and plot).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

from dpukit.experiment_support import add_chain_commands, error_note, flatproxy_findings, fmt_mr
from dpukit.experiments import Context, experiment
from dpukit.mesh_harness import (DPU_CPU, HOST_CPU, TOOL, Phase, Sweep, Swept, Topology, collect_sweep, direct,
                                 envoy_sidecars, node_proxy)
from dpukit.plots import BarPanel, bars_plot
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig

SPEED = "bluefield3"
FACTOR = 0.455  # bluefield3's F (docs/core.md)
# The dpu speed model's promise (core's speed_check.h, issue 31's bounds):
# dpu CPU per unit of work within 5 % of 1/F.
PROMISE_CPU_TOLERANCE = 0.05
WRK_CONNS, FORTIO_CONNS = 16, 8
SECONDS = 3
QUICK_RATES = (1000,)
FULL_RATES = (1000, 2000)  # both under the sidecar pair's max (4,300-8,100 qps here, by how busy the machine is)
SIDECARS = "envoy-sidecars"


@dataclass(frozen=True)
class ProxyRun:
    """A node proxy configuration of this experiment."""

    name: str
    speed: str
    cpus: int  # dpu CPUs (one rtc worker each)


def dpu_cpu_list(n: int) -> str | None:
    """The dpu CPUs for an n-CPU node proxy: CPU 1 onwards, never the host
    CPU (load generator and service); None when this machine has too few."""
    first = int(DPU_CPU)
    if first + n > (os.cpu_count() or 1):
        return None
    return str(first) if n == 1 else f"{first}-{first + n - 1}"


def proxy_runs() -> list[ProxyRun]:
    return [ProxyRun("node-proxy-host", "host", 1), ProxyRun(f"node-proxy-{SPEED}", SPEED, 1),
            ProxyRun(f"node-proxy-{SPEED}-2cpu", SPEED, 2)]


def plan(quick: bool) -> tuple[list[Topology], dict[str, str]]:
    """The topologies that can run here, and what is left out with why."""
    tops = [Topology("direct", "client → service (no proxy)", direct),
            Topology(SIDECARS, "client → Envoy → Envoy → service (the sidecar pair, on one host core)",
                     envoy_sidecars)]
    left_out: dict[str, str] = {}
    for r in proxy_runs():
        cpus = dpu_cpu_list(r.cpus)
        if cpus is None:
            left_out[r.name] = (f"needs {r.cpus} dpu CPUs besides the host CPU {HOST_CPU}; this machine has "
                                f"{os.cpu_count()} CPUs")
            continue
        tops.append(Topology(r.name, f"client → dpukit-mesh (rtc, {r.cpus} worker(s) on dpu CPUs {cpus}, "
                             f"--dpu-speed {r.speed}) → service",
                             node_proxy("rtc", r.cpus, dpu_cpus=cpus, dpu_speed=r.speed),
                             parameters={"dpu_speed": r.speed, "dpu_cpus": cpus}))
    return tops, left_out


def sweep(rates: tuple[int, ...]) -> Sweep:
    """In each round and chain: wrk's max qps, then fortio at each of ``rates``."""
    return Sweep(plan, (Phase("wrk", {"connections": WRK_CONNS, "seconds": SECONDS}),
                        Phase("fortio", {"connections": FORTIO_CONNS, "seconds": SECONDS}, "qps", rates)))


QUICK, FULL = sweep(QUICK_RATES), sweep(FULL_RATES)
WRK, FORTIO = 0, 1  # the phases


# -- render ---------------------------------------------------------------------------


# The proxies of a chain, whichever topology: the node proxy, or the two Envoys (not the service).
PROXY_PROCESSES = ("node-proxy", "client-sidecar", "server-sidecar")


def proxy_cpu_ns(record: dict[str, Any]) -> int:
    return sum(ns for name, ns in record["figures"]["process_cpu_ns"].items() if name in PROXY_PROCESSES)


def proxy_busy(record: dict[str, Any]) -> float:
    """The proxies' CPU over the run's wall time: 1.0 = one CPU busy all the time."""
    return proxy_cpu_ns(record) / record["wall_ns"]


def per_cpu_qps(record: dict[str, Any]) -> float:
    """Requests per second of the proxies' CPU time in a max-qps run (a dpu
    proxy's dilated time included): what one of their CPUs serves when it is
    the bottleneck. A lower bound when it was not (fewer requests per wake-up)."""
    cpu = proxy_cpu_ns(record)
    return record["figures"]["requests"] / (cpu / 1e9) if cpu else math.nan


def promise_paragraph(sec: Section, wrk: dict[str, list[dict[str, Any]]],
                      fixed: dict[str, list[dict[str, Any]]], rate: int) -> None:
    """The dpu speed model's promise on the node proxy: each round's proxy
    CPU per request at SPEED over the same round's at host speed, at the
    fixed rate ``rate`` (the same offered load, so the same requests per
    wake-up), against 1/F ± PROMISE_CPU_TOLERANCE; at max qps beside it.
    (It was a unit test's bound, MeshDpuSpeed: a timing figure, measured
    here.)"""
    host, slow = f"node-proxy-host", f"node-proxy-{SPEED}"
    if not fixed.get(host) or not fixed.get(slow):
        return

    def per_request(r: dict[str, Any]) -> float:
        return proxy_cpu_ns(r) / r["figures"]["requests"]

    cpu = [per_request(s) / per_request(h) for h, s in zip(fixed[host], fixed[slow])]
    at_max = [per_request(s) / per_request(h) for h, s in zip(wrk[host], wrk[slow])]
    qps = [s["figures"]["qps"] / h["figures"]["qps"] for h, s in zip(wrk[host], wrk[slow])]
    want = 1 / FACTOR
    met = abs(statistics.median(cpu) / want - 1) <= PROMISE_CPU_TOLERANCE
    sec.paragraph(
        f"**The model's promise on the node proxy:** proxy CPU per request at `{SPEED}` / at host speed, paired by "
        f"round, at {fmt_int(rate)} qps: {fmt_mr(cpu)} against 1/F = {fmt_sig(want)} ± {PROMISE_CPU_TOLERANCE:.0%} "
        f"(goal): {'met' if met else 'missed'}. At max qps {fmt_mr(at_max)} (the two proxies then batch "
        f"differently), and max qps {fmt_mr(qps)} of host speed's, F = {fmt_sig(FACTOR)} only where the proxy at "
        "host speed was the bottleneck too (`proxy CPUs busy` near 1). The proxy's CPU is its process's (10 ms "
        "ticks), its control plane included, which is dilated too; on a shared machine a dilated loop also pays "
        "for other tenants' preemptions and cache refills (docs/core.md), which this figure shows and the model "
        "does not remove.")


def render(ctx: Context, swept: Swept) -> Section:
    sec = Section("mesh.bluefield: the node proxy at BlueField-3 speed against the Envoy sidecar pair")
    names = swept.names
    recs = swept.records
    wrk = {n: swept.runs(n, WRK) for n in names}
    fortio = {n: swept.by_point(n, FORTIO) for n in names}
    rates, rounds = swept.points(FORTIO), swept.rounds
    runs = {r.name: r for r in proxy_runs()}
    wrk_load, fortio_load = swept.phases[WRK].fixed, swept.phases[FORTIO].fixed
    sec.paragraph(
        "Topologies: " + "; ".join(f"`{t.name}`: {t.description}" for t in swept.topologies) + "."
        + ("" if not swept.left_out else " Left out on this machine: "
           + "; ".join(f"`{n}` ({why})" for n, why in swept.left_out.items()) + "."))
    sec.paragraph(
        f"The load generator and the service run on CPU {HOST_CPU}; the sidecar pair (two Envoy 1.40, "
        f"`--concurrency 1`) and the node proxy on CPU {DPU_CPU} (the 2-CPU proxy on CPUs 1-2). The node proxy's "
        f"loops are dilated to `--dpu-speed {SPEED}` (F = 0.455: a thread stays busy for (1/F − 1) × its CPU time, "
        "so a dpu CPU serves F of what a host core does; a write first pays for the work before it, so a reply "
        "leaves only once that work is paid for, and each batch of events is paid for at its end). "
        f"Max qps: `wrk -t1 -c{wrk_load['connections']} -d{wrk_load['seconds']}s`; added latency: `fortio load -qps Q "
        f"-c {fortio_load['connections']} -t {fortio_load['seconds']}s`, the topology's p50 and p99 minus the same "
        "round's direct ones. "
        + ("Quick mode: one round." if rounds == 1 else
           f"{rounds} paired, interleaved rounds (topology after topology, then again); each cell is the median "
           "with the range of the rounds."))

    def col(name: str, key: str) -> str:
        return fmt_mr([r["figures"][key] for r in wrk[name]])

    def added(name: str, q: int, key: str = "p99_ms") -> list[float]:
        return [r["figures"][key] - d["figures"][key] for r, d in zip(fortio[name][q], fortio["direct"][q])]

    def added_cell(name: str, q: int, key: str) -> str:
        """Added latency, and the rate reached when it fell short of the one asked (not sustained)."""
        got = statistics.median(r["figures"]["qps"] for r in fortio[name][q])
        return fmt_mr(added(name, q, key)) + (f" (reached {fmt_int(got)} qps)" if got < 0.95 * q else "")

    side_qps = [r["figures"]["qps"] for r in wrk[SIDECARS]]
    side_rate = [per_cpu_qps(r) for r in wrk[SIDECARS]]
    header = ["topology", "max qps", "× sidecar pair", "proxy CPUs busy", "req / proxy CPU-s",
              "proxy CPU ms / 1k req"]
    header += [f"added {p} ms at {fmt_int(q)} qps" for q in rates for p in ("p50", "p99")]
    rows = []
    for n in names:
        if n == "direct":
            continue
        x = [r["figures"]["qps"] / s for r, s in zip(wrk[n], side_qps)]
        rows.append([n, col(n, "qps"), fmt_mr(x), fmt_mr([proxy_busy(r) for r in wrk[n]]),
                     fmt_mr([per_cpu_qps(r) for r in wrk[n]]),
                     fmt_mr([proxy_cpu_ns(r) / r["figures"]["requests"] / 1e3 for r in wrk[n]])]
                    + [added_cell(n, q, key) for q in rates for key in ("p50_ms", "p99_ms")])
    for r in proxy_runs():
        if r.cpus == 1 and r.name in wrk:
            flatproxy_findings(ctx, r.name, r.speed, wrk, {n: fortio[n][rates[0]] for n in names}, rates[0])
    sec.table(header, rows, caption="Max qps with the proxies' CPU at that rate (the sidecar pair's two Envoys on "
                                    "one host core, the node proxy's dpu CPUs), and added latency at fixed rates")

    verdict = []
    for n in names:
        r = runs.get(n)
        if r is None or r.speed != SPEED:
            continue
        reached = all(p["figures"]["qps"] >= s for s, p in zip(side_qps, wrk[n]))
        by_capacity = [e / per_cpu_qps(p) for e, p in zip(side_rate, wrk[n])]
        by_measured = [s / per_cpu_qps(p) for s, p in zip(side_qps, wrk[n])]
        verdict.append(
            f"`{n}` ({r.cpus} CPU) "
            + ("reached the pair's max qps in every round (measured)" if reached else
               "did not reach the pair's max qps in every round")
            + f"; from the per-CPU rates (extrapolated, assuming workers scale linearly), the pair's max qps on this "
            f"run needs {fmt_mr(by_measured)} {SPEED} CPU, and the pair's capacity on one host core (its requests "
            f"per CPU-second) {fmt_mr(by_capacity)} → {math.ceil(statistics.median(by_capacity))} {SPEED} CPU(s)")
    if verdict:
        sec.paragraph("**dpu CPUs at BlueField-3 speed to match the Envoy sidecar pair:** " + "; ".join(verdict)
                      + ". `req / proxy CPU-s` is requests per second of the proxies' own CPU time at max qps "
                      "(the dpu's dilated time included); `proxy CPUs busy` below 1 means the chain was bounded "
                      "elsewhere (the load generator and the service share CPU 0), and the per-CPU rate is then a "
                      "lower bound.")
    promise_paragraph(sec, wrk, {n: fortio[n][rates[0]] for n in names}, rates[0])
    path, rel = ctx.plot_path("bluefield")
    plot_names = [n for n in names if n != "direct"]
    med = statistics.median
    panels = [BarPanel(f"max qps (wrk, {wrk_load['connections']} conns)", "requests / s",
                       {"": [med(r["figures"]["qps"] for r in wrk[n]) for n in plot_names]},
                       fmt=lambda v: fmt_sig(v / 1000) + "k",
                       refline=(med(side_qps), "Envoy sidecar pair")),
              BarPanel("requests per proxy CPU-second", "requests / CPU-s",
                       {"": [med(per_cpu_qps(r) for r in wrk[n]) for n in plot_names]},
                       fmt=lambda v: fmt_sig(v / 1000) + "k", refline=(med(side_rate), "Envoy sidecar pair"))]
    for q in rates:
        panels.append(BarPanel(f"added latency at {fmt_int(q)} qps", "ms",
                               {p: [med(added(n, q, f"{p}_ms")) for n in plot_names] for p in ("p50", "p99")},
                               logy=True))
    bars_plot(path, panels, plot_names, title=f"The node proxy at {SPEED} speed against the Envoy sidecar pair",
              ncols=2, highlight=f"node-proxy-{SPEED}")
    sec.image(rel, "max qps, requests per proxy CPU-second and added latency per topology",
              "Max qps and requests per second of the proxies' CPU time (the dashed lines: the Envoy sidecar "
              "pair's), and added p50 and p99 at fixed rates"
              + (" (medians of the rounds)." if rounds > 1 else "."))
    sec.paragraph(error_note(recs))
    add_chain_commands(sec, recs)
    return sec


@experiment(
    "mesh.bluefield",
    title="mesh.bluefield: the node proxy at BlueField-3 speed against the Envoy sidecar pair",
    description="Max qps (wrk) and added p99 at fixed rates (fortio) of the Envoy sidecar pair on a host core and "
                "of the node proxy at --dpu-speed bluefield3 on 1 (and 2) dpu CPUs, with host speed beside it: "
                "how many BlueField-3 CPUs match the pair.",
    tools=[TOOL],
)
def bluefield(ctx: Context) -> Section:
    return render(ctx, collect_sweep(ctx, QUICK if ctx.quick else FULL))
