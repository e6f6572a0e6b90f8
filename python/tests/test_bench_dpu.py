"""bench at BlueField-2 speed (issue 25): the operator experiment against
Fig. 12's text, collected and rebuilt from its record, and the end-to-end
programs with their dpu side dilated."""

from __future__ import annotations

import dataclasses

from dpukit.experiments import Context
from dpukit.experiments import bench_dpu as bd


def small_ops_ctx(tmp_path, monkeypatch) -> Context:
    # Two operators: one the paper ran on an engine (compress), one it did not (crc).
    real = bd.list_operators
    monkeypatch.setattr(bd, "list_operators", lambda: [o for o in real() if o.name in ("crc", "compress")])
    return Context(name="bench.bluefield.ops", quick=True, out_dir=tmp_path)


def table_rows(sec, caption_start: str) -> list[list]:
    return next(b for b in sec.blocks if getattr(b, "caption", "").startswith(caption_start)).rows


def test_operators_at_bluefield2_against_fig12_and_rebuilt_from_the_record(bench_tool, tmp_path, monkeypatch):
    ctx = small_ops_ctx(tmp_path, monkeypatch)
    data = bd.collect_ops(ctx)
    # 2 operators x (host, dpu), the host's peak of each, the engine backend for compress
    assert len(ctx.runs) == 7
    for run in data["runs"]:
        fig = run["result"]["figures"]
        assert fig["dilated"] is (run["place"] == "dpu")
        assert run["result"]["placement"]["dpu_speed"]["name"] == ("bluefield2" if run["place"] == "dpu" else "host")
    r = bd.ops_ratios(data)
    f = r["factor"]
    assert f == next(run["result"]["placement"]["dpu_speed"]["factor"] for run in data["runs"]
                     if run["place"] == "dpu") < 1
    for (op, size), p in r["points"].items():
        assert len(p["ratio"]) == 1 and p["ratio"][0] > 0
        # The dilation added (1/F - 1) x the work, within what a clock read adds.
        assert abs(p["dilation"][0] - (1 / f - 1)) < 0.1 * (1 / f - 1), (op, p["dilation"])

    sec = bd.render_ops(ctx, data)
    rows = {row[0].split(" ")[0]: row for row in table_rows(sec, "The dpu place at bluefield2")}
    assert "[engine: compression (deflate)]" in rows["compress"][0]
    assert rows["compress"][-2].startswith("1.5-2")
    assert rows["compress"][-1].startswith("on the Arm cores")
    assert rows["crc"][-2] == "< 1 (no figure given)"
    assert (tmp_path / "plots" / "bench.bluefield.ops-ratios.png").stat().st_size > 1000

    # At peak: compress on BlueField-2's deflate engine (model time), crc on the Arm cores, beside the host.
    eng = bd.engine_results(data)["compress"]
    assert eng["why"] is None and eng["spec"]["generation"] == "bluefield2"
    assert {(t, d) for (_, t, d) in eng["points"]} == {(t, d) for t in bd.engine_sweep(True)[0]
                                                       for d in bd.engine_sweep(True)[1]}
    for p in eng["points"].values():
        assert p["basis"].startswith("model time") and 0 < p["engine"]["busy_fraction"] <= 1.0001
    peak = {row[0]: row for row in table_rows(sec, "At peak")}
    assert peak["compress"][1].startswith("engine: deflate engine")
    assert peak["crc"][1].startswith("Arm cores")
    best = bd.engine_peak(eng, 1024)
    assert peak["compress"][2] == bd.fmt_sig(best["mops"])
    # The saturation: the engine at its peak is within 10 % of its modelled rate, busy most of the time.
    rate = bd.engine_rate(best, 1024)[0] / 1e6
    assert best["mops"] <= rate * 1.01 and best["engine"]["busy_fraction"] > 0.9, (best["mops"], rate)
    assert peak["compress"][-1] == "rate: guess"  # docs name the deflate engine's rate a guess
    params = table_rows(sec, "The engines' parameters")
    assert {row[1] for row in params} >= {"rate (B/s)", "latency (ns)", "queue depth", "parallel units"}
    assert all(row[3] for row in params)  # every figure says where it comes from
    assert (tmp_path / "plots" / "bench.bluefield.ops-saturation.png").stat().st_size > 1000

    # Rebuilt from the runs and the record alone, nothing measured: the same section.
    replay = Context(name="bench.bluefield.ops", quick=True, out_dir=tmp_path / "again", replay=True,
                     runs_from=tmp_path / "runs", records=ctx.records)
    again = bd.render_ops(replay, bd.collect_ops(replay))
    assert [dataclasses.asdict(b) for b in again.blocks if not hasattr(b, "path")] == \
        [dataclasses.asdict(b) for b in sec.blocks if not hasattr(b, "path")]


