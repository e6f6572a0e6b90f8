"""HTTP/2 pieces the h2 tests share: nghttp as a client, an HTTP/2 upstream
cluster's options, and an upstream that hangs or dies mid-request."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from dataclasses import dataclass

from dpukit.mesh_harness import H2_UPSTREAM  # noqa: F401 (the h2 tests' cluster fields)
from mesh_support import TcpUpstream



@dataclass
class H2Response:
    status: int
    headers: dict[str, str]
    frames: str  # nghttp -v's trace


def nghttp(url: str, *extra: str, timeout: float = 60) -> H2Response:
    """One request with ``nghttp -v -n`` (body discarded): status, headers, frame trace."""
    out = subprocess.run(["nghttp", "-v", "-n", *extra, url], capture_output=True, text=True, timeout=timeout).stdout
    headers = {}
    for m in re.finditer(r"recv \(stream_id=\d+\) ([^:\s][^:]*|:status): (.*)", out):
        headers[m.group(1)] = m.group(2)
    assert ":status" in headers, out
    return H2Response(int(headers[":status"]), headers, out)


class FaultyUpstream(TcpUpstream):
    """A TCP server on 127.0.0.1 in a thread. Each connection reads the client
    preface and frames until a HEADERS frame, then does ``mode``: "hang" (never
    answers), "die" (closes), "die-mid-body" (SETTINGS, a 200 head and part of
    a body, then closes)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.conns: list[socket.socket] = []
        self.heads = 0
        super().__init__()

    def _accepted(self, conn: socket.socket) -> None:
        self.conns.append(conn)

    def _conn(self, c: socket.socket) -> None:
        buf = b""
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                pos = 24 if buf.startswith(b"PRI * HTTP/2.0") else 0
                saw_headers = False
                while len(buf) >= pos + 9:
                    length = int.from_bytes(buf[pos:pos + 3], "big")
                    saw_headers = saw_headers or buf[pos + 3] == 1
                    pos += 9 + length
                if saw_headers:
                    break
            self.heads += 1
            if self.mode == "hang":
                while c.recv(65536):
                    pass
                return
            if self.mode == "die-mid-body":
                frame = lambda t, f, sid, p: len(p).to_bytes(3, "big") + bytes([t, f]) + sid.to_bytes(4, "big") + p
                c.sendall(frame(4, 0, 0, b"") + frame(1, 4, 1, b"\x88")  # SETTINGS; HEADERS :status 200
                          + frame(0, 0, 1, b"partial body"))
                time.sleep(0.3)
        finally:
            c.close()

    def close(self) -> None:
        super().close()
        for c in self.conns:
            c.close()
