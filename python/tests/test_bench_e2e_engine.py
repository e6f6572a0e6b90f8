"""bench at BlueField-2 with its engines (issue 31 §3): app recognition's
matching on the RXP (and compress on the deflate engine) end to end, and
Table 5's programs on the engine backend beside the Arm cores and the host,
each rebuilt from the record."""

from __future__ import annotations

import dataclasses

from dpukit.experiments import Context
from dpukit.experiments import bench_dpu as bd


def table_rows(sec, caption_start: str) -> list[list]:
    return next(b for b in sec.blocks if getattr(b, "caption", "").startswith(caption_start)).rows


def test_engine_modes_are_modes_of_their_own():
    labels = [label for label, _ in bd.APP_MODES]
    assert f"dpu at {bd.SPEED}, RXP" in labels and f"dpu at {bd.SPEED}, RXP + deflate" in labels
    keys = {bd._mode_key(cfg) for _, cfg in bd.APP_MODES}
    assert len(keys) == len(bd.APP_MODES)  # the engine modes do not fold into "dpu at bluefield2"
    assert bd.ENGINE_MODES == {f"dpu at {bd.SPEED}, RXP", f"dpu at {bd.SPEED}, RXP + deflate"}


def test_app_recognition_on_the_rxp_end_to_end(bench_tool, tmp_path):
    modes = [m for m in bd.APP_MODES if m[0] in ("host", f"dpu at {bd.SPEED}") or m[0] in bd.ENGINE_MODES]
    recs = bd.measure_e2e(bench_tool, tmp_path, [("apprecog", modes, [256], [100])], rounds=1, seconds=0.3,
                          network="loopback")
    by = {r["mode"]: r for r in recs}
    assert set(by) == {label for label, _ in modes}
    for label, cfg in modes:
        r = by[label]
        # The client checked the classification and the replies' bodies.
        assert r["problems"] == [], (label, r["problems"])
        assert r["checks"]["verified"] > 0
        assert r["engine"] == cfg.get("engine")
        e = r["engine_figures"]
        if not cfg.get("engine"):
            assert e is None
            continue
        assert e["generation"] == "bluefield2"
        # One RXP job per request; the compress action's jobs on the deflate engine.
        assert e["regex"]["jobs"] == r["server_processed"]
        assert e["regex"]["mean_latency_ns"] >= 5000  # at least the model's unloaded latency
        assert ("compress" in e) == ("compress" in cfg["engine"])
        if "compress" in e:
            assert e["compress"]["jobs"] == r["actions"]["server"]["compress"]
        # The engines' work is hw; the dpu thread is dilated for its own.
        assert r["server_cpu_ns"]["hw"] > 0 and r["utilization"]["hw"] > 0
        d, f = r["dilation"], r["dpu_speed"]["factor"]
        assert d["work_cpu_ns"] > 0 and d["dilated_cpu_ns"] >= 0.99 * (1 / f - 1) * d["work_cpu_ns"]
    s = bd.e2e_summary(recs)
    g = s[("apprecog", f"dpu at {bd.SPEED}, RXP", 256, 100.0)]
    assert 0 <= g["late_share"][0] <= 1 and g["rxp_latency_us"][0] >= 5
    ctx = Context(name="bench.bluefield.e2e", quick=False, out_dir=tmp_path)
    sec = bd.render_e2e(ctx, recs)
    rows = table_rows(sec, "Fig. 16")
    assert [row[1] for row in rows] == [label for label, _ in bd.APP_MODES if label in by]
    rxp = next(row for row in rows if row[1] == f"dpu at {bd.SPEED}, RXP")
    assert rxp[-1] != "-" and rxp[-2] != "-"  # the RXP's late share and latency are shown
    host = next(row for row in rows if row[1] == "host")
    assert host[-1] == "-"


def test_programs_with_and_without_the_engine_and_rebuilt_from_the_record(bench_tool, tmp_path):
    ctx = Context(name="bench.bluefield.ops", quick=True, out_dir=tmp_path)
    ctx.measured("cpu", bd.shared_cpu)  # as collect_ops records it first in the same experiment
    data = bd.collect_programs(ctx)
    assert len(ctx.runs) == 3  # host and dpu (one round), the engine
    figs = bd.program_figures(data)
    for name in bd.ENGINE_PROGRAMS:
        f = figs[(name, 1024)]
        assert len(f["ratio"]) == 1 and 0 < f["ratio"][0] < 1, (name, f["ratio"])  # the Arm core, dilated
        e = f["engine"]
        assert e is not None and e["backend"] == "engine" and e["basis"].startswith("model time")
        assert (e["threads"], e["depth"]) == (8, 64)
        assert e["engine"]["name"] == ("deflate engine (GGA)" if name == "program_file_compress" else "RXP")
        assert 0 < e["engine"]["busy_fraction"] <= 1.0001

    sec = bd.Section("programs")
    bd.render_programs(ctx, sec, data)
    rows = {row[0]: row for row in table_rows(sec, "Table 5's programs at bluefield2")}
    assert set(rows) == set(bd.ENGINE_PROGRAMS)
    assert rows["program_ips"][7].startswith("RXP, 8 x 64")
    assert all(r[6] != "-" and r[2] != "-" and r[3] != "-" for r in rows.values())

    replay = Context(name="bench.bluefield.ops", quick=True, out_dir=tmp_path / "again", replay=True,
                     runs_from=tmp_path / "runs", records=ctx.records)
    again = bd.Section("programs")
    bd.render_programs(replay, again, bd.collect_programs(replay))
    assert [dataclasses.asdict(b) for b in again.blocks] == [dataclasses.asdict(b) for b in sec.blocks]
