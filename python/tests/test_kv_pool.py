"""The agent never destroys data it cannot account for (issue 22 §1).

A DB is written by the stock db_bench through the plugin (compaction outputs
in the agent's SST file pool), the agent is restarted while the DB is out of
sight (its directory renamed away, its filesystem unmounted) or with a damaged
owner record, and RocksDB's own tools judge the DB afterwards: `ldb
checkconsistency` (every file's size against the MANIFEST) and `sst_dump
--command=verify` (every block's checksum)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from dpukit.paths import build_dir, tool_path

PATIENCE_S = 60  # a hang is a failure, not a slow run


def run(cmd, env=None, timeout=300, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}"
    return proc


def eventually(pred) -> bool:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


class Agent:
    """build/bin/dpukit-agent with a pool of 32 slots of 2 MB, its log in a file."""

    def __init__(self, exe: Path, work: Path, pool: Path, name: str, *args: str):
        self.sock, self.stats_file, self.log = work / f"{name}.sock", work / f"{name}.json", work / f"{name}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([str(exe), "--listen", str(self.sock), "--pool", str(pool), "--slots", "32",
                                          "--slot-size", "2M", "--stats", str(self.stats_file), *args],
                                         stdout=log, stderr=subprocess.STDOUT)
        assert eventually(lambda: self.sock.exists() or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.log.read_text()

    def stats(self) -> dict:
        """Its figures, written on SIGUSR1."""
        self.stats_file.unlink(missing_ok=True)
        self.proc.send_signal(signal.SIGUSR1)
        assert eventually(self.stats_file.exists), "no statistics after SIGUSR1"
        return json.loads(self.stats_file.read_text())["figures"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=PATIENCE_S)
        assert self.proc.returncode == 0, self.log.read_text()


@pytest.fixture
def agent_exe() -> Path:
    exe = tool_path("dpukit-agent", must_exist=False)
    if not exe.is_file():
        pytest.skip("build/bin/dpukit-agent not built")
    if not (shutil.which("db_bench") and shutil.which("ldb") and shutil.which("sst_dump")):
        pytest.skip("db_bench, ldb and sst_dump (Debian's rocksdb-tools) are not installed")
    return exe


@pytest.fixture
def start_agent(agent_exe, tmp_path):
    """start_agent(name, *args) runs an agent on the test's pool; all are stopped at the end."""
    agents = []

    def start(name: str, *args: str) -> Agent:
        a = Agent(agent_exe, tmp_path, tmp_path / "pool", name, *args)
        agents.append(a)
        return a

    yield start
    for a in agents:
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()


def fill(db: Path, agent: Agent) -> list[Path]:
    """A few MB of fillrandom by the stock db_bench through the plugin, small
    memtables and files so that compaction writes several pool files; the DB's
    SSTs that are pool symlinks."""
    run(["db_bench", "--benchmarks=fillrandom", f"--db={db}", "--num=20000", "--value_size=256",
         "--key_size=16", "--compression_type=none", "--write_buffer_size=262144",
         "--target_file_size_base=262144", "--max_bytes_for_level_base=1048576",
         "--level0_file_num_compaction_trigger=2", "--max_background_jobs=2", "--seed=1",
         f"--fs_uri=pulsedb://{agent.sock}"],
        env={"LD_PRELOAD": str(build_dir() / "lib" / "libdpukit_kv.so")})
    links = sorted(p for p in db.glob("*.sst") if p.is_symlink())
    assert links, "compaction outputs live in the agent's pool"
    return links


def judge(db: Path) -> None:
    """RocksDB's own verdict on the DB, without the plugin: ldb checkconsistency,
    and sst_dump --command=verify on every live SST file (an output of a
    compaction that db_bench's exit cut short is not live: RocksDB deletes it
    when the DB next opens)."""
    out = run(["ldb", f"--db={db}", "checkconsistency"], check=False)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr
    listed = run(["ldb", f"--db={db}", "list_live_files_metadata"]).stdout
    live = [line.strip() for line in listed.splitlines() if line.strip().endswith(".sst")]
    assert live, listed
    assert any(Path(f).is_symlink() for f in live), "live files in the pool are judged"
    for sst in live:
        out = run(["sst_dump", f"--file={sst}", "--command=verify"], check=False)
        text = out.stdout + out.stderr
        assert out.returncode == 0 and "The file is ok" in text and "Corruption" not in text, text


FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_UNWRITTEN = 0x800
_FIEMAP = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT = struct.Struct("=QQQQQIIII")  # fe_logical, fe_physical, fe_length, 2 reserved, fe_flags, 3 reserved


