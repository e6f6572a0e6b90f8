"""Experiments on DPUBench (``dpukit-bench``): the operator set of Table 4 on
its backends (§4.2.3, Figs. 11-12).

Every point is checked against the operator's ref backend before it is
timed (the tool stops on a mismatch). ``dpukit-bench`` reports, per point, the
median of its timed repetitions and their range; the experiments here keep
every run's JSON under ``runs/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from dpukit.errors import DpukitError
from dpukit.experiments import Context, experiment, skipped_in_quick_mode
from dpukit.machine_load import background_busy
from dpukit.paths import tool_path
from dpukit.plots import BarPanel, LinePanel, Series, bars_plot, line_panels
from dpukit.report import Section
from dpukit.units import fmt_sig

TOOL = "dpukit-bench"
QUICK_SIZES = [64, 1024]
SWEEP_SIZES = [64, 128, 256, 512, 1024]
SWEEP_THREADS = [1, 2]


@dataclass(frozen=True)
class OperatorInfo:
    name: str
    scenario: str
    version: int
    backends: tuple[str, ...]
    what: str


def list_operators() -> list[OperatorInfo]:
    """The operators this build of ``dpukit-bench`` has (``dpukit-bench list``)."""
    out = subprocess.run([str(tool_path(TOOL)), "list"], check=True, capture_output=True, text=True).stdout
    ops = []
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) < 4 or not parts[2].startswith("v"):
            continue
        ops.append(OperatorInfo(parts[0], parts[1], int(parts[2][1:]), tuple(parts[3].split(",")),
                                parts[4] if len(parts) > 4 else ""))
    return ops


def recorded_operators(ctx: Context) -> list[OperatorInfo]:
    """list_operators(), kept in the eval's record so that --render does not
    ask the tool again."""
    kept = ctx.measured("operators", lambda: [dataclasses.asdict(o) for o in list_operators()])
    return [OperatorInfo(**{**o, "backends": tuple(o["backends"])}) for o in kept]


def run_bench(ctx: Context, args: Sequence[Any], label: str) -> dict[str, Any]:
    return ctx.run_native(TOOL, ["run", *args, "--quiet"], label=label)


# Quick mode's seconds per timed repetition (default 0.05): the tests run
# bench.quick with less, to see every operator run and be checked, not to time it.
MIN_TIME_ENV = "DPUKIT_BENCH_MIN_TIME"


def timing_args(quick: bool) -> list[Any]:
    if quick:
        seconds = os.environ.get(MIN_TIME_ENV) or "0.05"
        try:
            min_time = float(seconds)
        except ValueError:
            min_time = 0.0
        if not min_time > 0:
            raise DpukitError(f"${MIN_TIME_ENV} must be a number of seconds above 0, not {seconds!r}")
        return ["--warmup", 0.02, "--min-time", min_time, "--repetitions", 3]
    return ["--warmup", 0.1, "--min-time", 0.2, "--repetitions", 5]


def points_of(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for r in runs for p in r["figures"]["points"]]


def unavailable_of(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(operator, backend) -> why it could not run (each once)."""
    out: dict[tuple[str, str], str] = {}
    for r in runs:
        for u in r["figures"]["unavailable"]:
            out.setdefault((u["op"], u["backend"]), u["why"])
    return out


def spread(p: dict[str, Any]) -> str:
    """The range of the repetitions around the median, in percent."""
    return f"{100 * (p['mops_max'] - p['mops_min']) / p['mops']:.0f}%" if p["mops"] > 0 else "-"


def method_paragraph(ctx: Context, runs: Sequence[dict[str, Any]]) -> str:
    params = runs[0]["parameters"] if runs else {}
    return (f"Each point: {params.get('warmup_s')} s warm-up, then {params.get('repetitions')} timed repetitions of "
            f"at least {params.get('min_time_s')} s each; the median is shown, 'range' is (max - min) / median of "
            "the repetitions. Before timing, each backend's outputs were checked against ref on the same inputs "
            "(the tool stops on a mismatch). Threads are pinned to the place's CPUs and run busy (no sleeping). "
            "Gbps counts the input bytes of one unit of work; Mops counts units of work.")


# -- bench.quick --------------------------------------------------------------


