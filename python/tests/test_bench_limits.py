"""dpukit-bench refuses what it cannot hold or honour, with exit 2 and a
message that names what was wrong: inputs beyond the memory bound, thread
counts that would wrap or hide a typo, CPUs this process may not use, and
files `compare` cannot read as run results (naming the file and the field).

The runs here are under an address-space limit of 2 GiB: a 64 MiB size must
run within it (with fewer inputs), and a tool that tried to hold gigabytes
fails fast instead of filling the machine's memory."""

from __future__ import annotations

import json
import resource
import subprocess

import pytest
from conftest import native_tool

ADDRESS_SPACE = 2 << 30
MAX_SIZE = 64 << 20  # bench.h: kMaxInputSize


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def bench(tool, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_address_space)


def refused(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


QUICK = ["--warmup", "0", "--min-time", "0.01", "--repetitions", "1", "--quiet"]


def test_the_largest_size_runs_with_fewer_inputs_within_the_bound(bench_tool, tmp_path):
    out = tmp_path / "big.json"
    proc = bench(bench_tool, "run", "--ops", "memcpy", "--backend", "lib", "--sizes", str(MAX_SIZE), *QUICK,
                 "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())["figures"]
    budget = figures["input_budget_bytes"]
    [point] = figures["points"]
    assert point["size"] == MAX_SIZE and point["mops"] > 0
    assert point["inputs"] * MAX_SIZE <= budget
    assert point["inputs"] == budget // MAX_SIZE == 2  # instead of memcpy's 256 (16 GiB)


def test_small_sizes_keep_their_inputs(bench_tool, tmp_path):
    out = tmp_path / "small.json"
    proc = bench(bench_tool, "run", "--ops", "memcpy", "--backend", "lib", "--sizes", "64", *QUICK,
                 "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["figures"]["points"][0]["inputs"] == 256


@pytest.mark.parametrize("command", ["check", "run"])
def test_sizes_beyond_the_largest_are_refused(bench_tool, command):
    size = str(MAX_SIZE + 1)
    refused(bench(bench_tool, command, "--ops", "memcpy", "--backend", "lib", "--sizes", size, *(
        QUICK if command == "run" else [])), f"size {size}", "64 MiB")


def test_asked_for_inputs_that_cannot_fit_are_refused_before_anything_runs(bench_tool, tmp_path):
    # lpm.inputs=4096 at 1 MiB would be 4 GiB of packets.
    out = tmp_path / "never.json"
    proc = bench(bench_tool, "run", "--ops", "memcpy,lpm", "--backend", "lib", "--sizes", "1M",
                 "--param", "lpm.inputs=4096", *QUICK, "--json", str(out))
    refused(proc, "lpm.inputs=4096", "1048576")
    assert not out.exists()


@pytest.mark.parametrize("threads", ["4294967297", "1,,2", "1,", "0", "1025", "2K", "-1"])
def test_thread_counts_that_wrap_or_hide_a_typo_are_refused(bench_tool, threads):
    refused(bench(bench_tool, "run", "--ops", "memcpy", "--sizes", "64", "--threads", threads, *QUICK),
            "--threads", f"'{threads}'" if "," not in threads else "empty item")


def test_threads_whose_outputs_cannot_fit_are_refused_before_anything_runs(bench_tool, tmp_path):
    # Each thread holds an output and kernel state of about one input: 1024
    # threads at 64 MiB would be 64 GiB (bench.h: kThreadWorkBudget).
    out = tmp_path / "never.json"
    proc = bench(bench_tool, "run", "--ops", "memcpy", "--backend", "lib", "--sizes", f"64,{MAX_SIZE}",
                 "--threads", "1,1024", *QUICK, "--json", str(out))
    refused(proc, "threads 1024", f"size {MAX_SIZE}", "fewer threads")
    assert not out.exists()


def test_repetitions_that_would_wrap_are_refused(bench_tool):
    proc = bench(bench_tool, "run", "--ops", "memcpy", "--sizes", "64", "--warmup", "0", "--min-time", "0.01",
                 "--repetitions", "4294967297", "--quiet")
    refused(proc, "--repetitions", "'4294967297'")


@pytest.mark.parametrize("option", ["--host-cpus", "--dpu-cpus"])
def test_cpus_this_process_may_not_use_are_refused(bench_tool, option):
    refused(bench(bench_tool, "run", "--ops", "memcpy", "--sizes", "64", option, "99", *QUICK),
            option, "CPU 99", "not available")


# -- compare -------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_result(tmp_path_factory) -> dict:
    """A real run's result, for compare to refuse once broken."""
    out = tmp_path_factory.mktemp("runs") / "a.json"
    subprocess.run([str(native_tool("dpukit-bench")), "run", "--ops", "memcpy", "--backend", "ref,lib", "--sizes",
                    "64", *QUICK, "--json", str(out)], check=True, timeout=60)
    return json.loads(out.read_text())


def _edit(result: dict, how: str) -> dict:
    r = json.loads(json.dumps(result))
    if how == "no operator versions":
        del r["figures"]["operators"]
    elif how == "foreign schema":
        r["schema"] = "other.result/2"
    elif how == "string mops":
        r["figures"]["points"][0]["mops"] = "fast"
    elif how == "mops 0":
        r["figures"]["points"][0]["mops"] = 0
    elif how == "another tool":
        r["tool"] = "dpukit-measure run"
    elif how == "figures only":
        r = r["figures"]
    elif how == "no machine":
        del r["machine"]
    return r


@pytest.mark.parametrize("how, field", [
    ("no operator versions", "figures.operators"),
    ("foreign schema", "schema"),
    ("string mops", "figures.points[0].mops"),
    ("mops 0", "figures.points[0].mops"),
    ("another tool", "tool"),
    ("figures only", "backend"),  # the first missing field of the result's, in valijson's (sorted) order
    ("no machine", "machine"),
])
@pytest.mark.parametrize("side", ["a", "b"])
def test_compare_refuses_a_file_that_is_not_a_run_result_naming_file_and_field(bench_tool, run_result, tmp_path,
                                                                                how, field, side):
    good, bad = tmp_path / "good.json", tmp_path / f"bad-{side}.json"
    good.write_text(json.dumps(run_result))
    bad.write_text(json.dumps(_edit(run_result, how)))
    files = [bad, good] if side == "a" else [good, bad]
    proc = bench(bench_tool, "compare", *map(str, files))
    refused(proc, f"{bad}: {field}: ")
    assert proc.stdout == ""  # no table, not even a partial one


def test_compare_of_two_run_results_prints_the_ratios(bench_tool, run_result, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run_result))
    b.write_text(json.dumps(run_result))
    proc = bench(bench_tool, "compare", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "memcpy" in proc.stdout and "1.000" in proc.stdout
