"""The experiment registry and the context an experiment runs in.

An experiment is a named function ``run(ctx) -> Section`` registered with
:func:`experiment`. It runs native tools through ``ctx`` (which saves every
raw result under ``runs/`` and remembers its command line), reports progress
through ``ctx.progress``, draws plots into ``ctx.plot_path(...)`` and returns
the report section with its tables and plots.

Experiment modules are listed in :data:`MODULES`; adding a system's
experiments is one line there.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from dpukit import native
from dpukit.dpu_speed import DpuSpeed
from dpukit.paths import display_path
from dpukit.report import Section

# Modules whose import registers experiments, in report order.
MODULES = ["dpukit.experiments.core", "dpukit.experiments.measure", "dpukit.experiments.measure_soak",
           "dpukit.experiments.kv", "dpukit.experiments.mesh", "dpukit.experiments.mesh_speed",
           "dpukit.experiments.mesh_tls", "dpukit.experiments.mesh_xds", "dpukit.experiments.bench",
           "dpukit.experiments.bench_dpu"]


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    description: str
    tools: tuple[str, ...]
    run: Callable[["Context"], Section]


_REGISTRY: dict[str, Experiment] = {}


def experiment(name: str, *, title: str, description: str, tools: Sequence[str]):
    """Decorator: register ``run(ctx) -> Section`` as experiment ``name``."""

    def deco(fn: Callable[["Context"], Section]) -> Callable[["Context"], Section]:
        if name in _REGISTRY:
            raise ValueError(f"experiment {name!r} registered twice")
        _REGISTRY[name] = Experiment(name, title, description, tuple(tools), fn)
        return fn

    return deco


def registry() -> dict[str, Experiment]:
    """All experiments, in MODULES order (then registration order within a
    module), whichever module a caller happened to import first."""
    for mod in MODULES:
        importlib.import_module(mod)
    rank = {m: i for i, m in enumerate(MODULES)}
    ordered = sorted(enumerate(_REGISTRY.values()),
                     key=lambda ie: (rank.get(ie[1].run.__module__, len(MODULES)), ie[0]))
    return {e.name: e for _, e in ordered}


def select(only: Sequence[str] | None) -> list[Experiment]:
    """The experiments named in ``only`` (a name, or a prefix such as ``core``
    meaning ``core.*``), in registry order; all of them when ``only`` is empty.

    Raises ``KeyError`` naming the first selector that matches nothing.
    """
    exps = registry()
    if not only:
        return list(exps.values())
    chosen: set[str] = set()
    for sel in only:
        hits = [n for n in exps if n == sel or n.startswith(sel + ".")]
        if not hits:
            raise KeyError(sel)
        chosen.update(hits)
    return [e for n, e in exps.items() if n in chosen]


ProgressFn = Callable[[str], None]


class NotRebuildable(BaseException):
    """A report section cannot be rebuilt from the eval's record: the
    experiment needs a run or a value that was not kept (it measured outside
    ``ctx.run_native`` / ``ctx.measured``). Not an Exception, so that an
    experiment's broad ``except Exception`` cannot swallow it."""


@dataclass
class Point:
    """One measured point: every repetition and the one reported (the median)."""

    runs: list[dict[str, Any]]
    median: dict[str, Any]

    @property
    def figures(self) -> dict[str, Any]:
        return self.median["figures"]

    @property
    def cpu_ns(self) -> dict[str, int]:
        return self.median["cpu_ns"]


