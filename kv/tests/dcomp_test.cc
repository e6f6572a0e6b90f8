// DComp (kv/src/dcomp): the wire format, the reading of RocksDB's serialized
// compaction input, the worker's guard file system, and the primary with a
// real RocksDB and real worker processes (`dpukit-kvbench dcomp-worker`):
// L1+ compactions go to the worker, a worker that crashes is restarted and
// one that hangs is timed out, and either way the compaction runs on the host.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/statistics.h>

#include "dpukit/kv_dcomp.h"
#include "dcomp/guard_fs.h"
#include "dcomp/service_input.h"
#include "dcomp/wire.h"
#include "dpukit/core/process.h"
#include "temp_dir.h"
#include "test_tools.h"

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test_tools::kvbench;
using test_tools::slurp;
using namespace dcomp;

// ------------------------------------------------------------------ wire

TEST(DcompWire, JobsResultsAndStatsSurviveTheTrip) {
  Job j{0x500000002ull, "/db", "/db.dcomp/job-5-2-1", std::string("in\0put;", 7), Fault::kHang};
  auto jd = decode_job(encode(j));
  ASSERT_TRUE(jd);
  EXPECT_EQ(jd->id, j.id);
  EXPECT_EQ(jd->db_name, j.db_name);
  EXPECT_EQ(jd->output_dir, j.output_dir);
  EXPECT_EQ(jd->input, j.input);
  EXPECT_EQ(jd->fault, Fault::kHang);

  JobResult r{false, "IO error: x", "", 11, 22, 3, 4};
  auto rd = decode_result(encode(r));
  ASSERT_TRUE(rd);
  EXPECT_FALSE(rd->ok);
  EXPECT_EQ(rd->error, r.error);
  EXPECT_EQ(rd->cpu_ns, 11u);
  EXPECT_EQ(rd->wall_ns, 22u);
  EXPECT_EQ(rd->refused, 3u);
  EXPECT_EQ(rd->dilated_ns, 4u);

  WorkerStats s{1, 2, 3, 4, 5, 6};
  auto sd = decode_stats(encode(s));
  ASSERT_TRUE(sd);
  EXPECT_EQ(sd->cpu_ns, 1u);
  EXPECT_EQ(sd->compact_read_bytes, 5u);
  EXPECT_EQ(sd->refused, 6u);
}

TEST(DcompWire, ABodyCutShortOrWithBytesLeftOverIsRefused) {
  std::string body = encode(Job{1, "/db", "/out", "input", Fault::kNone});
  for (size_t n : {size_t(0), size_t(7), body.size() - 1})
    EXPECT_FALSE(decode_job(body.substr(0, n))) << n << " bytes";
  EXPECT_FALSE(decode_job(body + "x"));
  std::string bad_fault = encode(Job{1, "/db", "/out", "input", Fault::kNone});
  bad_fault[bad_fault.size() - 8] = 9;
  EXPECT_FALSE(decode_job(bad_fault));
  EXPECT_FALSE(decode_stats(encode(JobResult{true, "e", "r", 1, 2, 3, 4})));
}

// ------------------------------------------------------- the service input

TEST(DcompServiceInput, FindsTheOutputLevelAmongNestedAndEscapedFields) {
  const std::string version("\x01\x00\x00\x00", 4);
  // An escaped ';' and a nested struct both hold an "output_level=" that is not the field.
  std::string in = version +
                   "cf_name=default;db_id=x\\;output_level=9;begin={a=1;output_level=7};"
                   "input_files=000012.sst:000013.sst;output_level=2;has_end=false;";
  EXPECT_EQ(serialized_field(in, "output_level"), "2");
  EXPECT_EQ(output_level(in), 2);
  EXPECT_EQ(serialized_field(in, "begin"), "{a=1;output_level=7}");
  EXPECT_EQ(serialized_field(in, "db_id"), "x\\;output_level=9");
  EXPECT_EQ(serialized_field(in, "has_end"), "false");
  EXPECT_FALSE(serialized_field(in, "end"));
  EXPECT_FALSE(output_level(version + "output_level=x;"));
  EXPECT_FALSE(output_level(version + "output_level=;"));
  EXPECT_FALSE(output_level("ab"));
}

// ---------------------------------------------------------- the guard fs

