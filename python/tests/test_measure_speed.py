"""measure at a dpu speed (issue 25): `dpukit-measure --dpu-speed`, recorded in
every result; measure.bluefield's gains from paired rounds; and its quick eval
end to end, rebuilt byte for byte by `dpukit eval --render`."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from dpukit import native
from dpukit.experiments import measure as m
from dpukit.paths import display_path

from conftest import native_tool
from live_support import live_over, make_pcap, veth  # noqa: F401  (veth: the fixture, for the live test)

TOOL = "dpukit-measure"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    """A 20,000-packet backbone trace written by the real `gen`."""
    exe = native_tool(TOOL)
    out = tmp_path_factory.mktemp("trace") / "small.pcap"
    proc = subprocess.run([str(exe), "gen", "--preset", "backbone", "--flows", "2000", "--packets", "20000",
                           "--seed", "3", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("algo", ["cms", "duet"])
def test_run_records_the_dpu_speed_and_what_dilation_added(small_trace, tmp_path, algo):
    results = {}
    for speed in ("host", "0.5"):
        out = tmp_path / f"{speed}.json"
        results[speed] = native.run_tool(TOOL, ["run", "--trace", str(small_trace), "--algo", algo, "--passes", 2,
                                                "--dpu-speed", speed], json_path=out)
    host, half = results["host"], results["0.5"]
    assert host["placement"]["dpu_speed"] == {"name": "host", "factor": 1.0}
    assert half["placement"]["dpu_speed"] == {"name": "0.5", "factor": 0.5}
    assert host["figures"]["dpu_dilated_ns"] == 0
    # F = 0.5: the dilation adds about the dpu work it dilates (CPU time, so
    # a busy machine does not move it much); part of the dpu CPU is excluded
    # idle or wire time only by its wall time, hence the loose bounds.
    dilated = half["figures"]["dpu_dilated_ns"]
    assert dilated > 0
    if algo == "cms":
        # Duet's wire is a large share of its loop, billed to hw by its share of the loop's wall
        # time, which a preemption in these sub-millisecond runs moves by several times: its dpu
        # CPU is no measure to hold the dilation against here.
        assert 0.6 < dilated / (half["cpu_ns"]["dpu"] - dilated) < 1.3
    assert half["figures"]["metrics"] == host["figures"]["metrics"], "the same packets, the same estimates"


def test_a_bad_dpu_speed_exits_2_before_any_work(small_trace):
    exe = native_tool(TOOL)
    for bad in ("2", "0", "bluefield9"):
        proc = subprocess.run([str(exe), "zero-loss", "--trace", str(small_trace), "--algo", "cms",
                               "--dpu-speed", bad], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "dpu speed" in proc.stderr


def test_low_fraction_is_checked(small_trace):
    proc = subprocess.run([str(native_tool(TOOL)), "zero-loss", "--trace", str(small_trace), "--algo", "cms",
                           "--low-fraction", "0.5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--low-fraction" in proc.stderr


def run(pps: float) -> dict:
    return {"figures": {"zero_loss_pps": pps}}


def test_gains_are_per_round_ratios_and_a_failed_search_gives_none():
    runs = {("duet", "bluefield2"): [run(40e6), run(30e6), run(36e6)],
            ("cms", "bluefield2"): [run(20e6), run(10e6), run(0)]}
    gains = m.paired_gains(runs, "duet", "cms", "bluefield2")
    assert gains[:2] == [2.0, 3.0]
    assert math.isnan(gains[2]), "cms found no rate in round 3: no gain, not infinity"
    med, spread = m.median_and_range(gains)
    assert med == 2.0 and spread == "2.00–3.00"
    assert math.isnan(m.median_and_range([float("nan")])[0])


def test_capacity_is_packets_per_dpu_cpu_second_and_pairs_like_the_rate():
    def cap_run(ns: float) -> dict:
        return {"figures": {"dpu_cpu_ns_per_packet": ns}}

    assert m.capacity_mpps(cap_run(10.0)) == pytest.approx(100.0)
    assert math.isnan(m.capacity_mpps(cap_run(0.0)))
    runs = {("duet", "host"): [cap_run(5.0), cap_run(4.0)], ("cms", "host"): [cap_run(10.0), cap_run(12.0)]}
    assert m.paired_gains(runs, "duet", "cms", "host", m.capacity_mpps) == pytest.approx([2.0, 3.0])


def test_bluefield_runs_every_algorithm_at_both_speeds():
    names = [n for n, _ in m.BLUEFIELD_VARIANTS]
    for algo in ("cms", "cs", "elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon", "duet"):
        assert any(n.split()[0] == algo for n in names), algo
    assert m.BLUEFIELD_SPEEDS == ("host", "bluefield2")
    assert set(m.BLUEFIELD_QUICK) <= set(names) and {"cms", "univmon", "duet"} <= set(m.BLUEFIELD_QUICK)


@pytest.mark.slow
def test_eval_quick_bluefield_end_to_end_and_rebuilt(tmp_path, run_dpukit):
    native_tool(TOOL)
    out = tmp_path / "results"
    # The eval's own speed is bluefield3: the experiment's points still run at host and bluefield2.
    proc = run_dpukit("eval", "--quick", "--only", "measure.bluefield", "--dpu", "bluefield3", "--out", str(out),
                      timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = (out / "latest").resolve()
    md = (run_dir / "report.md").read_text()
    assert "## measure.bluefield:" in md and "measure.bluefield" in (run_dir / "report.html").read_text()
    assert "FAILED" not in md
    assert "Zero-loss rate, 64-byte packets, one polling dpu worker" in md
    assert "| Duet over | zero-loss gain at host |" in md and "28.9×" in md and "7.1×" in md
    results = [native.load_result(p) for p in sorted((run_dir / "runs").glob("measure.bluefield-*.json"))]
    for tool in ("dpukit-measure zero-loss", "dpukit-measure run"):  # the search, and the point as fast as possible
        speeds = sorted(r["placement"]["dpu_speed"]["name"] for r in results if r["tool"] == tool)
        # Both speeds for each, and the two NIC variants at bluefield2 for Duet and Count-Min.
        nic = len(m.NIC_QUICK) * len(m.NIC_VARIANTS)
        assert speeds == sorted(["host", "bluefield2"] * len(m.BLUEFIELD_QUICK) + ["bluefield2"] * nic), tool
        paths = {r["parameters"]["dpu_packet_path"]["packet_ns"] for r in results if r["tool"] == tool}
        assert 0.0 in paths and len(paths) == 3, paths  # host and F only; the preset's; the XDP_TX figure
    assert "Mpps per dpu CPU" in md and "per dpu CPU at bluefield2" in md
    assert "zero-loss, bluefield2, XDP_TX packet path" in md and "On the paper's 8 Arm cores" in md
    # Every run's command line is in the report (as test_measure.py checks for the other measure experiments).
    assert len(results) >= 6  # 3 algorithms x 2 speeds, and the NIC variants
    for r in results:
        shown = [display_path(Path(a)) if a.startswith("/") else a for a in r["command_line"]]
        assert " ".join(shown) in md
    png = run_dir / "plots" / "measure.bluefield-bluefield.png"
    assert png.is_file()
    written = {p: p.read_bytes() for p in (run_dir / "report.md", png)}
    for p in written:
        p.unlink()
    proc = run_dpukit("eval", "--render", str(run_dir), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for p, data in written.items():
        assert p.read_bytes() == data, p


def test_live_at_half_speed_dilates_its_workers(veth, tmp_path):  # noqa: F811
    """`live --dpu-speed 0.5` on a veth: the result records the speed and the
    dilation the workers (and Duet's control path) added; every frame is
    still measured or counted as a drop. Skipped without root or XDP."""
    exe = native_tool(TOOL)
    pcap = make_pcap(exe, tmp_path, 20000)
    result, _ = live_over(exe, veth, pcap, tmp_path / "live.json", "--algo", "duet", "--heavy-threshold", "100",
                          "--dpu-speed", "0.5")
    assert result["placement"]["dpu_speed"] == {"name": "0.5", "factor": 0.5}
    f = result["figures"]
    assert f["dpu_packets"] > 0 and f["dpu_dilated_ns"] > 0
    assert f["hw_packets"] + f["dpu_packets"] + f["drops"] >= 20000
