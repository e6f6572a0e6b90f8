#include "temp_dir.h"
#include "engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "protocol.h"

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Io = IoEvent::Io;
using Kind = IoEvent::Kind;

// A hang is a failure, not a slow run: every wait gives up after this.
constexpr auto kPatience = 60s;

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

bool exists_at_all(const fs::path& p) { return fs::exists(fs::symlink_status(p)); }

constexpr uint32_t op(Op o) { return static_cast<uint32_t>(o); }

// The host side of the protocol, as the RocksDB plugin speaks it.
struct Host {
  ChannelHost& ch;

  void hello(uint64_t id, uint64_t version = kProtocolVersion) { ch.submit(op(Op::kHello), id, {}, {version}); }
  void open(uint64_t id, const fs::path& name, bool use_pool) {
    std::string s = name.string();
    ch.submit(op(Op::kOpen), id, {reinterpret_cast<const uint8_t*>(s.data()), s.size()},
              {use_pool ? uint64_t{kUsePool} : uint64_t{0}});
  }
  void write(uint64_t id, uint64_t offset, std::span<const uint8_t> data) {
    ch.submit(op(Op::kWrite), id, data, {offset});
  }
  // The DMA path: the engine pulls `data` from this process's memory.
  void write_from(uint64_t id, uint64_t offset, std::span<const uint8_t> data) {
    ch.submit(op(Op::kWriteFrom), id, {}, {offset, reinterpret_cast<uint64_t>(data.data()), data.size()});
  }
  void range_sync(uint64_t id, uint64_t offset, uint64_t len) { ch.submit(op(Op::kRangeSync), id, {}, {offset, len}); }
  void sync_close(uint64_t id, uint64_t size) { ch.submit(op(Op::kSyncClose), id, {}, {size}); }
  void recycle(uint64_t id, const fs::path& p) {
    std::string s = p.string();
    ch.submit(op(Op::kRecycle), id, {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // Up to `n` completions, fewer only if they do not come in kPatience.
  std::vector<ChannelCompletion> collect(size_t n) {
    std::vector<ChannelCompletion> out;
    auto deadline = Clock::now() + kPatience;
    while (out.size() < n && Clock::now() < deadline) {
      ChannelCompletion c[16];
      size_t k = ch.wait_completions(c, std::min<size_t>(16, n - out.size()), 100ms);
      out.insert(out.end(), c, c + k);
    }
    return out;
  }
  // Requests are handled in order: once a hello sent now is answered, every
  // request before it has been dispatched. Returns the other completions seen.
  std::vector<ChannelCompletion> barrier() {
    constexpr uint64_t kBarrierId = 0xba771e7;
    hello(kBarrierId);
    std::vector<ChannelCompletion> others;
    auto deadline = Clock::now() + kPatience;
    while (Clock::now() < deadline) {
      ChannelCompletion c;
      if (ch.wait_completions(&c, 1, 100ms) == 0) continue;
      if (c.op == op(Op::kHello) && c.id == kBarrierId) return others;
      others.push_back(c);
    }
    throw std::runtime_error("the engine did not answer the barrier hello");
  }
};

// The engine serving one end of an in-process channel on its own thread.
struct EngineRun {
  explicit EngineRun(SstPool* pool, const EngineOptions& options = {}) {
    auto pair = make_channel_pair({});
    channel.emplace(std::move(pair.first));
    engine = std::make_unique<WritePersistEngine>(pool, stats, options);
    server = std::thread([this, dpu = std::move(pair.second)]() mutable {
      try {
        engine->serve(dpu);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  ~EngineRun() { finish(); }
  // Closes the queue pair in order and waits for serve() to return.
  void finish() {
    if (!server.joinable()) return;
    channel->close();
    server.join();
  }
  Host host() { return Host{*channel}; }

  EngineStats stats;
  std::unique_ptr<WritePersistEngine> engine;
  std::optional<ChannelHost> channel;
  std::thread server;
  std::string error;  // what serve() threw, if anything
};

// Every IoEvent the engine reports, in order.
struct TraceLog {
  std::mutex mu;
  std::vector<IoEvent> events;

  EngineOptions options(EngineOptions o = {}) {
    o.trace = [this](const IoEvent& e) {
      std::lock_guard lock(mu);
      events.push_back(e);
    };
    return o;
  }
  std::vector<IoEvent> snapshot() {
    std::lock_guard lock(mu);
    return events;
  }
  bool has(Io io, Kind kind) {
    auto ev = snapshot();
    return std::any_of(ev.begin(), ev.end(), [&](const IoEvent& e) { return e.io == io && e.kind == kind; });
  }
};

// The dependency rules of PulseDB §III-B4, checked on a trace: a range_sync
// is submitted only after every event of the writes of its file sent before
// it, an fsync only after every write and range_sync of its file, and the
// close right behind its fsync (one linked submission). Every SQE completes.
void expect_dependencies_kept(const std::vector<IoEvent>& ev) {
  size_t submits = 0, completes = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    const IoEvent& e = ev[i];
    (e.kind == Kind::kSubmit ? submits : completes)++;
    if (e.kind != Kind::kSubmit) continue;
    for (size_t j = i + 1; j < ev.size(); ++j) {
      const IoEvent& later = ev[j];
      if (later.file != e.file) continue;
      if (e.io == Io::kRangeSync && later.io == Io::kWrite && later.seq <= e.seq)
        ADD_FAILURE() << "file " << e.file << ": range_sync after write " << e.seq << " submitted while write "
                      << later.seq << " was in flight";
      if (e.io == Io::kFsync && (later.io == Io::kWrite || later.io == Io::kRangeSync))
        ADD_FAILURE() << "file " << e.file << ": fsync submitted while I/O of the file was in flight";
    }
    if (e.io == Io::kFsync) {
      ASSERT_LT(i + 1, ev.size());
      EXPECT_TRUE(ev[i + 1].io == Io::kClose && ev[i + 1].kind == Kind::kSubmit && ev[i + 1].file == e.file)
          << "file " << e.file << ": the close must follow its fsync in the same submission";
    }
  }
  EXPECT_EQ(submits, completes);
}

struct Variant {
  const char* name;
  bool pool;
  unsigned ring_entries;
  uint64_t max_inflight_bytes;
  IoEngine io_engine = IoEngine::kIoUring;
};

class EngineWrites : public ::testing::TestWithParam<Variant> {};

// Several files written at once, in random write sizes, interleaved, with
// range_syncs: at each sync_close completion the file is complete.
TEST_P(EngineWrites, InterleavedFilesArriveByteExact) {
  const Variant v = GetParam();
  TempDir t;
  fs::path db = t.path / "db";
  fs::create_directories(db);
  std::optional<SstPool> pool;
  if (v.pool) pool.emplace(SstPool::Options{(t.path / "pool").string(), 8, 4 << 20});
  TraceLog trace;
  EngineOptions o;
  o.ring_entries = v.ring_entries;
  o.max_inflight_bytes = v.max_inflight_bytes;
  o.io_engine = v.io_engine;
  EngineRun run(pool ? &*pool : nullptr, trace.options(o));
  Host h = run.host();

  struct Out {
    fs::path name;
    std::vector<uint8_t> data;
    uint64_t sent = 0, synced = 0;
  };
  constexpr int kFiles = 5;
  std::mt19937_64 rng(42);
  std::vector<Out> files(kFiles);
  std::vector<int> unfinished;
  for (int i = 0; i < kFiles; ++i) {
    files[i].name = db / (std::to_string(100 + i) + ".sst");
    files[i].data = random_bytes(200'000 + rng() % 2'300'000, i);
    h.open(i + 1, files[i].name, v.pool);
    unfinished.push_back(i);
  }
  uint64_t writes = 0, bytes = 0;
  while (!unfinished.empty()) {
    size_t pick = rng() % unfinished.size();
    int k = unfinished[pick];
    Out& f = files[k];
    size_t len = std::min<size_t>(1 + rng() % (256 << 10), f.data.size() - f.sent);
    h.write(k + 1, f.sent, std::span(f.data).subspan(f.sent, len));
    f.sent += len;
    ++writes;
    bytes += len;
    if (f.sent - f.synced >= (512 << 10)) {
      h.range_sync(k + 1, f.synced, f.sent - f.synced);
      f.synced = f.sent;
    }
    if (f.sent == f.data.size()) {
      h.sync_close(k + 1, f.sent);
      unfinished.erase(unfinished.begin() + static_cast<ptrdiff_t>(pick));
    }
  }
  auto done = h.collect(kFiles);
  ASSERT_EQ(done.size(), size_t{kFiles});
  for (const ChannelCompletion& c : done) {
    ASSERT_TRUE(c.id >= 1 && c.id <= kFiles) << c.id;
    const Out& f = files[c.id - 1];
    EXPECT_EQ(c.op, op(Op::kSyncClose));
    EXPECT_EQ(c.status, 0) << f.name;
    EXPECT_EQ(c.result, static_cast<int64_t>(f.data.size()));
    if (v.pool) {
      ASSERT_TRUE(fs::is_symlink(f.name)) << f.name;
      EXPECT_EQ(fs::read_symlink(f.name).parent_path(), pool->dir());
      EXPECT_EQ(pool->slot_of(f.name.string()), std::optional<uint32_t>(c.arg));
    } else {
      EXPECT_EQ(c.arg, kNoSlot);
      EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(f.name)));
    }
    EXPECT_EQ(fs::file_size(f.name), f.data.size()) << "the size stat reports is the bytes written";
    EXPECT_TRUE(read_all(f.name) == f.data) << f.name << " differs from what the host wrote";
  }
  run.finish();
  EXPECT_EQ(run.error, "");
  EXPECT_EQ(run.stats.writes, writes);
  EXPECT_EQ(run.stats.write_bytes, bytes);
  EXPECT_EQ(run.stats.sync_closes, uint64_t{kFiles});
  EXPECT_EQ(run.stats.files_opened, uint64_t{kFiles});
  EXPECT_EQ(run.stats.pool_files, v.pool ? uint64_t{kFiles} : 0);
  EXPECT_EQ(run.stats.normal_files, v.pool ? 0 : uint64_t{kFiles});
  EXPECT_EQ(run.stats.errors, 0u);
  EXPECT_EQ(run.stats.sqes_submitted, run.stats.cqes_completed);
  EXPECT_EQ(run.stats.inflight_ios, 0u);
  if (v.io_engine == IoEngine::kLibaio) {
    // AIO has no command for sync_file_range and close: those are system calls, the rest iocbs
    EXPECT_EQ(run.stats.aio_sync_calls, run.stats.range_syncs + kFiles);
    EXPECT_EQ(run.stats.aio_fsync_refused, 0u) << "ext4 and tmpfs take IOCB_CMD_FSYNC";
    EXPECT_LT(run.stats.submit_calls, run.stats.sqes_submitted - run.stats.aio_sync_calls) << "a batch per io_submit";
  }
  // SQEs in flight never exceed the CQ (2 x ring entries): it cannot overflow.
  EXPECT_LE(run.stats.max_inflight_ios, 2u * std::bit_ceil(v.ring_entries));
  expect_dependencies_kept(trace.snapshot());
}

INSTANTIATE_TEST_SUITE_P(Variants, EngineWrites,
                         ::testing::Values(Variant{"Pool", true, 256, 64 << 20},
                                           Variant{"NormalFiles", false, 256, 64 << 20},
                                           Variant{"PoolWithTinyRingAndBudget", true, 4, 64 << 10},
                                           Variant{"PoolSqpoll", true, 256, 64 << 20, IoEngine::kIoUringSqpoll},
                                           Variant{"TinyRingSqpoll", true, 4, 64 << 10, IoEngine::kIoUringSqpoll},
                                           Variant{"PoolPwrite", true, 256, 64 << 20, IoEngine::kPwrite},
                                           Variant{"NormalFilesPwrite", false, 4, 64 << 10, IoEngine::kPwrite},
                                           Variant{"PoolLibaio", true, 256, 64 << 20, IoEngine::kLibaio},
                                           Variant{"TinyRingLibaio", true, 4, 64 << 10, IoEngine::kLibaio},
                                           Variant{"NormalFilesLibaio", false, 4, 64 << 10, IoEngine::kLibaio}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Engine, FallsBackToNormalFilesWhenThePoolIsExhausted) {
  TempDir t;
  SstPool pool(SstPool::Options{(t.path / "pool").string(), 2, 1 << 20});
  EngineRun run(&pool);
  Host h = run.host();
  auto data = random_bytes(1000, 1);
  for (uint64_t id = 1; id <= 3; ++id) {
    h.open(id, t.path / (std::to_string(id) + ".sst"), true);
    h.write(id, 0, data);
    h.sync_close(id, data.size());
  }
  auto done = h.collect(3);
  ASSERT_EQ(done.size(), 3u);
  int normal = 0;
  for (const auto& c : done) {
    fs::path name = t.path / (std::to_string(c.id) + ".sst");
    EXPECT_EQ(c.status, 0);
    EXPECT_EQ(read_all(name), data);
    if (c.arg == kNoSlot) {
      ++normal;
      EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(name)));
    } else {
      EXPECT_TRUE(fs::is_symlink(name));
    }
  }
  EXPECT_EQ(normal, 1);
  run.finish();
  EXPECT_EQ(run.stats.pool_files, 2u);
  EXPECT_EQ(run.stats.normal_files, 1u);
  EXPECT_EQ(pool.stats().exhausted, 1u);
}

// A FIFO holds 64 KiB: a larger write to it stays in flight until the test
// reads, which makes "in flight" something the test controls.
struct Fifo {
  fs::path path;
  int rd = -1;
  explicit Fifo(const fs::path& p) : path(p) {
    if (::mkfifo(p.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
    rd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // so that the engine's open does not block
  }
  ~Fifo() { ::close(rd); }
  std::vector<uint8_t> read_exactly(size_t n) {
    std::vector<uint8_t> got(n);
    size_t have = 0;
    auto deadline = Clock::now() + kPatience;
    while (have < n && Clock::now() < deadline) {
      pollfd p{rd, POLLIN, 0};
      ::poll(&p, 1, 100);
      ssize_t k = ::read(rd, got.data() + have, n - have);
      if (k > 0) have += static_cast<size_t>(k);
    }
    got.resize(have);
    return got;
  }
};

TEST(Engine, RangeSyncWaitsForTheWritesSentBeforeIt) {
  TempDir t;
  Fifo fifo(t.path / "pipe");
  TraceLog trace;
  EngineRun run(nullptr, trace.options());
  Host h = run.host();
  auto data = random_bytes(256 << 10, 3);
  h.open(1, fifo.path, false);
  h.write(1, 0, data);
  h.range_sync(1, 0, data.size());
  EXPECT_TRUE(h.barrier().empty());
  EXPECT_TRUE(trace.has(Io::kWrite, Kind::kSubmit));
  EXPECT_FALSE(trace.has(Io::kRangeSync, Kind::kSubmit)) << "submitted while the write before it is in flight";
  EXPECT_EQ(fifo.read_exactly(data.size()), data);
  h.sync_close(1, data.size());
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, -ESPIPE) << "sync_file_range fails on a FIFO, and that is the file's first error";
  EXPECT_EQ(done[0].result, static_cast<int64_t>(data.size()));
  EXPECT_TRUE(trace.has(Io::kRangeSync, Kind::kSubmit)) << "submitted once the write completed";
  expect_dependencies_kept(trace.snapshot());
}

// libaio on a file that refuses IOCB_CMD_FSYNC (a FIFO has no fsync at all):
// the fsync is done as a system call, whose error is the file's, the close
// linked to it still runs, and a later file's fsync goes straight to the
// system call.
TEST(Engine, LibaioDoesAnFsyncTheFileRefusesThroughAioAsASystemCall) {
  TempDir t;
  Fifo first(t.path / "pipe1"), second(t.path / "pipe2");
  EngineOptions o;
  o.io_engine = IoEngine::kLibaio;
  TraceLog trace;
  EngineRun run(nullptr, trace.options(o));
  Host h = run.host();
  auto a = random_bytes(4096, 31), b = random_bytes(4096, 32);
  h.open(1, first.path, false);
  h.write(1, 0, a);
  h.sync_close(1, a.size());
  EXPECT_EQ(first.read_exactly(a.size()), a);
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u) << "the fsync refused through AIO never completed, or its close never ran";
  EXPECT_EQ(done[0].status, -EINVAL) << "the fsync system call's error";
  EXPECT_EQ(done[0].result, static_cast<int64_t>(a.size()));
  h.open(2, second.path, false);
  h.write(2, 0, b);
  h.sync_close(2, b.size());
  EXPECT_EQ(second.read_exactly(b.size()), b);
  done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, -EINVAL);
  run.finish();
  EXPECT_EQ(run.stats.aio_fsync_refused, 1u) << "refused once, then a system call without asking AIO again";
  EXPECT_EQ(run.stats.aio_sync_calls, 4u) << "two fsyncs and two closes";
  EXPECT_EQ(run.stats.sqes_submitted, run.stats.cqes_completed);
  expect_dependencies_kept(trace.snapshot());
}

// kWriteFrom: the engine's DMA stage pulls the bytes from the host process
// (here this one), completes the pull, then writes; copied writes, range
// syncs and the sync_close keep their order around it.
TEST(Engine, WriteFromPullsTheHostsBytesAndKeepsTheFilesOrder) {
  TempDir t;
  TraceLog trace;
  EngineRun run(nullptr, trace.options());
  Host h = run.host();
  auto a = random_bytes(1 << 20, 11), b = random_bytes(5000, 12), c = random_bytes(300 << 10, 13);
  const fs::path file = t.path / "000007.sst";
  h.open(1, file, false);
  h.write_from(1, 0, a);
  h.range_sync(1, 0, a.size());
  h.write(1, a.size(), b);
  h.write_from(1, a.size() + b.size(), c);
  h.range_sync(1, 0, a.size() + b.size() + c.size());
  h.sync_close(1, a.size() + b.size() + c.size());
  auto done = h.collect(3);
  ASSERT_EQ(done.size(), 3u);
  std::vector<uint64_t> pulled_at;
  for (const auto& d : done) {
    if (d.op != op(Op::kWriteFrom)) continue;
    EXPECT_EQ(d.status, 0);
    EXPECT_EQ(d.id, 1u);
    EXPECT_EQ(d.result, static_cast<int64_t>(d.arg == 0 ? a.size() : c.size()));
    pulled_at.push_back(d.arg);
  }
  EXPECT_EQ(pulled_at, (std::vector<uint64_t>{0, a.size() + b.size()})) << "each pull completed, in order";
  EXPECT_EQ(done.back().op, op(Op::kSyncClose)) << "the sync_close completes after the pulls";
  EXPECT_EQ(done.back().status, 0);
  EXPECT_EQ(done.back().result, static_cast<int64_t>(a.size() + b.size() + c.size()));
  std::vector<uint8_t> want = a;
  want.insert(want.end(), b.begin(), b.end());
  want.insert(want.end(), c.begin(), c.end());
  EXPECT_EQ(read_all(file), want);
  EXPECT_EQ(run.stats.pulls.load(), 2u);
  EXPECT_EQ(run.stats.pull_bytes.load(), a.size() + c.size());
  EXPECT_EQ(run.stats.writes.load(), 3u);
  expect_dependencies_kept(trace.snapshot());
}

// The pull path never waits behind writes: with a write stuck in flight (a
// FIFO nobody reads) and the next write of it waiting for the write budget,
// a pull for another file, sent after both, is pulled and completed; its
// write goes out once the writes before it in the queue are through.
TEST(Engine, APullIsServedWhileWritesAheadOfItWaitForTheirBudget) {
  TempDir t;
  Fifo fifo(t.path / "pipe");
  TraceLog trace;
  EngineOptions o;
  o.max_inflight_bytes = 64 << 10;  // the FIFO's first write fills it
  EngineRun run(nullptr, trace.options(o));
  Host h = run.host();
  const fs::path file = t.path / "000012.sst";
  h.open(2, file, false);
  h.open(1, fifo.path, false);
  EXPECT_TRUE(h.barrier().empty());
  auto stuck = random_bytes(256 << 10, 15), pulled = random_bytes(1 << 20, 16);
  h.write(1, 0, std::span(stuck).first(128 << 10));  // blocks: the pipe holds 64 KiB
  h.write(1, 128 << 10, std::span(stuck).subspan(128 << 10));  // waits for the budget behind it
  h.write_from(2, 0, pulled);
  auto first = h.collect(1);
  ASSERT_EQ(first.size(), 1u) << "the pull waited behind the writes";
  EXPECT_EQ(first[0].op, op(Op::kWriteFrom));
  EXPECT_EQ(first[0].id, 2u);
  EXPECT_EQ(first[0].status, 0);
  EXPECT_EQ(first[0].result, static_cast<int64_t>(pulled.size()));
  std::set<uint64_t> fifo_writes;  // by number: a short write is submitted again
  for (const IoEvent& e : trace.snapshot())
    if (e.file == 1 && e.io == Io::kWrite && e.kind == Kind::kSubmit) fifo_writes.insert(e.seq);
  EXPECT_EQ(fifo_writes, std::set<uint64_t>{1}) << "the second write was still waiting when the pull completed";
  EXPECT_EQ(fifo.read_exactly(stuck.size()), stuck);
  h.sync_close(2, pulled.size());
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].op, op(Op::kSyncClose));
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(done[0].result, static_cast<int64_t>(pulled.size()));
  EXPECT_EQ(read_all(file), pulled);
  expect_dependencies_kept(trace.snapshot());
}

// A pull's reply never waits for the engine's lock: here the write thread
// holds it (its trace hook, called under the lock, blocks at a copied
// write's submission, as a synchronous flush under --io-engine pwrite holds
// it for every system call), and a pull for another file is still answered.
TEST(Engine, APullIsAnsweredWhileTheWriteThreadHoldsTheEngineLock) {
  TempDir t;
  std::mutex m;
  std::condition_variable cv;
  bool holding = false, release = false;
  EngineOptions o;
  o.trace = [&](const IoEvent& e) {
    if (e.kind != Kind::kSubmit || e.io != Io::kWrite || e.file != 1) return;
    std::unique_lock l(m);
    holding = true;
    cv.notify_all();
    cv.wait(l, [&] { return release; });
  };
  auto let_go = [&] {
    std::lock_guard l(m);
    release = true;
    cv.notify_all();
  };
  struct LetGo {
    std::function<void()> f;
    ~LetGo() { f(); }
  } guard{let_go};
  EngineRun run(nullptr, o);
  Host h = run.host();
  auto a = random_bytes(64 << 10, 21), b = random_bytes(300 << 10, 22);
  const fs::path one = t.path / "000021.sst", two = t.path / "000022.sst";
  h.open(1, one, false);
  h.open(2, two, false);
  h.write(1, 0, a);  // its submission holds the lock
  {
    std::unique_lock l(m);
    ASSERT_TRUE(cv.wait_for(l, kPatience, [&] { return holding; })) << "the write was never submitted";
  }
  h.write_from(2, 0, b);
  auto reply = h.collect(1);
  let_go();
  ASSERT_EQ(reply.size(), 1u) << "the pull's reply waited for the engine's lock";
  EXPECT_EQ(reply[0].op, op(Op::kWriteFrom));
  EXPECT_EQ(reply[0].id, 2u);
  EXPECT_EQ(reply[0].status, 0);
  EXPECT_EQ(reply[0].result, static_cast<int64_t>(b.size()));
  h.sync_close(1, a.size());
  h.sync_close(2, b.size());
  auto done = h.collect(2);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_EQ(d.op, op(Op::kSyncClose));
    EXPECT_EQ(d.status, 0);
  }
  EXPECT_EQ(read_all(one), a);
  EXPECT_EQ(read_all(two), b);
}