TEST(DcompGuardFs, NothingOutsideTheJobDirectoryChanges) {
  TempDir t("guard");
  fs::path job = t.path / "job", sibling = t.path / "job-2", db = t.path / "db";
  for (const auto& d : {job, sibling, db}) fs::create_directories(d);
  std::ofstream(db / "live.sst") << "live";
  std::ofstream(sibling / "x") << "x";
  std::ofstream(job / "a") << "a";
  std::ofstream(job / "b") << "b";
  std::atomic<uint64_t> refused{0};
  JobDirGuardFs g(rocksdb::FileSystem::Default(), job.string() + "/", refused);
  rocksdb::IOOptions io;
  rocksdb::FileOptions fo;
  std::unique_ptr<rocksdb::FSWritableFile> w;

  EXPECT_TRUE(g.DeleteFile((job / "a").string(), io, nullptr).ok());
  EXPECT_TRUE(g.DeleteFile((db / "live.sst").string(), io, nullptr).IsIOError());
  EXPECT_FALSE(g.DeleteFile((sibling / "x").string(), io, nullptr).ok()) << "a sibling sharing the prefix";
  EXPECT_FALSE(g.DeleteFile((job / ".." / "db" / "live.sst").string(), io, nullptr).ok());
  EXPECT_FALSE(g.RenameFile((job / "b").string(), (db / "live.sst").string(), io, nullptr).ok());
  EXPECT_FALSE(g.NewWritableFile((db / "new.sst").string(), fo, &w, nullptr).ok());
  EXPECT_FALSE(g.Truncate((db / "live.sst").string(), 0, io, nullptr).ok());
  EXPECT_FALSE(g.LinkFile((job / "b").string(), (db / "link.sst").string(), io, nullptr).ok());
  EXPECT_FALSE(g.DeleteDir(db.string(), io, nullptr).ok());
  EXPECT_EQ(refused.load(), 8u);

  EXPECT_TRUE(g.NewWritableFile((job / "out.sst").string(), fo, &w, nullptr).ok());
  EXPECT_TRUE(g.RenameFile((job / "b").string(), (job / "c").string(), io, nullptr).ok());
  EXPECT_FALSE(fs::exists(job / "a"));
  EXPECT_TRUE(fs::exists(sibling / "x"));
  EXPECT_FALSE(fs::exists(db / "new.sst"));
  EXPECT_FALSE(fs::exists(db / "link.sst"));
  std::ifstream live(db / "live.sst");
  std::string content;
  live >> content;
  EXPECT_EQ(content, "live");
}

// -------------------------------------------- the primary with a worker

// Ends the test program when a test runs past its limit: a compaction that
// waits forever for a worker cannot be interrupted any other way.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::string what)
      : thread_([this, limit, what = std::move(what)] {
          std::unique_lock lk(mu_);
          if (!cv_.wait_for(lk, limit, [&] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s\n", what.c_str());
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

class Dcomp : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = kvbench();
    if (!fs::exists(worker_)) GTEST_SKIP() << worker_ << " not found: build dpukit-kvbench, or set DPUKIT_KVBENCH";
    db_ = t_.str("db");
  }

  DcompConfig config() const {
    DcompConfig c;
    c.worker_command = {worker_, "dcomp-worker", "--cache-size", "8MB"};
    c.dir = db_ + ".dcomp";
    c.worker_log = t_.str("worker.log");
    c.slots = 2;
    return c;
  }

  // Small tables, and compactions only when a test asks for them.
  static rocksdb::Options options() {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.compression = rocksdb::kNoCompression;
    o.write_buffer_size = 256 << 10;
    o.target_file_size_base = 256 << 10;
    o.max_bytes_for_level_base = 1 << 20;
    o.disable_auto_compactions = true;
    o.max_compaction_bytes = 1ull << 30;  // a manual compaction is one job, not cut into several
    o.statistics = rocksdb::CreateDBStatistics();
    return o;
  }

  std::unique_ptr<rocksdb::DB> open(const rocksdb::Options& o) {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, db_, &raw);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return std::unique_ptr<rocksdb::DB>(raw);
  }

  // Hex keys scattered over the key space, so that compactions overlap.
  static std::string key(uint64_t i) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(i * 0x9E3779B97F4A7C15ull));
    return b;
  }
  static std::string value(uint64_t i) { return std::string(200, char('a' + i % 26)) + std::to_string(i); }

  static void fill(rocksdb::DB& db, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) ASSERT_TRUE(db.Put({}, key(i), value(i)).ok());
    ASSERT_TRUE(db.Flush({}).ok());
  }

  // A full manual compaction, the bottommost level forced: L0 -> L1 (the
  // host's) while there are L0 files, else L1 -> L1 (a job for the worker).
  static void compact(rocksdb::DB& db) {
    rocksdb::CompactRangeOptions cro;
    cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    rocksdb::Status s = db.CompactRange(cro, nullptr, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Reopened without DComp: every value is there, every checksum holds.
  void expect_intact(uint64_t n) {
    rocksdb::Options o;
    std::unique_ptr<rocksdb::DB> db = open(o);
    ASSERT_TRUE(db);
    EXPECT_TRUE(db->VerifyChecksum().ok());
    std::string v;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; ++i)
      if (!db->Get({}, key(i), &v).ok() || v != value(i)) ++bad;
    EXPECT_EQ(bad, 0u) << "of " << n << " keys";
  }

  TempDir t_{"dcomp"};
  std::string worker_, db_;
};

