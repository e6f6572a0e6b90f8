"""Workload characteristics of DPUBench operators (the paper's §4.2.2, Figs. 8-10).

Per operator at one input size and backend: IPC, the iTLB / dTLB and L1D miss
ratios, and the integer / branch / load-store shares of the instructions,
then radar charts (Fig. 8) and a PCA of the operators against the composed
programs of Table 5 (Fig. 10).

Where the counts come from
--------------------------
- **Hardware counters** (``perf_event_open``): ``dpukit-bench run --iterations
  N --counters`` counts the fixed-count loop of one thread in user space. Used
  when the machine exposes a PMU.
- **Simulation** (valgrind) when it does not (a VM without a virtual PMU):
  ``cachegrind --cache-sim=yes --branch-sim=yes`` gives instructions (Ir),
  data reads (Dr) and writes (Dw), simulated L1D misses (D1mr + D1mw),
  conditional and indirect branches (Bc, Bi) and their simulated
  mispredictions (Bcm, Bim); ``callgrind --dump-instr=yes`` gives the
  execution count of every instruction address, which :func:`disassemble`
  (objdump) turns into the instruction mix. Valgrind models no pipeline and
  no TLB, so IPC and the TLB miss ratios are *not measured* (None, with the
  reason) rather than guessed. Every such number is labelled simulated.
  Both tools run with ``--vex-guest-chase=no`` (see :data:`VALGRIND_COMMON`)
  so that they count the instructions that run and nothing a branch skips.
  Valgrind's virtual CPU offers no AVX-512, so libraries that dispatch on
  the CPU run their AVX2 (or older) code under it.

Isolating the operator from start-up
------------------------------------
A run of the tool also starts DPDK's EAL, builds tables, makes inputs and
checks the backend against ref; all of it is counted by valgrind (and
differs from one operator to the next). Each operator therefore runs twice,
with N1 and N2 = 2 N1 iterations of the same loop, and every count is taken
as ``counts(N2) - counts(N1)``: start-up is the same in both runs and
cancels, and what remains is the cost of iterations N1+1 .. N2, which run
after N1 iterations of warm-up (caches and predictors in their steady
state). The same differencing is applied to hardware counts (which cover the
loop only) to drop its cold first iterations. N1 is chosen from a short
native probe so that N1 iterations take about ``target_ns`` natively (within
``[min_iterations, max_iterations]``). A difference that is not positive
(noise larger than the work) leaves the metric unmeasured with that reason.

The instruction mix
-------------------
``integer_ratio`` is the share of executed machine instructions (callgrind's
per-address counts, differenced as above) that objdump decodes as scalar
integer operations on general-purpose registers: arithmetic, logic, shifts,
compares, moves, ``lea``, ``push`` / ``pop``, string moves; on x86-64
including those with a memory operand. Branches, SIMD / floating point
(any xmm / ymm / zmm / mmx / x87 / mask register, AVX, AES-NI, SHA), nops
and system instructions are not integer; on AArch64 loads and stores are
their own class. Valgrind counts an x86 ``rep``-prefixed string instruction
(``rep stos``, ``rep movs``) once per iteration, each iteration also a
conditional branch and a memory access in cachegrind's counts; such
iterations are their own class ("rep_string"), and a record where they are
more than :data:`REP_STRING_CAVEAT` of the instructions carries a caveat
(the CPU retires the whole string operation as one instruction). ``branch_ratio`` and ``load_store_ratio`` follow cachegrind's
counts (see :data:`DEFINITIONS`); the mix's own branch share is reported
alongside in ``instruction_mix``. A PLT stub that callgrind cannot place in
an object counts as a branch (a resolved entry runs one indirect jump);
instructions at addresses no disassembly covers are "unclassified" (their
share is reported, and counted in the denominator).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from dpukit.errors import DpukitError

SOURCE_PERF = "perf_event_open"
SOURCE_CACHEGRIND = "valgrind-cachegrind (simulated)"
SOURCE_MIX = "valgrind-callgrind + objdump (simulated)"

# The seven characteristics of Fig. 8, in the paper's order.
PAPER_METRICS = ("ipc", "itlb_miss_ratio", "dtlb_miss_ratio", "l1d_miss_ratio", "integer_ratio",
                 "branch_ratio", "load_store_ratio")
# Also measured, and used by the PCA: the (simulated) branch misprediction ratio.
METRICS = PAPER_METRICS + ("branch_mispredict_ratio",)

LABELS = {
    "ipc": "IPC",
    "itlb_miss_ratio": "iTLB miss",
    "dtlb_miss_ratio": "dTLB miss",
    "l1d_miss_ratio": "L1D miss",
    "integer_ratio": "integer",
    "branch_ratio": "branch",
    "load_store_ratio": "load&store",
    "branch_mispredict_ratio": "br. mispredict",
}

# Exactly what each metric is, per source.
DEFINITIONS = {
    SOURCE_CACHEGRIND: {
        "l1d_miss_ratio": "(D1mr + D1mw) / (Dr + Dw): simulated L1D misses per data reference",
        "branch_ratio": "(Bc + Bi) / Ir: conditional and indirect branches per instruction "
                        "(cachegrind does not count direct jumps and calls)",
        "load_store_ratio": "(Dr + Dw) / Ir: data references per instruction "
                            "(cachegrind counts a read-modify-write as one read)",
        "branch_mispredict_ratio": "(Bcm + Bim) / (Bc + Bi): simulated mispredictions",
    },
    SOURCE_MIX: {
        "integer_ratio": "scalar integer instructions on general-purpose registers / all executed "
                         "instructions (callgrind per-address counts, classes by objdump mnemonic)",
    },
    SOURCE_PERF: {
        "ipc": "instructions / cycles",
        "itlb_miss_ratio": "iTLB read misses / iTLB read accesses",
        "dtlb_miss_ratio": "dTLB read misses / dTLB read accesses",
        "l1d_miss_ratio": "L1D read misses / L1D read accesses",
        "branch_ratio": "branch instructions / instructions",
        "load_store_ratio": "(L1D read + write accesses) / instructions: load + store instructions "
                            "on Intel core PMUs, accesses elsewhere",
        "branch_mispredict_ratio": "branch misses / branch instructions",
    },
}

# Above this share of rep-string iterations a record carries a caveat.
REP_STRING_CAVEAT = 0.05
NOT_SIMULATED = "valgrind models no pipeline timing and no TLB; needs hardware counters (perf_event_open)"
NO_PERF_INTEGER = "no generic perf event counts integer instructions"

# The simulated caches, fixed so that results do not depend on the host's
# CPUID: 32 KiB 8-way L1s with 64 B lines, as on the paper's Xeon E5-2620 v3.
DEFAULT_CACHE_SIM = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64")

# Both tools run without VEX's chasing of branches into one superblock: with
# it, instructions that a taken forward branch skips were counted as
# executed (observed: 3 instructions of std::vector::resize counted on every
# call by cachegrind and lackey, while a breakpoint on the first of them
# never fires natively); without it, cachegrind's and callgrind's counts
# agree with the instructions that actually run.
VALGRIND_COMMON = ("--vex-guest-chase=no",)


class ProfileError(DpukitError):
    """A characterisation run failed (tool, valgrind or parse)."""


# ---------------------------------------------------------------- running


def _run(command: Sequence[str], timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(list(command), capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"timed out after {timeout:g} s: {' '.join(command)}") from None
    return proc, time.monotonic() - t0


def _bench_args(tool: str | os.PathLike, op: str, backend: str, size: int, iterations: int, json_out: Path, *,
                counters: bool, params: dict[str, str] | None, seed: int) -> list[str]:
    args = [str(tool), "run", "--ops", op, "--backend", backend, "--sizes", str(size), "--iterations",
            str(iterations), "--seed", str(seed), "--quiet", "--json", str(json_out)]
    if counters:
        args.append("--counters")
    if params:
        args += ["--param", ",".join(f"{k}={v}" for k, v in params.items())]
    return args


def _point_or_reason(json_out: Path, op: str) -> tuple[dict[str, Any] | None, str | None]:
    """The run's point for ``op``, or (None, why it is unavailable)."""
    figures = json.loads(json_out.read_text(encoding="utf-8"))["figures"]
    for p in figures.get("points", []):
        if p.get("op") == op:
            return p, None
    for u in figures.get("unavailable", []):
        if u.get("op") == op:
            return None, u.get("why", "unavailable")
    raise ProfileError(f"{json_out}: neither a point nor an unavailable entry for {op}")


