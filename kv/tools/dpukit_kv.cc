// dpukit-kv: runs the stock db_bench on one kv mode and measures it the way
// PulseDB's evaluation does: write throughput, write latency percentiles,
// write-stall ratio, compaction MB/s, host compaction CPU (the CPU time of the
// host's compaction threads, read per thread from /proc, not RocksDB's
// cpu_micros, which leaves out I/O), and dpu CPU (the agent's).
//
//   vanilla     db_bench as shipped
//   filepool    + the SST file pool, written by the compaction threads
//   async-host  + the write-persist engine in a thread of the host process
//   pulsedb     + the write-persist engine in the agent process (the dpu side)
//   dcomp       whole compactions from L1 down in a worker process (dpukit-kvbench)
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/process.h"
#include "dpukit/core/results.h"
#include "dpukit/core/log.h"
#include "dpukit/core/thread_cpu.h"  // ThreadCpuSampler, KernelCpuSampler
#include "dpukit/kv_agent.h"     // check_pool, release_db_slots
#include "dpukit/kv_settings.h"

namespace fs = std::filesystem;

namespace dpukit::kv {
namespace {

constexpr const char* kTool = "dpukit-kv";

// The other tools and the plugin are built beside this one: <build>/bin, <build>/lib.
fs::path self_dir() { return own_executable().parent_path(); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------- db_bench

struct DbBenchReport {
  double ops_per_sec = 0, mb_per_sec = 0, seconds = 0;
  double compaction_window = 0;  // the seconds the compaction bytes were written in
  double p50 = 0, p99 = 0, p999 = 0, p9999 = 0, avg = 0;
  uint64_t stall_micros = 0, compaction_write_bytes = 0, compaction_read_bytes = 0, operations = 0;
};

uint64_t ticker(const std::string& out, const std::string& name) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex(std::regex_replace(name, std::regex("\\."), "\\.") + " COUNT : (\\d+)")))
    return std::stoull(m[1]);
  return 0;
}

DbBenchReport parse_db_bench(const std::string& out, const std::string& benchmark) {
  DbBenchReport r;
  std::smatch m;
  std::regex line(benchmark + R"(\s+:\s+([\d.]+) micros/op (\d+) ops/sec ([\d.]+) seconds (\d+) operations;\s+([\d.]+) MB/s)");
  if (!std::regex_search(out, m, line))
    throw std::runtime_error("db_bench printed no result line for " + benchmark + " (see its log)");
  r.ops_per_sec = std::stod(m[2]);
  r.seconds = std::stod(m[3]);
  r.operations = std::stoull(m[4]);
  r.mb_per_sec = std::stod(m[5]);
  // The write latency histogram follows the result line ("Microseconds per write").
  std::string after = m.suffix();
  std::regex pct(R"(Count: \d+ Average: ([\d.]+)[\s\S]*?Percentiles: P50: ([\d.]+) P75: [\d.]+ P99: ([\d.]+) P99.9: ([\d.]+) P99.99: ([\d.]+))");
  if (std::regex_search(after, m, pct)) {
    r.avg = std::stod(m[1]);
    r.p50 = std::stod(m[2]);
    r.p99 = std::stod(m[3]);
    r.p999 = std::stod(m[4]);
    r.p9999 = std::stod(m[5]);
  }
  r.stall_micros = ticker(out, "rocksdb.stall.micros");
  r.compaction_write_bytes = ticker(out, "rocksdb.compact.write.bytes");
  r.compaction_read_bytes = ticker(out, "rocksdb.compact.read.bytes");
  r.compaction_window = r.seconds;
  return r;
}

// The same figures from a dpukit-kvbench result; `op` is the measured write
// (insert for fill, update for overwrite).
DbBenchReport kvbench_report(const nlohmann::json& f, const std::string& op) {
  DbBenchReport r;
  r.seconds = f["run_seconds"].get<double>();
  r.operations = f["ops"].get<uint64_t>();
  r.ops_per_sec = f["throughput_ops_per_s"].get<double>();
  r.mb_per_sec = f["user_bytes_written"].get<double>() / 1048576.0 / std::max(r.seconds, 1e-9);
  const auto& lat = f["latency_us"][op];
  r.avg = lat["avg"].get<double>();
  r.p50 = lat["p50"].get<double>();
  r.p99 = lat["p99"].get<double>();
  r.p999 = lat["p99_9"].get<double>();
  r.stall_micros = f["write_stall_micros"].get<uint64_t>();
  r.compaction_write_bytes = f["compaction"]["bytes_written"].get<uint64_t>();
  r.compaction_read_bytes = f["compaction"]["bytes_read_host"].get<uint64_t>() + f["compaction"]["bytes_read_worker"].get<uint64_t>();
  // --drain: compaction goes on after the writes, until the DB is closed.
  r.compaction_window = r.seconds + f["drain_seconds"].get<double>() + f["close_seconds"].get<double>();
  return r;
}

