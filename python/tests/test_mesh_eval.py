"""dpukit eval's mesh experiments and their harness: the parsers of the load
generators' output, the generated bootstraps as Envoy validates them, the
sweeps as data, and an end-to-end quick run that produces the mesh table and
plot, rebuilt by ``dpukit eval --render``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import native_tool, quick_eval
from dpukit import experiments, mesh_harness as harness, native

# The registry keeps import order: load every system's experiments first, so
# that importing the mesh module here does not put it ahead of core.
experiments.registry()
from dpukit.experiments import mesh as mesh_exps  # noqa: E402
from eval_support import rebuilt_byte_for_byte, rendered_with_figure  # noqa: E402

WRK_OUTPUT = """\
Running 3s test @ http://127.0.0.1:40000/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   114.13us   90.45us   2.25ms   98.29%
    Req/Sec   130.58k    14.67k  142.38k    80.65%
  Latency Distribution
     50%  101.00us
     75%  120.00us
     90%    1.50ms
     99%    2.00s
  401545 requests in 3.10s, 64.33MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec: 129485.62
Transfer/sec:     20.75MB
"""


def test_parse_wrk():
    f = harness.parse_wrk(WRK_OUTPUT)
    assert f["requests"] == 401545 and f["qps"] == pytest.approx(129485.62)
    assert f["errors"] == 3 and f["non_2xx"] == 7
    assert f["p50_ms"] == pytest.approx(0.101) and f["p90_ms"] == pytest.approx(1.5)
    assert f["p99_ms"] == pytest.approx(2000.0)


def test_parse_fortio():
    text = json.dumps({
        "RequestedQPS": "1000", "ActualQPS": 998.5,
        "RetCodes": {"200": 2990, "503": 4, "-1": 1},
        "DurationHistogram": {"Count": 2995, "Avg": 0.0005, "Percentiles": [
            {"Percentile": 50, "Value": 0.0004}, {"Percentile": 99, "Value": 0.002},
            {"Percentile": 99.9, "Value": 0.004}]},
    })
    f = harness.parse_fortio("", text)
    assert f["requests"] == 2995 and f["qps"] == 998.5 and f["requested_qps"] == 1000
    assert f["non_2xx"] == 5 and f["errors"] == 1
    assert f["p50_ms"] == pytest.approx(0.4) and f["p99_9_ms"] == pytest.approx(4.0)


def test_a_sweep_is_data_its_render_reads_back():
    """A sweep's phases go into the eval's record as JSON and come back the
    same; each phase gives its runs' parameters in the order collect walks them."""
    for phase in [p for sweep in (mesh_exps.QUICK, mesh_exps.LATENCY, mesh_exps.THROUGHPUT, mesh_exps.L4,
                                  mesh_exps.JITTER) for p in sweep.phases]:
        assert harness.Phase.from_json(json.loads(json.dumps(phase.to_json()))) == phase
        assert phase.load in harness.LOADS
    latency, = mesh_exps.LATENCY.phases
    assert [s["qps"] for s in latency.settings()] == list(mesh_exps.LATENCY_QPS)
    assert latency.settings()[0] == {"load": "fortio", "connections": 8, "seconds": mesh_exps.FULL_SECONDS,
                                     "qps": mesh_exps.LATENCY_QPS[0]}
    assert [s["load"] for p in mesh_exps.QUICK.phases for s in p.settings()] == ["wrk", "fortio"]
    # Swept finds a run by topology, phase and point.
    records = [{"n": i} for i in range(4)]
    swept = harness.Swept([latency], [harness.Described("direct", "d")], {}, 2, records,
                          {"direct": [[[0, 2], [1, 3]] + [[]] * (len(mesh_exps.LATENCY_QPS) - 2)]})
    assert swept.runs("direct", 0, mesh_exps.LATENCY_QPS[1]) == [{"n": 1}, {"n": 3}]


def test_topologies_are_registered_and_selectable(monkeypatch):
    names = [t.name for t in harness.TOPOLOGIES]
    assert names[:2] == ["direct", "envoy-sidecars"]
    assert {"envoy-sockmap", "node-proxy", "node-proxy-uds", "node-proxy-shm", "node-proxy-pipelined",
            "node-proxy-pipelined-uds", "node-proxy-pipelined-shm"} <= set(names)
    # Both execution models over all three attachments; the quick eval keeps under a minute with fewer.
    assert {t.name for t in harness.topologies(quick=True)} < {t.name for t in harness.topologies()}
    assert {"mesh.quick", "mesh.latency", "mesh.throughput", "mesh.jitter", "mesh.access_log"} <= set(
        experiments.registry())
    monkeypatch.setenv(harness.TOPOLOGIES_ENV, "node-proxy,direct")
    assert [t.name for t in harness.topologies()] == ["node-proxy", "direct"]
    monkeypatch.setenv(harness.TOPOLOGIES_ENV, "sidecar")
    with pytest.raises(Exception, match="unknown topology"):
        harness.topologies()