@dataclass
class Context:
    """What an experiment gets: mode, where to write, progress, native runs."""

    name: str
    quick: bool
    out_dir: Path
    report_progress: ProgressFn = field(default=lambda line: None)
    index: int = 1
    total: int = 1
    timeout: float | None = 900.0
    # The dpu speed of the whole eval (``dpukit eval --dpu``): what tools run
    # at unless an experiment passes its own --dpu-speed.
    dpu: DpuSpeed = field(default_factory=lambda: DpuSpeed("host", 1.0))
    # Rebuilding a report (``dpukit eval --render``): runs are read back from
    # ``runs_from`` in the order the experiment asks for them, and values it
    # measured itself come from ``records``; nothing is run.
    replay: bool = False
    runs_from: Path | None = None
    records: dict[str, Any] = field(default_factory=dict)
    _key_counts: dict[str, int] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    # The figures the report's summary puts beside the papers' claims
    # (dpukit.summary), computed from this experiment's runs; and why it
    # measured nothing, if it skipped itself (quick mode).
    findings: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    started: float = field(default_factory=time.monotonic)
    _seq: int = 0

    @property
    def repeats(self) -> int:
        """Runs per point: 1 in quick mode, 3 (median reported) in full mode."""
        return 1 if self.quick else 3

    @property
    def runs_dir(self) -> Path:
        return self.out_dir / "runs"

    @property
    def plots_dir(self) -> Path:
        return self.out_dir / "plots"

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def progress(self, detail: str, step: int | None = None, steps: int | None = None) -> None:
        """Report ``[eval i/n] name: detail (step/steps) 12.3s``."""
        count = f" ({step}/{steps})" if step is not None and steps is not None else ""
        self.report_progress(
            f"[eval {self.index}/{self.total}] {self.name}: {detail}{count} {self.elapsed():.1f}s"
        )

    def plot_path(self, stem: str) -> tuple[Path, str]:
        """(file to write, path relative to the report) for a PNG plot."""
        self.plots_dir.mkdir(parents=True, exist_ok=True)
        fname = f"{self.name}-{_slug(stem)}.png"
        return self.plots_dir / fname, f"plots/{fname}"

    def run_native(self, tool: str, args: Sequence[Any], *, label: str) -> dict[str, Any]:
        """Run a native tool once; its raw JSON is kept as ``runs/<name>-<label>.json``.
        When rebuilding a report, the run is read back from there instead."""
        self._seq += 1
        name = f"{self.name}-{self._seq:03d}-{_slug(label)}.json"
        if self.replay:
            path = (self.runs_from or self.runs_dir) / name
            if not path.is_file():
                raise NotRebuildable(f"{self.name}: run {name} is not in {display_path(path.parent)}")
            result = native.load_result(path)
        else:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            result = native.run_tool(tool, [str(a) for a in args], json_path=self.runs_dir / name,
                                     timeout=self.timeout)
        self.runs.append(result)
        return result

    def measured(self, key: str, measure: Callable[[], Any]) -> Any:
        """A value the experiment measures itself, not through a native tool
        (a load generator's output, a sampled RSS): kept in the eval's record
        under ``key`` (JSON), so that a rebuild gets it back instead of
        measuring again. Returns the value as the record keeps it."""
        if self.replay:
            if key not in self.records:
                raise NotRebuildable(f"{self.name}: measured value {key!r} is not in the eval's record")
            return self.records[key]
        if key in self.records:
            raise ValueError(f"{self.name}: measured value {key!r} recorded twice")
        value = json.loads(json.dumps(measure()))
        self.records[key] = value
        return value

    def finding(self, claim: str, value: float, at: dict[str, Any] | DpuSpeed | str, detail: str) -> None:
        """One figure for the summary's claim ``claim`` (a key of
        ``dpukit.summary.CLAIMS``), computed from this experiment's runs: the
        summary puts it beside the paper's figure. ``at`` says at which dpu
        speed it was measured: a run of the point (its recorded speed), the
        speed, or a preset's name (whose factor is known here only for host
        and the eval's own speed). ``detail`` says what it is (which runs,
        which baseline). A NaN value (no rate, a zero divisor) is not recorded."""
        if value is None or math.isnan(value):
            return
        if isinstance(at, str):
            known = {"host": 1.0, self.dpu.name: self.dpu.factor}
            speed = {"name": at, "factor": known.get(at)}
        elif isinstance(at, DpuSpeed):
            speed = {"name": at.name, "factor": at.factor}
        else:
            speed = {k: at["placement"]["dpu_speed"][k] for k in ("name", "factor")}
        self.findings.append({"claim": claim, "value": float(value), "detail": detail, "dpu": speed})

    def next_key(self, prefix: str) -> str:
        """``prefix.N``, N counting this experiment's calls with ``prefix``: a
        key for :meth:`measured` where the same measurement repeats, the same
        in an eval and in its rebuild."""
        n = self._key_counts.get(prefix, 0)
        self._key_counts[prefix] = n + 1
        return f"{prefix}.{n}"

    def run_point(
        self,
        tool: str,
        args: Sequence[Any],
        *,
        label: str,
        key: str,
        detail: str,
        step: int,
        steps: int,
        repeats: int | None = None,
    ) -> Point:
        """Measure one point ``repeats`` times (default ``self.repeats``) and
        keep every run; report the run whose ``figures[key]`` is the median
        (so every figure in a row comes from the same run)."""
        if repeats is None:
            repeats = self.repeats
        runs = []
        for rep in range(1, repeats + 1):
            rep_note = f" run {rep}/{repeats}" if repeats > 1 else ""
            self.progress(detail + rep_note, step, steps)
            runs.append(self.run_native(tool, args, label=f"{label}-r{rep}" if repeats > 1 else label))
        return Point(runs, median_run(runs, key))


def skipped_in_quick_mode(ctx: Context, sec: Any, name: str, why: str = "") -> bool:
    """A full-mode-only experiment in quick mode: says so in ``sec`` (a
    report Section) and returns True."""
    if ctx.quick:
        sec.paragraph(f"Skipped in quick mode{why}; `dpukit eval --only {name}`.")
        ctx.skipped = f"skipped in quick mode{why}"
    return ctx.quick


def median_run(runs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The run whose ``figures[key]`` is the median (the lower middle for an even count)."""
    if not runs:
        raise ValueError("no runs")
    ordered = sorted(runs, key=lambda r: r["figures"][key])
    return ordered[(len(ordered) - 1) // 2]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", text).strip("-") or "run"
