"""Mutual TLS between node proxies, configured as Envoy is: every test runs
against Envoy 1.40 (the reference: the configuration format and the ssl.*
counters are Envoy's) and against dpukit-mesh on the same YAML.

What is checked: a request over mTLS with a SPIFFE identity; every refusal
with the alert the client receives and the counter that records it
(untrusted certificate, SAN that does not match, expired certificate, no
client certificate where one is required, plaintext to a TLS listener, a
TLS 1.0 client); per-version and per-cipher counts; ``tls_params``; one
listener serving TLS and plaintext by ``tls_inspector`` and
``filter_chain_match`` (transport_protocol, server_names,
application_protocols); HTTP/2 by ALPN; curl and openssl s_client; session
resumption, TLS 1.3 tickets sent with the first write; the configured
certificate chain as presented; certificate rotation through an SDS file
with no restart, an open connection kept; and the two-node topology
(client → node proxy A → mTLS → node proxy B → service) with Envoy and
dpukit-mesh at either end.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from conftest import native_tool
from mesh_support import Echoes, Proxy, envoy_bin, request, start_proxy
from tls_support import *  # noqa: F401,F403
from tls_support import (BACKEND_DNS, TLS_KINDS, FilterChain, Pki, client_context, cluster_ssl, curl,
                         downstream_tls, hcm_filter, listener, listener_ssl, openssl_s_client, plaintext_exchange,
                         sds_certificate_file, spiffe_id, tcp_proxy_filter, tls_bootstrap, tls_cluster, tls_connect,
                         tls_exchange, tls_get, tls_refusal, upstream_tls, wait_counter, wait_for)
from dpukit.procs import Group, free_port

FRONTEND, BACKEND, OTHER = spiffe_id("frontend"), spiffe_id("backend"), spiffe_id("other")
OTHER_DNS = "other.default.svc.cluster.local"


# -- the server-side node proxy ("node B"), one per kind for the module --------------------------


@dataclass
class Inbound:
    """A server-side node proxy and its listeners (ports)."""

    proxy: Proxy
    strict: int    # mTLS only: client certificate required, SAN must be frontend's
    mixed: int     # tls_inspector: TLS chain (as strict) and a plaintext chain
    optional: int  # server TLS only, TLS 1.2 and one cipher (tls_params)
    sni: int       # tls_inspector: chains by server_names and application_protocols
    tcp: int       # mTLS into tcp_proxy

    @property
    def admin(self) -> int:
        return self.proxy.admin


def inbound_config(pki: Pki, sds: Path, *, admin: int, ports: dict[str, int], echo: dict[str, int]) -> str:
    mtls = dict(sds=sds, secret="backend", ca=pki.mesh.ca.cert, san_uris=[FRONTEND], alpn=["h2", "http/1.1"])
    server_only = dict(cert=pki.mesh.backend, require_client_certificate=False)
    listeners = [
        listener("strict", ports["strict"], [FilterChain(hcm_filter("backend"), downstream_tls(6, **mtls))]),
        listener("mixed", ports["mixed"], [
            FilterChain(hcm_filter("backend"), downstream_tls(6, **mtls), {"transport_protocol": "tls"}, "tls"),
            FilterChain(hcm_filter("plain"), "", {"transport_protocol": "raw_buffer"}, "plaintext"),
        ], inspector=True),
        listener("optional", ports["optional"], [FilterChain(hcm_filter("backend"), downstream_tls(
            6, **server_only, max_version="TLSv1_2", ciphers=["ECDHE-ECDSA-AES256-GCM-SHA384"]))]),
        listener("sni", ports["sni"], [
            FilterChain(hcm_filter("alpn-h2"), downstream_tls(6, **server_only, alpn=["h2"]),
                        {"server_names": f"[{BACKEND_DNS}]", "application_protocols": "[h2]"}, "backend-h2"),
            FilterChain(hcm_filter("backend"), downstream_tls(6, **server_only, alpn=["http/1.1"]),
                        {"server_names": f"[{BACKEND_DNS}]"}, "backend"),
            FilterChain(hcm_filter("other"), downstream_tls(6, **server_only), {"server_names": f"[{OTHER_DNS}]"},
                        "other"),
        ], inspector=True),
        listener("tcp", ports["tcp"], [FilterChain(tcp_proxy_filter("backend"), downstream_tls(6, **mtls))]),
    ]
    clusters = [tls_cluster(name, port) for name, port in echo.items()]
    return tls_bootstrap(admin=admin, listeners=listeners, clusters=clusters, node="node-b")


class Nodes:
    """Node proxies started on demand and kept for the module (Envoy takes
    about a second to start); a node that failed to start fails every test
    that asks for it, with the same error, without a second try."""

    def __init__(self, group: Group, work: Path, pki: Pki):
        self.group, self.work, self.pki = group, work, pki
        self.echoes = Echoes(group)
        self._made: dict[tuple, object] = {}

    def start_echo(self, name: str) -> int:
        """The echo service ``name`` (started once); its port."""
        if name not in self.echoes.ports:
            self.echoes.start(name)
        return self.echoes.ports[name]

    def _once(self, key: tuple, make):
        if key not in self._made:
            try:
                self._made[key] = make()
            except Exception as e:  # noqa: BLE001 - kept and raised again for every test that needs it
                self._made[key] = e
        got = self._made[key]
        if isinstance(got, Exception):
            raise got
        return got

    def inbound(self, kind: str) -> Inbound:
        def make() -> Inbound:
            echo = {n: self.start_echo(n) for n in ("backend", "plain", "other", "alpn-h2")}
            ports = {k: free_port() for k in ("strict", "mixed", "optional", "sni", "tcp")}
            admin = free_port()
            work = self.work / f"inbound-{kind}"
            work.mkdir(parents=True, exist_ok=True)
            sds = sds_certificate_file(work / "sds-backend.yaml", "backend", self.pki.mesh.backend)
            proxy = start_proxy(self.group, kind, inbound_config(self.pki, sds, admin=admin, ports=ports, echo=echo),
                                work, port=ports["strict"], admin=admin)
            return Inbound(proxy, **ports)
        return self._once(("inbound", kind), make)

    def outbound(self, kind: str, peer: Inbound) -> "Outbound":
        return self._once(("outbound", kind, peer.proxy.kind), lambda: start_outbound(self, kind, peer))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Nodes]:
    work = tmp_path_factory.mktemp("tls-nodes")
    with Group(work / "logs") as group:
        yield Nodes(group, work, pki)


@pytest.fixture(params=TLS_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def node_b(nodes: Nodes, kind: str) -> Inbound:
    return nodes.inbound(kind)


# -- mTLS requests and every refusal ---------------------------------------------------------


def test_mtls_request_with_spiffe_identity(node_b: Inbound, pki: Pki):
    before = listener_ssl(node_b.admin, node_b.strict, "handshake")
    ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
    reply = tls_get(node_b.strict, ctx, "/hello")
    assert (reply.status, reply.headers.get("x-served-by"), reply.headers.get("x-echo-path")) == \
        (200, "backend", "/hello")
    assert reply.version == "TLSv1.3" and reply.peer_serial == pki.mesh.backend.serial
    assert wait_counter(node_b.admin, lambda a: listener_ssl(a, node_b.strict, "handshake"), before + 1,
                        "ssl.handshake") == before + 1
    assert listener_ssl(node_b.admin, node_b.strict, "versions", envoy_ssl_version="TLSv1.3") >= 1
    assert listener_ssl(node_b.admin, node_b.strict, "ciphers", envoy_ssl_cipher=reply.cipher) >= 1


# (client certificate, TLS version, the alert the client receives, the counter that counts it)
REFUSALS = {
    "untrusted-certificate": ("rogue", "1.3", "TLSV1_ALERT_UNKNOWN_CA", "fail_verify_error"),
    "untrusted-certificate-tls12": ("rogue", "1.2", "TLSV1_ALERT_UNKNOWN_CA", "fail_verify_error"),
    "san-not-matching": ("backend", "1.3", "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "fail_verify_san"),
    "san-not-matching-tls12": ("backend", "1.2", "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "fail_verify_san"),
    "expired-certificate": ("expired", "1.3", "SSLV3_ALERT_CERTIFICATE_EXPIRED", "fail_verify_error"),
    "no-client-certificate": (None, "1.3", "TLSV13_ALERT_CERTIFICATE_REQUIRED", "fail_verify_no_cert"),
    "no-client-certificate-tls12": (None, "1.2", "SSLV3_ALERT_HANDSHAKE_FAILURE", "fail_verify_no_cert"),
    "tls10-client": ("frontend", "1.0", "TLSV1_ALERT_PROTOCOL_VERSION", "connection_error"),
}


def pem_of(pki: Pki, name: str | None):
    return None if name is None else {"rogue": pki.rogue, "backend": pki.mesh.backend, "expired": pki.expired,
                                      "frontend": pki.mesh.frontend}[name]


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusal_alert_and_counter(node_b: Inbound, pki: Pki, case: str):
    cert, version, alert, counter_name = REFUSALS[case]
    admin, port = node_b.admin, node_b.strict
    before = {n: listener_ssl(admin, port, n) for n in ("handshake", counter_name)}
    got = tls_refusal(port, client_context(ca=pki.mesh.ca.cert, cert=pem_of(pki, cert), version=version))
    assert wait_counter(admin, lambda a: listener_ssl(a, port, counter_name), before[counter_name] + 1,
                        f"ssl.{counter_name}") == before[counter_name] + 1
    assert listener_ssl(admin, port, "handshake") == before["handshake"]
    assert got == alert


def test_plaintext_to_a_tls_listener_is_refused(node_b: Inbound):
    admin, port = node_b.admin, node_b.strict
    before = listener_ssl(admin, port, "connection_error")
    assert plaintext_exchange(port) == b""  # closed, no HTTP answer and no bytes in the clear
    assert wait_counter(admin, lambda a: listener_ssl(a, port, "connection_error"), before + 1,
                        "ssl.connection_error") == before + 1


def test_tls_params_version_and_cipher(node_b: Inbound, pki: Pki):
    """The optional listener allows TLS 1.2 at most and one cipher suite;
    without a client certificate it counts ssl.no_certificate."""
    admin, port = node_b.admin, node_b.optional
    before = listener_ssl(admin, port, "no_certificate")
    reply = tls_get(port, client_context(ca=pki.mesh.ca.cert))
    assert (reply.status, reply.version, reply.cipher) == (200, "TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")
    assert wait_counter(admin, lambda a: listener_ssl(a, port, "no_certificate"), before + 1,
                        "ssl.no_certificate") == before + 1
    assert listener_ssl(admin, port, "versions", envoy_ssl_version="TLSv1.2") >= 1
    assert listener_ssl(admin, port, "ciphers", envoy_ssl_cipher="ECDHE-ECDSA-AES256-GCM-SHA384") >= 1
    assert listener_ssl(admin, port, "versions", envoy_ssl_version="TLSv1.3") == 0
    # A client that insists on TLS 1.3 is refused with protocol_version.
    assert tls_refusal(port, client_context(ca=pki.mesh.ca.cert, version="1.3")) == "TLSV1_ALERT_PROTOCOL_VERSION"


# -- one listener, TLS and plaintext; filter_chain_match ---------------------------------------------


def test_tls_inspector_serves_tls_and_plaintext_on_one_listener(node_b: Inbound, pki: Pki):
    tls = tls_get(node_b.mixed, client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend))
    assert (tls.status, tls.headers.get("x-served-by")) == (200, "backend")
    plain = request(node_b.mixed, host=BACKEND_DNS)
    assert (plain.status, plain.header("x-served-by")) == (200, "plain")
    # The TLS chain keeps its checks: no client certificate is refused there.
    assert tls_refusal(node_b.mixed, client_context(ca=pki.mesh.ca.cert)) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"


def test_filter_chain_match_server_names_and_application_protocols(node_b: Inbound, pki: Pki):
    port, ctx = node_b.sni, client_context(ca=pki.mesh.ca.cert)
    assert tls_get(port, ctx).headers.get("x-served-by") == "backend"
    other = tls_get(port, client_context(ca=None), sni=OTHER_DNS)
    assert (other.status, other.headers.get("x-served-by")) == (200, "other")
    # ALPN h2 picks the application_protocols chain; curl speaks HTTP/2 there.
    h2 = curl(port, pki, "--http2")
    assert h2.returncode == 0, h2.stderr
    assert h2.stdout.startswith("HTTP/2 200") and "x-served-by: alpn-h2" in h2.stdout
    h1 = curl(port, pki, "--http1.1")
    assert h1.stdout.startswith("HTTP/1.1 200") and "x-served-by: backend" in h1.stdout
    # A server name no chain matches: the connection is closed, nothing is served.
    assert tls_refusal(port, client_context(ca=None), sni="nobody.example") in ("closed", "reset",
                                                                                "SSLV3_ALERT_HANDSHAKE_FAILURE")


# -- clients: curl, openssl s_client; HTTP/2 by ALPN; session resumption -------------------------


def test_curl_mtls_http2_and_http11_by_alpn(node_b: Inbound, pki: Pki):
    h2 = curl(node_b.strict, pki, "--http2", path="/h2")
    assert h2.returncode == 0, h2.stderr
    assert h2.stdout.startswith("HTTP/2 200") and "x-echo-path: /h2" in h2.stdout
    h1 = curl(node_b.strict, pki, "--http1.1", path="/h1")
    assert h1.returncode == 0, h1.stderr
    assert h1.stdout.startswith("HTTP/1.1 200") and "x-echo-path: /h1" in h1.stdout
    # Without a client certificate curl is refused (the alert of TLS 1.3 may reach it as a broken pipe:
    # curl writes its request before it reads).
    run = subprocess.run(["curl", "-sS", "--max-time", "10", "--cacert", str(pki.mesh.ca.cert), "--resolve",
                          f"{BACKEND_DNS}:{node_b.strict}:127.0.0.1", f"https://{BACKEND_DNS}:{node_b.strict}/"],
                         capture_output=True, text=True, timeout=20)
    assert run.returncode != 0 and run.stdout == "", run.stderr


def s_client_args(pki: Pki) -> list[str]:
    m = pki.mesh
    return ["-cert", str(m.frontend.cert), "-key", str(m.frontend.key), "-CAfile", str(m.ca.cert), "-servername",
            BACKEND_DNS, "-verify_return_error"]


REQUEST = f"GET /s HTTP/1.1\r\nHost: {BACKEND_DNS}\r\nConnection: close\r\n\r\n".encode()


def test_openssl_s_client_alpn_and_verification(node_b: Inbound, pki: Pki):
    out = openssl_s_client(node_b.strict, *s_client_args(pki), "-alpn", "h2")
    assert "Verify return code: 0 (ok)" in out and "ALPN protocol: h2" in out, out
    assert "New, TLSv1.3" in out, out
    out = openssl_s_client(node_b.strict, *s_client_args(pki), "-ign_eof", stdin=REQUEST)
    assert "HTTP/1.1 200" in out and "x-echo-path: /s" in out, out


def test_session_resumption_by_ticket(node_b: Inbound, pki: Pki, tmp_path: Path):
    admin, port = node_b.admin, node_b.strict
    before = listener_ssl(admin, port, "session_reused")
    session = tmp_path / "session.pem"
    first = openssl_s_client(port, *s_client_args(pki), "-ign_eof", "-sess_out", str(session), stdin=REQUEST)
    assert "New, TLSv1.3" in first and "HTTP/1.1 200" in first, first
    second = openssl_s_client(port, *s_client_args(pki), "-ign_eof", "-sess_in", str(session), stdin=REQUEST)
    assert "Reused, TLSv1.3" in second and "HTTP/1.1 200" in second, second
    assert wait_counter(admin, lambda a: listener_ssl(a, port, "session_reused"), before + 1,
                        "ssl.session_reused") == before + 1
    # TLS 1.2 resumes by ticket too.
    first = openssl_s_client(port, *s_client_args(pki), "-tls1_2", "-ign_eof", "-sess_out", str(session),
                             stdin=REQUEST)
    assert "New, TLSv1.2" in first, first
    second = openssl_s_client(port, *s_client_args(pki), "-tls1_2", "-ign_eof", "-sess_in", str(session),
                              stdin=REQUEST)
    assert "Reused, TLSv1.2" in second and "HTTP/1.1 200" in second, second


def test_tls13_tickets_come_with_the_first_write(node_b: Inbound, pki: Pki):
    """As from Envoy (BoringSSL holds them until it writes): no ticket
    while the listener has written nothing, then its tickets ahead of the
    first response."""
    ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend, version="1.3")
    with tls_connect(node_b.strict, ctx) as sock:
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # OpenSSL reads any ticket the listener sent
        assert not sock.session.has_ticket
        sock.settimeout(5)
        reply = tls_exchange(sock, "/tickets", close=True)
        assert reply.status == 200 and sock.session.has_ticket


def test_the_listener_presents_its_configured_chain(node_b: Inbound, pki: Pki):
    """The certificate_chain as configured (the backend's leaf alone), as
    Envoy presents it: not a chain OpenSSL builds from trusted_ca."""
    out = openssl_s_client(node_b.strict, *s_client_args(pki), "-showcerts", "-ign_eof", stdin=REQUEST)
    assert "HTTP/1.1 200" in out, out
    assert out.count("-----BEGIN CERTIFICATE-----") == 1, out


# -- rotation through the SDS file -----------------------------------------------------------


def rotating_inbound(nodes: Nodes, pki: Pki, tmp_path: Path) -> tuple[Path, int, int, str]:
    """An inbound mTLS listener whose certificate comes from an SDS file:
    (the SDS file, the listener port, the admin port, the bootstrap)."""
    echo = nodes.start_echo("backend")
    port, admin = free_port(), free_port()
    sds = sds_certificate_file(tmp_path / "sds.yaml", "backend", pki.mesh.backend)
    config = tls_bootstrap(admin=admin, clusters=[tls_cluster("backend", echo)], listeners=[listener(
        "inbound", port, [FilterChain(hcm_filter("backend"), downstream_tls(
            6, sds=sds, secret="backend", ca=pki.mesh.ca.cert, san_uris=[FRONTEND]))])])
    return sds, port, admin, config


def test_rotation_without_restart(kind: str, nodes: Nodes, pki: Pki, tmp_path: Path):
    """The SDS file is rewritten with a new certificate: new handshakes get
    it, a keep-alive connection opened before keeps working, and the proxy
    is the same process."""
    sds, port, admin, config = rotating_inbound(nodes, pki, tmp_path)
    with Group(tmp_path / "logs") as group:
        proxy = start_proxy(group, kind, config, tmp_path, port=port, admin=admin)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        kept = tls_connect(port, ctx)
        try:
            first = tls_exchange(kept)
            assert (first.status, first.peer_serial) == (200, pki.mesh.backend.serial)
            rotated = pki.factory.issue("backend-rotated", pki.mesh.ca, uris=[BACKEND], dns=[BACKEND_DNS])
            sds_certificate_file(sds, "backend", rotated)
            wait_for("a new handshake presents the rotated certificate",
                     lambda: tls_get(port, ctx).peer_serial == rotated.serial)
            again = tls_exchange(kept)
            assert (again.status, again.peer_serial) == (200, pki.mesh.backend.serial)
            assert tls_get(port, ctx).peer_serial == rotated.serial
        finally:
            kept.close()
        proxy.proc.check_alive()  # the same process all along: no restart


def test_rotation_while_handshakes_run(kind: str, nodes: Nodes, pki: Pki, tmp_path: Path):
    """The SDS file is rotated again and again while four clients keep
    making new connections: none of them fails, each new certificate reaches
    new handshakes, and an SDS file caught half-written (rewritten in place,
    not renamed) is refused with the certificate in use kept. (A rotation
    used to free the verification data of the handshakes under way: the
    proxy crashed, and CI saw a connection closed before a response.)"""
    sds, port, admin, config = rotating_inbound(nodes, pki, tmp_path)
    rotated = [pki.factory.issue(f"backend-r{i}", pki.mesh.ca, uris=[BACKEND], dns=[BACKEND_DNS]) for i in range(3)]
    with Group(tmp_path / "logs") as group:
        proxy = start_proxy(group, kind, config, tmp_path, port=port, admin=admin)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        stop, failures, served = threading.Event(), [], [0]

        def client() -> None:
            while not stop.is_set():
                try:
                    assert tls_get(port, ctx).status == 200
                    served[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    failures.append(repr(e))
                    return

        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        for t in clients:
            t.start()
        try:
            current = pki.mesh.backend
            for i, cert in enumerate(rotated):
                if i == 1:
                    # A node agent caught mid-write: half the file, in place.
                    whole = sds_certificate_file(tmp_path / "next.yaml", "backend", cert).read_text()
                    sds.write_text(whole[: len(whole) // 2])
                    time.sleep(2.5)  # the proxy looks once a second: two looks
                    assert tls_get(port, ctx).peer_serial == current.serial
                sds_certificate_file(sds, "backend", cert)
                wait_for(f"rotation {i}: a new handshake presents the new certificate",
                         lambda: tls_get(port, ctx).peer_serial == cert.serial)
                current = cert
                assert not failures, failures
        finally:
            stop.set()
            for t in clients:
                t.join(timeout=15)
        assert not failures, failures
        assert served[0] > 0
        proxy.proc.check_alive()


# -- the two-node topology: client → node proxy A → mTLS → node proxy B → service -----------------


@dataclass
class Outbound:
    """A client-side node proxy: plaintext listeners in, mTLS out to node B."""

    proxy: Proxy
    http: int      # → cluster to_b (HTTP/1.1 over mTLS)
    h2: int        # → cluster to_b_h2 (HTTP/2 over mTLS, ALPN h2, to B's sni listener)
    tcp: int       # tcp_proxy → cluster to_b_tcp (mTLS to B's tcp_proxy listener)
    wrong_san: int  # → cluster to_b_wrong_san (expects sa/other; B is sa/backend)
    peer: Inbound = field(repr=False)


def start_outbound(nodes: Nodes, kind: str, b: Inbound) -> Outbound:
    client = dict(cert=nodes.pki.mesh.frontend, ca=nodes.pki.mesh.ca.cert, sni=BACKEND_DNS)
    ports = {k: free_port() for k in ("http", "h2", "tcp", "wrong_san")}
    admin = free_port()
    listeners = [
        listener("http", ports["http"], [FilterChain(hcm_filter("to_b", stat_prefix="outbound"))]),
        listener("h2", ports["h2"], [FilterChain(hcm_filter("to_b_h2", stat_prefix="outbound_h2"))]),
        listener("tcp", ports["tcp"], [FilterChain(tcp_proxy_filter("to_b_tcp"))]),
        listener("wrong_san", ports["wrong_san"], [FilterChain(hcm_filter("to_b_wrong_san", stat_prefix="wrong"))]),
    ]
    clusters = [
        tls_cluster("to_b", b.strict, transport_socket=upstream_tls(4, san_uris=[BACKEND], **client)),
        tls_cluster("to_b_h2", b.sni, http2=True,
                    transport_socket=upstream_tls(4, san_uris=[BACKEND], alpn=["h2"], **client)),
        tls_cluster("to_b_tcp", b.tcp, transport_socket=upstream_tls(4, san_uris=[BACKEND], **client)),
        tls_cluster("to_b_wrong_san", b.strict, transport_socket=upstream_tls(4, san_uris=[OTHER], **client)),
    ]
    work = nodes.work / f"outbound-{kind}-to-{b.proxy.kind}"
    config = tls_bootstrap(admin=admin, listeners=listeners, clusters=clusters, node="node-a")
    proxy = start_proxy(nodes.group, kind, config, work, port=ports["http"], admin=admin)
    return Outbound(proxy, peer=b, **ports)


# Envoy and dpukit-mesh (run to completion) at either end; the pipelined model at both ends.
PAIRS = [f"{a}-to-{b}" for a, b in itertools.product(["envoy", "mesh"], repeat=2)] + \
    ["mesh-pipelined-to-mesh-pipelined"]


@pytest.fixture(params=PAIRS)
def pair(request: pytest.FixtureRequest, nodes: Nodes) -> Outbound:
    """Node proxy A (first kind) in front of node proxy B (second kind);
    envoy-to-mesh and mesh-to-envoy are the interop cases."""
    a, b = request.param.split("-to-")
    return nodes.outbound(a, nodes.inbound(b))


def test_two_nodes_http_over_mtls(pair: Outbound):
    a, b = pair.proxy, pair.peer
    b_before = listener_ssl(b.admin, b.strict, "handshake")
    r = request(pair.http, path="/two-nodes", host=BACKEND_DNS)
    assert (r.status, r.header("x-served-by"), r.header("x-echo-path")) == (200, "backend", "/two-nodes")
    assert wait_counter(a.admin, lambda x: cluster_ssl(x, "to_b", "handshake"), 1, "A's cluster ssl.handshake") >= 1
    assert wait_counter(b.admin, lambda x: listener_ssl(x, b.strict, "handshake"), b_before + 1,
                        "B's listener ssl.handshake") >= b_before + 1
    for i in range(5):  # the upstream connection is pooled: more requests, no new handshake needed
        assert request(pair.http, path=f"/again/{i}", host=BACKEND_DNS).status == 200


def test_two_nodes_http2_over_mtls(pair: Outbound):
    """A's HTTP/2 cluster offers ALPN h2: B's listener picks the filter chain
    that matches application_protocols [h2] (its service says alpn-h2)."""
    r = request(pair.h2, path="/h2-upstream", host=BACKEND_DNS)
    assert (r.status, r.header("x-served-by")) == (200, "alpn-h2")
    assert wait_counter(pair.proxy.admin, lambda x: cluster_ssl(x, "to_b_h2", "handshake"), 1,
                        "A's h2 cluster ssl.handshake") >= 1


def test_two_nodes_tcp_proxy_over_mtls(pair: Outbound):
    r = request(pair.tcp, path="/l4", host=BACKEND_DNS)
    assert (r.status, r.header("x-served-by"), r.header("x-echo-path")) == (200, "backend", "/l4")
    assert wait_counter(pair.proxy.admin, lambda x: cluster_ssl(x, "to_b_tcp", "handshake"), 1,
                        "A's tcp cluster ssl.handshake") >= 1


def test_two_nodes_upstream_san_mismatch(pair: Outbound):
    """A expects sa/other behind the cluster and B is sa/backend: A refuses
    the upstream handshake (cluster ssl.fail_verify_san) and answers 503."""
    before = cluster_ssl(pair.proxy.admin, "to_b_wrong_san", "fail_verify_san")
    r = request(pair.wrong_san, path="/", host=BACKEND_DNS)
    assert r.status == 503
    assert wait_counter(pair.proxy.admin, lambda x: cluster_ssl(x, "to_b_wrong_san", "fail_verify_san"), before + 1,
                        "A's cluster ssl.fail_verify_san") >= before + 1


# -- mesh/examples/mtls-node.yaml ---------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "mesh" / "examples" / "mtls-node.yaml"


def test_example_node_serves_its_mtls_path(kind: str, nodes: Nodes, tmp_path: Path):
    """The shipped node configuration, run as it is (only its ports moved):
    outbound → mTLS → its own inbound → the backend, and plaintext on the
    inbound listener by its second filter chain."""
    svc = nodes.start_echo("backend")
    inbound, outbound, admin = free_port(), free_port(), free_port()
    text = EXAMPLE.read_text()
    for old, new in ((8080, svc), (15006, inbound), (15001, outbound), (15000, admin)):
        assert f"port_value: {old}}}" in text
        text = text.replace(f"port_value: {old}}}", f"port_value: {new}}}")
    with Group(tmp_path / "logs") as group:
        proxy = start_proxy(group, kind, text, tmp_path, port=outbound, admin=admin)
        r = request(outbound, path="/via-mtls", host=BACKEND_DNS)
        assert (r.status, r.header("x-served-by"), r.header("x-echo-path")) == (200, "backend", "/via-mtls")
        assert wait_counter(admin, lambda a: listener_ssl(a, inbound, "handshake", host="0.0.0.0"), 1,
                            "the inbound listener's ssl.handshake") >= 1
        plain = request(inbound, path="/plain", host="backend")
        assert (plain.status, plain.header("x-served-by")) == (200, "backend")
        proxy.proc.check_alive()


def test_example_certificates():
    """The example's inline demonstration PKI: the workload certificates
    chain to its CA, carry their SPIFFE identities, and stay valid for years."""
    import datetime

    from cryptography import x509
    pems = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----",
                      re.sub(r"\n\s+", "\n", EXAMPLE.read_text()), re.S)
    certs = {c.serial_number: c for c in (x509.load_pem_x509_certificate(p.encode()) for p in pems)}
    ca = next(c for c in certs.values() if c.issuer == c.subject)
    leaves = {c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
              .get_values_for_type(x509.UniformResourceIdentifier)[0]: c for c in certs.values() if c is not ca}
    assert set(leaves) == {FRONTEND, BACKEND}
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=365)
    for c in [ca, *leaves.values()]:
        assert c.not_valid_after_utc > soon
    for leaf in leaves.values():
        leaf.verify_directly_issued_by(ca)


def test_unknown_tls_field_is_refused_by_path(pki: Pki, tmp_path: Path):
    """A misspelt DownstreamTlsContext field: Envoy refuses the bootstrap,
    and dpukit-mesh validate exits 2 naming the field's path."""
    good = tls_bootstrap(admin=free_port(), clusters=[tls_cluster("backend", 1)], listeners=[listener(
        "inbound", free_port(), [FilterChain(hcm_filter("backend"), downstream_tls(
            6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert, san_uris=[FRONTEND]))])])
    assert "require_client_certificate: true" in good
    for text, ok in ((good, True), (good.replace("require_client_certificate", "require_client_certifcate"), False)):
        path = tmp_path / "b.yaml"
        path.write_text(text)
        envoy = subprocess.run([str(envoy_bin()), "--mode", "validate", "-c", str(path), "-l", "error"],
                               capture_output=True, text=True, timeout=60)
        ours = subprocess.run([str(native_tool("dpukit-mesh")), "validate", "--config", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert (envoy.returncode == 0, ours.returncode == 0) == (ok, ok), envoy.stderr + ours.stderr
        if not ok:
            assert "require_client_certifcate" in envoy.stdout + envoy.stderr
            assert ours.returncode == 2
            assert "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config." \
                   "require_client_certifcate" in ours.stderr, ours.stderr