@pytest.mark.parametrize("kind", ["http", "http-shm", "tcp", "http-logged"])
def test_bootstrap_is_valid_for_envoy(tmp_path: Path, kind: str):
    """The generated sidecar / node-proxy bootstraps (HTTP to a port, HTTP to
    an attach point over the rings, tcp_proxy, HTTP with Istio's access log)
    pass Envoy's own validation."""
    ports = dict(listen_port=10001, admin_port=10002, upstream_port=10003, node="t")
    path = tmp_path / "b.yaml"
    path.write_text(harness.tcp_bootstrap_yaml(**ports) if kind == "tcp" else
                    harness.bootstrap_yaml(**ports, upstream_pipe=str(tmp_path / "s.sock"), attach_shm=True)
                    if kind == "http-shm" else
                    harness.bootstrap_yaml(**ports, access_log=str(tmp_path / "access.log"))
                    if kind == "http-logged" else harness.bootstrap_yaml(**ports))
    proc = harness.envoy_validate(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_eval_quick_mesh(tmp_path: Path, run_dpukit):
    native_tool("dpukit-mesh")
    # 1-second load phases (the eval's are 3 s): every topology still carries both loads, errorless.
    run_dir, md = quick_eval("mesh.quick", tmp_path / "results", timeout=180, env={harness.SECONDS_ENV: "1"})
    assert "## mesh.quick" in md
    names = [t.name for t in harness.TOPOLOGIES if t.in_quick]
    assert {"direct", "envoy-sidecars", "envoy-sockmap", "node-proxy", "node-proxy-uds", "node-proxy-shm",
            "node-proxy-pipelined"} <= set(names)
    for name in names:
        assert re.search(rf"^\| {name} \| [\d,]+ \|", md, re.M), name  # a row with a measured max qps
    assert "host CPU ms / 1k req" in md and "p99.9 ms" in md
    assert "`wrk -t1 -c16 -d1s`" in md and "-t 1s`" in md  # the lengths it ran with, kept for the rebuild
    assert "0 errors and 0 non-2xx" in md
    pngs = list((run_dir / "plots").glob("mesh.quick-*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 5000
    runs = sorted((run_dir / "runs").glob("mesh.quick-*.json"))
    assert len(runs) == 2 * len(names)  # wrk and fortio per topology
    for p in runs:
        r = native.load_result(p)
        assert r["figures"]["requests"] > 0
        chain = r["parameters"]["chain"]
        assert "service" in [p["name"] for p in chain]
        if r["parameters"]["topology"] == "node-proxy-shm":
            proxy = next(p for p in chain if p["name"] == "node-proxy")
            assert "attach: shm" in proxy["config"]
        if r["parameters"]["topology"].startswith("node-proxy"):
            assert r["cpu_ns"]["dpu"] > 0
        if r["parameters"]["topology"] == "envoy-sidecars":
            assert r["cpu_ns"]["host"] > 0 and r["cpu_ns"]["dpu"] == 0

    # `dpukit eval --render` rebuilds the section, its tables and its plot
    # from runs/ alone, byte for byte, running nothing (no chain, no load);
    # then with a run's figure changed, the table shows it.
    rebuilt_byte_for_byte(run_dir, run_dpukit, "mesh.quick")
    md = rendered_with_figure(run_dir, run_dpukit, "mesh.quick-*-direct-wrk.json", "qps", 777777.0)
    assert re.search(r"^\| direct \| 778,000 \|", md, re.M)


SOCKPERF_OUT = """\
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=7751; ReceivedMessages=7749
sockperf: \x1b[2;35m====> avg-latency=12.816 (std-dev=26.693)\x1b[0m
sockperf: # dropped messages = 1; # duplicated messages = 0; # out-of-order messages = 0
sockperf: ---> <MAX> observation = 1553.781
sockperf: ---> percentile 99.999 = 1553.781
sockperf: ---> percentile 99.900 =   67.489
sockperf: ---> percentile 99.000 =   17.210
sockperf: ---> percentile 50.000 =   12.308
sockperf: ---> <MIN> observation =    6.965
"""


def test_parse_sockperf():
    f = harness.parse_sockperf(SOCKPERF_OUT)
    assert f["avg_us"] == 12.816 and f["std_dev_us"] == 26.693
    assert (f["p50_us"], f["p99_us"], f["p99_9_us"], f["max_us"]) == (12.308, 17.210, 67.489, 1553.781)
    assert f["messages"] == 7749 and f["lost"] == 3  # 2 unanswered + 1 dropped
    with pytest.raises(Exception, match="no statistics"):
        harness.parse_sockperf("sockperf: error: connection refused")


def test_phase_seconds_from_the_environment(monkeypatch):
    """$DPUKIT_MESH_SECONDS sets every load phase's length (the tests' short
    runs), leaves phases without one alone, and refuses what is not a
    whole number of seconds."""
    sweep = harness.Sweep(lambda quick: ([], {}), (harness.Phase("wrk", {"connections": 16, "seconds": 3}),
                                                   harness.Phase("other", {"rate": 5}, "x", (1, 2))), rounds=2)
    monkeypatch.delenv(harness.SECONDS_ENV, raising=False)
    assert harness.with_phase_seconds(sweep) is sweep
    monkeypatch.setenv(harness.SECONDS_ENV, "1")
    short = harness.with_phase_seconds(sweep)
    assert [p.fixed for p in short.phases] == [{"connections": 16, "seconds": 1}, {"rate": 5}]
    assert (short.phases[1].vary, short.phases[1].points, short.rounds) == ("x", (1, 2), 2)
    assert sweep.phases[0].fixed["seconds"] == 3  # the sweep itself unchanged
    for bad in ("0", "1.5", "soon"):
        monkeypatch.setenv(harness.SECONDS_ENV, bad)
        with pytest.raises(harness.DpukitError, match="DPUKIT_MESH_SECONDS"):
            harness.with_phase_seconds(sweep)
