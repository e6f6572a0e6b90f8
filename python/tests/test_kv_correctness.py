"""The kv acceptance check, scripted: fillrandom then overwrite in pulsedb
mode (the agent writing every compaction output), then DB::VerifyChecksum and
a full scan against the generator's model of the writes (dpukit-kvbench
verify), sst_dump --command=verify on every SST, and ldb checkconsistency."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from dpukit.native import load_result
from dpukit.paths import build_dir, tool_path

SMALL = ["--value-size", "1024", "--write-buffer-size", "1MB", "--target-file-size", "1MB",
         "--max-bytes-for-level-base", "4MB", "--max-background-jobs", "4"]
KEYS = 40000


def run(cmd, env=None, timeout=600):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def agent(tmp_path):
    exe = tool_path("dpukit-agent", must_exist=False)
    if not exe.is_file():
        pytest.skip("build/bin/dpukit-agent not built")
    sock, stats = tmp_path / "agent.sock", tmp_path / "agent-stats.json"
    proc = subprocess.Popen([str(exe), "--listen", str(sock), "--pool", str(tmp_path / "pool"), "--slots", "96",
                             "--slot-size", "2M", "--stats", str(stats)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(500):
        if sock.exists():
            break
        time.sleep(0.01)
    assert sock.exists(), "the agent listens"
    yield sock, stats, proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_pulsedb_fill_and_overwrite_leave_a_consistent_database(kvbench_tool, agent, tmp_path):
    if not shutil.which("sst_dump") or not shutil.which("ldb"):
        pytest.skip("sst_dump / ldb (rocksdb-tools) not installed")
    sock, agent_stats, _ = agent
    db = tmp_path / "db"
    preload = {"LD_PRELOAD": str(build_dir() / "lib" / "libdpukit_kv.so")}
    uri = f"pulsedb://{sock}?write_threshold:256K&sync_interval:64K"
    for step in ("fill", "overwrite"):
        stats = tmp_path / f"plugin-{step}.json"
        run([kvbench_tool, step, "--db", db, "--num", KEYS, "--fs-uri", uri, "--drain", *SMALL],
            {**preload, "DPUKIT_KV_STATS": str(stats)})
        plugin = json.loads(stats.read_text())["figures"]  # the plugin's counters, in its dpukit.result/1
        assert plugin["files_offloaded"] > 0, step
        assert plugin["file_errors"] == 0 and plugin["files_fallback"] == 0, step
    run([kvbench_tool, "verify", "--db", db, "--fs-uri", uri, "--expect-keys", KEYS], preload)

    # Stock RocksDB tools, no plugin: they read the pool files through the symlinks.
    ssts = sorted(db.glob("*.sst"))
    assert ssts
    assert any(p.is_symlink() for p in ssts), "compaction outputs live in the agent's pool"
    for sst in ssts:
        out = run(["sst_dump", f"--file={sst}", "--command=verify"]).stdout
        assert "Corruption" not in out and "Error" not in out, out
    out = run(["ldb", f"--db={db}", "checkconsistency"]).stdout
    assert out.strip().endswith("OK"), out


def test_agent_writes_its_stats_on_sigusr1(kvbench_tool, agent, tmp_path):
    sock, agent_stats, proc = agent
    env = {"LD_PRELOAD": str(build_dir() / "lib" / "libdpukit_kv.so")}
    run([kvbench_tool, "fill", "--db", tmp_path / "db", "--num", KEYS // 2, "--fs-uri", f"pulsedb://{sock}",
         "--drain", *SMALL], env)
    proc.send_signal(signal.SIGUSR1)
    for _ in range(500):
        if agent_stats.exists():
            break
        time.sleep(0.01)
    result = load_result(agent_stats)  # the agent reports in the result schema
    stats = result["figures"]
    assert stats["write_bytes"] > 0 and stats["sync_closes"] > 0 and stats["errors"] == 0
    assert stats["pool"]["claims"] > 0 and stats["io_uring"]["cqes_completed"] > 0
    assert result["tool"] == "dpukit-agent" and result["cpu_ns"]["dpu"] > 0
