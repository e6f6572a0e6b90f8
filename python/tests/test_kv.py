"""The kv system through its tools: the stock db_bench with the plugin
preloaded carries compaction output to the agent, and the benchmark driver
reports what it measured."""

from __future__ import annotations

import json
import subprocess

from dpukit.native import load_result

SMALL = ["--data", "48M", "--write-buffer", "2M", "--target-file", "2M", "--level-base", "8M",
         "--value-size", "1024", "--threads", "1"]


def bench(kv_tool, tmp_path, mode: str, *extra: str) -> dict:
    out = tmp_path / f"{mode}.json"
    proc = subprocess.run([str(kv_tool), "bench", "--mode", mode, *SMALL, *extra,
                           "--work-dir", str(tmp_path / mode), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return load_result(out)


def test_stock_db_bench_sends_compaction_output_through_the_agent(kv_tool, tmp_path):
    r = bench(kv_tool, tmp_path, "pulsedb")
    f = r["figures"]
    agent, plugin = f["agent"], f["plugin"]
    assert plugin["files_offloaded"] > 0
    assert plugin["file_errors"] == 0 and plugin["files_fallback"] == 0
    # Every byte compaction appended reached the agent and was written by it.
    assert agent["write_bytes"] == plugin["bytes_offloaded"] > 0
    # db_bench's count of compaction output bytes (taken when the benchmark
    # ends, so a compaction still running is not in it) all went through the agent.
    assert 0 < f["compaction_write_bytes"] <= plugin["bytes_offloaded"]
    assert agent["sync_closes"] == plugin["sync_closes"] == plugin["files_offloaded"]
    assert agent["pool"]["claims"] > 0 and agent["errors"] == 0
    assert f["dpu_cpu_s"] > 0 and f["ops_per_sec"] > 0
    assert r["placement"]["dpu_cpus"] == "1"
    # The DMA path (the default): the agent pulled RocksDB's buffers, its DMA
    # threads' time is hw, and it wrote with O_DIRECT.
    assert plugin["payload"] == "pull" and plugin["pulls"] > 0
    assert agent["dma"]["pull_bytes"] == plugin["pull_bytes"] > 0
    assert f["hw_cpu_s"] > 0 and r["cpu_ns"]["hw"] > 0
    assert agent["direct_files"] > 0


def test_copy_payload_sends_every_append_through_the_ring(kv_tool, tmp_path):
    f = bench(kv_tool, tmp_path, "pulsedb", "--payload", "copy")["figures"]
    assert f["plugin"]["payload"] == "copy" and f["plugin"]["pulls"] == 0
    assert f["agent"]["write_bytes"] == f["plugin"]["bytes_offloaded"] > 0
    assert f["hw_cpu_s"] == 0


def test_whole_host_cpu_adds_the_kernels_share(kv_tool, tmp_path):
    f = bench(kv_tool, tmp_path, "vanilla")["figures"]
    k = f["kernel_cpu_s"]
    assert set(k) >= {"kworker", "ksoftirqd", "jbd2", "kswapd", "other_threads", "irq_host_cpus",
                      "softirq_host_cpus", "irq_dpu_cpus", "softirq_dpu_cpus"}
    kernel_io = k["kworker"] + k["ksoftirqd"] + k["jbd2"] + k["kswapd"] + k["irq_host_cpus"] + k["softirq_host_cpus"]
    assert abs(f["host_whole_cpu_s"] - (f["host_cpu_s"] + kernel_io)) < 1e-6
    assert abs(f["host_whole_compaction_cpu_s"] - (f["host_compaction_cpu_s"] + kernel_io)) < 1e-6
    assert kernel_io > 0, "vanilla's SST writes are written back by the kernel"


def test_vanilla_has_no_plugin_and_measures_compaction_cpu(kv_tool, tmp_path):
    f = bench(kv_tool, tmp_path, "vanilla")["figures"]
    assert "plugin" not in f and f["dpu_cpu_s"] == 0
    assert f["compaction_write_bytes"] > 0
    assert f["host_compaction_cpu_s"] > 0 and f["host_plugin_cpu_s"] == 0
    assert f["write_p99_us"] > 0 and f["write_p999_us"] >= f["write_p99_us"]


def test_bad_mode_is_an_input_error(kv_tool, tmp_path):
    proc = subprocess.run([str(kv_tool), "bench", "--mode", "nfs", "--work-dir", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "nfs" in proc.stderr
    proc = subprocess.run([str(kv_tool), "bench", "--mode", "pulsedb", "--payload", "dma",
                           "--work-dir", str(tmp_path / "w")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "payload" in proc.stderr
