"""Shared pieces of the mutual-TLS tests: the test PKI (a mesh CA, an
untrusted CA, SPIFFE workload certificates, an expired one), TLS clients that
report what happened on the wire (the alert a refusal carries, the peer
certificate's serial, the negotiated version and ALPN), and readers of
Envoy's ``ssl.*`` counters from ``/stats/prometheus``.

The certificate factory and the Envoy-format YAML builders live in
``dpukit.experiments.mesh_tls`` (the ``mesh.tls`` experiment makes the same
certificates and configurations); they are re-exported here.
"""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from dpukit.experiments.mesh_tls import (BACKEND_DNS, CertFactory, FilterChain, MeshCerts, Pem,  # noqa: F401
                                         downstream_tls, hcm_filter, listener, mesh_certs, sds_certificate_file,
                                         spiffe_id, tcp_proxy_filter, tls_bootstrap, tls_cluster, upstream_tls)

# Envoy 1.40 (the reference) and dpukit-mesh in both execution models.
TLS_KINDS = ["envoy", "mesh", "mesh-pipelined"]


@dataclass(frozen=True)
class Pki:
    """Every certificate the tests use, in one directory."""

    factory: CertFactory
    mesh: MeshCerts
    untrusted_ca: Pem
    rogue: Pem      # frontend's SPIFFE identity, signed by the untrusted CA
    expired: Pem    # frontend's identity, signed by the mesh CA, validity over
    other: Pem      # a third workload (sa/other) of the mesh


def make_pki(directory: Path) -> Pki:
    f = CertFactory(directory)
    mesh = mesh_certs(f)
    untrusted = f.ca("untrusted-ca")
    return Pki(f, mesh, untrusted, f.issue("rogue", untrusted, uris=[spiffe_id("frontend")]),
               f.expired("expired", mesh.ca, uris=[spiffe_id("frontend")]),
               f.issue("other", mesh.ca, uris=[spiffe_id("other")]))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- TLS clients ------------------------------------------------------------------------

TLS_VERSIONS = {"1.0": ssl.TLSVersion.TLSv1 if hasattr(ssl.TLSVersion, "TLSv1") else None,
                "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def client_context(*, ca: Path | None, cert: Pem | None = None, version: str | None = None,
                   alpn: list[str] | None = None) -> ssl.SSLContext:
    """A client context trusting ``ca``, presenting ``cert``, pinned to one TLS
    ``version`` ("1.0": with OpenSSL's security level 0, which Debian needs
    before it will offer TLS 1.0 at all)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca is not None:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(cert.cert, cert.key)
    if version:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0 is what the test offers on purpose
            ctx.minimum_version = ctx.maximum_version = TLS_VERSIONS[version]
        if version == "1.0":
            ctx.set_ciphers("DEFAULT@SECLEVEL=0")
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


@dataclass
class TlsReply:
    version: str
    cipher: str
    alpn: str | None
    peer_serial: int
    status: int
    headers: dict[str, str]
    body: bytes


def _peer_serial(sock: ssl.SSLSocket) -> int:
    from cryptography import x509
    return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def read_http(sock: ssl.SSLSocket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length from ``sock``."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a response head: {buf!r}")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    size = int(headers.get("content-length", "0"))
    while len(body) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def tls_connect(port: int, ctx: ssl.SSLContext, *, sni: str = BACKEND_DNS, timeout: float = 5) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=sni)
    except BaseException:
        raw.close()
        raise


def tls_exchange(sock: ssl.SSLSocket, path: str = "/", *, close: bool = False) -> TlsReply:
    """One GET on an open TLS connection."""
    close_header = "Connection: close\r\n" if close else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {BACKEND_DNS}\r\n{close_header}\r\n".encode())
    status, headers, body = read_http(sock)
    cipher = sock.cipher()
    return TlsReply(sock.version() or "", cipher[0] if cipher else "", sock.selected_alpn_protocol(),
                    _peer_serial(sock), status, headers, body)


def tls_get(port: int, ctx: ssl.SSLContext, path: str = "/", *, sni: str = BACKEND_DNS) -> TlsReply:
    """One GET on a new TLS connection."""
    with tls_connect(port, ctx, sni=sni) as s:
        return tls_exchange(s, path, close=True)


def tls_refusal(port: int, ctx: ssl.SSLContext, *, sni: str = BACKEND_DNS, wait: float = 5) -> str:
    """Connect and wait for the server to refuse; the alert it sent, as
    OpenSSL names it (``TLSV1_ALERT_UNKNOWN_CA``...), or "closed" when it
    closed the connection without one. With TLS 1.3 the server checks the
    client's certificate after the client's handshake is done, so the alert
    comes on the first read; the client reads before it writes (a write
    into a connection the server closed can turn the alert into a reset)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        s = ctx.wrap_socket(raw, server_hostname=sni)
        data = s.recv(1)
        return "closed" if data == b"" else f"unexpected data {data!r}"
    except ssl.SSLEOFError:
        return "closed"
    except ssl.SSLError as e:
        return e.reason or str(e)
    except (TimeoutError, socket.timeout):
        return "no refusal within the wait (the connection stayed open)"
    except ConnectionResetError:
        return "reset"
    finally:
        raw.close()


