"""mesh.xds: the node proxy configured by an xDS control plane.

``dpukit-xds-server`` (mesh/tests/xds-server; go-control-plane's snapshot
cache and ADS server, built by scripts/setup.sh into .tools/bin) drives
dpukit-mesh and Envoy 1.40 side by side, each its own node id, over ADS
(state of the world and delta, v3). Measured: the time from a snapshot
update to the first request served by the new route, and the proxy's CPU per
update at 100, 1,000 and 10,000 clusters (10 and 100 quick), against the goal
of at most Envoy's. The experiment is a ``collect`` step (runs the proxies,
keeps one result per proxy, protocol, size and round) and a pure ``render``
step (results -> section), so that ``dpukit eval --render`` rebuilds it.

This module also holds what the xDS tests share (python/tests/test_mesh_xds.py):
the server and its control endpoint, the ADS bootstrap, the proxies, and
builders of resources in Envoy's JSON.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from dpukit import __version__
from dpukit.errors import DpukitError
from dpukit.experiment_support import fmt_mr
from dpukit.experiments import Context, experiment
from dpukit.mesh_harness import HCM as HCM_TYPE
from dpukit.mesh_harness import (DPU_CPU, HOST_CPU, LOOPBACK, TOOL, Chain, collected, envoy_path, go_tool_path,
                                 keep_run, machine, start_service)
from dpukit.machine_load import background_busy
from dpukit.paths import tool_path
from dpukit.plots import Series, line_plot
from dpukit.procs import Group, Proc, free_port, http_get
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig

XDS_SERVER = "dpukit-xds-server"
ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
# The resource types of a snapshot, by the names of the server's control endpoint.
RESOURCE_TYPES = ("listeners", "clusters", "routes", "endpoints")
KINDS = ("envoy", "dpukit")  # the proxies an xDS server drives side by side
# mesh.xds's protocols: (name, ads_config.api_type, the types an update waits for: None for all).
PROTOCOLS = (("state of the world", "GRPC", None), ("delta", "DELTA_GRPC", ("routes",)))


def xds_server_path() -> Path:
    return go_tool_path(XDS_SERVER)


# -- resources in Envoy's JSON --------------------------------------------------------


def http_listener(name: str, port: int, route_name: str) -> dict[str, Any]:
    """A listener on 127.0.0.1:port whose connection manager takes route ``route_name`` over ADS (RDS)."""
    return {
        "name": name,
        "address": {"socket_address": {"address": LOOPBACK, "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": HCM_TYPE,
                "stat_prefix": name,
                "rds": {"route_config_name": route_name, "config_source": {"ads": {}}},
                "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER_TYPE}}],
            }}]}],
    }


def eds_cluster(name: str, **extra: Any) -> dict[str, Any]:
    """A cluster whose endpoints come over ADS (EDS)."""
    return {"name": name, "type": "EDS", "connect_timeout": "0.5s",
            "eds_cluster_config": {"eds_config": {"ads": {}}}, **extra}


def load_assignment(cluster: str, ports: Sequence[int]) -> dict[str, Any]:
    """A ClusterLoadAssignment: ``cluster``'s endpoints at 127.0.0.1:ports."""
    return {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [
        {"endpoint": {"address": {"socket_address": {"address": LOOPBACK, "port_value": p}}}} for p in ports]}]}


def route_config(name: str, virtual_hosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "virtual_hosts": virtual_hosts}


def virtual_host(name: str, domains: Sequence[str], routes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "domains": list(domains), "routes": routes}


def to_cluster(match: dict[str, Any], cluster: str, **action: Any) -> dict[str, Any]:
    return {"match": match, "route": {"cluster": cluster, **action}}


def direct(match: dict[str, Any], status: int, body: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"status": status}
    if body is not None:
        response["body"] = {"inline_string": body}
    return {"match": match, "direct_response": response}


@dataclass
class Snapshot:
    """One node's whole configuration at one version."""

    version: str
    listeners: list[dict[str, Any]] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)  # SDS: over ADS, or StreamSecrets

    def body(self, node: str) -> dict[str, Any]:
        return {"version": self.version, "node_id": node, "listeners": self.listeners, "clusters": self.clusters,
                "routes": self.routes, "endpoints": self.endpoints, "secrets": self.secrets}

    def types(self) -> list[str]:
        """The resource types a proxy subscribes to for this snapshot (those it has resources of)."""
        return [t for t in (*RESOURCE_TYPES, "secrets") if getattr(self, t)]


