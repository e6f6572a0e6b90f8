"""The paper's "envoy + sockmap" baseline: the Envoy sidecar pair with its
loopback hops (load generator → client-side Envoy → server-side Envoy →
service) redirected by an eBPF sockmap, as Istio-on-eBPF and Merbridge do.

``build/bin/dpukit-mesh-sockmap`` (mesh/baselines/sockmap/tools/dpukit_mesh_sockmap.cc) attaches
a sock_ops program to one cgroup v2 and an sk_msg program to a socket hash:
every established loopback TCP socket of a process in the cgroup goes into the
hash, and each sendmsg on it is handed straight to the peer socket. Sockets of
processes outside the cgroup are not touched.

**Processes must be born in the cgroup.** A socket belongs to the cgroup its
process was in when the socket was made, and an accepted socket to its
listener's: moving a running Envoy into the cgroup covers the connections it
opens afterwards, not those it accepts on the listener it already has (the
redirect then never finds a peer; ``test_mesh_sockmap.py`` shows it). So the
loader starts first and the calling process joins the cgroup until the
loader stops; every process it starts meanwhile (the chain's servers, wrk,
fortio) is born inside. Wiring a topology into the harness's TOPOLOGIES
(``dpukit.mesh_harness``) is one entry::

    from dpukit.mesh_sockmap import with_sockmap

    Topology("envoy-sockmap", "client → Envoy → Envoy → service, loopback hops redirected by an eBPF sockmap",
             with_sockmap(envoy_sidecars)),

(``with_sockmap(f)`` starts the loader, then ``f(chain)``; spelled out:
``start_sockmap(chain.group); envoy_sidecars(chain)``.)

:class:`SockmapUnavailable` ("sockmap baseline unavailable: ...") says why
when the kernel or the system refuses (no BPF, no cgroup2, not root).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from dpukit.errors import DpukitError
from dpukit.native import stderr_tail
from dpukit.paths import ToolNotFound, tool_path
from dpukit.procs import Group, Proc, ProcessFailed

LOADER_TOOL = "dpukit-mesh-sockmap"
COUNTER_NAMES = ("sockets_added", "socket_add_failed", "msgs_redirected", "bytes_redirected", "msgs_passed")
_names = itertools.count(1)


class SockmapUnavailable(DpukitError):
    """The sockmap baseline cannot run here; the message says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"sockmap baseline unavailable: {reason}")


def cgroup2_mount() -> Path:
    """Where cgroup2 is mounted (the first cgroup2 line of /proc/mounts)."""
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "cgroup2":
                # /proc/mounts writes a space in a path as \040 (and so on).
                return Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
    raise SockmapUnavailable("no cgroup2 file system is mounted (/proc/mounts has no cgroup2 line)")


