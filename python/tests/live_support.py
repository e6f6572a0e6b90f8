"""dpukit-measure live on a veth pair: the pair (the sender's end in a
network namespace of its own), tcpreplay from the sender, and one live run
while a pcap is replayed. Shared by the live measure tests; needs root, ip,
tcpreplay and nfdump, otherwise the fixture skips with the reason."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dpukit.measure_queues import LiveUnavailable, wait_live_line

RATE = 20000  # packets/s, live and offline


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, timeout=30)


@pytest.fixture
def veth(tmp_path):
    """A veth pair: the sender's end in a namespace of its own, the measured end here."""
    missing = [t for t in ("ip", "tcpreplay", "nfcapd", "nfdump") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        pytest.skip("live measurement needs root" if os.geteuid() != 0 else f"not installed: {', '.join(missing)}")
    tag = f"{os.getpid() % 100000}"
    ns, sender, measured = f"dkls{tag}", f"dkla{tag}", f"dklb{tag}"
    try:
        sh("ip", "netns", "add", ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot create a network namespace: {e.stderr.decode().strip()}")
    try:
        sh("ip", "link", "add", sender, "type", "veth", "peer", "name", measured)
        sh("ip", "link", "set", sender, "netns", ns)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", sender, "up")
        sh("ip", "link", "set", measured, "up")
        yield ns, sender, measured
    finally:
        subprocess.run(["ip", "link", "del", measured], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def replay(veth, pcap: Path) -> None:
    """tcpreplay ``pcap`` from the sender's namespace at RATE, then a moment for the last frames through the rings."""
    ns, sender, _ = veth
    done = subprocess.run(["ip", "netns", "exec", ns, "tcpreplay", "-q", "-i", sender, "--pps", str(RATE),
                           str(pcap)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    time.sleep(1)


def wait_attached(live: subprocess.Popen) -> int:
    """Waits until `live --metrics HOST:0` says it serves /metrics, which it does once its
    program is attached; its port. Skips the test if the kernel refused."""
    try:
        m = wait_live_line(live, r"/metrics on port (\d+)")
    except LiveUnavailable as e:
        pytest.skip(str(e))
    if m is None:
        raise AssertionError("live did not start")
    return int(m.group(1))


def stop(live: subprocess.Popen) -> str:
    """SIGINT, as an operator stops a run; it must exit 0. Its stderr."""
    live.send_signal(signal.SIGINT)
    _, err = live.communicate(timeout=60)
    assert live.returncode == 0, err
    return err


def live_over(exe: Path, veth, pcap: Path, out: Path, *args: str) -> tuple[dict, str]:
    """`live --iface <the measured end> --duration 120 --metrics 127.0.0.1:0 ARGS --json out` while the
    sender replays ``pcap``, then stopped by SIGINT: its result and its stderr."""
    live = subprocess.Popen([str(exe), "live", "--iface", veth[2], "--duration", "120", "--metrics", "127.0.0.1:0",
                             *args, "--json", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_attached(live)
        replay(veth, pcap)
        err = stop(live)
    finally:
        if live.poll() is None:
            live.kill()
    return json.loads(out.read_text()), err


def make_pcap(exe: Path, tmp_path: Path, packets: int) -> Path:
    """A backbone pcap of ``packets`` packets over 2,000 flows."""
    pcap = tmp_path / "trace.pcap"
    subprocess.run([str(exe), "gen", "--preset", "backbone", "--flows", "2000", "--packets", str(packets),
                    "--seed", "5", "--out", str(pcap)], check=True, capture_output=True, timeout=60)
    return pcap
