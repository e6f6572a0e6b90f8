"""The node proxy at a dpu's speed (``dpukit-mesh run --dpu-speed``): every
data-plane loop is dilated, so under the same load the proxy spends about
1/F times the CPU per request and still answers every request; the result
JSON records the speed and what the loops dilated.

Ratios with generous bounds only, no latency thresholds (the machine is shared)."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import pytest

from conftest import native_tool, quick_eval
from mesh_support import *  # noqa: F401,F403
from mesh_support import Echoes, all_to, bootstrap, cluster, ports
from dpukit.mesh_harness import SECONDS_ENV, mesh_argv, wait_ready
from dpukit.procs import Group
from eval_support import rebuilt_byte_for_byte

CLIENTS, PER_CLIENT = 4, 1000  # a fixed load: 4,000 requests over 4 keep-alive connections


def serve_fixed_load(port: int) -> dict[int, int]:
    """CLIENTS keep-alive connections, PER_CLIENT requests each; statuses counted."""
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        seen: dict[int, int] = {}
        for _ in range(PER_CLIENT):
            conn.request("GET", "/speed", headers={"Host": "test.local"})
            r = conn.getresponse()
            r.read()
            seen[r.status] = seen.get(r.status, 0) + 1
        conn.close()
        with lock:
            for k, v in seen.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def run_at(speed: str, model: str, upstream: int, work: Path) -> dict:
    """The proxy at ``speed`` under the fixed load: its CPU time over the load
    (from /proc), the statuses and its result JSON."""
    port, admin = ports(2)
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"proxy-{speed}-{model}.yaml"
    config.write_text(bootstrap(port=port, admin=admin, virtual_hosts=all_to("svc"),
                                clusters=cluster("svc", [upstream])))
    out = work / f"proxy-{speed}-{model}.json"
    with Group(work / f"logs-{speed}-{model}") as group:
        native_tool("dpukit-mesh")  # skips when not built
        proc = group.start([*mesh_argv(config, model=model, dpu_cpus=None, dpu_speed=speed), "--json", str(out)],
                           name=f"mesh-{speed}")
        wait_ready(proc, port, admin, timeout=15)
        before = proc.cpu_ns()
        statuses = serve_fixed_load(port)
        cpu = proc.cpu_ns() - before
        proc.check_alive()
    result = json.loads(out.read_text())
    return {"cpu_ns": cpu, "statuses": statuses, "result": result, "log": proc.output()}


@pytest.mark.parametrize("model", ["rtc", "pipelined"])
def test_half_speed_doubles_cpu_per_request(echoes: Echoes, tmp_path: Path, model: str):
    upstream = echoes.start("svc", threads=2)
    host = run_at("host", model, upstream, tmp_path)
    half = run_at("0.5", model, upstream, tmp_path)
    requests = CLIENTS * PER_CLIENT
    for run in (host, half):
        assert run["statuses"] == {200: requests}, run["log"][-2000:]
        assert run["result"]["figures"]["requests"] == requests

    # The speed is recorded where every result JSON records it.
    assert host["result"]["placement"]["dpu_speed"] == {"name": "host", "factor": 1.0}
    assert half["result"]["placement"]["dpu_speed"] == {"name": "0.5", "factor": 0.5}
    assert "--dpu-speed" in half["result"]["command_line"]

    # At host speed nothing is dilated; at 0.5 every loop stays busy as long
    # again as its work took: dilated = work x (1/F - 1) = work. The control
    # plane's loop too (it answered wait_ready's /ready polls), counted apart
    # and in the totals.
    zero = {"work_ns": 0, "dilated_ns": 0}
    assert host["result"]["figures"]["dilation"] == {**zero, "data_plane": zero, "control_plane": zero}
    dil = half["result"]["figures"]["dilation"]
    assert dil["work_ns"] > 0
    assert dil["control_plane"]["work_ns"] > 0 and dil["data_plane"]["work_ns"] > 0, dil
    assert dil["work_ns"] == dil["control_plane"]["work_ns"] + dil["data_plane"]["work_ns"]
    assert 0.8 <= dil["dilated_ns"] / dil["work_ns"] <= 1.3, dil
    # ... and the dilated time is the proxy's own CPU time (what the slower core would have spent).
    process_cpu = half["result"]["cpu_ns"]["dpu"]
    assert 1.5 <= process_cpu / (process_cpu - dil["dilated_ns"]) <= 2.5, (process_cpu, dil)

    # From /proc, over the fixed load alone: the proxy's CPU time is about
    # twice what it dilated (nearly all of which it dilated under the load).
    # Not compared with the host run's CPU: on this shared VM the CPU time of a
    # request varies between runs by more than 2x at times (cache, steal).
    assert 1.4 <= half["cpu_ns"] / dil["dilated_ns"] <= 2.6, (half["cpu_ns"], dil)

def test_bad_speed_is_refused(tmp_path: Path):
    """A speed outside (0, 1] or an unknown preset: exit 2 naming the option, nothing served."""
    import subprocess

    config = tmp_path / "c.yaml"
    port, admin = ports(2)
    config.write_text(bootstrap(port=port, admin=admin, virtual_hosts=all_to("svc"), clusters=cluster("svc", [1])))
    for bad in ("1.5", "0", "bluefield9"):
        r = subprocess.run([str(native_tool("dpukit-mesh")), "run", "--config", str(config), "--dpu-speed", bad],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 2, (bad, r.stderr)
        assert "--dpu-speed" in r.stderr, r.stderr


@pytest.mark.slow
def test_eval_quick_bluefield(tmp_path: Path, run_dpukit):
    """`dpukit eval --quick --only mesh.bluefield`: the sidecar pair and the
    node proxy at host and bluefield3 speed measured side by side, the
    bluefield3 proxy really dilated (its CPU per request above the host
    proxy's in the same eval), and the report rebuilt byte for byte."""
    import re

    from dpukit import native

    native_tool("dpukit-mesh")
    # 1-second load phases (the eval's are 3 s).
    run_dir, md = quick_eval("mesh.bluefield", tmp_path / "results", timeout=300, env={SECONDS_ENV: "1"})
    for name in ("envoy-sidecars", "node-proxy-host", "node-proxy-bluefield3"):
        assert re.search(rf"^\| {name} \| [\d,]+ \|", md, re.M), name
    assert "dpu CPUs at BlueField-3 speed to match the Envoy sidecar pair" in md
    assert "0 errors and 0 non-2xx" in md
    # The model's promise on the node proxy, with its goal (a timing figure: met or missed, not asserted).
    assert re.search(r"proxy CPU per request at `bluefield3` / at host speed, paired by round, at 1,000 qps: "
                     r"[\d.]+ against 1/F = 2\.2\d* ± 5% \(goal\): (met|missed)\. At max qps [\d.]+ ", md), md
    assert len(list((run_dir / "plots").glob("mesh.bluefield-*.png"))) == 1
    per_request: dict[str, float] = {}
    for p in sorted((run_dir / "runs").glob("mesh.bluefield-*-wrk*.json")):
        r = native.load_result(p)
        top = r["parameters"]["topology"]
        if top.startswith("node-proxy"):
            proxy = next(c for c in r["parameters"]["chain"] if c["name"] == "node-proxy")
            assert proxy["command_line"][-2:] == ["--dpu-speed", r["parameters"]["dpu_speed"]]
            per_request[top] = r["cpu_ns"]["dpu"] / r["figures"]["requests"]
    # Loose (other tenants move CPU per request between runs): dilation at F = 0.455 asks 2.2x.
    assert per_request["node-proxy-bluefield3"] > 1.3 * per_request["node-proxy-host"], per_request

    rebuilt_byte_for_byte(run_dir, run_dpukit, "mesh.bluefield")