struct Settings {
  std::string mode, driver, workload, db, pool, sock, host_cpus, dpu_cpus, payload;
  DpuSpeed dpu_speed;        // the agent's and the dcomp worker's
  std::string dcomp_share;   // dcomp: the fraction of eligible compactions sent to the worker
  int dcomp_first_level = 1;  // dcomp: compactions from this level down are eligible
  RocksDbSettings rocksdb;    // the paper's, sized by the flags
  uint64_t num, queue;
  int threads, jobs;          // jobs: compaction threads; one flush thread besides
  uint64_t write_threshold, sync_interval;
};

std::string fs_uri(const Settings& s) {
  std::string q = "?write_threshold:" + std::to_string(s.write_threshold) + "&sync_interval:" +
                  std::to_string(s.sync_interval) + "&queue:" + std::to_string(s.queue);
  if (s.mode == "pulsedb") return "pulsedb://" + s.sock + q + "&payload:" + s.payload;
  if (s.mode == "async-host") return "pulsedb-async://" + s.pool + q;
  if (s.mode == "filepool") return "pulsedb-filepool://" + s.pool;
  return "";
}

std::vector<std::string> db_bench_args(const Settings& s, const std::string& benchmark, bool existing) {
  std::vector<std::string> a = {
      "db_bench",
      "--benchmarks=" + benchmark,
      "--db=" + s.db,
      "--use_existing_db=" + std::string(existing ? "1" : "0"),
      "--num=" + std::to_string(s.num),
  };
  const std::vector<std::string> settings = db_bench_flags(s.rocksdb);
  a.insert(a.end(), settings.begin(), settings.end());
  a.insert(a.end(), {"--threads=" + std::to_string(s.threads), "--seed=1", "--statistics", "--histogram"});
  if (auto uri = fs_uri(s); !uri.empty()) a.push_back("--fs_uri=" + uri);
  return a;
}

// dpukit-kvbench fill (every key once) or overwrite, with the same settings;
// --drain so that each mode ends with the same compaction work done.
// `command` is fill, overwrite, or ycsb:PHASE (load, a..f: the YCSB core
// workloads on --num records, each run phase --num operations).
std::vector<std::string> kvbench_args(const Settings& s, const std::string& command, const std::string& json) {
  const std::string records = std::to_string(s.num * s.threads);
  std::vector<std::string> a = {(self_dir() / "dpukit-kvbench").string()};
  if (command.rfind("ycsb:", 0) == 0) {
    a.insert(a.end(), {"ycsb", "--workload=" + command.substr(5), "--records=" + records, "--ops=" + records});
  } else {
    a.insert(a.end(), {command, "--num=" + records});
  }
  a.insert(a.end(), {
                                "--db=" + s.db,
                                "--value-size=" + std::to_string(s.rocksdb.value_size),
                                "--write-buffer-size=" + std::to_string(s.rocksdb.write_buffer_size),
                                "--target-file-size=" + std::to_string(s.rocksdb.target_file_size),
                                "--max-bytes-for-level-base=" + std::to_string(s.rocksdb.max_bytes_for_level_base),
                                "--max-background-jobs=" + std::to_string(s.rocksdb.max_background_jobs),
                                "--l0-slowdown=" + std::to_string(s.rocksdb.l0_slowdown),
                                "--l0-stop=" + std::to_string(s.rocksdb.l0_stop),
                                "--file-buffer=" + std::to_string(s.rocksdb.file_buffer),
                                "--cache-size=" + std::to_string(s.rocksdb.cache_size),
                                "--threads=" + std::to_string(s.threads),
                                "--cpus=" + s.host_cpus,
                                "--drain",
                                "--json=" + json});
  if (auto uri = fs_uri(s); !uri.empty()) a.push_back("--fs-uri=" + uri);
  a.push_back("--dpu-speed=" + s.dpu_speed.name);
  if (s.mode == "dcomp") {
    a.push_back("--mode=dcomp");
    a.push_back("--worker-cpus=" + s.dpu_cpus);
    a.push_back("--dcomp-first-level=" + std::to_string(s.dcomp_first_level));
    a.push_back("--dcomp-share=" + s.dcomp_share);
  }
  return a;
}

// The agent's CPU time so far by place (dpu; hw: its DMA threads), from the
// result it writes (dpukit.result/1).
struct AgentCpu {
  double dpu = 0, hw = 0;
};
AgentCpu agent_cpu(const nlohmann::json& result) {
  const auto& c = result["cpu_ns"];
  return {c["dpu"].get<uint64_t>() / 1e9, c.value("hw", uint64_t{0}) / 1e9};
}

