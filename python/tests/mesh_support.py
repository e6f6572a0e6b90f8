"""Shared pieces of the mesh tests: echo upstreams, a proxy that is either
real Envoy or dpukit-mesh run on the same Envoy v3 YAML, and a small raw
HTTP/1.1 client (the tests need to send exactly the bytes they mean).

The configuration pieces, the proxies' command lines and their start-up are
the experiments' harness (``dpukit.mesh_harness``), re-exported here.

Fixtures are defined here and pulled into a test module with
``from mesh_support import *  # noqa: F401,F403`` (pytest collects fixtures
from the module namespace).
"""

from __future__ import annotations

import collections
import http.client
import os
import re
import signal
import socket
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pytest

from conftest import native_tool
from dpukit.mesh_harness import (HCM, ROUTER, all_to, bootstrap, cluster, cluster_of, envoy_argv,  # noqa: F401
                                 envoy_validate, mesh_argv, shm_cluster, start_echo, wait_ready)
from dpukit.mesh_harness import envoy_path as envoy_bin  # a missing Envoy fails the test with the how-to
from dpukit.procs import Group, Proc, free_port, http_get

__all__ = ["echoes", "proxy_kind", "start_proxy", "envoy_bin", "Echoes", "Proxy", "Response", "request",
           "raw_exchange", "read_response", "http_get", "HCM", "ROUTER", "bootstrap", "cluster", "cluster_of",
           "ports", "kill_under_load", "all_to", "envoy_validate"]


# -- echo upstreams --------------------------------------------------------------


class Echoes:
    """Echo services started on demand, all ended at teardown."""

    def __init__(self, group: Group):
        self.group = group
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}

    def start(self, name: str, *extra: str, threads: int = 1) -> int:
        """Start ``dpukit-mesh echo --name NAME`` on a free port; its port."""
        native_tool("dpukit-mesh")  # skips when not built
        proc, address = start_echo(self.group, name, threads=threads, extra=extra, proc_name=f"echo-{name}")
        self.procs[name] = proc
        self.ports[name] = int(address.rsplit(":", 1)[1])
        return self.ports[name]


@pytest.fixture
def echoes(tmp_path: Path) -> Iterator[Echoes]:
    with Group(tmp_path / "echo-logs") as group:
        yield Echoes(group)


# -- the proxy under test: Envoy or dpukit-mesh --------------------------------------


@pytest.fixture(params=["envoy", "mesh", "mesh-pipelined"])
def proxy_kind(request: pytest.FixtureRequest) -> str:
    """Each proxy test runs against real Envoy (the reference) and dpukit-mesh
    in both execution models (run-to-completion, and pipelined: the same
    modules on stage threads)."""
    return request.param


@dataclass
class Proxy:
    kind: str
    proc: Proc
    port: int
    admin: int
    config: Path

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def start_proxy(group: Group, kind: str, config_text: str, work: Path, *, port: int, admin: int,
                extra: Sequence[str] = ()) -> Proxy:
    """Start ``kind`` ("envoy" or "mesh") on the bootstrap ``config_text`` and
    wait until admin /ready answers 200 and the listener accepts; ``extra``:
    more command-line arguments (a flag both take, such as
    --file-flush-interval-msec)."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"{kind}-{port}.yaml"
    config.write_text(config_text)
    if kind == "envoy":
        argv = envoy_argv(config)
    else:
        native_tool("dpukit-mesh")  # skips when not built
        argv = mesh_argv(config, model="pipelined" if kind == "mesh-pipelined" else "rtc", dpu_cpus=None)
    proc = group.start([*argv, *extra], name=f"{kind}-{port}")
    wait_ready(proc, port, admin, timeout=15)
    return Proxy(kind, proc, port, admin, config)


# -- services attached over the rings, and a proxy killed under load ---------------------------


def start_attached(echoes: Echoes, name: str, path: Path, *extra: str) -> None:
    """``dpukit-mesh echo --listen shm:PATH``: a service attached over the rings."""
    native_tool("dpukit-mesh")  # skips when not built
    echoes.procs[name], _ = start_echo(echoes.group, name, listen=f"shm:{path}", extra=extra, proc_name=f"echo-{name}")


# -- upstreams written in the test ---------------------------------------------------------------


class TcpUpstream:
    """A TCP server on 127.0.0.1 (a free port) in a thread: each connection it
    accepts goes to ``_conn`` (what a subclass serves) on a thread of its own.
    A subclass sets what ``_conn`` reads before calling this ``__init__``:
    connections may come as soon as it returns."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self._accepted(conn)
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _accepted(self, conn: socket.socket) -> None:
        """A connection just accepted, before ``_conn`` runs on it."""

    def _conn(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()






# The cluster fields with which a killed host is routed around: three 5xx in a
# row eject it (for 30 s), the pool keeping at least half of its hosts.
OUTLIER_5XX = """\
    outlier_detection:
      consecutive_5xx: 3
      interval: 1s
      base_ejection_time: 30s
      max_ejection_percent: 50
"""


def kill_under_load(port: int, pid: int) -> collections.Counter:
    """SIGKILL ``pid`` while a client sends request after request to ``port``;
    the statuses seen meanwhile ("error": the client got no answer; "cut": the
    head came and the body stopped short, which is all a proxy can pass on
    when the service dies between writing the two, as Envoy does too)."""
    stop = threading.Event()
    during: collections.Counter = collections.Counter()

    def load() -> None:
        while not stop.is_set():
            try:
                during[request(port, timeout=2).status] += 1
            except http.client.IncompleteRead:
                during["cut"] += 1
            except OSError:
                during["error"] += 1

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)
    stop.set()
    t.join()
    return during




