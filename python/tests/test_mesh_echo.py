"""The echo service (``dpukit-mesh echo``), the upstream of every mesh test
and benchmark: its answers and the request headers that change them."""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from conftest import native_tool
from mesh_support import *  # noqa: F401,F403
from mesh_support import Echoes, chunked_upload, raw_exchange, read_response, request


def test_default_answer(echoes: Echoes):
    port = echoes.start("alpha", "--body-bytes", "10")
    r = request(port, "GET", "/some/path?q=1", headers={"x-echo-headers": "host, x-custom", "x-custom": "v1"})
    assert r.status == 200
    assert r.header("x-served-by") == "alpha"
    assert r.header("content-type") == "text/plain"
    assert r.body == b"alpha\n" + b"x" * 10
    assert r.header("x-echo-path") == "/some/path?q=1"
    assert r.header("x-echo-req-host") == "test.local"
    assert r.header("x-echo-req-x-custom") == "v1"
    assert r.header("x-echo-body-bytes") == "0" and r.header("x-echo-body-hash") == "00000000"
    # Only the listed request headers are echoed.
    plain = request(port, headers={"x-custom": "v1"})
    assert not [h for h in plain.headers if h.startswith("x-echo-req-")]


def test_status_delay_size_close(echoes: Echoes):
    port = echoes.start("beta")
    assert request(port, headers={"x-echo-status": "503"}).status == 503
    assert request(port, headers={"x-echo-status": "nope"}).status == 400
    t0 = time.monotonic()
    r = request(port, headers={"x-echo-delay-ms": "300"})
    assert r.status == 200 and time.monotonic() - t0 >= 0.29
    r = request(port, headers={"x-echo-size": "3000000"})
    assert len(r.body) == 3_000_000 and r.header("content-length") == "3000000"
    assert request(port, headers={"x-echo-size": "0"}).body == b""
    answers, closed = raw_exchange(port, b"GET /c HTTP/1.1\r\nHost: h\r\nx-echo-close: 1\r\n\r\n")
    assert [a.status for a in answers] == [200] and closed
    assert answers[0].header("connection") == "close"


def test_delay_does_not_block_other_connections(echoes: Echoes):
    """A delayed answer is a timer: one thread still serves everyone else."""
    port = echoes.start("gamma", threads=1)
    slow = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    slow.request("GET", "/slow", headers={"x-echo-delay-ms": "1500"})
    t0 = time.monotonic()
    assert request(port, "GET", "/fast").status == 200
    assert time.monotonic() - t0 < 1.0
    assert slow.getresponse().status == 200
    slow.close()


def test_chunked_upload_hash(echoes: Echoes):
    chunked_upload(echoes.start("up"), 20, host="h")


def test_content_length_body_and_pipelining(echoes: Echoes):
    port = echoes.start("pipe")
    data = (b"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /2 HTTP/1.1\r\nHost: h\r\n\r\n")
    answers, closed = raw_exchange(port, data, responses=2)
    assert [a.header("x-echo-path") for a in answers] == ["/1", "/2"]
    assert answers[0].header("x-echo-body-hash") == f"{zlib.crc32(b'hello'):08x}"
    assert answers[0].header("x-echo-body-bytes") == "5"
    assert not closed  # keep-alive


def test_malformed_request_is_400_and_closed(echoes: Echoes):
    port = echoes.start("bad")
    answers, closed = raw_exchange(port, b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: zz\r\n\r\n")
    assert [a.status for a in answers] == [400] and closed


def test_status_option_and_head(echoes: Echoes):
    port = echoes.start("down", "--status", "503")
    assert request(port).status == 503
    assert request(port, headers={"x-echo-status": "200"}).status == 200
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: h\r\nx-echo-status: 200\r\n\r\n"
                  b"GET /after HTTP/1.1\r\nHost: h\r\nx-echo-status: 200\r\n\r\n")
        f = s.makefile("rb")
        head = read_response(f, head_only=True)
        after = read_response(f)
    assert head.status == 200 and head.header("content-length") == str(len("down\n"))
    assert after.header("x-echo-path") == "/after" and after.body == b"down\n"


def test_unix_socket(echoes: Echoes, tmp_path: Path):
    path = tmp_path / "echo.sock"
    path_stale = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path_stale))  # a socket file nobody listens on
    stale.close()
    tool = native_tool("dpukit-mesh")
    for p in (path, path_stale):
        proc = echoes.group.start([str(tool), "echo", "--listen", f"unix:{p}", "--name", "u", "--threads", "2"],
                                  name=f"echo-{p.name}")
        proc.wait_line(rf"^echo u listening on unix:{p}$")
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(p))
            s.sendall(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
            r = read_response(s.makefile("rb"))
        assert r.status == 200 and r.body == b"u\n"
        proc.stop()
        assert not p.exists()  # removed at exit


@pytest.mark.parametrize("listen", ["256.1.1.1:80", "127.0.0.1:notaport", "nocolon", "192.0.2.1:8080"])
def test_bad_address_exits_2(listen: str):
    tool = native_tool("dpukit-mesh")
    proc = subprocess.run([str(tool), "echo", "--listen", listen], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2, proc.stderr
    assert "error" in proc.stderr and proc.stdout == ""


def test_port_in_use_exits_2(echoes: Echoes):
    """SO_REUSEPORT must not let a second echo join a port that is taken."""
    port = echoes.start("first", threads=2)
    tool = native_tool("dpukit-mesh")
    proc = subprocess.run([str(tool), "echo", "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True,
                          timeout=10)
    assert proc.returncode == 2 and "in use" in proc.stderr


def test_sigterm_exits_0(echoes: Echoes):
    echoes.start("term")
    p = echoes.procs["term"]
    p.popen.terminate()
    assert p.popen.wait(timeout=5) == 0