def own_cgroup(pid: int | str = "self") -> Path:
    """The cgroup v2 directory process ``pid`` is in (its "0::" line of /proc/PID/cgroup)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return cgroup2_mount() / line[3:].strip().lstrip("/")
    raise SockmapUnavailable(f"/proc/{pid}/cgroup has no cgroup v2 entry")


def _move_pid(cgroup: Path, pid: int) -> None:
    try:
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")
    except OSError as e:
        raise DpukitError(f"moving pid {pid} into cgroup {cgroup}: {e.strerror or e}") from None


@dataclass
class SockmapLoader(Proc):
    """The running loader: a :class:`~dpukit.procs.Proc` of the chain's group
    (its command line is recorded with the chain's), plus its cgroup."""

    cgroup: Path = Path()
    _home: Path | None = None  # the cgroup this process left in join(), to go back to
    _seq: int = 0  # counters lines printed so far
    _final: dict[str, int] = field(default_factory=dict)

    @property
    def procs_file(self) -> Path:
        return self.cgroup / "cgroup.procs"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` behind a shell that puts itself into the cgroup and execs
        it (so the pid stays the program's): for a one-shot program started by
        someone else, e.g. a load generator, when the caller did not join."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs_file), *map(str, argv)]

    def move(self, *procs: Proc | int) -> None:
        """Move running processes into the cgroup. Only sockets they make from
        now on are redirected: not those accepted on a listener they already
        have (see the module's note); start processes inside instead."""
        for p in procs:
            _move_pid(self.cgroup, p.pid if isinstance(p, Proc) else int(p))

    def join(self) -> None:
        """This process joins the cgroup until :meth:`leave` (or the loader's
        stop): every process it starts meanwhile is born inside. Its own
        loopback connections (readiness checks) are redirected too."""
        if self._home is None:
            self._home = own_cgroup()
            _move_pid(self.cgroup, os.getpid())

    def leave(self) -> None:
        """Back to the cgroup this process was in before :meth:`join`."""
        if self._home is not None:
            _move_pid(self._home, os.getpid())
            self._home = None

    @contextlib.contextmanager
    def inside(self) -> Iterator[SockmapLoader]:
        """``with loader.inside(): ...``: processes started in the block are born in the cgroup."""
        joined = self._home is None
        self.join()
        try:
            yield self
        finally:
            if joined:
                self.leave()

    def counters(self, timeout: float = 5.0) -> dict[str, int]:
        """The program's counters now (summed over CPUs): SIGUSR1 makes the
        loader print them. After the loader stopped: its last print."""
        if not self.alive():
            return dict(self._final)
        self._seq += 1
        os.kill(self.pid, signal.SIGUSR1)
        m = self.wait_line(rf"^counters seq={self._seq} (.*)$", timeout)
        return _parse_counters(m.group(1))

    def stop(self) -> int | None:
        """Leave the cgroup (so that it is empty when the loader removes it),
        then stop the loader: it prints the counters a last time, detaches
        and removes the cgroup."""
        self.leave()
        running = self.alive()
        rc = super().stop()
        if running:
            lines = re.findall(r"^counters seq=\d+ (.*)$", self.output(), re.M)
            if lines:
                self._final = _parse_counters(lines[-1])
        return rc


def _parse_counters(text: str) -> dict[str, int]:
    found = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", text)}
    return {k: found.get(k, 0) for k in COUNTER_NAMES}


def start_sockmap(group: Group, *, join: bool = True, cgroup: str | None = None, name: str = "sockmap",
                  timeout: float = 10.0) -> SockmapLoader:
    """Start the loader in ``group`` and wait until it is attached.

    Call it before starting the processes to accelerate (they must be born in
    the cgroup). With ``join`` (the default) this process joins the cgroup
    until the loader is stopped (by ``group.stop()``, after every process
    started later), so everything it starts is inside. ``cgroup``: the cgroup's
    name below the cgroup2 mount (default: a fresh ``dpukit-sockmap-PID-N``).
    Raises :class:`SockmapUnavailable` when the kernel or the system refuses.
    """
    try:
        tool = tool_path(LOADER_TOOL)
    except ToolNotFound as e:
        raise SockmapUnavailable(str(e)) from None
    cgroup = cgroup or f"dpukit-sockmap-{os.getpid()}-{next(_names)}"
    # --exit-with-parent: if this process dies, the loader detaches and exits.
    argv = [str(tool), "--cgroup", cgroup, "--exit-with-parent"]
    base = group.start(argv, name=name, place="host")
    group.procs.remove(base)
    loader = SockmapLoader(base.name, base.argv, base.popen, base.log, base.place)
    group.procs.append(loader)
    try:
        m = loader.wait_line(r"^attached: cgroup (.+) \((?:created|existing)\)", timeout)
        loader.wait_line(r"^ready$", timeout)
    except ProcessFailed:
        loader.stop()
        group.procs.remove(loader)
        errors = [line for line in stderr_tail(loader.output()) if "error:" in line]
        raise SockmapUnavailable(errors[-1] if errors else
                                 f"{LOADER_TOOL} exited with status {loader.popen.returncode}: "
                                 + " / ".join(stderr_tail(loader.output(), 3))) from None
    loader.cgroup = Path(m.group(1))
    if join:
        loader.join()
    return loader


def with_sockmap(start: Callable[[Any], None]) -> Callable[[Any], None]:
    """A topology's start function with the sockmap in front: ``start(chain)``
    runs after the loader is attached and this process joined its cgroup
    (``chain`` needs only a ``group``: a :class:`~dpukit.procs.Group`)."""

    def start_with_sockmap(chain: Any) -> None:
        start_sockmap(chain.group)
        start(chain)

    start_with_sockmap.__doc__ = f"{start.__doc__ or start.__name__} With loopback hops redirected by an eBPF sockmap."
    return start_with_sockmap
