"""dpukit eval's mesh.xds: its snapshots pass the control plane and its
bootstrap passes both proxies' validation; a quick end-to-end run produces
the table, one result per proxy, size and round, leaves nothing behind, and
its report is rebuilt from its runs alone by ``dpukit eval --render``."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import native_tool
from dpukit import experiments, native

# The registry keeps import order: load every system's experiments first.
experiments.registry()
from dpukit.experiments import mesh_xds  # noqa: E402
from dpukit.procs import Group  # noqa: E402
from eval_support import rebuilt_byte_for_byte, rendered_with_figure  # noqa: E402


def test_sized_snapshot_is_consistent_and_taken(tmp_path: Path):
    """N clusters, N load assignments, a route each and the probe's; go-control-plane's check passes."""
    snap = mesh_xds.sized_snapshot(7, 5, 10001, 10002)
    assert [c["name"] for c in snap.clusters] == [f"c{k}" for k in range(5)]
    assert len(snap.endpoints) == 5 and snap.types() == list(mesh_xds.RESOURCE_TYPES)
    probe = snap.routes[0]["virtual_hosts"][0]["routes"][0]
    assert probe["route"] == {"cluster": "c2", "prefix_rewrite": "/v7/"}
    with Group(tmp_path / "logs") as group:
        xds = mesh_xds.XdsServer.start(group)
        xds.post("n", snap)
        assert xds.status() == {}  # no proxy asked yet


@pytest.mark.parametrize("kind", mesh_xds.KINDS)
def test_xds_bootstrap_is_valid(tmp_path: Path, kind: str):
    """The ADS bootstrap passes `envoy --mode validate` and `dpukit-mesh validate`."""
    path = tmp_path / "b.yaml"
    path.write_text(mesh_xds.xds_bootstrap_yaml(node="t", admin_port=10001, xds_port=10002))
    if kind == "envoy":
        from mesh_support import envoy_bin
        argv = [str(envoy_bin()), "--mode", "validate", "-c", str(path), "-l", "error", "--disable-hot-restart"]
    else:
        argv = [str(native_tool("dpukit-mesh")), "validate", "--config", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_eval_quick_mesh_xds(tmp_path: Path, run_dpukit):
    native_tool("dpukit-mesh")
    mesh_xds.xds_server_path()
    ours = set(Path(tempfile.gettempdir()).glob("dpukit-mesh-xds-*"))
    out = tmp_path / "results"
    proc = run_dpukit("eval", "--quick", "--only", "mesh.xds", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(Path(tempfile.gettempdir()).glob("dpukit-mesh-xds-*")) == ours  # its work directory is gone
    run_dir = (out / "latest").resolve()
    md = (run_dir / "report.md").read_text()
    assert "## mesh.xds" in md
    for size in ("10", "100"):
        for proto, _, _ in mesh_xds.PROTOCOLS:
            for kind in mesh_xds.KINDS:
                assert re.search(rf"^\| {size} \| {proto} \| {kind} \| [\d.]+ \(", md, re.M), (size, proto, kind)
            # the paired ratios
            assert re.search(rf"^\| {size} \| {proto} \| [\d.]+ \([\d.]+–[\d.]+\) \| ", md, re.M), (size, proto)
    runs = sorted((run_dir / "runs").glob("mesh.xds-*.json"))
    assert len(runs) == 2 * 2 * len(mesh_xds.KINDS) * len(mesh_xds.PROTOCOLS)  # sizes × rounds × proxies × xDS
    for p in runs:
        r = native.load_result(p)
        f = r["figures"]
        assert len(f["first_request_ms"]) == 5 and min(f["first_request_ms"]) > 0
        assert f["cpu_updates"] == 20 and r["cpu_ns"]["dpu"] == f["proxy_cpu_ns"]
        if r["parameters"]["api_type"] == "GRPC":  # every type again: never under a 10 ms tick in 20 updates
            assert f["proxy_cpu_ns"] > 0
        assert r["parameters"]["proxy"] in mesh_xds.KINDS
        assert "dynamic_resources" in r["parameters"]["proxy_config"]

    # The report is rebuilt from the runs: byte for byte, then with a run's figure changed.
    rebuilt_byte_for_byte(run_dir, run_dpukit, "mesh.xds")
    md = rendered_with_figure(run_dir, run_dpukit, "mesh.xds-*-dpukit-GRPC-10-r1.json", "cpu_ms_per_update", 777.0)
    assert re.search(r"^\| 10 \| state of the world \| dpukit \| .* \| [\d.,]+ \([\d.]+–777\) \|$", md, re.M)
