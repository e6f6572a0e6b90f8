"""Operator characterisation (dpukit.bench_profile): valgrind output parsing,
differencing, the instruction classes, PCA and the plots."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dpukit import bench_profile as bp
from conftest import native_tool


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def record(op: str, **metrics) -> dict:
    """A simulated record as characterize() makes one."""
    m = {k: None for k in bp.METRICS}
    m.update(metrics)
    return {"op": op, "scenario": "program" if op.startswith("program_") else "network", "backend": "lib",
            "size": 64, "source": bp.SOURCE_CACHEGRIND, "simulated": True, "metrics": m,
            "metric_sources": {k: bp.SOURCE_CACHEGRIND for k, v in m.items() if v is not None},
            "not_measured": {k: bp.NOT_SIMULATED for k, v in m.items() if v is None}, "per_op": {}}


@pytest.fixture
def bench_tool() -> Path:
    """build/bin/dpukit-bench, or skip when it has not been built."""
    return native_tool("dpukit-bench")


# ------------------------------------------------------------ parsing

CACHEGRIND_SAMPLE = """\
desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         32768 B, 64 B, 8-way associative
cmd: prog
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc Bcm Bi Bim
fl=a.c
fn=main
1 5 0 0 2 0 0 1 0 0 1 0 0 0
summary: 5900540 5988 4366 1482545 34580 11097 571272 5368 3687 926442 44144 34934 6416
"""


def test_parse_cachegrind_sample(tmp_path):
    p = tmp_path / "cg.out"
    p.write_text(CACHEGRIND_SAMPLE)
    ev = bp.parse_cachegrind(p)
    assert ev["Ir"] == 5900540 and ev["Dr"] == 1482545 and ev["Dw"] == 571272
    assert ev["D1mr"] == 34580 and ev["Bc"] == 926442 and ev["Bim"] == 6416


def test_parse_cachegrind_rejects_truncated(tmp_path):
    p = tmp_path / "cg.out"
    p.write_text(CACHEGRIND_SAMPLE.replace("summary:", "sumary:"))
    with pytest.raises(bp.ProfileError, match="not a complete cachegrind output"):
        bp.parse_cachegrind(p)


CALLGRIND_SAMPLE = """\
# callgrind format
version: 1
positions: instr line
events: Ir
summary: 1000

