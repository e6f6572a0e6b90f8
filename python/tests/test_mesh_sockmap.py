"""The "envoy + sockmap" baseline (``dpukit-mesh-sockmap``, mesh/baselines/sockmap/,
``dpukit.mesh_sockmap``): loopback TCP between processes of the
cgroup arrives intact (large, both ways, many small round trips) and the
program's counters prove it was redirected; sockets of processes outside the
cgroup are untouched; the loader cleans up; the Envoy sidecar chain works
through it. Needs root (BPF programs, cgroups)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from pathlib import Path

import pytest

from conftest import native_tool
from dpukit import mesh_sockmap
from dpukit.mesh_sockmap import (SockmapLoader, SockmapUnavailable, own_cgroup, start_sockmap,
                                             with_sockmap)
from dpukit.procs import Group, Proc, http_get

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: loads BPF programs and makes cgroups")

# A TCP peer: `serve` echoes every connection's bytes back until EOF; `client
# PORT SIZE SEED` sends SIZE pseudo-random bytes while reading the echo, checks
# it byte for byte, then does 500 small request/answer round trips.
PEER = textwrap.dedent("""\
    import random, socket, sys, threading
    if sys.argv[1] == "serve":
        listener = socket.create_server(("127.0.0.1", 0))
        print("listening", listener.getsockname()[1], flush=True)
        def echo(conn):
            with conn:
                while data := conn.recv(1 << 16):
                    conn.sendall(data)
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()
    port, size, seed = map(int, sys.argv[2:5])
    data = random.Random(seed).randbytes(size)
    with socket.create_connection(("127.0.0.1", port)) as s:
        sender = threading.Thread(target=lambda: s.sendall(data))
        sender.start()
        got = bytearray()
        while len(got) < size:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        sender.join()
        assert got == data, f"echo differs: {len(got)} of {size} bytes, first difference at " + \\
            str(next((i for i, (a, b) in enumerate(zip(got, data)) if a != b), min(len(got), size)))
        for i in range(500):
            msg = bytes([i % 251]) * (1 + i * 37 % 3000)
            s.sendall(msg)
            back = b""
            while len(back) < len(msg):
                back += s.recv(len(msg) - len(back))
            assert back == msg, f"round trip {i} differs"
    print("ok", size, flush=True)
