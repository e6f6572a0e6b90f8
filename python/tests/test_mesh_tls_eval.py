"""dpukit eval's mesh.tls experiment: the parser of openssl s_time's output,
the generated configurations (valid for Envoy 1.40 and dpukit-mesh), and a
short end-to-end run that produces the tables, the goals and the plot,
leaves no file behind, and whose report ``dpukit eval --render`` rebuilds
from its runs alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import native_tool
from eval_support import rebuilt_byte_for_byte, rendered_with_figure
from dpukit import experiments, native

experiments.registry()
from dpukit.experiments import mesh_tls  # noqa: E402

S_TIME_NEW = """\
Collecting connection statistics for 3 seconds
************************************************************************

2238 connections in 1.51s; 1482.12 connections/user sec, bytes read 0
2238 connections in 3 real seconds, 0 bytes read per connection
"""

S_TIME_REUSE = """\
Now timing with session id reuse.
starting
rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr*rrr

14164 connections in 0.63s; 22482.54 connections/user sec, bytes read 0
14164 connections in 3 real seconds, 0 bytes read per connection
"""


# Under 10 ms of the client's user time (few handshakes on a busy machine): the rate is inf.
S_TIME_NO_USER_TIME = """\
Now timing with session id reuse.
starting
rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr

109 connections in 0.00s; inf connections/user sec, bytes read 0
109 connections in 2 real seconds, 0 bytes read per connection
"""


def test_parse_s_time():
    f = mesh_tls.parse_s_time(S_TIME_NEW)
    assert (f["connections"], f["requests"], f["reused"], f["client_user_s"]) == (2238, 2238, 0, 1.51)
    f = mesh_tls.parse_s_time(S_TIME_REUSE)
    assert (f["connections"], f["reused"]) == (14164, 71)
    f = mesh_tls.parse_s_time(S_TIME_NO_USER_TIME)
    assert (f["connections"], f["reused"], f["client_user_s"]) == (109, 109, 0.0)
    with pytest.raises(Exception, match="without its summary"):
        mesh_tls.parse_s_time("connect: Connection refused\nconnect:errno=111\n")


def test_registered():
    assert "dpukit.experiments.mesh_tls" in experiments.MODULES
    assert "mesh.tls" in experiments.registry()
    assert [t.name for t in mesh_tls.request_topologies()] == ["direct", "envoy-sidecars", "node-proxy-pair"]
    assert [t.name for t in mesh_tls.bulk_topologies()] == ["direct", "envoy-sidecars", "node-proxy-pair"]


def generated_configs(tmp_path: Path) -> dict[str, str]:
    certs = mesh_tls.mesh_certs(mesh_tls.CertFactory(tmp_path / "certs"))
    sds_a = mesh_tls.sds_certificate_file(tmp_path / "a.yaml", "default", certs.frontend)
    sds_b = mesh_tls.sds_certificate_file(tmp_path / "b.yaml", "default", certs.backend)
    out = {}
    for l4 in (False, True):
        out[f"server-{'l4' if l4 else 'http'}"] = mesh_tls.server_side_yaml(certs, sds_b, listen=10001, admin=10002,
                                                                            service=10003, l4=l4, node="b")
        out[f"client-{'l4' if l4 else 'http'}"] = mesh_tls.client_side_yaml(certs, sds_a, listen=10004, admin=10005,
                                                                            peer=10001, l4=l4, node="a")
    return out


def test_generated_configs_are_valid_for_envoy(tmp_path: Path):
    from mesh_support import envoy_bin
    for name, text in generated_configs(tmp_path).items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        run = subprocess.run([str(envoy_bin()), "--mode", "validate", "-c", str(path), "-l", "error",
                              "--disable-hot-restart"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{name}: {run.stdout}{run.stderr}"


def test_generated_configs_are_valid_for_dpukit_mesh(tmp_path: Path):
    tool = native_tool("dpukit-mesh")
    for name, text in generated_configs(tmp_path).items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        run = subprocess.run([str(tool), "validate", "--config", str(path)], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0, f"{name}: {run.stdout}{run.stderr}"


@pytest.mark.slow
def test_eval_mesh_tls(tmp_path: Path, run_dpukit):
    """The whole experiment with 1-second load phases, at bluefield3 so that
    one run also shows the node pair with its records on the crypto engine
    beside the pair on the cores; everything it wrote in the temporary
    directory is gone afterwards."""
    native_tool("dpukit-mesh")
    out, tmp = tmp_path / "results", tmp_path / "tmp"
    tmp.mkdir()
    proc = run_dpukit("eval", "--quick", "--dpu", "bluefield3", "--only", "mesh.tls", "--out", str(out), timeout=600,
                      env={mesh_tls.SECONDS_ENV: "1", "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(tmp.iterdir()) == [], "left in TMPDIR"
    run_dir = (out / "latest").resolve()
    md = (run_dir / "report.md").read_text()
    assert "## mesh.tls" in md
    for server in ("envoy", "node-proxy", "openssl-s_server"):
        for mode in ("full, TLS 1.3", "full, TLS 1.2", "resumed (session ticket), TLS 1.2"):
            assert re.search(rf"^\| {server} \| {re.escape(mode)} \| [\d,]+ \|", md, re.M), (server, mode)
    for name in ("direct", "envoy-sidecars", "node-proxy-pair"):
        assert re.search(rf"^\| {name} \| 1 \| [\d.]+ \|", md, re.M), name        # iperf3 Gbps
        assert re.search(rf"^\| {name} \| [\d,]+ \| [\d.]+ \|", md, re.M), name  # max qps
    goal = r"-?[\d.,]+: (met|missed)"
    assert re.search(rf"^\| node-proxy-pair \| {goal} \| {goal} \| {goal} \|$", md, re.M), md
    assert "0 errors and 0 non-2xx" in md, md[md.find("load runs"):][:2000]
    assert (run_dir / "plots" / "mesh.tls-request-path.png").stat().st_size > 5000
    runs = [native.load_result(p) for p in sorted((run_dir / "runs").glob("mesh.tls-*.json"))]
    # handshakes: 3 servers x 3 modes; iperf3 at 1 and 4 streams and wrk and fortio: 3 topologies and the
    # engine pair
    assert len(runs) == 3 * 3 + 4 * 2 + 4 * 2, [r["parameters"] for r in runs]
    for r in runs:
        top = r["parameters"]["topology"]
        if top in ("node-proxy", "node-proxy-pair"):
            assert r["cpu_ns"]["dpu"] > 0, top
        if top == "envoy-sidecars":
            assert r["cpu_ns"]["host"] > 0 and r["cpu_ns"]["dpu"] == 0, r["cpu_ns"]
        if r["parameters"].get("mode", "").startswith("resumed"):
            assert r["figures"]["reused"] >= r["figures"]["connections"] - 1, r["figures"]

    # The engine pair: its hw CPU counted and out of its dpu CPU; none on the cores' pair.
    num = r"[\d.,]+(?: \([\d.,–]+\))?"
    for name in ("node-proxy-pair", "node-proxy-pair-engine"):
        assert re.search(rf"^\| {name} \| {num} \| {num} \| {num} \| {num} \| {num} \|$", md, re.M), name
    assert re.search(rf"^\| engine / cores \(paired\) \| {num} \|", md, re.M)
    # The engine's dpu CPU per byte against the cores' (a timing figure: its goal shown met or missed, not asserted).
    assert re.search(r"dpu CPU per GB with the engine / on the cores [\d.]+(?: \([\d.–]+\))? \(paired; goal below 0\.95: "
                     r"(met|missed)\)", md), md[md.find("Bulk ("):][:600]
    engine = [r for r in runs if r["parameters"]["topology"] == "node-proxy-pair-engine"]
    assert len(engine) == 2 + 2, [r["parameters"] for r in engine]
    for r in engine:
        assert r["figures"]["hw_cpu_ns"] > 0, r["parameters"]
        assert r["cpu_ns"]["dpu"] > r["figures"]["hw_cpu_ns"]
    for r in runs:
        if r["parameters"]["topology"] == "node-proxy-pair":
            assert r["figures"].get("hw_cpu_ns", 0) == 0, r["parameters"]

    # The report is rebuilt from the runs: byte for byte, then with a run's figure changed.
    rebuilt_byte_for_byte(run_dir, run_dpukit, "mesh.tls")
    md = rendered_with_figure(run_dir, run_dpukit, "mesh.tls-*-direct-wrk*.json", "qps", 123456.0)
    assert re.search(r"^\| direct \| 123,000 \|", md, re.M)
