// dpukit-kvbench end to end, through the built binary (kv_tests does not link
// its sources): small databases with a 256 KB write buffer and a 1 MB L1 so
// that flushes and L0->L1->L2 compactions happen within seconds.
//
// The binary is $DPUKIT_KVBENCH, else DPUKIT_KVBENCH_TOOL if the build defines
// it, else dpukit-kvbench beside this test binary (both land in build/bin).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/core/process.h"
#include "test_tools.h"

namespace fs = std::filesystem;

namespace {

using dpukit::kv::test_tools::kvbench;
using dpukit::kv::test_tools::slurp;

// Small-scale settings: compactions at every level within a few MB.
const std::vector<std::string> kSmall = {"--value-size", "256", "--write-buffer-size", "256K", "--target-file-size",
                                         "256K", "--max-bytes-for-level-base", "1M", "--cache-size", "8M"};

struct Outcome {
  int code;
  std::string out, err;
};

class KvBench : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = kvbench();
    ASSERT_TRUE(fs::exists(bin_)) << bin_ << " not found: build the dpukit-kvbench target, or set DPUKIT_KVBENCH";
    char tmpl[] = "/tmp/kvbench-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_ = (dir_ / "db").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs a command line (each argument quoted for the shell), capturing its
  // output in files of the test directory.
  Outcome run(const std::string& program, const std::vector<std::string>& args) {
    std::string cmd = quote(program);
    for (const auto& a : args) cmd += " " + quote(a);
    fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    cmd += " >" + quote(out.string()) + " 2>" + quote(err.string());
    int status = std::system(cmd.c_str());
    Outcome r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
    return r;
  }
  Outcome kv(std::vector<std::string> args, bool small = true) {
    if (small) args.insert(args.end(), kSmall.begin(), kSmall.end());
    return run(bin_, args);
  }
  nlohmann::json json(const std::string& name) { return nlohmann::json::parse(slurp(dir_ / name)); }
  std::string path(const std::string& name) { return (dir_ / name).string(); }

  static std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  }

  std::string bin_;
  fs::path dir_;
  std::string db_;
};

TEST_F(KvBench, FillOverwriteVerify) {
  Outcome fill = kv({"fill", "--db", db_, "--num", "20000", "--json", path("fill.json")});
  ASSERT_EQ(fill.code, 0) << fill.err;
  auto f = json("fill.json");
  EXPECT_EQ(f["schema"], "dpukit.result/1");
  EXPECT_EQ(f["figures"]["ops"], 20000);
  EXPECT_EQ(f["figures"]["latency_us"]["insert"]["count"], 20000);
  EXPECT_GT(f["figures"]["compaction"]["bytes_written"].get<uint64_t>(), 0u) << "the small settings must compact";
  EXPECT_GT(f["cpu_ns"]["host"].get<uint64_t>(), 0u);

  Outcome ow = kv({"overwrite", "--db", db_, "--num", "10000", "--threads", "2", "--json", path("ow.json")});
  ASSERT_EQ(ow.code, 0) << ow.err;
  EXPECT_EQ(json("ow.json")["figures"]["latency_us"]["update"]["count"], 10000);

  Outcome v = kv({"verify", "--db", db_, "--expect-keys", "20000"}, false);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("OK: 20000 keys"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("overwrite"), std::string::npos) << "some keys were last written by overwrite: " << v.out;

  Outcome wrong_count = kv({"verify", "--db", db_, "--expect-keys", "20001"}, false);
  EXPECT_EQ(wrong_count.code, 1);
}

// A value written outside the generator (here by RocksDB's own ldb tool) is
// found and named by its key, and so is another key's genuine value.
TEST_F(KvBench, VerifyCatchesForeignValues) {
  if (!fs::exists("/usr/bin/ldb")) GTEST_SKIP() << "ldb (rocksdb-tools) is not installed";
  ASSERT_EQ(kv({"fill", "--db", db_, "--num", "5000"}).code, 0);
  Outcome scan = run("/usr/bin/ldb", {"--db=" + db_, "scan", "--max_keys=2", "--value_hex"});
  ASSERT_EQ(scan.code, 0) << scan.err;
  std::istringstream lines(scan.out);
  std::string k1, colon, v1, k2;
  lines >> k1 >> colon >> v1 >> k2;
  ASSERT_EQ(k1.size(), 16u) << scan.out;
  ASSERT_EQ(k2.size(), 16u) << scan.out;

  ASSERT_EQ(run("/usr/bin/ldb", {"--db=" + db_, "--value_hex", "put", k2, v1}).code, 0);  // k1's value under k2
  Outcome v = kv({"verify", "--db", db_}, false);
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find("key " + k2 + ": value belongs to record"), std::string::npos) << v.err;

  ASSERT_EQ(run("/usr/bin/ldb", {"--db=" + db_, "put", k1, "not-a-kvbench-value-at-all-but-long-enough"}).code, 0);
  v = kv({"verify", "--db", db_, "--json", path("verify.json")}, false);
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find("key " + k1 + ": bad magic"), std::string::npos) << v.err;
  EXPECT_EQ(json("verify.json")["figures"]["mismatches"], 2);
}