def run_point(tool: str | os.PathLike, op: str, backend: str, size: int, iterations: int, *,
              wrapper: Sequence[str] = (), counters: bool = False, params: dict[str, str] | None = None,
              seed: int = 1, timeout: float = 900, workdir: Path) -> tuple[dict[str, Any] | None, str | None, float]:
    """One fixed-count run (optionally under ``wrapper``, e.g. valgrind):
    (point, None, seconds) or (None, why the operator is unavailable, seconds)."""
    json_out = workdir / f"run-{os.getpid()}-{time.monotonic_ns()}.json"
    command = [*wrapper, *_bench_args(tool, op, backend, size, iterations, json_out, counters=counters,
                                      params=params, seed=seed)]
    proc, secs = _run(command, timeout)
    if proc.returncode != 0 or not json_out.is_file():
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ProfileError(f"exit {proc.returncode}: {' '.join(command)}\n{tail}")
    point, why = _point_or_reason(json_out, op)
    json_out.unlink()
    return point, why, secs


def list_operators(tool: str | os.PathLike) -> dict[str, str]:
    """name -> scenario, from ``dpukit-bench list``."""
    proc, _ = _run([str(tool), "list"], 60)
    if proc.returncode != 0:
        raise ProfileError(f"{tool} list failed: {proc.stderr.strip()}")
    ops = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and not line.startswith(" "):
            ops[words[0]] = words[1]
    return ops


# ---------------------------------------------------------------- valgrind output


def parse_cachegrind(path: str | os.PathLike) -> dict[str, int]:
    """Event totals of a cachegrind output file: {"Ir": ..., "Dr": ..., "D1mr": ..., "Bc": ...}."""
    events: list[str] | None = None
    summary: list[int] | None = None
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            summary = [int(x) for x in line.split()[1:]]
    if events is None or summary is None or len(events) != len(summary):
        raise ProfileError(f"{path}: not a complete cachegrind output (no events / summary lines)")
    return dict(zip(events, summary))


_NAME_REF = re.compile(r"^\((\d+)\)(?:\s+(.*))?$")
PLT_OBJECT = "[PLT]"


def parse_callgrind_instructions(path: str | os.PathLike) -> dict[tuple[str, int], int]:
    """Self instruction counts per (object file, instruction address) of a
    callgrind output written with ``--dump-instr=yes`` (first event = Ir).

    Addresses are as callgrind writes them: the object's own (unrelocated)
    addresses, which are what objdump shows. The inclusive cost lines that
    follow ``calls=`` lines are skipped: they are the callee's cost.
    """
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    counts: Counter = Counter()
    positions: list[str] = ["line"]
    obj = "???"
    fn = ""
    last_addr = 0
    skip_next = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                if "instr" not in positions:
                    raise ProfileError(f"{path}: written without --dump-instr=yes (positions: {positions})")
                tok = parts[positions.index("instr")]
                if tok == "*":
                    addr = last_addr
                elif tok[0] in "+-":
                    addr = last_addr + int(tok, 0)
                else:
                    addr = int(tok, 0)
                last_addr = addr
                if skip_next:
                    skip_next = False
                    continue
                costs = parts[len(positions):]
                if costs:
                    # A PLT stub callgrind cannot place in an object: its
                    # address is a run-time one, so key it by kind instead.
                    where = PLT_OBJECT if obj == "???" and fn.endswith("[PLT]") else obj
                    counts[(where, addr)] += int(costs[0])
                continue
            key, _, value = line.partition("=")
            if key == "positions" or line.startswith("positions:"):
                positions = line.split(":", 1)[1].split()
            elif key == "calls":
                skip_next = True
            elif key in ("ob", "cob"):
                m = _NAME_REF.match(value)
                if m:
                    ident, name = m.group(1), m.group(2)
                    if name is not None:
                        names["ob"][ident] = name
                    name = names["ob"].get(ident, "???")
                else:
                    name = value
                if key == "ob":
                    obj = name
            elif key == "fn":
                m = _NAME_REF.match(value)
                if m:
                    if m.group(2) is not None:
                        names["fn"][m.group(1)] = m.group(2)
                    fn = names["fn"].get(m.group(1), "")
                else:
                    fn = value
    return dict(counts)


