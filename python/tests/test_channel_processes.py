"""The channel between two separate dpukit-core processes: when either side is
killed, the other exits with a clear error, non-zero, within a second."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def _start_pair(tool: Path, sock: str) -> tuple[subprocess.Popen, subprocess.Popen]:
    peer = subprocess.Popen([str(tool), "channel-peer", "--listen", sock],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        assert peer.poll() is None, peer.communicate()[1]
        assert time.monotonic() < deadline, "channel-peer never listened"
        time.sleep(0.01)
    host = subprocess.Popen([str(tool), "channel-host", "--connect", sock,
                             "--messages", "1000000000000", "--payload", "512"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)  # let traffic flow
    assert host.poll() is None and peer.poll() is None, "a side exited before the kill"
    return peer, host


@pytest.mark.parametrize("victim", ["dpu", "host"])
def test_killing_one_side_ends_the_other_with_a_clear_error(core_tool: Path, victim: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        sock = os.path.join(d, "ch.sock")
        peer, host = _start_pair(core_tool, sock)
        killed, survivor = (peer, host) if victim == "dpu" else (host, peer)
        try:
            killed.send_signal(signal.SIGKILL)
            t0 = time.monotonic()
            try:
                _, err = survivor.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                pytest.fail("the surviving side did not exit after its peer was killed")
            elapsed = time.monotonic() - t0
        finally:
            for p in (peer, host):
                if p.poll() is None:
                    p.kill()
                p.wait()
        assert survivor.returncode == 1, err
        other = "dpu" if victim == "dpu" else "host"
        assert f"the {other} side" in err and "is gone" in err, err
        assert elapsed < 1.0, f"took {elapsed:.2f}s to notice"


def test_a_clean_run_between_processes_checks_every_payload(core_tool: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        sock = os.path.join(d, "ch.sock")
        peer = subprocess.Popen([str(core_tool), "channel-peer", "--listen", sock, "--verify"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.01)
        host = subprocess.run([str(core_tool), "channel-host", "--connect", sock, "--messages", "200000",
                               "--payload", "4096", "--vary", "--verify"], capture_output=True, text=True, timeout=60)
        out, err = peer.communicate(timeout=30)
        assert host.returncode == 0, host.stderr
        assert peer.returncode == 0, err
        assert "200000 messages" in out and "every payload verified" in out


def test_connecting_to_nothing_is_a_clear_error(core_tool: Path, tmp_path: Path) -> None:
    r = subprocess.run([str(core_tool), "channel-host", "--connect", str(tmp_path / "none.sock")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "no dpu side listening at" in r.stderr