def plaintext_exchange(port: int, wait: float = 5) -> bytes:
    """An HTTP/1.1 request in clear text; every byte the server sent back before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: backend\r\n\r\n")
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
        return got


# -- Envoy's ssl.* counters ----------------------------------------------------------------

_SAMPLE = re.compile(r"^(\w+)(?:\{([^}]*)\})? (\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def prometheus(admin: int) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/stats/prometheus", timeout=5) as r:
        text = r.read().decode()
    return [(m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))) for m in _SAMPLE.finditer(text)]


def counter(admin: int, metric: str, **labels: str) -> int:
    """The sum of ``metric`` over its samples whose labels include ``labels``
    (0 when there is none: Envoy shows a counter only once it exists)."""
    return int(sum(v for name, have, v in prometheus(admin)
                   if name == metric and all(have.get(k) == want for k, want in labels.items())))


def listener_ssl(admin: int, port: int, name: str, host: str = "127.0.0.1", **labels: str) -> int:
    """``listener.HOST_PORT.ssl.NAME`` (Envoy names a listener's counters by its address)."""
    return counter(admin, f"envoy_listener_ssl_{name}", envoy_listener_address=f"{host}_{port}", **labels)


def cluster_ssl(admin: int, cluster: str, name: str, **labels: str) -> int:
    """``cluster.NAME.ssl.NAME``."""
    return counter(admin, f"envoy_cluster_ssl_{name}", envoy_cluster_name=cluster, **labels)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10) -> None:
    """Wait (bounded) until ``check()`` holds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def wait_counter(admin: int, read: Callable[[int], int], at_least: int, what: str, timeout: float = 5) -> int:
    """Counters are read from the proxy's workers after the connection ended:
    wait (bounded) until ``read(admin)`` reaches ``at_least``; its value."""
    box = [0]

    def ok() -> bool:
        box[0] = read(admin)
        return box[0] >= at_least

    try:
        wait_for(what, ok, timeout)
    except AssertionError:
        pass
    return box[0]


# -- command-line clients ------------------------------------------------------------------


def openssl_s_client(port: int, *args: str, stdin: bytes = b"", timeout: float = 15) -> str:
    """``openssl s_client -connect 127.0.0.1:PORT ARGS``; its stdout and stderr."""
    run = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *args], input=stdin,
                         capture_output=True, timeout=timeout)
    return (run.stdout + run.stderr).decode(errors="replace")


def curl(port: int, pki: Pki, *args: str, cert: Pem | None = None, path: str = "/") -> subprocess.CompletedProcess:
    """curl to https://backend.default.svc.cluster.local:PORT (resolved to
    127.0.0.1) with ``--cacert`` the mesh CA and ``--cert/--key`` ``cert``."""
    c = cert or pki.mesh.frontend
    return subprocess.run(["curl", "-sS", "-i", "--max-time", "10", "--cacert", str(pki.mesh.ca.cert),
                           "--cert", str(c.cert), "--key", str(c.key),
                           "--resolve", f"{BACKEND_DNS}:{port}:127.0.0.1", *args,
                           f"https://{BACKEND_DNS}:{port}{path}"], capture_output=True, text=True, timeout=20)
