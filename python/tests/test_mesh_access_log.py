"""Access logs (envoy.access_loggers.file) in dpukit-mesh, written beside
Envoy 1.40 on the same YAML for the same requests, and compared line by line
and field by field: successes (HTTP/1.1, HTTP/2, a POST, mTLS with the
client's SPIFFE identity), a 404, an upstream that resets, one that refuses
connections, a route timeout, retries used up, an RBAC denial, a direct
response, a client that goes away, a malformed request, gRPC requests the
proxy answers itself over HTTP/1.1 and HTTP/2, an HTTP/2 upstream, and
tcp_proxy connections (relayed, refused by network RBAC, upstream refused).
The lines are Istio's default text format, Envoy's default format and a
JSON format of Istio's fields. A log file moved away is reopened on SIGUSR1, as logrotate
needs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from h2_support import nghttp
from mesh_support import Echoes, TcpUpstream, envoy_validate, start_proxy
from tls_support import *  # noqa: F401,F403
from tls_support import (BACKEND_DNS, TLS_KINDS, FilterChain, Pki, client_context, downstream_tls, listener,
                         read_http, tls_bootstrap, tls_cluster, tls_connect)
from dpukit.procs import Group, free_port

FILE_LOG = "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog"
HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
FLUSH = ["--file-flush-interval-msec", "50"]

# Istio's default text format (pilot's EnvoyTextLogFormat).
ISTIO_TEXT = ('[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% '
              '%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% '
              '"%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% '
              '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" '
              '"%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% '
              '%DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n')

# Istio's JSON fields, and the identity ones an mTLS listener adds.
ISTIO_JSON = {
    "start_time": "%START_TIME%", "method": "%REQ(:METHOD)%", "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
    "protocol": "%PROTOCOL%", "response_code": "%RESPONSE_CODE%", "response_flags": "%RESPONSE_FLAGS%",
    "response_code_details": "%RESPONSE_CODE_DETAILS%",
    "connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%",
    "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%", "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%", "duration": "%DURATION%",
    "upstream_service_time": "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", "x_forwarded_for": "%REQ(X-FORWARDED-FOR)%",
    "user_agent": "%REQ(USER-AGENT)%", "request_id": "%REQ(X-REQUEST-ID)%", "authority": "%REQ(:AUTHORITY)%",
    "upstream_host": "%UPSTREAM_HOST%", "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%", "downstream_local_address": "%DOWNSTREAM_LOCAL_ADDRESS%",
    "downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%", "requested_server_name": "%REQUESTED_SERVER_NAME%",
    "route_name": "%ROUTE_NAME%", "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
    "peer": {"uri_san": "%DOWNSTREAM_PEER_URI_SAN%", "subject": "%DOWNSTREAM_PEER_SUBJECT%",
             "tls_version": "%DOWNSTREAM_TLS_VERSION%"},
}

TCP_TEXT = ("%RESPONSE_CODE% %RESPONSE_FLAGS% %PROTOCOL% %BYTES_RECEIVED% %BYTES_SENT% \"%UPSTREAM_HOST%\" "
            "%UPSTREAM_CLUSTER% %CONNECTION_TERMINATION_DETAILS% %UPSTREAM_TRANSPORT_FAILURE_REASON% "
            "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%\n")


def file_log(path: Path, fmt: dict[str, Any] | str | None, indent: int) -> str:
    """An access_log list item (envoy.access_loggers.file), indented ``indent``."""
    if fmt is None:
        log_format = ""
    elif isinstance(fmt, str):
        log_format = f"\n    log_format: {{text_format_source: {{inline_string: {json.dumps(fmt)}}}}}"
    else:
        log_format = f"\n    log_format: {{json_format: {json.dumps(fmt)}}}"
    item = f"""- name: envoy.access_loggers.file
  typed_config:
    "@type": {FILE_LOG}
    path: {path}{log_format}
"""
    return "".join(" " * indent + line + "\n" for line in item.splitlines())


def hcm(logs: str, routes: str, filters: str = "") -> str:
    """An HTTP connection manager (a filters list item, indented 6) with ``logs``."""
    return f"""\
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": {HCM}
          stat_prefix: in
          access_log:
{logs}          route_config:
            name: local
            virtual_hosts:
            - name: vh
              domains: ["*"]
              routes:
{routes}          http_filters:
{filters}          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"""


ROUTES = """\
              - match: {prefix: /h2/}
                route: {cluster: h2up}
              - match: {prefix: /reset}
                route: {cluster: reset}
              - match: {prefix: /dead}
                route: {cluster: dead}
              - match: {prefix: /slow}
                route: {cluster: echo, timeout: 0.2s}
              - match: {prefix: /retry}
                route: {cluster: echo, retry_policy: {retry_on: 5xx, num_retries: 1}}
              - match: {prefix: /direct}
                direct_response: {status: 200, body: {inline_string: hi}}
              - name: rewritten
                match: {prefix: /ok}
                route: {cluster: echo, prefix_rewrite: /rew}
              - match: {prefix: /secret}
                route: {cluster: echo}
