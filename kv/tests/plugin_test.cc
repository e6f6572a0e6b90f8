// The host plugin with a real RocksDB: every mode writes, compacts and reads
// back exactly what a model of the writes says, compaction outputs go where
// the mode sends them, flush outputs stay normal files, and a lost agent
// fails compactions without losing data.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "dpukit/core/process.h"
#include "dpukit/kv.h"
#include "pool.h"
#include "temp_dir.h"


namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A hang is a failure, not a slow run: a wait that must end gives up after this.
constexpr auto kPatience = 60s;

// Which files flush and compaction produced, from RocksDB itself.
class Outputs : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "TestOutputs"; }
  void OnFlushCompleted(rocksdb::DB*, const rocksdb::FlushJobInfo& i) override {
    std::lock_guard l(mu);
    flushed.insert(i.file_path);
  }
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo& i) override {
    std::lock_guard l(mu);
    if (!i.status.ok()) {
      ++failed;
      return;
    }
    for (auto& f : i.output_files) compacted.insert(f);
  }
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* s) override {
    std::lock_guard l(mu);
    bg_errors.push_back(s->ToString());
  }
  std::mutex mu;
  std::set<std::string> flushed, compacted;
  int failed = 0;
  std::vector<std::string> bg_errors;
};

rocksdb::Options small_options(rocksdb::Env* env, std::shared_ptr<Outputs> outputs) {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.env = env;
  o.write_buffer_size = 256 << 10;  // many small flushes ...
  o.target_file_size_base = 512 << 10;
  o.max_bytes_for_level_base = 1 << 20;  // ... and compactions into several levels
  o.level0_file_num_compaction_trigger = 2;
  o.compression = rocksdb::kNoCompression;
  o.max_background_jobs = 2;
  o.listeners.push_back(outputs);
  return o;
}

std::string key_of(uint32_t k) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "k%015u", k);
  return std::string(buf, 16);
}

// Random puts and overwrites, remembered in a model.
struct Workload {
  std::map<std::string, std::string> model;
  std::mt19937 rng{7};
  void write(rocksdb::DB* db, int n, uint32_t keys, size_t value_size = 400) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = false;
    for (int i = 0; i < n; ++i) {
      std::string k = key_of(rng() % keys);
      std::string v(value_size, '\0');
      for (auto& c : v) c = static_cast<char>('a' + rng() % 26);
      ASSERT_TRUE(db->Put(wo, k, v).ok());
      model[k] = v;
    }
  }
  void check(rocksdb::DB* db) {
    ASSERT_TRUE(db->VerifyChecksum().ok());
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    auto m = model.begin();
    size_t n = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next(), ++m, ++n) {
      ASSERT_NE(m, model.end()) << "extra key " << it->key().ToString();
      ASSERT_EQ(it->key().ToString(), m->first);
      ASSERT_EQ(it->value().ToString(), m->second) << m->first;
    }
    ASSERT_TRUE(it->status().ok()) << it->status().ToString();
    ASSERT_EQ(n, model.size());
  }
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

