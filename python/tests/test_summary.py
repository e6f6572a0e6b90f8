"""The report's opening summary (dpukit.summary): the papers' claims beside
the eval's figures, from its runs; rebuilt byte for byte by `--render`; two
evals side by side with `--compare`; report.html checked in headless
Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpukit import experiments, summary
from dpukit.report import Section
from browser_support import check_page

RING = ["ring-bench", "--messages", 20000, "--batch", 8]


def _ring_probe(name: str, claim: str):
    """An experiment named after a real source of ``claim``: one native run,
    its figure (Mmsg/s) recorded as the claim's finding, and a plot."""
    def run(ctx):
        r = ctx.run_native("dpukit-core", RING, label="ring")
        mmps = r["figures"]["messages_per_sec"] / 1e6
        ctx.finding(claim, mmps, ctx.dpu, "ring messages per second")  # the ring has no dpu loop to slow
        path, rel = ctx.plot_path("ring")
        from PIL import Image
        Image.new("RGB", (40, 20), (30, 90, 200)).save(path)
        return Section(f"{name}: probe").paragraph(f"{mmps:.3f} M/s").image(rel, "a plot")
    return experiments.Experiment(name, "t", "d", ("dpukit-core",), run)


def _skips(ctx):
    sec = Section("kv.stall: probe")
    experiments.skipped_in_quick_mode(ctx, sec, "kv.stall", " (4 GB per run)")
    return sec


@pytest.fixture
def probes(monkeypatch):
    exps = [_ring_probe("kv.bluefield", "pulsedb.throughput"), _ring_probe("mesh.quick", "flatproxy.qps"),
            experiments.Experiment("kv.stall", "t", "d", ("dpukit-core",), _skips)]
    monkeypatch.setattr(experiments, "registry", lambda: {e.name: e for e in exps})
    return exps


def _eval(out: Path, exps, dpu: str = "host") -> Path:
    from dpukit.dpu_speed import resolve_dpu_speed
    from dpukit.evaluate import run_eval

    outcome = run_eval(exps, quick=True, out_parent=out, argv=["eval", "--quick", "--dpu", dpu],
                       progress=lambda line: None, dpu=resolve_dpu_speed(dpu))
    assert outcome.error is None
    return outcome.directory


def _row(md: str, words: str) -> list[str]:
    [line] = [ln for ln in md.splitlines() if ln.startswith("| ") and words in ln]
    return [c.strip() for c in line.strip("|").split(" | ")]


def _ring_mmps(run_dir: Path, probe: str) -> float:
    [run] = (run_dir / "runs").glob(f"{probe}-*-ring.json")
    return json.loads(run.read_text())["figures"]["messages_per_sec"] / 1e6


def test_report_opens_with_the_claims_and_their_figures_from_the_runs(core_tool, tmp_path, probes):
    run_dir = _eval(tmp_path, probes)
    md = (run_dir / "report.md").read_text()
    lines = md.splitlines()
    assert lines[0] == "# dpukit evaluation"
    assert lines[2] == "**The papers' headline claims and this eval's figures**"  # the first block: the table
    assert lines[4].startswith("| paper | the paper's claim |")
    claim = summary.BY_KEY["pulsedb.throughput"]
    row = _row(md, claim.words)
    value = _ring_mmps(run_dir, "kv.bluefield")
    assert row[3] == f"{claim.fmt(value)} (ring messages per second)", row
    assert row[4] == "not measured in this run"
    assert row[5] == f"{claim.verdict(value)} at full speed"
    assert row[6] == "[kv.bluefield](<#kv-bluefield-probe>)"
    assert '<a id="kv-bluefield-probe"></a>' in md
    # What it could not show, and why: not run, skipped in quick mode, and a source that ran but has no figure.
    assert "- Duet, packet rate ≈ 28.9× traditional sketches, at either speed: `measure.bluefield` and " \
           "`measure.throughput` were not run in this eval." in md
    p99 = next(ln for ln in lines if ln.startswith("- PulseDB, P99 write latency −29 %, at either speed"))
    assert "`kv.modes` was not run in this eval" in p99
    assert "`kv.stall` was skipped in quick mode (4 GB per run)" in p99
    assert "`kv.bluefield` recorded no figure at this speed" in p99
    meta = json.loads((run_dir / "runs" / "eval.meta.json").read_text())
    stall = next(e for e in meta["experiments"] if e["name"] == "kv.stall")
    assert stall["skipped"] == "skipped in quick mode (4 GB per run)" and stall["findings"] == []


def test_render_rebuilds_the_summary_byte_for_byte_and_from_the_runs(core_tool, tmp_path, probes, run_dpukit):
    from dpukit.evaluate import render_eval

    run_dir = _eval(tmp_path, probes)
    written = {p: p.read_bytes() for p in (run_dir / "report.md", run_dir / "report.html")}
    for _ in range(2):  # rendered twice: the eval's own bytes each time
        for p in written:
            p.unlink()
        render_eval(run_dir, progress=lambda line: None)
        assert {p: p.read_bytes() for p in written} == written
    # A figure in a run changes the summary: it is computed from the runs, not kept as text.
    [run] = (run_dir / "runs").glob("mesh.quick-*-ring.json")
    record = json.loads(run.read_text())
    record["figures"]["messages_per_sec"] = 123.456e6
    run.write_text(json.dumps(record))
    render_eval(run_dir, progress=lambda line: None)
    md = (run_dir / "report.md").read_text()
    assert _row(md, summary.BY_KEY["flatproxy.qps"].words)[3] == "123× (ring messages per second)"
    assert _row(md, summary.BY_KEY["flatproxy.qps"].words)[5] == "met at full speed"