"""

DENY_SECRET = """\
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: DENY
                policies:
                  deny-secret:
                    permissions: [{url_path: {path: {prefix: /secret}}}]
                    principals: [{any: true}]
"""


def tcp_chain(cluster: str, logs: str) -> str:
    return f"""\
      - name: envoy.filters.network.rbac
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC
          stat_prefix: tcp.
          rules:
            action: DENY
            policies:
              from-two: {{permissions: [{{any: true}}], principals: [{{direct_remote_ip: {{address_prefix: 127.0.0.2, prefix_len: 32}}}}]}}
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: {cluster}
          access_log:
{logs}"""


class Resetter(TcpUpstream):
    """An upstream that reads a request and closes the connection without answering."""

    def _conn(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)


@dataclass
class Node:
    kind: str
    ports: dict[str, int]
    logs: Path


def tcp_listener(name: str, port: int, cluster: str, logs: str) -> str:
    return (f"  - name: {name}\n    address:\n      socket_address: {{address: 127.0.0.1, port_value: {port}}}\n"
            "    filter_chains:\n    - filters:\n" + tcp_chain(cluster, logs))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[dict[str, Node]]:
    work = tmp_path_factory.mktemp("access-log")
    resetter = Resetter()
    dead, h2up = free_port(), free_port()  # nothing listens on `dead`
    (work / "www" / "h2").mkdir(parents=True)
    (work / "www" / "h2" / "hello.txt").write_text("hello over h2\n")
    with Group(work / "procs") as group:
        echo = Echoes(group).start("backend")
        group.start(["nghttpd", "--no-tls", "-d", str(work / "www"), str(h2up)], name="nghttpd").wait_port(h2up)
        made: dict[str, Node] = {}
        for kind in TLS_KINDS:
            logs = work / kind
            logs.mkdir()
            ports = {name: free_port() for name in ("http", "tls", "tcp", "tcp-dead", "admin")}
            http_logs = (file_log(logs / "istio.log", ISTIO_TEXT, 10) + file_log(logs / "default.log", None, 10)
                         + file_log(logs / "json.log", ISTIO_JSON, 10))
            tcp_logs = file_log(logs / "tcp.log", TCP_TEXT, 10)
            config = tls_bootstrap(
                admin=ports["admin"],
                listeners=[
                    listener("http", ports["http"], [FilterChain(hcm(http_logs, ROUTES, DENY_SECRET))]),
                    listener("tls", ports["tls"],
                             [FilterChain(hcm(file_log(logs / "tls.log", ISTIO_JSON, 10), ROUTES),
                                          downstream_tls(6, cert=pki.mesh.backend, ca=pki.mesh.ca.cert))],
                             inspector=True),
                    tcp_listener("tcp", ports["tcp"], "echo", tcp_logs),
                    tcp_listener("tcp-dead", ports["tcp-dead"], "dead", tcp_logs),
                ],
                clusters=[tls_cluster("echo", echo), tls_cluster("reset", resetter.port), tls_cluster("dead", dead),
                          tls_cluster("h2up", h2up, http2=True)])
            if kind == "envoy":
                (work / "envoy.yaml").write_text(config)
                checked = envoy_validate(work / "envoy.yaml")
                assert checked.returncode == 0, checked.stderr[-2000:]
            start_proxy(group, kind, config, work / f"run-{kind}", port=ports["http"], admin=ports["admin"],
                        extra=FLUSH)
            made[kind] = Node(kind, ports, logs)
        yield made


def exchange(port: int, raw: bytes, *, close_after: float | None = None) -> bytes:
    """Send ``raw``; read until the proxy closes (or close after ``close_after`` s: a client that goes away)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw)
        if close_after is not None:
            time.sleep(close_after)
            return b""
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:  # a connection closed with the client's bytes unread is reset
            pass
        return out