bool is_symlink(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// Every output of `files` that still exists is (or is not) a pool symlink.
void expect_symlinks(Outputs& o, const std::set<std::string>& files, bool linked, const char* what) {
  std::lock_guard l(o.mu);
  for (auto& f : files) {
    if (!fs::exists(f)) continue;  // compacted away since
    EXPECT_EQ(is_symlink(f), linked) << what << " " << f;
  }
}

// Opens a DB on the plugin, runs the workload with compactions, reopens,
// checks everything; returns the plugin's stats.
struct DbRun {
  TempDir tmp;
  std::shared_ptr<Outputs> outputs = std::make_shared<Outputs>();
  std::unique_ptr<rocksdb::Env> env;
  rocksdb::DB* db = nullptr;
  Workload w;
  explicit DbRun(const std::string& tag) : tmp(tag) {}
  ~DbRun() { close(); }
  void open(const std::string& uri) {
    auto opts = ParseOffloadUri(uri);
    opts.stats_file = tmp.str("plugin-stats.json");
    env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), opts));
    reopen();
  }
  void reopen() {
    auto s = rocksdb::DB::Open(small_options(env.get(), outputs), tmp.str("db"), &db);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void close() {
    if (db) {
      db->Close();
      delete db;
      db = nullptr;
    }
  }
  void compact_all() {
    rocksdb::CompactRangeOptions c;
    c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    auto s = db->CompactRange(c, nullptr, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Ends the plugin (the env owns it) so that it writes its stats.
  nlohmann::json finish() {
    close();
    env.reset();
    return read_json(tmp.str("plugin-stats.json"))["figures"];  // the plugin's counters, in its dpukit.result/1
  }
};

TEST(KvOptions, UriModesAndSettings) {
  auto o = ParseOffloadUri("pulsedb:///tmp/agent.sock?write_threshold:2M&sync_interval:512K");
  EXPECT_EQ(o.mode, OffloadMode::kPulseDb);
  EXPECT_EQ(o.agent, "/tmp/agent.sock");
  EXPECT_EQ(o.write_threshold, 2u << 20);
  EXPECT_EQ(o.sync_interval, 512u << 10);
  EXPECT_EQ(o.request_queue, 32u << 20) << "the paper's default";
  EXPECT_EQ(ParseOffloadUri("pulsedb-async://").mode, OffloadMode::kAsyncHost);
  EXPECT_EQ(ParseOffloadUri("pulsedb-filepool:///p").pool, "/p");
  EXPECT_TRUE(ParseOffloadUri("pulsedb:///s?offload:compaction+flush").offload_flush);
  EXPECT_EQ(ParseOffloadUri("pulsedb:///s").payload, PayloadPath::kCopy) << "the ring copy by default (measured)";
  EXPECT_EQ(ParseOffloadUri("pulsedb:///s?payload:pull").payload, PayloadPath::kPull);
  EXPECT_EQ(ParseOffloadUri("pulsedb:///s?payload:copy").payload, PayloadPath::kCopy);
  EXPECT_THROW(ParseOffloadUri("pulsedb:///s?payload:dma"), std::invalid_argument);
  ::setenv("DPUKIT_AGENT", "/run/a.sock", 1);
  ::setenv("DPUKIT_KV_SYNC_INTERVAL", "2M", 1);
  o = ParseOffloadUri("pulsedb");
  EXPECT_EQ(o.agent, "/run/a.sock");
  EXPECT_EQ(o.sync_interval, 2u << 20);
  EXPECT_EQ(ParseOffloadUri("pulsedb:///s?sync_interval:1M").sync_interval, 1u << 20) << "the URI wins";
  ::unsetenv("DPUKIT_AGENT");
  ::unsetenv("DPUKIT_KV_SYNC_INTERVAL");
  EXPECT_THROW(ParseOffloadUri("pulsedb"), std::invalid_argument) << "no agent anywhere";
  EXPECT_THROW(ParseOffloadUri("nfs://x"), std::invalid_argument);
  EXPECT_THROW(ParseOffloadUri("pulsedb:///s?bogus:1"), std::invalid_argument);
  EXPECT_THROW(ParseOffloadUri("pulsedb:///s?write_threshold"), std::invalid_argument);
  EXPECT_THROW(ParseOffloadUri("pulsedb:///s?queue:3M"), std::invalid_argument) << "not a power of two";
  EXPECT_THROW(ParseOffloadUri("pulsedb:///s?write_threshold:32M"), std::invalid_argument) << "larger than half the queue";
  EXPECT_THROW(ParseOffloadUri("pulsedb-filepool://"), std::invalid_argument);
}

TEST(KvPlugin, FilePoolPutsCompactionOutputsInPoolSlotsAndRecyclesThem) {
  DbRun r("filepool");
  r.open("pulsedb-filepool://" + r.tmp.str("pool") + "?slots:64&slot_size:1M");
  r.w.write(r.db, 6000, 3000);
  r.compact_all();
  r.w.check(r.db);
  {
    std::lock_guard l(r.outputs->mu);
    ASSERT_FALSE(r.outputs->compacted.empty());
  }
  expect_symlinks(*r.outputs, r.outputs->flushed, false, "flush output, a normal file:");
  expect_symlinks(*r.outputs, r.outputs->compacted, true, "compaction output, a pool slot:");
  r.close();
  r.reopen();
  r.w.check(r.db);
  auto st = r.finish();
  EXPECT_GT(st["files_pool"].get<int>(), 0);
  EXPECT_GT(st["pool"]["released"].get<int>(), 0) << "obsolete compaction outputs gave their slots back";
  EXPECT_EQ(st["files_offloaded"].get<int>(), 0);
}

TEST(KvPlugin, AsyncHostWritesCompactionOutputsThroughTheEngine) {
  DbRun r("async");
  r.open("pulsedb-async://" + r.tmp.str("pool") + "?slots:64&slot_size:1M&write_threshold:64K&sync_interval:16K");
  r.w.write(r.db, 6000, 3000);
  r.compact_all();
  r.w.write(r.db, 3000, 3000);
  r.compact_all();
  r.w.check(r.db);
  r.close();
  r.reopen();
  r.w.check(r.db);
  auto st = r.finish();
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
  EXPECT_EQ(st["files_offloaded"], st["sync_closes"]);
  EXPECT_GT(st["range_syncs"].get<int>(), 0);
  EXPECT_GT(st["engine"]["write_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(st["engine"]["write_bytes"], st["bytes_offloaded"]) << "every byte appended reached the file";
  EXPECT_EQ(st["file_errors"].get<int>(), 0);
  EXPECT_GT(st["pool"]["claims"].get<int>(), 0);
}

TEST(KvPlugin, AsyncHostWithoutAPoolWritesNormalFiles) {
  DbRun r("async-nopool");
  r.open("pulsedb-async://?write_threshold:128K");
  r.w.write(r.db, 4000, 2000);
  r.compact_all();
  r.w.check(r.db);
  expect_symlinks(*r.outputs, r.outputs->compacted, false, "compaction output, a normal file:");
  auto st = r.finish();
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
}

// --- the FileSystem alone, driven as RocksDB drives it ---

// Status hides the retryable flag that IOStatus shows.
bool retryable(rocksdb::Status s) { return rocksdb::status_to_io_status(std::move(s)).GetRetryable(); }

std::shared_ptr<rocksdb::FileSystem> offload_fs(const std::string& uri) {
  return NewOffloadFileSystem(rocksdb::FileSystem::Default(), ParseOffloadUri(uri));
}

rocksdb::IOStatus fsync_dir(rocksdb::FSDirectory& d) {
  return d.FsyncWithDirOptions(rocksdb::IOOptions(), nullptr,
                               rocksdb::DirFsyncOptions(rocksdb::DirFsyncOptions::FsyncReason::kNewFileSynced));
}

// A compaction output as RocksDB writes one: the IO_LOW priority that marks
// it, appends, Sync, Close.
struct OutputWrite {
  rocksdb::IOStatus append, sync, close;
};
OutputWrite write_output(rocksdb::FileSystem& fs, const std::string& path, const std::string& data) {
  OutputWrite w;
  std::unique_ptr<rocksdb::FSWritableFile> f;
  w.append = fs.NewWritableFile(path, rocksdb::FileOptions(), &f, nullptr);
  if (!w.append.ok()) return w;
  f->SetIOPriority(rocksdb::Env::IO_LOW);
  w.append = f->Append(data, rocksdb::IOOptions(), nullptr);
  w.sync = f->Sync(rocksdb::IOOptions(), nullptr);
  w.close = f->Close(rocksdb::IOOptions(), nullptr);
  return w;
}

// With max_subcompactions > 1, RocksDB writes outputs from threads that exit
// when their subcompaction ends; the compaction's own thread joins them,
// fsyncs the output directory and then installs. A failed output of such a
// thread must reach the compaction before that (at the thread's Sync or Close,
// or at the fsync) as a retryable IOError.
TEST(KvPlugin, AFailedOutputOfASubcompactionThreadFailsItsCompactionBeforeInstall) {
  TempDir t("subcompaction");
  const std::string dir = t.str("db");
  fs::create_directories(dir);
  auto fs = offload_fs("pulsedb-async://?write_threshold:64K&sync_interval:16K");
  std::unique_ptr<rocksdb::FSDirectory> d;
  ASSERT_TRUE(fs->NewDirectory(dir, rocksdb::IOOptions(), &d, nullptr).ok());
  ASSERT_TRUE(fsync_dir(*d).ok()) << "the compaction's thread fsynced this directory in an earlier job";
  fs::create_directory(dir + "/000010.sst");  // so that the engine cannot create this output (EISDIR)
  OutputWrite sub;
  std::thread([&] { sub = write_output(*fs, dir + "/000010.sst", std::string(100'000, 'x')); }).join();
  rocksdb::IOStatus fsync = fsync_dir(*d);
  ASSERT_TRUE(sub.append.ok()) << sub.append.ToString();
  rocksdb::IOStatus seen = !sub.sync.ok() ? sub.sync : !sub.close.ok() ? sub.close : fsync;
  EXPECT_FALSE(seen.ok()) << "the failed output reached neither its subcompaction (Sync, Close) nor the "
                             "compaction's directory fsync";
  EXPECT_TRUE(seen.IsIOError() && seen.GetRetryable()) << seen.ToString();
}

// A compaction that fails before its directory fsync (another of its
// subcompactions failed) leaves its own failed outputs unreported, and RocksDB
// then lists the directory to delete its outputs (one the engine never created
// is not there to delete). The next compaction on that thread must not get
// their error at its fsync; a reader of a failed file still does.
TEST(KvPlugin, AnEarlierCompactionsFailureIsNotReportedToTheNextOnesFsync) {
  TempDir t("stale");
  const std::string dir = t.str("db");
  fs::create_directories(dir);
  auto fs = offload_fs("pulsedb-async://?write_threshold:64K&sync_interval:16K");
  std::unique_ptr<rocksdb::FSDirectory> d;
  ASSERT_TRUE(fs->NewDirectory(dir, rocksdb::IOOptions(), &d, nullptr).ok());
  ASSERT_TRUE(fsync_dir(*d).ok()) << "an earlier job of this thread";
  const std::string data(100'000, 'y');
  fs::create_directory(dir + "/000011.sst");  // EISDIR in the engine
  ASSERT_TRUE(write_output(*fs, dir + "/000011.sst", data).append.ok());
  std::vector<std::string> children;
  ASSERT_TRUE(fs->GetChildren(dir, rocksdb::IOOptions(), &children, nullptr).ok());
  OutputWrite next = write_output(*fs, dir + "/000012.sst", data);
  ASSERT_TRUE(next.append.ok() && next.sync.ok() && next.close.ok()) << next.sync.ToString() << next.close.ToString();
  rocksdb::IOStatus s = fsync_dir(*d);
  EXPECT_TRUE(s.ok()) << "the next compaction got an earlier one's failure: " << s.ToString();
  std::unique_ptr<rocksdb::FSRandomAccessFile> r;
  EXPECT_FALSE(fs->NewRandomAccessFile(dir + "/000011.sst", rocksdb::FileOptions(), &r, nullptr).ok())
      << "a reader of the failed file learns it";
}

// A writer that has not been closed has posted no sync_close, so nothing
// will complete its file: a read, rename or delete of it must not wait for
// one. They answer at once, saying why; once the writer is closed they work.
TEST(KvPlugin, ReadRenameAndDeleteOfAFileStillBeingWrittenAnswerAtOnce) {
  TempDir t("unclosed");
  const std::string dir = t.str("db");
  fs::create_directories(dir);
  auto fs = offload_fs("pulsedb-async://" + t.str("pool") + "?slots:4&slot_size:1M&write_threshold:64K");
  const std::string path = dir + "/000020.sst", renamed = dir + "/000021.sst";
  const std::string data(100'000, 'v');
  std::unique_ptr<rocksdb::FSWritableFile> w;
  ASSERT_TRUE(fs->NewWritableFile(path, rocksdb::FileOptions(), &w, nullptr).ok());
  w->SetIOPriority(rocksdb::Env::IO_LOW);
  ASSERT_TRUE(w->Append(data, rocksdb::IOOptions(), nullptr).ok());
  // Each on a thread of its own: one that waits forever fails the test
  // instead of hanging it.
  std::unique_ptr<rocksdb::FSRandomAccessFile> reader;
  std::future<rocksdb::IOStatus> ops[] = {
      std::async(std::launch::async,
                 [&] { return fs->NewRandomAccessFile(path, rocksdb::FileOptions(), &reader, nullptr); }),
      std::async(std::launch::async, [&] { return fs->RenameFile(path, renamed, rocksdb::IOOptions(), nullptr); }),
      std::async(std::launch::async, [&] { return fs->DeleteFile(path, rocksdb::IOOptions(), nullptr); }),
  };
  const char* names[] = {"read", "rename", "delete"};
  auto deadline = Clock::now() + kPatience;
  bool answered = true;
  for (int i = 0; i < 3; ++i) {
    bool ready = ops[i].wait_until(deadline) == std::future_status::ready;
    EXPECT_TRUE(ready) << "the " << names[i] << " waited for a writer that was never closed";
    answered &= ready;
  }
  if (!answered) {
    ASSERT_TRUE(w->Close(rocksdb::IOOptions(), nullptr).ok());  // lets them go
  }
  for (int i = 0; i < 3; ++i) {
    rocksdb::IOStatus s = ops[i].get();
    if (!answered) continue;
    EXPECT_FALSE(s.ok()) << names[i];
    EXPECT_NE(s.ToString().find("still open for writing"), std::string::npos) << names[i] << ": " << s.ToString();
  }
  if (!answered) return;
  // Closed: the file is whole, and each operation works.
  ASSERT_TRUE(w->Sync(rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(w->Close(rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(fs->NewRandomAccessFile(path, rocksdb::FileOptions(), &reader, nullptr).ok());
  std::string buf(data.size(), '\0');
  rocksdb::Slice got;
  ASSERT_TRUE(reader->Read(0, data.size(), rocksdb::IOOptions(), &got, buf.data(), nullptr).ok());
  EXPECT_TRUE(got == rocksdb::Slice(data)) << "the file holds what was appended";
  ASSERT_TRUE(fs->RenameFile(path, renamed, rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(fs->DeleteFile(renamed, rocksdb::IOOptions(), nullptr).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(renamed)));
}

// RocksDB may ask the FileSystem, not the writer, for the size of a file it
// is writing: the answer is what has been appended, as on a normal file system.
TEST(KvPlugin, GetFileSizeOfAFileStillBeingWrittenIsWhatWasAppended) {
  TempDir t("size");
  const std::string dir = t.str("db");
  fs::create_directories(dir);
  auto fs = offload_fs("pulsedb-async://" + t.str("pool") + "?slots:4&slot_size:1M&write_threshold:64K");
  const std::string path = dir + "/000030.sst";
  std::unique_ptr<rocksdb::FSWritableFile> w;
  ASSERT_TRUE(fs->NewWritableFile(path, rocksdb::FileOptions(), &w, nullptr).ok());
  w->SetIOPriority(rocksdb::Env::IO_LOW);
  uint64_t size = 0;
  for (size_t n : {100'000, 5'000, 70'000}) {
    ASSERT_TRUE(w->Append(std::string(n, 's'), rocksdb::IOOptions(), nullptr).ok());
    size += n;
    uint64_t got = UINT64_MAX;
    ASSERT_TRUE(fs->GetFileSize(path, rocksdb::IOOptions(), &got, nullptr).ok());
    EXPECT_EQ(got, size) << "while it is written";
  }
  ASSERT_TRUE(w->Sync(rocksdb::IOOptions(), nullptr).ok());
  ASSERT_TRUE(w->Close(rocksdb::IOOptions(), nullptr).ok());
  uint64_t got = UINT64_MAX;
  ASSERT_TRUE(fs->GetFileSize(path, rocksdb::IOOptions(), &got, nullptr).ok());
  EXPECT_EQ(got, size) << "once closed";
}

// --- the agent process ---
#ifdef DPUKIT_AGENT_TOOL

struct Agent {
  std::string sock, pool, stats, slots = "64", slot_size = "1M";
  std::vector<std::string> prefix;  // runs the agent under this command (e.g. setpriv)
  ChildProcess proc;
  Agent(const TempDir& t) : sock(t.str("agent.sock")), pool(t.str("agent-pool")), stats(t.str("agent-stats.json")) {}
  void start() {
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(), {DPUKIT_AGENT_TOOL, "--listen", sock, "--pool", pool, "--slots", slots, "--slot-size",
                             slot_size, "--stats", stats});
    proc = ChildProcess::spawn(argv);
    for (int i = 0; i < 500 && !fs::exists(sock); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(fs::exists(sock)) << "the agent listens";
  }
  void stop(int sig = SIGTERM) {
    proc.kill(sig);
    proc.wait();
  }
  ~Agent() { stop(SIGKILL); }
};

// A DB through a started agent: written, compacted, checked, reopened and
// checked again; the plugin's counters and the agent's result.
struct ThroughAgent {
  nlohmann::json plugin, agent_result;
  const nlohmann::json& agent() const { return agent_result["figures"]; }
};
ThroughAgent write_through_agent(DbRun& r, Agent& a, const std::string& settings) {
  a.start();
  r.open("pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K" + settings);
  r.w.write(r.db, 6000, 3000);
  r.compact_all();
  r.w.check(r.db);
  expect_symlinks(*r.outputs, r.outputs->compacted, true, "compaction output, an agent pool slot:");
  r.close();
  r.reopen();
  r.w.check(r.db);
  ThroughAgent t;
  t.plugin = r.finish();
  a.stop();
  t.agent_result = read_json(a.stats);  // the agent's dpukit.result/1
  return t;
}

TEST(KvPlugin, PulseDbSendsCompactionOutputsToTheAgent) {
  DbRun r("pulsedb");
  Agent a(r.tmp);
  const ThroughAgent t = write_through_agent(r, a, "&payload:pull");
  const nlohmann::json &st = t.plugin, &ag = t.agent();
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
  EXPECT_EQ(st["file_errors"].get<int>(), 0);
  EXPECT_GT(st["recycles"].get<int>(), 0);
  EXPECT_EQ(ag["write_bytes"], st["bytes_offloaded"]) << "the agent wrote every byte the host appended";
  // payload=pull: the agent's DMA stage read RocksDB's buffers.
  EXPECT_EQ(st["payload"], "pull");
  EXPECT_GT(st["pulls"].get<int>(), 0);
  EXPECT_EQ(st["pull_refusals"].get<int>(), 0);
  EXPECT_EQ(ag["dma"]["pull_bytes"], st["pull_bytes"]);
  EXPECT_EQ(ag["dma"]["pull_failures"].get<int>(), 0);
  EXPECT_LT(st["pull_bytes"].get<uint64_t>(), st["bytes_offloaded"].get<uint64_t>()) << "short appends are copied";
  EXPECT_GT(t.agent_result["cpu_ns"]["hw"].get<uint64_t>(), 0u) << "the DMA threads' time is hw";
}

TEST(KvPlugin, PulseDbCopyModeSendsEveryByteThroughTheRing) {
  DbRun r("pulsedb-copy");
  Agent a(r.tmp);
  const ThroughAgent t = write_through_agent(r, a, "&payload:copy");
  const nlohmann::json &st = t.plugin, &ag = t.agent();
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
  EXPECT_EQ(st["payload"], "copy");
  EXPECT_EQ(st["pulls"].get<int>(), 0);
  EXPECT_EQ(ag["dma"]["pulls"].get<int>(), 0);
  EXPECT_EQ(ag["write_bytes"], st["bytes_offloaded"]);
}

// An agent that may not read the host's memory (another user, without
// CAP_SYS_PTRACE: the kernel refuses process_vm_readv with EPERM). The
// plugin says so, copies instead, and nothing is lost.
TEST(KvPlugin, ARefusedPullFallsBackToTheCopyAndLosesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run the agent as another user";
  DbRun r("pulsedb-refused");
  fs::permissions(r.tmp.str(""), fs::perms::all);  // the agent (nobody) makes the pool and the symlinks here
  fs::create_directories(r.tmp.str("db"));
  fs::permissions(r.tmp.str("db"), fs::perms::all);
  Agent a(r.tmp);
  a.prefix = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"};
  const ThroughAgent t = write_through_agent(r, a, "&payload:pull");
  const nlohmann::json &st = t.plugin, &ag = t.agent();
  EXPECT_EQ(st["payload"], "pull refused: copy");
  // The first refusal turns pulling off (another thread's pull may be refused meanwhile).
  EXPECT_GE(st["pull_refusals"].get<int>(), 1);
  EXPECT_LE(st["pull_refusals"].get<int>(), st["queue_pairs"].get<int>());
  EXPECT_EQ(st["pulls"].get<int>(), 0);
  EXPECT_EQ(ag["dma"]["pull_failures"], st["pull_refusals"]);
  EXPECT_EQ(st["file_errors"].get<int>(), 0) << "a refused pull fails no file";
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
  EXPECT_EQ(ag["write_bytes"], st["bytes_offloaded"]) << "the refused bytes went again, through the ring";
}

// RocksDB passes file names as the application spelled the DB path; the
// agent, another process, gets them absolute.
TEST(KvPlugin, ARelativeDbPathReachesTheAgentAbsolute) {
  TempDir tmp("relative");
  Agent a(tmp);
  a.start();
  std::string rel = "dpukit-kv-relative-" + std::to_string(getpid());
  struct Remove {
    std::string p;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove{rel};
  auto opts = ParseOffloadUri("pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K");
  opts.stats_file = tmp.str("plugin-stats.json");
  auto env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), opts));
  auto outputs = std::make_shared<Outputs>();
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(small_options(env.get(), outputs), rel, &db).ok());
  Workload w;
  w.write(db, 4000, 2000);
  rocksdb::CompactRangeOptions c;
  c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  ASSERT_TRUE(db->CompactRange(c, nullptr, nullptr).ok());
  w.check(db);
  expect_symlinks(*outputs, outputs->compacted, true, "compaction output, an agent pool slot:");
  db->Close();
  delete db;
  env.reset();
  auto st = read_json(tmp.str("plugin-stats.json"))["figures"];
  EXPECT_GT(st["files_offloaded"].get<int>(), 0);
  EXPECT_EQ(st["file_errors"].get<int>(), 0);
}

// Tells the test when a thread starts its second compaction output once
// armed: its first went through the agent, so it has a queue pair and its
// files are in flight if the agent dies now. (RocksDB may run a compaction on
// any of its threads, and one that first meets a frozen agent takes the normal
// path: then nothing would be in flight.)
class SecondOutputStarted : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "TestSecondOutputStarted"; }
  void OnTableFileCreationStarted(const rocksdb::TableFileCreationBriefInfo& i) override {
    if (i.reason != rocksdb::TableFileCreationReason::kCompaction) return;
    std::lock_guard l(mu);
    if (armed && ++outputs[std::this_thread::get_id()] == 2) {
      fired = true;
      cv.notify_all();
    }
  }
  void arm() {
    std::lock_guard l(mu);
    outputs.clear();
    armed = true;
    fired = false;
  }
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::thread::id, int> outputs;
  bool armed = false, fired = false;
};

// Freezes the agent when `when` fires (its writes pile up, nothing
// completes) and kills it a moment later.
std::thread kill_agent_when(SecondOutputStarted& when, Agent& a) {
  when.arm();
  return std::thread([&when, &a] {
    std::unique_lock l(when.mu);
    if (!when.cv.wait_for(l, kPatience, [&] { return when.fired; }))
      ADD_FAILURE() << "no compaction thread started a second output: the agent dies with nothing in flight";
    l.unlock();
    a.proc.kill(SIGSTOP);
    std::this_thread::sleep_for(300ms);
    a.stop(SIGKILL);
  });
}

TEST(KvPlugin, KillingTheAgentMidCompactionFailsItButTheDbKeepsWorking) {
  DbRun r("agent-kill");
  Agent a(r.tmp);
  a.start();
  auto started = std::make_shared<SecondOutputStarted>();
  auto opts = ParseOffloadUri("pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K");
  opts.stats_file = r.tmp.str("plugin-stats.json");
  r.env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), opts));
  auto o = small_options(r.env.get(), r.outputs);
  o.disable_auto_compactions = true;  // the manual compaction below is the one that loses its agent
  o.listeners.push_back(started);
  ASSERT_TRUE(rocksdb::DB::Open(o, r.tmp.str("db"), &r.db).ok());
  rocksdb::CompactRangeOptions c;
  c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  // A first compaction goes through the agent ...
  r.w.write(r.db, 4000, 4000);
  ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
  ASSERT_TRUE(r.db->CompactRange(c, nullptr, nullptr).ok());
  // ... and the agent dies during the second one, with its files in flight.
  r.w.write(r.db, 8000, 4000);
  ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
  std::thread killer = kill_agent_when(*started, a);
  rocksdb::Status s = r.db->CompactRange(c, nullptr, nullptr);
  killer.join();
  EXPECT_TRUE(s.IsIOError()) << "the compaction that lost its agent failed: " << s.ToString();
  // Whether the compaction lost its agent before or after its last sync_close,
  // nothing written before is lost and the DB takes writes and compactions.
  r.w.check(r.db);
  r.w.write(r.db, 4000, 4000);
  ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
  s = r.db->CompactRange(c, nullptr, nullptr);
  EXPECT_TRUE(s.ok()) << "on the normal path while the agent is down: " << s.ToString();
  r.w.check(r.db);
  a.start();  // back: new files go to it again (a lost agent is asked again at most once a second)
  std::this_thread::sleep_for(1100ms);
  r.w.write(r.db, 4000, 4000);
  ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
  s = r.db->CompactRange(c, nullptr, nullptr);
  EXPECT_TRUE(s.ok()) << s.ToString();
  r.w.check(r.db);
  r.close();
  r.reopen();
  r.w.check(r.db);
  auto st = r.finish();
  EXPECT_GE(st["broken_queue_pairs"].get<int>(), 1);
  EXPECT_GE(st["file_errors"].get<int>(), 1) << "files in flight failed (and RocksDB retried them)";
  EXPECT_GT(st["files_fallback"].get<int>(), 0) << "files took the normal path while the agent was down";
  EXPECT_GE(st["queue_pairs"].get<int>(), 2) << "reconnected after the restart";
}

// Counts the subcompactions RocksDB ran, so a test knows its compaction was split.
class Subcompactions : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "TestSubcompactions"; }
  void OnSubcompactionBegin(const rocksdb::SubcompactionJobInfo&) override { ++begun; }
  std::atomic<int> begun{0};
};

// The agent lost while a compaction split into subcompactions has files in
// flight: if that compaction fails, it fails retryably, and no later
// compaction gets its error; the DB takes writes throughout and loses nothing.
// (Which files are in flight when the agent dies varies from run to run; the
// FileSystem-level tests above pin the cases down.)
TEST(KvPlugin, KillingTheAgentDuringSubcompactionsFailsOnlyThatCompactionRetryably) {
  DbRun r("agent-kill-sub");
  Agent a(r.tmp);
  a.start();
  auto started = std::make_shared<SecondOutputStarted>();
  auto subs = std::make_shared<Subcompactions>();
  auto opts = ParseOffloadUri("pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K");
  r.env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), opts));
  auto o = small_options(r.env.get(), r.outputs);
  o.disable_auto_compactions = true;
  o.max_subcompactions = 4;
  o.target_file_size_base = 128 << 10;  // several outputs per subcompaction
  o.listeners.push_back(started);
  o.listeners.push_back(subs);
  ASSERT_TRUE(rocksdb::DB::Open(o, r.tmp.str("db"), &r.db).ok());
  rocksdb::CompactRangeOptions c;
  c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  auto fill = [&] {
    for (int i = 0; i < 4; ++i) {
      r.w.write(r.db, 3000, 20000);
      ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
    }
  };
  fill();  // a first compaction goes through the agent ...
  ASSERT_TRUE(r.db->CompactRange(c, nullptr, nullptr).ok());
  fill();  // ... and the agent dies during the second, with files in flight
  subs->begun = 0;
  std::thread killer = kill_agent_when(*started, a);
  rocksdb::Status s = r.db->CompactRange(c, nullptr, nullptr);
  killer.join();
  EXPECT_GT(subs->begun.load(), 1) << "the compaction was split into subcompactions";
  if (!s.ok()) {
    EXPECT_TRUE(s.IsIOError() && retryable(s)) << s.ToString();
  }
  r.w.check(r.db);
  fill();
  s = r.db->CompactRange(c, nullptr, nullptr);
  EXPECT_TRUE(s.ok()) << "the next compaction, on the normal path while the agent is down: " << s.ToString();
  r.w.check(r.db);
  r.close();
  auto reopened = small_options(r.env.get(), r.outputs);
  reopened.disable_auto_compactions = true;
  ASSERT_TRUE(rocksdb::DB::Open(reopened, r.tmp.str("db"), &r.db).ok());
  r.w.check(r.db);
}

// A tmpfs of a few MB mounted for the test, so that ENOSPC is real. Needs
// CAP_SYS_ADMIN; `why` says what refused it otherwise.
struct SmallFs {
  std::string dir, why;
  bool mounted = false;
  SmallFs(const std::string& d, const std::string& size) : dir(d) {
    fs::create_directories(d);
    if (::mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size).c_str()) == 0) mounted = true;
    else why = std::strerror(errno);
  }
  ~SmallFs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

// The agent's pool on a filesystem that fills up: outputs of 512 KB outgrow
// slots of 64 KB into the last MB of a 2 MB tmpfs, and the agent's writes
// fail with ENOSPC. The compaction fails retryably, the DB keeps serving reads
// and writes, nothing acknowledged is lost, and a retry succeeds (it takes the
// normal path while the agent is out of space). No pool slot leaks.
TEST(KvPlugin, NoSpaceInTheAgentFailsTheCompactionRetryablyAndTheRetrySucceeds) {
  DbRun r("nospace");
  SmallFs small(r.tmp.str("small"), "2m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs for a real ENOSPC: " << small.why;
  Agent a(r.tmp);
  a.pool = small.dir + "/pool";
  a.slots = "8";
  a.slot_size = "64K";
  a.start();
  auto opts = ParseOffloadUri("pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K");
  r.env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), opts));
  auto o = small_options(r.env.get(), r.outputs);
  o.disable_auto_compactions = true;  // the compactions below are the ones that meet a full disk
  ASSERT_TRUE(rocksdb::DB::Open(o, r.tmp.str("db"), &r.db).ok());
  rocksdb::CompactRangeOptions c;
  c.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  for (int i = 0; i < 4; ++i) {
    r.w.write(r.db, 3000, 20000);
    ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok());
  }
  rocksdb::Status s = r.db->CompactRange(c, nullptr, nullptr);
  EXPECT_TRUE(s.IsIOError() && retryable(s)) << "the compaction the agent had no space for: " << s.ToString();
  r.w.check(r.db);
  r.w.write(r.db, 2000, 20000);
  ASSERT_TRUE(r.db->Flush(rocksdb::FlushOptions()).ok()) << "the DB still takes writes";
  r.w.check(r.db);
  bool retried = false;
  for (int attempt = 0; attempt < 3 && !retried; ++attempt) retried = r.db->CompactRange(c, nullptr, nullptr).ok();
  EXPECT_TRUE(retried) << "no retry of the compaction succeeded";
  r.w.check(r.db);
  r.close();
  ASSERT_TRUE(rocksdb::DB::Open(o, r.tmp.str("db"), &r.db).ok());
  r.w.check(r.db);
  r.close();
  // Only live files hold slots: RocksDB deleted the failed outputs and the
  // agent took their slots back (a free slot is empty or written out, so
  // its size does not tell: its record does).
  size_t links = 0, holding = 0;
  for (auto& e : fs::directory_iterator(r.tmp.str("db"))) links += fs::is_symlink(e.symlink_status());
  for (const auto& s : check_pool(a.pool).reports) holding += s.verdict == PoolCheck::Verdict::kInUse;
  EXPECT_EQ(holding, links) << "slots holding data, and pool files in the DB";
}