void declare_bench_options(ArgParser& p) {
  p.option("mode", "vanilla, filepool, async-host, pulsedb or dcomp", "pulsedb");
  p.option("driver", "db_bench (the stock one) or kvbench (dpukit-kvbench fill/overwrite --drain; dcomp needs it)",
           "db_bench");
  p.option("workload", "fillrandom, overwrite, or ycsb (load, then A-F on it; --driver kvbench)", "fillrandom");
  p.option("value-size", "value bytes (keys are 16 bytes)", "1024");
  p.option("data", "bytes of key-value data written (sets --num)", "1G");
  p.option("threads", "db_bench writer threads", "2");
  p.option("compaction-threads", "max concurrent compactions (the paper: 4)", "4");
  p.option("write-buffer", "memtable size", "64M").option("target-file", "SST target size", "64M");
  p.option("level-base", "L1 size", "256M").option("cache", "block cache", "256M");
  p.option("write-threshold", "pulsedb/async-host: bytes per write request", "4M");
  p.option("queue", "pulsedb/async-host: payload bytes of each queue pair's request ring (a power of two)", "32M");
  p.option("l0-slowdown", "L0 files at which RocksDB slows writes (its default)", "20");
  p.option("l0-stop", "L0 files at which RocksDB stops writes (its default)", "36");
  p.option("file-buffer",
           "RocksDB's writable_file_max_buffer_size: bytes an SST writer gathers per Append, so per pull on\n"
           "the DMA path (RocksDB's default)",
           "1M");
  p.option("sync-interval", "pulsedb/async-host: bytes per range_sync", "1M");
  p.option("payload",
           "pulsedb: copy (through the ring; the default, chosen by measurement: docs/kv.md) or pull (the agent\n"
           "reads RocksDB's buffers: the DMA path)",
           "copy");
  p.option("slots", "pool slots", "0").cpus_option("host-cpus", "CPUs of db_bench (the host)", "0");
  p.cpus_option("dpu-cpus", "CPUs of the agent / dcomp worker (the dpu)", "1");
  p.dpu_speed_option();
  p.option("dcomp-first-level", "dcomp: compactions starting at this level or deeper go to the worker (1: DComp's; "
           "0: L0->L1 too)", "1");
  p.option("dcomp-share", "dcomp: the fraction of those sent to the worker, spread evenly (the rest on the host)",
           "1");
  p.option("work-dir", "where the DB and the logs go (emptied first)", "build/kv-run");
  p.option("pool-dir", "where the SST pools are kept across runs, one per geometry (slots x slot size: several GB\n"
                       "at the default scale, written out once; remove the directory when done) (default: kv-pools\n"
                       "beside --work-dir)");
  p.flag("keep", "keep the DB afterwards (by default only the logs and stats stay, and the DB's pool slots are\n"
                 "freed for the next run)");
  p.option("json", "write the result here");
}

// The settings the flags give, checked; the paths and the driver are set
// after the work directory is made.
Settings bench_settings(const ArgParser& p) {
  Settings s;
  s.mode = p.str("mode");
  s.workload = p.str("workload");
  if (s.mode != "vanilla" && s.mode != "filepool" && s.mode != "async-host" && s.mode != "pulsedb" && s.mode != "dcomp")
    throw InputError("--mode: '" + s.mode + "' is not vanilla, filepool, async-host, pulsedb or dcomp");
  if (s.workload != "fillrandom" && s.workload != "overwrite" && s.workload != "ycsb")
    throw InputError("--workload: '" + s.workload + "' is not fillrandom, overwrite or ycsb");
  RocksDbSettings& rdb = s.rocksdb;
  rdb.value_size = p.bytes("value-size");
  s.threads = static_cast<int>(p.u64("threads"));
  if (s.threads < 1) throw InputError("--threads must be at least 1");
  // db_bench's --num is per writer thread.
  s.num = std::max<uint64_t>(1, p.bytes("data") / (RocksDbSettings::kKeySize + rdb.value_size) / s.threads);
  s.jobs = static_cast<int>(p.u64("compaction-threads"));
  rdb.max_background_jobs = s.jobs + 1;
  rdb.write_buffer_size = p.bytes("write-buffer");
  rdb.target_file_size = p.bytes("target-file");
  rdb.max_bytes_for_level_base = p.bytes("level-base");
  rdb.cache_size = p.bytes("cache");
  s.write_threshold = p.bytes("write-threshold");
  s.sync_interval = p.bytes("sync-interval");
  s.queue = p.bytes("queue");
  rdb.l0_slowdown = static_cast<int>(p.u64("l0-slowdown"));
  rdb.l0_stop = static_cast<int>(p.u64("l0-stop"));
  rdb.file_buffer = p.bytes("file-buffer");
  if (rdb.file_buffer < 4096 || rdb.file_buffer > (256u << 20))
    throw InputError("--file-buffer must be between 4K and 256M");
  if (rdb.l0_slowdown < 1 || rdb.l0_stop < rdb.l0_slowdown) throw InputError("want 1 <= --l0-slowdown <= --l0-stop");
  s.payload = p.str("payload");
  if (s.payload != "pull" && s.payload != "copy") throw InputError("--payload: '" + s.payload + "' is not pull or copy");
  s.host_cpus = p.str("host-cpus");
  s.dpu_cpus = p.str("dpu-cpus");
  s.dpu_speed = p.dpu_speed();
  s.dcomp_first_level = static_cast<int>(p.u64("dcomp-first-level"));
  if (s.dcomp_first_level > 6) throw InputError("--dcomp-first-level must be between 0 and 6");
  s.dcomp_share = p.str("dcomp-share");
  if (double share = p.number("dcomp-share"); !(share >= 0 && share <= 1))
    throw InputError("--dcomp-share must be a fraction in [0, 1]");
  if (s.mode != "dcomp" && (p.has("dcomp-first-level") || p.has("dcomp-share")))
    throw InputError("--dcomp-first-level and --dcomp-share are for --mode dcomp");
  return s;
}

