"""PNG plots for reports — lines, grouped bars and panels of either (matplotlib, Agg backend, no pyplot state)."""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from dpukit.units import fmt_sig  # noqa: E402


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
    set_x_axis(ax, logx=logx, xticks=xticks, xtick_format=xtick_format)
    if logy:
        ax.set_yscale("log")
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


def set_x_axis(ax: Any, *, logx: bool = False, xticks: Sequence[float] | None = None,
               xtick_format: Callable[[float], str] | None = None) -> None:
    """A log x axis (base 2 when ``xticks`` are given: callers give doublings)
    and ticks exactly at ``xticks``, labelled by ``xtick_format``."""
    if logx:
        ax.set_xscale("log", base=2 if xticks is not None else 10)
    if xticks is not None:
        ax.set_xticks(list(xticks))
        ax.xaxis.set_minor_formatter(NullFormatter())
        fmt = xtick_format or (lambda v: f"{v:g}")
        ax.set_xticklabels([fmt(v) for v in xticks])


def all_positive(values: Sequence[float]) -> bool:
    """True if there is a value and every value (None and NaN aside) is > 0: a log axis can show them."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return bool(vals) and all(v > 0 for v in vals)


@dataclass
class BarPanel:
    title: str
    ylabel: str
    values: dict[str, Sequence[float]]  # group label -> one value per category
    logy: bool = False
    annotate: bool = True
    fmt: Any = None  # value -> label text
    refline: tuple[float, str] | None = None  # a dashed horizontal line (value, legend label)


def panel_grid(n: int, ncols: int, panel_width: float, panel_height: float, extra_height: float) -> tuple[Figure, list]:
    """A figure of ``n`` subplots in rows of at most ``ncols`` (the unused
    cells of the last row hidden): the figure and the ``n`` axes, in order."""
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(panel_width * ncols, panel_height * nrows + extra_height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def save_panels(fig: Figure, path: str | Path, *, title: str, handles: dict[str, Any], max_cols: int,
                fontsize: float) -> Path:
    """Finish a :func:`panel_grid` figure: one legend below the panels (when
    there are ``handles``, label -> artist), the title, the PNG."""
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncols=min(len(handles), max_cols), fontsize=fontsize, frameon=False)
    fig.suptitle(title)
    fig.savefig(path, format="png")
    return Path(path)


def bars_plot(path: Path, panels: Sequence[BarPanel], categories: Sequence[str], *, title: str,
              ncols: int = 3, highlight: str | None = None, highlight_color: str = "tab:red") -> Path:
    """Grouped bar subplots: one group of bars per category, one bar per group
    label (one bar per category when there is a single group)."""
    width_in = max(4.2, 0.55 * len(categories) * max(1, len(panels[0].values)) + 1.2)
    fig, axes = panel_grid(len(panels), ncols, width_in, 3.4, 0.6)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    handles: dict[str, Any] = {}
    for p, ax in zip(panels, axes):
        groups = list(p.values)
        w = 0.8 / len(groups)
        for g, name in enumerate(groups):
            xs = [c + (g - (len(groups) - 1) / 2) * w for c in range(len(categories))]
            ys = [float("nan") if v is None else v for v in p.values[name]]
            if len(groups) == 1:
                col = [highlight_color if categories[c] == highlight else "tab:blue"
                       for c in range(len(categories))]
            else:
                col = colors[g % len(colors)]
            bars = ax.bar(xs, [0 if math.isnan(y) else y for y in ys], w * 0.95, label=name, color=col)
            if len(groups) > 1:
                handles.setdefault(name, bars)
            if p.annotate:
                fmt = p.fmt or fmt_sig
                for b, y in zip(bars, ys):
                    if not math.isnan(y):
                        ax.annotate(fmt(y), (b.get_x() + b.get_width() / 2, b.get_height()),
                                    ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                                    textcoords="offset points")
        if p.refline is not None and not math.isnan(p.refline[0]):
            ref = ax.axhline(p.refline[0], color="tab:gray", linestyle="--", linewidth=1.2, label=p.refline[1])
            ax.legend(handles=[ref], fontsize=8, loc="best")
        if p.logy and all_positive([v for vs in p.values.values() for v in vs]):
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 2.5)  # room for the value labels
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories, rotation=30 if len(categories) > 4 else 0, ha="right"
                           if len(categories) > 4 else "center", fontsize=8)
        ax.set_title(p.title + (" (log)" if ax.get_yscale() == "log" else ""), fontsize=10)
        ax.set_ylabel(p.ylabel, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(True, axis="y", alpha=0.35)
        if ax.get_yscale() != "log":
            ax.margins(y=0.12)
    return save_panels(fig, path, title=title, handles=handles, max_cols=len(handles), fontsize=9)


@dataclass
class LinePanel:
    title: str
    series: Sequence[Series]


def line_panels(path: str | Path, panels: Sequence[LinePanel], *, title: str, xlabel: str, ylabel: str,
                ncols: int = 4, xticks: Sequence[float] | None = None, logy: bool = False) -> Path:
    """Small multiples: one line subplot per panel (e.g. one per operator),
    the series' labels in one legend below."""
    fig, axes = panel_grid(len(panels), ncols, 3.3, 2.6, 0.7)
    handles: dict[str, Any] = {}
    for p, ax in zip(panels, axes):
        for s in p.series:
            (line,) = ax.plot(list(s.x), list(s.y), s.style, label=s.label, linewidth=1.3, markersize=3.5)
            handles.setdefault(s.label, line)
        if logy and all_positive([v for s in p.series for v in s.y]):
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        if xticks is not None:
            ax.set_xticks(list(xticks))
        ax.set_title(p.title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.35)
    return save_panels(fig, path, title=title, handles=handles, max_cols=6, fontsize=8)


