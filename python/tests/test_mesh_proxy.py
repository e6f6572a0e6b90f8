"""End to end through the proxy with echo upstreams, against Envoy's
semantics: every test runs on real Envoy 1.40 (the reference, from the venv)
and on ``dpukit-mesh run`` with the same v3 bootstrap. A test that Envoy
cannot run (SIGHUP reload, dpukit-mesh's own exit codes) says so and runs on
dpukit-mesh only."""

from __future__ import annotations

import collections
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import native_tool
from mesh_support import *  # noqa: F401,F403
from mesh_support import (OUTLIER_5XX, Echoes, Proxy, all_to, bootstrap, chunked_upload, cluster, envoy_validate,
                          http_get, kill_under_load, ports, raw_exchange, request, start_proxy)

MiB = 1 << 20

# The routing configuration most tests share. Clusters: a, b, c (one echo
# each), flaky (a good and an always-503 endpoint), down (nobody listens).
ROUTES = """\
            - name: api
              domains: ["api.test"]
              routes:
              - match: {prefix: "/v1/"}
                route: {cluster: b}
            - name: wildcard
              domains: ["*.wild.test"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: c}
            - name: default
              domains: ["*"]
              routes:
              - match: {path: "/exact"}
                route: {cluster: b}
              - match: {prefix: "/old/"}
                route: {cluster: a, prefix_rewrite: "/new/"}
              - match:
                  safe_regex: {regex: "^/re/[0-9]+$"}
                route: {cluster: c}
              - match:
                  prefix: "/hdr"
                  headers:
                  - name: x-ver
                    string_match: {exact: v2}
                route: {cluster: b}
              - match: {prefix: "/hdr"}
                route: {cluster: a}
              - match: {prefix: "/weighted"}
                route:
                  weighted_clusters:
                    clusters:
                    - {name: a, weight: 80}
                    - {name: b, weight: 20}
              - match: {prefix: "/teapot"}
                direct_response:
                  status: 418
                  body: {inline_string: "short and stout"}
              - match: {prefix: "/headers"}
                route: {cluster: a}
                request_headers_to_add:
                - header: {key: x-added, value: "yes"}
                  append_action: OVERWRITE_IF_EXISTS_OR_ADD
                request_headers_to_remove: ["x-secret"]
              - match: {prefix: "/retry"}
                route:
                  cluster: flaky
                  retry_policy: {retry_on: 5xx, num_retries: 3}
              - match: {prefix: "/noretry"}
                route: {cluster: flaky}
              - match: {prefix: "/slow"}
                route: {cluster: a, timeout: 0.5s}
              - match: {prefix: "/down"}
                route: {cluster: down}
              - match: {prefix: "/"}
                route: {cluster: a}"""


@dataclass
class Setup:
    proxy: Proxy
    echoes: Echoes

    def get(self, path: str = "/", **kw):
        return request(self.proxy.port, kw.pop("method", "GET"), path, **kw)


@pytest.fixture
def setup(proxy_kind: str, echoes: Echoes, tmp_path: Path) -> Setup:
    for name in ("a", "b", "c", "good"):
        echoes.start(name)
    echoes.start("bad", "--status", "503")
    port, admin, dead = ports(3)
    p = echoes.ports
    clusters = (cluster("a", [p["a"]]) + cluster("b", [p["b"]]) + cluster("c", [p["c"]])
                + cluster("flaky", [p["good"], p["bad"]]) + cluster("down", [dead]))
    config = bootstrap(port=port, admin=admin, virtual_hosts=ROUTES, clusters=clusters)
    proxy = start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    return Setup(proxy, echoes)


# -- routing -----------------------------------------------------------------------


@pytest.mark.parametrize("host,path,headers,served_by", [
    ("x.local", "/exact", {}, "b"),
    ("x.local", "/exact/more", {}, "a"),      # path match is exact
    ("x.local", "/re/123", {}, "c"),
    ("x.local", "/re/12a", {}, "a"),          # the regex must match the whole path
    ("x.local", "/hdr", {"x-ver": "v2"}, "b"),
    ("x.local", "/hdr", {"x-ver": "v1"}, "a"),
    ("api.test", "/v1/users", {}, "b"),
    ("API.TEST", "/v1/users", {}, "b"),       # domains match case-insensitively
    ("one.wild.test", "/", {}, "c"),
    ("a.b.wild.test", "/", {}, "c"),
    ("wild.test", "/", {}, "a"),              # "*.wild.test" needs something before the dot
])
def test_route_matching(setup: Setup, host, path, headers, served_by):
    r = setup.get(path, host=host, headers=headers)
    assert r.status == 200
    assert r.header("x-served-by") == served_by


def test_no_route_is_404(setup: Setup):
    r = setup.get("/other", host="api.test")
    assert r.status == 404
    assert r.header("x-served-by") is None


