"""PNG line plots for reports (matplotlib, Agg backend, no pyplot state)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: str = "o-"


def line_plot(
    path: str | Path,
    series: Sequence[Series],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    xticks: Sequence[float] | None = None,
    xtick_format: Callable[[float], str] | None = None,
    x_format: Callable[[float], str] | None = None,
    y_format: Callable[[float], str] | None = None,
    identity: bool = False,
    ymin_zero: bool = False,
) -> Path:
    """Draw ``series`` as lines and write a PNG to ``path``.

    ``identity`` adds the y = x line (for measured-vs-configured plots).
    ``xticks`` puts ticks exactly at those values (labelled by ``xtick_format``);
    ``x_format`` / ``y_format`` label automatic ticks.
    """
    path = Path(path)
    fig = Figure(figsize=(6.4, 4.0), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for s in series:
        ax.plot(list(s.x), list(s.y), s.style, label=s.label, linewidth=1.6, markersize=5)
    if identity:
        lo = min(min(min(s.x), min(s.y)) for s in series if len(s.x))
        hi = max(max(max(s.x), max(s.y)) for s in series if len(s.x))
        lo = 0 if not (logx or logy) else lo
        ax.plot([lo, hi], [lo, hi], "--", color="grey", linewidth=1, label="y = x")
    if logx:
        ax.set_xscale("log", base=2 if xticks is not None else 10)
    if logy:
        ax.set_yscale("log")
    if xticks is not None:
        ax.set_xticks(list(xticks))
        ax.xaxis.set_minor_formatter(NullFormatter())
        fmt = xtick_format or (lambda v: f"{v:g}")
        ax.set_xticklabels([fmt(v) for v in xticks])
    if x_format is not None and xticks is None:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: x_format(v)))
    if y_format is not None:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: y_format(v)))
    if ymin_zero and not logy:
        ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.35)
    if len(series) > 1 or identity:
        ax.legend()
    fig.savefig(path, format="png")
    return path