@experiment(
    "bench.quick",
    title="bench.quick: every operator on lib and dev, 64 B and 1 KiB, one thread",
    description="DPUBench operators on the library and DPDK device backends, checked against ref, then timed.",
    tools=[TOOL],
)
def quick(ctx: Context) -> Section:
    ops = [o for o in recorded_operators(ctx) if o.scenario != "program"]
    sizes = QUICK_SIZES
    runs = []
    for i, op in enumerate(ops, 1):
        backends = [b for b in ("lib", "dev") if b in op.backends] or ["ref"]
        ctx.progress(f"{op.name} ({','.join(backends)})", i, len(ops))
        args = ["--ops", op.name, "--backend", ",".join(("lib", "dev")), "--sizes", ",".join(map(str, sizes)),
                "--threads", 1, "--place", "host", *timing_args(True)]
        runs.append(run_bench(ctx, args, op.name))
    pts = points_of(runs)
    unavailable = unavailable_of(runs)

    sec = Section("bench.quick: every operator on lib and dev, 64 B and 1 KiB, one thread")
    sec.paragraph("`dpukit-bench run` times each operator of Table 4 (plus SHA-1, AES-CBC, the storage CRC and "
                  "MemCpy) on one thread of the host place, on the library backend and, where a DPDK device class "
                  "exists, on the device backend (DPDK's software PMDs on this machine). " + method_paragraph(ctx, runs))
    rows = []
    by_key = {(p["op"], p["backend"], p["size"]): p for p in pts}
    for op in ops:
        for b in ("lib", "dev"):
            measured = [by_key.get((op.name, b, s)) for s in sizes]
            if not any(measured):
                why = unavailable.get((op.name, b), "not run")
                rows.append([op.name, op.scenario, b, "unavailable: " + why, "", "", "", ""])
                continue
            cells: list[Any] = [op.name, op.scenario, b]
            for p in measured:
                cells += ["-", "-"] if p is None else [fmt_sig(p["gbps"]), fmt_sig(p["mops"])]
            cells.append(spread(measured[-1]) if measured[-1] else "-")
            rows.append(cells)
    sec.table(["operator", "scenario", "backend", f"Gbps {sizes[0]} B", f"Mops {sizes[0]} B",
               f"Gbps {sizes[-1]} B", f"Mops {sizes[-1]} B", f"range {sizes[-1]} B"], rows,
              caption="Throughput per operator and backend (median of the repetitions)")
    panels = []
    for s in sizes:
        values = {b: [by_key[(o.name, b, s)]["gbps"] if (o.name, b, s) in by_key else float("nan") for o in ops]
                  for b in ("lib", "dev")}
        panels.append(BarPanel(f"{s} B inputs", "Gbps (log)", values, logy=True, annotate=False))
    path, rel = ctx.plot_path("throughput")
    bars_plot(path, panels, [o.name for o in ops], title="DPUBench operators, one thread, host place", ncols=1)
    sec.image(rel, "Gbps per operator and backend", "Gbps per operator (log scale); a missing bar is a backend "
              "that does not exist for that operator here.")
    return sec


# -- bench.sweep --------------------------------------------------------------


@experiment(
    "bench.sweep",
    title="bench.sweep: operators over input size x threads (Fig. 11)",
    description="Every operator on ref, lib and dev over 64 B-1 KiB and 1-2 threads on both CPUs (full mode).",
    tools=[TOOL],
)
def sweep(ctx: Context) -> Section:
    sec = Section("bench.sweep: operators over input size x threads (Fig. 11)")
    if skipped_in_quick_mode(ctx, sec, "bench.sweep"):
        return sec
    ops = [o for o in recorded_operators(ctx) if o.scenario != "program"]
    runs = []
    for i, op in enumerate(ops, 1):
        ctx.progress(op.name, i, len(ops))
        args = ["--ops", op.name, "--backend", "ref,lib,dev", "--sizes", ",".join(map(str, SWEEP_SIZES)),
                "--threads", ",".join(map(str, SWEEP_THREADS)), "--place", "host", "--host-cpus", "0-1",
                *timing_args(False)]
        runs.append(run_bench(ctx, args, op.name))
    pts = points_of(runs)
    unavailable = unavailable_of(runs)
    sec.paragraph("Like the paper's Fig. 11: each operator's throughput as threads grow, one line per input size. "
                  "Here the host place is both CPUs of this 2-core VM, so 2 threads is the most that can scale. "
                  + method_paragraph(ctx, runs))
    by_key = {(p["op"], p["backend"], p["size"], p["threads"]): p for p in pts}
    for backend in ("lib", "ref", "dev"):
        names = [o.name for o in ops if any((o.name, backend, s, 1) in by_key for s in SWEEP_SIZES)]
        if not names:
            continue
        panels = [LinePanel(n, [Series(f"{s} B", SWEEP_THREADS,
                                       [by_key[(n, backend, s, t)]["gbps"] if (n, backend, s, t) in by_key
                                        else float("nan") for t in SWEEP_THREADS]) for s in SWEEP_SIZES])
                  for n in names]
        path, rel = ctx.plot_path(f"threads-{backend}")
        line_panels(path, panels, title=f"DPUBench operators, {backend} backend: Gbps vs threads",
                    xlabel="threads", ylabel="Gbps", xticks=SWEEP_THREADS)
        sec.image(rel, f"Gbps vs threads, {backend}", f"{backend} backend: Gbps vs threads, one line per input size.")
    rows = []
    for o in ops:
        cells = [o.name]
        for b in ("ref", "lib", "dev"):
            p = by_key.get((o.name, b, 1024, 1))
            cells.append(fmt_sig(p["gbps"]) if p else ("n/a" if (o.name, b) in unavailable else "-"))
        lib, ref = by_key.get((o.name, "lib", 1024, 1)), by_key.get((o.name, "ref", 1024, 1))
        cells.append(fmt_sig(lib["gbps"] / ref["gbps"]) if lib and ref and ref["gbps"] > 0 else "-")
        two, one = by_key.get((o.name, "lib", 1024, 2)), lib
        cells.append(fmt_sig(two["gbps"] / one["gbps"]) if two and one and one["gbps"] > 0 else "-")
        rows.append(cells)
    sec.table(["operator", "ref Gbps", "lib Gbps", "dev Gbps", "lib / ref", "lib 2 threads / 1"], rows,
              caption="1 KiB inputs: the three backends side by side, and lib's scaling from 1 to 2 threads")
    if unavailable:
        sec.table(["operator", "backend", "why not"], [[o, b, w] for (o, b), w in sorted(unavailable.items())],
                  caption="Backends that do not exist here")
    return sec


# -- compare (Fig. 12) ---------------------------------------------------------