def test_weighted_clusters(setup: Setup):
    counts = collections.Counter()
    conn = http.client.HTTPConnection("127.0.0.1", setup.proxy.port, timeout=10)
    for _ in range(1000):
        conn.request("GET", "/weighted", headers={"Host": "x.local"})
        r = conn.getresponse()
        r.read()
        counts[r.getheader("x-served-by")] += 1
    conn.close()
    assert set(counts) == {"a", "b"}
    assert 720 <= counts["a"] <= 880, counts  # 80 % of 1,000, with room for chance (5 sigma ~ 63)


def test_prefix_rewrite(setup: Setup):
    r = setup.get("/old/thing?x=1")
    assert r.header("x-served-by") == "a"
    assert r.header("x-echo-path") == "/new/thing?x=1"


def test_prefix_rewrite_of_an_absolute_form_target(setup: Setup):
    data = b"GET http://x.local/old/abs?q=2 HTTP/1.1\r\nHost: x.local\r\n\r\n"
    answers, _ = raw_exchange(setup.proxy.port, data, responses=1)
    assert [a.status for a in answers] == [200]
    assert answers[0].header("x-served-by") == "a"
    assert answers[0].header("x-echo-path") == "/new/abs?q=2"


def test_request_headers_to_add_and_remove(setup: Setup):
    r = setup.get("/headers", headers={"x-secret": "s", "x-added": "client", "x-kept": "k",
                                       "x-echo-headers": "x-secret,x-added,x-kept"})
    assert r.header("x-echo-req-x-secret") is None
    assert r.header("x-echo-req-x-added") == "yes"
    assert r.header("x-echo-req-x-kept") == "k"


def test_direct_response(setup: Setup):
    r = setup.get("/teapot")
    assert r.status == 418
    assert r.body == b"short and stout"
    assert r.header("x-served-by") is None


# -- upstream failures -----------------------------------------------------------------


def test_retry_on_5xx(setup: Setup):
    # Round robin over good and an always-503 endpoint: every request whose
    # first try went to the bad one is retried on the good one.
    for _ in range(20):
        r = setup.get("/retry")
        assert r.status == 200 and r.header("x-served-by") == "good"
    # Without a retry policy the 503s come through.
    statuses = collections.Counter(setup.get("/noretry").status for _ in range(10))
    assert statuses[503] >= 3 and statuses[200] >= 3, statuses


def test_route_timeout_is_504(setup: Setup):
    t0 = time.monotonic()
    r = setup.get("/slow", headers={"x-echo-delay-ms": "3000"})
    assert r.status == 504
    assert time.monotonic() - t0 < 2.5
    assert setup.get("/slow", headers={"x-echo-delay-ms": "10"}).status == 200


def test_upstream_down_is_503(setup: Setup):
    assert setup.get("/down").status == 503
    assert setup.get("/").status == 200


def test_upstream_status_passes_through(setup: Setup):
    r = setup.get("/", headers={"x-echo-status": "503"})
    assert r.status == 503 and r.header("x-served-by") == "a"


# -- HTTP/1.1 on the client side ------------------------------------------------------------


def test_chunked_body_that_looks_like_a_request_stays_a_body(setup: Setup):
    """A decoded chunked body holding a request must reach the upstream as
    body bytes, re-framed, never as a second request (request smuggling)."""
    inner = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    data = (b"POST /p1 HTTP/1.1\r\nHost: x.local\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n"
            + b"GET /after HTTP/1.1\r\nHost: x.local\r\n\r\n")
    answers, _ = raw_exchange(setup.proxy.port, data, responses=2)
    assert [a.status for a in answers] == [200, 200]
    assert answers[0].header("x-echo-body-bytes") == str(len(inner))
    assert answers[0].header("x-echo-body-hash") == f"{zlib.crc32(inner):08x}"
    assert [a.header("x-echo-path") for a in answers] == ["/p1", "/after"]


def test_keepalive_and_pipelining(setup: Setup):
    data = b"".join(f"GET /p{i} HTTP/1.1\r\nHost: x.local\r\n\r\n".encode() for i in (1, 2, 3))
    answers, closed = raw_exchange(setup.proxy.port, data, responses=3)
    assert [a.status for a in answers] == [200, 200, 200]
    assert [a.header("x-echo-path") for a in answers] == ["/p1", "/p2", "/p3"]
    assert not closed


def test_chunked_upload_50mb(setup: Setup):
    chunked_upload(setup.proxy.port, 50, host="x.local")