# -- the control plane ------------------------------------------------------------------


class XdsServer:
    """``dpukit-xds-server`` running in a Group: ADS on ``xds_port``, its control endpoint on ``control_port``."""

    def __init__(self, proc: Proc, xds_port: int, control_port: int):
        self.proc, self.xds_port, self.control_port = proc, xds_port, control_port

    @classmethod
    def start(cls, group: Group, *, xds_port: int = 0, cpus: str | None = None,
              keepalive_min_time: str | None = None, sds_unix: Path | None = None) -> XdsServer:
        """Start the server (``xds_port``: 0 for any free port; the same port to come back after a stop;
        ``keepalive_min_time``: the shortest ping interval it permits, e.g. "1s", else its 15 s;
        ``sds_unix``: also serve SecretDiscoveryService on that Unix socket, as istio-agent does)."""
        argv = [xds_server_path(), "--xds", f"{LOOPBACK}:{xds_port}", "--control", f"{LOOPBACK}:0"]
        if keepalive_min_time:
            argv += ["--keepalive-min-time", keepalive_min_time]
        if sds_unix is not None:
            argv += ["--sds-unix", sds_unix]
        proc = group.start(argv, name=f"xds-server-{len(group.procs)}", cpus=cpus, place="host")
        xds = int(proc.wait_line(r"^xds listening on [\d.]+:(\d+)$").group(1))
        control = int(proc.wait_line(r"^control listening on [\d.]+:(\d+)$").group(1))
        if sds_unix is not None:
            proc.wait_line(r"^sds listening on ")
        return cls(proc, xds, control)

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        conn = http.client.HTTPConnection(LOOPBACK, self.control_port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        finally:
            conn.close()

    def post_raw(self, body: dict[str, Any]) -> tuple[int, str]:
        """POST /snapshot; (status, answer)."""
        return self._request("POST", "/snapshot", json.dumps(body).encode())

    def post(self, node: str, snapshot: Snapshot) -> None:
        status, text = self.post_raw(snapshot.body(node))
        if status != 200:
            raise DpukitError(f"dpukit-xds-server refused snapshot {snapshot.version} for {node}: {text.strip()}")

    def status(self) -> dict[str, Any]:
        """GET /status: per node, per resource type: sent, acked, nacks."""
        status, text = self._request("GET", "/status")
        if status != 200:
            raise DpukitError(f"dpukit-xds-server /status: {status} {text}")
        return json.loads(text)["nodes"]

    def types(self, node: str) -> dict[str, Any]:
        return self.status().get(node, {}).get("types", {})

    def wait_acked(self, node: str, snapshot: Snapshot, timeout: float = 30.0, proxy: Proc | None = None,
                   types: Sequence[str] | None = None) -> None:
        """Wait until ``node`` ACKed ``snapshot``'s version for each type it has
        (or each of ``types``: over delta xDS only a type that changed is
        sent); a NACK of it is an error."""
        wanted = list(types) if types is not None else snapshot.types()
        deadline = time.monotonic() + timeout
        while True:
            status = self.types(node)
            nacks = [f"{t}: {n['message']}" for t in wanted
                     for n in status.get(t, {}).get("nacks", []) if n["version"] == snapshot.version]
            if nacks:
                raise DpukitError(f"{node} rejected snapshot {snapshot.version}: " + "; ".join(nacks))
            if all(status.get(t, {}).get("acked") == snapshot.version for t in wanted):
                return
            self.proc.check_alive()
            if proxy is not None:
                proxy.check_alive()
            if time.monotonic() > deadline:
                acked = {t: status.get(t, {}).get("acked") for t in wanted}
                raise DpukitError(f"{node} did not ACK snapshot {snapshot.version} within {timeout:g} s "
                                  f"(acked: {acked})")
            time.sleep(0.002)

    def wait_nacked(self, node: str, version: str, type_name: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until ``node`` NACKs ``version`` of ``type_name``; the NACK (version, kept_version, message)."""
        deadline = time.monotonic() + timeout
        while True:
            for n in self.types(node).get(type_name, {}).get("nacks", []):
                if n["version"] == version:
                    return n
            self.proc.check_alive()
            if time.monotonic() > deadline:
                raise DpukitError(f"{node} did not NACK {type_name} version {version} within {timeout:g} s "
                                  f"(status: {self.types(node).get(type_name)})")
            time.sleep(0.01)


# -- the proxies --------------------------------------------------------------------------


def xds_bootstrap_yaml(*, node: str, admin_port: int, xds_port: int, api_type: str = "GRPC",
                       keepalive: tuple[str, str] | None = None) -> str:
    """The bootstrap of a proxy configured over ADS: node id and cluster, the
    admin listener, dynamic_resources, and the one static cluster (the xDS
    server, over HTTP/2). ``api_type``: GRPC (state of the world) or
    DELTA_GRPC (incremental); ``keepalive``: the ADS connection's
    connection_keepalive (interval, timeout), e.g. ("2s", "1s")."""
    h2 = "{}" if keepalive is None else f"{{connection_keepalive: {{interval: {keepalive[0]}, timeout: {keepalive[1]}}}}}"
    return f"""\
# {node}: generated by python/dpukit/experiments/mesh_xds.py
node: {{id: {node}, cluster: dpukit}}
admin:
  address:
    socket_address: {{address: {LOOPBACK}, port_value: {admin_port}}}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {{cluster_name: xds_cluster}}
  lds_config: {{ads: {{}}}}
  cds_config: {{ads: {{}}}}
static_resources:
  clusters:
  - name: xds_cluster
    connect_timeout: 1s
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {h2}}}
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: {LOOPBACK}, port_value: {xds_port}}}
"""


@dataclass
class XdsProxy:
    kind: str  # "envoy", "dpukit" or "dpukit-pipelined" (the pipelined execution model)
    node: str
    proc: Proc
    admin: int
    config: str

    def cpu_ns(self) -> int:
        return self.proc.cpu_ns()


def start_xds_proxy(group: Group, kind: str, node: str, xds_port: int, work: Path,
                    cpus: str | None = None, api_type: str = "GRPC", extra: Sequence[str] = ()) -> XdsProxy:
    """Start ``kind`` on the ADS bootstrap of ``node`` (one worker; pinned to
    ``cpus``; ``extra``: more arguments both take) and wait until its admin
    listener answers; its listeners come with the first snapshot."""
    admin = free_port()
    config = xds_bootstrap_yaml(node=node, admin_port=admin, xds_port=xds_port, api_type=api_type)
    path = work / f"{node}.yaml"
    path.write_text(config)
    if kind == "envoy":
        argv: list[Any] = [envoy_path(), "-c", path, "--concurrency", "1", "--disable-hot-restart",
                           "--use-dynamic-base-id", "-l", "warning", *extra]
        proc = group.start(argv, name=node, cpus=cpus, place="dpu")
    elif kind in ("dpukit", "dpukit-pipelined"):
        model = "pipelined" if kind == "dpukit-pipelined" else "rtc"
        argv = [tool_path(TOOL), "run", "--config", path, "--workers", "1", "--model", model, *extra]
        proc = group.start(argv + (["--dpu-cpus", cpus] if cpus else []), name=node, place="dpu")
    else:
        raise ValueError(kind)
    proc.wait_port(admin, timeout=20)
    return XdsProxy(kind, node, proc, admin, config)


def config_dump_versions(admin_port: int) -> dict[str, dict[str, str]]:
    """The dynamic resources' versions in /config_dump, as Envoy shows them:
    {"listeners": {name: version_info}, "clusters": {...}, "routes": {...}}."""
    status, text = http_get(f"http://{LOOPBACK}:{admin_port}/config_dump", timeout=10)
    if status != 200:
        raise DpukitError(f"/config_dump on admin port {admin_port}: {status} {text[:500]}")
    out: dict[str, dict[str, str]] = {"listeners": {}, "clusters": {}, "routes": {}}
    for c in json.loads(text).get("configs", []):
        kind = c.get("@type", "").rsplit(".", 1)[-1]
        if kind == "ListenersConfigDump":
            for dl in c.get("dynamic_listeners", []):
                if "active_state" in dl:
                    out["listeners"][dl["name"]] = dl["active_state"].get("version_info", "")
        elif kind == "ClustersConfigDump":
            for dc in c.get("dynamic_active_clusters", []):
                out["clusters"][dc["cluster"]["name"]] = dc.get("version_info", "")
        elif kind == "RoutesConfigDump":
            for dr in c.get("dynamic_route_configs", []):
                out["routes"][dr["route_config"]["name"]] = dr.get("version_info", "")
    return out


# -- mesh.xds --------------------------------------------------------------------------------

PROBE_PATH = "/probe"
PROBE_PAUSE_S = 0.0005
CPU_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's unit of CPU time
ROUTE = "main"


def sized_snapshot(version: int, clusters: int, listen_port: int, service_port: int) -> Snapshot:
    """``clusters`` EDS clusters c0.. (every one on the echo service), a route
    per cluster, and the probe route: update ``version`` sends /probe to
    cluster c(version mod clusters) with its path rewritten to /vVERSION/, so
    the echo's x-echo-path shows which route served a request."""
    names = [f"c{k}" for k in range(clusters)]
    routes = [to_cluster({"prefix": PROBE_PATH}, names[version % clusters], prefix_rewrite=f"/v{version}/")]
    routes += [to_cluster({"prefix": f"/{n}/"}, n) for n in names]
    return Snapshot(str(version), listeners=[http_listener("ingress", listen_port, ROUTE)],
                    clusters=[eds_cluster(n) for n in names],
                    routes=[route_config(ROUTE, [virtual_host("all", ["*"], routes)])],
                    endpoints=[load_assignment(n, [service_port]) for n in names])