// Bytes flipped inside an SST are caught by the checksum pass.
TEST_F(KvBench, VerifyCatchesCorruptSst) {
  ASSERT_EQ(kv({"fill", "--db", db_, "--num", "5000", "--drain"}).code, 0);
  fs::path biggest;
  uintmax_t size = 0;
  for (const auto& e : fs::directory_iterator(db_))
    if (e.path().extension() == ".sst" && e.file_size() > size) size = e.file_size(), biggest = e.path();
  ASSERT_GT(size, 8192u);
  {
    std::fstream f(biggest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(size / 3));
    const char garbage[16] = {'\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a',
                              '\xa5', '\xa5', '\xa5', '\xa5', '\xa5', '\xa5', '\xa5', '\xa5'};
    f.write(garbage, sizeof(garbage));
  }
  Outcome v = kv({"verify", "--db", db_}, false);
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.err.find("checksum"), std::string::npos) << v.err;
}

TEST_F(KvBench, YcsbLoadThenRunPhases) {
  Outcome load = kv({"ycsb", "--workload", "load", "--records", "8000", "--db", db_, "--threads", "2", "--json",
                 path("load.json")});
  ASSERT_EQ(load.code, 0) << load.err;
  EXPECT_EQ(json("load.json")["figures"]["latency_us"]["insert"]["count"], 8000);

  Outcome a = kv({"ycsb", "--workload", "a", "--records", "8000", "--ops", "6000", "--db", db_, "--threads", "2",
              "--json", path("a.json")});
  ASSERT_EQ(a.code, 0) << a.err;
  auto fa = json("a.json")["figures"];
  EXPECT_EQ(fa["ops"], 6000);
  uint64_t reads = fa["latency_us"]["read"]["count"], updates = fa["latency_us"]["update"]["count"];
  EXPECT_EQ(reads + updates, 6000u);
  EXPECT_GT(reads, 2400u);  // 50/50: far inside these bounds at 6000 draws
  EXPECT_GT(updates, 2400u);
  EXPECT_EQ(fa["read_not_found"], 0) << "every zipfian pick is a loaded record";
  EXPECT_GE(fa["latency_us"]["read"]["p99"].get<double>(), fa["latency_us"]["read"]["p50"].get<double>());
  EXPECT_GT(fa["throughput_ops_per_s"].get<double>(), 0);

  // The other phases: the op types each one must show.
  const std::vector<std::pair<std::string, std::vector<std::string>>> phases = {
      {"b", {"read", "update"}}, {"c", {"read"}},           {"d", {"read", "insert"}},
      {"e", {"scan", "insert"}}, {"f", {"read", "read_modify_write"}}};
  for (const auto& [w, types] : phases) {
    Outcome r = kv({"ycsb", "--workload", w, "--records", "8000", "--ops", "2000", "--db", db_, "--json",
                path(w + ".json")});
    ASSERT_EQ(r.code, 0) << w << ": " << r.err;
    auto lat = json(w + ".json")["figures"]["latency_us"];
    uint64_t total = 0;
    for (const auto& t : types) {
      ASSERT_TRUE(lat.contains(t)) << "workload " << w << " did no " << t;
      total += lat[t]["count"].get<uint64_t>();
    }
    EXPECT_EQ(total, 2000u) << "workload " << w << " did an op type it should not";
    EXPECT_EQ(json(w + ".json")["figures"]["read_not_found"], 0) << w;
  }
  EXPECT_GT(json("e.json")["figures"]["scanned_rows"].get<uint64_t>(), 0u);

  Outcome v = kv({"verify", "--db", db_}, false);
  EXPECT_EQ(v.code, 0) << v.err;
}

