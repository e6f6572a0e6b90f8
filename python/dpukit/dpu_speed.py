"""The dpu speed an evaluation runs at (``dpukit eval --dpu``, docs/core.md).

The presets and their factors live in one place, the native model
(core/src/dpu_speed.cc); this module asks ``dpukit-core dpu-speed`` rather
than keeping a copy. Every native tool reads ``$DPUKIT_DPU_SPEED`` as the
default of its ``--dpu-speed``, so setting it for the eval reaches every tool
an experiment runs, and each result JSON records what it ran at
(``placement.dpu_speed``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Iterator

from dpukit.paths import tool_path

ENV = "DPUKIT_DPU_SPEED"


@dataclass(frozen=True)
class DpuSpeed:
    name: str
    factor: float

    @property
    def full(self) -> bool:
        return self.factor >= 1.0

    def describe(self) -> str:
        if self.full:
            return f"{self.name} (F = 1: the dpu place runs at a host core's speed)"
        return (f"{self.name} (F = {self.factor:g}: a dpu CPU does {self.factor * 100:.3g} % of a host core's "
                f"work per second; loops on the dpu place are time-dilated, docs/core.md). Each run records the speed "
                f"it ran at in its JSON (placement.dpu_speed); a tool with no dpu loop runs at host speed")


def resolve_dpu_speed(text: str | None) -> DpuSpeed:
    """``text`` (or ``$DPUKIT_DPU_SPEED`` when None, else host) checked by
    the native model. Raises ValueError with the model's reason."""
    if text is None:
        text = os.environ.get(ENV) or "host"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.run([str(tool_path("dpukit-core")), "dpu-speed", "--dpu-speed", text],
                          capture_output=True, text=True, env=env, timeout=30)
    if proc.returncode != 0:
        reason = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else f"exit {proc.returncode}"
        raise ValueError(reason.split("error: ", 1)[-1])
    got = json.loads(proc.stdout)
    return DpuSpeed(got["name"], float(got["factor"]))


@contextlib.contextmanager
def dpu_speed_environment(speed: DpuSpeed) -> Iterator[None]:
    """``$DPUKIT_DPU_SPEED`` set to ``speed`` while the block runs, restored after."""
    before = os.environ.get(ENV)
    os.environ[ENV] = speed.name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