// --driver, checked against the mode and the workload.
std::string bench_driver(const ArgParser& p, const Settings& s) {
  std::string driver = p.str("driver");
  if (driver != "db_bench" && driver != "kvbench") throw InputError("--driver: '" + driver + "' is not db_bench or kvbench");
  if (s.workload == "ycsb" && driver != "kvbench") throw InputError("--workload ycsb needs --driver kvbench");
  if (s.mode == "dcomp" && driver != "kvbench")
    throw InputError("--mode dcomp needs --driver kvbench: db_bench cannot install a CompactionService");
  return driver;
}

// The pool a run writes its SST files into (filepool, async-host, pulsedb):
// one per geometry and layout under --pool-dir, kept across runs, since
// making one writes every slot out (docs/kv.md, "What it costs"). A run
// whose shared pool is held by another run, or has slots that are not free
// (a run killed before it freed them: `dpukit-agent pool check` says what),
// makes one of its own in its work directory instead, and says so.
struct RunPool {
  std::string dir;      // empty: the mode has no pool
  bool written_out = true;  // the layout (filepool's slots are empty)
  bool shared = false;  // under --pool-dir, kept; else the run's own, removed
  bool reused = false;  // it was there before this run
};

bool uses_pool(const std::string& mode) { return mode == "filepool" || mode == "async-host" || mode == "pulsedb"; }

std::string pool_name(uint64_t slots, uint64_t slot_bytes, bool written_out) {
  return std::to_string(slots) + "x" + std::to_string(slot_bytes) + (written_out ? "" : "-empty");
}

// A DB left in `work` by an earlier run (--keep, or killed) gives its pool
// slots back first: wiping the directory instead would leave them to the
// pool's quarantine (their owners' directory gone).
void free_earlier_db(const fs::path& pools, const fs::path& work) {
  std::error_code ec;
  if (!fs::is_directory(work / "db", ec) || !fs::is_directory(pools, ec)) return;
  for (const auto& e : fs::directory_iterator(pools, ec)) {
    if (!fs::exists(e.path() / "pool.index")) continue;
    const bool written_out = e.path().filename().string().find("-empty") == std::string::npos;
    try {
      if (size_t n = release_db_slots(e.path().string(), (work / "db").string(), written_out))
        log_info("freed " + std::to_string(n) + " slots of " + e.path().string() + " held by an earlier run's DB");
    } catch (const std::exception& ex) {
      log_warn(std::string("cannot free an earlier run's slots: ") + ex.what());
    }
  }
}

RunPool choose_pool(const Settings& s, const fs::path& pools, const fs::path& work, uint64_t slots,
                    uint64_t slot_bytes) {
  RunPool r;
  if (!uses_pool(s.mode)) return r;
  r.written_out = s.mode != "filepool";
  const fs::path shared = pools / pool_name(slots, slot_bytes, r.written_out);
  std::error_code ec;
  std::string why_not;
  if (fs::exists(shared / "pool.index", ec)) {
    PoolCheck c = check_pool(shared.string());
    size_t not_free = 0;
    for (const auto& rep : c.reports) not_free += rep.verdict != PoolCheck::Verdict::kFree;
    if (!c.usable) why_not = c.problem;
    else if (c.in_use) why_not = "it is held by another run";
    else if (not_free > 0)
      why_not = std::to_string(not_free) + " of its slots are not free (`dpukit-agent pool check --pool " +
                shared.string() + "` says why)";
    r.reused = why_not.empty();
  } else if (fs::exists(shared, ec) && !fs::exists(shared / "pool.index.tmp", ec) && !fs::is_empty(shared, ec)) {
    why_not = "it holds files but no pool.index";
  }
  if (why_not.empty()) {
    fs::create_directories(pools);
    r.dir = shared.string();
    r.shared = true;
    log_info("pool " + r.dir + (r.reused ? ": reused" : ": made for this geometry, kept for the next runs"));
    return r;
  }
  r.dir = (work / "pool").string();
  log_warn("pool " + shared.string() + " cannot be shared: " + why_not + "; this run makes its own at " + r.dir);
  return r;
}

// The DB goes, whatever happens, unless --keep; so do its pool slots (freed
// for the next run), or the run's own pool.
struct RunFilesCleanup {
  const Settings& s;
  const RunPool& pool;
  bool keep;
  ~RunFilesCleanup() {
    if (keep) return;
    std::error_code ec;
    if (pool.shared) {
      try {
        release_db_slots(pool.dir, s.db, pool.written_out);
      } catch (const std::exception& e) {
        log_warn(std::string("cannot free the run's pool slots: ") + e.what());
      }
    } else if (!pool.dir.empty()) {
      fs::remove_all(pool.dir, ec);
    }
    fs::remove_all(s.db, ec);
    fs::remove_all(s.db + ".dcomp", ec);
  }
};

