"""A listener that an update removes drains, as Envoy's does (--drain-time-s,
--drain-strategy immediate): an HTTP/1.1 keep-alive connection gets its
request in flight (or its next request) answered in full with
``Connection: close`` and is closed after it, and one that stays idle is
closed when the drain time ends; an HTTP/2 connection gets GOAWAY and
its stream in flight completes; a TCP proxy connection stays open until the
drain time ends and is closed then. A listener whose filter chain an update
changes in place drains that chain's connections too, while a listener that
only gets new routes keeps its connections, and they take the routes; its
local rate limit keeps the tokens it had.

Envoy 1.40 and dpukit-mesh on the same resources from the go-control-plane
server (mesh/tests/xds-server), and dpukit-mesh on a bootstrap file that a
SIGHUP reload changes; dpukit-mesh in both execution models.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from conftest import native_tool
from dpukit.experiments.mesh_xds import (HCM_TYPE, Snapshot, XdsServer, eds_cluster, http_listener,
                                         load_assignment, route_config, to_cluster, virtual_host, xds_bootstrap_yaml)
from dpukit.procs import Group, Proc, free_port, http_get
from mesh_support import Echoes, envoy_argv, envoy_validate, mesh_argv, read_response

DRAIN_S = 4  # --drain-time-s of every proxy here
DELAY_MS = 1500  # how long the upstream holds a request in flight
TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
NODE = "drain"


def tcp_listener(name: str, port: int, cluster: str) -> dict[str, Any]:
    return {"name": name, "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": {
                "@type": TCP_PROXY_TYPE, "stat_prefix": name, "cluster": cluster}}]}]}


def routes(name: str, **action: Any) -> dict[str, Any]:
    return route_config(name, [virtual_host("all", ["*"], [to_cluster({"prefix": "/"}, "echo", **action)])])


ROUTES = routes("all")


@dataclass
class Rig:
    """A proxy serving `http` (HTTP/1.1 and h2c) and `tcp` (tcp_proxy) on
    listeners that `remove()` takes away, and `kept`, which stays."""

    kind: str
    proc: Proc
    http: int
    tcp: int
    kept: int
    admin: int
    remove: Callable[[], None] = field(repr=False)
    # The listeners and route configurations of an update (http, tcp and kept on their ports).
    update: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None] = field(repr=False)


def wait_accepting(proc: Proc, *ports: int) -> None:
    for p in ports:
        proc.wait_port(p, timeout=20)


def xds_rig(group: Group, work: Path, kind: str, echo: int) -> Rig:
    xds = XdsServer.start(group)
    http, tcp, kept, admin = free_port(), free_port(), free_port(), free_port()
    config = work / f"{kind}.yaml"
    config.write_text(xds_bootstrap_yaml(node=NODE, admin_port=admin, xds_port=xds.xds_port))
    drain = ["--drain-time-s", str(DRAIN_S), "--drain-strategy", "immediate"]
    if kind == "envoy":
        argv = [*envoy_argv(config), *drain]
    else:
        native_tool("dpukit-mesh")  # skips when not built
        argv = [*mesh_argv(config, model="pipelined" if kind == "dpukit-pipelined" else "rtc", dpu_cpus=None), *drain]
    proc = group.start(argv, name=kind)
    common = dict(clusters=[eds_cluster("echo")], endpoints=[load_assignment("echo", [echo])])
    versions = iter(range(1, 100))

    def update(listeners: list[dict[str, Any]], route_configs: list[dict[str, Any]]) -> None:
        snap = Snapshot(str(next(versions)), listeners=listeners, routes=route_configs, **common)
        xds.post(NODE, snap)
        xds.wait_acked(NODE, snap, proxy=proc)

    update([http_listener("http", http, "all"), tcp_listener("tcp", tcp, "echo"), http_listener("kept", kept, "all")],
           [ROUTES])
    wait_accepting(proc, http, tcp, kept)
    return Rig(kind, proc, http, tcp, kept, admin, lambda: update([http_listener("kept", kept, "all")], [ROUTES]), update)


def static_bootstrap(admin: int, echo: int, listeners: list[dict[str, Any]],
                     route_configs: list[dict[str, Any]] = (ROUTES,)) -> str:
    """The same resources inline in a bootstrap file (JSON is YAML): the route
    configuration an HCM names inline instead of RDS, a STATIC cluster."""
    by_name = {rc["name"]: rc for rc in route_configs}
    listeners = copy.deepcopy(listeners)  # the caller's stay as given (with rds)
    for listener in listeners:
        for f in listener["filter_chains"][0]["filters"]:
            if f["typed_config"]["@type"] == HCM_TYPE:
                f["typed_config"]["route_config"] = by_name[f["typed_config"].pop("rds")["route_config_name"]]
    cluster = {"name": "echo", "type": "STATIC", "connect_timeout": "0.5s",
               "load_assignment": load_assignment("echo", [echo])}
    return json.dumps({"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
                       "static_resources": {"listeners": listeners, "clusters": [cluster]}})


def sighup_rig(group: Group, work: Path, echo: int) -> Rig:
    http, tcp, kept, admin = free_port(), free_port(), free_port(), free_port()
    config = work / "sighup.yaml"
    config.write_text(static_bootstrap(admin, echo, [http_listener("http", http, "all"),
                                                     tcp_listener("tcp", tcp, "echo"),
                                                     http_listener("kept", kept, "all")]))
    native_tool("dpukit-mesh")  # skips when not built
    proc = group.start([*mesh_argv(config, dpu_cpus=None), "--drain-time-s", str(DRAIN_S)], name="dpukit-sighup")
    wait_accepting(proc, http, tcp, kept)

    def update(listeners: list[dict[str, Any]], route_configs: list[dict[str, Any]]) -> None:
        config.write_text(static_bootstrap(admin, echo, listeners, route_configs))
        os.kill(proc.popen.pid, signal.SIGHUP)

    def remove() -> None:
        update([http_listener("kept", kept, "all")], [ROUTES])
        deadline = time.monotonic() + 10
        while not refused(http):  # the reload is in once the removed listener's socket is closed
            proc.check_alive()
            assert time.monotonic() < deadline, "the SIGHUP reload did not remove the listener"
            time.sleep(0.01)

    return Rig("dpukit-sighup", proc, http, tcp, kept, admin, remove, update)


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.fixture(params=["envoy", "dpukit", "dpukit-pipelined", "dpukit-sighup"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("drained")
        if request.param == "dpukit-sighup":
            yield sighup_rig(group, tmp_path, echo)
        else:
            yield xds_rig(group, tmp_path, request.param, echo)


# -- the clients ----------------------------------------------------------------------------------


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test.local\r\n{extra}\r\n".encode()


def keep_alive(port: int) -> tuple[socket.socket, Any]:
    """A connection that has served one request and stays open (keep-alive)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=DRAIN_S + 10)
    f = s.makefile("rb")
    s.sendall(get("/first"))
    r = read_response(f)
    assert r is not None and r.status == 200 and r.header("connection") != "close", r
    return s, f