TEST_F(Dcomp, LevelZeroStaysOnTheHostAndDeeperLevelsGoToTheWorker) {
  constexpr uint64_t kKeys = 15000;
  DcompOffload::Summary sum;
  rocksdb::Options o = options();
  {
    DcompOffload off(config());
    off.install(o, 1, 2);
    auto db = open(o);
    ASSERT_TRUE(db);
    fill(*db, kKeys);
    compact(*db);
    compact(*db);
    ASSERT_TRUE(db->Close().ok());
    db.reset();
    sum = off.finish();
    EXPECT_TRUE(fs::exists(db_ + ".dcomp")) << "job directories live until the offload ends";
  }
  EXPECT_FALSE(fs::exists(db_ + ".dcomp")) << "the job directories are removed";
  auto d = sum.json;  // a copy: a missing key reads as null
  EXPECT_EQ(d["by_levels"]["L0->L1"]["host"], 1) << d.dump(1);
  EXPECT_EQ(d["by_levels"]["L0->L1"]["worker"], 0) << d.dump(1);
  EXPECT_EQ(d["by_levels"]["L1->L1"]["worker"], 1) << d.dump(1);
  EXPECT_EQ(sum.jobs_in_worker, 1u);
  EXPECT_EQ(d["jobs_failed"], 0);
  EXPECT_EQ(d["worker_exit"], "exited with status 0");
  EXPECT_EQ(d["worker_crashed"], false);
  EXPECT_GT(sum.worker_cpu_ns, 0u) << "the worker's CPU time is the dpu CPU";
  EXPECT_GT(o.statistics->getTickerCount(rocksdb::REMOTE_COMPACT_WRITE_BYTES), 0u);
  EXPECT_EQ(d["worker_stats"]["jobs"], 1);
  expect_intact(kKeys);
}

// Every key and value, and the files per level: what two runs of the same
// compactions must both end with.
std::string contents(rocksdb::DB& db) {
  std::string all;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator({}));
  for (it->SeekToFirst(); it->Valid(); it->Next()) all += it->key().ToString() + "=" + it->value().ToString() + ";";
  EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  rocksdb::ColumnFamilyMetaData md;
  db.GetColumnFamilyMetaData(&md);
  for (const auto& l : md.levels) {
    uint64_t entries = 0;
    for (const auto& f : l.files) entries += f.num_entries;
    all += "|L" + std::to_string(l.level) + ":" + std::to_string(l.files.size()) + "/" + std::to_string(entries);
  }
  return all;
}