def get(path: str, *headers: str) -> bytes:
    extra = "".join(h + "\r\n" for h in headers)
    return (f"GET {path} HTTP/1.1\r\nHost: backend.local\r\nUser-Agent: probe/1\r\nx-request-id: rid{path}\r\n"
            f"{extra}Connection: close\r\n\r\n").encode()


# (what it is, how it is sent): each proxy gets the same requests in this order.
HTTP_REQUESTS = [
    ("rewritten success", lambda p: exchange(p, get("/ok/x?q=1"))),
    ("no route", lambda p: exchange(p, get("/nothing"))),
    ("upstream reset", lambda p: exchange(p, get("/reset"))),
    ("connection refused", lambda p: exchange(p, get("/dead"))),
    ("RBAC denial", lambda p: exchange(p, get("/secret/a"))),
    ("direct response", lambda p: exchange(p, get("/direct"))),
    ("route timeout", lambda p: exchange(p, get("/slow", "x-echo-delay-ms: 1000"))),
    ("retries used up", lambda p: exchange(p, get("/retry", "x-echo-status: 503"))),
    ("client went away", lambda p: exchange(p, get("/ok/gone", "x-echo-delay-ms: 300"), close_after=0.05)),
    ("POST", lambda p: exchange(p, b"POST /ok/post HTTP/1.1\r\nHost: backend.local\r\nx-request-id: rid-post\r\n"
                                   b"Content-Length: 5\r\nConnection: close\r\n\r\nhello")),
    ("malformed", lambda p: exchange(p, b"GARBAGE\r\n\r\n")),
    ("HTTP/2", lambda p: nghttp(f"http://127.0.0.1:{p}/ok/h2", "-H", ":authority: backend.local", "-H", "x-request-id: rid-h2", "-H",
                                "user-agent: probe/2")),
    # Answered as gRPC (200, grpc-status 14, no body): the line says 200 and 0 bytes sent, as Envoy's.
    ("gRPC over HTTP/1.1, upstream refused",
     lambda p: exchange(p, b"POST /dead/grpc HTTP/1.1\r\nHost: backend.local\r\nx-request-id: rid-grpc1\r\n"
                           b"content-type: application/grpc\r\nContent-Length: 5\r\nConnection: close\r\n\r\n\0\0\0\0\0")),
    ("gRPC over HTTP/2, upstream refused",
     lambda p: nghttp(f"http://127.0.0.1:{p}/dead/grpc2", "-H", ":authority: backend.local", "-H", "x-request-id: rid-grpc2",
                      "-H", "content-type: application/grpc", "-H", "user-agent: probe/2", "-d", "/dev/null")),
    # %UPSTREAM_LOCAL_ADDRESS% of an HTTP/2 upstream's connection.
    ("HTTP/2 upstream", lambda p: nghttp(f"http://127.0.0.1:{p}/h2/hello.txt", "-H", ":authority: backend.local", "-H",
                                         "x-request-id: rid-h2up", "-H", "user-agent: probe/2")),
]


def wait_lines(path: Path, n: int, timeout: float = 10) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