def compare_plot(table: dict[str, Any], path: Any, *, title: str) -> Any:
    """Fig. 12: per operator, B / A of the median throughput, one bar group
    per (size, threads), from a ``dpukit-bench compare --json`` table."""
    rows = table["rows"]
    ops = list(dict.fromkeys(f"{r['op']} {r['backend']}" for r in rows))
    groups = list(dict.fromkeys(f"{r['size']} B, {r['threads']}t" for r in rows))
    ratio = {(f"{r['op']} {r['backend']}", f"{r['size']} B, {r['threads']}t"): r["ratio"] for r in rows}
    values = {g: [ratio.get((o, g), float("nan")) for o in ops] for g in groups}
    panel = BarPanel("throughput B / A", "ratio (log)", values, logy=True, annotate=len(groups) * len(ops) <= 40,
                     refline=(1.0, "equal"))
    return bars_plot(path, [panel], ops, title=title, ncols=1)


def compare_command(args: Sequence[str]) -> int:
    """``dpukit bench compare A.json B.json [--json OUT] --plot OUT.png``: the
    native table, then the plot of it."""
    import tempfile
    from pathlib import Path

    args = list(args)
    i = args.index("--plot")
    if i + 1 >= len(args):
        print("dpukit bench compare: --plot needs a file name", file=sys.stderr)
        return 2
    png = Path(args[i + 1])
    del args[i:i + 2]
    with tempfile.TemporaryDirectory(prefix="dpukit-compare-") as tmp:
        if "--json" in args:
            out = Path(args[args.index("--json") + 1])
        else:
            out = Path(tmp) / "compare.json"
            args += ["--json", str(out)]
        rc = subprocess.run([str(tool_path(TOOL)), *args]).returncode
        if rc != 0:
            return rc
        compare_plot(json.loads(out.read_text()), png, title="DPUBench: throughput ratio B / A per operator")
    print(f"plot: {png}")
    return 0


# -- bench.tools: lib against the libraries' own benchmark tools -------------


TOOLS_CPU = "1"  # both sides pinned to the same CPU, one after the other


def openssl_speed(alg: str, size: int, seconds: int) -> dict[str, float]:
    """``openssl speed -evp ALG -bytes SIZE -elapsed -mr`` on TOOLS_CPU:
    operations per wall second (``-elapsed``: wall clock, as dpukit-bench)."""
    cmd = ["taskset", "-c", TOOLS_CPU, "openssl", "speed", "-evp", alg, "-bytes", str(size),
           "-seconds", str(seconds), "-elapsed", "-mr"]
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    for line in (proc.stdout + proc.stderr).splitlines():  # speed prints its +R lines on stderr
        if line.startswith("+R:"):  # +R:<count>:<alg>:<seconds>
            _, count, _, secs = line.split(":")
            return {"mops": int(count) / float(secs) / 1e6, "command": " ".join(cmd)}
    raise RuntimeError(f"no +R line in the output of {' '.join(cmd)}")


# The dev backend against DPDK's own perf tools: the same PMD, sizes and
# operation, one worker lcore on TOOLS_CPU (the tools' main lcore, which only
# waits, on DPDK_MAIN_CPU), bursts of 32 on both sides.
DPDK_MAIN_CPU = "0"
DEV_TOOL_SIZES = [64, 1024]
DEV_TOOL_BURST = 32
DPDK_TOOL_EAL = ["--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "-m", "512",
                 "-l", f"{DPDK_MAIN_CPU},{TOOLS_CPU}", "--log-level", "*:error"]
DPDK_TOOLS_PACKAGE = "dpdk-dev"  # Debian's package of dpdk-test-crypto-perf and dpdk-test-compress-perf
# (dpukit operator, what, dpdk-test-crypto-perf's options for the same operation)
CRYPTO_PERF_CASES = [
    ("aes", "AES-128-GCM encrypt, 12-byte IV, no AAD, 16-byte tag",
     ["--optype", "aead", "--aead-algo", "aes-gcm", "--aead-op", "encrypt", "--aead-key-sz", "16",
      "--aead-iv-sz", "12", "--aead-aad-sz", "0", "--digest-sz", "16"]),
    ("sha256", "plain SHA-256 (no key), 32-byte digest",
     ["--optype", "auth-only", "--auth-algo", "sha2-256", "--auth-op", "generate", "--auth-key-sz", "0",
      "--digest-sz", "32"]),
]
CRYPTO_PMD = "crypto_aesni_mb"
COMPRESS_PMD = "compress_isal"
COMPRESS_LEVEL = 1  # the compress operator's default level (compress.level), compressdev's level 1 on both sides


def parse_crypto_perf(text: str) -> float:
    """MOps from ``dpdk-test-crypto-perf --ptest throughput --silent``: the
    row under the header that names MOps (one worker lcore)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "MOps" in line and "lcore id" in line:
            for row in lines[i + 1:]:
                cells = row.split()
                if len(cells) == 10:  # lcore, size, burst, enq, deq, failed enq, failed deq, MOps, Gbps, cycles/buf
                    if int(cells[3]) != int(cells[4]) or int(cells[3]) == 0:
                        raise RuntimeError(f"dpdk-test-crypto-perf dequeued {cells[4]} of {cells[3]} operations")
                    return float(cells[7])
    raise RuntimeError("no throughput row in the output of dpdk-test-crypto-perf")


def parse_compress_perf(text: str) -> dict[str, float]:
    """Compression Gbps, compressed size and ratio from
    ``dpdk-test-compress-perf --ptest throughput`` (one lcore row)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Comp [Gbps]" in line:
            for row in lines[i + 1:]:
                cells = row.split()
                if len(cells) == 6:  # lcore, level, comp size, comp ratio %, comp Gbps, decomp Gbps
                    return {"level": int(cells[1]), "comp_size": int(cells[2]), "comp_gbps": float(cells[4])}
    raise RuntimeError("no throughput row in the output of dpdk-test-compress-perf")