# ---------------------------------------------------------------- instruction classes

X86_PREFIXES = {"rep", "repz", "repe", "repnz", "repne", "lock", "notrack", "bnd", "data16", "data32", "addr32",
                "cs", "ds", "es", "ss", "fs", "gs", "xacquire", "xrelease"}
X86_OTHER = {"nop", "endbr64", "endbr32", "int3", "ud2", "hlt", "pause", "lfence", "mfence", "sfence", "cpuid",
             "rdtsc", "rdtscp", "syscall", "sysenter", "xgetbv", "rdrand", "rdseed", "clflush", "clflushopt",
             "clwb", "(bad)", "int", "rdpid", "serialize", "xtest", "xbegin", "xend", "xabort", "wait"}
X86_STRING_OPS = ("movs", "stos", "lods", "cmps", "scas", "ins", "outs")
X86_SIMD_MNEMONICS = ("ldmxcsr", "stmxcsr", "emms", "xsave", "xrstor", "fxsave", "fxrstor", "kmov", "kortest",
                      "ktest", "kand", "kor", "kxor", "knot", "kshift", "kunpck", "kadd")
A64_BRANCH = {"b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz", "braa", "brab", "blraa", "blrab",
              "retaa", "retab", "braaz", "brabz", "blraaz", "blrabz", "eret"}
A64_OTHER = {"nop", "hint", "yield", "wfe", "wfi", "sev", "sevl", "isb", "dsb", "dmb", "svc", "hvc", "smc", "mrs",
             "msr", "brk", "hlt", "udf", "bti", "paciasp", "autiasp", "pacibsp", "autibsp", "xpaclri", "sys",
             "sysl", "prfm", "prfum", "clrex", "csdb", "esb", "psb", "sb"}
_A64_VECTOR_REG = re.compile(r"\b(?:v\d+|[qdshb]\d+|z\d+|p\d+)\b")


@functools.lru_cache(maxsize=None)
def _x86_mnemonic_class(mnem: str) -> str | None:
    """The class a mnemonic alone decides, or None when the operands do."""
    if mnem.startswith("j") or mnem.startswith(("call", "ret", "loop")) or mnem in ("iret", "iretq"):
        return "branch"
    if mnem.startswith(("nop", "prefetch")) or mnem in X86_OTHER or mnem.startswith("rex") or mnem in X86_PREFIXES:
        return "other"
    if mnem.startswith(("f", "v")) or mnem.startswith(X86_SIMD_MNEMONICS):
        return "simd_fp"  # x87, AVX
    return None


@functools.lru_cache(maxsize=None)
def _a64_mnemonic_class(mnem: str) -> str | None:
    if mnem in A64_BRANCH or mnem.startswith("b."):
        return "branch"
    if mnem in A64_OTHER:
        return "other"
    if mnem.startswith(("ld", "st")) and not mnem.startswith("stg"):
        return "load_store"
    if mnem.startswith("f"):
        return "simd_fp"
    return None


def classify_instruction(text: str, arch: str) -> str:
    """The class of one disassembled instruction (mnemonic and operands as
    objdump prints them): "integer", "branch", "simd_fp", "load_store"
    (AArch64 only), "rep_string" (x86 rep-prefixed string instructions,
    which valgrind counts once per iteration) or "other"."""
    parts = text.split(None, 1)
    if not parts:
        return "other"
    if arch == "aarch64":
        cls = _a64_mnemonic_class(parts[0].lower())
        if cls is not None:
            return cls
        ops = parts[1].split("//")[0].split("<")[0] if len(parts) > 1 else ""
        return "simd_fp" if _A64_VECTOR_REG.search(ops) else "integer"
    # x86-64, AT&T syntax: skip prefixes (rep, lock, notrack, ...).
    rep = False
    while len(parts) > 1 and (parts[0] in X86_PREFIXES or parts[0].startswith("rex")):
        rep = rep or parts[0].startswith("rep")
        parts = parts[1].split(None, 1)
    if rep and parts[0].lower().startswith(X86_STRING_OPS):
        return "rep_string"
    cls = _x86_mnemonic_class(parts[0].lower())
    if cls is not None:
        return cls
    ops = parts[1].split("#")[0].split("<")[0] if len(parts) > 1 else ""
    # Any vector, mmx, x87 or AVX-512 mask register makes it SIMD / FP.
    if "mm" in ops or "%st" in ops or "%k" in ops:
        return "simd_fp"
    return "integer"


@functools.lru_cache(maxsize=64)
def _disassemble_cached(path: str, mtime_ns: int, size: int, objdump: str) -> tuple[str, dict[int, str]]:
    del mtime_ns, size  # part of the cache key only
    proc = subprocess.run([objdump, "-d", "-w", "--no-show-raw-insn", path], capture_output=True, text=True,
                          errors="replace")
    if proc.returncode != 0:
        raise ProfileError(f"{objdump} -d {path} failed: {proc.stderr.strip()[:300]}")
    arch = "x86_64"
    classes: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        # "  4a1f0:\tmov    %rsi,%rbp" (objdump -w --no-show-raw-insn)
        head, tab, text = line.partition(":\t")
        if not tab:
            if "file format" in line:
                arch = "aarch64" if "aarch64" in line else "x86_64"
            continue
        try:
            addr = int(head, 16)
        except ValueError:
            continue
        classes[addr] = classify_instruction(text, arch)
    return arch, classes


