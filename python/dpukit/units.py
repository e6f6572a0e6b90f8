"""Number formatting for report tables and plot labels."""

from __future__ import annotations

import math


def fmt_int(n: float) -> str:
    """12345678 -> '12,345,678'."""
    return f"{int(round(n)):,}"


def fmt_sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, never in exponent form."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    if mag >= digits - 1:
        return f"{round(x, -(mag - digits + 1)):,.0f}"
    return f"{x:.{digits - 1 - mag}f}"


def fmt_bytes(n: int) -> str:
    """64 -> '64 B', 16384 -> '16 KiB', 1048576 -> '1 MiB' (exact binary units only)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def fmt_bytes_short(n: float) -> str:
    """Plot tick labels: 64, 1K, 16K, 1M."""
    n = int(n)
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def fmt_thousands(x: float) -> str:
    """Axis labels: 0, 500, 20k, 1.5M."""
    if abs(x) >= 1e6:
        return f"{x / 1e6:g}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:g}k"
    return f"{x:g}"


def per(total: float, count: float) -> float:
    """total / count, NaN when count is 0."""
    return total / count if count else float("nan")