// serve() starts from nothing of an earlier call: a write thread that failed
// stopped that call's receiving, not the next one's (the next queue pair's
// hello is answered). The failure here: the trace hook throws at the first
// write's submission, in the write thread.
TEST(Engine, AWriteThreadFailureStopsOnlyItsOwnServe) {
  TempDir t;
  std::atomic<bool> thrown{false};
  EngineOptions o;
  o.trace = [&](const IoEvent& e) {
    if (e.kind == Kind::kSubmit && e.io == Io::kWrite && !thrown.exchange(true))
      throw std::runtime_error("the write thread fails");
  };
  EngineStats stats;
  WritePersistEngine engine(nullptr, stats, o);
  // One serve() on its own thread; its result (what it threw) is the future's.
  auto serve = [&](ChannelDpu dpu) {
    auto done = std::make_shared<std::promise<std::string>>();
    std::thread([&engine, done, dpu = std::move(dpu)]() mutable {
      try {
        engine.serve(dpu);
        done->set_value("");
      } catch (const std::exception& e) {
        done->set_value(e.what());
      }
    }).detach();
    return done->get_future();
  };
  auto first = make_channel_pair({});
  ChannelHost first_host = std::move(first.first);
  auto first_done = serve(std::move(first.second));
  Host h1{first_host};
  auto a = random_bytes(4096, 31);
  h1.open(1, t.path / "000031.sst", false);
  h1.write(1, 0, a);
  ASSERT_EQ(first_done.wait_for(kPatience), std::future_status::ready) << "serve() went on after its write thread failed";
  EXPECT_EQ(first_done.get(), "the write thread fails");
  first_host.close();

  auto second = make_channel_pair({});
  ChannelHost second_host = std::move(second.first);
  auto second_done = serve(std::move(second.second));
  Host h2{second_host};
  h2.hello(7);
  auto reply = h2.collect(1);
  second_host.close();
  ASSERT_EQ(second_done.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(second_done.get(), "");
  ASSERT_EQ(reply.size(), 1u) << "the second serve() stopped at once: the first one's failure carried over";
  EXPECT_EQ(reply[0].op, op(Op::kHello));
  EXPECT_EQ(reply[0].status, 0);
}

// A finished pull whose write did not fit the write budget holds the pull
// budget until its write is sequenced. When the writes ahead complete, that
// must happen without a further request to its file: here the next pull, for
// another file, needs the room it holds, and the host waits for its reply.
TEST(Engine, APulledWriteWaitingForRoomDoesNotHoldTheNextPullForever) {
  TempDir t;
  Fifo fifo(t.path / "pipe");
  TraceLog trace;
  EngineOptions o;
  o.max_inflight_bytes = 64 << 10;
  EngineRun run(nullptr, trace.options(o));
  Host h = run.host();
  const fs::path a = t.path / "000021.sst", b = t.path / "000022.sst";
  h.open(1, fifo.path, false);
  h.open(2, a, false);
  h.open(3, b, false);
  EXPECT_TRUE(h.barrier().empty());
  auto stuck = random_bytes(128 << 10, 21), pa = random_bytes(32 << 10, 22), pb = random_bytes(48 << 10, 23);
  h.write(1, 0, stuck);  // blocks: the pipe holds 64 KiB, and the write budget is taken
  h.write_from(2, 0, pa);  // pulled; its write waits for room and holds 32 KiB of the pull budget
  auto first = h.collect(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, 2u);
  EXPECT_EQ(first[0].status, 0);
  h.write_from(3, 0, pb);  // 32 + 48 KiB: waits for the pull budget
  EXPECT_EQ(fifo.read_exactly(stuck.size()), stuck);  // the writes ahead complete
  auto second = h.collect(1);
  ASSERT_EQ(second.size(), 1u) << "the second pull waited for room nobody freed";
  EXPECT_EQ(second[0].id, 3u);
  EXPECT_EQ(second[0].status, 0);
  h.sync_close(2, pa.size());
  h.sync_close(3, pb.size());
  auto done = h.collect(2);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& c : done) EXPECT_EQ(c.status, 0);
  EXPECT_EQ(read_all(a), pa);
  EXPECT_EQ(read_all(b), pb);
  expect_dependencies_kept(trace.snapshot());
}