class Prober:
    """Requests to /probe on one kept-alive connection until the new route answers."""

    def __init__(self, port: int):
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def path(self) -> str | None:
        """x-echo-path of one /probe request (None: no answer, or not from the echo)."""
        for _ in range(2):  # a connection the proxy closed is opened again once
            if self.conn is None:
                self.conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=5)
            try:
                self.conn.request("GET", PROBE_PATH)
                r = self.conn.getresponse()
                r.read()
                return r.getheader("x-echo-path")
            except (OSError, http.client.HTTPException):
                self.close()
        return None

    def wait_route(self, version: int, timeout: float = 30.0) -> float:
        """Seconds until /probe is served by the route of ``version``. A short
        pause between probes leaves the proxy's one CPU to the update itself."""
        t0 = time.monotonic()
        want = f"/v{version}/"
        while not (self.path() or "").startswith(want):
            if time.monotonic() - t0 > timeout:
                raise DpukitError(f"the route of update {version} did not serve {PROBE_PATH} within {timeout:g} s")
            time.sleep(PROBE_PAUSE_S)
        return time.monotonic() - t0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def measure_updates(xds: XdsServer, proxy: XdsProxy, prober: Prober, *, first: int, updates: int, cpu_updates: int,
                    clusters: int, listen_port: int, service_port: int,
                    ack_types: Sequence[str] | None = None) -> dict[str, Any]:
    """Two phases of snapshot updates: (1) ``updates`` times from the POST to
    the first request served by the new route, probing; (2) the proxy's CPU
    over ``cpu_updates`` more, each waited for by its ACKs (of ``ack_types``)
    only (no requests; /proc counts CPU in 10 ms ticks, so this phase has
    more updates)."""
    times = []
    version = first
    for _ in range(updates):
        snap = sized_snapshot(version, clusters, listen_port, service_port)
        t0 = time.monotonic()
        xds.post(proxy.node, snap)
        times.append((time.monotonic() - t0) + prober.wait_route(version))
        xds.wait_acked(proxy.node, snap, proxy=proxy.proc, types=ack_types)
        version += 1
    snaps = [sized_snapshot(v, clusters, listen_port, service_port) for v in range(version, version + cpu_updates)]
    cpu0, wall0 = proxy.cpu_ns(), time.monotonic_ns()
    for snap in snaps:
        xds.post(proxy.node, snap)
        xds.wait_acked(proxy.node, snap, proxy=proxy.proc, types=ack_types)
    cpu, wall = proxy.cpu_ns() - cpu0, time.monotonic_ns() - wall0
    return {"first_request_ms": [t * 1e3 for t in times],
            "first_request_ms_median": statistics.median(times) * 1e3,
            "proxy_cpu_ns": cpu, "cpu_ms_per_update": cpu / cpu_updates / 1e6, "cpu_updates": cpu_updates,
            "cpu_wall_ns": wall, "next_version": version + cpu_updates}