# -- HTTP clients ----------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; repeated fields joined with ","
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def request(port: int, method: str = "GET", path: str = "/", *, host: str = "test.local",
            headers: dict[str, str] | None = None, body: bytes | None = None, timeout: float = 10) -> Response:
    """One request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
        r = conn.getresponse()
        data = r.read()
        hdrs: dict[str, str] = {}
        for k, v in r.getheaders():
            hdrs[k.lower()] = f"{hdrs[k.lower()]},{v}" if k.lower() in hdrs else v
        return Response(r.status, hdrs, data)
    finally:
        conn.close()


def read_response(f, *, head_only: bool = False) -> Response | None:
    """One response from a socket file (``sock.makefile('rb')``); None at EOF."""
    line = f.readline()
    if not line:
        return None
    m = re.match(rb"HTTP/1\.[01] (\d{3})", line)
    assert m, f"not a status line: {line!r}"
    headers: dict[str, str] = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = f"{headers[k.strip().lower()]},{v.strip()}" if k.strip().lower() in headers \
            else v.strip()
    status = int(m.group(1))
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Response(status, headers, b"")
    if "content-length" in headers:
        body = f.read(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(f.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b""):
                    pass
                break
            body += f.read(size)
            f.readline()
    else:
        body = f.read()
    return Response(status, headers, body)


def chunked_upload(port: int, mib: int, *, host: str) -> None:
    """POSTs ``mib`` MiB to the echo service at (or behind) ``port`` in chunks
    of a MiB, each different; the echo must count and hash the whole body."""
    block = os.urandom(1 << 20)
    total, crc = 0, 0

    def body():
        nonlocal total, crc
        for i in range(mib):
            chunk = block[i:] + block[:i]
            total += len(chunk)
            crc = zlib.crc32(chunk, crc)
            yield chunk

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/upload", body=body(), encode_chunked=True,
                 headers={"Host": host, "Transfer-Encoding": "chunked"})
    r = conn.getresponse()
    r.read()
    conn.close()
    assert r.status == 200
    assert total == mib << 20
    assert r.getheader("x-echo-body-bytes") == str(total)
    assert r.getheader("x-echo-body-hash") == f"{crc:08x}"


def raw_exchange(port: int, data: bytes, *, responses: int = 1, timeout: float = 5) -> tuple[list[Response], bool]:
    """Send ``data`` in one write; up to ``responses`` answers and whether the
    server closed the connection afterwards."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        f = s.makefile("rb")
        got: list[Response] = []
        for _ in range(responses):
            r = read_response(f)
            if r is None:
                break
            got.append(r)
        try:
            s.settimeout(2)
            closed = f.read(1) == b""
        except (TimeoutError, socket.timeout):
            closed = False
        except ConnectionResetError:
            closed = True
        return got, closed


def ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]
