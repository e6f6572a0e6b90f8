"""The trace cache of the measure.* experiments: synthetic traces written by
``dpukit-measure gen``, kept under ``<build>/traces/`` (the build directory is
not tracked by git) and reused until the tool is rebuilt."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dpukit.experiments import Context
from dpukit.native import NativeToolFailed
from dpukit.paths import build_dir, display_path, tool_path
from dpukit.units import fmt_int

TOOL = "dpukit-measure"
SEED = 1


@dataclass(frozen=True)
class TraceSpec:
    preset: str
    packets: int
    flows: int
    seed: int = SEED

    @property
    def filename(self) -> str:
        return f"{self.preset}-{self.packets}-{self.flows}-s{self.seed}.pcap"


def trace_spec(preset: str, quick: bool) -> TraceSpec:
    """Quick mode: 200,000 packets over at most 20,000 flows; full: 2,000,000 over 100,000."""
    if quick:
        return TraceSpec(preset, 200_000, 20_000)
    return TraceSpec(preset, 2_000_000, 100_000)


def traces_dir() -> Path:
    return build_dir() / "traces"


def gen_command(spec: TraceSpec, out: Path) -> list[str]:
    return [str(tool_path(TOOL, must_exist=False)), "gen", "--preset", spec.preset,
            "--flows", str(spec.flows), "--packets", str(spec.packets), "--seed", str(spec.seed),
            "--out", str(out)]


@dataclass
class TraceFile:
    spec: TraceSpec
    path: Path
    command: list[str]  # the gen command line that writes exactly this file
    reused: bool        # found in the cache rather than generated now
    seconds: float      # time to generate (0 when reused)
    size: int
    sha256: str


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def trace_is_current(path: Path, exe: Path) -> bool:
    """A cached trace is reused only if it is newer than the tool that would
    write it: after a rebuild the generator may have changed, and the recorded
    `gen` command must reproduce the file that was measured."""
    try:
        st = path.stat()
        return st.st_size > 0 and st.st_mtime_ns >= exe.stat().st_mtime_ns
    except OSError:
        return False


def ensure_trace(ctx: Context, preset: str) -> TraceFile:
    """The cached trace for ``preset`` in this mode, generated first if absent
    or older than the tool.

    The file is written under a temporary name and renamed when complete, so
    an interrupted or concurrent generation never leaves a partial trace in
    the cache.
    """
    spec = trace_spec(preset, ctx.quick)
    path = traces_dir() / spec.filename
    command = gen_command(spec, path)
    # What the report says of the trace (reused or generated, its size and
    # digest) is kept in the eval's record, so that --render neither
    # generates it again nor reports a later cache state.
    got = ctx.measured(ctx.next_key(f"trace.{preset}"), lambda: _prepare(ctx, spec, path))
    return TraceFile(spec, path, command, got["reused"], got["seconds"], got["size"], got["sha256"])


def _prepare(ctx: Context, spec: TraceSpec, path: Path) -> dict:
    exe = tool_path(TOOL)  # a clear "not built" error rather than an OSError
    if trace_is_current(path, exe):
        return {"reused": True, "seconds": 0.0, "size": path.stat().st_size, "sha256": _sha256(path)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    run_cmd = gen_command(spec, tmp)
    ctx.progress(f"generating the {spec.preset} trace ({fmt_int(spec.packets)} packets) into {display_path(path)}")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(run_cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=ctx.timeout)
    except subprocess.TimeoutExpired as e:
        tmp.unlink(missing_ok=True)
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise NativeToolFailed(run_cmd, f"timed out after {ctx.timeout:g} s", stderr) from None
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        why = f"failed (exit {proc.returncode})" if proc.returncode else "exited 0 but wrote no trace"
        raise NativeToolFailed(run_cmd, why, proc.stderr, proc.returncode)
    os.replace(tmp, path)
    return {"reused": False, "seconds": seconds, "size": path.stat().st_size, "sha256": _sha256(path)}


def trace_note(traces: Sequence[TraceFile], flows_seen: dict[str, int] | None = None) -> str:
    parts = []
    for t in traces:
        seen = ""
        if flows_seen and t.spec.preset in flows_seen:
            seen = f" ({fmt_int(flows_seen[t.spec.preset])} appear)"
        how = ("reused from the trace cache" if t.reused
               else f"generated now in {t.seconds:.1f} s")
        parts.append(
            f"`{t.spec.preset}`: {fmt_int(t.spec.packets)} packets, at most {fmt_int(t.spec.flows)} flows{seen}, "
            f"seed {t.spec.seed}, `{display_path(t.path)}` ({t.size / 1e6:.1f} MB, sha256 {t.sha256[:16]}…, {how})")
    return ("Traces written by `dpukit-measure gen` (the first commands below; the file is byte-identical for "
            "the same options and seed): " + "; ".join(parts) + ".")
