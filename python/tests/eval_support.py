"""Checks that ``dpukit eval --render`` rebuilds an experiment's report from
its kept runs: byte for byte, and from the runs (a changed figure shows).
Shared by the eval tests of the mesh experiments."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable


def rebuilt_byte_for_byte(run_dir: Path, run_dpukit: Callable, name: str) -> None:
    """`dpukit eval --render RUN_DIR` draws experiment NAME's section again
    from runs/ (not kept as written) and writes report.md, report.html and
    the plots byte for byte as the eval did, running nothing."""
    outputs = [run_dir / "report.md", run_dir / "report.html", *sorted((run_dir / "plots").glob("*.png"))]
    written = {p: p.read_bytes() for p in outputs}
    for p in outputs:
        p.unlink()
    runs = {p: p.read_bytes() for p in (run_dir / "runs").iterdir()}
    proc = run_dpukit("eval", "--render", str(run_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(rf"\] {re.escape(name)}: rebuilt from \d+ runs", proc.stderr), proc.stderr
    assert {p: p.read_bytes() for p in (run_dir / "runs").iterdir()} == runs  # nothing ran
    for p, data in written.items():
        assert p.read_bytes() == data, p


def set_figure(run: Path, key: str, value: float) -> None:
    """Change one figure of a kept run (to see that a rebuild reads it)."""
    record = json.loads(run.read_text())
    record["figures"][key] = value
    run.write_text(json.dumps(record, indent=1) + "\n")


def rendered_with_figure(run_dir: Path, run_dpukit: Callable, run_glob: str, key: str, value: float) -> str:
    """report.md as `dpukit eval --render` writes it after figure ``key`` of
    the one kept run matching ``run_glob`` was set to ``value`` (to see that
    a rebuild reads the runs)."""
    [run] = (run_dir / "runs").glob(run_glob)
    set_figure(run, key, value)
    proc = run_dpukit("eval", "--render", str(run_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (run_dir / "report.md").read_text()
