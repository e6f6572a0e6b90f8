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

    runs = sorted((run_dir / "runs").glob("*.json"))
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
    assert tool_saw == {"name": "bluefield3", "factor": speed.factor} and 0 < speed.factor < 1
    assert ctx_dpu == speed
    assert f"DPU speed: bluefield3 (F = {speed.factor:g}" in outcome.report_md.read_text()
    assert ENV not in os.environ


def test_eval_refuses_a_dpu_speed_the_model_does_not_know(core_tool, run_dpukit, tmp_path):
    for bad, why in (("bluefield9", "not a preset"), ("1.5", "must be in (0, 1]"), ("0", "must be in (0, 1]")):
        proc = run_dpukit("eval", "--dpu", bad, "--only", "core.ring", "--out", str(tmp_path / "r"))
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "--dpu" in proc.stderr and why in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()  # nothing written for a refused speed