def test_download_50mb(setup: Setup):
    conn = http.client.HTTPConnection("127.0.0.1", setup.proxy.port, timeout=30)
    conn.request("GET", "/big", headers={"Host": "x.local", "x-echo-size": str(50 * MiB)})
    r = conn.getresponse()
    n = 0
    while chunk := r.read(MiB):
        n += len(chunk)
    conn.close()
    assert r.status == 200 and n == 50 * MiB


# Each malformed request is refused, the connection closed, and the proxy
# serves the next connection. The statuses are Envoy 1.40's.
SMUGGLING = {
    "cl-and-te": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "duplicate-cl": b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
    "bad-te": b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    "space-before-colon": b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
    "bare-lf": b"GET / HTTP/1.1\nHost: x\n\n",
    "obs-fold": b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n",
    "missing-host": b"GET / HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    "oversized-header": b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (61 * 1024) + b"\r\n\r\n",
    "too-many-headers": b"GET / HTTP/1.1\r\nHost: x\r\n"
                        + b"".join(b"X-H%d: v\r\n" % i for i in range(101)) + b"\r\n",
}
SMUGGLING_STATUS = {"oversized-header": {431}, "too-many-headers": {431}}
# A last coding that is not chunked: Envoy answers 501 (a coding it does not
# implement); RFC 9112 §6.3 and our issue want 400, and a 501 from a coding
# before chunked ("gzip, chunked") is tested in mesh_http_tests.
STATUS_BY_PROXY = {("envoy", "bad-te"): {501}}


# Envoy 1.40 (default BalsaParser) accepts these three: a bare LF as a line
# end, obs-fold (unfolded to spaces) and two Host fields (joined as "x,y").
# RFC 9112 allows refusing the first two and requires 400 for the third
# (§3.2); dpukit-mesh refuses all three, so here it is stricter than the
# reference, on purpose.
ENVOY_ACCEPTS = {"bare-lf", "obs-fold", "two-hosts"}


@pytest.mark.parametrize("case", list(SMUGGLING))
def test_malformed_requests_are_refused(setup: Setup, case: str):
    if setup.proxy.kind == "envoy" and case in ENVOY_ACCEPTS:
        answers, closed = raw_exchange(setup.proxy.port, SMUGGLING[case], responses=1)
        assert [a.status for a in answers] == [200] and not closed
        return
    answers, closed = raw_exchange(setup.proxy.port, SMUGGLING[case], responses=2)
    assert len(answers) == 1, [a.status for a in answers]
    expected = STATUS_BY_PROXY.get((setup.proxy.kind, case), SMUGGLING_STATUS.get(case, {400}))
    assert answers[0].status in expected, answers[0]
    assert answers[0].header("x-served-by") is None  # never reached an upstream
    assert closed
    assert setup.get("/").status == 200


# -- endpoints that die ---------------------------------------------------------------------


def test_killed_upstream_is_routed_around(proxy_kind: str, echoes: Echoes, tmp_path: Path):
    pa, pb = echoes.start("a"), echoes.start("b")
    port, admin = ports(2)
    config = bootstrap(port=port, admin=admin, clusters=cluster("pool", [pa, pb], OUTLIER_5XX), virtual_hosts=all_to("pool"))
    proxy = start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    served = collections.Counter(request(port).header("x-served-by") for _ in range(10))
    assert served == {"a": 5, "b": 5}

    during = kill_under_load(port, echoes.procs["b"].pid)
    assert during[200] > 0
    after = [request(port) for _ in range(100)]
    assert [r.status for r in after] == [200] * 100
    assert {r.header("x-served-by") for r in after} == {"a"}
    proxy.proc.check_alive()


# -- local rate limit ------------------------------------------------------------------------

RATELIMIT = """\
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: http_local_rate_limiter
              token_bucket: {max_tokens: 3, tokens_per_fill: 3, fill_interval: 60s}
              filter_enabled:
                runtime_key: local_rate_limit_enabled
                default_value: {numerator: 100, denominator: HUNDRED}
              filter_enforced:
                runtime_key: local_rate_limit_enforced
                default_value: {numerator: 100, denominator: HUNDRED}
"""
ONE_ROUTE = all_to("counted")


def test_local_ratelimit_429(proxy_kind: str, echoes: Echoes, tmp_path: Path):
    pa = echoes.start("a")
    port, admin = ports(2)
    config = bootstrap(port=port, admin=admin, virtual_hosts=ONE_ROUTE, clusters=cluster("counted", [pa]),
                       http_filters=RATELIMIT)
    start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    assert [request(port).status for _ in range(5)] == [200, 200, 200, 429, 429]


# -- admin ---------------------------------------------------------------------------------------