ob=(1) /lib/libx.so
fl=(1) x.c
fn=(1) f
0x1000 3 10
+4 3 10
cob=(2) /lib/liby.so
cfi=(2) y.c
cfn=(2) g
calls=10 0x2000 0
* 4 500
+3 5 10
fn=(3) 0x0000000000114020 [PLT]
ob=(3) ???
0x114020 0 7
ob=(1)
fn=(1)
0x1000 3 2
"""


def test_parse_callgrind_positions_calls_and_plt(tmp_path):
    p = tmp_path / "cl.out"
    p.write_text(CALLGRIND_SAMPLE)
    counts = bp.parse_callgrind_instructions(p)
    # The inclusive cost after calls= (500) is the callee's, not f's.
    assert counts == {("/lib/libx.so", 0x1000): 12, ("/lib/libx.so", 0x1004): 10,
                      ("/lib/libx.so", 0x1007): 10, (bp.PLT_OBJECT, 0x114020): 7}


def test_parse_callgrind_needs_instr_positions(tmp_path):
    p = tmp_path / "cl.out"
    p.write_text(CALLGRIND_SAMPLE.replace("positions: instr line", "positions: line").replace("0x1000 3", "3"))
    with pytest.raises(bp.ProfileError, match="--dump-instr=yes"):
        bp.parse_callgrind_instructions(p)


# ------------------------------------------------------------ differencing and metrics

def test_differencing_removes_startup():
    startup = {"Ir": 5_900_000, "Dr": 1_480_000, "Dw": 570_000, "D1mr": 34_000, "D1mw": 5_000,
               "Bc": 926_000, "Bcm": 44_000, "Bi": 35_000, "Bim": 6_400}
    per_op = {"Ir": 64, "Dr": 22, "Dw": 5, "D1mr": 0.5, "D1mw": 0.25, "Bc": 6, "Bcm": 0.5, "Bi": 2, "Bim": 0}
    n1, n2 = 1000, 3000
    run1 = {k: startup[k] + n1 * per_op[k] for k in startup}
    run2 = {k: startup[k] + n2 * per_op[k] for k in startup}
    d = bp.difference(run2, run1)
    assert {k: v / (n2 - n1) for k, v in d.items()} == pytest.approx(per_op)
    values, why = bp.cachegrind_metrics(d)
    assert why == {}
    assert values["load_store_ratio"] == pytest.approx(27 / 64)
    assert values["branch_ratio"] == pytest.approx(8 / 64)
    assert values["l1d_miss_ratio"] == pytest.approx(0.75 / 27)
    assert values["branch_mispredict_ratio"] == pytest.approx(0.5 / 8)
    # Without differencing the start-up would dominate: not what is reported.
    assert bp.cachegrind_metrics(run2)[0]["load_store_ratio"] != pytest.approx(27 / 64, rel=0.01)


def test_difference_not_positive_is_not_a_value():
    values, why = bp.cachegrind_metrics({"Ir": 0, "Dr": 5, "Dw": 0, "Bc": 1, "Bi": 0, "D1mr": -3, "D1mw": 0,
                                         "Bcm": 0, "Bim": 0})
    assert values["load_store_ratio"] is None and "not positive" in why["load_store_ratio"]
    assert values["l1d_miss_ratio"] is None  # negative misses: noise, not a ratio


def test_tiny_negative_difference_is_zero_large_is_not_measured():
    values, why = bp.cachegrind_metrics({"Ir": 64_000, "Dr": 22_000, "Dw": 5_000, "D1mr": 31, "D1mw": 0,
                                         "Bc": 6_000, "Bi": 2_000, "Bcm": -0.05, "Bim": 0})
    assert values["branch_mispredict_ratio"] == 0.0  # noise around no mispredictions
    values, why = bp.cachegrind_metrics({"Ir": 64_000, "Dr": 22_000, "Dw": 5_000, "D1mr": 31, "D1mw": 0,
                                         "Bc": 6_000, "Bi": 2_000, "Bcm": -500, "Bim": 0})
    assert values["branch_mispredict_ratio"] is None and "not positive" in why["branch_mispredict_ratio"]


def test_runs_with_different_startup_are_refused(monkeypatch, tmp_path):
    """When the two runs checked a different number of inputs against ref,
    their difference is not the operator's cost: refused, with the reason."""
    def fake(tool, op, backend, size, n, **kw):
        events = {"Ir": 1000 + 10 * n}
        return events, None, {"cachegrind": 1.0}, {"cachegrind": 512 if n == 10 else 37}

    monkeypatch.setattr(bp, "_valgrind_counts", fake)
    rec = {"seconds": {}}
    with pytest.raises(bp.StartupDiffers, match="covered 512 inputs in one and 37"):
        bp._differenced_valgrind("tool", "op", "lib", 64, 10, 20, rec, cachegrind=True, callgrind=False)

    def same(tool, op, backend, size, n, **kw):
        return {"Ir": 1000 + 10 * n}, None, {"cachegrind": 1.0}, {"cachegrind": 512}

    monkeypatch.setattr(bp, "_valgrind_counts", same)
    d, _ = bp._differenced_valgrind("tool", "op", "lib", 64, 10, 20, rec, cachegrind=True, callgrind=False)
    assert d == {"Ir": 100}
    assert rec["seconds"]["cachegrind"] == 4.0  # both attempts count in the cost


def test_perf_metrics_from_counts_and_missing_events():
    d = {"cycles": 2000, "instructions": 3000, "branch_instructions": 600, "branch_misses": 6,
         "l1d_read_accesses": 900, "l1d_read_misses": 9, "l1d_write_accesses": 300,
         "dtlb_read_accesses": 900, "dtlb_read_misses": 3}
    values, why = bp.perf_metrics(d, {"itlb_read_accesses": "not counted: perf_event_open(...) failed: ENOENT"})
    assert values["ipc"] == pytest.approx(1.5)
    assert values["l1d_miss_ratio"] == pytest.approx(0.01)
    assert values["load_store_ratio"] == pytest.approx(0.4)
    assert values["branch_ratio"] == pytest.approx(0.2)
    assert values["dtlb_miss_ratio"] == pytest.approx(1 / 300)
    assert values["itlb_miss_ratio"] is None and "ENOENT" in why["itlb_miss_ratio"]


def test_choose_iterations():
    assert bp.choose_iterations(10.0, 5e6, 32, 4_000_000) == (500_000, 1_000_000)
    assert bp.choose_iterations(2e6, 5e6, 32, 4_000_000) == (32, 64)  # slow operator: the floor
    assert bp.choose_iterations(0.1, 5e6, 32, 4_000_000) == (4_000_000, 8_000_000)