def disassemble(path: str | os.PathLike, objdump: str = "objdump") -> tuple[str, dict[int, str]]:
    """(architecture, {address: class}) of every instruction objdump decodes in ``path``."""
    st = os.stat(path)
    return _disassemble_cached(str(path), st.st_mtime_ns, st.st_size, objdump)


def instruction_mix(counts: dict[tuple[str, int], int], objdump: str = "objdump") -> dict[str, int]:
    """Executed instructions per class; "unclassified" where the object or
    the address is not in a disassembly (e.g. the vDSO)."""
    mix: Counter = Counter()
    by_obj: dict[str, list[tuple[int, int]]] = {}
    for (obj, addr), n in counts.items():
        by_obj.setdefault(obj, []).append((addr, n))
    for obj, items in by_obj.items():
        if obj == PLT_OBJECT:
            # A resolved PLT entry runs one indirect jump to its target.
            mix["branch"] += sum(n for _, n in items)
            continue
        classes: dict[int, str] = {}
        if obj != "???" and os.path.isfile(obj):
            try:
                classes = disassemble(obj, objdump)[1]
            except ProfileError:
                classes = {}
        for addr, n in items:
            mix[classes.get(addr, "unclassified")] += n
    return dict(mix)


# ---------------------------------------------------------------- differencing and metrics


def difference(high: dict[Any, float], low: dict[Any, float]) -> dict[Any, float]:
    """``high - low`` per key (a key missing on one side counts 0 there)."""
    return {k: high.get(k, 0) - low.get(k, 0) for k in set(high) | set(low)}


def _ratio(num: float, den: float) -> float | None:
    """num / den of differenced counts; None when the denominator is not
    positive or the numerator is clearly negative. A numerator within
    1e-4 den below zero is a count of (about) nothing: 0."""
    if den <= 0:
        return None
    if num < 0:
        return 0.0 if -num <= 1e-4 * den else None
    return num / den