# dpdk-test-crypto-perf cycles through this many buffers. Its default, 8192,
# is 8 MiB at 1 KiB, where dpukit-bench's pool is 256 inputs (256 KiB);
# 1024 is the smallest that starts here (512: "Test run constructor failed").
CRYPTO_PERF_POOL = 1024


def crypto_perf(options: Sequence[str], size: int) -> dict[str, Any]:
    """One dpdk-test-crypto-perf throughput run on CRYPTO_PMD: MOps."""
    total = 5_000_000 if size <= 256 else 2_000_000  # about half a second or more either way
    cmd = ["dpdk-test-crypto-perf", *DPDK_TOOL_EAL, "--vdev", CRYPTO_PMD, "--", "--ptest", "throughput",
           "--devtype", CRYPTO_PMD, *options, "--buffer-sz", str(size), "--burst-sz", str(DEV_TOOL_BURST),
           "--pool-sz", str(CRYPTO_PERF_POOL), "--total-ops", str(total), "--silent"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-500:]}")
    return {"mops": parse_crypto_perf(proc.stdout + proc.stderr), "command": " ".join(cmd)}


def compress_perf(input_file: str, size: int) -> dict[str, Any]:
    """One dpdk-test-compress-perf throughput run on COMPRESS_PMD over
    ``input_file`` cut into ``size``-byte operations (one segment each):
    compression Mops from its Gbps (printed to 0.01 Gbps)."""
    iters = 500 if size <= 256 else 200
    cmd = ["dpdk-test-compress-perf", *DPDK_TOOL_EAL, "--vdev", COMPRESS_PMD, "--", "--driver-name", COMPRESS_PMD,
           "--input-file", input_file, "--seg-sz", str(size), "--max-num-sgl-segs", "1",
           "--compress-level", str(COMPRESS_LEVEL), "--huffman-enc", "dynamic", "--window-sz", "15",
           "--burst-sz", str(DEV_TOOL_BURST), "--num-iter", str(iters), "--ptest", "throughput"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {(proc.stdout + proc.stderr)[-500:]}")
    r = parse_compress_perf(proc.stdout + proc.stderr)
    return {"mops": r["comp_gbps"] * 1e9 / 8 / size / 1e6, "gbps": r["comp_gbps"], "command": " ".join(cmd)}


def write_operator_inputs(op: str, size: int, path: str) -> None:
    """The inputs dpukit-bench times for ``op`` at ``size`` (run's default
    seed), end to end, so that a DPDK tool works on the same bytes."""
    subprocess.run([str(tool_path(TOOL)), "inputs", "--op", op, "--size", str(size), "--out", path],
                   check=True, capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def main_lcore_twin(ctx: Context) -> Iterator[None]:
    """A busy loop on DPDK_MAIN_CPU while the block runs. The DPDK tools'
    main lcore busy-waits there for the whole run (rte_eal_mp_wait_lcore
    spins), while dpukit-bench's main thread sleeps; on a shared machine that
    leaves other work only TOOLS_CPU to run on beside the tool's worker, and
    CPU 0 as well beside ours. With this twin both sides occupy the same
    CPUs. Nothing runs when a report is rebuilt."""
    if ctx.replay:
        yield
        return
    proc = subprocess.Popen(["taskset", "-c", DPDK_MAIN_CPU, sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def cell_of(v: Sequence[float]) -> str:
    return f"{fmt_sig(statistics.median(v))} [{fmt_sig(min(v))}-{fmt_sig(max(v))}]"


@experiment(
    "bench.tools",
    title="bench.tools: the lib and dev backends against the libraries' and DPDK's own tools",
    description="dpukit-bench's lib AES-128-GCM and SHA-256 beside `openssl speed`, and its dev backend beside "
                "`dpdk-test-crypto-perf` and `dpdk-test-compress-perf` on the same PMDs, CPU and sizes.",
    tools=[TOOL],
)
def tools(ctx: Context) -> Section:
    sizes = [1024] if ctx.quick else [64, 256, 1024]
    rounds = 1 if ctx.quick else 5
    seconds = 1
    ours_args = ["--backend", "lib", "--threads", 1, "--place", "host", "--host-cpus", TOOLS_CPU,
                 "--warmup", 0.2, "--min-time", 0.3 if ctx.quick else 0.5, "--repetitions", 3]
    # aes: openssl speed sets the key and the IV on every record (it calls
    # EVP_CipherInit_ex with the key each time): the same work is our aes
    # with key_schedule=per_packet; the default (key once per SA) is shown too.
    cases = [("aes-128-gcm", "aes", ["--param", "aes.key_schedule=per_packet"]),
             ("aes-128-gcm", "aes", []), ("sha256", "sha256", [])]
    ours: dict[tuple[str, str, int], list[float]] = {}
    theirs: dict[tuple[str, int], list[float]] = {}
    commands: list[str] = []
    steps, step = rounds * (len(cases) * len(sizes) + 2 * len(sizes)), 0
    for rnd in range(rounds):
        for size in sizes:
            for alg, op, extra in cases:  # interleaved: ours and theirs, size by size
                step += 1
                tag = "per_packet" if extra else "once"
                if op == "sha256":
                    tag = "-"
                ctx.progress(f"round {rnd + 1}: dpukit-bench {op} ({tag}) {size} B", step, steps)
                r = run_bench(ctx, ["--ops", op, "--sizes", size, *extra, *ours_args], f"{op}-{tag}-{size}-r{rnd}")
                ours.setdefault((op, tag, size), []).append(r["figures"]["points"][0]["mops"])
                if extra or op == "sha256":
                    step += 1
                    ctx.progress(f"round {rnd + 1}: openssl speed {alg} {size} B", step, steps)
                    s = ctx.measured(f"openssl-{alg}-{size}-r{rnd}", lambda: openssl_speed(alg, size, seconds))
                    theirs.setdefault((alg, size), []).append(s["mops"])
                    if rnd == 0:
                        commands.append(s["command"])

    sec = Section("bench.tools: the lib and dev backends against the libraries' and DPDK's own tools")
    sec.paragraph(
        f"`dpukit-bench run --backend lib` and `openssl speed -evp ... -elapsed` (wall clock) on the same CPU "
        f"({TOOLS_CPU}), the same input sizes, interleaved {rounds} round(s); medians over the rounds, ranges in "
        "brackets. `openssl speed` sets the AES key and IV on every record (EVP_CipherInit_ex with the key), so "
        "the same-work comparison is our `aes` with `--param aes.key_schedule=per_packet`; our default keeps the "
        "key per security association, as an ESP or TLS endpoint does, and is shown for reference. SHA-256 is a "
        "one-shot EVP_Digest per input on both sides.")
    rows = []
    for size in sizes:
        for alg, op, tag in (("aes-128-gcm", "aes", "per_packet"), ("sha256", "sha256", "-")):
            o, t = ours[(op, tag, size)], theirs[(alg, size)]
            mo, mt = statistics.median(o), statistics.median(t)
            rows.append([f"{op} ({tag})" if tag != "-" else op, size, cell_of(o), cell_of(t), fmt_sig(mo / mt)])
        rows.append(["aes (once, default)", size, cell_of(ours[("aes", "once", size)]), "-", "-"])
    sec.table(["operator", "bytes", "dpukit-bench lib Mops", "openssl speed Mops", "ours / theirs"], rows,
              caption="Same work, same CPU, same sizes")
    sec.paragraph("openssl speed commands (first round): " + "; ".join(f"`{c}`" for c in commands))
    dev_tools(ctx, sec, rounds)
    return sec


def dev_tools(ctx: Context, sec: Section, rounds: int) -> None:
    """The dev backend beside dpdk-test-crypto-perf and dpdk-test-compress-perf
    (issue 25: within 10 %), interleaved rounds, ABBA order."""
    sizes = DEV_TOOL_SIZES
    found = ctx.measured("dpdk_tools", lambda: {t: shutil.which(t) is not None
                                                for t in ("dpdk-test-crypto-perf", "dpdk-test-compress-perf")})
    missing = [t for t, ok in found.items() if not ok]
    if missing:
        sec.paragraph(f"Not installed here: {', '.join(missing)}; their rows are left out. Debian ships them in the "
                      f"`{DPDK_TOOLS_PACKAGE}` package (`sudo apt-get install {DPDK_TOOLS_PACKAGE}`; "
                      "scripts/apt-packages.txt lists it, so `make setup` installs it).")
    cases = [(op, what) for op, what, _ in CRYPTO_PERF_CASES if found["dpdk-test-crypto-perf"]]
    if found["dpdk-test-compress-perf"]:
        cases.append(("compress", f"raw DEFLATE, dynamic Huffman codes, compressdev level {COMPRESS_LEVEL}, "
                                  "32 KiB window, one stateless operation per input"))
    if not cases:
        return
    options = {op: o for op, _, o in CRYPTO_PERF_CASES}
    ours_args = ["--backend", "dev", "--threads", 1, "--place", "host", "--host-cpus", TOOLS_CPU,
                 "--warmup", 0.2, "--min-time", 0.3 if ctx.quick else 0.5, "--repetitions", 3]
    ours: dict[tuple[str, int], list[float]] = {}
    theirs: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}
    commands: dict[str, str] = {}
    devices: dict[str, str] = {}
    steps, step = rounds * len(sizes) * len(cases) * 2, 0
    busy_before = ctx.measured("dev_tools_busy_before", background_busy)
    with tempfile.TemporaryDirectory(prefix="dpukit-bench-tools-") as tmp:
        for rnd in range(rounds):
            for size in sizes:
                for op, _ in cases:
                    def mine() -> float:
                        with main_lcore_twin(ctx):
                            r = run_bench(ctx, ["--ops", op, "--sizes", size, *ours_args], f"dev-{op}-{size}-r{rnd}")
                        pt = r["figures"]["points"][0]
                        devices[op] = pt.get("device", "")
                        return pt["mops"]

                    def tool() -> dict[str, Any]:
                        if op != "compress":
                            return crypto_perf(options[op], size)
                        path = os.path.join(tmp, f"compress-{size}.bin")
                        if not os.path.exists(path):
                            write_operator_inputs("compress", size, path)
                        return compress_perf(path, size)

                    # ABBA: ours first in even rounds, theirs first in odd ones.
                    order = ("ours", "theirs") if rnd % 2 == 0 else ("theirs", "ours")
                    for side in order:
                        step += 1
                        ctx.progress(f"round {rnd + 1}: {side} {op} {size} B", step, steps)
                        if side == "ours":
                            o = mine()
                        else:
                            t = ctx.measured(f"dpdk-tool-{op}-{size}-r{rnd}", tool)
                            commands.setdefault(op, t["command"])
                    ours.setdefault((op, size), []).append(o)
                    theirs.setdefault((op, size), []).append(t["mops"])
                    ratios.setdefault((op, size), []).append(o / t["mops"])

    busy_after = ctx.measured("dev_tools_busy_after", background_busy)
    sec.paragraph(
        f"The dev backend against DPDK's own perf tools, on the same PMDs ({CRYPTO_PMD}, {COMPRESS_PMD}), the same "
        f"operation and sizes, one worker on CPU {TOOLS_CPU} (the tools' main lcore, which only waits, on CPU "
        f"{DPDK_MAIN_CPU}), bursts of {DEV_TOOL_BURST} on both sides: dpukit-bench's dev kernels keep a burst of "
        "operations in flight, as the tools do. Interleaved rounds in ABBA order; medians over the rounds, ranges "
        "in brackets; the ratio is of the medians, with the range of the per-round ratios. The goal is within 10 % "
        "(ours / theirs at least 0.9). dpdk-test-compress-perf compresses dpukit-bench's own inputs for the "
        "operator (`dpukit-bench inputs --op compress`), cut into one operation per input; it prints Gbps to two "
        "decimals (at 64 B, 0.01 Gbps is about 12 % of the figure), converted to Mops at the size. "
        f"dpdk-test-crypto-perf cycles through {CRYPTO_PERF_POOL} buffers (`--pool-sz`; its default, 8192, is 8 MiB "
        "at 1 KiB, where dpukit-bench's pool holds 256 inputs; fewer do not start). The tools' main "
        f"lcore busy-waits on CPU {DPDK_MAIN_CPU} for the whole run; dpukit-bench's main thread sleeps, so each of "
        f"its runs has a busy loop pinned to CPU {DPDK_MAIN_CPU} beside it and both sides occupy the same CPUs.")
    shown = [f"{label} {100 * b:.0f} %" for label, b in (("before", busy_before), ("after", busy_after))
             if b is not None]
    if shown:
        sec.paragraph("Other work on the machine while nothing of ours ran (all CPUs, /proc/stat over 0.5 s): "
                      + ", ".join(shown) + ". Both sides share CPU " + TOOLS_CPU + " with that work, round by round.")
    rows = []
    what = dict(cases)
    for size in sizes:
        for op, _ in cases:
            o, t, q = ours[(op, size)], theirs[(op, size)], ratios[(op, size)]
            ratio = statistics.median(o) / statistics.median(t)
            rows.append([op, what[op], devices.get(op) or "-", size, cell_of(o), cell_of(t),
                         f"{fmt_sig(ratio)} [{fmt_sig(min(q))}-{fmt_sig(max(q))}]",
                         "met" if ratio >= 0.9 else "missed"])
    tool_name = {"compress": "dpdk-test-compress-perf"}
    sec.table(["operator", "operation", "dpukit-bench's PMD", "bytes", "dpukit-bench dev Mops", "DPDK tool Mops", "ours / theirs",
               "within 10 %"], rows,
              caption="dev backend against " + ", ".join(sorted({tool_name.get(op, "dpdk-test-crypto-perf")
                                                                  for op, _ in cases})) + ", same PMD and CPU")
    sec.paragraph("DPDK tool commands (first round, 64 B): " + "; ".join(f"`{c}`" for c in commands.values()))
    sec.paragraph("dpukit-bench: `dpukit-bench run --ops OP --backend dev --sizes N --threads 1 --place host "
                  f"--host-cpus {TOOLS_CPU} --warmup 0.2 --min-time {0.3 if ctx.quick else 0.5} --repetitions 3`.")


# -- bench.lpm: lib's LPM against DPDK's lpm_perf_autotest -------------------

LPM_ROUNDS = 3
LPM_EAL = ["--no-huge", "--no-pci", "-m", "512", "--no-shconf", "--no-telemetry", "-l", TOOLS_CPU]
LPM_CYCLES = {"single": "Average LPM Lookup:", "bulk": "BULK LPM Lookup:", "x4": "LPM LookupX4:"}


def parse_lpm_perf(text: str) -> dict[str, float]:
    """Cycles per lookup from lpm_perf_autotest's output, by loop (LPM_CYCLES' keys)."""
    cycles = {}
    for key, label in LPM_CYCLES.items():
        m = re.search(re.escape(label) + r"\s*([0-9.]+) cycles", text)
        if m:
            cycles[key] = float(m.group(1))
    return cycles


def lpm_perf_autotest(timeout: float) -> dict[str, Any]:
    """DPDK's own LPM benchmark (``dpdk-test``, package dpdk-dev), pinned to
    TOOLS_CPU: cycles per lookup of its single, bulk and x4 loops."""
    cmd = ["taskset", "-c", TOOLS_CPU, "dpdk-test", *LPM_EAL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DPDK_TEST": "lpm_perf_autotest"})
    text = proc.stdout + proc.stderr
    cycles = parse_lpm_perf(text)
    if proc.returncode != 0 or len(cycles) != len(LPM_CYCLES):
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise RuntimeError(f"{' '.join(cmd)} (DPDK_TEST=lpm_perf_autotest) exited {proc.returncode}: {tail}")
    return {"cycles": cycles, "command": "DPDK_TEST=lpm_perf_autotest " + " ".join(cmd)}


def lpm_layout_bench(timeout: float) -> dict[str, float]:
    """bench/bench/lpm_layout_bench.cc: rte_lpm_lookup_bulk on addresses in a
    compact array vs in separate packets; lookups per second by case."""
    cmd = ["taskset", "-c", TOOLS_CPU, str(tool_path("bench_bench")), "--benchmark_filter=Lpm",
           "--benchmark_format=json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    return {b["name"].removeprefix("BM_LpmBulk_"): b["items_per_second"] for b in data["benchmarks"]}


@experiment(
    "bench.lpm",
    title="bench.lpm: the lib LPM against DPDK's lpm_perf_autotest",
    description="rte_lpm lookups through dpukit-bench beside dpdk-test's lpm_perf_autotest on its own table, and "
                "a micro-benchmark that separates the address layout from the library (full mode).",
    tools=[TOOL],
)
def lpm(ctx: Context) -> Section:
    sec = Section("bench.lpm: the lib LPM against DPDK's lpm_perf_autotest")
    if skipped_in_quick_mode(ctx, sec, "bench.lpm", " (each run builds a 1 M-route table: minutes)"):
        return sec
    # input=address is the test's work (addresses from one compact array);
    # input=packet is the operator's (each address read from its packet).
    inputs = {"address": "4-byte addresses in one array (the test's work)",
              "packet": "the destination of 64-byte packets (the operator's work)"}

    def ours_args(mode: str) -> list[Any]:
        return ["--ops", "lpm", "--backend", "lib", "--sizes", 64, "--threads", 1, "--place", "host",
                "--host-cpus", TOOLS_CPU, "--param", f"lpm.table=dpdk-perf,lpm.addresses=uniform,lpm.input={mode}",
                "--warmup", 0.2, "--min-time", 1, "--repetitions", 5]

    theirs: dict[str, list[float]] = {}
    ours: dict[str, list[float]] = {m: [] for m in inputs}
    micro: dict[str, list[float]] = {}
    tsc_hz, command = 0.0, ""
    steps = 2 + len(inputs)
    for rnd in range(LPM_ROUNDS):  # interleaved: the measurements in turn, each round
        ctx.progress(f"round {rnd + 1}: dpdk-test lpm_perf_autotest", steps * rnd + 1, steps * LPM_ROUNDS)
        t = lpm_perf_autotest(ctx.timeout or 900.0)
        command = t["command"]
        for k, v in t["cycles"].items():
            theirs.setdefault(k, []).append(v)
        for i, mode in enumerate(inputs):
            ctx.progress(f"round {rnd + 1}: dpukit-bench lpm, input={mode}", steps * rnd + 2 + i, steps * LPM_ROUNDS)
            r = run_bench(ctx, ours_args(mode), f"lpm-{mode}-r{rnd}")
            ours[mode].append(r["figures"]["points"][0]["mops"])
            tsc_hz = r["figures"]["dpdk"]["tsc_hz"]
        ctx.progress(f"round {rnd + 1}: bench_bench (layout)", steps * rnd + steps, steps * LPM_ROUNDS)
        for k, v in lpm_layout_bench(ctx.timeout or 900.0).items():
            micro.setdefault(k, []).append(v / 1e6)

    def cell(v: Sequence[float]) -> str:
        return f"{fmt_sig(statistics.median(v))} [{fmt_sig(min(v))}-{fmt_sig(max(v))}]"

    mops = {k: [tsc_hz / c / 1e6 for c in v] for k, v in theirs.items()}
    bulk = statistics.median(mops["bulk"])
    sec.paragraph(
        f"{LPM_ROUNDS} interleaved rounds on CPU {TOOLS_CPU}; medians, ranges in brackets. DPDK's test prints cycles "
        f"per lookup (rdtsc; TSC {tsc_hz / 1e9:.2f} GHz), converted to M lookups/s. Both sides build the test's "
        "table (about 1.08 M routes of its depth mix, 2048 tbl8 groups) and look up uniformly random addresses. "
        f"The test: `{command}`. Ours: `dpukit-bench run {' '.join(map(str, ours_args('MODE')))}` with MODE "
        "address and packet.")
    rows = [[f"lpm_perf_autotest, {k}", cell(v), fmt_sig(statistics.median(v) / bulk)] for k, v in mops.items()]
    rows += [[f"dpukit-bench lpm (lib), input={mode}: {what}", cell(ours[mode]),
              fmt_sig(statistics.median(ours[mode]) / bulk)] for mode, what in inputs.items()]
    sec.table(["what", "M lookups/s", "/ test's bulk"], rows, caption="Same table, same addresses, same CPU")
    sec.paragraph(
        "Where the cost lies (bench/bench/lpm_layout_bench.cc, a 100,000-route table): rte_lpm_lookup_bulk in "
        "bursts of 32 with the addresses in a compact array (AddressArray, the test's loop) or read from "
        "separately allocated 64-byte packets (Packets); the operator's lib kernel on packets (Operator) and on an "
        "array in calls of 32, 512 and 4096 addresses (OperatorArray; the runner's calls have 4096). 4096 "
        "addresses keep the table's lines in cache; 1 Mi read the 64 MiB table at random, as the test's fresh "
        "batches do.")
    sec.table(["case", "M lookups/s"], [[k, cell(v)] for k, v in sorted(micro.items())],
              caption="rte_lpm_lookup_bulk by address layout")
    return sec


# -- bench.e2e: the end-to-end programs (§5, Figs. 14-16) ----------------------

E2E_SIZES, E2E_INTERVALS, E2E_ROUNDS = [64, 256, 1024], [0, 1, 5, 20, 100], 3


@experiment(
    "bench.e2e",
    title="bench.e2e: end-to-end programs, flow table and application recognition (Figs. 14-16)",
    description="UDP client and server in two network namespaces: flow table sw vs emulated hw, app recognition "
                "on host vs dpu (full mode).",
    tools=[TOOL],
)
def e2e(ctx: Context) -> Section:
    from dpukit import bench_e2e

    sec = Section("bench.e2e: end-to-end programs, flow table and application recognition (Figs. 14-16)")
    if skipped_in_quick_mode(ctx, sec, "bench.e2e"):
        return sec
    tool = tool_path(TOOL)
    out = ctx.runs_dir / "bench.e2e"
    sizes, intervals, rounds = E2E_SIZES, E2E_INTERVALS, E2E_ROUNDS
    ctx.progress("flow table: sw vs hw")
    flow = bench_e2e.run_flowtable(tool, sizes, intervals, ("sw", "hw"), 1.0, out, rounds=rounds)
    ctx.progress("application recognition: host vs dpu")
    app = bench_e2e.run_apprecog(tool, sizes, intervals, ("host", "dpu"), 1.0, out, rounds=rounds)
    records = flow + app
    problems = [p for r in records for p in r.get("problems", [])]
    net = records[0].get("network", "") if records else ""
    sec.paragraph(
        "`dpukit-bench e2e-client` sends UDP datagrams of each size at each interval for 1 s to `dpukit-bench "
        "e2e-server` in another network namespace (veth); " + (f"network: {net}; " if net else "") +
        f"{rounds} rounds, the modes compared interleaved within each round; medians, ranges in brackets. "
        "Flow table: the server counts the synthetic 5-tuples in a software hash table (sw) or, in the hw version, "
        "in core's emulated hardware flow table on a thread standing for the NIC (its CPU is reported as hw; "
        "misses go to the software path, which requests insertion at the table's rate limit). Application "
        "recognition: Hyperscan (the rxp_match operator) classifies each payload; the server then hashes it "
        "(sha256), compresses it (compress) or echoes it, and replies; on the dpu place the matching runs on a "
        "dpu thread and the action on a host thread. The client has a CPU to itself; every server thread shares "
        "the other CPU with its own CPU accounting. No DPU is attached: the dpu place is another thread of this "
        "x86 VM and the hw table is a CPU thread, so the emulation shows where CPU time goes, not the speed-up "
        "of real offload hardware.")
    if problems:
        sec.paragraph("Problems found by the records' checks: " + "; ".join(sorted(set(problems))[:10]))
    rows = []
    for s in bench_e2e.summarize(records):
        def med(k: str, scale: float = 1.0) -> str:
            v = s[k]
            return f"{fmt_sig(v['median'] * scale)} [{fmt_sig(v['min'] * scale)}-{fmt_sig(v['max'] * scale)}]"
        util = ", ".join(f"{p} {s[f'util_{p}']['median'] * 100:.0f}%" for p in ("host", "dpu", "hw")
                         if s[f"util_{p}"]["median"] > 0)
        rows.append([s["program"], s["mode"], s["size"], f"{s['interval_us']:g}", med("client_pps", 1e-3),
                     med("throughput_pps", 1e-3), med("loss"), util or "-",
                     med("rtt_p50") if "rtt_p50" in s else "-", med("rtt_p99") if "rtt_p99" in s else "-"])
    sec.table(["program", "mode", "bytes", "interval us", "sent kpps", "served kpps", "loss", "server CPU",
               "RTT p50 us", "RTT p99 us"], rows, caption="Per point: medians over the rounds")
    ctx.plots_dir.mkdir(parents=True, exist_ok=True)
    paths = [*bench_e2e.plot_fig14(flow, ctx.plots_dir), bench_e2e.plot_fig15(app, ctx.plots_dir),
             bench_e2e.plot_fig16(app, ctx.plots_dir)]
    for p in paths:
        sec.image(f"plots/{p.name}", p.stem, p.stem.replace("_", " "))
    return sec


# -- bench.characterize: workload characteristics (§4.2.2, Figs. 8-10) --------


@experiment(
    "bench.characterize",
    title="bench.characterize: operators and Table 5's programs, characterized (Figs. 8-10)",
    description="IPC, TLB and L1D miss ratios and the instruction mix per operator at 64 B: hardware counters, or "
                "valgrind (simulated) where the machine has none; radar charts and PCA (full mode).",
    tools=[TOOL],
)
def characterize(ctx: Context) -> Section:
    from dpukit import bench_profile

    sec = Section("bench.characterize: operators and Table 5's programs, characterized (Figs. 8-10)")
    if skipped_in_quick_mode(ctx, sec, "bench.characterize"):
        return sec
    tool = tool_path(TOOL)
    everything = list_operators()
    ops = [o.name for o in everything if o.scenario != "program"]
    programs = [o.name for o in everything if o.scenario == "program"]
    records = bench_profile.characterize(tool, ops + programs, size=64, backend="lib",
                                         progress=lambda line: ctx.progress(line))
    op_recs = [r for r in records if r["op"] in ops]
    prog_recs = [r for r in records if r["op"] in programs]
    simulated = any(r.get("simulated") for r in records)
    sec.paragraph(
        "Each operator (lib backend, 64 B inputs, one thread) and each composed program of Table 5 runs twice "
        "with N1 and N2 = 2 N1 units of work; every count is taken as counts(N2) - counts(N1), so start-up "
        "(EAL, tables, inputs, the ref check) cancels. "
        + ("This machine exposes no hardware performance counters, so the figures are SIMULATED by valgrind "
           "(cachegrind: instructions, loads, stores, branches, simulated L1D misses; callgrind + objdump: the "
           "instruction mix). IPC and TLB miss ratios cannot be simulated and are not measured."
           if simulated else "The figures are hardware counts (perf_event_open)."))
    sec.code(bench_profile.table(records))
    path, rel = ctx.plot_path("radar")
    bench_profile.radar_chart(op_recs, path)
    sec.image(rel, "radar charts", "Fig. 8: per operator" + (" (simulated, valgrind)" if simulated else ""))
    if prog_recs:
        path, rel = ctx.plot_path("pca")
        var = bench_profile.pca_plot(op_recs, prog_recs, path)
        sec.image(rel, "PCA", "Fig. 10: PCA of the operators and the composed programs; explained variance "
                  + ", ".join(f"{v:.0%}" for v in var[:2]) + (" (simulated)" if simulated else ""))
    return sec