// A pull the kernel cannot do (here an address this process has not mapped;
// EPERM when cross-memory attach is refused) writes nothing and fails no
// file: the host sends the bytes again through the ring.
TEST(Engine, AFailedPullWritesNothingAndTheCopiedRetryCompletesTheFile) {
  TempDir t;
  EngineRun run(nullptr);
  Host h = run.host();
  auto data = random_bytes(200 << 10, 14);
  const fs::path file = t.path / "000008.sst";
  h.open(1, file, false);
  h.ch.submit(op(Op::kWriteFrom), 1, {}, {0, uint64_t{4096}, data.size()});  // page 1: never mapped
  auto pulled = h.collect(1);
  ASSERT_EQ(pulled.size(), 1u);
  EXPECT_EQ(pulled[0].op, op(Op::kWriteFrom));
  EXPECT_EQ(pulled[0].status, -EFAULT);
  EXPECT_EQ(pulled[0].result, 0);
  h.write(1, 0, data);
  h.sync_close(1, data.size());
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, 0) << "the failed pull did not fail the file";
  EXPECT_EQ(done[0].result, static_cast<int64_t>(data.size()));
  EXPECT_EQ(read_all(file), data);
  EXPECT_EQ(run.stats.pull_failures.load(), 1u);
  EXPECT_EQ(run.stats.pulls.load(), 0u);
}

