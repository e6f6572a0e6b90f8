"""What the experiments share, below them: the report's notes on how often
and where the runs ran, the mesh experiments' summaries, and what an
experiment reads of the machine and its processes.

The experiment modules (``dpukit/experiments/*.py``) import from here and
from the framework in ``dpukit/experiments/__init__.py``, never from one
another (``python/tests/test_layering.py`` holds that).
"""

from __future__ import annotations

import os
import platform
import re
import socket
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from dpukit.errors import DpukitError
from dpukit.report import Section
from dpukit.units import fmt_sig

if TYPE_CHECKING:  # the harness imports this module
    from dpukit.experiments import Context
    from dpukit.mesh_harness import Described, Topology


# -- notes: how often each point ran, where the runs ran, the tool's parameters ----


def _median_row(key: str) -> str:
    return f"each row shows the run with the median `{key}`, so all figures in a row come from one run."


def repeats_note(repeats: int, key: str) -> str:
    return f"Each point was run {repeats} times; " + _median_row(key)


def mode_repeats_note(ctx: Context, key: str) -> str:
    """How often each point ran in ``ctx``'s mode (once in quick mode)."""
    if ctx.repeats == 1:
        return "Quick mode: each point was run once."
    return f"Full mode: each point was run {ctx.repeats} times; " + _median_row(key)


def placement_note(runs: Sequence[dict[str, Any]]) -> str:
    """Where the runs ran: machine, backend, CPU placement (each distinct one once)."""
    if not runs:
        return ""
    m = runs[0]["machine"]
    seen: list[str] = []
    for r in runs:
        p = r["placement"]
        text = f"host CPUs {p['host_cpus'] or '-'}, dpu CPUs {p['dpu_cpus'] or '-'}, hw CPUs {p['hw_cpus'] or '-'}"
        if p.get("note"):
            text += f" ({p['note']})"
        if text not in seen:
            seen.append(text)
    backends = sorted({r["backend"] for r in runs})
    return (f"Backend: {', '.join(backends)}; {runs[0]['tool'].split()[0]} {runs[0]['version']} on "
            f"{m['cpu_model']} ({m['cores']} cores, {m['arch']}, {m['kernel']}). "
            f"Placement: {'; '.join(seen)}.")


def parameters_note(run: dict[str, Any], skip: Sequence[str] = ()) -> str:
    """The tool's own record of its parameters (shows the defaults it used)."""
    params = {k: v for k, v in run.get("parameters", {}).items() if k not in skip}
    if not params:
        return ""
    return "Parameters as recorded by the tool (first point): " + ", ".join(
        f"`{k}={v}`" for k, v in params.items()) + "."


# -- the mesh experiments' summaries (mesh, mesh_speed, mesh_tls, mesh_xds) ---------


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


def goal_rows(tops: Sequence[Topology | Described], wrk_runs: dict[str, list[dict[str, Any]]],
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


def flatproxy_findings(ctx: Context, proxy: str, speed: Any, wrk_runs: dict[str, list[dict[str, Any]]],
                       fortio_runs: dict[str, list[dict[str, Any]]], qps: int) -> None:
    """The summary's FlatProxy figures (dpukit.summary) for node-proxy topology ``proxy`` at ``speed``: its
    max qps over the Envoy sidecar pair's, and its p50 at ``qps`` against theirs, medians of per-round ratios."""
    side = "envoy-sidecars"
    if proxy not in wrk_runs or side not in wrk_runs:
        return
    rounds = len(wrk_runs[proxy])
    how = f", {rounds} paired rounds" if rounds > 1 else ""
    x = [w["figures"]["qps"] / s["figures"]["qps"] for w, s in zip(wrk_runs[proxy], wrk_runs[side])
         if s["figures"]["qps"]]
    if x:
        ctx.finding("flatproxy.qps", statistics.median(x), speed, f"{proxy} over {side}, wrk{how}")
    lat = [f["figures"]["p50_ms"] / s["figures"]["p50_ms"] for f, s in zip(fortio_runs[proxy], fortio_runs[side])
           if s["figures"]["p50_ms"]]
    if lat:
        ctx.finding("flatproxy.latency", 100 * (statistics.median(lat) - 1), speed,
                    f"{proxy} against {side}, p50 at {qps} qps{how}")


# -- the machine and its processes ----------------------------------------------------


def machine() -> dict[str, Any]:
    """The machine record every result carries: CPU model, cores, arch, kernel, host name."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count() or 1, "arch": platform.machine(),
            "kernel": f"{platform.system()} {platform.release()}", "hostname": socket.gethostname()}


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident set size of a process (VmHWM: its peak), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise DpukitError(f"/proc/{pid}/status has no {field}")