// kill -9 of the host process during sustained synced writes: after a
// restart every write it had acknowledged is there.
std::string value_of(uint64_t i) {
  std::string v(300, '\0');
  uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
  for (auto& c : v) {
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    c = static_cast<char>('a' + (x >> 59));
  }
  return v;
}

// Run by the test below in a process of its own: synced writes until killed,
// each acknowledged on a pipe once Put returned.
TEST(KvHelper, DISABLED_SyncedWriter) {
  const char* db_path = std::getenv("DPUKIT_TEST_DB");
  const char* uri = std::getenv("DPUKIT_TEST_URI");
  const char* ack = std::getenv("DPUKIT_TEST_ACK_FD");
  ASSERT_TRUE(db_path && uri && ack);
  int fd = std::atoi(ack);
  auto env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), ParseOffloadUri(uri)));
  rocksdb::DB* db;
  ASSERT_TRUE(rocksdb::DB::Open(small_options(env.get(), std::make_shared<Outputs>()), db_path, &db).ok());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  for (uint64_t i = 0;; ++i) {
    ASSERT_TRUE(db->Put(wo, key_of(static_cast<uint32_t>(i)), value_of(i)).ok());
    ASSERT_EQ(::write(fd, &i, sizeof(i)), static_cast<ssize_t>(sizeof(i)));
  }
}