bool takes_o_direct(const fs::path& dir) {
  const fs::path probe = dir / "o_direct_probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return fd >= 0;
}

// O_DIRECT: appends of any size and offset, copied and pulled, reach the file
// byte-exact through aligned block writes and the padded tail, truncated to
// the final size at sync_close.
TEST(Engine, DirectFilesTakeUnalignedAppendsByteExact) {
  TempDir t;
  if (!takes_o_direct(t.path)) GTEST_SKIP() << "the temporary directory's filesystem refuses O_DIRECT";
  TraceLog trace;
  EngineRun run(nullptr, trace.options());
  Host h = run.host();
  const fs::path file = t.path / "000009.sst";
  h.open(1, file, false);
  std::vector<uint8_t> want;
  std::vector<std::vector<uint8_t>> pulled;  // alive until their pulls complete
  uint64_t seed = 20;
  size_t pulls = 0;
  for (size_t n : {1, 4095, 4097, 100000, 4096, 3, 1 << 20, 777, 65536, 12345}) {
    auto d = random_bytes(n, ++seed);
    if (n >= 4096 && seed % 2 == 0) {
      pulled.push_back(d);
      h.write_from(1, want.size(), pulled.back());
      ASSERT_EQ(h.collect(1).at(0).status, 0);  // the host waits for its pull, as the plugin does
      ++pulls;
    } else {
      h.write(1, want.size(), d);
    }
    want.insert(want.end(), d.begin(), d.end());
  }
  h.sync_close(1, want.size());
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].op, op(Op::kSyncClose));
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(done[0].result, static_cast<int64_t>(want.size())) << "the host's bytes, not the padding";
  EXPECT_EQ(fs::file_size(file), want.size());
  EXPECT_EQ(read_all(file), want);
  EXPECT_EQ(run.stats.direct_files.load(), 1u);
  EXPECT_EQ(run.stats.pulls.load(), pulls);
  expect_dependencies_kept(trace.snapshot());
}

