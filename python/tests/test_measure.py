"""dpukit measure: the front door to dpukit-measure, its input errors, its
results, and the measure.* experiments (helpers and an end-to-end run)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
from pathlib import Path

import pytest

from dpukit import cli, experiments, native
from dpukit import measure_traces as traces
from dpukit.experiments import Context
from dpukit.experiments import measure as m
from dpukit.paths import display_path, tool_path
from dpukit.plots import BarPanel, Line, Panel, bars_plot, panels_plot

from conftest import native_tool

TOOL = "dpukit-measure"
ALGOS = ["cms", "cs", "elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon", "duet"]
CSV_HEADER = ["src_ip", "dst_ip", "src_port", "dst_port", "proto", "true_count", "estimate"]
DOTTED = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    """A 20,000-packet backbone trace written by the real `gen`."""
    exe = native_tool("dpukit-measure")
    out = tmp_path_factory.mktemp("trace") / "small.pcap"
    proc = subprocess.run([str(exe), "gen", "--preset", "backbone", "--flows", "2000", "--packets", "20000",
                           "--seed", "3", "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
    return out


def tool(exe: Path, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)


# -- the front door ----------------------------------------------------------


def test_dpukit_help_lists_measure(run_dpukit):
    proc = run_dpukit("--help")
    assert proc.returncode == 0, proc.stderr
    assert "measure" in proc.stdout and "Duet, NitroSketch" in proc.stdout


def test_measure_system_is_registered():
    assert cli.SYSTEMS["measure"].tool == TOOL


def test_measure_help_forwards(measure_tool, run_dpukit):
    proc = run_dpukit("measure", "--help")
    assert proc.returncode == 0, proc.stderr
    for cmd in ("run", "compare", "gen"):
        assert cmd in proc.stdout


def test_measure_subcommand_help(measure_tool, run_dpukit):
    proc = run_dpukit("measure", "run", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--algo" in proc.stdout and "--dump-estimates" in proc.stdout


def test_experiments_are_registered_after_core():
    names = list(experiments.registry())
    ours = ["measure.accuracy", "measure.speed", "measure.convergence", "measure.throughput", "measure.bluefield",
            "measure.scaling", "measure.soak"]
    start = names.index(ours[0])
    assert names[start:start + len(ours)] == ours
    assert all(n.startswith("core.") for n in names[:start])
    assert [e.name for e in experiments.select(["measure"])] == ours
    for name in ours:
        assert experiments.registry()[name].tools == (TOOL,)


# -- input errors: exit code 2 with a reason ---------------------------------


def test_truncated_pcap_names_file_and_offset(measure_tool, small_trace, tmp_path):
    data = small_trace.read_bytes()
    cut = tmp_path / "cut.pcap"
    size = len(data) // 2 + 37  # in the middle of a record
    assert size % 2 == 1
    cut.write_bytes(data[:size])
    proc = tool(measure_tool, "run", "--trace", cut, "--algo", "cms")
    assert proc.returncode == 2, proc.stderr
    assert str(cut) in proc.stderr
    offset = re.search(r"at byte (\d+)", proc.stderr)
    assert offset, proc.stderr
    assert 24 <= int(offset.group(1)) <= size  # inside the file, after the pcap header


def test_missing_trace(measure_tool, tmp_path):
    missing = tmp_path / "nope.pcap"
    proc = tool(measure_tool, "run", "--trace", missing, "--algo", "cms")
    assert proc.returncode == 2
    assert str(missing) in proc.stderr


def test_unknown_algorithm_lists_the_choices(measure_tool, small_trace):
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "count-max")
    assert proc.returncode == 2
    assert "count-max" in proc.stderr
    for algo in ALGOS:
        assert algo in proc.stderr


def test_unknown_algorithm_in_compare(measure_tool, small_trace):
    proc = tool(measure_tool, "compare", "--trace", small_trace, "--algos", "cms,nope", "--memory", "100KB")
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "duet" in proc.stderr


def test_duet_counter_bits(measure_tool, small_trace, tmp_path):
    out = tmp_path / "d16.json"
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "duet", "--memory", "100KB",
                "--duet-counter-bits", "16", "--json", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["parameters"]["duet_counter_bits"] == 16
    assert doc["figures"]["metrics"]["hh_f1"] > 0.9
    # A TOP beyond what 16-bit counters hold is refused with the reason, as is a width we do not have.
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "duet", "--duet-counter-bits", "16",
                "--heavy-threshold", "20000")
    assert proc.returncode == 2 and "16-bit counters need TOP <= 16383" in proc.stderr, proc.stderr
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "duet", "--duet-counter-bits", "8")
    assert proc.returncode == 2 and "must be 16 or 32" in proc.stderr, proc.stderr
    # By default 16 bits, and 32 where TOP is beyond 16-bit counters' reach (said on stderr).
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "duet", "--json", out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["figures"]["duet"]["counter_bits"] == 16
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", "duet", "--heavy-threshold", "20000",
                "--json", out)
    assert proc.returncode == 0 and "using 32-bit counters" in proc.stderr, proc.stderr
    assert json.loads(out.read_text())["figures"]["duet"]["counter_bits"] == 32


@pytest.mark.parametrize("algo", ALGOS)
def test_budget_too_small(measure_tool, small_trace, algo):
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", algo, "--memory", "8B")
    assert proc.returncode == 2, proc.stdout
    assert algo in proc.stderr and "8 bytes" in proc.stderr
    assert re.search(r"needs|cannot hold|cannot fit", proc.stderr), proc.stderr


@pytest.mark.parametrize("algo", ["elastic", "univmon", "nitro-cms", "nitro-cs", "nitro-univmon", "duet"])
def test_64_bytes_is_too_small_where_keys_are_kept(measure_tool, small_trace, algo):
    proc = tool(measure_tool, "run", "--trace", small_trace, "--algo", algo, "--memory", "64B")
    assert proc.returncode == 2, proc.stdout
    assert "64 bytes" in proc.stderr


@pytest.mark.parametrize("args", [
    ["run", "--algo", "cms", "--no-such-flag"],
    ["compare", "--no-such-flag", "1"],
    ["gen", "--out", "x.pcap", "--no-such-flag"],
])
def test_unknown_flag(measure_tool, small_trace, args):
    proc = tool(measure_tool, *args, "--trace", small_trace) if args[0] != "gen" else tool(measure_tool, *args)
    assert proc.returncode == 2
    assert "--no-such-flag" in proc.stderr


def test_unknown_command(measure_tool):
    proc = tool(measure_tool, "frobnicate")
    assert proc.returncode == 2 and "frobnicate" in proc.stderr


# -- results -------------------------------------------------------------------


def test_dump_estimates(measure_tool, small_trace, tmp_path):
    dump = tmp_path / "est.csv"
    result = native.run_tool(TOOL, ["run", "--trace", str(small_trace), "--algo", "cms", "--memory", "64KB",
                                    "--dump-estimates", str(dump)], json_path=tmp_path / "r.json")
    f = result["figures"]
    with open(dump, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    assert header == CSV_HEADER
    assert len(rows) == f["flows"]
    keys = set()
    for r in rows:
        for ip in r[0:2]:
            mt = DOTTED.match(ip)
            assert mt and all(0 <= int(b) <= 255 for b in mt.groups()), ip
        assert 0 <= int(r[2]) <= 65535 and 0 <= int(r[3]) <= 65535
        assert int(r[4]) in (6, 17)
        assert int(r[5]) >= 1
        assert float(r[6]) >= int(r[5])  # Count-Min never underestimates
        keys.add(tuple(r[:5]))
    assert len(keys) == len(rows)  # one row per flow
    assert sum(int(r[5]) for r in rows) == f["packets"] == 20000
    # The metrics the tool reports agree with its own per-flow dump.
    est = m.read_estimates(dump)
    assert m.relative_error(est) == pytest.approx(f["metrics"]["are"], rel=1e-6)
    aae = sum(abs(e - t) for t, e in est) / len(est)
    assert aae == pytest.approx(f["metrics"]["aae"], rel=1e-6)


FIGURES = ["packets", "flows", "skipped", "drops", "throughput_mpps", "metrics", "dpu_cpu_ns_per_packet",
           "hw_cpu_ns_per_packet", "top", "memory_bytes", "memory_used_bytes", "seconds", "dpu_work_ns_per_packet",
           "dpu_work_ns_per_worker_packet", "trace_huge_page_bytes"]
METRIC_KEYS = ["are", "aae", "rmse", "wmre", "hh_precision", "hh_recall", "hh_f1"]


@pytest.mark.parametrize("algo", ALGOS)
def test_run_result_is_schema_valid(measure_tool, small_trace, tmp_path, algo):
    out = tmp_path / "r.json"
    result = native.run_tool(TOOL, ["run", "--trace", str(small_trace), "--algo", algo, "--memory", "300KB"],
                             json_path=out)
    assert native.load_result(out) == result
    assert result["tool"] == "dpukit-measure run"
    assert result["command_line"][-2:] == ["--json", str(out)]
    f = result["figures"]
    for key in FIGURES:
        assert key in f, key
    for key in METRIC_KEYS:
        assert isinstance(f["metrics"][key], (int, float)) and math.isfinite(f["metrics"][key]), key
    assert f["algo"] == algo and f["packets"] == 20000 and f["skipped"] == 0 and f["drops"] == 0
    assert 0 < f["flows"] <= 2000
    assert f["memory_bytes"] == 300 * 1024 and 0 < f["memory_used_bytes"] <= f["memory_bytes"]
    assert f["throughput_mpps"] > 0 and f["dpu_cpu_ns_per_packet"] >= 0
    assert 0 <= f["metrics"]["hh_f1"] <= 1
    assert result["cpu_ns"]["dpu"] > 0
    if algo == "duet":
        hw = f["hw"]
        for key in ("entries", "inserts", "refused", "packets"):
            assert isinstance(hw[key], int) and hw[key] >= 0, key
        assert hw["packets"] <= f["packets"]
        assert hw["inserts"] >= hw["entries"] > 0  # the heavy flows made it into the table
        # The worker's time spread over only the packets the hardware left it.
        handled = f["packets"] * f["passes"] - hw["packets"] - f["drops"]
        assert f["dpu_work_ns_per_worker_packet"] == pytest.approx(
            f["dpu_work_ns_per_packet"] * f["packets"] * f["passes"] / handled, rel=1e-9)
    else:
        assert "hw" not in f
        assert f["dpu_work_ns_per_worker_packet"] == pytest.approx(f["dpu_work_ns_per_packet"], rel=1e-9)


def test_compare_grid(measure_tool, small_trace, tmp_path):
    result = native.run_tool(TOOL, ["compare", "--trace", str(small_trace), "--algos", "cms,duet",
                                    "--memory", "300KB,600KB"], json_path=tmp_path / "c.json")
    f = result["figures"]
    assert f["packets"] == 20000
    grid = m.grid_index(result)
    assert set(grid) == {(a, k * 1024) for a in ("cms", "duet") for k in (300, 600)}
    for g in grid.values():
        assert set(METRIC_KEYS) <= set(g["metrics"])
        assert g["flows"] == f["flows"]
    assert "hw" in grid[("duet", 300 * 1024)]


def test_rate_and_timeline(measure_tool, small_trace, tmp_path):
    result = native.run_tool(TOOL, ["run", "--trace", str(small_trace), "--algo", "duet", "--rate", "200000",
                                    "--timeline-every", "2000"], json_path=tmp_path / "t.json")
    f = result["figures"]
    assert result["parameters"]["rate_pps"] == 200000
    assert 0.05 < f["seconds"] < 5  # 20,000 packets at 200,000/s: about 0.1 s
    tl = f["timeline"]
    assert 5 <= len(tl) <= 11
    assert [p["packets"] for p in tl] == sorted(p["packets"] for p in tl)
    assert all(p["seconds"] >= 0 and p["hw_entries"] >= 0 for p in tl)


# -- experiment helpers (no native tool) -------------------------------------


def test_trace_specs_and_cache_names():
    q, f = traces.trace_spec("backbone", True), traces.trace_spec("datacenter", False)
    assert (q.packets, q.flows, q.filename) == (200_000, 20_000, "backbone-200000-20000-s1.pcap")
    assert (f.packets, f.flows, f.filename) == (2_000_000, 100_000, "datacenter-2000000-100000-s1.pcap")
    cmd = traces.gen_command(q, Path("/x/t.pcap"))
    assert cmd[1:] == ["gen", "--preset", "backbone", "--flows", "20000", "--packets", "200000", "--seed", "1",
                       "--out", "/x/t.pcap"]
    assert traces.traces_dir().name == "traces"


def test_memory_and_prefixes():
    assert m.memory_arg(300 * 1024) == "300KB" and m.memory_arg(1000) == "1000"
    assert m.accuracy_memories(True) == [300 * 1024, 600 * 1024]
    assert len(m.accuracy_memories(False)) == 4
    assert m.prefix_series(200_000, 5) == [12_500, 25_000, 50_000, 100_000, 200_000]
    full = m.prefix_series(2_000_000, 8)
    assert full[0] == 15_625 and full[-1] == 2_000_000 and len(full) == 8


def test_saturating_rate_rounds_to_two_digits():
    assert m.saturating_rate(30.0) == 50_000_000  # 1.5e9 / 30 ns
    assert m.saturating_rate(44.3) == 34_000_000  # 33.86 M -> 34 M
    assert m.saturating_rate(1000.0) == 1_500_000


def test_parse_cpus():
    assert m.parse_cpus("1") == [1]
    assert m.parse_cpus("0-2,5") == [0, 1, 2, 5]
    assert m.parse_cpus("") == []


def test_relative_error():
    rows = [(1, 2.0), (10, 10.0), (100, 50.0)]
    assert m.relative_error(rows) == pytest.approx((1 + 0 + 0.5) / 3)
    assert m.relative_error(rows, 10) == pytest.approx(0.25)
    assert math.isnan(m.relative_error(rows, 1000))


def test_plots_write_pngs(tmp_path):
    style = m.algo_style("nitro-cms", 0.01)
    assert style["linestyle"] == ":" and style["color"] == m.algo_style("cms")["color"]
    p = panels_plot(tmp_path / "l.png", [
        Panel("ARE", "ARE", [Line("a", [1, 2], [0.1, 0.01], m.algo_style("cms")),
                             Line("b", [1, 2], [0.2, 0.0], m.algo_style("duet"))], logy=True),
        Panel("F1", "F1", [Line("a", [1, 2], [0.5, 1.0])], ylim=(0, 1.02)),
    ], title="t", xlabel="x", logx=True, xticks=[1, 2])
    b = bars_plot(tmp_path / "b.png", [BarPanel("ns", "ns", {"x": [1.0, float("nan")], "y": [2.0, 3.0]})],
                  ["cms", "duet"], title="t")
    for path in (p, b):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_cache_is_reused(measure_tool, tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "traces_dir", lambda: tmp_path / "traces")
    ctx = Context(name="measure.test", quick=True, out_dir=tmp_path / "out")
    first = traces.ensure_trace(ctx, "datacenter")
    assert not first.reused and first.path == tmp_path / "traces" / "datacenter-200000-20000-s1.pcap"
    assert first.command[-1] == str(first.path) and first.size == first.path.stat().st_size
    mtime = first.path.stat().st_mtime_ns
    second = traces.ensure_trace(ctx, "datacenter")
    assert second.reused and second.path.stat().st_mtime_ns == mtime and second.sha256 == first.sha256
    assert [p.name for p in (tmp_path / "traces").iterdir()] == [first.path.name]  # no temporary left
    # A trace older than the tool (which may have been rebuilt with another
    # generator since) is written again.
    old = measure_tool.stat().st_mtime_ns - 10**9
    os.utime(first.path, ns=(old, old))
    third = traces.ensure_trace(ctx, "datacenter")
    assert not third.reused and third.path.stat().st_mtime_ns > old
    # Same options and seed: the command regenerates the very same bytes.
    again = tmp_path / "again.pcap"
    assert subprocess.run(traces.gen_command(first.spec, again), capture_output=True).returncode == 0
    assert again.read_bytes() == first.path.read_bytes()


# -- end to end --------------------------------------------------------------


@pytest.mark.slow
def test_eval_quick_measure_end_to_end(measure_tool, tmp_path, run_dpukit):
    out = tmp_path / "results"
    # Every measure experiment but measure.bluefield, which test_measure_speed.py runs end to end (at --dpu
    # bluefield3, its report and plot rebuilt byte for byte): not twice in one suite.
    only = ",".join(f"measure.{n}" for n in ("accuracy", "speed", "convergence", "throughput", "scaling", "soak"))
    proc = run_dpukit("eval", "--quick", "--only", only, "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[eval 1/6] measure.accuracy:" in proc.stderr
    run_dir = (out / "latest").resolve()
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    for name in ("measure.accuracy", "measure.speed", "measure.convergence", "measure.throughput",
                 "measure.scaling", "measure.soak"):
        assert f"## {name}:" in md and name in html
    assert "Skipped in quick mode (it runs for 30 minutes)" in md  # measure.soak: full mode only
    assert "FAILED" not in md
    for caption in ("backbone: ARE vs memory", "datacenter: HH F1 vs memory", "(a) As fast as possible",
                    "(b) Offered", "Relative error of the heavy flows", "Duet at", "Workers, backbone trace"):
        assert caption in md, caption
    assert "Duet spends" in md and "Count-Min's" in md
    assert "64-byte packets, one polling dpu worker" in md
    assert re.search(r"at 64-byte packets Duet takes [\d.]+ Mpps with no drops", md)
    # Why the limit is out of reach: the worker's cost per packet it handled, Duet's beside Count-Min's.
    assert "worker ns per packet it handled" in md
    assert re.search(r"Duet's worker spends [\d.]+ ns on each packet it handles, Count-Min's [\d.]+", md)

    pngs = {p.name for p in (run_dir / "plots").glob("*.png")}
    for stem in ("measure.accuracy-backbone", "measure.accuracy-datacenter", "measure.speed-cpu",
                 "measure.speed-drops", "measure.convergence-error-vs-packets", "measure.convergence-duet-timeline",
                 "measure.scaling-workers", "measure.throughput-throughput"):
        assert f"{stem}.png" in pngs, stem
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (run_dir / src).is_file(), src

    # The gen commands are recorded, with the cached trace's path.
    for preset in ("backbone", "datacenter"):
        assert re.search(rf"dpukit-measure gen --preset {preset} --flows 20000 --packets 200000 --seed 1 "
                         rf"--out \S*{preset}-200000-20000-s1\.pcap", md), preset
    runs = sorted((run_dir / "runs").glob("measure.*.json"))  # not eval.meta.json, the eval's own record
    assert len(runs) >= 2 + 8 + 5 + 35 + 1 + 4 + 10  # throughput: 5 variants x 2 sizes
    assert not list((run_dir / "runs").glob("*.csv"))  # per-flow dumps are removed after reading
    for p in runs:
        result = native.load_result(p)
        shown = [display_path(Path(a)) if a.startswith("/") else a for a in result["command_line"]]
        assert " ".join(shown) in md
    tools = {json.loads(p.read_text())["tool"] for p in runs}
    assert tools == {"dpukit-measure run", "dpukit-measure compare", "dpukit-measure zero-loss"}
