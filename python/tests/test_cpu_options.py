"""Every native tool's CPU option refuses, with exit 2 and the option named, a
CPU this process may not use and a list that does not parse (core's
ArgParser::cpus_option). Before, such a run was pinned elsewhere (CPU 0) and
recorded as if it ran where it was asked to, with only a note in its JSON."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import native_tool

# (tool, its arguments up to the CPU option, the option): one of each tool's CPU options.
CPU_OPTIONS = [
    ("dpukit-core", ["channel-bench"], "host-cpus"),
    ("dpukit-measure", ["run"], "dpu-cpus"),
    ("dpukit-measure", ["live"], "hw-cpus"),
    ("dpukit-agent", [], "cpus"),
    ("dpukit-kv", ["bench"], "dpu-cpus"),
    ("dpukit-kvbench", ["fill"], "cpus"),
    ("dpukit-mesh", ["run"], "dpu-cpus"),
    ("dpukit-mesh", ["echo"], "cpus"),
    ("dpukit-bench", ["run"], "host-cpus"),
    ("dpukit-bench", ["e2e-server"], "hw-cpus"),
    ("dpukit-bench", ["e2e-client"], "cpus"),
]


def unusable_cpu() -> int:
    return max(os.sched_getaffinity(0)) + 1


@pytest.mark.parametrize("tool, args, option", CPU_OPTIONS, ids=[f"{t}-{o}" for t, _, o in CPU_OPTIONS])
def test_a_cpu_this_process_may_not_use_is_refused(tool, args, option):
    cpu = unusable_cpu()
    proc = subprocess.run([str(native_tool(tool)), *args, f"--{option}", f"0,{cpu}"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert f"--{option}: CPU {cpu} is not available to this process" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, why", [("x", "bad CPU list"), ("3-1", "")])
def test_a_cpu_list_that_does_not_parse_is_refused(value, why):
    proc = subprocess.run([str(native_tool("dpukit-measure")), "run", "--dpu-cpus", value], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "--dpu-cpus: " in proc.stderr and why in proc.stderr, proc.stderr
