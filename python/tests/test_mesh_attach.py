"""Socket direct: services attached to dpukit-mesh over shared-memory rings
(the echo service on the attach client library, dpukit/mesh_attach.h), in
both execution models — the same answers as over TCP, large bodies intact,
a killed service routed around, health checks over the rings, and the
configuration's faults named."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from conftest import native_tool
from mesh_support import *  # noqa: F401,F403
from mesh_support import (OUTLIER_5XX, Echoes, bootstrap, cluster_of, envoy_validate, kill_under_load, raw_exchange,
                          request, shm_cluster, start_attached, start_proxy)
from dpukit.procs import free_port


@pytest.fixture(params=["mesh", "mesh-pipelined"])
def mesh_kind(request: pytest.FixtureRequest) -> str:
    return request.param


ALL_TO_POOL = """\
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: pool}"""


def attached_pool(echoes: Echoes, tmp_path: Path, kind: str, names: list[str], cluster_extra: str = ""):
    paths = [tmp_path / f"{n}.sock" for n in names]
    for n, p in zip(names, paths):
        start_attached(echoes, n, p)
    port, admin = free_port(), free_port()
    config = bootstrap(port=port, admin=admin, clusters=shm_cluster("pool", paths, cluster_extra),
                       virtual_hosts=ALL_TO_POOL)
    return start_proxy(echoes.group, kind, config, tmp_path / "proxy", port=port, admin=admin), paths


def test_attached_services_answer_through_the_rings(mesh_kind: str, echoes: Echoes, tmp_path: Path):
    proxy, _ = attached_pool(echoes, tmp_path, mesh_kind, ["a", "b"])
    served = collections.Counter(request(proxy.port).header("x-served-by") for _ in range(10))
    assert served == {"a": 5, "b": 5}
    # A streamed 24 MiB upload arrives whole (the service hashes what it read)...
    body = os.urandom(24 << 20)
    r = request(proxy.port, "POST", "/up", body=body, timeout=30)
    assert r.status == 200
    assert r.header("x-echo-body-bytes") == str(len(body))
    assert r.header("x-echo-body-hash") == f"{zlib.crc32(body):08x}"
    # ... and a 24 MiB answer comes back whole.
    r = request(proxy.port, "GET", "/down", headers={"x-echo-size": str(24 << 20)}, timeout=30)
    assert r.status == 200 and len(r.body) == 24 << 20
    # Keep-alive and pipelining: three requests in one write, three answers in order.
    data = b"".join(f"GET /p{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(3))
    answers, _ = raw_exchange(proxy.port, data, responses=3)
    assert [a.header("x-echo-path") for a in answers] == ["/p0", "/p1", "/p2"]
    # The upstream connections are counted as any others.
    stats = request(proxy.admin, "GET", "/stats/prometheus").body.decode()
    m = re.search(r'envoy_cluster_upstream_cx_total\{envoy_cluster_name="pool"\} (\d+)', stats)
    assert m and int(m.group(1)) >= 2, stats[:2000]
    proxy.proc.check_alive()


def test_a_killed_attached_service_is_routed_around(mesh_kind: str, echoes: Echoes, tmp_path: Path):
    proxy, _ = attached_pool(echoes, tmp_path, mesh_kind, ["a", "b"], OUTLIER_5XX)
    assert collections.Counter(request(proxy.port).header("x-served-by") for _ in range(10)) == {"a": 5, "b": 5}
    during = kill_under_load(proxy.port, echoes.procs["b"].pid)
    assert during[200] > 0
    assert during["error"] == 0, during  # a dead service is a 503 at worst, never a hang or a dropped client
    assert during["cut"] <= 1, during  # one client: only the reply in flight at the kill can stop short
    after = [request(proxy.port) for _ in range(50)]
    assert [r.status for r in after] == [200] * 50
    assert {r.header("x-served-by") for r in after} == {"a"}
    proxy.proc.check_alive()


def test_health_checks_run_over_the_rings(mesh_kind: str, echoes: Echoes, tmp_path: Path):
    checks = """\
    health_checks:
    - timeout: 0.5s
      interval: 0.2s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {path: /health}
