"""TLS record crypto on the BlueField's crypto engine (docs/mesh.md, "Record
crypto on the crypto engine"): dpukit-mesh at bluefield3 with its TLS socket
wrapped by ``dpukit.transport_sockets.crypto_engine`` (``record_crypto:
ENGINE``) talks mutual TLS, byte for byte, to Envoy 1.40 (BoringSSL) and to
OpenSSL's ``s_client`` and ``s_server``, in both directions, with bodies of
megabytes; its engine counters show the records went through the engine; a
bulk transfer's dpu CPU is lower with the engine than with the records on the
cores; and the option is refused where the dpu speed names no BlueField.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import native_tool
from mesh_support import Proxy, TcpUpstream, start_proxy
from tls_support import (BACKEND_DNS, FilterChain, Pki, client_context, counter, downstream_tls, listener,  # noqa: F401
                         pki, spiffe_id, tcp_proxy_filter, tls_bootstrap, tls_cluster, upstream_tls)
from dpukit.mesh_harness import DPU_CPU, mesh_argv, wait_ready
from dpukit.procs import Group, free_port

FRONTEND, BACKEND = spiffe_id("frontend"), spiffe_id("backend")
SPEED = "bluefield3"
BODY = 8 << 20  # bytes each way through a pair
# A TCP sink: reads every connection to its end.
SINK = """
import socket, sys, threading
def drain(c):
    with c:
        while c.recv(1 << 16):
            pass
s = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    threading.Thread(target=drain, args=(s.accept()[0],), daemon=True).start()
"""
# A TLS 1.3 client (frontend's certificate) that sends a file and ends with
# close_notify both ways: the proxy has then opened every record.
SENDER = """
import socket, ssl, sys
port, path, ca, cert, key = sys.argv[1:]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.load_verify_locations(ca)
ctx.load_cert_chain(cert, key)
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
with socket.create_connection(("127.0.0.1", int(port)), timeout=60) as raw:
    with ctx.wrap_socket(raw, server_hostname="backend.default.svc.cluster.local") as s:
        s.sendall(open(path, "rb").read())
        s.unwrap()
