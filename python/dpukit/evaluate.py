"""``dpukit eval``: run the registered experiments and write the report.

Layout of one evaluation::

    <out>/<UTC timestamp>/report.md
                         /report.html
                         /plots/*.png
                         /runs/*.json      every native result, as the tool wrote it
    <out>/latest -> <UTC timestamp>        replaced atomically after a complete run
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from dpukit import __version__
from dpukit.dpu_speed import DpuSpeed, dpu_speed_environment
from dpukit.errors import DpukitError
from dpukit import experiments as registered_experiments
from dpukit.experiments import Context, Experiment, NotRebuildable
from dpukit.paths import display_path, repo_root, tool_path
from dpukit.report import Report, Section, section_from_json, section_to_json
from dpukit.summary import summary_blocks


@dataclass
class Outcome:
    directory: Path
    report_md: Path
    report_html: Path
    failed: str | None  # experiment name that failed, if any
    error: DpukitError | None


def make_run_dir(parent: Path, now: datetime | None = None) -> Path:
    """Create ``parent/<YYYYmmddTHHMMSSZ>`` (with a ``-N`` suffix if taken)."""
    now = now or datetime.now(timezone.utc)
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(0, 1000):
        d = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise DpukitError(f"cannot create a result directory under {parent}")


def point_latest(parent: Path, target: Path) -> Path:
    """Make ``parent/latest`` a relative symlink to ``target``, replacing it atomically."""
    link = parent / "latest"
    if link.exists() and not link.is_symlink():
        raise DpukitError(f"{link} exists and is not a symlink; move it away")
    tmp = parent / f".latest.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(target, parent), tmp)
    os.replace(tmp, link)
    return link


def source_revision() -> str | None:
    """``<commit>`` (``+dirty`` with local changes) of the repository, if it is a git checkout."""
    root = repo_root()
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return sha.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def check_tools(experiments: Sequence[Experiment]) -> None:
    """Fail before creating anything if a native tool is missing."""
    seen = set()
    for e in experiments:
        for tool in e.tools:
            if tool not in seen:
                seen.add(tool)
                tool_path(tool)  # raises ToolNotFound with the how-to-build hint


def run_eval(
    experiments: Sequence[Experiment],
    *,
    quick: bool,
    out_parent: Path,
    argv: Sequence[str],
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    dpu: DpuSpeed | None = None,
) -> Outcome:
    check_tools(experiments)
    dpu = dpu or DpuSpeed("host", 1.0)
    with dpu_speed_environment(dpu):
        return _run_eval(experiments, quick=quick, out_parent=out_parent, argv=argv, progress=progress, dpu=dpu)


def _run_eval(
    experiments: Sequence[Experiment],
    *,
    quick: bool,
    out_parent: Path,
    argv: Sequence[str],
    progress: Callable[[str], None],
    dpu: DpuSpeed,
) -> Outcome:
    out_parent = out_parent.resolve()
    run_dir = make_run_dir(out_parent)
    (run_dir / "runs").mkdir()
    (run_dir / "plots").mkdir()
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    progress(f"[eval] {len(experiments)} experiment(s), {'quick' if quick else 'full'} mode, "
             f"dpu speed {dpu.name}, writing {display_path(run_dir)}")

    sections: list[Section] = []
    entries: list[dict] = []
    all_runs: list[dict] = []
    failed: str | None = None
    error: DpukitError | None = None
    for i, exp in enumerate(experiments, 1):
        ctx = Context(name=exp.name, quick=quick, out_dir=run_dir, report_progress=progress,
                      index=i, total=len(experiments), dpu=dpu)
        try:
            section = exp.run(ctx)
        except DpukitError as e:
            failed, error = exp.name, e
            all_runs += ctx.runs
            sec = Section(f"{exp.name}: FAILED")
            later = len(experiments) - i
            sec.paragraph(f"This experiment failed after {ctx.elapsed():.1f} s"
                          + (f"; the {later} experiment(s) after it were not run." if later else "."))
            sec.code(str(e))
            sec.add_runs(ctx.runs)
            sections.append(sec)
            entries.append(_entry(exp, ctx, sec, "FAILED"))
            progress(f"[eval {i}/{len(experiments)}] {exp.name}: FAILED after {ctx.elapsed():.1f}s")
            break
        all_runs += ctx.runs
        section.add_runs(ctx.runs)
        sections.append(section)
        entries.append(_entry(exp, ctx, section, "ok"))
        progress(f"[eval {i}/{len(experiments)}] {exp.name}: done, {len(ctx.runs)} runs in {ctx.elapsed():.1f}s")

    meta = {
        "schema": META_SCHEMA,
        "argv": list(argv),
        "quick": quick,
        "started_utc": started.isoformat(),
        "wall_s": time.monotonic() - t0,
        "source": source_revision(),
        "dpu": {"name": dpu.name, "factor": dpu.factor},
        "machine": all_runs[0]["machine"] if all_runs else None,
        "backends": sorted({r["backend"] for r in all_runs}),
        "experiments": entries,
    }
    _write_json(run_dir / "runs" / META, meta)
    md, html = build_report(meta, sections).write(run_dir)
    if failed is None:
        point_latest(out_parent, run_dir)
    progress(f"[eval] {'done' if failed is None else 'FAILED'} in {meta['wall_s']:.1f}s: {display_path(md)}")
    return Outcome(run_dir, md, html, failed, error)


# The eval's record beside the native runs: what a rebuild needs that the runs
# do not hold (the command, mode, speed, timings, values experiments measured
# themselves, and each section as written).
META = "eval.meta.json"
META_SCHEMA = "dpukit.eval/1"


def _entry(exp: Experiment, ctx: Context, section: Section, status: str) -> dict:
    return {"name": exp.name, "description": exp.description, "status": status, "runs": len(ctx.runs),
            "seconds": ctx.elapsed(), "records": ctx.records, "findings": ctx.findings, "skipped": ctx.skipped,
            "section": section_to_json(section)}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def build_report(meta: dict, sections: Sequence[Section]) -> Report:
    """The report of one eval from its record and its sections: the same
    bytes whether the sections were just measured or rebuilt."""
    quick = meta["quick"]
    started = datetime.fromisoformat(meta["started_utc"])
    summary = [[e["name"], e["description"], str(e["runs"]), f"{e['seconds']:.1f}", e["status"]]
               for e in meta["experiments"]]
    failed = next((e["name"] for e in meta["experiments"] if e["status"] != "ok"), None)
    dpu = DpuSpeed(meta["dpu"]["name"], meta["dpu"]["factor"])
    report = Report("dpukit evaluation")
    intro = Section("", summary_blocks(meta, [s.title for s in sections]))
    intro.paragraph(
        f"Generated {started.strftime('%Y-%m-%d %H:%M:%S')} UTC by dpukit {__version__} in "
        f"{'quick' if quick else 'full'} mode ({meta['wall_s']:.1f} s): `{shlex.join(['dpukit', *meta['argv']])}`.")
    if meta["source"]:
        intro.paragraph(f"Source: git {meta['source']}.")
    m = meta["machine"]
    if m:
        intro.paragraph(
            f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['arch']}, {m['kernel']}"
            + (f", host {m['hostname']}" if m.get("hostname") else "")
            + f". Backend: {', '.join(meta['backends'])}.")
    intro.paragraph(f"DPU speed: {dpu.describe()}.")
    intro.paragraph(
        "Every number below comes from a native tool run whose raw JSON result is in `runs/`; "
        "each section lists the exact command lines, so any figure can be reproduced.")
    if failed:
        intro.paragraph(f"INCOMPLETE: experiment `{failed}` failed; see its section.")
    intro.table(["experiment", "what", "runs", "seconds", "status"], summary, caption="Experiments")
    report.intro = intro.blocks
    report.sections = list(sections)
    return report


def read_meta(run_dir: Path) -> dict:
    path = run_dir / "runs" / META
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DpukitError(f"{display_path(run_dir)} is not an eval's result directory: no runs/{META} "
                          "(evals before this version cannot be rebuilt)") from None
    except (OSError, ValueError) as e:
        raise DpukitError(f"cannot read {display_path(path)}: {e}") from None
    if meta.get("schema") != META_SCHEMA:
        raise DpukitError(f"{display_path(path)}: not of schema {META_SCHEMA}")
    return meta


@contextlib.contextmanager
def _no_processes(name: str):
    """While a section is rebuilt nothing may run: an experiment that starts a
    process outside ctx.run_native measured something the record lacks."""
    real = subprocess.Popen

    def refuse(*args, **kwargs):
        raise NotRebuildable(f"{name}: runs a process outside ctx.run_native ({args[0] if args else kwargs})")

    subprocess.Popen = refuse  # type: ignore[misc]
    try:
        yield
    finally:
        subprocess.Popen = real  # type: ignore[misc]


def rebuild_sections(run_dir: Path, meta: dict, *, plots_into: Path | None = None,
                     progress: Callable[[str], None] = lambda line: None) -> list[Section]:
    """Each experiment's section drawn again from the record (runs and
    measured values) without running anything; plots go to
    ``plots_into/plots`` (default: the eval's own directory). A section that
    cannot be rebuilt (failed, unknown experiment, or measured outside the
    record) is kept as written. Each rebuilt experiment's findings (the
    summary's figures) replace those in ``meta``'s entry; a section kept as
    written keeps the findings the eval recorded."""
    registered = registered_experiments.registry()
    dpu = DpuSpeed(meta["dpu"]["name"], meta["dpu"]["factor"])
    sections = []
    for i, entry in enumerate(meta["experiments"], 1):
        name = entry["name"]
        exp = registered.get(name)
        if entry["status"] != "ok" or exp is None:
            why = "it failed" if entry["status"] != "ok" else "no experiment of that name here"
            progress(f"[render {i}/{len(meta['experiments'])}] {name}: kept as written ({why})")
            sections.append(section_from_json(entry["section"]))
            continue
        ctx = Context(name=name, quick=meta["quick"], out_dir=plots_into or run_dir, index=i,
                      total=len(meta["experiments"]), dpu=dpu, replay=True, runs_from=run_dir / "runs",
                      records=entry["records"])
        try:
            with dpu_speed_environment(dpu), _no_processes(name):
                section = exp.run(ctx)
            section.add_runs(ctx.runs)
            entry.update(findings=ctx.findings, skipped=ctx.skipped)
            progress(f"[render {i}/{len(meta['experiments'])}] {name}: rebuilt from {len(ctx.runs)} runs")
        except NotRebuildable as e:
            progress(f"[render {i}/{len(meta['experiments'])}] {name}: kept as written ({e})")
            section = section_from_json(entry["section"])
        except Exception as e:  # noqa: BLE001 - one experiment's rebuild must not lose the others'
            progress(f"[render {i}/{len(meta['experiments'])}] {name}: kept as written (its rebuild failed: "
                     f"{type(e).__name__}: {e})")
            section = section_from_json(entry["section"])
        sections.append(section)
    return sections


def render_eval(run_dir: Path, *, progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr,
                                                                                          flush=True)) -> Outcome:
    """``dpukit eval --render DIR``: report.md, report.html and the plots of
    an eval written again from its ``runs/``, nothing measured."""
    run_dir = run_dir.resolve()
    meta = read_meta(run_dir)
    sections = rebuild_sections(run_dir, meta, progress=progress)
    md, html = build_report(meta, sections).write(run_dir)
    failed = next((e["name"] for e in meta["experiments"] if e["status"] != "ok"), None)
    progress(f"[render] done: {display_path(md)}")
    return Outcome(run_dir, md, html, failed, None)