def cachegrind_metrics(d: dict[str, float]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The metrics cachegrind's (differenced) counts give, and why any is missing."""
    ir = d.get("Ir", 0)
    refs = d.get("Dr", 0) + d.get("Dw", 0)
    misses = d.get("D1mr", 0) + d.get("D1mw", 0)
    branches = d.get("Bc", 0) + d.get("Bi", 0)
    mispredicts = d.get("Bcm", 0) + d.get("Bim", 0)
    values = {
        "l1d_miss_ratio": _ratio(misses, refs),
        "branch_ratio": _ratio(branches, ir),
        "load_store_ratio": _ratio(refs, ir),
        "branch_mispredict_ratio": _ratio(mispredicts, branches),
    }
    why = {k: "difference of the two runs not positive (noise larger than the work: raise N)"
           for k, v in values.items() if v is None}
    return values, why


def _perf_values(point: dict[str, Any]) -> dict[str, float]:
    if not isinstance(point.get("counters"), dict):
        raise ProfileError(f"hardware counters stopped working between runs: {point.get('counters')}")
    events = point["counters"]["events"]
    return {k: v["value"] for k, v in events.items() if isinstance(v, dict)}


def perf_metrics(d: dict[str, float],
                 why_not_counted: dict[str, str]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The metrics hardware counts (differenced) give, and why any is missing."""
    spec = {
        "ipc": ("instructions", ("cycles",)),
        "itlb_miss_ratio": ("itlb_read_misses", ("itlb_read_accesses",)),
        "dtlb_miss_ratio": ("dtlb_read_misses", ("dtlb_read_accesses",)),
        "l1d_miss_ratio": ("l1d_read_misses", ("l1d_read_accesses",)),
        "branch_ratio": ("branch_instructions", ("instructions",)),
        "branch_mispredict_ratio": ("branch_misses", ("branch_instructions",)),
    }
    values: dict[str, float | None] = {}
    why: dict[str, str] = {}
    for metric, (num, dens) in spec.items():
        missing = [e for e in (num, *dens) if e not in d]
        if missing:
            values[metric] = None
            why[metric] = "; ".join(f"{e}: {why_not_counted.get(e, 'not counted')}" for e in missing)
            continue
        values[metric] = _ratio(d[num], d[dens[0]])
        if values[metric] is None:
            why[metric] = "difference of the two runs not positive (noise larger than the work: raise N)"
    ls = [e for e in ("l1d_read_accesses", "l1d_write_accesses", "instructions") if e not in d]
    if ls:
        values["load_store_ratio"] = None
        why["load_store_ratio"] = "; ".join(f"{e}: {why_not_counted.get(e, 'not counted')}" for e in ls)
    else:
        values["load_store_ratio"] = _ratio(d["l1d_read_accesses"] + d["l1d_write_accesses"], d["instructions"])
    return values, why


def choose_iterations(ns_per_op: float, target_ns: float, min_iterations: int, max_iterations: int) -> tuple[int, int]:
    """(N1, N2 = 2 N1), N1 iterations taking about ``target_ns`` natively."""
    n1 = int(target_ns / ns_per_op) if ns_per_op > 0 else max_iterations
    n1 = max(min_iterations, min(max_iterations, n1))
    return n1, 2 * n1


def probe_ns_per_op(tool: str | os.PathLike, op: str, backend: str, size: int, *, params, seed, workdir,
                    timeout: float) -> tuple[float | None, dict[str, Any] | None, str | None]:
    """Native ns per unit of work (None and the reason when the operator is
    unavailable) and the last probe point (its counters say whether hardware
    counting works here)."""
    n, point = 16, None
    for _ in range(4):
        point, why, _ = run_point(tool, op, backend, size, n, counters=True, params=params, seed=seed,
                                  timeout=timeout, workdir=workdir)
        if point is None:
            return None, None, why
        wall = point["wall_ns"]
        if wall >= 2_000_000 or n >= 1 << 24:
            break
        n = min(1 << 24, max(2 * n, int(n * 3_000_000 / max(wall, 1))))
    return point["wall_ns"] / point["iterations"], point, None


class StartupDiffers(ProfileError):
    """The two runs of a pair did different start-up work, so their difference
    is not the operator's cost."""


def _valgrind_counts(tool, op, backend, size, n, *, valgrind, cache_sim, params, seed, workdir, timeout,
                     cachegrind: bool, callgrind: bool) -> tuple[dict[str, int] | None, dict | None, dict, dict]:
    """Cachegrind's event totals and callgrind's per-address counts of one run
    of N iterations, the seconds each took, and how many inputs each run's
    check against ref covered."""
    events = per_addr = None
    seconds: dict[str, float] = {}
    checked: dict[str, Any] = {}

    def under(name: str, *options: str) -> Path:
        """One run under valgrind's tool ``name`` with ``options``; its output file (the caller parses it)."""
        out = workdir / f"{name}-{n}.out"
        wrapper = [valgrind, f"--tool={name}", *VALGRIND_COMMON, *options, f"--{name}-out-file={out}",
                   f"--log-file={workdir / f'{name}-{n}.log'}"]
        point, why, seconds[name] = run_point(tool, op, backend, size, n, wrapper=wrapper, params=params,
                                              seed=seed, timeout=timeout, workdir=workdir)
        if point is None:
            raise ProfileError(f"{op} {backend} is unavailable under valgrind: {why}")
        checked[name] = point.get("checked_inputs")
        return out

    if cachegrind:
        out = under("cachegrind", "--cache-sim=yes", "--branch-sim=yes", *cache_sim)
        events = parse_cachegrind(out)
        out.unlink()
    if callgrind:
        out = under("callgrind", "--dump-instr=yes", "--compress-strings=no", "--compress-pos=no", "--skip-plt=no")
        per_addr = parse_callgrind_instructions(out)
        out.unlink()
    return events, per_addr, seconds, checked


def _differenced_valgrind(tool, op, backend, size, a, b, rec, **kw) -> tuple[dict | None, dict | None]:
    """counts(N2) - counts(N1) of cachegrind's totals and callgrind's per-address
    counts. Raises StartupDiffers when the two runs checked a different number
    of inputs against ref (the runner stops that check at a wall-clock
    deadline, which valgrind's slowness can move)."""
    lo_ev, lo_addr, s1, c1 = _valgrind_counts(tool, op, backend, size, a, **kw)
    hi_ev, hi_addr, s2, c2 = _valgrind_counts(tool, op, backend, size, b, **kw)
    for k in s1:  # summed over retries too: what the characterisation cost
        rec["seconds"][k] = rec["seconds"].get(k, 0.0) + s1[k] + s2[k]
    for k in c1:
        if c1[k] != c2[k]:
            raise StartupDiffers(
                f"start-up differs between the two {k} runs: the check against ref covered {c1[k]} inputs "
                f"in one and {c2[k]} in the other (it stops at a wall-clock deadline), so counts(N2) - "
                f"counts(N1) is not the operator's cost")
    return (difference(hi_ev, lo_ev) if hi_ev is not None else None,
            difference(hi_addr, lo_addr) if hi_addr is not None else None)


def characterize(
    tool: str | os.PathLike,
    ops: Iterable[str],
    *,
    size: int = 64,
    backend: str = "lib",
    method: str = "auto",
    n1: int | None = None,
    n2: int | None = None,
    target_ns: float = 5e6,
    min_iterations: int = 32,
    max_iterations: int = 4_000_000,
    params: dict[str, str] | None = None,
    seed: int = 1,
    valgrind: str = "valgrind",
    objdump: str = "objdump",
    cache_sim: Sequence[str] = DEFAULT_CACHE_SIM,
    mix: bool = True,
    retries: int = 2,
    timeout: float = 1800,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The characteristics of each operator in ``ops`` (one dict each, in order).

    ``method``: "perf" (hardware counters; an operator is reported without
    metrics, with the reason, if the machine has none), "valgrind"
    (simulation), or "auto" (perf where the probe shows counters, else
    valgrind). ``n1`` / ``n2`` override the iteration counts (see the module
    docstring); ``mix`` adds the callgrind instruction mix (integer share);
    ``retries``: how many times a pair of runs is redone when their start-up
    differed (see :class:`StartupDiffers`) before the operator is given up.

    Each dict: op, scenario, backend, size, source (SOURCE_PERF or
    SOURCE_CACHEGRIND, None when the operator is unavailable), simulated,
    n1, n2, metrics {name: value or None}, metric_sources, definitions,
    not_measured {name: reason}, per_op (differenced counts per unit of
    work), instruction_mix (shares), seconds (wall time of each step),
    native_ns_per_op, and unavailable (the reason) when it could not run.
    """
    if method not in ("auto", "perf", "valgrind"):
        raise ValueError("method must be auto, perf or valgrind")
    if (n1 is None) != (n2 is None) or (n1 is not None and not 0 < n1 < n2):
        raise ValueError("give both n1 and n2, with 0 < n1 < n2")
    tool = str(tool)
    scenarios = list_operators(tool)
    records = []
    with tempfile.TemporaryDirectory(prefix="dpukit-profile-") as tmp:
        workdir = Path(tmp)
        for op in ops:
            if op not in scenarios:
                raise ProfileError(f"unknown operator {op!r} (not in `{tool} list`)")
            rec: dict[str, Any] = {"op": op, "scenario": scenarios[op], "backend": backend, "size": size,
                                   "source": None, "simulated": False, "n1": None, "n2": None,
                                   "metrics": {m: None for m in METRICS}, "metric_sources": {},
                                   "definitions": {}, "not_measured": {}, "per_op": {}, "instruction_mix": {},
                                   "seconds": {}}
            t0 = time.monotonic()
            ns, probe, why = probe_ns_per_op(tool, op, backend, size, params=params, seed=seed, workdir=workdir,
                                             timeout=timeout)
            rec["seconds"]["probe"] = time.monotonic() - t0
            if ns is None:
                rec["unavailable"] = why
                rec["not_measured"] = {m: f"operator unavailable: {why}" for m in METRICS}
                records.append(rec)
                if progress:
                    progress(f"{op} {backend} {size}B: unavailable: {why}")
                continue
            rec["native_ns_per_op"] = ns
            counters = probe.get("counters")
            have_perf = isinstance(counters, dict)
            if method == "perf" and not have_perf:
                reason = counters if isinstance(counters, str) else "the tool reported no counters"
                rec["not_measured"] = {m: f"hardware counters {reason}" for m in METRICS}
                records.append(rec)
                continue
            use_perf = have_perf and method != "valgrind"
            a, b = (n1, n2) if n1 is not None else choose_iterations(ns, target_ns, min_iterations, max_iterations)
            rec["n1"], rec["n2"] = a, b
            vg = dict(valgrind=valgrind, cache_sim=cache_sim, params=params, seed=seed, workdir=workdir,
                      timeout=timeout)
            try:
                for attempt in range(retries + 1):
                    try:
                        _measure(rec, tool, op, backend, size, a, b, use_perf, counters, mix, objdump, vg)
                        break
                    except StartupDiffers:
                        if attempt == retries:
                            raise
                        rec["attempts"] = attempt + 2
            except StartupDiffers as e:
                rec["source"] = None
                rec["simulated"] = False
                rec["metrics"] = {m: None for m in METRICS}
                rec["metric_sources"], rec["definitions"], rec["per_op"], rec["instruction_mix"] = {}, {}, {}, {}
                rec["failed"] = str(e)
                rec["not_measured"] = {m: str(e) for m in METRICS}
            rec["seconds"].pop("total", None)
            rec["seconds"]["total"] = sum(rec["seconds"].values())
            records.append(rec)
            if progress:
                progress(f"{op} {backend} {size}B: {rec['source'] or 'FAILED: ' + rec['failed']} N1={a} N2={b} "
                         f"({rec['seconds']['total']:.1f} s)")
    return records


def _measure(rec, tool, op, backend, size, a, b, use_perf, counters, mix, objdump, vg) -> None:
    """Fills ``rec`` with the differenced counts of N1 = a and N2 = b iterations."""
    valgrind, cache_sim, params, seed, workdir, timeout = (vg["valgrind"], vg["cache_sim"], vg["params"],
                                                           vg["seed"], vg["workdir"], vg["timeout"])
    per_addr = None
    if use_perf:
        t0 = time.monotonic()
        lo, _, _ = run_point(tool, op, backend, size, a, counters=True, params=params, seed=seed,
                             timeout=timeout, workdir=workdir)
        hi, _, _ = run_point(tool, op, backend, size, b, counters=True, params=params, seed=seed,
                             timeout=timeout, workdir=workdir)
        rec["seconds"]["perf"] = time.monotonic() - t0
        d = difference(_perf_values(hi), _perf_values(lo))
        not_counted = {k: v for k, v in hi["counters"]["events"].items() if isinstance(v, str)}
        values, why_missing = perf_metrics(d, not_counted)
        src = rec["source"] = SOURCE_PERF
        if mix and shutil.which(valgrind):
            try:
                _, per_addr = _differenced_valgrind(tool, op, backend, size, a, b, rec, cachegrind=False,
                                                    callgrind=True, **vg)
            except StartupDiffers as e:  # the hardware counts cover the loop only: they stand
                why_missing["integer_ratio"] = str(e)
        else:
            why_missing["integer_ratio"] = NO_PERF_INTEGER + (
                f"; no {valgrind} for the simulated mix" if mix else "; the simulated mix was not asked for")
    else:
        if not shutil.which(valgrind):
            raise ProfileError(f"no hardware counters ({counters}) and no {valgrind} to simulate")
        d, per_addr = _differenced_valgrind(tool, op, backend, size, a, b, rec, cachegrind=True,
                                            callgrind=mix, **vg)
        values, why_missing = cachegrind_metrics(d)
        for m in ("ipc", "itlb_miss_ratio", "dtlb_miss_ratio"):
            values[m] = None
            why_missing[m] = NOT_SIMULATED
        if not mix:
            why_missing["integer_ratio"] = "the simulated instruction mix was not asked for (mix=False)"
        src = rec["source"] = SOURCE_CACHEGRIND
        rec["simulated"] = True
        rec["cache_sim"] = list(cache_sim)
        rec["hardware_counters"] = counters if isinstance(counters, str) else "not used (method=valgrind)"
    rec["per_op"] = {k: v / (b - a) for k, v in sorted(d.items())}
    for m, v in values.items():
        rec["metrics"][m] = v
        if v is not None:
            rec["metric_sources"][m] = src
            rec["definitions"][m] = DEFINITIONS[src].get(m, "")
    rec["not_measured"].update(why_missing)
    if per_addr is not None:
        _add_mix(rec, per_addr, b - a, objdump)


def _add_mix(rec: dict[str, Any], per_addr: dict[tuple[str, int], float], n: int, objdump: str) -> None:
    t0 = time.monotonic()
    mix = instruction_mix({k: v for k, v in per_addr.items() if v}, objdump)
    rec["seconds"]["disassembly"] = time.monotonic() - t0  # objdump, once per object file and process
    total = sum(mix.values())
    if total <= 0:
        rec["not_measured"]["integer_ratio"] = "difference of the two callgrind runs not positive"
        return
    rec["instruction_mix"] = {k: v / total for k, v in sorted(mix.items())}
    rep = mix.get("rep_string", 0) / total
    if rep > REP_STRING_CAVEAT:
        rec.setdefault("caveats", []).append(
            f"{100 * rep:.0f}% of the instructions valgrind counted are iterations of rep-prefixed string "
            "instructions (rep stos / movs, e.g. a large memset or memcpy in libc): valgrind counts each "
            "iteration as an instruction with a branch and a memory access, where the CPU retires one "
            "instruction, so this operator's simulated ratios mostly describe that expansion")
    rec["per_op"]["instructions_callgrind"] = total / n
    rec["metrics"]["integer_ratio"] = mix.get("integer", 0) / total
    rec["metric_sources"]["integer_ratio"] = SOURCE_MIX
    rec["definitions"]["integer_ratio"] = DEFINITIONS[SOURCE_MIX]["integer_ratio"]
    rec["not_measured"].pop("integer_ratio", None)
    if not rec["simulated"]:
        rec["simulated_metrics"] = ["integer_ratio"]


# ---------------------------------------------------------------- plots

def _common_metrics(records: Sequence[dict[str, Any]], candidates: Sequence[str], share: float = 1.0) -> list[str]:
    """The candidates measured (finite) in at least ``share`` of the records."""
    def has(r, m):
        v = r["metrics"].get(m)
        return v is not None and math.isfinite(v)
    return [m for m in candidates if records and sum(has(r, m) for r in records) >= share * len(records)]


def _caption(records: Sequence[dict[str, Any]]) -> str:
    sources = sorted({s for r in records for s in r.get("metric_sources", {}).values()})
    sim = any(r.get("simulated") or r.get("simulated_metrics") for r in records)
    return ("simulated (valgrind)" if sim and all(r.get("simulated") for r in records)
            else ("partly simulated (valgrind)" if sim else "hardware counters")) + " — " + ", ".join(sources)


def radar_chart(records: Sequence[dict[str, Any]], path: str | os.PathLike, *, title: str | None = None,
                ncols: int = 4) -> Path:
    """One radar subplot per record (Fig. 8), on the metrics measured for at
    least half of the records. Each axis is scaled to its largest value among
    the records (given in the footnote), so the shapes compare across
    operators."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    shown = [r for r in records if r.get("source")]
    if not shown:
        raise ProfileError("no record has measured characteristics to draw")
    # The axes most records have (Fig. 8's seven, then the misprediction
    # ratio); a record's missing value is a gap, not a 0.
    axes_m = _common_metrics(shown, METRICS, 0.5)
    if len(axes_m) < 3:
        raise ProfileError(f"a radar chart needs 3 metrics measured for most records; have {axes_m}")
    peak = {m: max((r["metrics"][m] for r in shown if r["metrics"].get(m) is not None), default=0.0) or 1.0
            for m in axes_m}
    angles = np.linspace(0, 2 * np.pi, len(axes_m), endpoint=False)
    n = len(shown)
    ncol = min(ncols, n)
    nrow = math.ceil(n / ncol)
    fig = Figure(figsize=(3.0 * ncol, 3.0 * nrow + 1.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    for i, r in enumerate(shown):
        ax = fig.add_subplot(nrow, ncol, i + 1, projection="polar")
        vals = [np.nan if r["metrics"].get(m) is None else r["metrics"][m] / peak[m] for m in axes_m]
        closed_a, closed_v = np.append(angles, angles[0]), np.array(vals + vals[:1])
        ax.plot(closed_a, closed_v, "o-", color="tab:blue", linewidth=1.4, markersize=2.5)
        if not np.isnan(closed_v).any():
            ax.fill(closed_a, closed_v, color="tab:blue", alpha=0.25)
        ax.set_xticks(angles)
        ax.set_xticklabels([LABELS[m] for m in axes_m], fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_yticks([0.25, 0.5, 0.75, 1.0])
        ax.set_yticklabels([])
        gaps = [LABELS[m] for m, v in zip(axes_m, vals) if np.isnan(v)]
        title_text = r["op"] + (" (!)" if r.get("caveats") else "")
        ax.set_title(title_text + (f"\n(n/m: {', '.join(gaps)})" if gaps else ""), fontsize=9, pad=10)
    missing = [LABELS[m] for m in PAPER_METRICS if m not in axes_m]
    reasons = sorted({r["not_measured"].get(m, "") for r in shown for m in PAPER_METRICS if m not in axes_m} - {""})
    sizes = sorted({r["size"] for r in shown})
    head = title or f"Operator characteristics, {'/'.join(map(str, sizes))} B, 1 thread, backend {shown[0]['backend']}"
    fig.suptitle(f"{head}\n{_caption(shown)}", fontsize=10)
    foot = "axis maxima: " + ", ".join(f"{LABELS[m]} {peak[m]:.3g}" for m in axes_m)
    if missing:
        foot += "\nnot measured: " + ", ".join(missing) + (" (" + "; ".join(reasons) + ")" if reasons else "")
    left_out = [r["op"] + (" (unavailable)" if r.get("unavailable") else " (not measured)")
                for r in records if not r.get("source")]
    if left_out:
        foot += "\nleft out: " + ", ".join(left_out)
    if any(r.get("caveats") for r in shown):
        foot += ("\n(!) mostly iterations of rep-prefixed string instructions, which valgrind counts one by one "
                 "(see the record's caveats)")
    fig.text(0.5, 0.005, foot, ha="center", va="bottom", fontsize=7, wrap=True)
    fig.savefig(path, format="png")
    return path


def pca(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PCA of the rows of ``matrix`` (records x features) after standardising
    each feature (zero mean, unit variance; constant features dropped):
    (scores, explained variance ratios, components), by SVD."""
    x = np.asarray(matrix, dtype=float)
    std = x.std(axis=0)
    keep = std > 1e-12 * np.maximum(1.0, np.abs(x).max(axis=0))
    z = (x[:, keep] - x[:, keep].mean(axis=0)) / std[keep]
    if z.shape[1] == 0:
        raise ProfileError("every feature is constant over the records: nothing to analyse")
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    var = s ** 2
    ratios = var / var.sum() if var.sum() > 0 else var
    return u * s, ratios, vt


def _hull(points: np.ndarray) -> np.ndarray:
    """Convex hull (Andrew's monotone chain), counter-clockwise."""
    pts = sorted(set(map(tuple, points)))
    if len(pts) < 3:
        return np.array(pts)

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    upper: list = []
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return np.array(lower[:-1] + upper[:-1])


def pca_plot(op_records: Sequence[dict[str, Any]], program_records: Sequence[dict[str, Any]],
             path: str | os.PathLike, *, title: str | None = None) -> list[float]:
    """PCA of the operators and the composed programs together (Fig. 10), on
    the metrics measured for at least 80 % of the records (a record lacking
    one of them is left out and named in the title): the first two
    components, operators and programs marked differently, each group's
    convex hull. Returns the explained variance ratio of every component."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = [r for r in [*op_records, *program_records] if r.get("source")]
    features = _common_metrics(measured, METRICS, 0.8)

    def complete(r):
        return all(r["metrics"].get(m) is not None and math.isfinite(r["metrics"][m]) for m in features)

    ops = [r for r in op_records if r.get("source") and complete(r)]
    progs = [r for r in program_records if r.get("source") and complete(r)]
    allr = ops + progs
    left_out = [r["op"] for r in [*op_records, *program_records] if not any(r is x for x in allr)]
    if len(allr) < 3 or len(features) < 2:
        raise ProfileError(f"PCA needs >= 3 records and >= 2 common metrics; have {len(allr)} and {features}")
    x = np.array([[r["metrics"][m] for m in features] for r in allr])
    scores, ratios, _ = pca(x)
    if scores.shape[1] < 2:
        scores = np.column_stack([scores, np.zeros(len(allr))])
        ratios = np.append(ratios, 0.0)
    fig = Figure(figsize=(7.0, 5.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for group, recs, offset, marker, color in (("operators", ops, 0, "o", "tab:blue"),
                                               ("programs (Table 5)", progs, len(ops), "^", "tab:red")):
        if not recs:
            continue
        pts = scores[offset:offset + len(recs), :2]
        ax.scatter(pts[:, 0], pts[:, 1], marker=marker, color=color, s=40, label=group, zorder=3)
        for r, (px, py) in zip(recs, pts):
            ax.annotate(r["op"].removeprefix("program_") + (" (!)" if r.get("caveats") else ""), (px, py),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
        hull = _hull(pts)
        if len(hull) >= 3:
            ax.fill(hull[:, 0], hull[:, 1], color=color, alpha=0.10, zorder=1)
            closed = np.vstack([hull, hull[:1]])
            ax.plot(closed[:, 0], closed[:, 1], "--", color=color, linewidth=0.9, zorder=2)
    ax.set_xlabel(f"PC1 ({100 * ratios[0]:.1f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * ratios[1]:.1f}% of variance)")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    head = title or "PCA of operator and program characteristics"
    note = f"\nleft out (not measured): {', '.join(left_out)}" if left_out else ""
    if any(r.get("caveats") for r in allr):
        note += "\n(!) mostly rep-string iterations, which valgrind counts one by one (see the caveats)"
    ax.set_title(f"{head}\n{_caption(allr)}\nfeatures (standardised): {', '.join(LABELS[m] for m in features)}"
                 f"{note}", fontsize=8)
    fig.savefig(Path(path), format="png")
    return [float(v) for v in ratios]


# ---------------------------------------------------------------- table


def table(records: Sequence[dict[str, Any]]) -> str:
    """A plain-text table of the records (n/m = not measured; (!) = see the record's caveats)."""
    cols = ["op", "source", "N1", "N2", *[LABELS[m] for m in METRICS], "instr/op"]
    rows = []
    for r in records:
        src = ("unavailable" if r.get("unavailable") else "failed" if r.get("failed")
               else "simulated" if r.get("simulated") else (r["source"] or "-"))
        vals = [r["op"] + (" (!)" if r.get("caveats") else ""), src, str(r.get("n1") or "-"),
                str(r.get("n2") or "-")]
        vals += ["n/m" if r["metrics"].get(m) is None else f"{r['metrics'][m]:.4g}" for m in METRICS]
        ipo = r["per_op"].get("Ir", r["per_op"].get("instructions"))
        vals.append("-" if ipo is None else f"{ipo:.1f}")
        rows.append(vals)
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dpukit.bench_profile --tool build/bin/dpukit-bench --ops memcpy,... --out DIR``"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m dpukit.bench_profile", description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="the dpukit-bench binary")
    ap.add_argument("--ops", default="all", help="operators, comma-separated; all = every non-program operator")
    ap.add_argument("--programs", default="programs", help="programs for the PCA (programs = all, none)")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--backend", default="lib")
    ap.add_argument("--method", default="auto", choices=["auto", "perf", "valgrind"])
    ap.add_argument("--n1", type=int)
    ap.add_argument("--n2", type=int)
    ap.add_argument("--out", required=True, help="directory for profile.json, radar.png, pca.png")
    a = ap.parse_args(argv)
    listed = list_operators(a.tool)
    ops = [o for o in listed if listed[o] != "program"] if a.ops == "all" else a.ops.split(",")
    progs = ([o for o in listed if listed[o] == "program"] if a.programs == "programs"
             else [] if a.programs == "none" else a.programs.split(","))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    say = lambda s: print(s, flush=True)  # noqa: E731
    op_recs = characterize(a.tool, ops, size=a.size, backend=a.backend, method=a.method, n1=a.n1, n2=a.n2,
                           progress=say)
    prog_recs = characterize(a.tool, progs, size=a.size, backend=a.backend, method=a.method, n1=a.n1, n2=a.n2,
                             progress=say) if progs else []
    (out / "profile.json").write_text(json.dumps({"operators": op_recs, "programs": prog_recs}, indent=1))
    print(table(op_recs + prog_recs))
    plots: list[tuple[str, Callable[[], Any]]] = [("radar.png", lambda: radar_chart(op_recs, out / "radar.png"))]
    if prog_recs:
        plots.append(("radar_programs.png", lambda: radar_chart(prog_recs, out / "radar_programs.png",
                                                                title="Composed programs (Table 5)")))
        plots.append(("pca.png", lambda: pca_plot(op_recs, prog_recs, out / "pca.png")))
    for name, draw in plots:
        try:
            got = draw()
            if name == "pca.png":
                print("PCA explained variance:", ", ".join(f"{r:.3f}" for r in got))
        except ProfileError as e:
            print(f"{name}: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