# ------------------------------------------------------------ instruction classes

@pytest.mark.parametrize("text, cls", [
    ("add    %rsi,%rax", "integer"),
    ("mov    0x8(%rcx),%rcx", "integer"),
    ("add    (%rdi),%eax", "integer"),  # integer with a memory operand
    ("lea    0x0(,%rbp,4),%rsi", "integer"),
    ("rep stos %rax,%es:(%rdi)", "rep_string"),  # valgrind counts every iteration
    ("rep movsb %ds:(%rsi),%es:(%rdi)", "rep_string"),
    ("repz cmpsb %es:(%rdi),%ds:(%rsi)", "rep_string"),
    ("repz ret", "branch"),
    ("movsbl (%rdi),%eax", "integer"),
    ("movsd  %xmm0,(%rax)", "simd_fp"),
    ("lock cmpxchg %ecx,(%rdx)", "integer"),
    ("crc32q %rax,%rbx", "integer"),
    ("jb     53090 <f+0x40>", "branch"),
    ("call   c0f0 <memcpy@plt>", "branch"),
    ("notrack jmp *%rax", "branch"),
    ("ret", "branch"),
    ("vpaddb %ymm8,%ymm0,%ymm2", "simd_fp"),
    ("movdqu 0x1(%rdi),%xmm4", "simd_fp"),
    ("pmovmskb %xmm6,%edx", "simd_fp"),
    ("aesenc %xmm1,%xmm0", "simd_fp"),
    ("fld1", "simd_fp"),
    ("kmovq  %k1,%rax", "simd_fp"),
    ("movss  0x15b2f1(%rip),%xmm1        # 1a1820 <x>", "simd_fp"),
    ("lea    0x1(%rip),%rdi        # 1a1820 <summary_mmx>", "integer"),  # a comment is not an operand
    ("nopw   0x0(%rax,%rax,1)", "other"),
    ("endbr64", "other"),
    ("cs nopw 0x0(%rax,%rax,1)", "other"),
])
def test_classify_x86(text, cls):
    assert bp.classify_instruction(text, "x86_64") == cls


@pytest.mark.parametrize("text, cls", [
    ("add\tx0, x1, x2", "integer"),
    ("ldr\tx0, [x1, #8]", "load_store"),
    ("stp\tx29, x30, [sp, #-16]!", "load_store"),
    ("b.ne\t4000 <f+0x10>", "branch"),
    ("cbz\tx0, 4000 <f>", "branch"),
    ("fadd\td0, d1, d2", "simd_fp"),
    ("aese\tv0.16b, v1.16b", "simd_fp"),
    ("nop", "other"),
])
def test_classify_aarch64(text, cls):
    assert bp.classify_instruction(text, "aarch64") == cls


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
def test_instruction_mix_of_a_real_object(bench_tool):
    """Classes for instructions objdump decodes in a real ELF object (the
    bench tool); an unknown object is unclassified, a PLT stub a branch."""
    path = str(bench_tool)
    arch, classes = bp.disassemble(path)
    assert arch in ("x86_64", "aarch64")
    assert len(classes) > 1000
    assert set(classes.values()) <= {"integer", "branch", "simd_fp", "other", "load_store", "rep_string"}
    assert {"integer", "branch"} <= set(classes.values())
    some = sorted(classes)[:50]
    counts = {(path, a): 2 for a in some}
    counts[("/no/such/object", 0x10)] = 5
    counts[(bp.PLT_OBJECT, 0x20)] = 3
    mix = bp.instruction_mix(counts)
    assert mix["unclassified"] == 5
    assert sum(mix.values()) == 2 * 50 + 5 + 3
    want_branch = 3 + 2 * sum(classes[a] == "branch" for a in some)
    assert mix.get("branch", 0) == want_branch


def test_rep_string_iterations_get_a_caveat(monkeypatch):
    monkeypatch.setattr(bp, "instruction_mix", lambda counts, objdump="objdump": {"rep_string": 930, "integer": 70})
    rec = {"metrics": {}, "metric_sources": {}, "definitions": {}, "not_measured": {}, "per_op": {},
           "seconds": {}, "simulated": True}
    bp._add_mix(rec, {("x", 1): 1000}, 10, "objdump")
    assert rec["metrics"]["integer_ratio"] == pytest.approx(0.07)
    assert rec["instruction_mix"]["rep_string"] == pytest.approx(0.93)
    assert "93% of the instructions" in rec["caveats"][0]
    assert rec["per_op"]["instructions_callgrind"] == 100
    monkeypatch.setattr(bp, "instruction_mix", lambda counts, objdump="objdump": {"rep_string": 1, "integer": 99})
    rec2 = {"metrics": {}, "metric_sources": {}, "definitions": {}, "not_measured": {}, "per_op": {},
            "seconds": {}, "simulated": True}
    bp._add_mix(rec2, {("x", 1): 100}, 10, "objdump")
    assert "caveats" not in rec2


