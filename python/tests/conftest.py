"""Shared fixtures. Tests that need a native tool skip (with the reason) only
when the tool has not been built; CI builds first, so they run there."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpukit.paths import display_path, tool_path


def native_tool(tool: str) -> Path:
    path = tool_path(tool, must_exist=False)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.skip(f"{display_path(path)} not built (run `make test` to build it)")
    return path


@pytest.fixture
def core_tool() -> Path:
    """build/bin/dpukit-core, or skip when it has not been built."""
    return native_tool("dpukit-core")


@pytest.fixture
def measure_tool() -> Path:
    """build/bin/dpukit-measure, or skip when it has not been built."""
    return native_tool("dpukit-measure")


@pytest.fixture
def bench_tool() -> Path:
    """build/bin/dpukit-bench, or skip when it has not been built."""
    return native_tool("dpukit-bench")


def _run_dpukit(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpukit", *args],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def quick_eval(only: str, out: Path, *, timeout: float, args: tuple[str, ...] = (),
               env: dict | None = None) -> tuple[Path, str]:
    """``dpukit eval --quick --only ONLY --out OUT`` in a child process (with
    ``env`` added to its environment), which must succeed: (the result
    directory, its report.md)."""
    proc = _run_dpukit("eval", "--quick", "--only", only, *args, "--out", str(out), timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = (out / "latest").resolve()
    return run_dir, (run_dir / "report.md").read_text()


@pytest.fixture
def run_dpukit():
    """``run_dpukit(*args)`` runs ``python -m dpukit ARGS...`` in a child
    process (needed where dpukit execs a native tool)."""
    return _run_dpukit


# A result as the contract describes it (written by hand, not by a tool): the
# schema tests change one thing at a time in a copy of it.
SAMPLE_RESULT = {
    "schema": "dpukit.result/1",
    "tool": "dpukit-core ring-bench",
    "version": "0.1.0",
    "command_line": ["dpukit-core", "ring-bench", "--messages", "1000", "--batch", "8", "--json", "out.json"],
    "started_utc": "2026-11-21T08:15:00Z",
    "machine": {"cpu_model": "Example CPU", "cores": 2, "arch": "x86_64", "kernel": "Linux 6.1.0", "hostname": "h"},
    "backend": "emulated",
    "placement": {"host_cpus": "0", "dpu_cpus": "1", "hw_cpus": "1", "note": ""},
    "parameters": {"messages": 1000, "batch": 8},
    "figures": {"messages": 1000, "batch": 8, "seconds": 0.001, "messages_per_sec": 1.0e6, "ns_per_message": 1000.0},
    "cpu_ns": {"host": 900000, "dpu": 800000, "hw": 0},
    "wall_ns": 1000000,
}


@pytest.fixture
def sample_result() -> dict:
    return copy.deepcopy(SAMPLE_RESULT)


@pytest.fixture
def kv_tool() -> Path:
    """build/bin/dpukit-kv, or skip when it has not been built."""
    return native_tool("dpukit-kv")


@pytest.fixture
def kvbench_tool() -> Path:
    """build/bin/dpukit-kvbench, or skip when it has not been built."""
    return native_tool("dpukit-kvbench")