def xds_record(ctx: Context, proxy: XdsProxy, xds: XdsServer, figures: dict[str, Any],
               parameters: dict[str, Any], started: datetime) -> dict[str, Any]:
    record = {
        "schema": "dpukit.result/1",
        "tool": "dpukit eval mesh.xds",
        "version": __version__,
        "command_line": ["./dpukit", "eval", *(["--quick"] if ctx.quick else []), "--only", "mesh.xds"],
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "backend": "emulated",
        "placement": {"host_cpus": HOST_CPU, "dpu_cpus": DPU_CPU, "hw_cpus": "",
                      "note": "the proxy (dpukit-mesh or Envoy) pinned to the dpu CPU; the xDS server, the echo "
                              "service and the prober on the host CPU; cpu_ns.dpu is the proxy's CPU over the "
                              "CPU phase"},
        "parameters": {"proxy": proxy.kind, **parameters,
                       "chain": [{"name": p.name, "place": p.place, "command_line": p.argv} for p in
                                 (xds.proc, proxy.proc)],
                       "proxy_config": proxy.config},
        "figures": figures,
        "cpu_ns": {"host": 0, "dpu": figures["proxy_cpu_ns"], "hw": 0},
        "wall_ns": figures["cpu_wall_ns"],
    }
    return keep_run(ctx, f"{proxy.kind}-{parameters['api_type']}-{parameters['clusters']}-r{parameters['round']}",
                    record)


