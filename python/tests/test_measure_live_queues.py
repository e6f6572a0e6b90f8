"""dpukit-measure live on a veth with several receive queues in native XDP
mode: one AF_XDP socket and one dpu worker per queue, traffic from tcpreplay
in another network namespace. Needs root, ip, tcpreplay and ethtool, and a
kernel that takes native XDP on veth: otherwise skipped with the reason."""

from __future__ import annotations

import subprocess

import pytest

from conftest import native_tool
from dpukit.measure_queues import LiveUnavailable, missing_requirements, run_live_queues

PACKETS = 30000
RATE = 20000  # packets/s


def test_live_two_queues_one_worker_each(tmp_path):
    """A veth with 2 receive queues in native XDP mode: one AF_XDP socket and
    one dpu worker per queue. The sender's kernel spreads the pcap's flows over
    its 2 transmit queues, veth hands each frame to the receive queue of the
    same number, and both workers measure their queue's packets: every packet
    sent is measured once (Count-Min installs nothing in the hardware table,
    so each one reaches a worker)."""
    if why := missing_requirements():
        pytest.skip(why)
    exe = native_tool("dpukit-measure")
    pcap = tmp_path / "trace.pcap"
    subprocess.run([str(exe), "gen", "--preset", "backbone", "--flows", "2000", "--packets", str(PACKETS),
                    "--seed", "5", "--out", str(pcap)], check=True, capture_output=True, timeout=60)
    try:
        run = run_live_queues(exe, pcap, tmp_path, queues=2, algo="cms", pps=RATE)
    except LiveUnavailable as e:
        pytest.skip(str(e))
    f = run.figures
    assert run.sent == PACKETS
    assert f["workers"] == 2, f
    # Beside the pcap, the kernel sends a few frames of its own on a new link (IPv6 neighbour discovery).
    assert f["frames"] - f["not_a_flow"] == PACKETS, f
    # Nothing is installed in the hardware table: every packet reached a worker's socket, and was measured
    # or dropped on the way (a worker that lost its CPU on this shared machine lets its ring fill).
    assert f["hw_packets"] == 0, f
    assert f["dpu_packets"] + f["drops"] == PACKETS, f
    # Each queue's XDP program saw part of the frames and redirected them to that queue's socket, which
    # only its worker reads; a queue got more frames than were dropped in all, so both workers measured
    # packets.
    assert sorted(run.per_queue) == [0, 1], run.per_queue
    for qn, c in run.per_queue.items():
        assert c["xdp_redirect"] > f["drops"], (qn, f["drops"], run.per_queue)
        assert c["xdp_redirect"] > PACKETS // 10, (qn, run.per_queue)
    # Every packet sent went to a worker's socket; the kernel's own frames may be passed to its stack
    # instead, and one may arrive between the tool's count and ethtool's.
    redirected = sum(c["xdp_redirect"] for c in run.per_queue.values())
    assert PACKETS <= redirected <= f["frames"] + 3, (redirected, f["frames"], run.per_queue)
    assert abs(sum(c["xdp_packets"] for c in run.per_queue.values()) - f["frames"]) <= 3, run.per_queue