// --dpu-speed: the worker's job thread is time-dilated. The same job at F =
// 0.5 accounts about twice the worker CPU it does at F = 1 (of which half is
// the dilation), and writes the same output.
TEST_F(Dcomp, AtHalfSpeedAJobAccountsTwiceTheWorkerCpuAndWritesTheSameOutput) {
  constexpr uint64_t kKeys = 40000;
  struct Run {
    uint64_t cpu_ns = 0, dilated_ns = 0;
    std::string contents;
  };
  auto run = [&](const std::string& speed) {
    Run out;
    rocksdb::Options o = options();
    EXPECT_TRUE(rocksdb::DestroyDB(db_, o).ok());
    DcompConfig cfg = config();
    cfg.worker_command.insert(cfg.worker_command.end(), {"--dpu-speed", speed});
    DcompOffload off(cfg);
    off.install(o, 1, 2);
    auto db = open(o);
    if (!db) return out;
    fill(*db, kKeys);
    compact(*db);  // L0 -> L1, on the host
    compact(*db);  // L1 -> L1, the worker's job
    out.contents = contents(*db);
    EXPECT_TRUE(db->Close().ok());
    db.reset();
    auto d = off.finish().json;
    EXPECT_EQ(d["jobs_in_worker"], 1) << d.dump(1);
    EXPECT_EQ(d["jobs"].size(), 1u) << d.dump(1);
    if (d["jobs"].size() == 1) {
      out.cpu_ns = d["jobs"][0]["worker_cpu_ns"];
      out.dilated_ns = d["jobs"][0]["worker_dilated_ns"];
    }
    EXPECT_EQ(d["worker_job_dilated_ns"], out.dilated_ns);
    return out;
  };
  Run full = run("host"), half = run("0.5");
  EXPECT_EQ(full.dilated_ns, 0u) << "nothing is dilated at the host's speed";
  ASSERT_GT(full.cpu_ns, 0u);
  ASSERT_GT(half.cpu_ns, half.dilated_ns);
  // At F = 0.5 the thread stays busy (1/F - 1) = 1 x the CPU time of its
  // work. The model's own clock reads are in the job's CPU but are not work
  // it dilates (docs/core.md, "The model's own cost"): 0.949 x here.
  double own = double(half.cpu_ns - half.dilated_ns);
  EXPECT_GE(half.dilated_ns, 0.9 * own) << half.cpu_ns << " ns of CPU, " << half.dilated_ns << " dilated";
  EXPECT_LE(half.dilated_ns, 1.5 * own) << half.cpu_ns << " ns of CPU, " << half.dilated_ns << " dilated";
  // Two runs of the job do not cost exactly the same (on a busy machine the
  // undilated job's CPU varied 0.7-1.4x between runs): a loose bound.
  double ratio = double(half.cpu_ns) / double(full.cpu_ns);
  EXPECT_GT(ratio, 1.25) << "worker job CPU at F=0.5: " << half.cpu_ns << " ns, at F=1: " << full.cpu_ns << " ns";
  EXPECT_LT(ratio, 4.0) << "worker job CPU at F=0.5: " << half.cpu_ns << " ns, at F=1: " << full.cpu_ns << " ns";
  EXPECT_FALSE(full.contents.empty());
  EXPECT_EQ(half.contents, full.contents) << "the dilated job wrote something else";
  expect_intact(kKeys);
}

// The knobs of PulseDB Fig. 3: first_level 0 sends L0->L1 too; share 0.5
// keeps every other eligible compaction on the host.
TEST_F(Dcomp, FirstLevelAndShareChooseWhichCompactionsGoToTheWorker) {
  constexpr uint64_t kKeys = 15000;
  auto levels = [&](int first_level, double share) {
    rocksdb::Options o = options();
    EXPECT_TRUE(rocksdb::DestroyDB(db_, o).ok());
    DcompConfig cfg = config();
    cfg.first_level = first_level;
    cfg.share = share;
    DcompOffload off(cfg);
    off.install(o, 1, 2);
    auto db = open(o);
    if (db) {
      fill(*db, kKeys);
      compact(*db);  // L0 -> L1
      compact(*db);  // L1 -> L1
      compact(*db);  // L1 -> L1
      EXPECT_TRUE(db->Close().ok());
    }
    db.reset();
    nlohmann::json d = off.finish().json;
    expect_intact(kKeys);
    return d;
  };
  auto d = levels(0, 1.0);
  EXPECT_EQ(d["by_levels"]["L0->L1"]["worker"], 1) << d.dump(1);
  EXPECT_EQ(d["by_levels"]["L1->L1"]["worker"], 2) << d.dump(1);
  EXPECT_EQ(d["jobs_failed"], 0) << d.dump(1);
  d = levels(0, 0.5);  // the 1st and 3rd eligible stay, the 2nd goes
  EXPECT_EQ(d["by_levels"]["L0->L1"]["host"], 1) << d.dump(1);
  EXPECT_EQ(d["by_levels"]["L1->L1"]["worker"], 1) << d.dump(1);
  EXPECT_EQ(d["by_levels"]["L1->L1"]["host"], 1) << d.dump(1);
  EXPECT_EQ(d["kept_on_host"]["share"], 2) << d.dump(1);
  d = levels(1, 0.0);
  EXPECT_EQ(d["jobs_offloaded"], 0) << d.dump(1);
  EXPECT_EQ(d["kept_on_host"]["input_l0"], 1) << d.dump(1);
  EXPECT_EQ(d["kept_on_host"]["share"], 2) << d.dump(1);
  EXPECT_THROW(
      [&] {
        DcompConfig c = config();
        c.share = 1.5;
        DcompOffload off(c);
      }(),
      std::invalid_argument);
}