def test_admin_ready_stats_config_dump(proxy_kind: str, echoes: Echoes, tmp_path: Path):
    pa = echoes.start("a")
    port, admin = ports(2)
    config = bootstrap(port=port, admin=admin, virtual_hosts=ONE_ROUTE, clusters=cluster("counted", [pa]))
    start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    for _ in range(7):
        assert request(port).status == 200
    status, text = http_get(f"http://127.0.0.1:{admin}/ready")
    assert status == 200
    status, text = http_get(f"http://127.0.0.1:{admin}/stats/prometheus")
    assert status == 200
    m = re.search(r'^envoy_cluster_upstream_rq_total\{envoy_cluster_name="counted"\} (\d+)$', text, re.M)
    assert m, text[:2000]
    assert int(m.group(1)) == 7
    status, text = http_get(f"http://127.0.0.1:{admin}/config_dump")
    assert status == 200
    dump = json.loads(text)
    assert "counted" in json.dumps(dump)


# -- configuration faults and reload (dpukit-mesh's own behaviour) --------------------------------


BAD_CONFIG = """\
static_resources:
  listeners: []
  clusters:
  - name: a
    conect_timeout: 1s
    type: STATIC
"""


def test_malformed_config_is_refused(proxy_kind: str, tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_CONFIG)
    if proxy_kind == "envoy":
        # The reference: Envoy refuses the same file.
        proc = envoy_validate(path, timeout=30)
        assert proc.returncode != 0
        assert "conect_timeout" in proc.stdout + proc.stderr
        return
    tool = native_tool("dpukit-mesh")
    for args in (["validate", "--config", str(path)], ["run", "--config", str(path)]):
        proc = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=15)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "conect_timeout" in proc.stderr and "clusters" in proc.stderr, proc.stderr


TWO_CHAINS = """\
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
    filter_chains:
    - name: passthrough
      filter_chain_match: {transport_protocol: tls}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: passthrough
          cluster: a
    - name: plaintext
      filter_chain_match: {transport_protocol: raw_buffer}
"""


# dpukit-mesh only: Envoy takes new routes through xDS, not SIGHUP.
@pytest.mark.parametrize("proxy_kind", ["mesh", "mesh-pipelined"])
@pytest.mark.parametrize("chains", ["one", "two"])
def test_sighup_reload_keeps_connections(proxy_kind: str, chains: str, echoes: Echoes, tmp_path: Path):
    """A reload keeps established keep-alive connections, and their next
    request takes the new routes — also when the listener has several filter
    chains (chosen per connection by filter_chain_match), where the connection
    must follow its own chain into the new configuration."""
    pa, pb = echoes.start("a"), echoes.start("b")
    port, admin = ports(2)

    def config(target: str) -> str:
        text = bootstrap(port=port, admin=admin, clusters=cluster("a", [pa]) + cluster("b", [pb]),
                         virtual_hosts=all_to(target))
        return text.replace("    filter_chains:\n    - filters:\n", TWO_CHAINS + "      filters:\n") \
            if chains == "two" else text

    proxy = start_proxy(echoes.group, proxy_kind, config("a"), tmp_path, port=port, admin=admin)
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def on_kept() -> str | None:
        kept.request("GET", "/", headers={"Host": "x"})
        r = kept.getresponse()
        r.read()
        assert r.status == 200
        return r.getheader("x-served-by")

    assert on_kept() == "a"
    assert request(port).header("x-served-by") == "a"
    proxy.config.write_text(config("b"))
    os.kill(proxy.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 5
    while request(port).header("x-served-by") != "b":
        assert time.monotonic() < deadline, "the new route did not take effect within 5 s"
        time.sleep(0.1)
    # The established keep-alive connection survived the reload and follows its chain's new routes.
    assert on_kept() == "b"
    kept.close()
    proxy.proc.check_alive()


# -- slow clients ------------------------------------------------------------------------


def test_slow_clients_get_408(proxy_kind: str, echoes: Echoes, tmp_path: Path):
    """request_headers_timeout and request_timeout: a client that stalls in its
    head, or in its body, is answered 408 and its connection closed; a prompt
    one on the same proxy is served."""
    pa = echoes.start("a")
    port, admin = ports(2)
    config = bootstrap(port=port, admin=admin, clusters=cluster("a", [pa]), hcm_extra="""\
          request_headers_timeout: 0.5s
          request_timeout: 1s
""", virtual_hosts=all_to("a"))
    start_proxy(echoes.group, proxy_kind, config, tmp_path, port=port, admin=admin)
    for stalled in (b"GET / HTTP/1.1\r\nHost: x\r\nx-partial: ",                           # in the head
                    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"):       # in the body
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            t0 = time.monotonic()
            s.sendall(stalled)
            answer = s.recv(4096)
            waited = time.monotonic() - t0
            assert answer.startswith(b"HTTP/1.1 408"), (stalled, answer)
            assert 0.3 < waited < 3.0, waited
            assert s.recv(4096) == b""  # closed
    assert request(port).status == 200