"""
    live = tmp_path / "live.sock"
    start_attached(echoes, "live", live)
    gone = tmp_path / "gone.sock"  # nothing attaches here
    port, admin = free_port(), free_port()
    config = bootstrap(port=port, admin=admin, clusters=shm_cluster("pool", [live, gone], checks),
                       virtual_hosts=ALL_TO_POOL)
    proxy = start_proxy(echoes.group, mesh_kind, config, tmp_path / "proxy", port=port, admin=admin)
    time.sleep(0.5)
    clusters = request(admin, "GET", "/clusters").body.decode()
    assert f"pool::{live}::health_flags::healthy" in clusters, clusters
    assert f"pool::{gone}::health_flags::/failed_active_hc" in clusters, clusters
    assert {request(port).header("x-served-by") for _ in range(10)} == {"live"}
    proxy.proc.check_alive()


GOOD = """\
admin:
  address:
    socket_address: {address: 127.0.0.1, port_value: 9901}
static_resources:
  clusters:
  - name: pool
    connect_timeout: 1s
    type: STATIC
    load_assignment:
      cluster_name: pool
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {ADDRESS}
          metadata: {filter_metadata: {METADATA}}
"""


@pytest.mark.parametrize("address,metadata,fault", [
    ("{pipe: {path: /tmp/x.sock}}", "{dpukit.mesh: {attach: shm}}", None),
    ("{pipe: {path: /tmp/x.sock}}", "{dpukit.mesh: {attach: socket}}", None),
    ("{socket_address: {address: 127.0.0.1, port_value: 1}}", "{dpukit.mesh: {attach: shm}}",
     "attach: shm needs a pipe address"),
    ("{pipe: {path: /tmp/x.sock}}", "{dpukit.mesh: {atach: shm}}", "dpukit.mesh.atach"),
    ("{pipe: {path: /tmp/x.sock}}", "{dpukit.mesh: {attach: rdma}}", "unknown value 'rdma'"),
    ("{pipe: {path: /tmp/x.sock}}", "{envoy.lb: {canary: true}}", "envoy.lb is not supported"),
])
def test_attach_metadata_is_checked(tmp_path: Path, address: str, metadata: str, fault: str | None):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace("{ADDRESS}", address).replace("{METADATA}", metadata))
    proc = subprocess.run([str(native_tool("dpukit-mesh")), "validate", "--config", str(path)],
                          capture_output=True, text=True, timeout=15)
    if fault is None:
        assert proc.returncode == 0, proc.stderr
        # Envoy accepts the same file: the metadata is opaque to it.
        env = envoy_validate(path)
        assert env.returncode == 0, env.stdout + env.stderr
    else:
        assert proc.returncode == 2, proc.stderr
        assert fault in proc.stderr and "lb_endpoints[0].metadata" in proc.stderr, proc.stderr


def test_echo_refuses_an_attach_point_in_use(echoes: Echoes, tmp_path: Path):
    path = tmp_path / "busy.sock"
    start_attached(echoes, "first", path)
    proc = subprocess.run([str(native_tool("dpukit-mesh")), "echo", "--listen", f"shm:{path}"],
                          capture_output=True, text=True, timeout=15)
    assert proc.returncode == 2
    assert "a server is listening there" in proc.stderr
    # The first one still serves.
    assert echoes.procs["first"].popen.poll() is None


def test_tcp_proxy_to_attached_services_is_refused_by_name(tmp_path: Path):
    config = tmp_path / "tcp.yaml"
    config.write_text("""\
static_resources:
  listeners:
  - name: l4
    address: {socket_address: {address: 127.0.0.1, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: l4
          cluster: pool
  clusters:
""" + shm_cluster("pool", [tmp_path / "a.sock"]))
    proc = subprocess.run([str(native_tool("dpukit-mesh")), "validate", "--config", str(config)],
                          capture_output=True, text=True, timeout=15)
    assert proc.returncode == 2
    assert "typed_config.cluster" in proc.stderr and "attached over shm" in proc.stderr, proc.stderr