// The worker dies (SIGKILL) holding its first job: that compaction runs on
// the host instead, a new worker is started, and it takes the next job.
TEST_F(Dcomp, ACrashedWorkerIsRestartedAndItsCompactionRunsOnTheHost) {
  constexpr uint64_t kKeys = 15000;
  Watchdog dog(300s, "Dcomp.ACrashedWorkerIsRestartedAndItsCompactionRunsOnTheHost ran for 5 minutes");
  DcompConfig cfg = config();
  cfg.die_on_job = 1;
  DcompOffload off(cfg);
  rocksdb::Options o = options();
  off.install(o, 1, 2);
  auto db = open(o);
  ASSERT_TRUE(db);
  fill(*db, kKeys);
  compact(*db);
  compact(*db);  // the worker dies under this one
  EXPECT_EQ(off.wait_for_worker(20s), 2u) << "no second worker was started";
  compact(*db);  // and the second worker takes this one
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  DcompOffload::Summary sum = off.finish();
  auto d = sum.json;  // a copy: a missing key reads as null
  EXPECT_EQ(d["fell_back"]["worker_lost"], 1) << d.dump(1);
  EXPECT_EQ(d["worker_restarts"], 1);
  EXPECT_EQ(d["workers_started"], 2);
  ASSERT_EQ(d["worker_exits"].size(), 2u) << d.dump(1);
  EXPECT_EQ(d["worker_exits"][0], "killed by signal 9");
  EXPECT_EQ(d["worker_exit"], "exited with status 0");
  EXPECT_EQ(d["worker_crashed"], true);
  ASSERT_EQ(d["jobs"].size(), 2u) << d.dump(1);
  EXPECT_EQ(d["jobs"][0]["worker"], 1);
  EXPECT_EQ(d["jobs"][0]["fell_back"], "worker_lost");
  EXPECT_EQ(d["jobs"][1]["worker"], 2);
  EXPECT_EQ(d["jobs"][1]["ok"], true);
  EXPECT_EQ(sum.jobs_in_worker, 1u);
  EXPECT_NE(slurp(t_.str("worker.log")).find("killing myself"), std::string::npos)
      << "the first worker's log is kept: " << slurp(t_.str("worker.log"));
  expect_intact(kKeys);
}

// The worker computes its first job and never answers: the primary gives up
// after the job time-out, runs that compaction on the host, and replaces
// the worker. Without the time-out this compaction would never return.
TEST_F(Dcomp, AHungWorkerIsTimedOutAndItsCompactionRunsOnTheHost) {
  constexpr uint64_t kKeys = 15000;
  Watchdog dog(300s, "Dcomp.AHungWorkerIsTimedOutAndItsCompactionRunsOnTheHost: a compaction waited forever");
  DcompConfig cfg = config();
  cfg.hang_on_job = 1;
  cfg.job_timeout = 3s;
  DcompOffload off(cfg);
  rocksdb::Options o = options();
  off.install(o, 1, 2);
  auto db = open(o);
  ASSERT_TRUE(db);
  fill(*db, kKeys);
  compact(*db);
  auto t0 = std::chrono::steady_clock::now();
  compact(*db);  // the worker hangs under this one
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(off.wait_for_worker(20s), 2u) << "no second worker was started";
  compact(*db);
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  DcompOffload::Summary sum = off.finish();
  auto d = sum.json;  // a copy: a missing key reads as null
  EXPECT_EQ(d["fell_back"]["timed_out"], 1) << d.dump(1);
  EXPECT_EQ(d["worker_restarts"], 1);
  ASSERT_EQ(d["worker_exits"].size(), 2u) << d.dump(1);
  EXPECT_EQ(d["worker_exits"][0], "killed by signal 9") << "the hung worker is killed";
  EXPECT_EQ(d["worker_exit"], "exited with status 0");
  ASSERT_EQ(d["jobs"].size(), 2u) << d.dump(1);
  EXPECT_EQ(d["jobs"][0]["fell_back"], "timed_out");
  EXPECT_EQ(d["jobs"][1]["worker"], 2);
  EXPECT_EQ(d["jobs"][1]["ok"], true);
  expect_intact(kKeys);
}