def extents(path: Path) -> list[tuple[int, int, int]] | None:
    """(logical, length, flags) of every extent of the file, past its end
    too (what fallocate's KEEP_SIZE left), by FIEMAP; None without FIEMAP."""
    found, at, count = [], 0, 128
    with open(path, "rb") as f:
        while True:
            buf = bytearray(_FIEMAP.pack(at, (1 << 64) - 1 - at, FIEMAP_FLAG_SYNC, 0, count, 0) +
                            bytes(_EXTENT.size * count))
            try:
                fcntl.ioctl(f.fileno(), FS_IOC_FIEMAP, buf)
            except OSError:
                return None
            mapped = _FIEMAP.unpack_from(buf)[3]
            last = mapped == 0
            for i in range(mapped):
                logical, _, length, _, _, flags, *_ = _EXTENT.unpack_from(buf, _FIEMAP.size + i * _EXTENT.size)
                found.append((logical, length, flags))
                at = logical + length
                last = last or bool(flags & FIEMAP_EXTENT_LAST)
            if last:
                return found


def pool_check(agent_exe: Path, pool: Path, *extra) -> subprocess.CompletedProcess:
    return run([agent_exe, "pool", "check", "--pool", pool, *extra], check=False)


def restart_out_of_sight(start_agent, db: Path, hide, show) -> tuple[list[Path], dict, str]:
    """Fills the DB, stops the agent, hides the DB (hide()), starts a new
    agent, shows the DB again (show()) and waits until the agent has taken
    back what it quarantined. Returns the DB's pool files, the new agent's
    pool figures at its start and its log."""
    first = start_agent("first")
    links = fill(db, first)
    first.stop()
    hide()
    second = start_agent("second")
    at_start = second.stats()["pool"]
    show()
    assert eventually(lambda: second.stats()["pool"].get("quarantined", 0) == 0), second.log.read_text()
    returned = second.stats()["pool"].get("returned")
    second.stop()
    return links, {**at_start, "returned_later": returned}, second.log.read_text()


def assert_kept_in_quarantine(links: list[Path], pool: dict, log: str) -> None:
    assert pool["reclaimed"] == 0, pool
    assert pool["quarantined"] == len(links), pool
    assert sorted(q["owner"] for q in pool["quarantine"]) == sorted(str(p) for p in links), pool
    # (one may be empty: an output of a compaction that db_bench's exit cut
    # short, not live)
    assert sum(q["bytes"] for q in pool["quarantine"]) > 0, pool
    assert pool["free"] == pool["slots"] - len(links), pool
    assert pool["returned_later"] == len(links), pool
    assert f"{len(links)} quarantined" in log and "is missing" in log, log
    assert "freed" not in log.replace("freed at start", ""), log


def test_creating_a_pool_says_what_it_writes_and_how_far_it_got(start_agent, tmp_path):
    agent = start_agent("first")
    log = agent.log.read_text()
    agent.stop()
    assert "creating 32 slots of 2 MiB: writing 0.06 GiB of zeros" in log, log
    progress = [line for line in log.splitlines() if "written out" in line and " GiB) in " in line]
    assert len(progress) == 8 and "written out 32 of 32 slots (0.06 of 0.06 GiB)" in progress[-1], log
    assert log.index("written out 32 of 32") < log.index("listening at"), "progress comes before the agent listens"
    again = start_agent("second")  # the same pool: opened, not created
    log = again.log.read_text()
    again.stop()
    assert "creating 32 slots" not in log and "written out" not in log, log


# Issue 25: the agent's direct writes must land in written blocks, not in
# unwritten (preallocated) extents, whose conversion at I/O completion the
# host's kworkers do. After a fill through the agent, no slot has an unwritten
# extent: neither the free ones (written out: the slot's size, no hole) nor
# the ones holding the DB's files (nothing preallocated past their end), and
# RocksDB finds the DB whole.
def test_the_agents_pool_slots_have_no_unwritten_extents(agent_exe, start_agent, tmp_path):
    db, pool = tmp_path / "db", tmp_path / "pool"
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    if extents(probe) is None:
        pytest.skip("no FIEMAP on this filesystem")
    agent = start_agent("first")
    links = fill(db, agent)
    stats = agent.stats()
    agent.stop()
    assert stats["pool"]["claims"] > len(links), "slots were reused"
    assert stats["pool"]["released"] > 0, stats["pool"]
    judge(db)
    used = {p.resolve() for p in links}
    slots = sorted(pool.glob("slot-*"))
    assert len(slots) == 32
    for slot in slots:
        ext = extents(slot)
        assert ext is not None
        unwritten = [e for e in ext if e[2] & FIEMAP_EXTENT_UNWRITTEN]
        assert not unwritten, f"{slot.name} ({'in use' if slot in used else 'free'}): unwritten extents {unwritten}"
        if slot not in used:
            assert slot.stat().st_size == 2 << 20, f"{slot.name} is free and written out to the slot's size"
            covered = 0
            for logical, length, _ in ext:
                assert logical <= covered, f"{slot.name}: a hole at {covered}"
                covered = max(covered, logical + length)
            assert covered >= 2 << 20, f"{slot.name}: a hole from {covered}"
    check = pool_check(agent_exe, pool, "--db", db)
    assert check.returncode == 0, check.stdout + check.stderr