// A direct file must be written in order: a write that skips ahead fails the
// file (its sync_close says so) instead of leaving a hole.
TEST(Engine, ADirectFileRefusesAWriteOutOfOrder) {
  TempDir t;
  if (!takes_o_direct(t.path)) GTEST_SKIP() << "the temporary directory's filesystem refuses O_DIRECT";
  EngineRun run(nullptr);
  Host h = run.host();
  auto d = random_bytes(10000, 40);
  h.open(1, t.path / "000010.sst", false);
  h.write(1, 0, d);
  h.write(1, 50000, d);
  h.sync_close(1, 60000);
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, -EINVAL);
}

TEST(Engine, SyncCloseWaitsForItsWritesAndAFailedFsyncStillClosesTheFile) {
  TempDir t;
  Fifo fifo(t.path / "pipe");
  TraceLog trace;
  EngineRun run(nullptr, trace.options());
  Host h = run.host();
  auto data = random_bytes(300 << 10, 4);
  h.open(1, fifo.path, false);
  h.write(1, 0, data);
  h.sync_close(1, data.size());
  EXPECT_TRUE(h.barrier().empty()) << "no sync_close completion while its write is in flight";
  EXPECT_FALSE(trace.has(Io::kFsync, Kind::kSubmit));
  EXPECT_EQ(fifo.read_exactly(data.size()), data);
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].op, op(Op::kSyncClose));
  EXPECT_EQ(done[0].status, -EINVAL) << "fsync fails on a FIFO";
  EXPECT_EQ(done[0].result, static_cast<int64_t>(data.size()));
  EXPECT_EQ(done[0].arg, kNoSlot);
  // Whether the failed fsync cancels the linked close depends on the kernel
  // (Linux 6.x runs it anyway: sync ops do not fail their links); either way
  // the engine must have closed its end, so the reader sees end-of-file.
  uint8_t b;
  EXPECT_EQ(::read(fifo.rd, &b, 1), 0) << "the engine's end of the FIFO is still open";
  auto ev = trace.snapshot();
  auto close = std::find_if(ev.begin(), ev.end(), [](const IoEvent& e) {
    return e.io == Io::kClose && e.kind == Kind::kComplete;
  });
  ASSERT_NE(close, ev.end());
  EXPECT_TRUE(close->res == 0 || close->res == -ECANCELED) << close->res;
  expect_dependencies_kept(ev);
}