@contextlib.contextmanager
def on_host_cpu() -> Iterator[None]:
    """This thread (the prober, which polls the control plane too) on the host
    CPU, away from the proxy's, for the block; processes started meanwhile
    would inherit it, so none is."""
    affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(HOST_CPU)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, affinity)


# -- collect --------------------------------------------------------------------------------


def collect(ctx: Context) -> dict[str, Any]:
    """Every proxy and protocol at every size, in paired, interleaved rounds;
    each measured round is one run (xds_record). Returns what the render
    needs besides the runs: the sizes and counts, how busy the machine was
    before and after, and per size, proxy and protocol the indices of its
    runs among the experiment's, round by round."""
    sizes = (10, 100) if ctx.quick else (100, 1000, 10000)
    rounds = 2 if ctx.quick else 3
    updates, cpu_updates = (5, 20) if ctx.quick else (10, 30)
    # Below 10,000 clusters an update costs a few ms: more of them, so that a 10 ms tick is a small part of the sum.
    cpu_updates_at = {size: cpu_updates if size >= 10000 or ctx.quick else 100 for size in sizes}
    busy = [background_busy()]
    first = len(ctx.runs)
    results: dict[str, dict[str, dict[str, list[int]]]] = {
        str(size): {kind: {proto: [] for proto, _, _ in PROTOCOLS} for kind in KINDS} for size in sizes}
    work = Path(tempfile.mkdtemp(prefix="dpukit-mesh-xds-"))
    # Every proxy and protocol, interleaved; the order reversed every round.
    setups = [(kind, proto) for proto in PROTOCOLS for kind in KINDS]
    steps, step = len(sizes) * rounds * len(setups), 0
    try:
        with Group(work / "logs") as group:
            service = start_service(Chain(group, work))
            xds = XdsServer.start(group, cpus=HOST_CPU)
            for size in sizes:
                proxies, ports, probers, versions = {}, {}, {}, {}
                for kind, (_, api_type, _) in setups:
                    key = (kind, api_type)
                    node = f"{kind}-{api_type.lower()}-{size}"
                    ports[key] = free_port()
                    proxies[key] = start_xds_proxy(group, kind, node, xds.xds_port, work, cpus=DPU_CPU,
                                                   api_type=api_type)
                    first_snapshot = sized_snapshot(0, size, ports[key], service)
                    xds.post(node, first_snapshot)
                    xds.wait_acked(node, first_snapshot, timeout=120, proxy=proxies[key].proc)
                    probers[key] = Prober(ports[key])
                    probers[key].wait_route(0)
                    versions[key] = 1
                for rnd in range(1, rounds + 1):
                    for kind, (proto, api_type, ack_types) in (setups if rnd % 2 else setups[::-1]):
                        key = (kind, api_type)
                        step += 1
                        ctx.progress(f"{size} clusters, {kind}, {proto}, round {rnd}/{rounds}", step, steps)
                        started = datetime.now(timezone.utc)
                        with on_host_cpu():
                            figures = measure_updates(xds, proxies[key], probers[key], first=versions[key],
                                                      updates=updates, cpu_updates=cpu_updates_at[size], clusters=size,
                                                      listen_port=ports[key], service_port=service,
                                                      ack_types=ack_types)
                        versions[key] = figures.pop("next_version")
                        xds_record(ctx, proxies[key], xds, figures,
                                   {"clusters": size, "api_type": api_type, "round": rnd, "updates": updates,
                                    "cpu_updates": cpu_updates_at[size]}, started)
                        results[str(size)][kind][proto].append(len(ctx.runs) - 1 - first)
                for key in proxies:
                    probers[key].close()
                    proxies[key].proc.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    busy.append(background_busy())
    return {"sizes": list(sizes), "rounds": rounds, "updates": updates,
            "cpu_updates": {str(size): n for size, n in cpu_updates_at.items()}, "busy": busy,
            "cpu_tick_ms": CPU_TICK_MS, "results": results}


