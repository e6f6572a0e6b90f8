"""How busy the machine was with other work around a timing run, sampled
from /proc/stat while nothing of ours runs."""

from __future__ import annotations

import time


def _cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:9]]
    return sum(vals), vals[3] + vals[4]  # total, idle + iowait


def background_busy(seconds: float = 0.5) -> float | None:
    """Fraction of all CPUs busy with other work over ``seconds`` (nothing of
    ours runs meanwhile), or None where /proc/stat cannot be read."""
    try:
        t0, i0 = _cpu_ticks()
        time.sleep(seconds)
        t1, i1 = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, 1.0 - (i1 - i0) / (t1 - t0)) if t1 > t0 else None


def background_note(before: float | None, after: float | None) -> str:
    """What else the machine was doing just before and just after the timed runs."""
    shown = [f"{label} {100 * b:.0f} %" for label, b in (("before", before), ("after", after)) if b is not None]
    if not shown:
        return ""
    text = ("Other work on the machine (all CPUs, sampled from /proc/stat for 0.5 s while nothing of ours ran): "
            + ", ".join(shown) + ".")
    if max(b for b in (before, after) if b is not None) > 0.1:
        text += (" The timing figures below were taken on a busy machine; the dpu and NIC threads are pinned "
                 "and share their CPUs with that work, so expect lower throughput and more drops than on an "
                 "idle machine.")
    return text