TEST(Engine, AFailedOpenIsReportedBySyncCloseAndLaterRequestsAreSkipped) {
  for (bool use_pool : {true, false}) {
    SCOPED_TRACE(use_pool ? "pool" : "no pool");
    TempDir t;
    SstPool pool(SstPool::Options{(t.path / "pool").string(), 2, 1 << 20});
    EngineRun run(&pool);
    Host h = run.host();
    auto data = random_bytes(1000, 5);
    h.open(1, t.path / "no-such-dir" / "1.sst", use_pool);
    h.write(1, 0, data);
    h.range_sync(1, 0, data.size());
    h.sync_close(1, data.size());
    h.write(9, 0, data);  // a file that was never opened
    h.sync_close(9, data.size());
    if (use_pool) {
      h.open(2, "relative.sst", true);
      h.sync_close(2, 0);
    }
    size_t expected = use_pool ? 3 : 2;
    auto done = h.collect(expected);
    ASSERT_EQ(done.size(), expected);
    for (const auto& c : done) {
      EXPECT_EQ(c.op, op(Op::kSyncClose));
      EXPECT_EQ(c.result, 0);
      EXPECT_EQ(c.arg, kNoSlot);
      int32_t want = c.id == 1 ? -ENOENT : c.id == 9 ? -EBADF : -EINVAL;
      EXPECT_EQ(c.status, want) << "file id " << c.id;
    }
    run.finish();
    EXPECT_EQ(run.stats.writes, 0u) << "writes of a failed file are skipped";
    EXPECT_EQ(run.stats.sqes_submitted, 1u) << "only the wake-up of the polling thread";
    EXPECT_GE(run.stats.errors, expected);
    EXPECT_EQ(pool.stats().free, 2u) << "a slot claimed for a failed open is given back";
  }
}

TEST(Engine, HelloAnswersWithTheEngineVersion) {
  EngineRun run(nullptr);
  Host h = run.host();
  h.hello(1);
  h.hello(2, kProtocolVersion + 1);
  auto done = h.collect(2);
  ASSERT_EQ(done.size(), 2u);
  std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.id < b.id; });
  EXPECT_EQ(done[0].op, op(Op::kHello));
  EXPECT_EQ(done[0].result, kProtocolVersion);
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(done[1].status, -EPROTO);
}