// --slots, or by default enough for the live SSTs of the data set plus
// compaction's outputs in flight.
uint64_t pool_slots(const ArgParser& p, const RocksDbSettings& rdb) {
  uint64_t slots = p.bytes("slots");
  if (slots == 0) {
    uint64_t live = p.bytes("data") * 2 / rdb.target_file_size + 16;
    slots = std::max<uint64_t>(32, live);
  }
  return slots;
}

// Host compaction CPU by thread group: "compaction" (RocksDB's compaction
// threads) and "plugin" (the plugin's own: the completion reaper; in
// async-host the write-persist engine), which do compaction's I/O work on
// the host.
using Cpu = std::map<std::string, uint64_t>;

// One bench run's processes: the agent (pulsedb: the dpu side) and the
// driver's runs, with the environment that loads the plugin (every mode but
// vanilla).
class BenchRun {
 public:
  BenchRun(const Settings& s, const fs::path& work, uint64_t slots, const std::string& slot_size)
      : agent_stats((work / "agent-stats.json").string()),
        plugin_stats((work / "plugin-stats.json").string()),
        s_(s),
        work_(work) {
    if (s.mode != "vanilla") {
      std::string plugin = (self_dir().parent_path() / "lib" / "libdpukit_kv.so").string();
      if (!fs::exists(plugin)) throw std::runtime_error("no " + plugin + ": build the kv plugin first");
      env_["LD_PRELOAD"] = plugin;
      env_["DPUKIT_KV_STATS"] = plugin_stats;
      env_["DPUKIT_KV_SLOTS"] = std::to_string(slots);
      env_["DPUKIT_KV_SLOT_SIZE"] = slot_size;
    }
    if (s.mode == "pulsedb") start_agent(slots, slot_size);
  }

  void stop_agent() {
    if (!agent_.running()) return;
    agent_.kill(SIGTERM);
    agent_.wait();
  }