"""


def engine_bytes(admin: int) -> int:
    return counter(admin, "dpukit_mesh_record_crypto_engine_bytes_total")


def engine_hw_ns(admin: int) -> int:
    return counter(admin, "dpukit_mesh_record_crypto_engine_hw_ns_total")


class EchoServer(TcpUpstream):
    """A TCP service that sends back what it receives and closes once it has
    sent ``close_after`` bytes (so that a client that never half-closes, as
    ``s_client -quiet``, still sees the end)."""

    def __init__(self, close_after: int):
        self.close_after = close_after
        super().__init__()

    def _conn(self, conn: socket.socket) -> None:
        sent = 0
        with conn:
            while sent < self.close_after:
                data = conn.recv(1 << 16)
                if not data:
                    break
                conn.sendall(data)
                sent += len(data)


def body(n: int, seed: int = 1) -> bytes:
    """Bytes that differ everywhere (a lost, doubled or reordered record shows)."""
    return bytes((i * 131 + seed + i // 4099) & 0xFF for i in range(n))


def relay(port: int, data: bytes, *, timeout: float = 60) -> bytes:
    """Sends ``data`` to ``port`` (plaintext) while reading what comes back, until the peer closes."""
    got = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
        sender.start()
        while chunk := s.recv(1 << 16):
            got += chunk
        sender.join(timeout)
    return bytes(got)


def start_mesh(group: Group, config: str, work: Path, *, port: int, admin: int, speed: str = SPEED,
               dpu_cpus: str | None = None) -> Proxy:
    """dpukit-mesh at ``speed`` (the engine is a BlueField generation's), pinned to ``dpu_cpus`` if given."""
    native_tool("dpukit-mesh")  # skips when not built
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"mesh-{port}.yaml"
    path.write_text(config)
    proc = group.start(mesh_argv(path, dpu_cpus=dpu_cpus, dpu_speed=speed), name=f"mesh-{port}")
    wait_ready(proc, port, admin, timeout=15)
    return Proxy("mesh", proc, port, admin, path)


def server_node(pki: Pki, *, listen: int, admin: int, upstream: int, record_crypto: str = "") -> str:
    """Node B: an mTLS listener (frontend's identity required) relayed by tcp_proxy to ``upstream``."""
    tls = downstream_tls(6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert, san_uris=[FRONTEND],
                         record_crypto=record_crypto)
    return tls_bootstrap(admin=admin, node="node-b", listeners=[listener("in", listen, [
        FilterChain(tcp_proxy_filter("service"), tls)])], clusters=[tls_cluster("service", upstream)])


def client_node(pki: Pki, *, listen: int, admin: int, peer: int, record_crypto: str = "") -> str:
    """Node A: a plaintext listener relayed by tcp_proxy to ``peer`` over mTLS (backend's identity required)."""
    tls = upstream_tls(4, cert=pki.mesh.frontend, ca=pki.mesh.ca.cert, san_uris=[BACKEND], sni=BACKEND_DNS,
                       record_crypto=record_crypto)
    return tls_bootstrap(admin=admin, node="node-a", listeners=[listener("out", listen, [
        FilterChain(tcp_proxy_filter("peer"))])], clusters=[tls_cluster("peer", peer, transport_socket=tls)])


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    with Group(tmp_path / "logs") as g:
        yield g


# -- byte-exact interop ----------------------------------------------------------------------


@pytest.mark.parametrize("a_kind,b_kind", [("envoy", "mesh"), ("mesh", "envoy"), ("mesh", "mesh")],
                         ids=["envoy-to-engine", "engine-to-envoy", "engine-to-engine"])
def test_pair_over_mtls_is_byte_exact_with_the_engine(group: Group, pki: Pki, tmp_path: Path, a_kind: str,
                                                      b_kind: str):
    """client → A (tcp_proxy) → mTLS → B (tcp_proxy) → echo: 8 MiB up and
    the same 8 MiB back, byte for byte; every dpukit-mesh end has its records
    on the engine, and its engine saw them all (both directions)."""
    data = body(BODY)
    echo = EchoServer(len(data))
    try:
        b_listen, b_admin, a_listen, a_admin = (free_port() for _ in range(4))
        rc_b, rc_a = ("ENGINE" if b_kind == "mesh" else ""), ("ENGINE" if a_kind == "mesh" else "")
        b_cfg = server_node(pki, listen=b_listen, admin=b_admin, upstream=echo.port, record_crypto=rc_b)
        a_cfg = client_node(pki, listen=a_listen, admin=a_admin, peer=b_listen, record_crypto=rc_a)
        b = (start_mesh(group, b_cfg, tmp_path / "b", port=b_listen, admin=b_admin) if b_kind == "mesh"
             else start_proxy(group, "envoy", b_cfg, tmp_path / "b", port=b_listen, admin=b_admin))
        a = (start_mesh(group, a_cfg, tmp_path / "a", port=a_listen, admin=a_admin) if a_kind == "mesh"
             else start_proxy(group, "envoy", a_cfg, tmp_path / "a", port=a_listen, admin=a_admin))
        got = relay(a_listen, data)
        assert len(got) == len(data)
        assert got == data, "the bytes that came back differ from those sent"
        for proxy in (p for p in (a, b) if p.kind == "mesh"):
            # Sealed one way and opened the other: the engine saw both directions' payload.
            assert engine_bytes(proxy.admin) >= 2 * len(data)
            assert engine_hw_ns(proxy.admin) > 0
    finally:
        echo.close()


S_CLIENT_CIPHERS = {"TLS 1.3 AES-256-GCM": ["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"],
                    "TLS 1.2 AES-128-GCM": ["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]}


@pytest.mark.parametrize("suite", list(S_CLIENT_CIPHERS))
def test_openssl_s_client_to_the_engine_node(group: Group, pki: Pki, tmp_path: Path, suite: str):
    """``openssl s_client`` (client certificate) → node B with its records on
    the engine → echo: what s_client sends comes back byte for byte."""
    data = body(4 << 20, seed=7)
    echo = EchoServer(len(data))
    try:
        listen, admin = free_port(), free_port()
        start_mesh(group, server_node(pki, listen=listen, admin=admin, upstream=echo.port, record_crypto="ENGINE"),
                   tmp_path, port=listen, admin=admin)
        run = subprocess.run(["openssl", "s_client", "-quiet", "-connect", f"127.0.0.1:{listen}",
                              "-cert", str(pki.mesh.frontend.cert), "-key", str(pki.mesh.frontend.key),
                              "-CAfile", str(pki.mesh.ca.cert), "-verify_return_error",
                              *S_CLIENT_CIPHERS[suite]], input=data, capture_output=True, timeout=60)
        assert len(run.stdout) == len(data), run.stderr.decode(errors="replace")[-2000:]
        assert run.stdout == data
        assert engine_bytes(admin) >= 2 * len(data)
    finally:
        echo.close()


def start_s_server(pki: Pki, *args: str, cwd: Path, stdout=subprocess.DEVNULL) -> tuple[subprocess.Popen, int]:
    """``openssl s_server`` with backend's certificate, a client certificate
    required (-Verify 1); its port once it accepts (a probe it takes as a
    failed handshake, and goes on). Its input stays open: at its end s_server
    would close the connection."""
    port = free_port()
    server = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-cert", str(pki.mesh.backend.cert),
                               "-key", str(pki.mesh.backend.key), "-CAfile", str(pki.mesh.ca.cert), "-Verify", "1",
                               "-verify_return_error", *args], cwd=cwd, stdin=subprocess.PIPE, stdout=stdout,
                              stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, port


def test_the_engine_node_to_openssl_s_server(group: Group, pki: Pki, tmp_path: Path):
    """node A with its records on the engine → ``openssl s_server``: what
    the client sends through A is what ``s_server -quiet`` prints (A seals),
    and a file ``s_server -WWW`` serves is what the client receives through
    A (A opens), byte for byte."""
    up, down = body(4 << 20, seed=3), body(4 << 20, seed=5)
    (tmp_path / "down.bin").write_bytes(down)
    servers = []
    try:
        with open(tmp_path / "up.bin", "wb") as out:
            sink, sink_port = start_s_server(pki, "-quiet", cwd=tmp_path, stdout=out)
        servers.append(sink)
        www, www_port = start_s_server(pki, "-WWW", cwd=tmp_path)
        servers.append(www)
        proxies = {}
        for name, peer in (("up", sink_port), ("down", www_port)):
            listen, admin = free_port(), free_port()
            proxies[name] = start_mesh(group, client_node(pki, listen=listen, admin=admin, peer=peer,
                                                          record_crypto="ENGINE"), tmp_path / name,
                                       port=listen, admin=admin)
        with socket.create_connection(("127.0.0.1", proxies["up"].port), timeout=30) as s:
            s.sendall(up)
            s.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + 30
            while (tmp_path / "up.bin").stat().st_size < len(up) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert (tmp_path / "up.bin").read_bytes() == up
        answer = relay(proxies["down"].port, b"GET /down.bin HTTP/1.0\r\n\r\n", timeout=30)
        head, _, got = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200"), answer[:200]
        assert got == down
        assert engine_bytes(proxies["up"].admin) >= len(up)
        assert engine_bytes(proxies["down"].admin) >= len(down)
    finally:
        for server in servers:
            server.kill()
            server.communicate()


# -- where the CPU goes ------------------------------------------------------------------------


def test_bulk_records_on_the_engine_count_as_hw_and_on_the_cores_not(group: Group, pki: Pki, tmp_path: Path):
    """Node B at bluefield3 (pinned to the dpu CPU) opening 16 MiB of records
    and relaying them to a sink, once with its records on the cores and once
    on the engine: the engine node counts every byte and hw time; the cores
    node's engine counters stay at 0. (That the engine lowers the dpu CPU per
    byte is a timing figure, not asserted here: `dpukit eval --dpu bluefield3
    --only mesh.tls` measures it in paired rounds with its goal, < 0.95 of
    the cores'; that the dilation excludes the engine's time is
    EngineCrypto.TheLoopsDilationExcludesTheEnginesTime in mesh_tests.)"""
    # The sink and the sender are processes of their own: in this one they would share its GIL.
    sink_port = free_port()
    group.start([sys.executable, "-c", SINK, str(sink_port)], name="sink").wait_port(sink_port)
    data = tmp_path / "data.bin"
    size = 16 << 20
    data.write_bytes(body(size, seed=9))
    for rc in ("CORES", "ENGINE"):
        listen, admin = free_port(), free_port()
        node = start_mesh(group, server_node(pki, listen=listen, admin=admin, upstream=sink_port, record_crypto=rc),
                          tmp_path / rc, port=listen, admin=admin, dpu_cpus=DPU_CPU)
        run = subprocess.run([sys.executable, "-c", SENDER, str(node.port), str(data), str(pki.mesh.ca.cert),
                              str(pki.mesh.frontend.cert), str(pki.mesh.frontend.key)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr[-2000:]
        if rc == "ENGINE":
            deadline = time.monotonic() + 10  # the counters as the admin's next scrape sums them
            while engine_bytes(node.admin) < size and time.monotonic() < deadline:
                time.sleep(0.05)
            assert engine_bytes(node.admin) >= size
            assert engine_hw_ns(node.admin) > 0
        else:
            assert engine_bytes(node.admin) == 0 and engine_hw_ns(node.admin) == 0


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("speed", ["host", "0.5"])
def test_the_engine_is_refused_without_a_bluefield_generation(pki: Pki, tmp_path: Path, speed: str):
    tool = native_tool("dpukit-mesh")
    config = tmp_path / "engine.yaml"
    config.write_text(server_node(pki, listen=free_port(), admin=free_port(), upstream=free_port(),
                                  record_crypto="ENGINE"))
    run = subprocess.run([str(tool), "run", "--config", str(config), "--dpu-speed", speed],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert re.search(r"transport_socket\.typed_config\.record_crypto: ENGINE needs the dpu speed of a BlueField "
                     rf"generation \(--dpu-speed bluefield2 or bluefield3\), not '{re.escape(speed)}'", run.stderr), \
        run.stderr


def test_an_unknown_field_of_the_engine_socket_is_refused_by_path(pki: Pki, tmp_path: Path):
    tool = native_tool("dpukit-mesh")
    config = tmp_path / "engine.yaml"
    text = server_node(pki, listen=free_port(), admin=free_port(), upstream=free_port(), record_crypto="ENGINE")
    config.write_text(text.replace("record_crypto: ENGINE", "record_crypto: ENGINE\n          engine_queue: 4"))
    run = subprocess.run([str(tool), "validate", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.engine_queue" in \
        run.stdout + run.stderr
    assert "unknown field" in run.stdout + run.stderr


# -- the mesh.tls eval at bluefield3: test_mesh_tls_eval.py's one run shows the engine pair


def test_the_engine_pair_is_left_out_without_a_bluefield_generation(monkeypatch):
    from dpukit.experiments import mesh_tls
    monkeypatch.setenv("DPUKIT_DPU_SPEED", "host")
    tops, left_out = mesh_tls.with_engine(mesh_tls.request_topologies)(True)
    assert [t.name for t in tops] == ["direct", "envoy-sidecars", "node-proxy-pair"]
    assert "names none" in left_out["node-proxy-pair-engine"]
    monkeypatch.setenv("DPUKIT_DPU_SPEED", "bluefield2")
    tops, left_out = mesh_tls.with_engine(mesh_tls.bulk_topologies)(True)
    assert [t.name for t in tops][-1] == "node-proxy-pair-engine" and not left_out