TEST(Engine, RecycleFreesThePoolSlotOrUnlinksTheFile) {
  TempDir t;
  SstPool pool(SstPool::Options{(t.path / "pool").string(), 4, 1 << 20});
  EngineRun run(&pool);
  Host h = run.host();
  auto data = random_bytes(5000, 6);
  fs::path pooled = t.path / "pooled.sst", normal = t.path / "normal.sst";
  h.open(1, pooled, true);
  h.open(2, normal, false);
  for (uint64_t id : {1, 2}) {
    h.write(id, 0, data);
    h.sync_close(id, data.size());
  }
  auto closed = h.collect(2);
  ASSERT_EQ(closed.size(), 2u);
  uint64_t slot = closed[0].id == 1 ? closed[0].arg : closed[1].arg;
  ASSERT_NE(slot, kNoSlot);
  fs::path slot_file = fs::read_symlink(pooled);
  EXPECT_EQ(pool.stats().free, 3u);

  h.recycle(100, pooled);
  h.recycle(101, normal);
  h.recycle(102, t.path / "missing.sst");
  auto done = h.collect(3);
  ASSERT_EQ(done.size(), 3u);
  std::sort(done.begin(), done.end(), [](auto& a, auto& b) { return a.id < b.id; });
  for (const auto& c : done) EXPECT_EQ(c.op, op(Op::kRecycle));
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(done[0].result, 1);
  EXPECT_EQ(done[0].arg, slot);
  EXPECT_EQ(done[1].status, 0);
  EXPECT_EQ(done[1].result, 0);
  EXPECT_EQ(done[2].status, -ENOENT);
  EXPECT_EQ(done[2].result, 0);
  EXPECT_FALSE(exists_at_all(pooled));
  EXPECT_FALSE(exists_at_all(normal));
  EXPECT_EQ(pool.stats().free, 4u);
  EXPECT_EQ(fs::file_size(slot_file), 1u << 20) << "the recycled slot is written out to the slot's size again";
  run.finish();
  EXPECT_EQ(run.stats.recycles, 3u);
}

// Replaces a pool slot's file by a FIFO nobody reads: a release of that slot
// then waits in its open(O_WRONLY) until the test opens the FIFO
// (unblock()), which makes "a release in progress" something the test
// controls. The release fails after that (a FIFO cannot be preallocated):
// the slot stays in use.
struct StuckSlot {
  fs::path path;
  int rd = -1;
  explicit StuckSlot(const fs::path& slot_file) : path(slot_file) {
    fs::remove(path);
    if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
  }
  void unblock() {
    if (rd < 0) rd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  }
  ~StuckSlot() {
    unblock();  // a test that failed while the release waited must not hang in its teardown
    if (rd >= 0) ::close(rd);
  }
};

// An engine serving a pool of four 1 MiB slots, in a directory of its own.
struct PooledEngine {
  TempDir t;
  SstPool pool{SstPool::Options{(t.path / "pool").string(), 4, 1 << 20}};
  EngineRun run{&pool};
  Host h = run.host();
};

std::vector<uint8_t> write_pool_file(Host& h, uint64_t id, const fs::path& name, uint64_t seed) {
  auto data = random_bytes(5000, seed);
  h.open(id, name, true);
  h.write(id, 0, data);
  h.sync_close(id, data.size());
  return data;
}

// A release writes the slot's tail out (tens of milliseconds in a large
// slot): it runs beside the write thread, so a file written after the
// recycle completes while the release still waits. With the release on the
// write thread, file 2's sync_close did not complete in 60 s.
TEST(Engine, WritesOfAnotherFileAreNotHeldBehindARelease) {
  PooledEngine e;
  auto& [t, pool, run, h] = e;
  const fs::path first = t.path / "000010.sst", second = t.path / "000011.sst";
  write_pool_file(h, 1, first, 31);
  auto closed = h.collect(1);
  ASSERT_EQ(closed.size(), 1u);
  ASSERT_EQ(closed[0].status, 0);
  StuckSlot stuck(fs::read_symlink(first));
  h.recycle(100, first);
  auto data = write_pool_file(h, 2, second, 32);
  auto done = h.collect(1);
  ASSERT_EQ(done.size(), 1u) << "file 2 waited behind file 1's release";
  EXPECT_EQ(done[0].op, op(Op::kSyncClose));
  EXPECT_EQ(done[0].id, 2u);
  EXPECT_EQ(done[0].status, 0);
  EXPECT_EQ(read_all(second), data);
  EXPECT_FALSE(exists_at_all(first)) << "the link goes in the queue pair's order, before the release";
  EXPECT_EQ(pool.stats().free, 2u) << "the slot being released is not free (nor claimable) yet";
  stuck.unblock();
  auto recycled = h.collect(1);
  ASSERT_EQ(recycled.size(), 1u);
  EXPECT_EQ(recycled[0].op, op(Op::kRecycle));
  EXPECT_EQ(recycled[0].id, 100u);
  EXPECT_NE(recycled[0].status, 0) << "a FIFO cannot be written out: the release fails and says so";
  EXPECT_EQ(pool.stats().free, 2u) << "a failed release leaves the slot out of use";
  run.finish();
  EXPECT_EQ(run.error, "");
}