# ------------------------------------------------------------ PCA

def test_pca_points_on_a_line_have_one_component():
    t = np.linspace(-2, 3, 12)
    x = np.column_stack([t, 2 * t + 1, -0.5 * t + 7])
    scores, ratios, comps = bp.pca(x)
    assert ratios[0] == pytest.approx(1.0, abs=1e-9)
    assert sum(ratios) == pytest.approx(1.0)
    # PC1 orders the points as t does (up to sign).
    assert abs(np.corrcoef(scores[:, 0], t)[0, 1]) == pytest.approx(1.0)


def test_pca_independent_features_share_the_variance():
    x = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=float)
    _, ratios, _ = bp.pca(x)
    assert ratios == pytest.approx([0.5, 0.5])


def test_pca_standardises_units():
    """A feature in large units must not dominate: scaling one column changes nothing."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20, 3))
    _, r1, _ = bp.pca(x)
    x[:, 1] *= 1000.0
    _, r2, _ = bp.pca(x)
    assert r1 == pytest.approx(r2)


def test_pca_drops_constant_features():
    x = np.array([[1, 5, 0.0], [2, 5, 1.0], [3, 5, 0.0], [4, 5, 1.0]])
    _, ratios, comps = bp.pca(x)
    assert comps.shape[1] == 2


# ------------------------------------------------------------ plots

def sample_records():
    ops = [record("memcpy", l1d_miss_ratio=0.001, integer_ratio=0.77, branch_ratio=0.12, load_store_ratio=0.42,
                  branch_mispredict_ratio=0.0),
           record("crc", l1d_miss_ratio=0.02, integer_ratio=0.9, branch_ratio=0.05, load_store_ratio=0.2,
                  branch_mispredict_ratio=0.01),
           record("aes", l1d_miss_ratio=0.01, integer_ratio=0.3, branch_ratio=0.02, load_store_ratio=0.3,
                  branch_mispredict_ratio=0.02),
           record("lpm", l1d_miss_ratio=0.2, integer_ratio=0.7, branch_ratio=0.15, load_store_ratio=0.35,
                  branch_mispredict_ratio=0.05)]
    progs = [record("program_l3fwd", l1d_miss_ratio=0.05, integer_ratio=0.75, branch_ratio=0.1,
                    load_store_ratio=0.3, branch_mispredict_ratio=0.02),
             record("program_url_filter", l1d_miss_ratio=0.03, integer_ratio=0.6, branch_ratio=0.14,
                    load_store_ratio=0.33, branch_mispredict_ratio=0.03)]
    return ops, progs


def test_radar_chart_writes_png(tmp_path):
    ops, _ = sample_records()
    out = bp.radar_chart(ops, tmp_path / "radar.png")
    w, h = png_size(out)
    assert w > 400 and h > 200


def test_radar_chart_shows_a_missing_value_as_a_gap(tmp_path):
    ops, _ = sample_records()
    ops[1]["metrics"]["l1d_miss_ratio"] = None
    bp.radar_chart(ops, tmp_path / "radar.png")
    png_size(tmp_path / "radar.png")


def test_pca_leaves_out_records_missing_a_feature(tmp_path):
    ops, progs = sample_records()
    ops[0]["metrics"]["l1d_miss_ratio"] = None  # 1 of 6 records: the feature stays, the record goes
    ratios = bp.pca_plot(ops, progs, tmp_path / "pca.png")
    assert len(ratios) == 5


def test_radar_chart_needs_three_axes(tmp_path):
    few = [record("a", branch_ratio=0.1, load_store_ratio=0.3), record("b", branch_ratio=0.2, load_store_ratio=0.4)]
    with pytest.raises(bp.ProfileError, match="3 metrics"):
        bp.radar_chart(few, tmp_path / "r.png")


def test_pca_plot_writes_png_and_returns_ratios(tmp_path):
    ops, progs = sample_records()
    ratios = bp.pca_plot(ops, progs, tmp_path / "pca.png")
    assert len(ratios) == 5 and sum(ratios) == pytest.approx(1.0)
    assert ratios == sorted(ratios, reverse=True)
    png_size(tmp_path / "pca.png")


def test_unavailable_records_are_left_out_of_plots(tmp_path):
    ops, progs = sample_records()
    gone = record("rsa")
    gone["source"] = None
    gone["unavailable"] = "component operator rsa is not in this build"
    bp.radar_chart(ops + [gone], tmp_path / "radar.png")
    bp.pca_plot(ops + [gone], progs, tmp_path / "pca.png")
    assert "unavailable" in bp.table(ops + [gone])


# ------------------------------------------------------------ the real tool

def test_counters_flag_reports_unavailable_or_counts(bench_tool, tmp_path):
    out = tmp_path / "r.json"
    subprocess.run([str(bench_tool), "run", "--ops", "memcpy", "--backend", "ref", "--sizes", "64",
                    "--iterations", "1000", "--counters", "--quiet", "--json", str(out)], check=True, timeout=60)
    point = json.loads(out.read_text())["figures"]["points"][0]
    c = point["counters"]
    if isinstance(c, str):
        assert c.startswith("unavailable: perf_event_open(")  # this VM: no PMU, and the reason
    else:
        assert c["source"] == "perf_event_open"
        assert c["events"]["instructions"]["value"] > 1000  # at least one per unit of work


def test_without_counters_method_perf_measures_nothing(bench_tool, tmp_path):
    """Asked for hardware counters where there are none: every metric not
    measured, with the kernel's reason; nothing is simulated instead."""
    probe = subprocess.run([str(bench_tool), "run", "--ops", "memcpy", "--backend", "ref", "--sizes", "64",
                            "--iterations", "10", "--counters", "--quiet", "--json", str(tmp_path / "p.json")],
                           check=True, timeout=60)
    assert probe.returncode == 0
    if not isinstance(json.loads((tmp_path / "p.json").read_text())["figures"]["points"][0]["counters"], str):
        pytest.skip("this machine has hardware counters")
    (rec,) = bp.characterize(bench_tool, ["memcpy"], backend="ref", method="perf")
    assert rec["source"] is None
    assert all(v is None for v in rec["metrics"].values())
    assert all("unavailable: perf_event_open(" in rec["not_measured"][m] for m in bp.METRICS)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_characterize_memcpy_under_valgrind(bench_tool, tmp_path):
    """A real, short valgrind characterisation of memcpy (ref backend):
    cachegrind and callgrind agree on the instructions per copy, and the
    start-up is gone from the ratios."""
    (rec,) = bp.characterize(bench_tool, ["memcpy"], backend="ref", size=64, method="valgrind", n1=2000, n2=6000)
    assert rec["source"] == bp.SOURCE_CACHEGRIND and rec["simulated"]
    assert (rec["n1"], rec["n2"]) == (2000, 6000)
    ir = rec["per_op"]["Ir"]
    assert 10 < ir < 2000
    assert rec["per_op"]["instructions_callgrind"] == pytest.approx(ir, rel=0.02)
    m = rec["metrics"]
    for name in ("l1d_miss_ratio", "integer_ratio", "branch_ratio", "load_store_ratio", "branch_mispredict_ratio"):
        assert m[name] is not None and 0 <= m[name] <= 1, name
        assert rec["metric_sources"][name].endswith("(simulated)")
    assert m["load_store_ratio"] > 0.05  # a copy reads and writes memory
    for name in ("ipc", "itlb_miss_ratio", "dtlb_miss_ratio"):
        assert m[name] is None and "valgrind" in rec["not_measured"][name]
    assert sum(rec["instruction_mix"].values()) == pytest.approx(1.0)
    assert rec["instruction_mix"].get("unclassified", 0) < 0.05
    bp.radar_chart([rec, rec | {"op": "memcpy-again"}, rec | {"op": "third"}], tmp_path / "radar.png")
    png_size(tmp_path / "radar.png")


def test_unavailable_operator_is_recorded(bench_tool):
    """An operator whose backend cannot run here comes back with the reason, not numbers."""
    listed = bp.list_operators(bench_tool)
    assert "memcpy" in listed and listed["memcpy"] == "copy"
    with pytest.raises(bp.ProfileError, match="unknown operator"):
        bp.characterize(bench_tool, ["no_such_op"])
    (rec,) = bp.characterize(bench_tool, ["memcpy"], backend="dev", method="valgrind", n1=10, n2=20)
    if rec["source"] is not None:
        pytest.skip("memcpy has a dev backend here")
    assert rec["unavailable"] and all(v is None for v in rec["metrics"].values())
