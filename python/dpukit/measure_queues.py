"""``dpukit-measure live`` on a veth pair with N receive queues in native XDP
mode: one AF_XDP socket and one dpu worker per queue, the traffic replayed by
tcpreplay from the other end in a network namespace of its own.

veth hands a frame to the receive queue numbered as the transmit queue the
sender picked; the sender's kernel picks that queue by a hash of the flow
(no XPS is set on a veth), so a pcap of many flows spreads over the queues
as a NIC's RSS spreads it. The per-queue XDP counters of ``ethtool -S`` say
how many frames each queue (and so each worker's socket) got.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence


class LiveUnavailable(Exception):
    """This machine cannot run a live measurement; the message says why."""


def missing_requirements() -> str:
    """Why this machine cannot run live multi-queue measurements ('' when it can)."""
    if os.geteuid() != 0:
        return "it needs root (XDP, AF_XDP, a network namespace)"
    missing = [t for t in ("ip", "tcpreplay", "ethtool") if shutil.which(t) is None]
    if missing:
        return "not installed: " + ", ".join(missing) + " (Debian: iproute2, tcpreplay, ethtool)"
    return ""


def _must(argv: Sequence[str]) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise LiveUnavailable(f"`{' '.join(argv)}` failed: {p.stderr.strip()}")


@contextmanager
def veth_queues(tag: str, queues: int) -> Iterator[tuple[str, str, str]]:
    """(namespace, sender, measured): a veth pair whose ends have ``queues``
    receive and transmit queues each, the sender's end in a namespace of its own.
    Both are removed on exit."""
    ns, sender, measured = f"dkqs{tag}", f"dkqa{tag}", f"dkqb{tag}"
    made_ns = False
    try:
        p = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
        if p.returncode != 0:
            raise LiveUnavailable(f"cannot create a network namespace: {p.stderr.strip()}")
        made_ns = True
        q = str(queues)
        _must(["ip", "link", "add", sender, "numtxqueues", q, "numrxqueues", q, "type", "veth",
               "peer", "name", measured, "numtxqueues", q, "numrxqueues", q])
        _must(["ip", "link", "set", sender, "netns", ns])
        _must(["ip", "netns", "exec", ns, "ip", "link", "set", sender, "up"])
        _must(["ip", "link", "set", measured, "up"])
        yield ns, sender, measured
    finally:
        subprocess.run(["ip", "link", "del", measured], capture_output=True)
        if made_ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def queue_counters(iface: str) -> dict[int, dict[str, int]]:
    """veth's per-receive-queue XDP counters: queue -> {xdp_packets, xdp_redirect, xdp_drops, drops, ...}."""
    out = subprocess.run(["ethtool", "-S", iface], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise LiveUnavailable(f"ethtool -S {iface}: {out.stderr.strip()}")
    return parse_queue_counters(out.stdout)


def parse_queue_counters(text: str) -> dict[int, dict[str, int]]:
    """The rx_queue_<n>_<counter> lines of ``ethtool -S``'s output, by queue."""
    per: dict[int, dict[str, int]] = {}
    for line in text.splitlines():
        m = re.match(r"\s*rx_queue_(\d+)_(\w+):\s*(\d+)", line)
        if m:
            per.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
    return per


def parse_tcpreplay(text: str) -> tuple[int, float]:
    """(packets sent, seconds) from tcpreplay's 'Actual: N packets (B bytes) sent in S seconds'."""
    m = re.search(r"Actual:\s*(\d+)\s+packets.*?sent in\s+([\d.]+)\s+seconds", text)
    if not m:
        raise ValueError(f"no 'Actual:' line in tcpreplay's output: {text[-500:]!r}")
    return int(m.group(1)), float(m.group(2))


@dataclass
class LiveQueuesRun:
    queues: int
    algo: str
    sent: int  # packets tcpreplay sent
    send_seconds: float
    result: dict[str, Any]  # dpukit-measure live's JSON
    per_queue: dict[int, dict[str, int]] = field(default_factory=dict)  # ethtool's counters after the run
    live_argv: list[str] = field(default_factory=list)
    replay_argv: list[str] = field(default_factory=list)

    @property
    def figures(self) -> dict[str, Any]:
        return self.result["figures"]

    @property
    def send_pps(self) -> float:
        return self.sent / self.send_seconds if self.send_seconds > 0 else 0.0


def wait_live_line(live: subprocess.Popen, pattern: str, timeout: float = 30) -> re.Match | None:
    """The first match of ``pattern`` in a starting `dpukit-measure live`'s
    stderr (text mode), or None when its stderr closed or ``timeout`` passed
    first. LiveUnavailable, `live` killed, if the kernel refused (XDP or AF_XDP)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = live.stderr.readline()
        if not line:
            break
        if "refuse" in line or "EPERM" in line or "error" in line:
            live.kill()
            raise LiveUnavailable(f"the kernel refused live measurement here: {line.strip()}")
        m = re.search(pattern, line)
        if m:
            return m
    return None


def _wait_started(live: subprocess.Popen, timeout: float = 30) -> None:
    """Until `live` says it measures (its program is attached); LiveUnavailable if the kernel refused."""
    if wait_live_line(live, r"live: measuring", timeout) is None:
        live.kill()
        raise LiveUnavailable("dpukit-measure live did not start")


def run_live_queues(exe: Path, pcap: Path, work: Path, *, queues: int, algo: str, loops: int = 1,
                    pps: int | None = None, heavy_threshold: int = 100, tag: str | None = None,
                    extra: Sequence[str] = ()) -> LiveQueuesRun:
    """One live run on a fresh veth of ``queues`` queues (native XDP): tcpreplay
    sends ``pcap`` ``loops`` times (at ``pps``, or as fast as it can), then the
    run is stopped with SIGINT and its JSON read."""
    tag = tag or f"{os.getpid() % 10000}{queues}"
    with veth_queues(tag, queues) as (ns, sender, measured):
        out = work / f"live-q{queues}-{algo}.json"
        live_argv = [str(exe), "live", "--iface", measured, "--native", "--algo", algo,
                     "--heavy-threshold", str(heavy_threshold), "--duration", "600", "--json", str(out), *extra]
        live = subprocess.Popen(live_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_started(live)
            rate = ["--pps", str(pps)] if pps else ["--topspeed"]
            replay_argv = ["tcpreplay", "-i", sender, *rate, "--loop", str(loops), str(pcap)]
            done = subprocess.run(["ip", "netns", "exec", ns, *replay_argv], capture_output=True, text=True,
                                  timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"tcpreplay failed: {done.stderr.strip()}")
            sent, seconds = parse_tcpreplay(done.stdout)
            time.sleep(1)  # the last frames through the rings
            live.send_signal(signal.SIGINT)
            _, err = live.communicate(timeout=120)
            if live.returncode != 0:
                raise RuntimeError(f"dpukit-measure live exited {live.returncode}: {err[-2000:]}")
        finally:
            if live.poll() is None:
                live.kill()
                live.wait()
        per_queue = queue_counters(measured)
        result = json.loads(out.read_text())
        out.unlink(missing_ok=True)
    return LiveQueuesRun(queues, algo, sent, seconds, result, per_queue, live_argv, replay_argv)