def test_verdicts_say_where_one_factor_misses_the_paper():
    v = bd.verdict("rxp_match", 0.25)
    assert v.startswith("on the Arm cores") and "6.00-8.00x" in v
    assert bd.peak_verdict("compress", 1.7).startswith("direction as the paper's") and "within" in \
        bd.peak_verdict("compress", 1.7)
    assert bd.peak_verdict("rxp_match", 0.5).startswith("wrong direction")
    assert "above" in bd.peak_verdict("rxp_match", 3.0)
    assert "direction as the paper's" in bd.verdict("sha256", 0.25)
    assert "memory-bound" in bd.verdict("memcpy", 0.25) and "paper" not in bd.verdict("memcpy", 0.25)
    assert "engine was disabled" in bd.verdict("rsa", 0.25)
    assert bd.paper_cell("crc32c") == "not in Fig. 12"


def test_end_to_end_dpu_side_is_dilated_and_labelled(bench_tool, tmp_path):
    modes = bd.APP_MODES
    recs = bd.measure_e2e(bench_tool, tmp_path, [("apprecog", modes, [256], [100])], rounds=1, seconds=0.3,
                          network="loopback")
    assert [r["mode"] for r in recs] == [label for label, _ in modes]
    by = {r["mode"]: r for r in recs}
    for label, cfg in modes:
        r = by[label]
        assert r["problems"] == [], r["problems"]
        assert r["dpu_speed"]["name"] == cfg["dpu_speed"]
        d = r["dilation"]
        if cfg["place"] == "dpu" and cfg["dpu_speed"] != "host":
            f = r["dpu_speed"]["factor"]
            assert d["work_cpu_ns"] > 0 and d["dilated_cpu_ns"] >= 0.99 * (1 / f - 1) * d["work_cpu_ns"]
            assert r["server_cpu_ns"]["dpu"] >= d["work_cpu_ns"] + d["dilated_cpu_ns"]
        else:
            assert d == {"work_cpu_ns": 0, "dilated_cpu_ns": 0}
    ctx = Context(name="bench.bluefield.e2e", quick=False, out_dir=tmp_path)
    sec = bd.render_e2e(ctx, recs)
    rows = table_rows(sec, "Fig. 16")
    assert [row[1] for row in rows] == [label for label, _ in modes]


def test_the_models_promise_on_the_runner_is_shown_met_or_missed():
    """bench.bluefield.ops's line for the model's promise (sha256's paired
    rounds: throughput F x, CPU per unit 1/F x, issue 31's bounds): met
    within them, missed outside, and absent without sha256's pairs."""
    from dpukit.report import Section

    def line(wall: list[float], per_cpu: list[float]) -> str:
        sec = Section("t")
        bd.promise_paragraph(sec, {"factor": 0.45, "points": {("sha256", 1024): {"wall": wall, "ratio": per_cpu}}},
                             1024)
        return sec.blocks[0].text if sec.blocks else ""

    met = line([0.44, 0.45, 0.47], [0.45, 0.46, 0.44])
    assert "throughput dpu / host 0.450 [0.440-0.470] against F = 0.450 ± 6% (goal): met" in met, met
    assert "CPU per unit of work dpu / host 2.22 [2.17-2.27] against 1/F = 2.22 ± 5% (goal): met" in met, met
    missed = line([0.40, 0.41, 0.45], [0.40, 0.41, 0.42])
    assert missed.count("(goal): missed") == 2, missed
    assert line([], []) == ""