@dataclass
class Line:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: dict[str, Any] = field(default_factory=dict)  # keyword arguments of Axes.plot


@dataclass
class Panel:
    title: str
    ylabel: str
    lines: list[Line]
    logy: bool = False
    ymin_zero: bool = False
    ylim: tuple[float, float] | None = None
    yfmt: Any = None  # value -> tick label


def panels_plot(path: Path, panels: Sequence[Panel], *, title: str, xlabel: str, logx: bool = False,
                xticks: Sequence[float] | None = None, xtick_format=None, ncols: int = 3) -> Path:
    """Line subplots sharing an x axis and one legend (below the panels)."""
    fig, axes = panel_grid(len(panels), ncols, 4.2, 3.3, 0.9)
    handles: dict[str, Any] = {}
    for p, ax in zip(panels, axes):
        for ln in p.lines:
            (h,) = ax.plot(list(ln.x), list(ln.y), label=ln.label, **ln.style)
            handles.setdefault(ln.label, h)
        set_x_axis(ax, logx=logx, xticks=xticks, xtick_format=xtick_format)
        ys = [v for ln in p.lines for v in ln.y if v is not None and not math.isnan(v)]
        if p.logy and all_positive(ys):
            ax.set_yscale("log")
        elif p.logy and ys and min(ys) >= 0 and max(ys) > 0:
            # Some values are exactly 0: linear near 0, logarithmic above the smallest positive value.
            ax.set_yscale("symlog", linthresh=min(v for v in ys if v > 0))
            ax.set_ylim(bottom=0)
        elif p.ymin_zero:
            ax.set_ylim(bottom=0)
        if p.ylim is not None:
            ax.set_ylim(*p.ylim)
        if p.yfmt is not None:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos, f=p.yfmt: f(v)))
        scale = ax.get_yscale()
        ax.set_title(p.title + {"log": " (log)", "symlog": " (log above the smallest non-zero)"}.get(scale, ""),
                     fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel(p.ylabel, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(True, which="major", alpha=0.35)
    # A single line needs no legend.
    return save_panels(fig, path, title=title, handles=handles if len(handles) > 1 else {}, max_cols=4,
                       fontsize=9)
