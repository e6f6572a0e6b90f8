"""Report paragraphs that several systems' experiments share: how often each
point ran, where the runs ran, and the parameters a tool recorded."""

from __future__ import annotations

from typing import Any, Sequence

from dpukit.experiments import Context


def _median_row(key: str) -> str:
    return f"each row shows the run with the median `{key}`, so all figures in a row come from one run."


def repeats_note(repeats: int, key: str) -> str:
    return f"Each point was run {repeats} times; " + _median_row(key)


def mode_repeats_note(ctx: Context, key: str) -> str:
    """How often each point ran in ``ctx``'s mode (once in quick mode)."""
    if ctx.repeats == 1:
        return "Quick mode: each point was run once."
    return f"Full mode: each point was run {ctx.repeats} times; " + _median_row(key)


def placement_note(runs: Sequence[dict[str, Any]]) -> str:
    """Where the runs ran: machine, backend, CPU placement (each distinct one once)."""
    if not runs:
        return ""
    m = runs[0]["machine"]
    seen: list[str] = []
    for r in runs:
        p = r["placement"]
        text = f"host CPUs {p['host_cpus'] or '-'}, dpu CPUs {p['dpu_cpus'] or '-'}, hw CPUs {p['hw_cpus'] or '-'}"
        if p.get("note"):
            text += f" ({p['note']})"
        if text not in seen:
            seen.append(text)
    backends = sorted({r["backend"] for r in runs})
    return (f"Backend: {', '.join(backends)}; {runs[0]['tool'].split()[0]} {runs[0]['version']} on "
            f"{m['cpu_model']} ({m['cores']} cores, {m['arch']}, {m['kernel']}). "
            f"Placement: {'; '.join(seen)}.")


def parameters_note(run: dict[str, Any], skip: Sequence[str] = ()) -> str:
    """The tool's own record of its parameters (shows the defaults it used)."""
    params = {k: v for k, v in run.get("parameters", {}).items() if k not in skip}
    if not params:
        return ""
    return "Parameters as recorded by the tool (first point): " + ", ".join(
        f"`{k}={v}`" for k, v in params.items()) + "."
