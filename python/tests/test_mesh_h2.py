"""HTTP/2 cleartext (h2c) through the proxy: gRPC with a real grpcio server
and client, nghttp and h2load against the HTTP/1.1 echo service and an
HTTP/2 upstream (nghttpd), large streamed bodies, and a client that sends
garbage after the preface. Every test runs on Envoy 1.40 (the reference) and
on dpukit-mesh in both execution models, on the same bootstrap."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import signal
import socket
import subprocess
import time
import zlib
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from mesh_support import *  # noqa: F401,F403
from dpukit.experiment_support import rss_kib
from h2_support import H2_UPSTREAM, FaultyUpstream, nghttp
from mesh_support import Echoes, Proxy, all_to, bootstrap, cluster, ports, request, start_proxy

MiB = 1 << 20

# The same with smaller windows than Envoy's default 16 MiB / 24 MiB: what a
# slow client makes the proxy hold is bounded by the upstream's stream window.
H2_UPSTREAM_1MIB = H2_UPSTREAM.replace("http2_protocol_options: {}", """http2_protocol_options:
            initial_stream_window_size: 1048576
            initial_connection_window_size: 2097152""")

ROUTES = """\
            - name: default
              domains: ["*"]
              routes:
              - match: {prefix: "/test.Echo/"}
                route: {cluster: grpc, timeout: 10s}
              - match: {prefix: "/dead.Svc/"}
                route: {cluster: down}
              - match: {prefix: "/files/"}
                route: {cluster: files}
              - match: {prefix: "/teapot"}
                direct_response: {status: 418, body: {inline_string: "short and stout"}}
              - match: {prefix: "/"}
                route: {cluster: echo}
"""

# Set on purpose (not Envoy's defaults), so the SETTINGS frame shows they were read.
HCM_H2 = """\
          codec_type: AUTO
          max_request_headers_kb: 16
          http2_protocol_options:
            max_concurrent_streams: 77
            initial_stream_window_size: 1048576
            initial_connection_window_size: 2097152