@experiment(
    "mesh.xds",
    title="mesh.xds: configuration from an xDS control plane",
    description="dpukit-mesh and Envoy 1.40 driven by one go-control-plane server over ADS (state of the world and "
                "delta): time from a snapshot update to the first request served by the new route, and the "
                "proxy's CPU per update at 100, 1,000 and 10,000 clusters.",
    tools=[TOOL],
)
def xds_updates(ctx: Context) -> Section:
    data, records = collected(ctx, lambda: collect(ctx))
    return render(data, records, ctx.plot_path)


# -- render ---------------------------------------------------------------------------------


GOAL = 1.0  # issue 33: CPU per update and first request at most Envoy's


def cpu_updates_of(cpu_updates: int | dict[str, int], size: int) -> int:
    """The updates of the CPU phase at ``size`` (one count for every size in evals before it varied)."""
    return cpu_updates if isinstance(cpu_updates, int) else cpu_updates[str(size)]


def cpu_updates_text(cpu_updates: int | dict[str, int], sizes: Sequence[int]) -> str:
    counts = [cpu_updates_of(cpu_updates, size) for size in sizes]
    if len(set(counts)) == 1:
        return str(counts[0])
    return ", ".join(f"{n} (at {fmt_int(size)} clusters)" for n, size in zip(counts, sizes))


def met(ratios: Sequence[float]) -> str:
    return "met" if statistics.median(ratios) <= GOAL else "missed"


