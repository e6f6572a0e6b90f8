"""DPUBench's end-to-end programs (the paper's §5, Figs. 13-16): orchestration.

``dpukit-bench e2e-server`` and ``dpukit-bench e2e-client`` run as separate
processes and talk UDP. This module sets up where they run, starts them with
the right pinning, sweeps packet size x send interval, collects both JSON
results into one record per point, and draws Figs. 14-16.

Where they run
--------------
- **netns** (the default when root and ``ip`` can): two network namespaces
  ``dpukit-e2e-<pid>-<n>-c`` and ``-s`` joined by a veth pair (``e2e-c``
  10.199.0.1/30, ``e2e-s`` 10.199.0.2/30). Receive packet steering (RPS) on
  each veth puts the kernel's receive work where a real NIC's interrupts
  would land: requests on the server's CPU, replies on the client's (without
  it, veth does that work on whichever CPU sent the packet). The namespaces
  are always deleted (try/finally); namespaces of this prefix left by a
  crashed run (their pid no longer alive) are deleted first.
- **loopback** otherwise (or when asked): both on 127.0.0.1, with a note in
  every record saying why.

CPUs (:func:`cpu_plan`)
-----------------------
The client busy-waits between datagrams (its pacer spins for waits under
200 us), so a server thread sharing its CPU would be time-sliced against a
spinning thread and the run would measure the scheduler. The client therefore
always has a CPU of its own (the last one), and the server's places get the
others: with 4 or more CPUs host, dpu and hw (the NIC thread) each get their
own; with 3, host has CPU 0 and dpu and hw share CPU 1; with 2 (this VM)
every server thread shares CPU 0 — the "server machine" — and host, dpu and
hw differ only in their CPU accounting (each thread's CPU time is counted
for its place alone). The dpu place is never a DPU here: it is another
thread of the same x86 VM.

The client's sending
--------------------
Below a 20 us interval (:func:`client_burst`) the client may send up to 32
datagrams at once — at interval 0, or when it has fallen behind — and by
default (``gso=True``) it sends such a burst as one UDP GSO buffer
(``UDP_SEGMENT``) that the kernel splits; one system call per datagram would
cap it near 0.2 Mpps here, below what the server can take, and every
interval under 5 us would look the same. From 20 us on it sends one
datagram per gap and never catches up in a burst, as pktgen keeps a fixed
gap: a burst after the client lost the CPU to another process would queue
at the server and read as server latency.

What a record holds
-------------------
- ``loss``: flowtable: 1 - (requests the server received and counted) /
  (datagrams the client sent) — there are no replies; apprecog: 1 - (distinct
  replies the client received) / (sent): round trip. ``request_loss`` is the
  server-side share for both. ``kernel_rcvbuf_errors`` (the server
  namespace's UDP counter) and ``kernel_backlog_drops`` (machine-wide
  softnet drops) say where datagrams were lost.
- ``throughput_pps`` / ``_gbps``: flowtable: what the server processed over
  its active window (first to last datagram); apprecog: distinct replies per
  second of sending. ``server_pps`` is the server's rate for both;
  ``client_pps`` what the client achieved (``offered_pps`` what it was asked).
- ``utilization``: server CPU time per place / the load window (from the
  first datagram sent to the last one sent or received; the processes share
  CLOCK_MONOTONIC), 1.0 = one CPU busy throughout. This kernel has no IRQ
  time accounting, so receive work (softirq) that interrupts a server thread
  is charged to it; receive work done while the CPU is otherwise idle is
  charged to no thread. ``cpu_stat``: whole-CPU busy and softirq shares from
  /proc/stat over the client's run for the server's and the client's CPUs —
  it includes anything else that ran there, so it is context, not the
  per-place figure. ``loadavg_1min``: how busy the machine was otherwise.
- ``rtt_us`` (apprecog): round-trip percentiles measured by the client.
- ``checks``: flowtable: the server's per-flow counts add up
  (``counts_exact``) and, with no loss, equal the client's per-flow sends
  (``digest_match``); apprecog: replies whose action differs from the one the
  client planted (``wrong_action``) and whose body is wrong
  (``verify_failures``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from dpukit import procs
from dpukit.errors import DpukitError
from dpukit.native import load_result

PREFIX = "dpukit-e2e-"
CLIENT_ADDR, SERVER_ADDR = "10.199.0.1", "10.199.0.2"
CLIENT_DEV, SERVER_DEV = "e2e-c", "e2e-s"
PORT = 9000

DEFAULT_SIZES = (64, 256, 1024)
DEFAULT_INTERVALS = (0, 1, 5, 20)


class E2eFailed(DpukitError):
    """A client or server run failed or returned nonsense."""


# ------------------------------------------------------------ namespaces


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def list_namespaces() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows."""
    if shutil.which("ip") is None:
        return []
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _owner_pid(name: str) -> int | None:
    if not name.startswith(PREFIX):
        return None
    head = name[len(PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_namespaces() -> list[str]:
    """Namespaces of this prefix whose creating process is gone (a crashed run)."""
    return [n for n in list_namespaces() if (pid := _owner_pid(n)) is not None and not _alive(pid)]


def remove_stale_namespaces() -> list[str]:
    """Deletes :func:`stale_namespaces` (their veth ends go with them); the names removed."""
    removed = []
    for name in stale_namespaces():
        if _ip("netns", "delete", name, check=False).returncode == 0:
            removed.append(name)
    return removed


_counter = 0


@dataclass
class Network:
    """Where the client and the server run, and how to reach the server."""

    mode: str  # "netns" or "loopback"
    server_addr: str
    client_ns: str | None = None
    server_ns: str | None = None
    note: str = ""
    rps: bool = False
    _steered: str | None = field(default=None, repr=False)

    def client_argv(self, argv: Sequence[Any]) -> list[str]:
        return self._wrap(self.client_ns, argv)

    def server_argv(self, argv: Sequence[Any]) -> list[str]:
        return self._wrap(self.server_ns, argv)

    @staticmethod
    def _wrap(ns: str | None, argv: Sequence[Any]) -> list[str]:
        argv = [str(a) for a in argv]
        return ["ip", "netns", "exec", ns, *argv] if ns else argv

    def steer(self, server_cpus: str, client_cpus: str) -> None:
        """RPS (netns only): the kernel's receive work for each side's veth on
        that side's CPUs — requests on the server's, replies on the client's."""
        want = f"{server_cpus}/{client_cpus}"
        if self.mode != "netns" or not self.rps or want == self._steered:
            return
        for ns, dev, cpus in ((self.server_ns, SERVER_DEV, server_cpus), (self.client_ns, CLIENT_DEV, client_cpus)):
            path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
            r = subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", f"echo {cpu_mask(cpus):x} > {path}"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.note += f"; RPS not set ({r.stderr.strip()})"
                self.rps = False
                return
        self._steered = want


def cpu_ids(cpus: str) -> set[int]:
    """"0-2,5" -> {0, 1, 2, 5}."""
    ids: set[int] = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


def cpu_mask(cpus: str) -> int:
    return sum(1 << c for c in cpu_ids(cpus))


def _netns_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


@contextlib.contextmanager
def network(mode: str = "auto", *, rps: bool = True) -> Iterator[Network]:
    """A :class:`Network` for one set of runs: ``netns`` (two namespaces and
    a veth pair, deleted on exit whatever happens), ``loopback``, or
    ``auto`` (netns when it can be made, else loopback with the reason)."""
    if mode not in ("auto", "netns", "loopback"):
        raise ValueError(f"network mode must be auto, netns or loopback, not {mode!r}")
    why = None
    if mode != "loopback":
        why = _netns_unavailable()
        if why is None:
            global _counter
            _counter += 1
            base = f"{PREFIX}{os.getpid()}-{_counter}"
            cns, sns = base + "-c", base + "-s"
            try:
                remove_stale_namespaces()
                try:
                    for args in (["netns", "add", cns], ["netns", "add", sns],
                                 ["link", "add", CLIENT_DEV, "netns", cns, "type", "veth", "peer", "name", SERVER_DEV,
                                  "netns", sns],
                                 ["-n", cns, "addr", "add", f"{CLIENT_ADDR}/30", "dev", CLIENT_DEV],
                                 ["-n", sns, "addr", "add", f"{SERVER_ADDR}/30", "dev", SERVER_DEV],
                                 ["-n", cns, "link", "set", CLIENT_DEV, "up"],
                                 ["-n", sns, "link", "set", SERVER_DEV, "up"],
                                 ["-n", cns, "link", "set", "lo", "up"],
                                 ["-n", sns, "link", "set", "lo", "up"]):
                        r = _ip(*args, check=False)
                        if r.returncode != 0:
                            raise OSError(f"ip {' '.join(args)}: {r.stderr.strip()}")
                except OSError as e:
                    why = str(e)
                else:
                    yield Network("netns", SERVER_ADDR, cns, sns,
                                  note=f"netns {cns} / {sns}, veth {CLIENT_ADDR} -> {SERVER_ADDR}", rps=rps)
                    return
            finally:
                for ns in (cns, sns):
                    if ns in list_namespaces():
                        _ip("netns", "delete", ns, check=False)
        if mode == "netns":
            raise E2eFailed(f"cannot make network namespaces: {why}")
    yield Network("loopback", "127.0.0.1",
                  note="loopback" + (f" (network namespaces unavailable: {why})" if why else " (asked for)"))


# ------------------------------------------------------------ CPUs


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def cpu_plan(cpus: Sequence[int] | None = None) -> dict[str, str]:
    """CPUs of the client and of the server's places (see the module doc)."""
    cpus = list(cpus) if cpus is not None else available_cpus()
    if not cpus:
        raise E2eFailed("no CPU available")
    s = [str(c) for c in cpus]
    if len(s) >= 4:
        return {"client": s[-1], "host": s[0], "dpu": s[1], "hw": s[2],
                "note": "client, host, dpu and hw each on a CPU of its own"}
    if len(s) == 3:
        return {"client": s[2], "host": s[0], "dpu": s[1], "hw": s[1],
                "note": "client and host on CPUs of their own; dpu and hw share one"}
    if len(s) == 2:
        return {"client": s[1], "host": s[0], "dpu": s[0], "hw": s[0],
                "note": "2 CPUs: the client has one to itself; every server place shares the other "
                        "(separate threads, separate CPU accounting)"}
    return {"client": s[0], "host": s[0], "dpu": s[0], "hw": s[0],
            "note": "1 CPU: client and server share it; figures are not meaningful"}


def receiving_cpus(plan: dict[str, str], program: str, table: str, place: str, dpu_work: str) -> str:
    """The CPUs of the server thread that reads the socket (where RPS should steer)."""
    if program == "flowtable":
        return plan["hw"] if table == "hw" else plan[place]
    if place == "dpu":
        return plan["dpu"]
    return plan["host"]


def read_cpu_stat() -> dict[int, tuple[int, int, int]]:
    """Per CPU: (total, busy, softirq) ticks from /proc/stat."""
    out: dict[int, tuple[int, int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            parts = line.split()
            vals = [int(v) for v in parts[1:]]
            total = sum(vals[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
            busy = total - vals[3] - vals[4]
            out[int(parts[0][3:])] = (total, busy, vals[6])
    return out


def read_softnet_drops() -> int | None:
    """Packets dropped from full backlog queues, all CPUs (/proc/net/softnet_stat, column 2)."""
    try:
        with open("/proc/net/softnet_stat") as f:
            return sum(int(line.split()[1], 16) for line in f if line.strip())
    except (OSError, ValueError, IndexError):
        return None


SMOOTH_INTERVAL_US = 20


def gso_burst(size: int) -> int:
    """Datagrams per GSO send: 32, fewer when 32 of them would pass 65000 bytes."""
    return max(1, min(32, 65000 // size))


def client_burst(size: int, interval_us: float) -> int:
    """The client's largest burst: below SMOOTH_INTERVAL_US it needs bursts to
    reach the offered rate; from there on it sends one datagram per gap and
    never catches up in a burst (pktgen's fixed gap), so that a moment the
    client lost to another process does not become a burst of requests
    queued at the server, measured as server latency."""
    return gso_burst(size) if interval_us < SMOOTH_INTERVAL_US else 1


def _cpu_shares(before: dict, after: dict, cpus: str) -> dict[str, float]:
    ids = cpu_ids(cpus)
    total = busy = soft = 0
    for c in ids:
        if c in before and c in after:
            total += after[c][0] - before[c][0]
            busy += after[c][1] - before[c][1]
            soft += after[c][2] - before[c][2]
    return {"busy": busy / total if total else 0.0, "softirq": soft / total if total else 0.0}


# ------------------------------------------------------------ one point


def stop_server(server: procs.Proc, grace: float = 10.0) -> tuple[int | None, bool]:
    """SIGTERM (the server then writes its result), up to ``grace`` seconds to
    end, then :meth:`procs.Proc.stop`; (exit status, whether it had to be killed)."""
    if server.alive():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            server.stop()
            return server.popen.returncode, True
    return server.popen.returncode, False


def run_point(tool: str | Path, net: Network, *, program: str, size: int, interval_us: float,
              table: str = "sw", place: str = "host", dpu_work: str = "recognition", seconds: float = 1.0,
              out_dir: Path, flows: int = 4096, zipf: float = 1.1, plan: dict[str, str] | None = None,
              label: str | None = None, round_no: int = 0, hw_args: Sequence[str] = (),
              client_args: Sequence[str] = (), gso: bool = True, dpu_speed: str | None = None,
              engine: str | None = None) -> dict[str, Any]:
    """One client run against one fresh server; the combined record.

    ``gso``: the client sends each burst it is allowed (see
    :func:`client_burst`) as one UDP GSO buffer instead of a sendmmsg batch.
    ``dpu_speed``: the server's --dpu-speed (its dpu place's threads are
    dilated to it); None leaves the server's default ($DPUKIT_DPU_SPEED).
    ``engine``: apprecog on dpu, the server's --engine ("regex",
    "regex,compress"): its matching (and compress action) on the engines of
    the generation ``dpu_speed`` names."""
    if program not in ("flowtable", "apprecog"):
        raise ValueError(f"program must be flowtable or apprecog, not {program!r}")
    plan = plan or cpu_plan()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    what = table if program == "flowtable" else place
    if dpu_speed is not None:
        what += f"-{dpu_speed}"
    if engine:
        what += "-engine-" + engine.replace(",", "-")
    label = label or f"{program}-{what}-{size}B-{interval_us:g}us-r{round_no}"
    server_json, client_json = out_dir / f"{label}.server.json", out_dir / f"{label}.client.json"
    for p in (server_json, client_json):
        p.unlink(missing_ok=True)
    bind = "0.0.0.0" if net.mode == "netns" else "127.0.0.1"
    port = PORT if net.mode == "netns" else procs.free_udp_port()
    server_argv: list[Any] = [tool, "e2e-server", "--program", program, "--place", place, "--bind", bind,
                              "--port", port, "--host-cpus", plan["host"], "--dpu-cpus", plan["dpu"],
                              "--hw-cpus", plan["hw"], "--flows-hint", max(flows, 1024), "--json", server_json]
    if dpu_speed is not None:
        server_argv += ["--dpu-speed", dpu_speed]
    if program == "flowtable":
        server_argv += ["--table", table, *hw_args]
    else:
        server_argv += ["--dpu-work", dpu_work]
        if engine:
            server_argv += ["--engine", engine]
    client_argv: list[Any] = [tool, "e2e-client", "--program", program, "--server", net.server_addr,
                              "--port", port, "--size", size, "--interval", interval_us,
                              "--duration", seconds, "--flows", flows, "--zipf", zipf, "--json", client_json]
    burst = client_burst(size, interval_us)
    client_argv += ["--burst", burst]
    if gso and burst > 1:
        client_argv += ["--gso"]
    client_argv += list(client_args)
    net.steer(receiving_cpus(plan, program, table, place, dpu_work), plan["client"])
    logs = out_dir / "logs"
    with procs.Group(logs) as group:
        server = group.start(net.server_argv(server_argv), name=f"{label}.server", place=place)
        server.wait_line(r"listening on", timeout=60)
        stat0, drops0 = read_cpu_stat(), read_softnet_drops()
        result, client_cpu = procs.run_measured(net.client_argv(client_argv), cpus=plan["client"],
                                                timeout=seconds + 60, work_dir=logs / label)
        stat1, drops1 = read_cpu_stat(), read_softnet_drops()
        if result.returncode != 0:
            raise E2eFailed(f"client failed (exit {result.returncode}) at {label}:\n{result.stderr[-2000:]}")
        server.check_alive()
        code, killed = stop_server(server)
    if killed or code != 0:
        raise E2eFailed(f"server {'did not end on SIGTERM and was killed' if killed else f'exited with {code}'} "
                        f"at {label}:\n{server.output()[-2000:]}")
    s_res, c_res = load_result(server_json), load_result(client_json)
    rec = make_record(s_res, c_res, program=program, table=table, place=place, dpu_work=dpu_work,
                      round_no=round_no, net=net, plan=plan)
    rec["cpu_stat"] = {"server_cpus": _cpu_shares(stat0, stat1, ",".join(sorted({plan["host"], plan["dpu"],
                                                                                   plan["hw"]}))),
                       "client_cpu": _cpu_shares(stat0, stat1, plan["client"])}
    rec["client_cpu_ns"] = client_cpu
    # Datagrams the kernel dropped before any socket: full per-CPU backlog queues (machine-wide counter).
    rec["kernel_backlog_drops"] = drops1 - drops0 if drops0 is not None and drops1 is not None else None
    rec["gso"] = gso and burst > 1
    rec["burst"] = burst
    # Other work on the machine disturbs every figure here: the 1-minute load average at the end.
    rec["loadavg_1min"] = os.getloadavg()[0]
    rec["server_json"], rec["client_json"] = str(server_json), str(client_json)
    return rec


def make_record(server: dict[str, Any], client: dict[str, Any], *, program: str, table: str, place: str,
                dpu_work: str, round_no: int, net: Network, plan: dict[str, str]) -> dict[str, Any]:
    """One sweep point from the server's and the client's results."""
    s, c = server["figures"], client["figures"]
    sent = int(c["sent"])
    processed = int(s["packets_processed"])
    request_loss = max(0.0, 1.0 - processed / sent) if sent else 0.0
    rec: dict[str, Any] = {
        "program": program, "size": int(c["size"]), "interval_us": float(c["interval_us"]),
        "table": table if program == "flowtable" else None, "place": place,
        "dpu_work": (dpu_work if place == "dpu" else None) if program == "apprecog" else None,
        "round": round_no, "network": net.mode, "note": net.note, "cpus": dict(plan),
        "sent": sent, "offered_pps": c["offered_pps"], "client_pps": c["achieved_pps"],
        "server_received": int(s["datagrams_received"]), "server_processed": processed,
        "request_loss": request_loss, "server_pps": s["throughput_pps"],
        "utilization": load_utilization(s, c), "server_utilization_active": dict(s["utilization"]),
        "server_cpu_ns": dict(s["cpu_ns"]),
        "bad": int(s["bad_total"]),
        "kernel_rcvbuf_errors": s.get("kernel_udp", {}).get("rcvbuf_errors"),
        # The dpu place's speed and the busy time its threads' dilation added.
        "dpu_speed": server.get("placement", {}).get("dpu_speed"),
        "dilation": s.get("dilation"),
        # apprecog with --engine: the engines chosen and their figures (jobs,
        # late jobs, the executors' hw CPU, the model's busy time).
        "engine": (server.get("parameters", {}).get("engines") or {}).get("chosen"),
        "engine_figures": s.get("engine"),
    }
    if program == "flowtable":
        rec["loss"] = request_loss
        rec["loss_basis"] = "server-received requests / client-sent"
        rec["throughput_pps"] = s["throughput_pps"]
        rec["throughput_gbps"] = s["throughput_gbps"]
        rec["checks"] = {"counts_exact": bool(s["counts_exact"]),
                         "digest_match": s["flow_digest"] == c["flow_digest"],
                         "flows": s["flows"]}
        rec["flow_split"] = {"counted_sw": s["counted_sw"], "counted_hw": s["counted_hw"]}
        if table == "hw":
            rec["hw_table"] = s["hw_table"]
    else:
        r = c["replies"]
        rec["loss"] = float(c["loss"])
        rec["loss_basis"] = "client-received distinct replies / client-sent"
        rec["throughput_pps"] = c["reply_pps"]
        rec["throughput_gbps"] = c["reply_pps"] * int(c["size"]) * 8 / 1e9
        rec["rtt_us"] = dict(c["rtt_us"])
        rec["checks"] = {"wrong_action": r["wrong_action"], "verify_failures": r["verify_failures"],
                         "verified": r["verified"], "first_failure": r["first_failure"]}
        rec["actions"] = {"expected": c["expected_actions"], "replied": r["actions"], "server": s["actions"]}
    return rec


def load_window_ns(s: dict[str, Any], c: dict[str, Any]) -> int:
    """The load window: from the first datagram sent or received to the last
    one the client sent or the server received (one CLOCK_MONOTONIC: the
    processes share the machine)."""
    starts = [v for v in (c.get("send_start_ns"), s.get("active_first_ns")) if v]
    ends = [v for v in (c.get("send_end_ns"), s.get("active_last_ns")) if v]
    return max(ends) - min(starts) if starts and ends else 0


def load_utilization(s: dict[str, Any], c: dict[str, Any]) -> dict[str, float]:
    """Server CPU time per place / the load window (1.0 = one CPU busy throughout)."""
    window = load_window_ns(s, c)
    return {p: (ns / window if window else 0.0) for p, ns in s["cpu_ns"].items()}


def check_record(rec: dict[str, Any]) -> list[str]:
    """What is wrong with a record (empty when it is sane)."""
    bad = []
    if rec["sent"] <= 0:
        bad.append("nothing was sent")
    if rec["server_processed"] > rec["sent"]:
        bad.append(f"server processed {rec['server_processed']} > sent {rec['sent']}")
    if not 0.0 <= rec["loss"] <= 1.0:
        bad.append(f"loss {rec['loss']} outside [0, 1]")
    for p in ("host", "dpu", "hw"):
        if p not in rec["utilization"] or rec["utilization"][p] < 0:
            bad.append(f"no utilization for {p}")
    if rec["program"] == "flowtable":
        if not rec["checks"]["counts_exact"]:
            bad.append("per-flow counts do not add up")
        if rec["server_processed"] == rec["sent"] and not rec["checks"]["digest_match"]:
            bad.append("no loss, yet the per-flow counts differ from what was sent")
    else:
        if rec["checks"]["wrong_action"] or rec["checks"]["verify_failures"]:
            bad.append(f"wrong replies: {rec['checks']['first_failure']}")
    return bad


# ------------------------------------------------------------ sweeps


def _sweep(tool: str | Path, out_dir: Path, configs: Sequence[dict[str, Any]], sizes: Sequence[int],
           intervals: Sequence[float], seconds: float, rounds: int, mode: str, rps: bool,
           progress: bool, **kw: Any) -> list[dict[str, Any]]:
    records = []
    plan = cpu_plan()
    with network(mode, rps=rps) as net:
        for r in range(rounds):
            for size in sizes:
                for interval in intervals:
                    for cfg in configs:  # innermost: the modes compared are interleaved
                        rec = run_point(tool, net, size=size, interval_us=interval, seconds=seconds,
                                        out_dir=out_dir, plan=plan, round_no=r, **cfg, **kw)
                        problems = check_record(rec)
                        rec["problems"] = problems
                        records.append(rec)
                        if progress:
                            what = cfg.get("table") or cfg.get("place")
                            print(f"  r{r} {cfg['program']:9} {what:4} {size:5}B {interval:5g}us  "
                                  f"sent {rec['client_pps']:9.0f}/s  got {rec['throughput_pps']:9.0f}/s  "
                                  f"loss {rec['loss']:.4f}"
                                  f"  util {_fmt_util(rec['utilization'])}"
                                  + (f"  p50 {rec['rtt_us']['p50']:.1f}us p99 {rec['rtt_us']['p99']:.1f}us"
                                     if "rtt_us" in rec else "")
                                  + (f"  PROBLEMS: {problems}" if problems else ""), flush=True)
    return records


def run_configs(tool: str | Path, configs: Sequence[dict[str, Any]], sizes: Sequence[int],
                intervals: Sequence[float], seconds: float = 1.0, out_dir: Path | str = "e2e-out", *,
                rounds: int = 1, mode: str = "auto", rps: bool = True, gso: bool = True, progress: bool = False,
                **kw: Any) -> list[dict[str, Any]]:
    """Any set of server configurations (each a dict of :func:`run_point`'s
    keywords: program, table, place, dpu_work, dpu_speed, ...) over sizes x
    intervals, ``rounds`` times, the configurations interleaved innermost."""
    return _sweep(tool, Path(out_dir), configs, sizes, intervals, seconds, rounds, mode, rps, progress, gso=gso,
                  **kw)


def _fmt_util(u: dict[str, float]) -> str:
    return " ".join(f"{k}={v * 100:.0f}%" for k, v in u.items() if v > 0) or "0"


def run_flowtable(tool: str | Path, sizes: Sequence[int] = DEFAULT_SIZES,
                  intervals: Sequence[float] = DEFAULT_INTERVALS, tables: Sequence[str] = ("sw", "hw"),
                  seconds: float = 1.0, out_dir: Path | str = "e2e-out", *, place: str = "host", rounds: int = 1,
                  mode: str = "auto", rps: bool = True, flows: int = 4096, zipf: float = 1.1,
                  hw_args: Sequence[str] = (), gso: bool = True, progress: bool = False) -> list[dict[str, Any]]:
    """Fig. 14's sweep: sizes x intervals x tables (sw / hw), ``rounds`` times, interleaved."""
    configs = [{"program": "flowtable", "table": t, "place": place, "hw_args": hw_args} for t in tables]
    return _sweep(tool, Path(out_dir), configs, sizes, intervals, seconds, rounds, mode, rps, progress,
                  flows=flows, zipf=zipf, gso=gso)


def run_apprecog(tool: str | Path, sizes: Sequence[int] = DEFAULT_SIZES,
                 intervals: Sequence[float] = DEFAULT_INTERVALS, places: Sequence[str] = ("host", "dpu"),
                 seconds: float = 1.0, out_dir: Path | str = "e2e-out", *, dpu_work: str = "recognition",
                 rounds: int = 1, mode: str = "auto", rps: bool = True, gso: bool = True, progress: bool = False,
                 client_args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Figs. 15-16's sweep: sizes x intervals x places (host / dpu), ``rounds`` times, interleaved."""
    configs = [{"program": "apprecog", "place": p, "dpu_work": dpu_work, "client_args": client_args}
               for p in places]
    return _sweep(tool, Path(out_dir), configs, sizes, intervals, seconds, rounds, mode, rps, progress, gso=gso)


def _key(rec: dict[str, Any]) -> tuple:
    where = rec["table"] or rec["place"]
    if rec.get("engine"):
        where += "+engine:" + rec["engine"]
    return (rec["program"], where, rec["size"], rec["interval_us"])


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (program, table or place, size, interval): the median over rounds of
    each figure and its range (min, max)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(_key(r), []).append(r)
    out = []
    for (program, mode, size, interval), rs in sorted(groups.items(), key=lambda kv: kv[0]):
        def stat(get):
            vals = [get(r) for r in rs]
            return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        row: dict[str, Any] = {"program": program, "mode": mode, "size": size, "interval_us": interval,
                               "rounds": len(rs),
                               "throughput_pps": stat(lambda r: r["throughput_pps"]),
                               "loss": stat(lambda r: r["loss"]),
                               "client_pps": stat(lambda r: r["client_pps"])}
        for p in ("host", "dpu", "hw"):
            row[f"util_{p}"] = stat(lambda r, p=p: r["utilization"][p])
        if program == "apprecog":
            for q in ("p50", "p90", "p99", "p999"):
                row[f"rtt_{q}"] = stat(lambda r, q=q: r["rtt_us"][q])
        out.append(row)
    return out


# ------------------------------------------------------------ figures


def _series_by(rows, program, mode, size, fig_key):
    pts = sorted((r["interval_us"], r[fig_key]) for r in rows
                 if r["program"] == program and r["mode"] == mode and r["size"] == size)
    return [p[0] for p in pts], [p[1] for p in pts]


def _interval_panels(path: Path, panels: Sequence[tuple[str, Sequence[tuple[str, str, list, list]]]], *,
                     title: str, ylabel: str, scale: float = 1.0) -> Path:
    """Small multiples over send intervals shown as categories (0, 1, 5, 20,
    100 us are too uneven for a linear axis): per panel (title, series), each
    series (label, style, intervals, stats) drawn as the median with its
    range across rounds as a band."""
    from dpukit.plots import panel_grid
    fig, axes = panel_grid(len(panels), 3, 3.6, 2.8, 0.7)
    handles: dict[str, Any] = {}
    for (ptitle, series), ax in zip(panels, axes):
        ticks: list[float] = sorted({x for _, _, xs, _ in series for x in xs})
        pos = {x: i for i, x in enumerate(ticks)}
        for label, style, xs, stats in series:
            px = [pos[x] for x in xs]
            (line,) = ax.plot(px, [st["median"] * scale for st in stats], style, label=label, linewidth=1.4,
                              markersize=4)
            ax.fill_between(px, [st["min"] * scale for st in stats], [st["max"] * scale for st in stats],
                            color=line.get_color(), alpha=0.15, linewidth=0)
            handles.setdefault(label, line)
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels([f"{x:g}" for x in ticks])
        ax.set_ylim(bottom=0)
        ax.set_title(ptitle, fontsize=9)
        ax.set_xlabel("send interval (us; 0 = as fast as possible)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.35)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(len(handles), 4),
               fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, format="png")
    return path


def plot_fig14(records: Sequence[dict[str, Any]], out_dir: Path | str) -> list[Path]:
    """Fig. 14: flowtable throughput (a) and loss (b) vs send interval, one
    panel per packet size, sw vs hw (medians over rounds, range shaded)."""
    rows = [r for r in summarize(records) if r["program"] == "flowtable"]
    sizes = sorted({r["size"] for r in rows})
    modes = sorted({r["mode"] for r in rows}, key=lambda m: (m != "sw", m))
    names = {"sw": "sw: software hash table", "hw": "hw: emulated flow table"}
    out_dir = Path(out_dir)
    paths = []
    for key, name, ylabel, scale, what in (
            ("throughput_pps", "fig14a_flowtable_throughput.png", "kpps processed", 1e-3, "throughput"),
            ("loss", "fig14b_flowtable_loss.png", "loss ratio", 1.0, "loss ratio")):
        panels = []
        for size in sizes:
            series = [(names.get(m, m), "o-" if m == "sw" else "s--", *_series_by(rows, "flowtable", m, size, key))
                      for m in modes]
            panels.append((f"{size} B datagrams", series))
        paths.append(_interval_panels(out_dir / name, panels, ylabel=ylabel, scale=scale,
                                      title=f"Flow table: {what} (medians of rounds, range shaded)"))
    return paths


def plot_fig15(records: Sequence[dict[str, Any]], out_dir: Path | str) -> Path:
    """Fig. 15: apprecog server CPU utilization per place vs send interval,
    one panel per size; lines: the host place's host CPU, and the dpu
    place's host and dpu CPU."""
    rows = [r for r in summarize(records) if r["program"] == "apprecog"]
    sizes = sorted({r["size"] for r in rows})
    panels = []
    for size in sizes:
        series = []
        for mode, place_cpu, style in (("host", "host", "o-"), ("dpu", "host", "s--"), ("dpu", "dpu", "^:")):
            x, y = _series_by(rows, "apprecog", mode, size, f"util_{place_cpu}")
            if x:
                series.append((f"server on {mode}: {place_cpu} CPU", style, x, y))
        panels.append((f"{size} B datagrams", series))
    return _interval_panels(Path(out_dir) / "fig15_apprecog_cpu.png", panels, ylabel="CPU utilization (%)",
                            scale=100, title="App recognition: server CPU per place (dpu = an x86 thread here)")


def plot_fig16(records: Sequence[dict[str, Any]], out_dir: Path | str, *, interval_us: float | None = None) -> Path:
    """Fig. 16: apprecog round-trip percentiles per packet size, host vs dpu
    place, at one send interval (default: the largest swept)."""
    from dpukit.plots import BarPanel, bars_plot
    rows = [r for r in summarize(records) if r["program"] == "apprecog"]
    if interval_us is None:
        interval_us = max(r["interval_us"] for r in rows)
    rows = [r for r in rows if r["interval_us"] == interval_us]
    sizes = sorted({r["size"] for r in rows})
    modes = sorted({r["mode"] for r in rows}, key=lambda m: (m != "host", m))
    panels = []
    for q in ("p50", "p90", "p99", "p999"):
        values = {}
        for m in modes:
            by_size = {r["size"]: r[f"rtt_{q}"]["median"] for r in rows if r["mode"] == m}
            values[f"server on {m}"] = [by_size.get(s, float("nan")) for s in sizes]
        panels.append(BarPanel(f"RTT {q}", "us", values, fmt=lambda v: f"{v:.0f}"))
    return bars_plot(Path(out_dir) / "fig16_apprecog_latency.png", panels, [f"{s} B" for s in sizes],
                     title=f"App recognition: round-trip latency at a {interval_us:g} us send interval "
                           "(medians of rounds)", ncols=4)


# ------------------------------------------------------------ command line


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpukit.bench_e2e",
                                 description="DPUBench end-to-end sweeps (Figs. 14-16).")
    ap.add_argument("--program", choices=["flowtable", "apprecog", "both"], default="both")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--intervals", default=",".join(map(str, DEFAULT_INTERVALS)))
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", choices=["auto", "netns", "loopback"], default="auto")
    ap.add_argument("--no-rps", action="store_true", help="do not steer the server veth's receive work to its CPU")
    ap.add_argument("--no-gso", action="store_true", help="the client sends without UDP GSO (sendmmsg batches)")
    ap.add_argument("--flows", type=int, default=4096)
    ap.add_argument("--out", default="e2e-out")
    ap.add_argument("--tool", default=None, help="dpukit-bench (default: the build's)")
    a = ap.parse_args(argv)
    if a.tool is None:
        from dpukit.paths import tool_path
        a.tool = str(tool_path("dpukit-bench"))
    sizes = [int(v) for v in a.sizes.split(",")]
    intervals = [float(v) for v in a.intervals.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    if a.program in ("flowtable", "both"):
        records += run_flowtable(a.tool, sizes, intervals, seconds=a.seconds, out_dir=out / "runs", rounds=a.rounds,
                                 mode=a.mode, rps=not a.no_rps, flows=a.flows, gso=not a.no_gso, progress=True)
    if a.program in ("apprecog", "both"):
        records += run_apprecog(a.tool, sizes, intervals, seconds=a.seconds, out_dir=out / "runs", rounds=a.rounds,
                                mode=a.mode, rps=not a.no_rps, gso=not a.no_gso, progress=True)
    (out / "records.json").write_text(json.dumps(records, indent=1))
    (out / "summary.json").write_text(json.dumps(summarize(records), indent=1))
    if any(r["program"] == "flowtable" for r in records):
        plot_fig14(records, out)
    if any(r["program"] == "apprecog" for r in records):
        plot_fig15(records, out)
        plot_fig16(records, out)
    problems = [(r["program"], r["size"], r["interval_us"], r["problems"]) for r in records if r["problems"]]
    for p in problems:
        print("PROBLEM", *p)
    print(f"wrote {out}/records.json, summary.json and the figures")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