""")

BIG = 24 << 20  # bytes each way


@pytest.fixture
def sockmap_tool() -> Path:
    return native_tool(mesh_sockmap.LOADER_TOOL)


@pytest.fixture
def group(tmp_path: Path):
    with Group(tmp_path / "logs") as g:
        yield g


@pytest.fixture
def peer(tmp_path: Path) -> Path:
    path = tmp_path / "peer.py"
    path.write_text(PEER)
    return path


@pytest.fixture
def loader(sockmap_tool: Path, group: Group) -> SockmapLoader:
    """The loader attached to a fresh cgroup; this process stays outside."""
    return start_sockmap(group, join=False)


def start_server(group: Group, peer: Path, loader: SockmapLoader | None, name: str) -> tuple[Proc, int]:
    """The echo peer, born in the cgroup when ``loader`` is given; its port."""
    argv = [sys.executable, str(peer), "serve"]
    proc = group.start(loader.wrap(argv) if loader else argv, name=name)
    return proc, int(proc.wait_line(r"^listening (\d+)$").group(1))


def run_client(peer: Path, port: int, loader: SockmapLoader | None, size: int = BIG, seed: int = 1) -> None:
    argv = [sys.executable, str(peer), "client", str(port), str(size), str(seed)]
    r = subprocess.run(loader.wrap(argv) if loader else argv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"ok {size}", r.stdout + r.stderr


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def test_loopback_tcp_in_the_cgroup_is_redirected_and_intact(loader: SockmapLoader, group: Group, peer: Path):
    server, port = start_server(group, peer, loader, "server")
    assert own_cgroup(server.pid) == loader.cgroup
    before = loader.counters()
    for seed in (1, 2):  # two connections, each BIG bytes both ways plus the round trips
        run_client(peer, port, loader, seed=seed)
    d = delta(loader.counters(), before)
    # Both ends of both connections went into the map, and (nearly) every byte
    # took the redirect: out and back, BIG each, per connection.
    assert d["sockets_added"] == 4, d
    assert d["socket_add_failed"] == 0, d
    assert d["msgs_redirected"] >= 2 * 500, d
    assert d["bytes_redirected"] >= 2 * 2 * BIG, d


def test_sockets_outside_the_cgroup_are_untouched(loader: SockmapLoader, group: Group, peer: Path):
    # Both ends outside: the program never sees them.
    _, port = start_server(group, peer, None, "server-outside")
    before = loader.counters()
    run_client(peer, port, None)
    assert delta(loader.counters(), before) == dict.fromkeys(mesh_sockmap.COUNTER_NAMES, 0)

    # Server inside, client outside: only the server's socket is tracked; its
    # sends find no peer in the map and take TCP, and the client's are not seen.
    _, port = start_server(group, peer, loader, "server-inside")
    before = loader.counters()
    run_client(peer, port, None, size=1 << 20)
    d = delta(loader.counters(), before)
    assert d["sockets_added"] == 1 and d["msgs_redirected"] == 0 and d["bytes_redirected"] == 0, d
    assert d["msgs_passed"] > 0, d


def test_a_process_moved_in_after_listening_is_not_covered(loader: SockmapLoader, group: Group, peer: Path):
    """Why processes must be born in the cgroup: an accepted socket belongs to
    its listener's cgroup, so moving a running server in covers nothing it
    accepts (the kernel's rule; mesh_sockmap's note)."""
    server, port = start_server(group, peer, None, "server-moved")
    loader.move(server)
    assert own_cgroup(server.pid) == loader.cgroup
    before = loader.counters()
    run_client(peer, port, loader, size=1 << 20)
    d = delta(loader.counters(), before)
    assert d["sockets_added"] == 1 and d["msgs_redirected"] == 0, d  # only the client's socket


def test_join_starts_the_chain_inside_and_stop_removes_everything(sockmap_tool: Path, tmp_path: Path, peer: Path):
    home = own_cgroup()
    with Group(tmp_path / "logs") as g:
        loader = start_sockmap(g)  # joins: what this process starts from now on is inside
        assert own_cgroup() == loader.cgroup and loader.cgroup.is_dir()
        _, port = start_server(g, peer, None, "server")
        r = subprocess.run([sys.executable, str(peer), "client", str(port), str(1 << 20), "3"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert loader.counters()["bytes_redirected"] >= 2 << 20
    # The group stopped the server, then the loader: this process is home again,
    # the cgroup is gone, and the loader said so.
    assert own_cgroup() == home
    assert not loader.cgroup.exists()
    assert loader.popen.returncode == 0
    assert "detached" in loader.output() and "warning" not in loader.output()
    assert loader.counters()["bytes_redirected"] >= 2 << 20  # the last print, kept


def test_refusals_are_one_clear_line(sockmap_tool: Path, group: Group):
    r = subprocess.run([str(sockmap_tool), "--cgroup", f"dpukit-sockmap-test-{os.getpid()}",
                        "--bpf-object", "/nonexistent/x.bpf.o"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "dpukit-mesh-sockmap: error: BPF object /nonexistent/x.bpf.o not found (build the target sockmap_redirect_bpf)"]
    r = subprocess.run([str(sockmap_tool), "--cgroup", "../escape"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and re.fullmatch(r"dpukit-mesh-sockmap: error: --cgroup \.\./escape: .*\n", r.stderr)
    with pytest.raises(SockmapUnavailable, match=r"^sockmap baseline unavailable: .*--cgroup /etc: not a cgroup"):
        start_sockmap(group, cgroup="/etc")
    assert not group.procs  # the failed loader is not left in the group


def test_kernel_refusal_names_the_call(sockmap_tool: Path, request: pytest.FixtureRequest):
    """Without privileges the kernel refuses the load: exit 1, one line naming
    the call and the errno text."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not found")
    # Copies that the unprivileged user can read and run.
    # pytest's own temporary directories are private to root.
    where = Path(tempfile.mkdtemp(prefix="dpukit-sockmap-"))
    where.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(where, ignore_errors=True))
    tool, obj = where / "tool", where / "sockmap_redirect.bpf.o"
    shutil.copy(sockmap_tool, tool)
    shutil.copy(sockmap_tool.parent.parent / "lib" / "sockmap_redirect.bpf.o", obj)
    obj.chmod(0o644)
    cgroup = mesh_sockmap.cgroup2_mount() / f"dpukit-sockmap-eperm-{os.getpid()}"
    cgroup.mkdir()  # exists: the first refusal is the kernel's, not the file system's
    try:
        r = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", str(tool),
                            "--cgroup", cgroup.name, "--bpf-object", str(obj)],
                           capture_output=True, text=True, timeout=30)
    finally:
        cgroup.rmdir()
    if r.returncode in (126, 127) or "Permission denied" in r.stderr and "bpf_object__load" not in r.stderr:
        pytest.skip(f"the unprivileged user cannot run the copy: {r.stderr.strip()}")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [f"dpukit-mesh-sockmap: error: bpf_object__load({obj}): Operation not permitted "
                                     "(needs root, or CAP_BPF, CAP_NET_ADMIN and write access to the cgroup)"]


def test_envoy_sidecar_chain_through_the_sockmap(sockmap_tool: Path, tmp_path: Path):
    """The baseline itself: load → client-side Envoy → server-side Envoy →
    echo, every hop on loopback redirected."""
    from dpukit.mesh_harness import Chain, envoy_sidecars

    native_tool("dpukit-mesh")
    with Group(tmp_path / "logs") as g:
        chain = Chain(g, tmp_path)
        with_sockmap(envoy_sidecars)(chain)  # how the harness wires the envoy-sockmap topology
        loader = next(p for p in g.procs if isinstance(p, SockmapLoader))
        for p in g.procs:
            if p is not loader:  # the loader itself was started before the join
                assert own_cgroup(p.pid) == loader.cgroup, p.name
        before = loader.counters()
        size = 4 << 20
        req = urllib.request.Request(chain.url, headers={"x-echo-size": str(size)})
        for _ in range(3):
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200 and len(resp.read()) == size
        assert http_get(chain.url)[0] == 200
        d = delta(loader.counters(), before)
        # Each response body crosses three loopback hops (service → server-side
        # Envoy → client-side Envoy → this process), all redirected.
        assert d["bytes_redirected"] >= 3 * 3 * size, d
        assert d["socket_add_failed"] == 0, d