"""


# -- the gRPC service (generic handlers, raw bytes: no protoc step) ---------------------


def _unary(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.send_initial_metadata((("x-served-by", "grpc-py"),))
    if request.startswith(b"fail:"):
        context.abort(grpc.StatusCode.NOT_FOUND, request[5:].decode())
    return b"echo:" + request


def _server_stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    count, size = (int(x) for x in request.split(b"x"))
    for i in range(count):
        yield bytes([i % 256]) * size


def _client_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
    h = hashlib.sha256()
    n = 0
    for r in requests:
        h.update(r)
        n += len(r)
    return f"{n}:{h.hexdigest()}".encode()


@pytest.fixture
def grpc_port() -> Iterator[int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(_server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(_client_stream),
    }),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0)


@dataclass
class H2Setup:
    proxy: Proxy
    echoes: Echoes
    files: Path  # what nghttpd serves under /files/


def start_nghttpd(echoes: Echoes, tmp_path: Path, files_port: int) -> Path:
    """nghttpd (h2c) on `files_port` serving a directory with files/hello.txt (returned)."""
    root = tmp_path / "www"
    (root / "files").mkdir(parents=True)
    (root / "files" / "hello.txt").write_bytes(b"hello from nghttpd\n")
    nghttpd = echoes.group.start(["nghttpd", "--no-tls", "-d", str(root), str(files_port)], name="nghttpd")
    nghttpd.wait_port(files_port)
    return root


@pytest.fixture
def h2(proxy_kind: str, echoes: Echoes, grpc_port: int, tmp_path: Path) -> H2Setup:
    echoes.start("e1")
    port, admin, dead, files_port = ports(4)
    root = start_nghttpd(echoes, tmp_path, files_port)
    clusters = (cluster("echo", [echoes.ports["e1"]]) + cluster("grpc", [grpc_port], H2_UPSTREAM)
                + cluster("files", [files_port], H2_UPSTREAM_1MIB) + cluster("down", [dead], H2_UPSTREAM))
    config = bootstrap(port=port, admin=admin, virtual_hosts=ROUTES, clusters=clusters, hcm_extra=HCM_H2)
    proxy = start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    return H2Setup(proxy, echoes, root / "files")


# -- nghttp as the client ---------------------------------------------------------------


def nghttp_body_sha256(url: str, timeout: float = 120) -> tuple[str, int]:
    """Downloads ``url`` with nghttp, hashing the body as it streams: (sha256, bytes)."""
    p = subprocess.Popen(["nghttp", url], stdout=subprocess.PIPE)
    h, n = hashlib.sha256(), 0
    assert p.stdout is not None
    while chunk := p.stdout.read(1 << 20):
        h.update(chunk)
        n += len(chunk)
    assert p.wait(timeout) == 0
    return h.hexdigest(), n


# -- gRPC ---------------------------------------------------------------------------------


def test_grpc_unary_streaming_and_errors(h2: H2Setup) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{h2.proxy.port}") as ch:
        unary = ch.unary_unary("/test.Echo/Unary")
        reply, call = unary.with_call(b"ping", timeout=10)
        assert reply == b"echo:ping"
        assert ("x-served-by", "grpc-py") in call.initial_metadata()
        assert call.code() == grpc.StatusCode.OK

        # Server streaming: 50 messages of 10 KiB, in order, each intact.
        items = list(ch.unary_stream("/test.Echo/ServerStream")(b"50x10240", timeout=10))
        assert [len(x) for x in items] == [10240] * 50
        assert [x[0] for x in items] == [i % 256 for i in range(50)]

        # Client streaming: 200 x 64 KiB up (12.5 MiB through the request flow-control window).
        chunks = [bytes([i]) * 65536 for i in range(200)]
        got = ch.stream_unary("/test.Echo/ClientStream")(iter(chunks), timeout=30)
        assert got == f"{200 * 65536}:{hashlib.sha256(b''.join(chunks)).hexdigest()}".encode()

        # An error status and its message come back in the trailers.
        with pytest.raises(grpc.RpcError) as err:
            unary(b"fail:no such widget", timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert err.value.details() == "no such widget"

        # An unknown method of the service: the server's UNIMPLEMENTED passes through.
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary("/test.Echo/Nope")(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_grpc_local_replies(h2: H2Setup) -> None:
    """The proxy's own answers to a gRPC client are gRPC statuses (as Envoy's),
    a direct response's too (Envoy maps its status as any local reply's)."""
    with grpc.insecure_channel(f"127.0.0.1:{h2.proxy.port}") as ch:
        with pytest.raises(grpc.RpcError) as err:  # nobody listens: 503 -> UNAVAILABLE
            ch.unary_unary("/dead.Svc/Call")(b"x", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "connection failure" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:  # direct_response 418 -> UNKNOWN, its body the message
            ch.unary_unary("/teapot.Svc/Call")(b"x", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == "short and stout"


def test_grpc_concurrent_calls_share_one_upstream_connection(h2: H2Setup) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{h2.proxy.port}") as ch:
        unary = ch.unary_unary("/test.Echo/Unary")
        futs = [unary.future(f"m{i}".encode(), timeout=10) for i in range(64)]
        assert [f.result() for f in futs] == [f"echo:m{i}".encode() for i in range(64)]


# -- nghttp / h2load --------------------------------------------------------------------


def test_nghttp_to_http1_echo(h2: H2Setup, tmp_path: Path) -> None:
    r = nghttp(h2.proxy.url("/some/path?q=1"))
    assert r.status == 200
    assert r.headers["x-served-by"] == "e1"
    assert r.headers["x-echo-path"] == "/some/path?q=1" or r.headers["x-echo-path"] == "/some/path"
    assert r.headers["x-echo-method"] == "GET"
    # Our SETTINGS carry the HCM's http2_protocol_options.
    assert "SETTINGS_MAX_CONCURRENT_STREAMS(0x03):77" in r.frames
    assert "SETTINGS_INITIAL_WINDOW_SIZE(0x04):1048576" in r.frames

    body = tmp_path / "upload.bin"
    body.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, larger than the 1 MiB stream window's first credit
    r = nghttp(h2.proxy.url("/upload"), "-d", str(body))
    assert r.status == 200
    assert r.headers["x-echo-method"] == "POST"
    assert int(r.headers["x-echo-body-bytes"]) == body.stat().st_size
    assert r.headers["x-echo-body-hash"] == f"{zlib.crc32(body.read_bytes()):08x}"

    r = nghttp(h2.proxy.url("/teapot"))
    assert r.status == 418


def test_nghttp_to_http2_upstream(h2: H2Setup) -> None:
    r = nghttp(h2.proxy.url("/files/hello.txt"))
    assert r.status == 200
    assert r.headers["cache-control"] == "max-age=3600"  # nghttpd served it (Envoy rewrites server:)
    assert int(r.headers["content-length"]) == len(b"hello from nghttpd\n")
    assert nghttp_body_sha256(h2.proxy.url("/files/hello.txt")) == (
        hashlib.sha256(b"hello from nghttpd\n").hexdigest(), 19)
    assert nghttp(h2.proxy.url("/files/missing")).status == 404


def test_http1_client_on_the_auto_listener(h2: H2Setup) -> None:
    r = request(h2.proxy.port, path="/plain")
    assert r.status == 200 and r.header("x-served-by") == "e1"


def test_http1_client_to_http2_upstream(h2: H2Setup) -> None:
    """An HTTP/1.1 request routed to an HTTP/2 cluster: nghttpd answers over h2,
    the client gets HTTP/1.1 (content-length or chunked), bodies stream both ways."""
    r = request(h2.proxy.port, path="/files/hello.txt")
    assert r.status == 200, r
    assert r.body == b"hello from nghttpd\n"
    assert r.header("cache-control") == "max-age=3600"  # nghttpd's
    assert request(h2.proxy.port, path="/files/missing").status == 404
    # A request body (Content-Length, then chunked): nghttpd reads and discards it, and answers with the file.
    body = bytes(range(256)) * 4096
    assert request(h2.proxy.port, "POST", "/files/hello.txt", body=body).body == b"hello from nghttpd\n"
    r = request(h2.proxy.port, "POST", "/files/hello.txt", body=iter([body, body]))  # chunked
    assert r.status == 200 and r.body == b"hello from nghttpd\n"
    # Keep-alive: several requests on one connection, a large body streamed back.
    big = h2.files / "big.bin"
    big.write_bytes(hashlib.sha256(b"x").digest() * (8 * MiB // 32))
    conn = http.client.HTTPConnection("127.0.0.1", h2.proxy.port, timeout=30)
    try:
        for path, want in (("/files/big.bin", big.read_bytes()), ("/files/hello.txt", b"hello from nghttpd\n")):
            conn.request("GET", path, headers={"Host": "test.local"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert hashlib.sha256(resp.read()).hexdigest() == hashlib.sha256(want).hexdigest()
        conn.request("HEAD", "/files/hello.txt", headers={"Host": "test.local"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b""
    finally:
        conn.close()


def test_http1_client_to_grpc_upstream(h2: H2Setup) -> None:
    """A gRPC call sent as HTTP/1.1: the gRPC server answers over h2, the message comes back."""
    msg = b"over http/1.1"
    framed = b"\x00" + len(msg).to_bytes(4, "big") + msg
    r = request(h2.proxy.port, "POST", "/test.Echo/Unary", body=framed,
                headers={"Content-Type": "application/grpc", "TE": "trailers"})
    assert r.status == 200
    assert r.header("content-type") == "application/grpc"
    echoed = b"echo:" + msg
    assert r.body == b"\x00" + len(echoed).to_bytes(4, "big") + echoed


def test_http1_client_to_dead_http2_upstream(h2: H2Setup) -> None:
    r = request(h2.proxy.port, "POST", "/dead.Svc/Call", body=b"x" * 100)
    assert r.status == 503
    assert request(h2.proxy.port, path="/files/hello.txt").status == 200  # still serving


def test_h2load_many_streams(h2: H2Setup) -> None:
    for path in ("/load", "/files/hello.txt"):
        out = subprocess.run(["h2load", "-n", "2000", "-c", "4", "-m", "16", h2.proxy.url(path)],
                             capture_output=True, text=True, timeout=120).stdout
        assert "2000 succeeded, 0 failed, 0 errored" in out, out
        assert "status codes: 2000 2xx" in out, out


def test_large_bodies_stream_both_ways(h2: H2Setup, tmp_path: Path, proxy_kind: str) -> None:
    """64 MiB up (to the HTTP/1.1 echo) and down (from nghttpd over HTTP/2):
    the bytes arrive intact and dpukit-mesh's peak RSS does not grow by the body size."""
    size = 64 * MiB
    big = h2.files / "big.bin"
    with big.open("wb") as f:
        for i in range(size // MiB):
            f.write(hashlib.sha256(str(i).encode()).digest() * (MiB // 32))
    pid = h2.proxy.proc.pid
    hwm0 = rss_kib(pid, "VmHWM")

    r = nghttp(h2.proxy.url("/upload"), "-d", str(big), timeout=120)
    assert r.status == 200
    assert int(r.headers["x-echo-body-bytes"]) == size
    crc = 0
    with big.open("rb") as f:
        while chunk := f.read(MiB):
            crc = zlib.crc32(chunk, crc)
    assert r.headers["x-echo-body-hash"] == f"{crc:08x}"

    digest, n = nghttp_body_sha256(h2.proxy.url("/files/big.bin"))
    assert n == size
    assert digest == hashlib.sha256(big.read_bytes()).hexdigest()

    grown_mib = (rss_kib(pid, "VmHWM") - hwm0) / 1024
    if proxy_kind != "envoy":
        assert grown_mib < 24, f"peak RSS grew by {grown_mib:.1f} MiB for a 64 MiB body"


# -- bad peers ----------------------------------------------------------------------------


def read_frames(sock: socket.socket, timeout: float = 5) -> list[tuple[int, bytes]]:
    """HTTP/2 frames (type, payload) until the peer closes."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    frames, i = [], 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i:i + 3], "big")
        frames.append((data[i + 3], data[i + 9:i + 9 + length]))
        i += 9 + length
    return frames


def test_garbage_after_preface_gets_goaway(h2: H2Setup) -> None:
    with socket.create_connection(("127.0.0.1", h2.proxy.port)) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x08\xff\xff\x00\x00\x00\x00garbage!" * 3
                  + b"this is not a frame at all")
        frames = read_frames(s)
    goaways = [p for t, p in frames if t == 0x7]
    assert goaways, frames
    assert int.from_bytes(goaways[0][4:8], "big") == 0x1  # PROTOCOL_ERROR
    # ... and the proxy serves the next client.
    assert nghttp(h2.proxy.url("/after")).status == 200


def test_oversized_header_block_resets_only_that_stream(h2: H2Setup) -> None:
    big = "x" * (8 * 1024)  # three of them: over max_request_headers_kb (16 KiB)
    r = subprocess.run(["nghttp", "-v", "-n", *[a for i in range(3) for a in ("-H", f"x-big-{i}: {big}")],
                        h2.proxy.url("/big-head")],
                       capture_output=True, text=True, timeout=30).stdout
    assert "recv (stream_id=13) :status: 200" not in r
    assert re.search(r"recv (RST_STREAM|GOAWAY)|:status: 431", r), r[-2000:]
    assert nghttp(h2.proxy.url("/after")).status == 200


@pytest.mark.parametrize("kind", ["mesh", "mesh-pipelined"])
def test_an_unfinished_header_block_does_not_hold_the_connection(kind: str, echoes: Echoes, tmp_path: Path) -> None:
    """HEADERS without END_HEADERS and no CONTINUATION: nghttp2 takes no other
    frame meanwhile, so the connection's idle_timeout must still end it."""
    pe = echoes.start("e1")
    port, admin = ports(2)
    config = bootstrap(port=port, admin=admin, virtual_hosts=all_to("echo"), clusters=cluster("echo", [pe]),
                       hcm_extra="          codec_type: HTTP2\n"
                                 "          common_http_protocol_options: {idle_timeout: 1s}\n")
    proxy = start_proxy(echoes.group, kind, config, tmp_path, port=port, admin=admin)
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    headers = b"\x00\x00\x01\x01\x01\x00\x00\x00\x01" + b"\x82"  # flags END_STREAM only; ":method: GET"
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings + headers)
        frames = read_frames(s, timeout=10)
    assert time.monotonic() - t0 < 8, "the connection was held past its idle_timeout"
    assert any(t == 0x7 for t, _ in frames), frames  # GOAWAY, then the close
    proxy.proc.check_alive()


# -- upstreams that hang or die -------------------------------------------------------------


FAULT_ROUTES = """\
            - name: default
              domains: ["*"]
              routes:
              - match: {prefix: "/hang/route"}
                route: {cluster: hang, timeout: 1s}
              - match: {prefix: "/hang/"}
                route: {cluster: hang, timeout: 0s}
              - match: {prefix: "/die/"}
                route: {cluster: die}
              - match: {prefix: "/mid/"}
                route: {cluster: mid}
              - match: {prefix: "/files/"}
                route: {cluster: files}
"""


@dataclass
class FaultSetup:
    proxy: Proxy
    hang: FaultyUpstream
    die: FaultyUpstream


@pytest.fixture
def faults(proxy_kind: str, echoes: Echoes, tmp_path: Path) -> Iterator[FaultSetup]:
    port, admin, files_port = ports(3)
    root = start_nghttpd(echoes, tmp_path, files_port)
    hang, die, mid = FaultyUpstream("hang"), FaultyUpstream("die"), FaultyUpstream("die-mid-body")
    clusters = (cluster("hang", [hang.port], H2_UPSTREAM) + cluster("die", [die.port], H2_UPSTREAM)
                + cluster("mid", [mid.port], H2_UPSTREAM) + cluster("files", [files_port], H2_UPSTREAM))
    config = bootstrap(port=port, admin=admin, virtual_hosts=FAULT_ROUTES, clusters=clusters,
                       hcm_extra="          codec_type: AUTO\n          stream_idle_timeout: 2s\n")
    proxy = start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    yield FaultSetup(proxy, hang, die)
    for u in (hang, die, mid):
        u.close()


def test_hanging_http2_upstream_times_out(faults: FaultSetup) -> None:
    """The route's timeout gives 504; with none, stream_idle_timeout does (the request
    was complete: 504, as Envoy's maybeRequestTimeoutCode). Both for h2 and HTTP/1.1 clients."""
    t0 = time.monotonic()
    assert nghttp(faults.proxy.url("/hang/route")).status == 504
    assert 0.9 < time.monotonic() - t0 < 1.9
    assert request(faults.proxy.port, path="/hang/route").status == 504
    t0 = time.monotonic()
    r = nghttp(faults.proxy.url("/hang/idle"))
    assert r.status == 504
    assert 1.9 < time.monotonic() - t0 < 3.5
    assert request(faults.proxy.port, path="/hang/idle").status == 504
    assert faults.hang.heads >= 1  # (streams share a connection: its first head counts)
    assert nghttp(faults.proxy.url("/files/hello.txt")).status == 200  # still serving


def test_http2_upstream_dying_mid_stream(faults: FaultSetup) -> None:
    """The upstream connection closes before the response: 503 (h2 and HTTP/1.1
    clients); after the head was sent: the h2 stream is reset, the HTTP/1.1
    connection closed early. The proxy keeps serving."""
    assert nghttp(faults.proxy.url("/die/x")).status == 503
    assert request(faults.proxy.port, path="/die/x").status == 503
    assert faults.die.heads >= 2  # a connection each
    out = subprocess.run(["nghttp", "-v", "-n", faults.proxy.url("/mid/x")], capture_output=True, text=True,
                         timeout=30).stdout
    assert re.search(r"recv \(stream_id=\d+\) :status: 200", out), out
    assert "recv RST_STREAM frame" in out and "END_STREAM" not in out.split(":status: 200")[1], out
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        request(faults.proxy.port, path="/mid/x")
    for _ in range(3):
        assert nghttp(faults.proxy.url("/files/hello.txt")).status == 200
        assert request(faults.proxy.port, path="/files/hello.txt").body == b"hello from nghttpd\n"


# -- retries ------------------------------------------------------------------------------


def test_retry_replays_the_request_body(proxy_kind: str, echoes: Echoes, tmp_path: Path) -> None:
    """A route with a retry policy keeps an h2 request's body for the next try
    (dpukit-mesh keeps it only there): a host that refuses the connection, the
    retry to the echo service gets every byte."""
    pe = echoes.start("e1")
    port, admin, dead = ports(3)
    routes = """\
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: flaky
                  retry_policy: {retry_on: connect-failure, num_retries: 2}"""
    config = bootstrap(port=port, admin=admin, virtual_hosts=routes, clusters=cluster("flaky", [dead, pe]),
                       hcm_extra="          codec_type: HTTP2\n")
    proxy = start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    body = tmp_path / "body.bin"
    body.write_bytes(bytes(range(256)) * 1024)  # 256 KiB: within the 1 MiB buffer limit, so it may be retried
    for _ in range(4):  # round robin: every other request meets the dead host first
        r = nghttp(proxy.url("/upload"), "-d", str(body))
        assert r.status == 200, r.frames[-2000:]
        assert int(r.headers["x-echo-body-bytes"]) == body.stat().st_size
        assert r.headers["x-echo-body-hash"] == f"{zlib.crc32(body.read_bytes()):08x}"


def test_upstream_connection_keepalive_closes_a_silent_host(proxy_kind: str, echoes: Echoes, tmp_path: Path) -> None:
    """connection_keepalive on an HTTP/2 cluster, as Envoy's codec keeps it:
    a PING every interval; when the host stops answering without a reset
    (nghttpd stopped with SIGSTOP, its kernel still ACKing TCP) the PING goes
    unanswered, and after the timeout the connection is closed and counted
    in cluster.files.http2.keepalive_timeout; once the host answers again a
    request opens a new connection."""
    from tls_support import counter, wait_for

    port, admin, files_port = ports(3)
    start_nghttpd(echoes, tmp_path, files_port)
    keepalive = H2_UPSTREAM.replace("http2_protocol_options: {}",
                                    "http2_protocol_options: {connection_keepalive: {interval: 1s, timeout: 1s}}")
    config = bootstrap(port=port, admin=admin, virtual_hosts=all_to("files"), clusters=cluster("files", [files_port], keepalive))
    start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    assert request(port, path="/files/hello.txt").status == 200
    pid = next(p.pid for p in echoes.group.procs if p.name == "nghttpd")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for("the unanswered PING closes the upstream connection",
                 lambda: counter(admin, "envoy_cluster_http2_keepalive_timeout", envoy_cluster_name="files") >= 1,
                 timeout=15)
        assert counter(admin, "envoy_cluster_upstream_cx_destroy", envoy_cluster_name="files") >= 1
    finally:
        os.kill(pid, signal.SIGCONT)
    assert request(port, path="/files/hello.txt").status == 200
    assert counter(admin, "envoy_cluster_upstream_cx_total", envoy_cluster_name="files") == 2