def test_compare_shows_both_summaries_side_by_side(core_tool, tmp_path, probes):
    from dpukit.compare import compare_evals

    a = _eval(tmp_path / "a", probes, "host")
    b = _eval(tmp_path / "b", probes, "bluefield3")
    md, _ = compare_evals(a, b)
    text = md.read_text()
    assert text.splitlines()[2] == "**The papers' headline claims and each eval's figures**"
    claim = summary.BY_KEY["pulsedb.throughput"]
    row = _row(text, claim.words)
    assert row[:2] == [claim.paper, claim.words]
    assert row[2] == f"{claim.fmt(_ring_mmps(a, 'kv.bluefield'))} (ring messages per second)"
    assert row[3] == "not measured in this run"
    assert row[5] == "not measured in this run"
    assert row[6] == f"{claim.fmt(_ring_mmps(b, 'kv.bluefield'))} at bluefield3 (ring messages per second)"
    assert row[7].endswith("at BlueField speed")
    assert row[8] == "[kv.bluefield](<#kv-bluefield-probe>)"
    assert '<a id="kv-bluefield-probe"></a>' in text


def test_verdicts_and_the_first_source_that_measured():
    c = summary.BY_KEY["pulsedb.throughput"]
    assert [c.verdict(v) for v in (90, 82, 50, 10)] == [
        "met", "met", "in the paper's range (+22 % to +82 %), short of its headline", "missed"]
    cpu = summary.BY_KEY["pulsedb.cpu"]
    assert [cpu.verdict(v) for v in (-50, -20, 5)] == [
        "met", "in the paper's range (-12 % to -42 %), short of its headline", "missed"]
    rxp = summary.BY_KEY["dpubench.rxp_match"]
    assert [rxp.verdict(v) for v in (1.7, 3.0, 1.2)] == ["met", "met (above the paper's 1.5–2×)", "missed"]
    slower = summary.BY_KEY["dpubench.slower"]
    assert [slower.verdict(v) for v in (50.0, 62.5)] == ["missed", "met"]  # "the majority": more than half

    def finding(claim, value, factor, name):
        return {"claim": claim, "value": value, "detail": "d", "dpu": {"name": name, "factor": factor}}

    meta = {"experiments": [
        {"name": "kv.modes", "status": "ok", "findings": [finding("pulsedb.throughput", 10.0, 1.0, "host")]},
        {"name": "kv.bluefield", "status": "ok", "findings": [
            finding("pulsedb.throughput", 30.0, 1.0, "host"), finding("pulsedb.throughput", 40.0, 0.455, "bluefield3")]},
        {"name": "mesh.quick", "status": "FAILED", "findings": []},
        {"name": "mesh.bluefield", "status": "ok", "findings": [finding("flatproxy.qps", 2.0, None, "bluefield3")]},
    ]}
    rows = {r.claim.key: r for r in summary.rows(meta)}
    r = rows["pulsedb.throughput"]
    assert (r.cells["full"].source, r.cells["full"].finding["value"]) == ("kv.modes", 10.0)  # the preferred source
    assert (r.cells["bluefield"].source, r.cells["bluefield"].finding["value"]) == ("kv.bluefield", 40.0)
    assert r.verdict() == "missed at full speed; in the paper's range (+22 % to +82 %), short of its headline " \
                          "at BlueField speed"
    q = rows["flatproxy.qps"]  # a preset's factor unknown to the experiment: a BlueField speed by its name
    assert q.cells["full"].finding is None and q.cells["full"].why == "`mesh.quick` failed; `mesh.bluefield` recorded no figure at this speed"
    assert q.cells["bluefield"].text(q.claim) == "2.00× at bluefield3 (d)"


def _broken_copies(run_dir: Path) -> dict[str, Path]:
    """The report three times broken: an image that does not decode, a
    link to no section, and a script that logs an error."""
    html = (run_dir / "report.html").read_text()
    [img] = re.findall(r'<img src="([^"]+)"', html)[:1]
    out = {}
    (run_dir / "plots" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot an image")
    out["image"] = html.replace(f'src="{img}"', 'src="plots/broken.png"', 1)
    out["link"] = html.replace('<section id="kv-bluefield-probe">', '<section id="renamed">', 1)
    out["console"] = html.replace("</body>", "<script>console.error('probe: broken');</script></body>", 1)
    paths = {}
    for what, text in out.items():
        assert text != html, what
        paths[what] = run_dir / f"report-{what}.html"
        paths[what].write_text(text)
    return paths


def test_report_html_in_a_browser(core_tool, tmp_path, probes):
    """Every image decodes to a non-zero size, every in-page link resolves,
    and the console shows no error; and each of those breakages is caught."""
    run_dir = _eval(tmp_path, probes)
    page = check_page(run_dir / "report.html", tmp_path)
    assert page.problems() == []
    assert len(page.images) == 2 and all(i["width"] == 40 and i["height"] == 20 for i in page.images)
    hrefs = {a["href"] for a in page.links}
    assert {"#kv-bluefield-probe", "#mesh-quick-probe", "#kv-stall-probe"} <= hrefs  # summary and contents
    broken = _broken_copies(run_dir)
    assert check_page(broken["image"], tmp_path).broken_images == ["plots/broken.png"]
    assert check_page(broken["link"], tmp_path).dangling_links == ["#kv-bluefield-probe"] * 2
    assert any("probe: broken" in e for e in check_page(broken["console"], tmp_path).console_errors)