@pytest.fixture(scope="module")
def logged(nodes: dict[str, Node], pki: Pki) -> dict[str, dict[str, list[str]]]:
    """Every proxy's log files after the same requests."""
    for node in nodes.values():
        for i, (_, send) in enumerate(HTTP_REQUESTS):
            send(node.ports["http"])
            # Each request ends (its line is out) before the next starts, at every proxy: the lines keep one order.
            wait_lines(node.logs / "istio.log", i + 1, timeout=5)
        ctx = client_context(ca=pki.mesh.ca.cert, cert=pki.mesh.frontend)
        with tls_connect(node.ports["tls"], ctx, sni=BACKEND_DNS) as s:
            s.sendall(get("/ok/tls"))
            read_http(s)
        exchange(node.ports["tcp"], b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        refused = socket.socket()
        refused.bind(("127.0.0.2", 0))
        refused.connect(("127.0.0.1", node.ports["tcp"]))
        refused.sendall(b"hello")
        refused.settimeout(5)
        assert refused.recv(100) == b""  # closed by the network RBAC filter
        refused.close()
        exchange(node.ports["tcp-dead"], b"hello")
    out: dict[str, dict[str, list[str]]] = {}
    n = len(HTTP_REQUESTS)
    for kind, node in nodes.items():
        out[kind] = {name: wait_lines(node.logs / f"{name}.log", count)
                     for name, count in (("istio", n), ("default", n), ("json", n), ("tls", 1), ("tcp", 3))}
    return out


def masked_text(line: str) -> str:
    """A text line without what differs between any two runs: the time, the
    duration, the upstream service time's value (not whether there is one), ephemeral ports."""
    line = re.sub(r"^\[[0-9T:.Z-]+\]", "[T]", line)
    line = re.sub(r' (\d+) (\d+) \d+ (\d+|-) "', lambda m: f' {m[1]} {m[2]} D {"-" if m[3] == "-" else "N"} "', line,
                  count=1)
    return re.sub(r"127\.0\.0\.[12]:\d+", "ADDR", line)


def test_lines_are_envoys(logged: dict[str, dict[str, list[str]]]):
    reference = logged["envoy"]
    assert len(reference["istio"]) == len(HTTP_REQUESTS), reference["istio"]
    for kind in ("mesh", "mesh-pipelined"):
        for name in ("istio", "default"):
            got = logged[kind][name]
            assert len(got) == len(reference[name]), (kind, name, got)
            for (what, _), want, have in zip(HTTP_REQUESTS, reference[name], got):
                assert masked_text(have) == masked_text(want), f"{kind} {name} {what}:\n  {have}\n  Envoy: {want}"


TIMED = {"start_time", "duration", "upstream_service_time"}
PORTED = {"upstream_local_address", "downstream_local_address", "downstream_remote_address"}


def compare_json(kind: str, what: str, want: dict[str, Any], got: dict[str, Any]) -> None:
    assert set(got) == set(want), (kind, what, got)
    for key, value in want.items():
        if key in TIMED:
            assert (value is None) == (got[key] is None), (kind, what, key, got[key], value)
            continue
        if key in PORTED and value is not None:
            assert got[key] is not None and got[key].rsplit(":", 1)[0] == value.rsplit(":", 1)[0], (kind, what, key)
            continue
        assert got[key] == value, f"{kind} {what}: {key} = {got[key]!r}, Envoy {value!r}"


def test_json_fields_are_envoys(logged: dict[str, dict[str, list[str]]]):
    reference = [json.loads(line) for line in logged["envoy"]["json"]]
    assert [r["response_code"] for r in reference] == [200, 404, 503, 503, 403, 200, 504, 503, 0, 200, 400, 200,
                                                       200, 200, 200]
    assert reference[7]["response_flags"] == "URX" and reference[8]["response_flags"] == "DC"
    assert [(r["response_flags"], r["bytes_sent"]) for r in reference[12:14]] == [("UF", 0), ("UF", 0)]
    assert reference[14]["upstream_local_address"] is not None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", reference[0]["start_time"])
    for kind in ("mesh", "mesh-pipelined"):
        got = [json.loads(line) for line in logged[kind]["json"]]
        assert len(got) == len(reference), (kind, got)
        for (what, _), want, have in zip(HTTP_REQUESTS, reference, got):
            compare_json(kind, what, want, have)
        assert got[6]["duration"] >= 190  # the 0.2 s route timeout


def test_mtls_identity_is_envoys(logged: dict[str, dict[str, list[str]]]):
    want = json.loads(logged["envoy"]["tls"][0])
    assert want["peer"]["uri_san"].startswith("spiffe://") and want["requested_server_name"] == BACKEND_DNS
    for kind in ("mesh", "mesh-pipelined"):
        compare_json(kind, "mTLS", want, json.loads(logged[kind]["tls"][0]))


def test_tcp_proxy_lines_are_envoys(logged: dict[str, dict[str, list[str]]]):
    # Relayed, refused by the network RBAC filter on its first bytes, and an upstream that refuses connections.
    want = [masked_text(line) for line in logged["envoy"]["tcp"]]
    assert len(want) == 3, want
    assert "rbac_access_denied_matched_policy[from-two]" in want[1] and want[2].startswith("0 UF,URX"), want
    for kind in ("mesh", "mesh-pipelined"):
        assert [masked_text(line) for line in logged[kind]["tcp"]] == want, kind


@pytest.mark.parametrize("kind", TLS_KINDS)
def test_sigusr1_reopens_a_moved_log(kind: str, tmp_path: Path):
    """logrotate's way: the file is renamed, the proxy told, and new lines go to a new file of that name."""
    port, admin = free_port(), free_port()
    log = tmp_path / "access.log"
    routes = "              - match: {prefix: /}\n                direct_response: {status: 200}\n"
    config = tls_bootstrap(admin=admin, listeners=[listener("http", port, [FilterChain(
        hcm(file_log(log, "%REQ(:PATH)%\n", 10), routes))])], clusters=[])
    config = config.replace("  clusters:\n", "  clusters: []\n")
    with Group(tmp_path / "procs") as group:
        proxy = start_proxy(group, kind, config, tmp_path, port=port, admin=admin, extra=FLUSH)
        exchange(port, get("/before"))
        assert wait_lines(log, 1) == ["/before"]
        os.rename(log, tmp_path / "access.log.1")
        os.kill(proxy.proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        exchange(port, get("/after"))
        assert wait_lines(log, 1) == ["/after"]
        assert (tmp_path / "access.log.1").read_text() == "/before\n"


DIRECT_200 = "              - match: {prefix: /}\n                direct_response: {status: 200}\n"


@pytest.mark.parametrize("kind", ["mesh", "mesh-pipelined"])
def test_a_log_on_a_full_disk_loses_its_lines_and_the_proxy_serves_on(kind: str, tmp_path: Path):
    """/dev/full opens and refuses every write with ENOSPC, as a full disk
    does: the flusher loses those lines, says so in the proxy's own log, and
    every request is still answered."""
    port, admin = free_port(), free_port()
    config = tls_bootstrap(admin=admin, listeners=[listener("http", port, [FilterChain(
        hcm(file_log(Path("/dev/full"), "%REQ(:PATH)%\n", 10), DIRECT_200))])], clusters=[])
    config = config.replace("  clusters:\n", "  clusters: []\n")
    with Group(tmp_path / "procs") as group:
        proxy = start_proxy(group, kind, config, tmp_path, port=port, admin=admin, extra=FLUSH)
        for i in range(20):
            assert exchange(port, get(f"/before/{i}")).startswith(b"HTTP/1.1 200 "), i
        deadline = time.monotonic() + 10
        while "write failed" not in proxy.proc.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "access log /dev/full: write failed (No space left on device)" in proxy.proc.output()
        for i in range(20):
            assert exchange(port, get(f"/after/{i}")).startswith(b"HTTP/1.1 200 "), i
        proxy.proc.check_alive()


def plain_tcp_listener(name: str, port: int, cluster: str, logs: str = "") -> str:
    """A tcp_proxy listener with no RBAC filter, and ``logs`` (access_log items) if any."""
    access = f"          access_log:\n{logs}" if logs else ""
    return (f"  - name: {name}\n    address:\n      socket_address: {{address: 127.0.0.1, port_value: {port}}}\n"
            "    filter_chains:\n    - filters:\n      - name: envoy.filters.network.tcp_proxy\n        typed_config:\n"
            '          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\n'
            f"          stat_prefix: {name}\n          cluster: {cluster}\n{access}")


def test_a_tcp_proxy_reads_its_connections_facts_only_for_a_log_or_rbac(tmp_path: Path):
    """A tcp_proxy connection's facts (its peer's address, and its identity
    for RBAC) are read only where an access log or an RBAC filter wants them:
    counted by strace, no getpeername for connections to a chain with
    neither (each cost one before), one each on a chain with a log."""
    from conftest import native_tool
    from dpukit.mesh_harness import mesh_argv, wait_ready
    native_tool("dpukit-mesh")
    plain, logged, admin, dead = free_port(), free_port(), free_port(), free_port()
    config = tls_bootstrap(admin=admin, listeners=[
        plain_tcp_listener("plain", plain, "dead"),
        plain_tcp_listener("logged", logged, "dead", file_log(tmp_path / "tcp.log", "%RESPONSE_FLAGS%\n", 10))],
        clusters=[tls_cluster("dead", dead)])
    (tmp_path / "mesh.yaml").write_text(config)
    trace = tmp_path / "getpeername.trace"

    def calls() -> int:
        return trace.read_text().count("getpeername(") if trace.exists() else 0

    def connect_and_close(port: int, n: int) -> None:
        for _ in range(n):  # each answered by a close: the upstream refuses
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.settimeout(5)
                assert s.recv(100) == b""

    with Group(tmp_path / "procs") as group:
        proc = group.start(["strace", "-f", "-qq", "-e", "trace=getpeername", "-o", str(trace),
                            *mesh_argv(tmp_path / "mesh.yaml", dpu_cpus=None)], name="mesh-strace")
        wait_ready(proc, plain, admin)
        before = calls()
        connect_and_close(plain, 5)
        assert calls() == before, trace.read_text()
        connect_and_close(logged, 5)
        assert calls() - before >= 5, trace.read_text()