def closed_at(s: socket.socket, f: Any, timeout: float) -> float | None:
    """When the peer closed `s` (monotonic), or None if it is still open after `timeout` s."""
    s.settimeout(max(0.05, timeout))
    try:
        data = f.read(1)
    except (TimeoutError, socket.timeout):
        return None
    except ConnectionResetError:
        return time.monotonic()
    assert data == b"", f"bytes on a connection that should only close: {data!r}"
    return time.monotonic()


def test_removed_listener_drains_its_connections(rig: Rig):
    # HTTP/1.1: keep-alive connections: one with a request in flight, two idle.
    busy, busy_f = keep_alive(rig.http)
    idle, idle_f = keep_alive(rig.http)
    late, late_f = keep_alive(rig.http)
    busy.sendall(get("/slow", f"x-echo-delay-ms: {DELAY_MS}\r\n"))
    # HTTP/2 (h2c, prior knowledge) with a stream in flight: nghttp prints the frames it receives.
    h2 = subprocess.Popen(["nghttp", "-v", "-H", f"x-echo-delay-ms: {DELAY_MS}", f"http://127.0.0.1:{rig.http}/h2"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # TCP proxy: a connection that has relayed one exchange, then stays idle and open.
    tcp, tcp_f = keep_alive(rig.tcp)
    try:
        time.sleep(0.4)  # both slow requests are at the upstream
        rig.remove()
        removed = time.monotonic()

        faults: list[str] = []  # every check is made, so a run names all that fail

        def check(ok: bool, fault: str) -> None:
            if not ok:
                faults.append(f"{rig.kind}: {fault}")

        # An idle connection's next request: answered, with Connection: close.
        late.sendall(get("/late"))
        r = read_response(late_f)
        check(r is not None and r.status == 200 and r.header("connection") == "close",
              f"a request on an idle connection of a removed listener, no Connection: close: {r}")
        # The request in flight: answered in full, with Connection: close.
        r = read_response(busy_f)
        check(r is not None and r.status == 200 and r.header("x-echo-path") == "/slow",
              f"the request in flight was not answered: {r}")
        check(r is not None and r.header("connection") == "close",
              f"the response in flight on a draining connection did not say Connection: close ({r})")
        # HTTP/2: GOAWAY(NO_ERROR), and the stream in flight completes.
        out, _ = h2.communicate(timeout=DRAIN_S + 10)
        check("recv GOAWAY frame" in out and "error_code=NO_ERROR" in out,
              f"no graceful GOAWAY on the HTTP/2 connection:\n{out}")
        check(":status: 200" in out and "x-echo-path: /h2" in out and h2.returncode == 0,
              f"the HTTP/2 stream in flight did not end well:\n{out}")

        # Envoy's counter of the HTTP connections a drain closes: the two
        # HTTP/1.1 ones that said Connection: close and the HTTP/2 one (read
        # before the drain time ends: Envoy's stats of the listener go with it).
        status, text = http_get(f"http://127.0.0.1:{rig.admin}/stats?filter=downstream_cx_drain_close")
        stats = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        check(status == 200 and stats.get("http.http.downstream_cx_drain_close") == "3",
              f"http.http.downstream_cx_drain_close: {stats.get('http.http.downstream_cx_drain_close')}, not 3")

        # Closed after Connection: close (dpukit-mesh at once; Envoy 1.40 keeps
        # it until the client closes or the drain time ends); what stays idle
        # (an HTTP/1.1 keep-alive connection, a TCP proxy connection) is
        # closed when the drain time ends, and not before (Envoy 1.40 does not
        # close an idle HTTP/1.1 connection at once: a request could be on the wire).
        end = removed + DRAIN_S + 3
        for name, s, f in (("in flight", busy, busy_f), ("late", late, late_f)):
            check(closed_at(s, f, end - time.monotonic()) is not None,
                  f"the {name} HTTP/1.1 connection stayed open after Connection: close and the drain time")
        for name, s, f in (("idle HTTP/1.1", idle, idle_f), ("TCP proxy", tcp, tcp_f)):
            at = closed_at(s, f, end - time.monotonic())
            check(at is not None, f"the {name} connection outlived the drain time")
            check(at is None or at - removed > DRAIN_S / 2,
                  f"the {name} connection was cut {(at or 0) - removed:.1f} s after the update, before the drain time")
        assert not faults, "\n".join(faults)
        # The listener that stayed serves on.
        kept, kept_f = keep_alive(rig.kept)
        kept.close()
    finally:
        for s in (busy, idle, late, tcp):
            s.close()
        if h2.poll() is None:
            h2.kill()
            h2.wait()


def echo_path(port: int) -> str | None:
    """x-echo-path of a request on a new connection (None: no answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/probe")
        r = conn.getresponse()
        r.read()
        return r.getheader("x-echo-path") if r.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def test_listener_changed_in_place_drains_its_connections(rig: Rig):
    """An update that changes the HTTP listener's filter chain (another
    stat_prefix and route configuration) drains the connections it holds:
    their next response says Connection: close. The kept listener only gets
    new routes: its connection stays open and takes them."""
    changed, changed_f = keep_alive(rig.http)
    kept, kept_f = keep_alive(rig.kept)
    try:
        http = http_listener("http", rig.http, "other")
        http["filter_chains"][0]["filters"][0]["typed_config"]["stat_prefix"] = "changed"
        rig.update([http, tcp_listener("tcp", rig.tcp, "echo"), http_listener("kept", rig.kept, "all")],
                   [routes("all", prefix_rewrite="/v3/"), routes("other", prefix_rewrite="/v2/")])
        deadline = time.monotonic() + 10
        while not ((echo_path(rig.http) or "").startswith("/v2/") and (echo_path(rig.kept) or "").startswith("/v3/")):
            rig.proc.check_alive()
            assert time.monotonic() < deadline, f"{rig.kind}: the update did not take effect within 10 s"
            time.sleep(0.05)
        changed.sendall(get("/after"))
        r = read_response(changed_f)
        assert r is not None and r.status == 200 and r.header("connection") == "close", \
            f"{rig.kind}: a connection of a chain changed in place was not drained: {r}"
        kept.sendall(get("/after"))
        r = read_response(kept_f)
        assert r is not None and r.status == 200 and r.header("connection") != "close", \
            f"{rig.kind}: a connection of a listener that only got new routes was drained: {r}"
        assert r.header("x-echo-path") == "/v3/after", f"{rig.kind}: the kept connection did not take the new routes: {r}"
    finally:
        changed.close()
        kept.close()


LOCAL_RATELIMIT = {
    "name": "envoy.filters.http.local_ratelimit",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
        "stat_prefix": "limited",
        "token_bucket": {"max_tokens": 2, "tokens_per_fill": 2, "fill_interval": "60s"},
        "filter_enabled": {"default_value": {"numerator": 100, "denominator": "HUNDRED"}},
        "filter_enforced": {"default_value": {"numerator": 100, "denominator": "HUNDRED"}}}}


def test_rate_limit_keeps_its_tokens_through_an_update(rig: Rig):
    """A listener whose update only brings new routes keeps its filters as
    they were: its local rate limit, spent, stays spent (Envoy keeps an
    unchanged filter chain; a new bucket would hand every client new tokens
    at each update)."""
    limited = http_listener("http", rig.http, "all")
    limited["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"].insert(0, LOCAL_RATELIMIT)
    listeners = [limited, tcp_listener("tcp", rig.tcp, "echo"), http_listener("kept", rig.kept, "all")]
    rig.update(listeners, [routes("all", prefix_rewrite="/v1/")])
    deadline = time.monotonic() + 10
    while not (echo_path(rig.kept) or "").startswith("/v1/"):
        assert time.monotonic() < deadline, f"{rig.kind}: the rate-limited listener did not come within 10 s"
        time.sleep(0.05)
    statuses = []
    for _ in range(3):
        status, _ = http_get(f"http://127.0.0.1:{rig.http}/spent", timeout=2)
        statuses.append(status)
    assert statuses == [200, 200, 429], f"{rig.kind}: {statuses}"
    rig.update(listeners, [routes("all", prefix_rewrite="/v2/")])
    while not (echo_path(rig.kept) or "").startswith("/v2/"):
        assert time.monotonic() < deadline + 10, f"{rig.kind}: the new routes did not come within 10 s"
        time.sleep(0.05)
    status, _ = http_get(f"http://127.0.0.1:{rig.http}/after", timeout=2)
    assert status == 429, f"{rig.kind}: after an update that only changed routes, the spent bucket answered {status}"


# -- a control plane that vanishes without a reset ---------------------------------------------------

# The ADS cluster's connection_keepalive (interval, timeout) in this test, and the xDS server's shortest
# permitted ping interval below it: without them, 30 + 10 s (mesh/src/xds/xds_client.cc).
KEEPALIVE = ("2s", "1s")
KEEPALIVE_S = 2 + 1


def test_ads_keepalive_notices_a_silent_control_plane(tmp_path: Path):
    """The xDS server stops answering without closing anything (SIGSTOP: its
    kernel still ACKs, so TCP sees nothing wrong): the proxy's HTTP/2 pings
    go unanswered, it drops the ADS stream and redials, serving the last
    good configuration meanwhile; once the server answers again the redialled
    stream takes a new snapshot. Without keepalive the stream would wait on
    the dead peer for ever."""
    with Group(tmp_path / "logs") as group:
        echo = Echoes(group).start("kept")
        xds = XdsServer.start(group, keepalive_min_time="1s")
        port, admin = free_port(), free_port()
        config = tmp_path / "ads.yaml"
        config.write_text(xds_bootstrap_yaml(node=NODE, admin_port=admin, xds_port=xds.xds_port, keepalive=KEEPALIVE))
        assert envoy_validate(config).returncode == 0, "Envoy takes the same connection_keepalive"
        native_tool("dpukit-mesh")  # skips when not built
        proc = group.start(mesh_argv(config, dpu_cpus=None), name="dpukit")
        common = dict(clusters=[eds_cluster("echo")], routes=[ROUTES], endpoints=[load_assignment("echo", [echo])])
        first = Snapshot("1", listeners=[http_listener("http", port, "all")], **common)
        xds.post(NODE, first)
        xds.wait_acked(NODE, first, proxy=proc)
        proc.wait_port(port)
        os.kill(xds.proc.popen.pid, signal.SIGSTOP)
        try:
            stopped = time.monotonic()
            proc.wait_line(r"mesh xDS: serving the last good configuration; reconnecting", timeout=KEEPALIVE_S + 20)
            noticed = time.monotonic() - stopped
            keep, keep_f = keep_alive(port)  # the last good configuration serves on
            keep.close()
        finally:
            os.kill(xds.proc.popen.pid, signal.SIGCONT)
        assert noticed >= 2, f"the stream was dropped after {noticed:.1f} s, before any keepalive ping was due"
        second = Snapshot("2", listeners=[http_listener("http2", port, "all")], **common)
        xds.post(NODE, second)
        xds.wait_acked(NODE, second, proxy=proc)
