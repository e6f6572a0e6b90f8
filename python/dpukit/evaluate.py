"""``dpukit eval``: run the registered experiments and write the report.

Layout of one evaluation::

    <out>/<UTC timestamp>/report.md
                         /report.html
                         /plots/*.png
                         /runs/*.json      every native result, as the tool wrote it
    <out>/latest -> <UTC timestamp>        replaced atomically after a complete run
"""

from __future__ import annotations

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
from dpukit.experiments import Context, Experiment
from dpukit.paths import display_path, repo_root, tool_path
from dpukit.report import Report, Section


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
    summary: list[list[str]] = []
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
            summary.append([exp.name, exp.description, str(len(ctx.runs)), f"{ctx.elapsed():.1f}", "FAILED"])
            progress(f"[eval {i}/{len(experiments)}] {exp.name}: FAILED after {ctx.elapsed():.1f}s")
            break
        all_runs += ctx.runs
        section.add_runs(ctx.runs)
        sections.append(section)
        summary.append([exp.name, exp.description, str(len(ctx.runs)), f"{ctx.elapsed():.1f}", "ok"])
        progress(f"[eval {i}/{len(experiments)}] {exp.name}: done, {len(ctx.runs)} runs in {ctx.elapsed():.1f}s")

    wall = time.monotonic() - t0
    report = Report("dpukit evaluation")
    intro = Section("")
    intro.paragraph(
        f"Generated {started.strftime('%Y-%m-%d %H:%M:%S')} UTC by dpukit {__version__} in "
        f"{'quick' if quick else 'full'} mode ({wall:.1f} s): `{shlex.join(['dpukit', *argv])}`.")
    rev = source_revision()
    if rev:
        intro.paragraph(f"Source: git {rev}.")
    if all_runs:
        m = all_runs[0]["machine"]
        intro.paragraph(
            f"Machine: {m['cpu_model']}, {m['cores']} cores, {m['arch']}, {m['kernel']}"
            + (f", host {m['hostname']}" if m.get("hostname") else "")
            + f". Backend: {', '.join(sorted({r['backend'] for r in all_runs}))}.")
    intro.paragraph(f"DPU speed: {dpu.describe()}.")
    intro.paragraph(
        "Every number below comes from a native tool run whose raw JSON result is in `runs/`; "
        "each section lists the exact command lines, so any figure can be reproduced.")
    if failed:
        intro.paragraph(f"INCOMPLETE: experiment `{failed}` failed; see its section.")
    intro.table(["experiment", "what", "runs", "seconds", "status"], summary, caption="Experiments")
    report.intro = intro.blocks
    report.sections = sections
    md, html = report.write(run_dir)
    if failed is None:
        point_latest(out_parent, run_dir)
    progress(f"[eval] {'done' if failed is None else 'FAILED'} in {wall:.1f}s: {display_path(md)}")
    return Outcome(run_dir, md, html, failed, error)
