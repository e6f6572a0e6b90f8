"""DPUBench's end-to-end programs (dpukit.bench_e2e): real short runs of the
client and the server as separate processes, on loopback and in network
namespaces (when root), the records they make, the clean-up, and the figures."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import native_tool
from dpukit import bench_e2e as be

SECONDS = 0.4


@pytest.fixture
def bench_tool() -> Path:
    """build/bin/dpukit-bench, or skip when it has not been built."""
    return native_tool("dpukit-bench")


needs_netns = pytest.mark.skipif(be._netns_unavailable() is not None,
                                 reason=f"no network namespaces here: {be._netns_unavailable()}")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_sane(rec: dict) -> None:
    assert be.check_record(rec) == [], rec
    assert rec["sent"] > 0
    assert rec["sent"] >= rec["server_processed"]
    assert 0.0 <= rec["loss"] <= 1.0
    assert set(rec["utilization"]) == {"host", "dpu", "hw"}
    assert set(rec["server_cpu_ns"]) == {"host", "dpu", "hw"}
    assert rec["bad"] == 0
    assert Path(rec["server_json"]).is_file() and Path(rec["client_json"]).is_file()


def our_namespaces() -> list[str]:
    return [n for n in be.list_namespaces() if n.startswith(f"{be.PREFIX}{os.getpid()}-")]


# ------------------------------------------------------------ pure parts


def test_cpu_plan_gives_the_client_a_cpu_of_its_own():
    two = be.cpu_plan([0, 1])
    assert two["client"] == "1" and two["host"] == two["dpu"] == two["hw"] == "0"
    three = be.cpu_plan([0, 1, 2])
    assert three["client"] == "2" and three["host"] == "0" and three["dpu"] == three["hw"] == "1"
    four = be.cpu_plan([4, 5, 6, 7])
    assert (four["host"], four["dpu"], four["hw"], four["client"]) == ("4", "5", "6", "7")
    assert be.cpu_plan([3])["client"] == "3"
    assert be.receiving_cpus(four, "flowtable", "hw", "host", "recognition") == "6"
    assert be.receiving_cpus(four, "flowtable", "sw", "dpu", "recognition") == "5"
    assert be.receiving_cpus(four, "apprecog", "sw", "dpu", "all") == "5"
    assert be.receiving_cpus(four, "apprecog", "sw", "host", "recognition") == "4"


def test_client_bursts_only_where_it_must_to_reach_the_rate():
    assert be.client_burst(64, 0) == 32 and be.client_burst(64, 5) == 32
    assert be.client_burst(1400, 1) == 32  # 32 x 1400 bytes still fit one UDP send
    assert be.gso_burst(4000) == 16  # (beyond the largest datagram: the 65000-byte cap)
    assert be.client_burst(64, 20) == 1 and be.client_burst(1024, 100) == 1


def test_stale_namespace_names_are_recognized():
    assert be._owner_pid(f"{be.PREFIX}123-4-c") == 123
    assert be._owner_pid("other-123-c") is None
    assert be._owner_pid(f"{be.PREFIX}x-1-s") is None


def test_summary_takes_medians_and_ranges():
    def rec(rnd, pps, loss, util):
        return {"program": "flowtable", "table": "sw", "place": "host", "size": 64, "interval_us": 5.0,
                "round": rnd, "throughput_pps": pps, "loss": loss, "client_pps": pps,
                "utilization": {"host": util, "dpu": 0.0, "hw": 0.0}}
    rows = be.summarize([rec(0, 100, 0.1, 0.5), rec(1, 300, 0.0, 0.7), rec(2, 200, 0.3, 0.6)])
    assert len(rows) == 1
    assert rows[0]["throughput_pps"] == {"median": 200, "min": 100, "max": 300}
    assert rows[0]["loss"]["median"] == 0.1
    assert rows[0]["util_host"]["median"] == 0.6


def test_figures_are_drawn(tmp_path):
    recs = []
    for rnd in range(2):
        for size in (64, 1024):
            for interval in (0.0, 5.0, 20.0):
                for table in ("sw", "hw"):
                    recs.append({"program": "flowtable", "table": table, "place": "host", "size": size,
                                 "interval_us": interval, "round": rnd, "throughput_pps": 1e5 / (1 + interval),
                                 "loss": 0.1 if interval == 0 else 0.0, "client_pps": 1e5,
                                 "utilization": {"host": 0.2, "dpu": 0.0, "hw": 0.3 if table == "hw" else 0.0}})
                for place in ("host", "dpu"):
                    recs.append({"program": "apprecog", "table": None, "place": place, "size": size,
                                 "interval_us": interval, "round": rnd, "throughput_pps": 5e4, "loss": 0.0,
                                 "client_pps": 5e4,
                                 "utilization": {"host": 0.4 if place == "host" else 0.3,
                                                 "dpu": 0.0 if place == "host" else 0.1, "hw": 0.0},
                                 "rtt_us": {"p50": 30.0, "p90": 40.0, "p99": 80.0, "p999": 200.0}})
    paths = be.plot_fig14(recs, tmp_path) + [be.plot_fig15(recs, tmp_path), be.plot_fig16(recs, tmp_path)]
    assert [p.name for p in paths] == ["fig14a_flowtable_throughput.png", "fig14b_flowtable_loss.png",
                                       "fig15_apprecog_cpu.png", "fig16_apprecog_latency.png"]
    for p in paths:
        w, h = png_size(p)
        assert w > 300 and h > 200


# ------------------------------------------------------------ real runs


def test_flowtable_on_loopback(bench_tool, tmp_path):
    with be.network("loopback") as net:
        assert net.mode == "loopback" and "asked for" in net.note
        for table in ("sw", "hw"):
            rec = be.run_point(bench_tool, net, program="flowtable", size=128, interval_us=20, table=table,
                               seconds=SECONDS, out_dir=tmp_path, flows=256)
            assert_sane(rec)
            assert rec["network"] == "loopback"
            assert rec["loss_basis"].startswith("server-received")
            assert rec["checks"]["counts_exact"]
            if table == "hw":
                assert rec["flow_split"]["counted_hw"] > 0
                assert rec["server_cpu_ns"]["hw"] > 0
                assert rec["hw_table"]["inserted"] <= 256
            else:
                assert rec["flow_split"]["counted_hw"] == 0 and rec["server_cpu_ns"]["hw"] == 0


def test_apprecog_on_loopback(bench_tool, tmp_path):
    with be.network("loopback") as net:
        for place in ("host", "dpu"):
            rec = be.run_point(bench_tool, net, program="apprecog", size=256, interval_us=50, place=place,
                               seconds=SECONDS, out_dir=tmp_path)
            assert_sane(rec)
            assert rec["loss_basis"].startswith("client-received")
            assert rec["checks"]["wrong_action"] == 0 and rec["checks"]["verify_failures"] == 0
            assert rec["checks"]["verified"] > 0
            rtt = rec["rtt_us"]
            assert 0 < rtt["p50"] <= rtt["p90"] <= rtt["p99"] <= rtt["p999"]
            assert set(rec["actions"]["expected"]) == {"hash", "compress", "echo"}
            if place == "dpu":
                assert rec["server_cpu_ns"]["dpu"] > 0 and rec["server_cpu_ns"]["host"] > 0
            else:
                assert rec["server_cpu_ns"]["dpu"] == 0


@needs_netns
def test_both_programs_in_network_namespaces_and_clean_up(bench_tool, tmp_path):
    before = set(be.list_namespaces())
    with be.network("netns") as net:
        assert net.mode == "netns"
        made = our_namespaces()
        assert len(made) == 2 and net.client_ns in made and net.server_ns in made
        ft = be.run_point(bench_tool, net, program="flowtable", size=64, interval_us=20, table="hw",
                          seconds=SECONDS, out_dir=tmp_path, flows=512)
        ar = be.run_point(bench_tool, net, program="apprecog", size=1024, interval_us=50, place="dpu",
                          seconds=SECONDS, out_dir=tmp_path)
    for rec in (ft, ar):
        assert_sane(rec)
        assert rec["network"] == "netns"
    assert ar["checks"]["wrong_action"] == 0
    assert our_namespaces() == [], "the namespaces must be gone"
    assert set(be.list_namespaces()) <= before


@needs_netns
def test_namespaces_go_even_when_the_run_fails(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with be.network("netns"):
            assert len(our_namespaces()) == 2
            raise RuntimeError("boom")
    assert our_namespaces() == []


@needs_netns
def test_stale_namespaces_of_dead_runs_are_removed():
    # A pid that has certainly exited: a child we started and reaped.
    child = subprocess.run(["true"])
    dead = None
    for pid in range(os.getpid() + 1, os.getpid() + 50000):
        if not be._alive(pid):
            dead = pid
            break
    assert dead is not None and child.returncode == 0
    stale, live = f"{be.PREFIX}{dead}-1-c", f"{be.PREFIX}{os.getpid()}-999-c"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    subprocess.run(["ip", "netns", "add", live], check=True)
    try:
        assert stale in be.stale_namespaces() and live not in be.stale_namespaces()
        assert stale in be.remove_stale_namespaces()
        assert stale not in be.list_namespaces() and live in be.list_namespaces()
    finally:
        for ns in (stale, live):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def test_auto_falls_back_to_loopback_with_a_note(monkeypatch):
    monkeypatch.setattr(be, "_netns_unavailable", lambda: "network namespaces need root")
    with be.network("auto") as net:
        assert net.mode == "loopback" and "need root" in net.note
    with pytest.raises(be.E2eFailed):
        with be.network("netns"):
            pass
