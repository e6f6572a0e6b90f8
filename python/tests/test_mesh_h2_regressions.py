"""Regression tests for two HTTP/2 fixes, each against a peer written here to
send exactly the frames that showed the defect:

- Request bytes an upstream never took go back to the client's connection
  window when their stream ends. Without it, streams reset with unconsumed
  bytes shrank the connection's receive window for good, to 0 once their
  bytes added up to it: every later stream on the connection stalled.
- An upstream's response header block has the HTTP/1.1 response parser's
  limits (100 fields, 60 KiB): HPACK lets a few bytes on the wire expand to
  megabytes of fields, which the proxy held and passed on.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import time
from pathlib import Path
from typing import Iterator

import pytest

from h2_support import H2_UPSTREAM, FaultyUpstream, nghttp
from mesh_support import *  # noqa: F401,F403
from mesh_support import Echoes, Proxy, bootstrap, cluster, http_get, ports, request, start_proxy

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
MAX_FRAME = 16384


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) with `first`'s high bits as the representation's flags."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = [first | limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])


def literal(name: bytes, value: bytes, *, index: bool = False) -> bytes:
    """A literal field with a new name (no Huffman): without indexing, or added to the dynamic table."""
    return (b"\x40" if index else b"\x00") + hpack_int(len(name), 7, 0) + name + hpack_int(len(value), 7, 0) + value


def request_block(method_index: int, path: bytes) -> bytes:
    """:method (static 2 GET, 3 POST), :scheme http, :path (indexed name 4), :authority test.local."""
    return bytes([0x80 | method_index, 0x86]) + b"\x04" + hpack_int(len(path), 7, 0) + path + b"\x01\x0atest.local"


def read_frame(sock: socket.socket, buf: bytearray) -> tuple[int, int, int, bytes] | None:
    """One frame (type, flags, stream, payload) from `buf`, reading as needed; None at EOF."""
    while True:
        if len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) >= 9 + length:
                kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                payload = bytes(buf[9:9 + length])
                del buf[:9 + length]
                return kind, flags, stream, payload
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk


class Client:
    """An HTTP/2 client that keeps to the proxy's flow-control windows (it
    sends DATA only as far as they allow) and records what each stream got."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = bytearray()
        self.conn_window = 65535
        self.initial_stream_window = 65535
        self.stream_windows: dict[int, int] = {}
        self.heads: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.resets: set[int] = set()
        self.body: dict[int, bytes] = {}  # each stream's DATA payloads (no padding is sent to us)
        # Our own windows are large, so the responses never wait on us.
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 1 << 24))
                          + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 24)))

    def pump(self, done, timeout: float) -> bool:
        """Reads frames until `done()` holds (True) or `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                f = read_frame(self.sock, self.buf)
            except (TimeoutError, socket.timeout):
                return False
            if f is None:
                return done()
            kind, flags, stream, payload = f
            if kind == SETTINGS and not flags & ACK:
                for i in range(0, len(payload), 6):
                    ident, value = struct.unpack(">HI", payload[i:i + 6])
                    if ident == 0x4:
                        for s in self.stream_windows:
                            self.stream_windows[s] += value - self.initial_stream_window
                        self.initial_stream_window = value
                self.sock.sendall(frame(SETTINGS, ACK, 0))
            elif kind == WINDOW_UPDATE:
                inc = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                if stream == 0:
                    self.conn_window += inc
                elif stream in self.stream_windows:
                    self.stream_windows[stream] += inc
            elif kind == HEADERS and stream not in self.heads:
                self.heads[stream] = payload
            elif kind == RST_STREAM:
                self.resets.add(stream)
            elif kind == DATA:
                self.body[stream] = self.body.get(stream, b"") + payload
            if kind in (HEADERS, DATA) and flags & END_STREAM:
                self.ended.add(stream)
        return True

    def open(self, stream: int, method_index: int, path: bytes, end: bool = False) -> None:
        self.stream_windows[stream] = self.initial_stream_window
        self.sock.sendall(frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), stream,
                                request_block(method_index, path)))

    def send(self, stream: int, n: int, end: bool, timeout: float = 10) -> bool:
        """Sends `n` body bytes as the windows allow; False when they stay shut for `timeout`."""
        while n > 0:
            room = lambda: min(self.conn_window, self.stream_windows[stream])  # noqa: E731
            if room() <= 0 and not self.pump(lambda: room() > 0, timeout):
                return False
            k = min(n, room(), MAX_FRAME)
            n -= k
            self.conn_window -= k
            self.stream_windows[stream] -= k
            self.sock.sendall(frame(DATA, END_STREAM if end and n == 0 else 0, stream, b"u" * k))
        return True

    def close(self) -> None:
        self.sock.close()


class Upstream(FaultyUpstream):
    """An HTTP/2 upstream on 127.0.0.1 in a thread (FaultyUpstream's server).
    For each request HEADERS it answers with `reply(stream)` (frames), or
    never answers (reply None); it never sends a WINDOW_UPDATE, so a
    connection to it takes 65,535 request body bytes in all."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.requests = 0
        super().__init__("reply")

    def _conn(self, c: socket.socket) -> None:
        buf = bytearray()
        try:
            while len(buf) < len(PREFACE):
                chunk = c.recv(65536)
                if not chunk:
                    return
                buf += chunk
            del buf[:len(PREFACE)]
            c.sendall(frame(SETTINGS, 0, 0))
            while (f := read_frame(c, buf)) is not None:
                kind, _, stream, _ = f
                if kind == HEADERS:
                    self.requests += 1
                    if self.reply is not None:
                        c.sendall(self.reply(stream))
        except OSError:
            pass
        finally:
            c.close()


@pytest.fixture
def upstreams() -> Iterator[dict[str, Upstream]]:
    status_200 = b"\x88"  # :status 200 (static table 8)
    many_fields = status_200 + b"".join(literal(b"x-field-%d" % i, b"v") for i in range(150))
    # One 4,000-byte field added to the dynamic table (index 62), then referred to 19 more times by one
    # byte each: 80 KB of fields from a 4 KB frame.
    big_fields = status_200 + literal(b"x-big", b"b" * 4000, index=True) + b"\xbe" * 19
    made = {
        "hang": Upstream(None),
        "many": Upstream(lambda s: frame(HEADERS, END_HEADERS | END_STREAM, s, many_fields)),
        "big": Upstream(lambda s: frame(HEADERS, END_HEADERS | END_STREAM, s, big_fields)),
        "small": Upstream(lambda s: frame(HEADERS, END_HEADERS | END_STREAM, s, status_200 + literal(b"x-ok", b"1"))),
    }
    yield made
    for u in made.values():
        u.close()


ROUTES = """\
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/hang/"}
                route: {cluster: hang, timeout: 0s}
              - match: {prefix: "/many/"}
                route: {cluster: many}
              - match: {prefix: "/big/"}
                route: {cluster: big}
              - match: {prefix: "/small/"}
                route: {cluster: small}
              - match: {prefix: "/"}
                route: {cluster: echo}
"""

STREAM_WINDOW, CONN_WINDOW = 1 << 20, 2 << 20


def proxy_with(kind: str, echoes: Echoes, upstreams: dict[str, Upstream], tmp_path: Path,
               hcm_extra: str = "") -> Proxy:
    pe = echoes.start("e1")
    port, admin = ports(2)
    clusters = cluster("echo", [pe]) + "".join(cluster(name, [u.port], H2_UPSTREAM) for name, u in upstreams.items())
    hcm = f"""\
          codec_type: AUTO
          http2_protocol_options:
            initial_stream_window_size: {STREAM_WINDOW}
            initial_connection_window_size: {CONN_WINDOW}
""" + hcm_extra
    config = bootstrap(port=port, admin=admin, virtual_hosts=ROUTES, clusters=clusters, hcm_extra=hcm)
    return start_proxy(echoes.group, kind, config, tmp_path, port=port, admin=admin)


def test_reset_streams_give_their_bytes_back_to_the_connection_window(
        proxy_kind: str, echoes: Echoes, upstreams: dict[str, Upstream], tmp_path: Path) -> None:
    """Two uploads fill the whole connection window towards an upstream that
    takes 64 KiB and then nothing; the client resets both. A third stream
    then sends more than the connection window to the echo service: it
    completes only if the reset streams' bytes went back to the window."""
    proxy = proxy_with(proxy_kind, echoes, upstreams, tmp_path)
    c = Client(proxy.port)
    try:
        assert c.pump(lambda: c.conn_window >= CONN_WINDOW and c.initial_stream_window == STREAM_WINDOW, 10), \
            (c.conn_window, c.initial_stream_window)
        c.open(1, 3, b"/hang/one")
        c.open(3, 3, b"/hang/two")
        assert c.send(1, STREAM_WINDOW, end=False) and c.send(3, STREAM_WINDOW, end=False)
        assert c.conn_window == 0
        c.sock.sendall(frame(RST_STREAM, 0, 1, struct.pack(">I", 0x8)) + frame(RST_STREAM, 0, 3, struct.pack(">I", 0x8)))
        c.open(5, 3, b"/echo/after-resets")
        assert c.send(5, CONN_WINDOW + STREAM_WINDOW, end=True), \
            f"the connection window stayed shut ({c.conn_window} bytes open) after the streams were reset"
        assert c.pump(lambda: 5 in c.ended or 5 in c.resets, 10)
        assert 5 not in c.resets and c.heads[5][:1] == b"\x88", c.heads.get(5)  # :status 200
    finally:
        c.close()


def test_an_upstream_header_block_over_the_limits_is_refused(
        proxy_kind: str, echoes: Echoes, upstreams: dict[str, Upstream], tmp_path: Path) -> None:
    """150 fields, and 80 KB of fields from a 4 KB frame: over the response
    limits (100 fields, 60 KiB), so the stream is reset upstream and the
    client gets a 5xx (HTTP/2 and HTTP/1.1 clients); a small head passes."""
    proxy = proxy_with(proxy_kind, echoes, upstreams, tmp_path)
    for name in ("many", "big"):
        r = nghttp(proxy.url(f"/{name}/h2"))
        assert r.status in (502, 503), (name, r.headers)
        assert "x-big" not in r.headers and "x-field-149" not in r.headers
        assert request(proxy.port, path=f"/{name}/h1").status in (502, 503), name
        assert upstreams[name].requests >= 2
    r = nghttp(proxy.url("/small/h2"))
    assert r.status == 200 and r.headers.get("x-ok") == "1", r.headers
    status, text = http_get(f"http://127.0.0.1:{proxy.admin}/stats/prometheus")
    assert status == 200
    for name in ("many", "big"):  # (Envoy counts other statistics for it)
        if proxy_kind == "envoy":
            break
        m = re.search(rf'^envoy_cluster_upstream_cx_protocol_error\{{envoy_cluster_name="{name}"\}} (\d+)$', text, re.M)
        assert m and int(m.group(1)) == 2, (name, m and m.group(0))


# The digits' HPACK Huffman codes (RFC 7541 Appendix B), for a :status sent Huffman-coded.
DIGIT_CODES = {"00000": "0", "00001": "1", "00010": "2", "011001": "3", "011010": "4", "011011": "5",
               "011100": "6", "011101": "7", "011110": "8", "011111": "9"}
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}