// A worker that keeps dying is not started forever: after max_restarts every
// compaction runs on the host, and the database is still whole.
TEST_F(Dcomp, AfterTooManyRestartsEveryCompactionRunsOnTheHost) {
  constexpr uint64_t kKeys = 8000;
  DcompConfig cfg = config();
  cfg.max_restarts = 0;
  cfg.die_on_job = 1;
  DcompOffload off(cfg);
  rocksdb::Options o = options();
  off.install(o, 1, 2);
  auto db = open(o);
  ASSERT_TRUE(db);
  fill(*db, kKeys);
  compact(*db);
  compact(*db);
  EXPECT_EQ(off.wait_for_worker(20s), 0u) << "a worker was started again";
  compact(*db);
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  auto d = off.finish().json;
  EXPECT_EQ(d["workers_started"], 1);
  EXPECT_EQ(d["kept_on_host"]["worker_down"], 1) << d.dump(1);
  expect_intact(kKeys);
}

// RocksDB 7.8.3 deletes TableFileName(cf_paths, n) — in the PRIMARY's
// directory — when a subcompaction's only output ends up empty. Here a
// DeleteRange over all of L2 makes the offloaded L1->L2 compaction's output
// empty; the worker's guard must refuse the delete, and no live file of the
// primary may be lost.
TEST_F(Dcomp, TheGuardStopsRocksDbsEmptyOutputBug) {
  rocksdb::Options o = options();
  o.write_buffer_size = 1 << 20;
  DcompOffload off(config());
  off.install(o, 1, 2);
  auto db = open(o);
  ASSERT_TRUE(db);
  for (uint64_t i = 0; i < 2000; ++i) ASSERT_TRUE(db->Put({}, key(i), std::string(128, 'v')).ok());
  ASSERT_TRUE(db->Flush({}).ok());
  rocksdb::CompactRangeOptions to_l2;
  to_l2.change_level = true;
  to_l2.target_level = 2;
  ASSERT_TRUE(db->CompactRange(to_l2, nullptr, nullptr).ok());
  // Every key is hex, so ["0", "g") covers them all; L0 -> L1 moves the lone
  // range tombstone down, then L1 -> L2 (in the worker) drops it with the data.
  ASSERT_TRUE(db->DeleteRange({}, db->DefaultColumnFamily(), "0", "g").ok());
  ASSERT_TRUE(db->Flush({}).ok());
  ASSERT_TRUE(db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
  // Something the primary writes after the job: it must survive too.
  ASSERT_TRUE(db->Put({}, key(7), "after").ok());
  ASSERT_TRUE(db->Flush({}).ok());
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  for (const auto& f : live) EXPECT_TRUE(fs::exists(f.db_path + f.name)) << "live file " << f.name << " is gone";
  std::string got;
  EXPECT_TRUE(db->Get({}, key(7), &got).ok());
  EXPECT_EQ(got, "after");
  ASSERT_TRUE(db->Close().ok());
  db.reset();
  DcompOffload::Summary sum = off.finish();
  ASSERT_EQ(sum.jobs_in_worker, 1u) << sum.json.dump(1);
  if (sum.json["refused_outside_job_dir"] == 0) GTEST_SKIP() << "the bug did not trigger (a fixed RocksDB?)";
  std::string log = slurp(t_.str("worker.log"));
  EXPECT_NE(log.find("refused to delete " + db_ + "/"), std::string::npos) << log;
}

}  // namespace
}  // namespace dpukit::kv