// The release of a slot waits for its file's own I/O: a recycle that comes
// while the file's writes are in flight (its sync_close deferred behind
// them) is completed after that sync_close, and one for a file still open
// for writing is refused with nothing removed. (Before, the recycle
// released the slot at once, under the file's writes.)
TEST(Engine, ARecycleWaitsForItsFilesCloseAndIsRefusedWhileItIsOpen) {
  PooledEngine e;
  auto& [t, pool, run, h] = e;
  const fs::path open_one = t.path / "000020.sst", closing = t.path / "000021.sst";
  auto small = random_bytes(5000, 33);
  h.open(1, open_one, true);
  h.write(1, 0, small);
  h.recycle(100, open_one);
  auto refused = h.collect(1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].op, op(Op::kRecycle));
  EXPECT_EQ(refused[0].status, -EBUSY);
  EXPECT_TRUE(fs::is_symlink(open_one)) << "nothing is removed";
  h.sync_close(1, small.size());
  ASSERT_EQ(h.collect(1).size(), 1u);
  EXPECT_EQ(read_all(open_one), small) << "the refused recycle lost nothing";

  // The next claim takes the first free slot: make it a FIFO, so that the
  // file's writes stay in flight until the test reads them.
  const fs::path next_slot = fs::path(pool.dir()) / "slot-000001";
  ASSERT_NE(fs::read_symlink(open_one), next_slot);
  fs::remove(next_slot);
  Fifo fifo(next_slot);
  auto big = random_bytes(256 << 10, 34);
  h.open(2, closing, true);
  h.write(2, 0, big);  // blocks: the pipe holds 64 KiB
  h.sync_close(2, big.size());
  h.recycle(101, closing);
  EXPECT_TRUE(h.barrier().empty()) << "neither the sync_close nor the recycle completes while the writes wait";
  EXPECT_FALSE(exists_at_all(closing)) << "the link goes in order";
  EXPECT_EQ(fifo.read_exactly(big.size()), big);
  auto after = h.collect(2);  // once the writes are out: the close, then the release behind it
  ASSERT_EQ(after.size(), 2u);
  std::sort(after.begin(), after.end(), [](auto& a, auto& b) { return a.op < b.op; });
  EXPECT_EQ(after[0].op, op(Op::kSyncClose));
  EXPECT_EQ(after[1].op, op(Op::kRecycle));
  EXPECT_EQ(after[1].id, 101u);
  run.finish();
  EXPECT_EQ(run.error, "");
}

// Three files of a host that goes away: one finished by sync_close, one
// pooled and one normal left unfinished.
struct UnfinishedFiles {
  explicit UnfinishedFiles(uint64_t seed, size_t bytes = 70'000) : data(random_bytes(bytes, seed)) {}
  TempDir t;
  SstPool pool{SstPool::Options{(t.path / "pool").string(), 4, 1 << 20}};
  fs::path finished = t.path / "finished.sst", pooled = t.path / "pooled.sst", normal = t.path / "normal.sst";
  std::vector<uint8_t> data;

  // Files whose sync_close never came were never installed by the host.
  void expect_only_finished_file_left() {
    EXPECT_FALSE(exists_at_all(pooled)) << "the unfinished pool file's symlink is removed";
    EXPECT_FALSE(exists_at_all(normal)) << "the unfinished normal file is removed";
    EXPECT_TRUE(fs::is_symlink(finished));
    EXPECT_EQ(read_all(finished), data);
    EXPECT_EQ(pool.stats().free, pool.stats().slots - 1) << "only the finished file keeps its slot";
  }
};

TEST(Engine, UnfinishedFilesAreRemovedWhenTheHostClosesInOrder) {
  UnfinishedFiles u(7);
  const fs::path &finished = u.finished, &pooled = u.pooled, &normal = u.normal;
  const std::vector<uint8_t>& data = u.data;
  EngineRun run(&u.pool);
  Host h = run.host();
  h.open(1, finished, true);
  h.write(1, 0, data);
  h.sync_close(1, data.size());
  h.open(2, pooled, true);
  h.open(3, normal, false);
  h.write(2, 0, data);
  h.write(3, 0, data);
  h.barrier();
  EXPECT_TRUE(fs::is_symlink(pooled));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(normal)));
  run.finish();
  EXPECT_EQ(run.error, "");
  u.expect_only_finished_file_left();
}

TEST(Engine, StopEndsServeAndRemovesUnfinishedFiles) {
  UnfinishedFiles u(8);
  const fs::path &finished = u.finished, &pooled = u.pooled, &normal = u.normal;
  const std::vector<uint8_t>& data = u.data;
  EngineRun run(&u.pool);
  Host h = run.host();
  h.open(1, finished, true);
  h.write(1, 0, data);
  h.sync_close(1, data.size());
  ASSERT_EQ(h.collect(1).size(), 1u);
  h.open(2, pooled, true);
  h.open(3, normal, false);
  h.write(2, 0, data);
  h.barrier();
  run.engine->stop();
  run.server.join();
  EXPECT_EQ(run.error, "");
  u.expect_only_finished_file_left();
  ChannelCompletion c;
  EXPECT_THROW(run.channel->wait_completions(&c, 1, kPatience), ChannelError) << "the host learns the engine is gone";
}

// The child: a host that finishes one file, starts another and dies without
// closing the channel. Returns its exit status (0: it did what it should).
int run_dying_host(const fs::path& socket, const fs::path& finished, const fs::path& pooled, const fs::path& normal,
                   const std::vector<uint8_t>& data) {
  try {
    ChannelHost ch = ChannelHost::connect(socket.string());
    Host h{ch};
    h.open(1, finished, true);
    h.write(1, 0, data);
    h.sync_close(1, data.size());
    auto done = h.collect(1);
    if (done.size() != 1 || done[0].status != 0) return 3;
    h.open(2, pooled, true);
    h.open(3, normal, false);
    h.write(2, 0, data);
    h.write(3, 0, data);
    h.barrier();
    if (!fs::is_symlink(pooled) || !fs::exists(normal)) return 4;
    std::_Exit(0);  // dies: no destructor closes the channel
  } catch (...) {
    return 2;
  }
}

TEST(Engine, UnfinishedFilesAreRecycledWhenTheHostProcessDies) {
  UnfinishedFiles u(9, 90'000);
  fs::path socket = u.t.path / "engine.sock";
  ChannelListener listener(socket.string());
  // Forked before this process starts any thread.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) std::_Exit(run_dying_host(socket, u.finished, u.pooled, u.normal, u.data));
  ChannelDpu qp = listener.accept(kPatience);
  EngineStats stats;
  WritePersistEngine engine(&u.pool, stats);
  EXPECT_THROW(engine.serve(qp), ChannelError);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the host child failed before it died";
  u.expect_only_finished_file_left();
  EXPECT_EQ(stats.sqes_submitted, stats.cqes_completed);
}

}  // namespace
}  // namespace dpukit::kv