TEST_F(KvBench, DcompOffloadsToTheWorker) {
  Outcome fill = kv({"fill", "--db", db_, "--num", "50000", "--mode", "dcomp", "--drain", "--json", path("d.json")});
  ASSERT_EQ(fill.code, 0) << fill.err;
  auto d = json("d.json");
  auto dc = d["figures"]["dcomp"];
  EXPECT_GE(dc["jobs_in_worker"].get<uint64_t>(), 1u) << dc.dump(1);
  EXPECT_EQ(dc["jobs_failed"], 0) << dc.dump(1);
  EXPECT_EQ(dc["worker_crashed"], false);
  EXPECT_EQ(dc["worker_exit"], "exited with status 0");
  // L0 work stays on the host, and only L1+ work goes to the worker.
  for (const auto& [tag, where] : dc["by_levels"].items()) {
    if (tag.rfind("L0->", 0) == 0) {
      EXPECT_EQ(where["worker"], 0) << tag;
    }
  }
  EXPECT_GT(dc["by_levels"]["L0->L1"]["host"].get<uint64_t>(), 0u);
  EXPECT_GT(d["figures"]["compaction"]["bytes_written_worker"].get<uint64_t>(), 0u);
  EXPECT_GT(d["cpu_ns"]["dpu"].get<uint64_t>(), 0u) << "the worker's CPU time is the dpu CPU";
  EXPECT_EQ(dc["jobs"].size(), dc["jobs_offloaded"].get<size_t>());
  EXPECT_FALSE(fs::exists(db_ + ".dcomp")) << "job directories are removed";

  Outcome v = kv({"verify", "--db", db_, "--expect-keys", "50000"}, false);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
}

// --dpu-speed reaches the worker (its jobs are time-dilated) and the result;
// --dcomp-first-level 0 sends L0->L1 to the worker too; bad knobs exit 2.
TEST_F(KvBench, DcompWorkerRunsAtTheDpuSpeedAndTakesTheLevelsAsked) {
  Outcome fill = kv({"fill", "--db", db_, "--num", "50000", "--mode", "dcomp", "--dpu-speed", "0.5",
                     "--dcomp-first-level", "0", "--drain", "--json", path("s.json")});
  ASSERT_EQ(fill.code, 0) << fill.err;
  auto d = json("s.json");
  EXPECT_EQ(d["placement"]["dpu_speed"]["factor"], 0.5);
  auto dc = d["figures"]["dcomp"];
  EXPECT_EQ(dc["jobs_failed"], 0) << dc.dump(1);
  EXPECT_GT(dc["by_levels"]["L0->L1"]["worker"].get<uint64_t>(), 0u) << dc.dump(1);
  EXPECT_EQ(dc["first_level"], 0);
  uint64_t cpu = dc["worker_job_cpu_ns"], dilated = dc["worker_job_dilated_ns"];
  ASSERT_GT(cpu, dilated);
  EXPECT_GE(double(dilated), 0.95 * double(cpu - dilated)) << "at F = 0.5 a job stays busy as long again";
  Outcome v = kv({"verify", "--db", db_, "--expect-keys", "50000"}, false);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  for (std::vector<std::string> bad : {std::vector<std::string>{"--dcomp-share", "1.5"},
                                       std::vector<std::string>{"--dcomp-first-level", "7"},
                                       std::vector<std::string>{"--dpu-speed", "2"}}) {
    std::vector<std::string> args = {"fill", "--db", db_, "--num", "10", "--mode", "dcomp"};
    args.insert(args.end(), bad.begin(), bad.end());
    Outcome o = kv(args);
    EXPECT_EQ(o.code, 2) << bad[0] << " " << bad[1] << ": " << o.err;
  }
}