def first_status(block: bytes) -> int:
    """The :status of a response header block's first field (a fresh connection's: no dynamic table yet)."""
    b = block[0]
    if b & 0x80:  # indexed
        return STATIC_STATUS[b & 0x7F]
    index = b & (0x3F if b & 0x40 else 0x0F)
    assert index in STATIC_STATUS, block[:8]  # a literal whose name is :status
    length, huffman = block[1] & 0x7F, bool(block[1] & 0x80)
    raw = block[2:2 + length]
    if not huffman:
        return int(raw)
    bits, digits, code = "".join(f"{x:08b}" for x in raw), "", ""
    for bit in bits:
        code += bit
        if code in DIGIT_CODES:
            digits, code = digits + DIGIT_CODES[code], ""
    return int(digits)


def test_a_header_block_that_never_ends_is_answered_408_at_the_headers_timeout(
        proxy_kind: str, echoes: Echoes, upstreams: dict[str, Upstream], tmp_path: Path) -> None:
    """HEADERS without END_HEADERS, then nothing (the CONTINUATION never
    comes), from several clients at once, request_headers_timeout 1 s: Envoy
    answers each stream 408 "request header timeout" at the timeout;
    dpukit-mesh closed none in 60 s. The issue's figure, 200 clients and
    5 s: DPUKIT_MESH_SLOW_CLIENTS=200 DPUKIT_MESH_SLOW_TIMEOUT_S=5."""
    n = int(os.environ.get("DPUKIT_MESH_SLOW_CLIENTS", "5"))
    seconds = float(os.environ.get("DPUKIT_MESH_SLOW_TIMEOUT_S", "1"))
    proxy = proxy_with(proxy_kind, echoes, upstreams, tmp_path,
                       hcm_extra=f"          request_headers_timeout: {seconds:g}s\n")
    clients = [Client(proxy.port) for _ in range(n)]
    try:
        for c in clients:
            assert c.pump(lambda: c.initial_stream_window == STREAM_WINDOW, 10)
        t0 = time.monotonic()
        for c in clients:
            c.stream_windows[1] = c.initial_stream_window
            c.sock.sendall(frame(HEADERS, 0, 1, request_block(2, b"/never-ends")))  # no END_HEADERS
        bodies = []
        for c in clients:
            assert c.pump(lambda: 1 in c.heads, seconds + 10), "no answer to a header block that never ended"
            took = time.monotonic() - t0
            assert seconds * 0.9 <= took <= seconds + 5, took
            assert first_status(c.heads[1]) == 408, c.heads[1]
            c.pump(lambda: 1 in c.ended or 1 in c.resets, 5)
            bodies.append(c.body.get(1, b""))
        assert all(b == b"request header timeout" for b in bodies), bodies
    finally:
        for c in clients:
            c.close()
    # Prompt clients are still served.
    r = nghttp(proxy.url("/echo/after"))
    assert r.status == 200