def render(data: dict[str, Any], records: Sequence[dict[str, Any]],
           plot_path: Callable[[str], tuple[Path, str]] | None = None) -> Section:
    """The section from the collected data and the runs alone (nothing runs);
    with ``plot_path`` (the context's), the curves over the sizes too."""
    sizes, rounds, updates, cpu_updates, busy = (data[k] for k in ("sizes", "rounds", "updates", "cpu_updates",
                                                                    "busy"))
    results = {(size, kind, proto): [records[i] for i in data["results"][str(size)][kind][proto]]
               for size in sizes for kind in KINDS for proto, _, _ in PROTOCOLS}
    sec = Section("mesh.xds: configuration from an xDS control plane")
    sec.paragraph(
        "One `dpukit-xds-server` (go-control-plane v0.14 snapshot cache, ADS) drives dpukit-mesh (`--workers 1 "
        "--dpu-cpus 1`) and Envoy 1.40 (`--concurrency 1` under `taskset -c 1`), each its own node id, over "
        "state-of-the-world xDS (`api_type: GRPC`) and over delta xDS (`DELTA_GRPC`), with the same snapshots: N "
        "EDS clusters on one echo service, a route per cluster, and the probe route. Every update is a new "
        "snapshot version that moves `/probe` to another cluster with its path rewritten to the version; over "
        "state of the world go-control-plane sends every type again (all N clusters and load assignments), over "
        "delta only the route configuration. First request: from just before the POST to the snapshot cache "
        "until a request on a kept-alive connection is answered through the new route (the prober polls every "
        "0.5 ms). CPU per update: the proxy's utime+stime (/proc/PID/stat, 10 ms ticks) over a second series of "
        f"{cpu_updates_text(cpu_updates, sizes)} updates, each waited for by its ACKs (every type; over delta, the route "
        "configuration), "
        f"with no requests. {rounds} paired, interleaved rounds of {updates} timed updates per proxy and protocol "
        "(the order reversed every round); a round's first-request figure is the median of its updates; cells "
        "give the median over the rounds with their range.")
    if all(b is not None for b in busy):
        sec.paragraph(f"Other work on the machine (all CPUs, from /proc/stat over 0.5 s while nothing of ours ran): "
                      f"{100 * busy[0]:.0f} % before, {100 * busy[1]:.0f} % after; both proxies share it alike "
                      "(paired rounds).")
    rows, ratio_rows = [], []
    for size in sizes:
        for proto, _, _ in PROTOCOLS:
            for kind in KINDS:
                runs = results[(size, kind, proto)]
                rows.append([fmt_int(size), proto, kind,
                             fmt_mr([r["figures"]["first_request_ms_median"] for r in runs]),
                             fmt_sig(min(min(r["figures"]["first_request_ms"]) for r in runs)) + "–"
                             + fmt_sig(max(max(r["figures"]["first_request_ms"]) for r in runs)),
                             fmt_mr([r["figures"]["cpu_ms_per_update"] for r in runs])])
            pairs = list(zip(results[(size, "dpukit", proto)], results[(size, "envoy", proto)]))
            first = [d["figures"]["first_request_ms_median"] / e["figures"]["first_request_ms_median"]
                     for d, e in pairs]
            cpu = [d["figures"]["cpu_ms_per_update"] / max(e["figures"]["cpu_ms_per_update"],
                                                           data["cpu_tick_ms"] / cpu_updates_of(cpu_updates, size))
                   for d, e in pairs]
            ratio_rows.append([fmt_int(size), proto, fmt_mr(first), met(first), fmt_mr(cpu), met(cpu)])
    sec.table(["clusters", "xDS", "proxy", "first request after an update, ms", "every update's, ms (min–max)",
               "proxy CPU ms per update"], rows,
              caption="Time from a snapshot update to the first request served by the new route, and the proxy's "
                      "CPU per update")
    sec.table(["clusters", "xDS", "first request × Envoy's", f"goal ≤ {GOAL:g}×", "CPU per update × Envoy's",
               f"goal ≤ {GOAL:g}×"], ratio_rows,
              caption="dpukit-mesh against Envoy, paired by round (median, range); the goals are issue 33's")
    if plot_path is not None and len(sizes) > 1:
        for stem, key, what in (("cpu", "cpu_ms_per_update", "proxy CPU per update, ms"),
                                ("first-request", "first_request_ms_median", "first request after an update, ms")):
            path, rel = plot_path(f"xds-{stem}")
            series = [Series(f"{kind} {proto}", sizes,
                             [max(statistics.median(r["figures"][key] for r in results[(size, kind, proto)]), 1e-3)
                              for size in sizes], "o-" if kind == "dpukit" else "s--")
                      for proto, _, _ in PROTOCOLS for kind in KINDS]
            line_plot(path, series, title=f"mesh.xds: {what}", xlabel="clusters", ylabel=what, logx=True, logy=True,
                      xticks=sizes, xtick_format=lambda v: fmt_int(int(v)))
            sec.image(rel, f"{what} against clusters",
                      f"{what[0].upper()}{what[1:]} against the number of clusters (medians over the rounds; "
                      "both axes logarithmic).")
    sec.paragraph(f"A CPU figure of 0 means less than one 10 ms tick over the {cpu_updates_text(cpu_updates, sizes)} "
                  "updates; a ratio to it "
                  "is taken against one tick (so it is then a lower bound).")
    return sec
