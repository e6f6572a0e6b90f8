"""measure.soak: ``dpukit-measure live`` left running on a veth while heavy
flows churn through it in waves (full eval only).

Each wave is a pcap of flows no earlier wave had (``gen --preset churn
--first-flow K*flows``): a tenth of them heavy, with equal counts, the rest
mice. ``tcpreplay`` sends the waves one after the other at a fixed rate from a
second network namespace. When a wave ends its flows go idle, their hardware
entries age out, and Duet should give their records back. Every few seconds
the soak reads the live process's RSS and, from ``/metrics``, the records in
use, the records-full counter and the hardware entries. At the end the heavy
flows' IPFIX records, collected by ``nfcapd`` and summed per flow by
``nfdump``, are compared with each wave's true counts. The series are
plotted over time, and each is judged flat or not.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from dpukit.errors import DpukitError
from dpukit.experiment_support import rss_kib
from dpukit.procs import free_udp_port
from dpukit.experiments import Context, experiment, skipped_in_quick_mode
from dpukit.measure_queues import LiveUnavailable, veth_queues
from dpukit.measure_traces import TOOL
from dpukit.native import validate_result
from dpukit.paths import display_path, tool_path
from dpukit.plots import Line, Panel, panels_plot
from dpukit.report import Section
from dpukit.units import fmt_int, fmt_sig, fmt_thousands

TITLE = "measure.soak: live Duet on a veth for 30 minutes, heavy flows churning in waves"
SECONDS_ENV = "DPUKIT_MEASURE_SOAK_SECONDS"
DEFAULT_SECONDS = 1800

TOP = 50                 # --heavy-threshold, packets
RATE = 6000              # packets/s, tcpreplay --pps
WAVE_SECONDS = 10        # one wave's pcap lasts this long at RATE
WAVE_FLOWS = 5500        # flows a wave may use; a tenth (550) heavy, ~98 packets each
HEAVY_SHARE = 0.9        # the heavy flows' share of a wave's packets
# --hw-idle-timeout-ms: a finished wave's entries age out within a second. A
# heavy flow's packets are ~100 ms apart (exponential gaps, as a random
# shuffle gives), so a gap of 1 s inside a wave is rare (e^-10 a gap). At
# 500 ms (e^-5 a gap, ~48 gaps after promotion) about a quarter of the flows
# would age mid-wave, and in live's records-only mode what such a flow sends
# afterwards stays in the sketch below TOP and is never exported.
IDLE_TIMEOUT_MS = 1000
EXPORT_INTERVAL_S = 1.0  # --export-interval
# --sketch-epoch (live's default, given so the commands show it): Duet's
# counters hold one to two epochs of light traffic, so their noise does not
# grow over the soak; a heavy flow reaches TOP ~5 s into its 10-s wave.
SKETCH_EPOCH_S = 10
SAMPLE_S = 3.0           # RSS and /metrics: not a divisor of a wave's 10 s, so samples move across its phases
# After the last wave: aging, the control path's reclamation and two reports.
DRAIN_S = IDLE_TIMEOUT_MS / 1000 + 3 * EXPORT_INTERVAL_S + 1
SEED = 1

# The flatness rule: the least-squares line through the second half of a
# series may move by at most FLAT_FRACTION of the half's mean (or of the
# series' floor, where the mean is near zero) over that half.
FLAT_FRACTION = 0.05


# -- pure parts (tested in python/tests/test_measure_soak.py) -------------------

FlowTuple = tuple[str, str, int, int, int]  # src, dst, sport, dport, proto

_METRIC_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text format -> {name: [(labels, value), ...]}; comments skipped.
    Raises ValueError naming the line where a sample does not parse."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _METRIC_LINE.match(line)
        if not m:
            raise ValueError(f"/metrics line {n} is not a sample: {line!r}")
        labels = dict(_LABEL.findall(m.group(2) or ""))
        try:
            value = float(m.group(3))
        except ValueError:
            raise ValueError(f"/metrics line {n}: {m.group(3)!r} is not a number") from None
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def metric(parsed: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float | None:
    """The sum of ``name``'s samples whose labels include ``labels``; None where there is none."""
    hits = [v for ls, v in parsed.get(name, []) if all(ls.get(k) == want for k, want in labels.items())]
    return sum(hits) if hits else None


