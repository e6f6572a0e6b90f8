"""dpukit eval: layout helpers, experiment parameters, and an end-to-end run."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dpukit import experiments, native
from dpukit.errors import DpukitError
from dpukit.evaluate import make_run_dir, point_latest
from dpukit.experiments import core as core_exps
from dpukit.experiments import median_run
from dpukit.paths import display_path, repo_root

STAMP = re.compile(r"^\d{8}T\d{6}Z$")


def test_run_dir_is_a_utc_timestamp(tmp_path):
    now = datetime(2026, 11, 21, 8, 15, 0, tzinfo=timezone.utc)
    a = make_run_dir(tmp_path, now)
    b = make_run_dir(tmp_path, now)
    assert a.name == "20261121T081500Z" and STAMP.match(a.name)
    assert b.name == "20261121T081500Z-1"
    assert STAMP.match(make_run_dir(tmp_path).name)


def test_latest_is_replaced(tmp_path):
    a, b = tmp_path / "20260101T000000Z", tmp_path / "20260101T000001Z"
    a.mkdir(), b.mkdir()
    point_latest(tmp_path, a)
    point_latest(tmp_path, b)
    link = tmp_path / "latest"
    assert link.is_symlink() and os.readlink(link) == b.name  # relative: the tree can move
    assert link.resolve() == b.resolve()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_latest_refuses_to_replace_a_directory(tmp_path):
    (tmp_path / "latest").mkdir()
    with pytest.raises(DpukitError, match="not a symlink"):
        point_latest(tmp_path, tmp_path)


def test_registry_and_selection():
    names = list(experiments.registry())
    assert names[:3] == ["core.ring", "core.channel", "core.flowtable"]
    assert [e.name for e in experiments.select(["core"])] == names[:3]
    assert [e.name for e in experiments.select(["core.flowtable", "core.ring"])] == ["core.ring", "core.flowtable"]
    with pytest.raises(KeyError):
        experiments.select(["cor"])


def test_median_run_keeps_one_run_together():
    runs = [{"figures": {"x": v, "tag": t}} for v, t in ((3.0, "c"), (1.0, "a"), (2.0, "b"))]
    assert median_run(runs, "x")["figures"]["tag"] == "b"
    assert median_run(runs[:1], "x")["figures"]["tag"] == "c"


def test_channel_message_counts():
    assert [core_exps.channel_messages(p, True) for p in (64, 1024, 16384, 65536)] == \
        [2_000_000, 262_144, 16_384, 4_096]
    assert [core_exps.channel_messages(p, False) for p in (64, 256, 1024, 4096, 16384, 65536)] == \
        [10_000_000, 4_194_304, 1_048_576, 262_144, 65_536, 16_384]


def test_flowtable_capacity_has_room():
    for inserts in (2500, 19250, 100000):
        cap = core_exps.flowtable_capacity(inserts)
        assert cap >= 2 * inserts and cap & (cap - 1) == 0


@pytest.mark.slow
def test_eval_quick_end_to_end(core_tool, tmp_path, run_dpukit):
    out = tmp_path / "results"
    proc = run_dpukit("eval", "--quick", "--only", "core", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[eval 1/3] core.ring:" in proc.stderr  # progress on stderr

    latest = out / "latest"
    assert latest.is_symlink() and STAMP.match(os.readlink(latest))
    run_dir = latest.resolve()
    md = (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    for name in ("core.ring", "core.channel", "core.flowtable"):
        assert name in md and name in html
    assert "<table>" in html and "| batch |" in md

    pngs = sorted(run_dir.rglob("*.png"))
    assert len(pngs) >= 2
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (run_dir / src).is_file(), src
        assert src.endswith(".png") and not Path(src).is_absolute()

    runs = sorted(p for p in (run_dir / "runs").glob("*.json") if p.name != "eval.meta.json")
    assert len(runs) >= 3 + 8 + 3
    for p in runs:
        result = native.load_result(p)  # schema-valid
        # every run's exact command line is in the report, paths inside the
        # repository shown relative to it
        assert result["command_line"][-1] == str(p)
        shown = [display_path(Path(a)) if a.startswith("/") else a for a in result["command_line"]]
        assert shown[0] == "build/bin/dpukit-core" or not shown[0].startswith(str(repo_root()))
        assert " ".join(shown) in md

    tools = {json.loads(p.read_text())["tool"] for p in runs}
    assert tools == {"dpukit-core ring-bench", "dpukit-core channel-bench", "dpukit-core flowtable-bench"}

    # `dpukit eval --render` rebuilds the report and its plots from runs/
    # alone, byte for byte, measuring nothing.
    written = {p.relative_to(run_dir): p.read_bytes() for p in [run_dir / "report.md", run_dir / "report.html", *pngs]}
    for p in [run_dir / "report.md", run_dir / "report.html", *pngs]:
        p.unlink()
    before = set((run_dir / "runs").iterdir())
    proc = run_dpukit("eval", "--render", str(run_dir), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[render 3/3] core.flowtable: rebuilt from" in proc.stderr
    assert set((run_dir / "runs").iterdir()) == before  # nothing ran
    for rel, data in written.items():
        assert (run_dir / rel).read_bytes() == data, rel


def test_eval_dpu_speed_reaches_every_tool_and_the_report(core_tool, tmp_path, monkeypatch):
    """`dpukit eval --dpu`: every tool the experiments run sees the speed
    (through $DPUKIT_DPU_SPEED, the default of each tool's --dpu-speed), the
    report says it, and the environment is as before afterwards."""
    import subprocess

    from dpukit.dpu_speed import ENV, resolve_dpu_speed
    from dpukit.evaluate import run_eval
    from dpukit.report import Section

    monkeypatch.delenv(ENV, raising=False)
    seen = []

    def probe(ctx):
        out = subprocess.run([str(core_tool), "dpu-speed"], capture_output=True, text=True, check=True)
        seen.append((json.loads(out.stdout), ctx.dpu))
        return Section("probe")

    exp = experiments.Experiment("probe.speed", "probe", "what speed a tool sees", ("dpukit-core",), probe)
    speed = resolve_dpu_speed("bluefield3")
    outcome = run_eval([exp], quick=True, out_parent=tmp_path, argv=["eval", "--dpu", "bluefield3"],
                       progress=lambda line: None, dpu=speed)
    assert outcome.error is None
    (tool_saw, ctx_dpu), = seen
    assert {k: tool_saw[k] for k in ("name", "factor")} == {"name": "bluefield3", "factor": speed.factor}
    assert 0 < speed.factor < 1
    # The preset's Arm packet path and table management come with it (docs/core.md).
    assert tool_saw["packet_path"]["packet_ns"] > 0 and tool_saw["packet_path"]["rule_ns"] > 0
    assert ctx_dpu == speed
    assert f"DPU speed: bluefield3 (F = {speed.factor:g}" in outcome.report_md.read_text()
    assert ENV not in os.environ


def test_eval_refuses_a_dpu_speed_the_model_does_not_know(core_tool, run_dpukit, tmp_path):
    for bad, why in (("bluefield9", "not a preset"), ("1.5", "must be in (0, 1]"), ("0", "must be in (0, 1]")):
        proc = run_dpukit("eval", "--dpu", bad, "--only", "core.ring", "--out", str(tmp_path / "r"))
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "--dpu" in proc.stderr and why in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()  # nothing written for a refused speed


def _probe_eval(tmp_path, exps, dpu="host"):
    from dpukit.dpu_speed import resolve_dpu_speed
    from dpukit.evaluate import run_eval

    outcome = run_eval(exps, quick=True, out_parent=tmp_path, argv=["eval", "--dpu", dpu],
                       progress=lambda line: None, dpu=resolve_dpu_speed(dpu))
    assert outcome.error is None
    return outcome.directory


def test_render_uses_measured_values_and_keeps_what_it_cannot_rebuild(core_tool, tmp_path, monkeypatch):
    """A value an experiment measured itself (ctx.measured) comes back from
    the record; an experiment that starts a process outside ctx.run_native
    cannot be rebuilt, and its section is kept as written, not re-measured."""
    import subprocess

    from dpukit.evaluate import render_eval
    from dpukit.report import Section

    calls = {"measured": 0, "outside": 0}

    def measures_itself(ctx):
        def measure():
            calls["measured"] += 1
            return {"qps": 1234.5 + calls["measured"]}
        got = ctx.measured("load", measure)
        return Section("measures itself").table(["qps"], [[got["qps"]]], caption=f"caption {CAPTION[0]}")

    def runs_outside(ctx):
        out = subprocess.run([str(core_tool), "dpu-speed"], capture_output=True, text=True, check=True)
        calls["outside"] += 1
        return Section("outside").paragraph(f"tool said {json.loads(out.stdout)['name']} ({calls['outside']})")

    CAPTION = ["one"]
    exps = [experiments.Experiment("probe.self", "t", "d", ("dpukit-core",), measures_itself),
            experiments.Experiment("probe.outside", "t", "d", ("dpukit-core",), runs_outside)]
    monkeypatch.setattr(experiments, "registry", lambda: {e.name: e for e in exps})
    run_dir = _probe_eval(tmp_path, exps)
    first = (run_dir / "report.md").read_text()
    assert "| 1,235.5 |" in first or "| 1235.5 |" in first, first
    assert "tool said host (1)" in first

    CAPTION[0] = "two"  # a caption changed after the eval: a rebuild shows it
    lines = []
    render_eval(run_dir, progress=lines.append)
    again = (run_dir / "report.md").read_text()
    assert calls == {"measured": 1, "outside": 1}  # nothing measured or run again
    assert "caption two" in again and ("| 1,235.5 |" in again or "| 1235.5 |" in again)
    assert "tool said host (1)" in again  # kept as written
    assert any("probe.outside: kept as written" in ln and "outside ctx.run_native" in ln for ln in lines), lines
    assert again == first.replace("caption one", "caption two")


def test_render_refuses_a_directory_that_is_not_an_eval(tmp_path, run_dpukit):
    proc = run_dpukit("eval", "--render", str(tmp_path))
    assert proc.returncode == 1 and "not an eval's result directory" in proc.stderr, proc.stderr
    for args, why in ((["--compare", str(tmp_path)], "--compare needs --render"),
                      (["--render", str(tmp_path), "--only", "core"], "cannot be given with it")):
        proc = run_dpukit("eval", *args)
        assert proc.returncode == 2 and why in proc.stderr, proc.stderr


def test_compare_puts_two_evals_side_by_side(core_tool, tmp_path, monkeypatch):
    """--compare: a table with the same columns in both evals is one table,
    its first column naming each eval by its dpu speed."""
    from dpukit.compare import compare_evals
    from dpukit.report import Section

    def speed_table(ctx):
        return Section("speeds").table(["what", "factor"], [["dpu", ctx.dpu.factor]], caption="speed")

    exps = [experiments.Experiment("probe.speed", "t", "d", ("dpukit-core",), speed_table)]
    monkeypatch.setattr(experiments, "registry", lambda: {e.name: e for e in exps})
    a = _probe_eval(tmp_path / "a", exps, "host")
    b = _probe_eval(tmp_path / "b", exps, "bluefield3")
    md, html = compare_evals(a, b)
    text = md.read_text()
    assert md.parent == a / f"compare-{b.name}" and html.is_file()
    assert "| eval | what | factor |" in text
    assert "| host | dpu | 1 |" in text and "| bluefield3 | dpu | 0.455 |" in text, text


def test_a_section_whose_rebuild_fails_is_kept_and_the_others_are_rebuilt(core_tool, tmp_path, monkeypatch):
    """One experiment's rebuild raising (here: a file it read is gone) keeps
    its section as written and says why; the experiments after it are still
    rebuilt."""
    from dpukit.evaluate import render_eval
    from dpukit.report import Section

    scratch = tmp_path / "dump.txt"
    scratch.write_text("42")
    title = ["before"]

    def reads_a_dump(ctx):
        return Section("dump").paragraph(f"read {scratch.read_text()}")

    def plain(ctx):
        return Section("plain").paragraph(f"title {title[0]}")

    exps = [experiments.Experiment("probe.dump", "t", "d", ("dpukit-core",), reads_a_dump),
            experiments.Experiment("probe.plain", "t", "d", ("dpukit-core",), plain)]
    monkeypatch.setattr(experiments, "registry", lambda: {e.name: e for e in exps})
    run_dir = _probe_eval(tmp_path / "out", exps)
    scratch.unlink()
    title[0] = "after"
    lines = []
    render_eval(run_dir, progress=lines.append)
    md = (run_dir / "report.md").read_text()
    assert "read 42" in md and "title after" in md
    assert any("probe.dump: kept as written (its rebuild failed: FileNotFoundError" in ln for ln in lines), lines
