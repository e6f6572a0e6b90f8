"""DPUBench's front door: the quick experiment end to end, the operator list,
and `dpukit bench compare` with its plot and its refusal to mix versions."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from dpukit import native
from dpukit.experiments import bench as bench_exp


def small_run(exe, path, place: str) -> dict:
    subprocess.run([str(exe), "run", "--ops", "memcpy,crc32c", "--backend", "ref,lib", "--sizes", "64,256",
                    "--min-time", "0.02", "--warmup", "0.01", "--repetitions", "2", "--quiet", "--place", place,
                    "--json", str(path)], check=True, timeout=60)
    return native.load_result(path)


def test_operator_list_has_table_4_and_the_programs(bench_tool):
    ops = {o.name: o for o in bench_exp.list_operators()}
    for name in ("lpm", "tcp_seg", "ip_frag", "checksum", "crc", "toeplitz", "lz77", "huffman", "snappy",
                 "crc32c", "rsa", "aes", "dsa", "ecdsa", "md5", "sha1", "sha256", "rxp_match", "memcpy"):
        assert name in ops, name
        assert "ref" in ops[name].backends and "lib" in ops[name].backends
    assert ops["aes"].scenario == "security" and ops["lpm"].scenario == "network"
    assert {o.name for o in ops.values() if o.scenario == "program"} >= {
        "program_l3fwd", "program_ipsec", "program_file_compress", "program_file_integrity", "program_ips",
        "program_url_filter"}


def test_run_result_is_schema_valid_with_cpu_in_its_place(bench_tool, tmp_path):
    r = small_run(bench_tool, tmp_path / "a.json", "dpu")
    pts = r["figures"]["points"]
    assert len(pts) == 2 * 2 * 2
    assert all(p["mops"] > 0 and p["mops_min"] <= p["mops"] <= p["mops_max"] for p in pts)
    assert r["cpu_ns"]["dpu"] > 0 and r["cpu_ns"]["host"] == 0
    assert r["figures"]["operators"] == {"memcpy": 1, "crc32c": 1}


def test_compare_prints_plots_and_refuses_other_versions(bench_tool, tmp_path, run_dpukit):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    small_run(bench_tool, a, "host")
    small_run(bench_tool, b, "dpu")
    png, table = tmp_path / "ratio.png", tmp_path / "ratio.json"
    proc = run_dpukit("bench", "compare", str(a), str(b), "--json", str(table), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "B/A" in proc.stdout and "crc32c" in proc.stdout
    assert png.stat().st_size > 1000
    rows = json.loads(table.read_text())["rows"]
    assert len(rows) == 8 and all(r["ratio"] > 0 for r in rows)

    other = json.loads(b.read_text())
    other["figures"]["operators"]["crc32c"] = 2  # as if the operator had changed
    b.write_text(json.dumps(other))
    proc = run_dpukit("bench", "compare", str(a), str(b))
    assert proc.returncode == 2
    assert "crc32c" in proc.stderr and "version" in proc.stderr


def test_quick_experiment_end_to_end(bench_tool, tmp_path, run_dpukit):
    out = tmp_path / "results"
    # 10 ms timed repetitions (the eval's are 50 ms): every operator still runs on each backend, checked first.
    proc = run_dpukit("eval", "--quick", "--only", "bench.quick", "--out", str(out), timeout=300,
                      env={bench_exp.MIN_TIME_ENV: "0.01"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "latest" / "report.md").read_text()
    assert "bench.quick" in md and "| aes | security | lib |" in md
    assert "timed repetitions of at least 0.01 s each" in md
    assert "unavailable: no regexdev" in md  # said, not faked
    runs = sorted((out / "latest" / "runs").glob("bench.quick-*.json"))  # not eval.meta.json, the eval's record
    assert runs
    for p in runs:
        r = native.load_result(p)
        for pt in r["figures"]["points"]:
            if pt["backend"] != "ref":
                assert pt["checked_inputs"] >= 16  # checked against ref before timing
    assert os.path.isfile(out / "latest" / "plots" / "bench.quick-throughput.png")


def test_quick_timing_from_the_environment(monkeypatch):
    """$DPUKIT_BENCH_MIN_TIME sets quick mode's repetition length; full mode keeps its own; nonsense is refused."""
    monkeypatch.delenv(bench_exp.MIN_TIME_ENV, raising=False)
    assert bench_exp.timing_args(True) == ["--warmup", 0.02, "--min-time", 0.05, "--repetitions", 3]
    monkeypatch.setenv(bench_exp.MIN_TIME_ENV, "0.01")
    assert bench_exp.timing_args(True) == ["--warmup", 0.02, "--min-time", 0.01, "--repetitions", 3]
    assert bench_exp.timing_args(False) == ["--warmup", 0.1, "--min-time", 0.2, "--repetitions", 5]
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv(bench_exp.MIN_TIME_ENV, bad)
        with pytest.raises(Exception, match="DPUKIT_BENCH_MIN_TIME"):
            bench_exp.timing_args(True)