def parse_nfdump(text: str) -> dict[FlowTuple, int]:
    """``nfdump -q -N -A srcip,dstip,srcport,dstport,proto -o fmt:%sa,%da,%sp,%dp,%pr,%pkt``
    -> packets per flow (summed again, in case one flow spans files)."""
    out: dict[FlowTuple, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 6:
            raise ValueError(f"nfdump line has {len(parts)} fields, not 6: {line!r}")
        sa, da, sp, dp, pr, pkt = parts
        proto = {"TCP": 6, "UDP": 17}.get(pr.upper(), None)
        key = (sa, da, int(sp), int(dp), proto if proto is not None else int(pr))
        out[key] = out.get(key, 0) + int(pkt)
    return out


def read_truth(path: Path, top: int) -> dict[FlowTuple, int]:
    """The flows of a ``run --dump-estimates`` CSV with at least ``top`` packets: their true counts."""
    out: dict[FlowTuple, int] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            n = int(r["true_count"])
            if n >= top:
                out[(r["src_ip"], r["dst_ip"], int(r["src_port"]), int(r["dst_port"]), int(r["proto"]))] = n
    return out


@dataclass
class WaveError:
    flows: int      # heavy flows in the wave
    missing: int    # of them, not exported at all (error 1)
    median: float   # relative error |exported - true| / true
    max: float
    above_tenth: int = 0  # flows off by more than 10 %


def wave_error(truth: dict[FlowTuple, int], exported: dict[FlowTuple, int]) -> WaveError:
    """The relative error of each of a wave's heavy flows, its exported sum against its true count
    (a flow never exported counts as 0 packets: error 1)."""
    if not truth:
        raise ValueError("a wave with no heavy flow")
    errs = [abs(exported.get(k, 0) - t) / t for k, t in truth.items()]
    missing = sum(1 for k in truth if k not in exported)
    return WaveError(len(truth), missing, statistics.median(errs), max(errs), sum(1 for e in errs if e > 0.1))


def worst_flows(truth: dict[FlowTuple, int], exported: dict[FlowTuple, int], n: int = 5) -> list[dict[str, Any]]:
    """A wave's ``n`` flows with the largest relative error: flow, true count, exported sum."""
    rows = sorted(truth.items(), key=lambda kv: -abs(exported.get(kv[0], 0) - kv[1]) / kv[1])[:n]
    return [{"flow": "%s:%d->%s:%d/%d" % (k[0], k[2], k[1], k[3], k[4]), "true": t, "exported": exported.get(k, 0)}
            for k, t in rows]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (units of y per unit of x)."""
    n = len(xs)
    if n < 2:
        raise ValueError("a slope needs two points")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a slope needs two distinct x")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


@dataclass
class Flatness:
    first_per_hour: float   # slope over the first half, per hour
    second_per_hour: float  # slope over the second half, per hour
    change: float           # the second half's line, end minus start
    tolerance: float        # FLAT_FRACTION of max(the second half's mean, floor)
    flat: bool


def flatness(xs: Sequence[float], ys: Sequence[float], floor: float,
             fraction: float = FLAT_FRACTION) -> Flatness | None:
    """Is the series flat? Halves split at the middle of its time span; the
    second half's fitted line may move by at most ``fraction`` of the half's
    mean (at least of ``floor``). None with fewer than two points a half."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    if not xs:
        return None
    mid = (xs[0] + xs[-1]) / 2
    first = [(x, y) for x, y in zip(xs, ys) if x < mid]
    second = [(x, y) for x, y in zip(xs, ys) if x >= mid]
    if len(first) < 2 or len(second) < 2:
        return None
    s1 = slope(*zip(*first))
    s2 = slope(*zip(*second))
    change = s2 * (second[-1][0] - second[0][0])
    tolerance = fraction * max(abs(statistics.fmean(y for _, y in second)), floor)
    return Flatness(s1 * 3600, s2 * 3600, change, tolerance, abs(change) <= tolerance)


def wave_peaks(samples: Sequence[dict[str, Any]], waves: Sequence[Wave], key: str) -> list[tuple[float, float]]:
    """(wave end, the largest ``key`` sampled during the wave or one sample
    period after it): a sawtooth that rises with each wave, judged by its
    peaks, not by where 3-s samples happen to fall on it."""
    out = []
    for w in waves:
        v = [s[key] for s in samples if s.get(key) is not None and w.start <= s["seconds"] <= w.end + SAMPLE_S]
        if v:
            out.append((w.end, max(v)))
    return out


def hw_shares(samples: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(seconds, share of the packets counted in hardware since the previous
    sample) for each sample interval with packets in it."""
    out = []
    for a, b in zip(samples, samples[1:]):
        if None in (a.get("packets_hw"), a.get("packets_dpu"), b.get("packets_hw"), b.get("packets_dpu")):
            continue
        hw, dpu = b["packets_hw"] - a["packets_hw"], b["packets_dpu"] - a["packets_dpu"]
        if hw + dpu > 0:
            out.append((b["seconds"], hw / (hw + dpu)))
    return out


def health_checks(samples: Sequence[dict[str, Any]], records: float | None,
                  errors: Sequence[tuple[float, WaveError]]) -> list[tuple[str, str, bool]]:
    """(check, what was seen, passed): records in use below their number, the
    records-full counter at 0, every heavy flow exported."""
    used = [s["records_used"] for s in samples if s.get("records_used") is not None]
    full = [s["records_full"] for s in samples if s.get("records_full") is not None]
    missing = sum(e.missing for _, e in errors)
    flows = sum(e.flows for _, e in errors)
    out = []
    if used and records:
        out.append(("records in use stay below their number", f"at most {fmt_int(max(used))} of {fmt_int(records)}",
                    max(used) < records))
    if full:
        out.append(("the records-full counter stays 0", f"{fmt_int(full[-1])} packets at the end", full[-1] == 0))
    out.append(("every heavy flow is exported", f"{fmt_int(flows - missing)} of {fmt_int(flows)}", missing == 0))
    return out


# -- the run ----------------------------------------------------------------------


class SoakSkipped(Exception):
    """What the machine lacks for the soak (root, a tool, XDP)."""


@dataclass
class Wave:
    index: int
    first_flow: int
    start: float  # seconds since the live run started
    end: float
    packets: int
    truth: dict[FlowTuple, int]


def missing_requirements() -> str:
    """Why this machine cannot run the soak ('' when it can)."""
    if os.geteuid() != 0:
        return "it needs root (XDP, AF_XDP, a network namespace)"
    missing = [t for t in ("ip", "tcpreplay", "nfcapd", "nfdump") if shutil.which(t) is None]
    if missing:
        return "not installed: " + ", ".join(missing) + " (Debian: iproute2, tcpreplay, nfdump)"
    return ""


def _run(argv: Sequence[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


def sample(t: float, pid: int, port: int) -> dict[str, Any]:
    m = scrape(port)
    return {"seconds": t, "rss_kib": rss_kib(pid),
            "records_used": metric(m, "dpukit_measure_duet_records_used"),
            "records": metric(m, "dpukit_measure_duet_records"),
            "records_full": metric(m, "dpukit_measure_duet_records_full_total"),
            "records_retired": metric(m, "dpukit_measure_duet_records_retired_total"),
            "hw_entries": metric(m, "dpukit_measure_hw_entries"),
            "promotions": metric(m, "dpukit_measure_promotions_total"),
            "hw_aged": metric(m, "dpukit_measure_hw_aged_total"),
            "packets_hw": metric(m, "dpukit_measure_packets_total", place="hw"),
            "packets_dpu": metric(m, "dpukit_measure_packets_total", place="dpu"),
            "drops": metric(m, "dpukit_measure_drops_total")}


def wait_metrics_port(live: subprocess.Popen, stderr_path: Path, timeout: float = 30) -> int:
    """The port `live --metrics 127.0.0.1:0` serves on, once its program is attached."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = stderr_path.read_text(errors="replace")
        m = re.search(r"/metrics on port (\d+)", text)
        if m:
            return int(m.group(1))
        if live.poll() is not None:
            raise SoakSkipped("`dpukit-measure live` refused to start here: "
                              + (text.strip().splitlines() or ["(no message)"])[-1])
        time.sleep(0.1)
    raise RuntimeError("dpukit-measure live did not start within 30 s: " + stderr_path.read_text()[-500:])


def snapshot_tool(work: Path) -> Path:
    """A copy of the tool and its XDP object: a rebuild during a long soak must not change what runs."""
    exe = tool_path(TOOL)
    bpf = exe.parent.parent / "lib" / "duet_hw.bpf.o"
    (work / "bin").mkdir()
    (work / "lib").mkdir()
    shutil.copy2(exe, work / "bin" / TOOL)
    if bpf.is_file():
        shutil.copy2(bpf, work / "lib" / bpf.name)
    return Path("bin") / TOOL


def gen_argv(exe: Path, index: int) -> list[str]:
    return [str(exe), "gen", "--preset", "churn", "--flows", str(WAVE_FLOWS), "--packets",
            str(RATE * WAVE_SECONDS), "--heavy-share", str(HEAVY_SHARE), "--first-flow", str(index * WAVE_FLOWS),
            "--seed", str(SEED), "--out", f"wave-{index}.pcap"]


def truth_argv(exe: Path, index: int) -> list[str]:
    return [str(exe), "run", "--trace", f"wave-{index}.pcap", "--algo", "none",
            "--dump-estimates", f"wave-{index}.csv", "--json", f"wave-{index}.json"]


def prepare_wave(work: Path, exe: Path, index: int) -> tuple[Path, dict[FlowTuple, int]]:
    """Writes wave ``index``'s pcap; its heavy flows' true counts (the tool's parser reads the pcap back)."""
    for argv in (gen_argv(exe, index), truth_argv(exe, index)):
        p = _run(argv, work)
        if p.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {p.stderr.strip()}")
    truth = read_truth(work / f"wave-{index}.csv", TOP)
    for suffix in ("csv", "json"):
        (work / f"wave-{index}.{suffix}").unlink()
    return work / f"wave-{index}.pcap", truth


@dataclass
class SoakRun:
    seconds: int
    waves: list[Wave]
    samples: list[dict[str, Any]]
    exported: dict[FlowTuple, int]
    live: dict[str, Any]       # the live run's validated result
    live_stderr: str
    commands: list[list[str]]
    replay_seconds: list[float]


def run_soak(ctx: Context, seconds: int) -> SoakRun:
    work = Path(tempfile.mkdtemp(prefix="dpukit-soak-"))
    try:
        return _run_soak_in(ctx, seconds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_soak_in(ctx: Context, seconds: int, work: Path) -> SoakRun:
    exe = snapshot_tool(work)
    tag = str(os.getpid() % 100000)
    flows_dir = work / "flows"
    flows_dir.mkdir()
    commands: list[list[str]] = []
    with veth_queues(tag, 1) as (ns, sender, measured):
        port = free_udp_port()
        nfcapd_argv = ["nfcapd", "-w", "flows", "-b", "127.0.0.1", "-p", str(port)]
        nfcapd = subprocess.Popen(nfcapd_argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        live_json = ctx.runs_dir / f"{ctx.name}-live.json"
        ctx.runs_dir.mkdir(parents=True, exist_ok=True)
        live_json.unlink(missing_ok=True)
        live_argv = [str(exe), "live", "--iface", measured, "--algo", "duet", "--heavy-threshold", str(TOP),
                     "--hw-idle-timeout-ms", str(IDLE_TIMEOUT_MS), "--export-interval", f"{EXPORT_INTERVAL_S:g}",
                     "--sketch-epoch", str(SKETCH_EPOCH_S), "--ipfix", f"127.0.0.1:{port}", "--metrics", "127.0.0.1:0",
                     "--duration", str(seconds + 300), "--json", str(live_json)]
        stderr_path = work / "live.stderr"
        with open(stderr_path, "w") as err:
            live = subprocess.Popen(live_argv, cwd=work, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        samples: list[dict[str, Any]] = []
        waves: list[Wave] = []
        replay_seconds: list[float] = []
        stop = threading.Event()
        try:
            metrics_port = wait_metrics_port(live, stderr_path)
            t0 = time.monotonic()

            def sampler() -> None:
                while not stop.is_set():
                    try:
                        samples.append(sample(time.monotonic() - t0, live.pid, metrics_port))
                    except (OSError, ValueError, DpukitError):
                        if live.poll() is not None:
                            return
                    stop.wait(SAMPLE_S)

            thread = threading.Thread(target=sampler, daemon=True)
            thread.start()
            total_waves = max(1, int(seconds // WAVE_SECONDS))
            with ThreadPoolExecutor(max_workers=1) as pool:
                nxt = pool.submit(prepare_wave, work, exe, 0)
                index = 0
                while True:
                    pcap, truth = nxt.result()
                    elapsed = time.monotonic() - t0
                    if index > 0 and elapsed + WAVE_SECONDS > seconds:
                        pcap.unlink()
                        break
                    nxt = pool.submit(prepare_wave, work, exe, index + 1)
                    replay_argv = ["ip", "netns", "exec", ns, "tcpreplay", "-q", "-i", sender, "--pps", str(RATE),
                                   pcap.name]
                    if index == 0:
                        commands += [gen_argv(exe, 0), truth_argv(exe, 0), replay_argv]
                        ctx.progress(f"wave 1 of about {total_waves} ({RATE} packets/s, {WAVE_SECONDS} s each)")
                    elif index % 10 == 0:
                        ctx.progress(f"wave {index + 1} of about {total_waves}")
                    start = time.monotonic() - t0
                    p = _run(replay_argv, work, timeout=WAVE_SECONDS * 10 + 60)
                    end = time.monotonic() - t0
                    if p.returncode != 0:
                        raise RuntimeError(f"tcpreplay failed: {p.stderr.strip()}")
                    replay_seconds.append(end - start)
                    waves.append(Wave(index, index * WAVE_FLOWS, start, end, RATE * WAVE_SECONDS, truth))
                    pcap.unlink()
                    index += 1
            ctx.progress(f"{len(waves)} waves sent; {DRAIN_S:g} s for the last entries to age and be exported")
            time.sleep(DRAIN_S)
            stop.set()
            thread.join()
            samples.append(sample(time.monotonic() - t0, live.pid, metrics_port))
            live.send_signal(signal.SIGINT)
            live.wait(timeout=120)
        finally:
            stop.set()
            if live.poll() is None:
                os.killpg(live.pid, signal.SIGKILL)
                live.wait()
            time.sleep(0.5)  # the last IPFIX datagrams
            nfcapd.send_signal(signal.SIGTERM)
            try:
                nfcapd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                nfcapd.kill()
                nfcapd.wait()
            for w in work.glob("wave-*.pcap"):
                w.unlink()
    stderr = stderr_path.read_text(errors="replace")
    if live.returncode != 0:
        raise RuntimeError(f"dpukit-measure live exited {live.returncode}: {stderr[-2000:]}")
    result = validate_result(json.loads(live_json.read_text()), str(live_json))
    ctx.runs.append(result)
    dump_argv = ["nfdump", "-R", "flows", "-q", "-N", "-A", "srcip,dstip,srcport,dstport,proto",
                 "-o", "fmt:%sa,%da,%sp,%dp,%pr,%pkt"]
    dump = _run(dump_argv, work, timeout=600)
    if dump.returncode != 0:
        raise RuntimeError(f"nfdump failed: {dump.stderr.strip()}")
    commands = [commands[0], commands[1], nfcapd_argv, live_argv, *commands[2:], dump_argv]
    return SoakRun(seconds, waves, samples, parse_nfdump(dump.stdout), result, stderr, commands, replay_seconds)


# -- the report -------------------------------------------------------------------

SERIES = (
    # (sample key, label, unit, floor of the flatness tolerance)
    ("rss_kib", "live process RSS", "KiB", 1024.0),
    ("records_used", "Duet records in use", "records", 100.0),
    ("hw_entries", "hardware entries", "entries", 100.0),
)
ERROR_FLOOR = 0.2  # a median error below 0.2 may move by 1 point (5 % of 0.2)


def fmt_per_hour(x: float, unit: str) -> str:
    return f"{fmt_sig(x)} {unit}/h"


def flat_rows(run: SoakRun, errors: list[tuple[float, WaveError]]) -> list[tuple[str, str, Flatness | None]]:
    rows: list[tuple[str, str, Flatness | None]] = []
    # While waves were sent: after the last one, records and entries drain to 0 as they should.
    until = run.waves[-1].end if run.waves else float("inf")
    for key, label, unit, floor in SERIES:
        pts = [(s["seconds"], s[key]) for s in run.samples if s.get(key) is not None and s["seconds"] <= until]
        rows.append((label, unit, flatness([x for x, _ in pts], [y for _, y in pts], floor) if pts else None))
        if key != "rss_kib":
            peaks = wave_peaks(run.samples, run.waves, key)
            rows.append((label + ", peak per wave", unit,
                         flatness([x for x, _ in peaks], [y for _, y in peaks], floor) if peaks else None))
    xs = [t for t, _ in errors]
    rows.append(("median relative error per wave", "", flatness(xs, [e.median for _, e in errors], ERROR_FLOOR)))
    rows.append(("max relative error per wave", "", flatness(xs, [e.max for _, e in errors], ERROR_FLOOR)))
    return rows


@experiment(
    "measure.soak",
    title=TITLE,
    description="dpukit-measure live --algo duet on a veth for 30 minutes (DPUKIT_MEASURE_SOAK_SECONDS), "
                "tcpreplay sending waves of new heavy flows from a network namespace: RSS, records in use, "
                "hardware entries and each wave's IPFIX estimate error over time, and whether each is flat "
                "(full mode only; root).",
    tools=[TOOL],
)
def soak(ctx: Context) -> Section:
    sec = Section(TITLE)
    if skipped_in_quick_mode(ctx, sec, "measure.soak", " (it runs for 30 minutes)"):
        return sec
    seconds = int(os.environ.get(SECONDS_ENV, str(DEFAULT_SECONDS)))
    if seconds < 2 * WAVE_SECONDS:
        raise ValueError(f"{SECONDS_ENV}={seconds}: at least {2 * WAVE_SECONDS} s (two waves)")
    why = missing_requirements()
    if why:
        sec.paragraph(f"Skipped: {why}.")
        return sec
    try:
        run = run_soak(ctx, seconds)
    except (SoakSkipped, LiveUnavailable) as e:
        sec.paragraph(f"Skipped: {e}.")
        return sec
    write_series(ctx, run)
    describe(ctx, sec, run)
    return sec


def write_series(ctx: Context, run: SoakRun) -> None:
    """The samples and per-wave errors as JSON beside the runs (the plot's data)."""
    path = ctx.runs_dir / f"{ctx.name}-series.json"
    errors = [{"wave": w.index, "start": w.start, "end": w.end, **asdict(wave_error(w.truth, run.exported)),
               "worst": worst_flows(w.truth, run.exported)} for w in run.waves]
    path.write_text(json.dumps({"samples": run.samples, "waves": errors}, indent=1))


def describe(ctx: Context, sec: Section, run: SoakRun) -> None:
    f = run.live["figures"]
    duet, hw = f.get("duet", {}), f.get("hw", {})
    errors = [(w.end, wave_error(w.truth, run.exported)) for w in run.waves]
    heavy_keys = {k for w in run.waves for k in w.truth}
    heavy_sent = sum(len(w.truth) for w in run.waves)
    packets_sent = sum(w.packets for w in run.waves)
    send_seconds = sum(run.replay_seconds)
    records = duet.get("records") or next((s["records"] for s in run.samples if s.get("records")), None)
    full_warned = "promoted-flow records are used" in run.live_stderr
    sec.paragraph(
        f"`{TOOL} live --algo duet` measured one end of a veth pair for {fmt_int(f['seconds'])} s while "
        f"`tcpreplay --pps {RATE}` sent {len(run.waves)} waves into the other end from a network namespace "
        f"(generic XDP, one dpu worker). Each wave is `gen --preset churn` with {fmt_int(WAVE_FLOWS)} flows "
        f"numbered after the previous wave's (`--first-flow`), so every wave brings only new flows: a tenth of "
        f"them heavy, carrying {HEAVY_SHARE:.0%} of the wave's {fmt_int(RATE * WAVE_SECONDS)} packets in equal "
        f"shares, the rest mice. TOP is {TOP} packets; a wave's heavy flows reach it halfway and then go idle "
        f"when the wave ends, and their hardware entries age out after {IDLE_TIMEOUT_MS} ms "
        f"(`--hw-idle-timeout-ms`). Duet reports every {EXPORT_INTERVAL_S:g} s to `nfcapd`; the estimate of a "
        f"flow is the sum `nfdump` reads back for it. Every {SAMPLE_S:g} s the soak read the live process's "
        "VmRSS from /proc and the records in use, the records-full counter and the hardware entries from "
        "/metrics. The tool and its XDP object were copied before the start (`bin/`, `lib/` of the run's "
        "directory), so that a rebuild during the soak does not change what runs.")
    sec.table(["seconds", "waves", "heavy flows sent", "packets sent", "sent packets/s", "frames seen",
               "drops", "promotions", "hw entries aged", "records", "records full (packets)", "IPFIX records",
               "heavy flows exported", "other flows exported"],
              [[fmt_int(f["seconds"]), fmt_int(len(run.waves)), fmt_int(heavy_sent), fmt_int(packets_sent),
                fmt_int(packets_sent / send_seconds) if send_seconds else "n/a",
                fmt_int(f["frames"] - f["not_a_flow"]), fmt_int(f["drops"]), fmt_int(duet.get("promotions", 0)),
                fmt_int(hw.get("aged", 0)), fmt_int(records) if records else "n/a",
                fmt_int(duet.get("records_full", 0)), fmt_int(f.get("ipfix_records", 0)),
                fmt_int(len(heavy_keys & run.exported.keys())), fmt_int(len(run.exported.keys() - heavy_keys))]],
              caption="The soak run")
    if full_warned:
        sec.paragraph("The tool warned that all its promoted-flow records were in use: from then on flows that "
                      "reached TOP stayed in the sketch.")

    rows = flat_rows(run, errors)
    sec.table(["series", "first half, per hour", "second half, per hour", "change over the second half",
               "tolerance", "flat"],
              [[label, fmt_per_hour(fl.first_per_hour, unit), fmt_per_hour(fl.second_per_hour, unit),
                fmt_sig(fl.change), fmt_sig(fl.tolerance), "yes" if fl.flat else "NO"] if fl else
               [label, "n/a", "n/a", "n/a", "n/a", "too few samples"] for label, unit, fl in rows],
              caption="Flat or not: a least-squares line through each half of the run")
    sec.table(["check", "seen", "passed"],
              [[c, v, "yes" if ok else "NO"] for c, v, ok in health_checks(run.samples, records, errors)],
              caption="What a run of any length must keep")
    rss = [s["rss_kib"] for s in run.samples]
    used = [s["records_used"] for s in run.samples if s.get("records_used") is not None]
    full = [s["records_full"] for s in run.samples if s.get("records_full") is not None]
    rss_fl = rows[0][2]
    verdict = []
    if used and records:
        verdict.append(f"records in use peaked at {fmt_int(max(used))} of {fmt_int(records)}"
                       + (" (all of them)" if max(used) >= records else ""))
    if full:
        verdict.append(f"the records-full counter ended at {fmt_int(full[-1])} packets")
    if rss and rss_fl:
        verdict.append(f"RSS went from {rss[0] / 1024:.1f} to {rss[-1] / 1024:.1f} MiB, "
                       f"{fmt_sig(rss_fl.second_per_hour)} KiB per hour over the second half")
    if errors:
        first, last = errors[0][1], errors[-1][1]
        verdict.append(f"the heavy flows' median relative error was {fmt_sig(first.median)} in the first wave "
                       f"and {fmt_sig(last.median)} in the last (max {fmt_sig(first.max)} and {fmt_sig(last.max)}); "
                       f"{fmt_int(sum(e.missing for _, e in errors))} heavy flows were never exported and "
                       f"{fmt_int(sum(e.above_tenth for _, e in errors))} of {fmt_int(heavy_sent)} were off by more "
                       "than 10 %")
    sec.paragraph(
        f"A series is flat when the least-squares line through its second half moves by at most "
        f"{FLAT_FRACTION:.0%} of the half's mean (at least of a floor: 1 MiB of RSS, 100 records or entries, "
        f"an error of {ERROR_FLOOR:g}) over that half. A healthy soak has all of them flat, records in use "
        "below the limit and the records-full counter at 0. Here " + "; ".join(verdict) + ".")

    shares = hw_shares(run.samples)
    path, rel = ctx.plot_path("series")
    plain = {"marker": None, "linewidth": 1.6}
    ts = [s["seconds"] for s in run.samples]
    ex = [t for t, _ in errors]
    rec_lines = [Line("records in use", [s["seconds"] for s in run.samples if s.get("records_used") is not None],
                      used, plain | {"color": "tab:red"})]
    if records:
        rec_lines.append(Line("records (the limit)", [ts[0], ts[-1]], [records, records],
                              plain | {"color": "tab:gray", "linestyle": "--"}))
    panels_plot(path, [
        Panel("live process RSS", "MiB", [Line("RSS", ts, [k / 1024 for k in rss], plain | {"color": "tab:blue"})],
              ymin_zero=True),
        Panel("Duet records", "records", rec_lines, ymin_zero=True),
        Panel("hardware entries", "entries", [Line("hw entries", [s["seconds"] for s in run.samples
                                                                    if s.get("hw_entries") is not None],
                                                   [s["hw_entries"] for s in run.samples
                                                    if s.get("hw_entries") is not None],
                                                   plain | {"color": "tab:green"})], ymin_zero=True),
        Panel("estimate error per wave", "|exported - true| / true", [
            Line("median", ex, [e.median for _, e in errors], plain | {"color": "tab:purple", "marker": "."}),
            Line("max", ex, [e.max for _, e in errors],
                 plain | {"color": "tab:purple", "linestyle": ":", "marker": "."})],
              ymin_zero=True),
        Panel("records full", "packets, cumulative", [
            Line("records full", [s["seconds"] for s in run.samples if s.get("records_full") is not None], full,
                 plain | {"color": "tab:orange"})], ymin_zero=True),
        Panel("counted in hardware", "share of the packets since the last sample", [
            Line("hw share", [t for t, _ in shares], [v for _, v in shares], plain | {"color": "tab:brown"})],
              ylim=(0, 1)),
    ], title=f"Live Duet soak: {len(run.waves)} waves of new flows at {fmt_thousands(RATE)} packets/s",
        xlabel="seconds", ncols=3)
    sec.image(rel, "Duet live soak series over time",
              "Over the soak: the live process's RSS; Duet's records in use against their number; the hardware "
              "table's entries; each wave's heavy flows' median and max relative error (exported sum against the "
              "true count, at the wave's end); the records-full counter; the share of the packets counted in hardware "
              "between two samples.")
    sec.paragraph("The commands (`bin/dpukit-measure` is the copy of `" + display_path(tool_path(TOOL))
                  + "`; wave K is written with `--first-flow K*" + str(WAVE_FLOWS) + "` into `wave-K.pcap`, "
                  "its true counts read back by `run --algo none --dump-estimates`, then replayed):")
    for c in run.commands:
        sec.add_command(c)
