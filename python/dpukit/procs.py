"""Background processes for experiments and tests that run a chain of servers
(the mesh's services and proxies): start one pinned to CPUs in its own
process group, wait until it serves, read its CPU time, and end it.

One-shot native tools with a JSON result go through :mod:`dpukit.native`
instead; this module is for processes that run *while* something else is
measured.
"""

from __future__ import annotations

import http.client
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from dpukit.errors import DpukitError
from dpukit.native import _kill_group, stderr_tail

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessFailed(DpukitError):
    """A background process exited early or did not become ready in time."""

    def __init__(self, name: str, argv: Sequence[str], reason: str, log: Path | None):
        text = log.read_text(errors="replace") if log is not None and log.is_file() else ""
        tail = stderr_tail(text)
        msg = f"{name} {reason}\n  command: {shlex.join(argv)}"
        msg += ("\n  output (last lines):\n" + "\n".join("    " + t for t in tail)) if tail else "\n  output: (empty)"
        super().__init__(msg)


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    """``argv`` prefixed with ``taskset -c CPUS`` (taskset execs, so the pid
    stays the program's and the command line shows the pinning)."""
    if not cpus:
        return [str(a) for a in argv]
    taskset = shutil.which("taskset")
    if taskset is None:
        raise DpukitError("taskset not found (Debian package util-linux)")
    return ["taskset", "-c", cpus, *map(str, argv)]


_handed_ports: set[int] = set()
LOWEST_PORT = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port nobody uses right now (the kernel's choice), for a receiver
    started later (measure.soak's IPFIX collector, bench's e2e server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody uses right now, for a server started later. It is
    taken below the kernel's ephemeral range, so that a client's outgoing
    connection (s_time, wrk and iperf3 open thousands) cannot take it as its
    source port before the server binds it (seen: Envoy's "cannot bind
    '127.0.0.1:40011': Address already in use" in mesh.tls), and it is not
    one this process handed out before. The kernel's choice where the
    ephemeral range leaves no room below it."""
    hi = _ephemeral_low() - 1
    if hi - LOWEST_PORT >= 1000:
        if len(_handed_ports) > (hi - LOWEST_PORT) // 2:
            _handed_ports.clear()
        for _ in range(200):
            port = random.randint(LOWEST_PORT, hi)
            if port in _handed_ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_ports.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 1.0) -> tuple[int, str]:
    """(status, body) of a GET; (0, "") when nothing answers, or what answers
    is not HTTP (a server still starting, or one that closed the connection
    after a partial status line: seen once from Envoy's admin at start-up)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, http.client.HTTPException):
        return 0, ""


def can_connect(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Proc:
    """A running background process (the leader of its own process group)."""

    name: str
    argv: list[str]
    popen: subprocess.Popen
    log: Path  # its stdout and stderr
    place: str  # where its CPU time is counted: "host", "dpu" or "load"

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def fail(self, reason: str) -> ProcessFailed:
        return ProcessFailed(self.name, self.argv, reason, self.log)

    def check_alive(self) -> None:
        if not self.alive():
            raise self.fail(f"exited with status {self.popen.returncode}")

    def wait_line(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """Wait until the process prints a line matching ``pattern``; the match."""
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.output())
            if m:
                return m
            self.check_alive()
            if time.monotonic() > deadline:
                raise self.fail(f"did not print /{pattern}/ within {timeout:g} s")
            time.sleep(0.02)

    def wait_port(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> None:
        """Wait until ``host:port`` accepts connections (and the process still runs)."""
        deadline = time.monotonic() + timeout
        while not can_connect(host, port):
            self.check_alive()
            if time.monotonic() > deadline:
                raise self.fail(f"did not listen on {host}:{port} within {timeout:g} s")
            time.sleep(0.02)
        self.check_alive()

    def cpu_ns(self) -> int:
        return cpu_ns(self.pid)

    def thread_cpu_ns(self) -> dict[str, int]:
        return thread_cpu_ns(self.pid)

    def stop(self) -> int | None:
        """End the process group (SIGTERM, then SIGKILL); its exit status."""
        if self.alive():
            _kill_group(self.popen)
        else:
            # The leader is gone; anything it left in its group goes too.
            try:
                os.killpg(self.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        return self.popen.returncode


def start(argv: Sequence[str], *, name: str, log_dir: Path, cpus: str | None = None,
          place: str = "host", env: dict[str, str] | None = None) -> Proc:
    """Start ``argv`` pinned to ``cpus`` in a new session (so that ending it
    ends everything it started), its output in ``log_dir/<name>.log``."""
    full = pinned(argv, cpus)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, env={**os.environ, **(env or {})})
    return Proc(name, full, popen, log, place)


def _stat_fields(path: str) -> list[str]:
    with open(path, "rb") as f:
        text = f.read().decode(errors="replace")
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2:].split()


def cpu_ns(pid: int) -> int:
    """utime + stime of process ``pid`` in ns, from /proc/PID/stat: it counts
    every thread the process has had, the ended ones too."""
    f = _stat_fields(f"/proc/{pid}/stat")
    # Fields 14 and 15 of stat(5); f[0] here is field 3.
    return (int(f[11]) + int(f[12])) * 1_000_000_000 // CLOCK_TICKS


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """utime + stime per live thread (``name/tid``), from /proc/PID/task: shows
    which threads of a proxy (main, workers) did the work."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as c:
                comm = c.read().strip()
            f = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        out[f"{comm}/{tid}"] = (int(f[11]) + int(f[12])) * 1_000_000_000 // CLOCK_TICKS
    return out


@dataclass
class Group:
    """Processes started together and ended together, even on failure::

        with Group(log_dir) as g:
            echo = g.start([...], name="echo", cpus="0")
    """

    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, argv: Sequence[str], *, name: str, cpus: str | None = None, place: str = "host",
              env: dict[str, str] | None = None) -> Proc:
        p = start(argv, name=name, log_dir=self.log_dir, cpus=cpus, place=place, env=env)
        self.procs.append(p)
        return p

    def cpu_ns(self) -> dict[str, int]:
        """CPU time of every process, by name."""
        return {p.name: p.cpu_ns() for p in self.procs}

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()

    def stop(self) -> None:
        # Last started first: clients of a service end before the service.
        for p in reversed(self.procs):
            p.stop()

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_measured(argv: Sequence[str], *, cpus: str | None, timeout: float,
                 work_dir: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run a one-shot program (a load generator) pinned to ``cpus`` in its own
    process group; its result and the CPU time of it and all its threads, in
    ns, from wait4's rusage (exact, whatever threads it started and ended)."""
    full = pinned(argv, cpus)
    work_dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = work_dir / "load.stdout", work_dir / "load.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        popen = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
            if pid == popen.pid:
                break
            if time.monotonic() > deadline:
                raise ProcessFailed(os.path.basename(full[0]), full, f"timed out after {timeout:g} s", err_path)
            time.sleep(0.01)
    except BaseException:
        _kill_group(popen)
        raise
    popen.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    cpu = int((usage.ru_utime + usage.ru_stime) * 1e9)
    result = subprocess.CompletedProcess(full, popen.returncode, out_path.read_text(errors="replace"),
                                         err_path.read_text(errors="replace"))
    return result, cpu