def test_lpm_perf_autotest_output_is_parsed_and_a_missing_loop_is_not_invented():
    # The three figure lines as DPDK 22.11's lpm_perf_autotest prints them,
    # among the other lines it prints.
    text = ("Average LPM Add: 368539 cycles\n"
            "Average LPM Lookup: 56.2 cycles (fails = 12.5%)\n"
            "BULK LPM Lookup: 32.1 cycles (fails = 12.5%)\n"
            "LPM LookupX4: 48.7 cycles (fails = 12.5%)\n"
            "Average LPM Delete: 134736 cycles\n")
    assert bench_exp.parse_lpm_perf(text) == {"single": 56.2, "bulk": 32.1, "x4": 48.7}
    partial = bench_exp.parse_lpm_perf(text.replace("BULK LPM Lookup: 32.1 cycles", "BULK LPM Lookup: n/a"))
    assert "bulk" not in partial and partial["single"] == 56.2


def test_dpdk_perf_tool_outputs_are_parsed_and_a_short_run_is_refused():
    # The rows as DPDK 22.11's dpdk-test-crypto-perf (--ptest throughput
    # --silent) and dpdk-test-compress-perf (--ptest throughput) print them.
    crypto = ("Allocated pool \"sess_mp_0\" on socket 0\n"
              "    lcore id    Buf Size  Burst Size    Enqueued    Dequeued  Failed Enq  Failed Deq        MOps"
              "        Gbps  Cycles/Buf\n\n"
              "           1          64          32    10000000    10000000           0           0     17.1950"
              "      8.8038      151.21\n")
    assert bench_exp.parse_crypto_perf(crypto) == 17.1950
    short = crypto.replace("10000000           0", "9999968           0", 1)
    with pytest.raises(RuntimeError, match="dequeued"):
        bench_exp.parse_crypto_perf(short)
    with pytest.raises(RuntimeError, match="no throughput row"):
        bench_exp.parse_crypto_perf("USER1: Crypto device type does not support capabilities requested\n")
    compress = ("    lcore id Level   Comp size   Comp ratio [%]    Comp [Gbps]   Decomp [Gbps]\n"
                "           1     1      104941            40.03           0.63            1.11\n")
    assert bench_exp.parse_compress_perf(compress) == {"level": 1, "comp_size": 104941, "comp_gbps": 0.63}
    with pytest.raises(RuntimeError, match="no throughput row"):
        bench_exp.parse_compress_perf("    lcore id Level   Comp size   Comp ratio [%]\n           1     1  14257  87.02\n")


def test_inputs_command_writes_the_timed_inputs_and_refuses_unknown_operators(bench_tool, tmp_path):
    out = tmp_path / "in.bin"
    subprocess.run([str(bench_tool), "inputs", "--op", "compress", "--size", "1024", "--out", str(out)],
                   check=True, timeout=60)
    data = out.read_bytes()
    assert len(data) == 256 * 1024  # the operator's pool: 256 inputs of 1 KiB
    assert b"HTTP/1.1" in data  # the text-like payload the compressors work on
    again = tmp_path / "again.bin"
    subprocess.run([str(bench_tool), "inputs", "--op", "compress", "--size", "1024", "--out", str(again)],
                   check=True, timeout=60)
    assert again.read_bytes() == data  # the same bytes as every run with the same seed
    proc = subprocess.run([str(bench_tool), "inputs", "--op", "nope", "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown operator" in proc.stderr