// The worker dies (SIGKILL) holding its first job: that compaction runs on
// the host instead of failing, a new worker is started, and the data is
// intact. (kv/tests/dcomp_test.cc checks the new worker's jobs one by one.)
TEST_F(KvBench, DcompWorkerKilledIsRestartedAndItsJobRunsOnTheHost) {
  Outcome fill = kv({"fill", "--db", db_, "--num", "50000", "--mode", "dcomp", "--worker-die-on-job", "1", "--drain",
                 "--json", path("k.json")});
  ASSERT_EQ(fill.code, 0) << fill.err;
  auto dc = json("k.json")["figures"]["dcomp"];
  EXPECT_GE(dc["fell_back"]["worker_lost"].get<uint64_t>(), 1u) << dc.dump(1);
  EXPECT_EQ(dc["worker_crashed"], true);
  EXPECT_EQ(dc["worker_restarts"], 1);
  EXPECT_EQ(dc["worker_exits"][0], "killed by signal 9");
  EXPECT_EQ(dc["worker_exit"], "exited with status 0") << "the second worker ran to the end";
  EXPECT_EQ(json("k.json")["parameters"]["worker_die_on_job"], 1);

  Outcome v = kv({"verify", "--db", db_, "--expect-keys", "50000"}, false);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  // And the database keeps working in dcomp mode with a new worker.
  Outcome ow = kv({"overwrite", "--db", db_, "--num", "20000", "--key-space", "50000", "--mode", "dcomp", "--drain"});
  ASSERT_EQ(ow.code, 0) << ow.err;
  EXPECT_EQ(kv({"verify", "--db", db_, "--expect-keys", "50000"}, false).code, 0);
}

// The worker never answers its first job: after --dcomp-job-timeout that
// compaction runs on the host, and the run ends (`timeout` stops a run that
// would wait forever).
TEST_F(KvBench, DcompHungWorkerIsTimedOut) {
  std::vector<std::string> args = {"300", bin_, "fill", "--db", db_, "--num", "50000", "--mode", "dcomp",
                                   "--worker-hang-on-job", "1", "--dcomp-job-timeout", "2", "--drain",
                                   "--json", path("h.json")};
  args.insert(args.end(), kSmall.begin(), kSmall.end());
  Outcome fill = run("timeout", args);
  ASSERT_EQ(fill.code, 0) << (fill.code == 124 ? "the run hung: " : "") << fill.err;
  auto dc = json("h.json")["figures"]["dcomp"];
  EXPECT_EQ(dc["fell_back"]["timed_out"], 1) << dc.dump(1);
  EXPECT_EQ(dc["worker_restarts"], 1);
  EXPECT_EQ(dc["worker_exits"][0], "killed by signal 9");
  EXPECT_EQ(kv({"verify", "--db", db_, "--expect-keys", "50000"}, false).code, 0);
}

// --fs-uri goes through RocksDB's object registry (here to a FileSystem
// RocksDB itself registers), in the primary and in the dcomp worker.
TEST_F(KvBench, FsUriReachesPrimaryAndWorker) {
  Outcome fill = kv({"fill", "--db", db_, "--num", "30000", "--fs-uri", "CountedFileSystem", "--mode", "dcomp",
                     "--drain", "--json", path("f.json")});
  ASSERT_EQ(fill.code, 0) << fill.err;
  auto f = json("f.json");
  EXPECT_EQ(f["parameters"]["fs_uri"], "CountedFileSystem");
  EXPECT_EQ(f["figures"]["dcomp"]["jobs_failed"], 0);
  EXPECT_EQ(kv({"verify", "--db", db_, "--fs-uri", "CountedFileSystem", "--expect-keys", "30000"}, false).code, 0);
}

TEST_F(KvBench, BadInputExitsTwoWithAMessage) {
  Outcome r = kv({"fill", "--db", db_, "--num", "lots"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--num"), std::string::npos) << r.err;

  r = kv({"ycsb", "--workload", "z", "--db", db_});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown YCSB workload 'z'"), std::string::npos) << r.err;

  r = kv({"fill", "--db", db_, "--mode", "remote"});
  EXPECT_EQ(r.code, 2);

  r = kv({"fill", "--db", db_, "--cpus", "0-x"});
  EXPECT_EQ(r.code, 2);

  r = kv({"fill", "--num", "10"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--db"), std::string::npos) << r.err;

  r = kv({"ycsb", "--workload", "a", "--db", path("nothing-here")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path("nothing-here")), std::string::npos) << r.err;

  r = kv({"verify", "--db", path("nothing-here")}, false);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path("nothing-here")), std::string::npos) << r.err;

  r = kv({"fill", "--db", db_, "--fs-uri", "no-such-fs://x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no-such-fs://x"), std::string::npos) << r.err;
}

// A DB directory RocksDB cannot open is named in the error.
TEST_F(KvBench, OpenFailureNamesTheDirectory) {
  fs::create_directories(db_);
  std::ofstream(fs::path(db_) / "CURRENT") << "MANIFEST-999999\n";  // points at nothing
  Outcome r = kv({"ycsb", "--workload", "c", "--db", db_, "--ops", "10"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot open the RocksDB database in " + db_), std::string::npos) << r.err;
}

}  // namespace