  // The agent's CPU time so far, read from the stats it writes on SIGUSR1
  // (for overwrite, the fill phase's share is taken off).
  AgentCpu agent_reading() {
    if (agent_.pid() <= 0) return AgentCpu{};
    fs::remove(agent_stats);
    agent_.kill(SIGUSR1);
    for (int i = 0; i < 200 && !fs::exists(agent_stats); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return agent_cpu(read_result(agent_stats));
  }

  // The stock db_bench, pinned to the host's CPUs; returns its CPU time and
  // puts its compaction threads' in `cpu`.
  uint64_t run_db_bench(const std::string& benchmark, bool existing, const std::string& log, Cpu* cpu) {
    SpawnOptions o;
    o.cpus = CpuSet::parse(s_.host_cpus);
    o.log = log;
    o.env = env_;
    ChildProcess c = ChildProcess::spawn(db_bench_args(s_, benchmark, existing), o);
    ThreadCpuSampler sampler({{"compaction", "rocksdb:low"}, {"plugin", "pulsedb:"}}, 50, c.pid());
    sampler.start();
    while (c.running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sampler.stop();
    if (cpu) *cpu = sampler.cpu_ns();
    if (!c.succeeded()) {
      stop_agent();
      throw std::runtime_error("db_bench " + benchmark + " failed (" + c.exit_text() + "); log " + log);
    }
    return c.cpu_ns();
  }

  // dpukit-kvbench `command` (see kvbench_args); returns its result.
  nlohmann::json run_kvbench(const std::string& command) {
    std::string name = command.rfind("ycsb:", 0) == 0 ? "ycsb-" + command.substr(5) : command;
    std::string json = (work_ / (name + ".json")).string(), log = (work_ / (name + ".log")).string();
    SpawnOptions o;
    o.log = log;
    o.env = env_;
    ChildProcess c = ChildProcess::spawn(kvbench_args(s_, command, json), o);
    c.wait();
    if (!c.succeeded())
      throw std::runtime_error("dpukit-kvbench " + command + " failed (" + c.exit_text() + "); log " + log);
    return read_result(json);
  }

  const std::string agent_stats, plugin_stats;

 private:
  void start_agent(uint64_t slots, const std::string& slot_size) {
    SpawnOptions o;
    o.cpus = CpuSet::parse(s_.dpu_cpus);
    o.log = (work_ / "agent.log").string();
    agent_ = ChildProcess::spawn({(self_dir() / "dpukit-agent").string(), "--listen", s_.sock, "--pool", s_.pool,
                                  "--slots", std::to_string(slots), "--slot-size", slot_size, "--stats", agent_stats,
                                  "--cpus", s_.dpu_cpus, "--dpu-speed", s_.dpu_speed.name},
                                 o);
    // Up to 5 minutes: the agent listens once its pool is made, and making
    // one writes its slots out (about 7 s for 64 slots of 72 MiB here).
    for (int i = 0; i < 30000 && !fs::exists(s_.sock); ++i) {
      if (!agent_.running()) throw std::runtime_error("the agent exited at start: " + slurp(o.log));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!fs::exists(s_.sock)) {
      agent_.kill(SIGTERM);
      agent_.wait();
      throw std::runtime_error("the agent did not listen on " + s_.sock + " within 5 minutes: " + slurp(o.log));
    }
  }

  const Settings& s_;
  const fs::path work_;
  std::map<std::string, std::string> env_;
  ChildProcess agent_;
};

// What the measured phase gave, whichever driver ran it.
struct Measured {
  DbBenchReport r;
  Cpu low;
  double host_cpu_s = 0, worker_cpu_s = 0;
  AgentCpu agent_cpu0;  // the agent's CPU time before the phase (overwrite: the fill's)
  std::chrono::steady_clock::time_point t0;
};

// The stock db_bench: the workload, after an unmeasured fill for overwrite.
Measured measure_db_bench(BenchRun& run, const Settings& s, const fs::path& work, KernelCpuSampler& kernel) {
  Measured m;
  if (s.workload == "overwrite") {  // an existing DB to overwrite: filled first, not measured
    run.run_db_bench("fillrandom", false, (work / "fill.log").string(), nullptr);
    m.agent_cpu0 = run.agent_reading();
  }
  std::string log = (work / (s.workload + ".log")).string();
  m.t0 = std::chrono::steady_clock::now();
  kernel.start();
  m.host_cpu_s = run.run_db_bench(s.workload, s.workload == "overwrite", log, &m.low) / 1e9;
  kernel.stop();
  m.r = parse_db_bench(slurp(log), s.workload);
  return m;
}

// The CPU time one dpukit-kvbench phase reports, added to the phase's.
void add_kvbench_cpu(Measured& m, const nlohmann::json& kf) {
  uint64_t plugin = kf["compaction"]["host_plugin_cpu_ns"].get<uint64_t>();
  m.low["compaction"] += kf["compaction"]["host_cpu_ns"].get<uint64_t>() - plugin;
  m.low["plugin"] += plugin;
  m.host_cpu_s += kf["host_process_cpu_ns"].get<double>() / 1e9;
  m.worker_cpu_s += kf["dpu_cpu_ns"].get<double>() / 1e9;
}

// YCSB: load, then A-F on what it loaded; the load's write figures lead,
// every phase's throughput and main latency are listed.
void measure_ycsb(BenchRun& run, Measured& m, Result& result) {
  nlohmann::json phases = nlohmann::json::object();
  for (const char* phase : {"load", "a", "b", "c", "d", "e", "f"}) {
    auto kf = run.run_kvbench(std::string("ycsb:") + phase)["figures"];
    add_kvbench_cpu(m, kf);
    if (std::string(phase) == "load") m.r = kvbench_report(kf, "insert");
    nlohmann::json lat = nlohmann::json::object();
    for (auto& [op, l] : kf["latency_us"].items()) lat[op] = {{"p50", l["p50"]}, {"p99", l["p99"]}};
    phases[phase] = {{"ops_per_sec", kf["throughput_ops_per_s"]}, {"latency_us", lat},
                     {"stall_ratio", kf["write_stall_ratio"]}};
  }
  result.figures()["ycsb"] = phases;
}

// dpukit-kvbench: fill, overwrite (after an unmeasured fill) or YCSB.
Measured measure_kvbench(BenchRun& run, const Settings& s, KernelCpuSampler& kernel, Result& result) {
  Measured m;
  if (s.workload == "overwrite") {
    run.run_kvbench("fill");
    m.agent_cpu0 = run.agent_reading();
  }
  m.t0 = std::chrono::steady_clock::now();
  kernel.start();
  if (s.workload == "ycsb") {
    measure_ycsb(run, m, result);
  } else {
    auto kf = run.run_kvbench(s.workload == "overwrite" ? "overwrite" : "fill")["figures"];
    m.r = kvbench_report(kf, s.workload == "overwrite" ? "update" : "insert");
    add_kvbench_cpu(m, kf);
    if (kf.contains("dcomp")) result.figures()["dcomp"] = kf["dcomp"];
    // Compaction output written by the dcomp worker (the dpu): Fig. 4a's share.
    result.figures()["compaction_write_bytes_dpu"] = kf["compaction"]["bytes_written_worker"];
  }
  kernel.stop();
  return m;
}

// The write figures: throughput, latency, stalls, compaction, host CPU.
void write_measured_figures(nlohmann::json& f, const Settings& s, Measured& m, double wall) {
  const DbBenchReport& r = m.r;
  f["mode"] = s.mode;
  f["workload"] = s.workload;
  f["value_size"] = s.rocksdb.value_size;
  f["operations"] = r.operations;
  f["ops_per_sec"] = r.ops_per_sec;
  f["mb_per_sec"] = r.mb_per_sec;
  f["seconds"] = r.seconds;
  f["write_avg_us"] = r.avg;
  f["write_p50_us"] = r.p50;
  f["write_p99_us"] = r.p99;
  f["write_p999_us"] = r.p999;
  f["write_p9999_us"] = r.p9999;
  f["stall_micros"] = r.stall_micros;
  f["stall_ratio"] = r.seconds > 0 ? r.stall_micros / 1e6 / (r.seconds * s.threads) : 0;
  f["compaction_write_bytes"] = r.compaction_write_bytes;
  f["compaction_read_bytes"] = r.compaction_read_bytes;
  f["compaction_mb_per_sec"] =
      r.compaction_window > 0 ? r.compaction_write_bytes / 1048576.0 / r.compaction_window : 0;
  f["host_compaction_cpu_s"] = (m.low["compaction"] + m.low["plugin"]) / 1e9;
  f["host_rocksdb_compaction_cpu_s"] = m.low["compaction"] / 1e9;
  f["host_plugin_cpu_s"] = m.low["plugin"] / 1e9;
  f["host_cpu_s"] = m.host_cpu_s;
  f["driver"] = s.driver;
  f["wall_s"] = wall;
}

// The dpu side's CPU time over the phase: the agent's (its stats, less
// what it had before the phase), or the dcomp worker's.
AgentCpu dpu_cpu_figures(nlohmann::json& f, const BenchRun& run, const Measured& m) {
  AgentCpu dpu{m.worker_cpu_s, 0};
  if (fs::exists(run.agent_stats)) {
    nlohmann::json ag = read_result(run.agent_stats);
    f["agent"] = ag["figures"];
    const AgentCpu a = agent_cpu(ag);
    dpu = {a.dpu - m.agent_cpu0.dpu, a.hw - m.agent_cpu0.hw};
  }
  f["dpu_cpu_s"] = dpu.dpu;
  f["hw_cpu_s"] = dpu.hw;
  return dpu;
}

// Whole-host CPU: the host process tree, the kernel threads' I/O work (all
// of it charged to the host: writeback, journal and reclaim are woken by
// the host's and the agent's writes alike) and the interrupt time on the
// host's CPUs. The dpu side: the agent (or dcomp worker) and the interrupt
// time on its CPUs.
void whole_cpu_figures(nlohmann::json& f, const KernelCpuSampler& kernel, const Placement& placement, Measured& m,
                       const AgentCpu& dpu) {
  auto kt = kernel.threads_ns();
  const IrqTimes on_host = kernel.irq_ns(placement.host), on_dpu = kernel.irq_ns(placement.dpu);
  const double kernel_io = (kt["kworker"] + kt["ksoftirqd"] + kt["jbd2"] + kt["kswapd"]) / 1e9;
  const double irq_host = (on_host.irq_ns + on_host.softirq_ns) / 1e9;
  const double irq_dpu = (on_dpu.irq_ns + on_dpu.softirq_ns) / 1e9;
  f["kernel_cpu_s"] = {{"kworker", kt["kworker"] / 1e9},     {"ksoftirqd", kt["ksoftirqd"] / 1e9},
                       {"jbd2", kt["jbd2"] / 1e9},           {"kswapd", kt["kswapd"] / 1e9},
                       {"other_threads", kt["other"] / 1e9}, {"irq_host_cpus", on_host.irq_ns / 1e9},
                       {"softirq_host_cpus", on_host.softirq_ns / 1e9},
                       {"irq_dpu_cpus", on_dpu.irq_ns / 1e9},
                       {"softirq_dpu_cpus", on_dpu.softirq_ns / 1e9}};
  f["host_whole_cpu_s"] = m.host_cpu_s + kernel_io + irq_host;
  f["host_whole_compaction_cpu_s"] = (m.low["compaction"] + m.low["plugin"]) / 1e9 + kernel_io + irq_host;
  f["dpu_whole_cpu_s"] = dpu.dpu + dpu.hw + irq_dpu;
}

void write_bench_parameters(nlohmann::json& prm, const Settings& s, uint64_t slots) {
  const RocksDbSettings& rdb = s.rocksdb;
  prm["num"] = s.num;
  prm["threads"] = s.threads;
  prm["compaction_threads"] = s.jobs;
  prm["write_buffer"] = rdb.write_buffer_size;
  prm["target_file"] = rdb.target_file_size;
  prm["level_base"] = rdb.max_bytes_for_level_base;
  prm["cache"] = rdb.cache_size;
  prm["write_threshold"] = s.write_threshold;
  prm["sync_interval"] = s.sync_interval;
  prm["queue"] = s.queue;
  prm["l0_slowdown"] = rdb.l0_slowdown;
  prm["l0_stop"] = rdb.l0_stop;
  if (s.mode == "pulsedb") prm["payload"] = s.payload;
  if (s.mode == "dcomp") {
    prm["dcomp_first_level"] = s.dcomp_first_level;
    prm["dcomp_share"] = std::stod(s.dcomp_share);
  }
  prm["slots"] = slots;
}

void print_bench_summary(Result& result, const Settings& s) {
  std::printf("%s %s value=%llu, dpu %s: %.0f ops/s, %.1f MB/s, P99 %.0f us, P99.9 %.0f us, stall %.1f %%, compaction %.1f MB/s, "
              "host compaction CPU %.2f s (whole-host %.2f s), dpu CPU %.2f s, hw CPU %.2f s\n",
              s.mode.c_str(), s.workload.c_str(), static_cast<unsigned long long>(s.rocksdb.value_size),
              s.dpu_speed.name.c_str(), result.figures()["ops_per_sec"].get<double>(), result.figures()["mb_per_sec"].get<double>(),
              result.figures()["write_p99_us"].get<double>(),
              result.figures()["write_p999_us"].get<double>(), 100 * result.figures()["stall_ratio"].get<double>(),
              result.figures()["compaction_mb_per_sec"].get<double>(),
              result.figures()["host_compaction_cpu_s"].get<double>(),
              result.figures()["host_whole_compaction_cpu_s"].get<double>(), result.figures()["dpu_cpu_s"].get<double>(),
              result.figures()["hw_cpu_s"].get<double>());
}

int bench_command(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " bench",
              "Runs the stock db_bench (fillrandom, or overwrite on a DB it fills first) on one kv mode, with\n"
              "the host side pinned to --host-cpus and the agent to --dpu-cpus, and writes the measured figures.\n"
              "RocksDB settings: the paper's (64 MB memtable and SST target, 256 MB L1, fan-out 10, 7 levels,\n"
              "bloom 10 bits/key, no compression, direct reads, 4 compaction threads) with the block cache and\n"
              "the data scaled to this machine.");
  declare_bench_options(p);
  p.parse(argc, argv, 2);

  Settings s = bench_settings(p);
  const RocksDbSettings& rdb = s.rocksdb;
  fs::path work = fs::absolute(p.str("work-dir")).lexically_normal();
  if (work.filename().empty()) work = work.parent_path();
  const fs::path pools = p.has("pool-dir") ? fs::absolute(p.str("pool-dir")) : work.parent_path() / "kv-pools";
  free_earlier_db(pools, work);
  fs::remove_all(work);
  fs::create_directories(work);
  Placement placement = Placement::plan(s.host_cpus, s.dpu_cpus);
  const uint64_t slots = pool_slots(p, rdb);
  const uint64_t slot_bytes = rdb.target_file_size + rdb.target_file_size / 8 + (1 << 20);
  const std::string slot_size = std::to_string(slot_bytes);
  s.db = (work / "db").string();
  s.sock = (work / "agent.sock").string();
  const RunPool pool = choose_pool(s, pools, work, slots, slot_bytes);
  s.pool = pool.dir;
  RunFilesCleanup cleanup{s, pool, p.has("keep")};

  Result result(kTool, argc, argv);
  result.set_placement(placement);
  result.set_dpu_speed(s.dpu_speed);
  result.set_backend("emulated");
  s.driver = bench_driver(p, s);

  BenchRun run(s, work, slots, slot_size);
  try {
    // The kernel's share over the measured phase (docs/kv.md, "Where the CPU
    // time goes").
    KernelCpuSampler kernel(100);
    Measured m = s.driver == "db_bench" ? measure_db_bench(run, s, work, kernel)
                                        : measure_kvbench(run, s, kernel, result);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.t0).count();
    run.stop_agent();

    auto& f = result.figures();
    write_measured_figures(f, s, m, wall);
    const AgentCpu dpu = dpu_cpu_figures(f, run, m);
    whole_cpu_figures(f, kernel, placement, m, dpu);
    if (fs::exists(run.plugin_stats)) f["plugin"] = read_result(run.plugin_stats)["figures"];
    write_bench_parameters(result.parameters(), s, slots);
    result.parameters()["pool_reused"] = pool.reused;  // false: made for this run (its slots written out first)
    CpuAccount cpu;
    cpu.add(Place::kHost, static_cast<uint64_t>(m.host_cpu_s * 1e9));
    cpu.add(Place::kDpu, static_cast<uint64_t>(dpu.dpu * 1e9));
    cpu.add(Place::kHw, static_cast<uint64_t>(dpu.hw * 1e9));
    result.set_cpu(cpu);
    result.set_wall_ns(static_cast<uint64_t>(wall * 1e9));
  } catch (...) {
    run.stop_agent();
    throw;
  }
  print_bench_summary(result, s);
  if (p.has("json")) result.write(p.str("json"));
  return 0;
}

}  // namespace
}  // namespace dpukit::kv

int main(int argc, char** argv) {
  using namespace dpukit;
  static const Subcommand commands[] = {
      {"bench", kv::bench_command, "db_bench (or dpukit-kvbench) fillrandom/overwrite on one mode, measured: host/dpu CPU, latency, stalls"},
  };
  return run_subcommands(kv::kTool, "dpukit kv: PulseDB on RocksDB 7.8.3 — benchmarks", commands, argc, argv);
}