# PulseDB §IV-E's engines against software we did not write: the stock
# db_bench writes through the agent on each engine, and RocksDB's own tools
# find the DB whole. libaio does sync_file_range and close as system calls
# (AIO has no command for them), which its statistics count: that shows the
# engine really ran.
@pytest.mark.parametrize("engine", ["io_uring-sqpoll", "libaio", "pwrite"])
def test_db_bench_through_each_io_engine_leaves_a_whole_db(agent_exe, start_agent, tmp_path, engine):
    db = tmp_path / "db"
    agent = start_agent("first", "--io-engine", engine)
    fill(db, agent)
    stats = agent.stats()
    agent.stop()
    assert stats["errors"] == 0, agent.log.read_text()
    assert (stats["io_uring"]["aio_sync_calls"] > 0) == (engine == "libaio"), stats["io_uring"]
    judge(db)


# The peer misbehaves: db_bench is killed (SIGKILL) in the middle of its
# writes, with files open in the pool and writes in flight on the engine. The
# agent keeps serving, recycles what it was owed no sync_close for, and a
# second db_bench opens the same DB through it; RocksDB's tools find it whole.
@pytest.mark.parametrize("engine", ["io_uring", "libaio"])
def test_db_bench_killed_mid_write_leaves_a_whole_db(agent_exe, start_agent, tmp_path, engine):
    db = tmp_path / "db"
    agent = start_agent("first", "--io-engine", engine)
    env = {**os.environ, "LD_PRELOAD": str(build_dir() / "lib" / "libdpukit_kv.so")}
    victim = subprocess.Popen(["db_bench", "--benchmarks=fillrandom", f"--db={db}", "--num=2000000",
                               "--value_size=256", "--key_size=16", "--compression_type=none",
                               "--write_buffer_size=262144", "--target_file_size_base=262144",
                               "--max_bytes_for_level_base=1048576", "--level0_file_num_compaction_trigger=2",
                               "--max_background_jobs=2", "--seed=1", f"--fs_uri=pulsedb://{agent.sock}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert eventually(lambda: sum(p.is_symlink() for p in db.glob("*.sst")) >= 4 or victim.poll() is not None)
        assert victim.poll() is None, "db_bench ended before it could be killed: give it more to write"
    finally:
        victim.kill()
        victim.wait()
    assert agent.proc.poll() is None, agent.log.read_text()
    assert eventually(lambda: agent.stats()["queue_pairs"]["active"] == 0), "the agent let go of the dead host"
    # RocksDB recovers the DB (its WAL) through the same agent, then writes more.
    run(["db_bench", "--benchmarks=overwrite", "--use_existing_db=1", f"--db={db}", "--num=20000",
         "--value_size=256", "--key_size=16", "--compression_type=none", "--write_buffer_size=262144",
         "--target_file_size_base=262144", "--max_bytes_for_level_base=1048576",
         "--level0_file_num_compaction_trigger=2", "--max_background_jobs=2", "--seed=2",
         f"--fs_uri=pulsedb://{agent.sock}"], env={"LD_PRELOAD": env["LD_PRELOAD"]})
    stats = agent.stats()
    agent.stop()
    assert stats["pool"]["quarantined"] == 0, stats["pool"]
    judge(db)


# Issue 22 §1.1, the rename: the DB directory renamed away while the agent
# starts, then back. Runs everywhere (no mount needed).
def test_a_db_renamed_away_while_the_agent_starts_keeps_its_pool_files(agent_exe, start_agent, tmp_path):
    db, away = tmp_path / "db", tmp_path / "db.renamed"
    links, pool, log = restart_out_of_sight(start_agent, db, lambda: db.rename(away), lambda: away.rename(db))
    judge(db)
    assert_kept_in_quarantine(links, pool, log)
    check = pool_check(agent_exe, tmp_path / "pool", "--db", db)
    assert check.returncode == 0, check.stdout + check.stderr


def _mount_tool_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: cannot set up a loop device"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


@contextlib.contextmanager
def loop_ext4(image: Path, mnt: Path, size_mb: int):
    """An ext4 filesystem of size_mb in a file, on a loop device, mounted at
    mnt; yields (mount, unmount). Skips (with the reason) where this machine
    cannot; unmounts and detaches whatever it set up, also on failure."""
    if reason := _mount_tool_reason():
        pytest.skip(reason)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    mkfs = run(["mkfs.ext4", "-q", "-F", image], check=False)
    if mkfs.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {mkfs.stderr.strip()}")
    attach = run(["losetup", "--find", "--show", image], check=False)
    if attach.returncode != 0:
        pytest.skip(f"no loop device: {attach.stderr.strip()}")
    dev = attach.stdout.strip()
    mnt.mkdir(exist_ok=True)
    mounted = False

    def mount():
        nonlocal mounted
        run(["mount", dev, mnt])
        mounted = True

    def unmount():
        nonlocal mounted
        run(["umount", mnt])
        mounted = False

    try:
        out = run(["mount", dev, mnt], check=False)
        if out.returncode != 0:
            pytest.skip(f"cannot mount a loop device here: {out.stderr.strip()}")
        mounted = True
        yield mount, unmount
    finally:
        # A process still using it (a test that failed half-way) must not keep
        # it mounted: detached lazily, the device goes when it is let go.
        if mounted and run(["umount", mnt], check=False).returncode != 0:
            run(["umount", "-l", mnt], check=False)
        run(["losetup", "-d", dev], check=False)


# Issue 22 §1.1 as reported: the DB on a loop-mounted ext4, not mounted yet
# when the agent starts. In a directory of the volume (missing while it is not
# mounted), or at its root (then the mount point, another directory, is there).
@pytest.mark.parametrize("where", ["db", "."])
def test_a_db_volume_mounted_after_the_agent_starts_keeps_its_pool_files(agent_exe, start_agent, tmp_path, where):
    with loop_ext4(tmp_path / "db.img", tmp_path / "mnt", 64) as (mount, unmount):
        db = tmp_path / "mnt" if where == "." else tmp_path / "mnt" / where
        links, pool, log = restart_out_of_sight(start_agent, db, unmount, mount)
        judge(db)
        assert_kept_in_quarantine(links, pool, log)
        check = pool_check(agent_exe, tmp_path / "pool", "--db", db)
        assert check.returncode == 0, check.stdout + check.stderr


# Issue 22 §1.2: one damaged owner record (its 4 KB page in pool.index zeroed).
def test_a_damaged_owner_record_quarantines_its_slot(agent_exe, start_agent, tmp_path):
    db, pool = tmp_path / "db", tmp_path / "pool"
    first = start_agent("first")
    links = fill(db, first)
    first.stop()
    index = pool / "pool.index"
    data = bytearray(index.read_bytes())
    owner = str(links[0]).encode()
    at = data.find(owner)
    assert at >= 0, "the owner is recorded in pool.index"
    page = at // 4096 * 4096
    data[page:page + 4096] = bytes(4096)
    index.write_bytes(data)

    second = start_agent("second")
    stats = second.stats()["pool"]
    second.stop()
    judge(db)
    assert stats["reclaimed"] == 0 and stats["quarantined"] == 1, stats
    assert "damaged" in stats["quarantine"][0]["reason"], stats
    assert "damaged" in second.log.read_text()
    check = pool_check(agent_exe, pool)
    assert check.returncode == 1 and "damaged" in check.stdout, check.stdout + check.stderr


# Issue 22 §1.3: a pool too big for its filesystem (64 slots of 1 GB on
# 89 MB) fails, gives back everything it allocated, and the corrected
# flags then work.
def test_a_pool_that_does_not_fit_leaves_nothing_behind(agent_exe, tmp_path):
    with loop_ext4(tmp_path / "pool.img", tmp_path / "mnt", 89):
        mnt = tmp_path / "mnt"
        before = os.statvfs(mnt)
        pool = mnt / "pool"
        sock = tmp_path / "agent.sock"
        out = run([agent_exe, "--listen", sock, "--pool", pool, "--slots", "64", "--slot-size", "1G"], check=False)
        assert out.returncode == 1, out.stdout + out.stderr
        assert "no space to preallocate" in out.stderr, out.stderr
        assert not pool.exists(), list(pool.iterdir())
        after = os.statvfs(mnt)
        assert after.f_bfree == before.f_bfree, "every block it allocated is free again"
        agent = Agent(agent_exe, tmp_path, pool, "corrected")  # 32 slots of 2 MB
        try:
            assert agent.stats()["pool"]["free"] == 32
        finally:
            agent.stop()