TEST(KvPlugin, HostKilledDuringSyncedWritesKeepsEveryAcknowledgedWrite) {
  TempDir tmp("host-kill");
  Agent a(tmp);
  a.start();
  std::string uri = "pulsedb://" + a.sock + "?write_threshold:64K&sync_interval:16K";
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  // The writer is this test binary again, in a process of its own (a fork
  // would inherit RocksDB's thread pools without their threads).
  ::setenv("DPUKIT_TEST_DB", tmp.str("db").c_str(), 1);
  ::setenv("DPUKIT_TEST_URI", uri.c_str(), 1);
  ::setenv("DPUKIT_TEST_ACK_FD", std::to_string(pipefd[1]).c_str(), 1);
  ChildProcess child = ChildProcess::spawn(
      {own_executable().string(), "--gtest_filter=KvHelper.DISABLED_SyncedWriter", "--gtest_also_run_disabled_tests"});
  ::unsetenv("DPUKIT_TEST_ACK_FD");
  ::close(pipefd[1]);
  uint64_t acked = 0, i;
  bool any = false;
  while (::read(pipefd[0], &i, sizeof(i)) == sizeof(i)) {
    acked = i;
    any = true;
    if (acked >= 6000) break;  // several flushes and compactions under way by now
  }
  child.kill(SIGKILL);
  child.wait();
  const int st = child.status();
  while (::read(pipefd[0], &i, sizeof(i)) == sizeof(i)) acked = i;  // acknowledged before it died
  ::close(pipefd[0]);
  ASSERT_TRUE(any) << "the writer never acknowledged a write (exit status " << st << ")";
  auto env = rocksdb::NewCompositeEnv(NewOffloadFileSystem(rocksdb::FileSystem::Default(), ParseOffloadUri(uri)));
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(small_options(env.get(), std::make_shared<Outputs>()), tmp.str("db"), &db);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(db->VerifyChecksum().ok());
  for (uint64_t k = 0; k <= acked; ++k) {
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), key_of(static_cast<uint32_t>(k)), &v).ok()) << "acknowledged write " << k;
    ASSERT_EQ(v, value_of(k)) << k;
  }
  db->Close();
  delete db;
}
#endif

}  // namespace
}  // namespace dpukit::kv
