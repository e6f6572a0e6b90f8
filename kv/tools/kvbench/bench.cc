#include "bench.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/statistics.h>

#include "dcomp_cli.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "dpukit/core/random.h"
#include "dpukit/core/results.h"
#include "dpukit/core/thread_cpu.h"
#include "options.h"

namespace dpukit::kv::bench {

namespace {

struct alignas(64) Counter {
  std::atomic<uint64_t> n{0};
};

// What the client threads share.
struct Clients {
  const PhaseSpec& spec;
  rocksdb::DB& db;
  InsertSequence inserts;
  std::optional<Zipfian> ranks;   // scrambled zipfian: ranks over ScrambledZipfian::kItemSpace
  std::optional<Zipfian> latest;  // latest: over the records that exist at the start
  uint64_t zipf_space = 0;        // scrambled zipfian maps ranks onto [0, zipf_space)
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string error;
  std::vector<Counter> done;

  Clients(const PhaseSpec& s, rocksdb::DB& d) : spec(s), db(d), inserts(s.records), done(s.threads) {}

  void fail(const rocksdb::Status& s, const char* what, uint64_t record) {
    std::lock_guard lk(mu);
    if (error.empty()) error = std::string(what) + " of record " + std::to_string(record) + " (key " +
                               key_of(record) + "): " + s.ToString();
    stop = true;
  }
};

void client(Clients& c, unsigned t, PhaseResult& out) {
  pthread_setname_np(pthread_self(), "kvbench-client");
  const PhaseSpec& spec = c.spec;
  const Workload& w = spec.workload;
  // Each thread has its own stream, so a run is reproducible from --seed for
  // a given thread count.
  uint64_t phase_tag = 0;
  for (char ch : spec.command + "/" + w.name) phase_tag = mix64(phase_tag ^ uint8_t(ch));  // same on every platform
  SplitMix64 rng(mix64(spec.seed) ^ mix64(0x100 + t) ^ phase_tag);
  rocksdb::WriteOptions wo;
  rocksdb::ReadOptions ro;
  std::string value, got;
  char kbuf[kKeySize];
  rocksdb::Slice key(kbuf, kKeySize);
  auto timed = [&](OpType type, auto&& op) {
    uint64_t t0 = now_ns();
    op();
    out.latency[int(type)].record(now_ns() - t0);
    c.done[t].n.fetch_add(1, std::memory_order_relaxed);
  };
  // Keys and values are made before an operation's clock starts: latency is
  // RocksDB's, not the generator's.
  auto prepare = [&](uint64_t r, uint64_t gen) {
    key_of(r, kbuf);
    make_value(r, gen, spec.seed, spec.value_size, value);
  };
  auto write = [&](uint64_t r) {
    rocksdb::Status s = c.db.Put(wo, key, value);
    if (!s.ok()) c.fail(s, "write", r);
  };
  auto read = [&](uint64_t r) {
    rocksdb::Status s = c.db.Get(ro, key, &got);
    if (s.IsNotFound()) ++out.not_found;
    else if (!s.ok()) c.fail(s, "read", r);
  };

  if (w.load) {
    // Records t, t + threads, ...: every record once, in hashed key order.
    for (uint64_t r = t; r < spec.records && !c.stop.load(std::memory_order_relaxed); r += spec.threads) {
      prepare(r, Gen::insert(spec.insert_phase));
      timed(OpType::kInsert, [&] { write(r); });
    }
    return;
  }

  std::optional<ScrambledZipfian> zipf;
  if (c.ranks) zipf.emplace(c.zipf_space, *c.ranks);
  std::optional<Zipfian> latest = c.latest;
  auto choose = [&]() -> uint64_t {
    switch (w.dist) {
      case KeyDist::kUniform: return rng.below(spec.key_space);
      case KeyDist::kLatest: {
        uint64_t n = c.inserts.limit();
        return n - 1 - latest->next(rng, n);
      }
      case KeyDist::kZipfian:
        break;
    }
    // Records not yet (fully) inserted are skipped, as YCSB does.
    for (;;)
      if (uint64_t r = zipf->next(rng); r < c.inserts.limit()) return r;
  };
  double cumulative[kOpTypes];
  double sum = 0;
  for (int i = 0; i < kOpTypes; ++i) cumulative[i] = (sum += w.proportion[i]);

  uint64_t mine = spec.ops / spec.threads + (t < spec.ops % spec.threads ? 1 : 0);
  for (uint64_t i = 0; i < mine && !c.stop.load(std::memory_order_relaxed); ++i) {
    double u = rng.uniform() * sum;
    int type = 0;
    while (type < kOpTypes - 1 && u >= cumulative[type]) ++type;
    switch (OpType(type)) {
      case OpType::kRead: {
        uint64_t r = choose();
        key_of(r, kbuf);
        timed(OpType::kRead, [&] { read(r); });
        break;
      }
      case OpType::kUpdate: {
        uint64_t r = choose();
        prepare(r, Gen::update(spec.update_phase, t, i));
        timed(OpType::kUpdate, [&] { write(r); });
        break;
      }
      case OpType::kInsert: {
        uint64_t r = c.inserts.claim();
        prepare(r, Gen::insert(spec.insert_phase));
        timed(OpType::kInsert, [&] { write(r); });
        c.inserts.acknowledge(r);
        break;
      }
      case OpType::kScan: {
        uint64_t r = choose();
        uint64_t len = 1 + rng.below(w.max_scan);
        key_of(r, kbuf);
        timed(OpType::kScan, [&] {
          std::unique_ptr<rocksdb::Iterator> it(c.db.NewIterator(ro));
          uint64_t n = 0;
          for (it->Seek(key); it->Valid() && n < len; it->Next()) ++n;
          out.scanned_rows += n;
          if (!it->status().ok()) c.fail(it->status(), "scan", r);
        });
        break;
      }
      case OpType::kRmw: {
        // The new value does not depend on the old one, so it is made first.
        uint64_t r = choose();
        prepare(r, Gen::update(spec.update_phase, t, i));
        timed(OpType::kRmw, [&] {
          read(r);
          write(r);
        });
        break;
      }
    }
  }
}

}  // namespace

PhaseResult run_phase(rocksdb::DB& db, const PhaseSpec& spec) {
  Clients c(spec, db);
  const Workload& w = spec.workload;
  if (!w.load) {
    if (w.dist == KeyDist::kZipfian) {
      c.ranks.emplace(ScrambledZipfian::kItemSpace, spec.zipf_constant);
      // Room for the records this phase inserts (YCSB: twice the expected
      // inserts); picks beyond what exists are drawn again.
      double inserts = w.proportion[int(OpType::kInsert)] * double(spec.ops);
      c.zipf_space = spec.records + uint64_t(2 * inserts);
    } else if (w.dist == KeyDist::kLatest) {
      c.latest.emplace(spec.records, spec.zipf_constant);
    }
  }
  std::vector<PhaseResult> per(spec.threads);
  uint64_t t0 = now_ns(), last_report = t0, reported = 0;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  unsigned finished = 0;
  for (unsigned t = 0; t < spec.threads; ++t)
    threads.emplace_back([&, t] {
      client(c, t, per[t]);
      std::lock_guard lk(mu);
      ++finished;
      cv.notify_all();
    });
  // Long runs show progress on stderr every 10 s.
  uint64_t total = w.load ? spec.records : spec.ops;
  {
    std::unique_lock lk(mu);
    while (!cv.wait_for(lk, std::chrono::seconds(10), [&] { return finished == spec.threads; })) {
      uint64_t now = now_ns(), done = 0;
      for (auto& d : c.done) done += d.n.load(std::memory_order_relaxed);
      std::fprintf(stderr, "[kvbench] %.0f s: %llu of %llu ops (%.0f ops/s in the last %.0f s)\n", (now - t0) / 1e9,
                   (unsigned long long)done, (unsigned long long)total, (done - reported) / ((now - last_report) / 1e9),
                   (now - last_report) / 1e9);
      last_report = now;
      reported = done;
    }
  }
  uint64_t t_end = now_ns();
  for (auto& th : threads) th.join();
  PhaseResult r;
  r.seconds = (t_end - t0) / 1e9;
  for (auto& p : per) {
    for (int i = 0; i < kOpTypes; ++i) r.latency[i].merge(p.latency[i]);
    r.not_found += p.not_found;
    r.scanned_rows += p.scanned_rows;
  }
  for (int i = 0; i < kOpTypes; ++i) r.ops += r.latency[i].count();
  r.error = c.error;
  return r;
}

void add_run_flags(ArgParser& p) {
  p.option("threads", "client threads (the paper used 10 on 48 cores)", "1");
  p.option("seed", "seed of the operation streams and of the values written", "1");
  p.cpus_option("cpus", "pin the whole process (client, flush and compaction threads) to these CPUs, e.g. 0");
  p.flag("drain", "after the operations, flush and wait until no compaction is pending (counted apart)");
  p.option("json", "write the result here (dpukit.result/1)");
  add_mode_flags(p);
}

namespace {

// Tickers read at the start and the end of the measured window.
constexpr rocksdb::Tickers kTickers[] = {
    rocksdb::STALL_MICROS,          rocksdb::COMPACT_WRITE_BYTES,        rocksdb::COMPACT_READ_BYTES,
    rocksdb::FLUSH_WRITE_BYTES,     rocksdb::REMOTE_COMPACT_WRITE_BYTES, rocksdb::REMOTE_COMPACT_READ_BYTES,
    rocksdb::BYTES_WRITTEN,
};
constexpr size_t kNumTickers = sizeof(kTickers) / sizeof(kTickers[0]);

struct Tickers {
  uint64_t v[kNumTickers] = {};
  static Tickers read(rocksdb::Statistics& s) {
    Tickers t;
    for (size_t i = 0; i < kNumTickers; ++i) t.v[i] = s.getTickerCount(kTickers[i]);
    return t;
  }
  uint64_t operator[](rocksdb::Tickers which) const {
    for (size_t i = 0; i < kNumTickers; ++i)
      if (kTickers[i] == which) return v[i];
    return 0;
  }
};

uint64_t int_property(rocksdb::DB& db, const char* name) {
  uint64_t v = 0;
  return db.GetIntProperty(name, &v) ? v : 0;
}

// Flushes the memtable and waits until RocksDB has no flush or compaction
// running or pending (twice in a row, 50 ms apart).
void drain(rocksdb::DB& db) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  check(db.Flush(fo), "flush before draining");
  int quiet = 0;
  uint64_t t0 = now_ns(), last = t0;
  while (quiet < 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    uint64_t busy = int_property(db, "rocksdb.num-running-compactions") +
                    int_property(db, "rocksdb.compaction-pending") + int_property(db, "rocksdb.num-running-flushes") +
                    int_property(db, "rocksdb.mem-table-flush-pending");
    quiet = busy ? 0 : quiet + 1;
    if (now_ns() - last >= 10'000'000'000ull) {
      last = now_ns();
      std::fprintf(stderr, "[kvbench] draining for %.0f s: %llu compactions running\n", (last - t0) / 1e9,
                   (unsigned long long)int_property(db, "rocksdb.num-running-compactions"));
    }
  }
}

nlohmann::json lsm_shape(rocksdb::DB& db) {
  rocksdb::ColumnFamilyMetaData md;
  db.GetColumnFamilyMetaData(&md);
  nlohmann::json levels = nlohmann::json::array();
  for (const auto& l : md.levels)
    if (!l.files.empty()) levels.push_back({{"level", l.level}, {"files", l.files.size()}, {"bytes", l.size}});
  return levels;
}

nlohmann::json latency_json(const LatencyHistogram& h) {
  return {{"count", h.count()},
          {"avg", h.mean() / 1e3},
          {"p50", h.percentile(0.50) / 1e3},
          {"p99", h.percentile(0.99) / 1e3},
          {"p99_9", h.percentile(0.999) / 1e3},
          {"max", h.max() / 1e3}};
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), bytes >= (1ull << 30) ? "%.2f GB" : "%.1f MB",
                bytes >= (1ull << 30) ? bytes / double(1ull << 30) : bytes / double(1ull << 20));
  return buf;
}

Placement placement(const ArgParser& p, bool dcomp, const DcompConfig& d) {
  Placement pl;
  pl.host = p.has("cpus") ? CpuSet::parse(p.str("cpus")) : available_cpus();
  if (dcomp) pl.dpu = d.worker_cpus.empty() ? available_cpus() : d.worker_cpus;
  if (!p.has("cpus")) pl.note += "host unpinned; ";
  if (dcomp && d.worker_cpus.empty()) pl.note += "worker unpinned; ";
  for (int c : pl.host.cpus)
    if (std::find(pl.dpu.cpus.begin(), pl.dpu.cpus.end(), c) != pl.dpu.cpus.end()) {
      pl.note += "host and worker share CPU " + std::to_string(c) + "; ";
      break;
    }
  if (pl.note.size() >= 2) pl.note.resize(pl.note.size() - 2);
  return pl;
}

// The measured window: the phase, the drain (--drain) and the close, whose
// compactions count too; the tickers and the CPU time around it.
struct Window {
  PhaseResult r;
  uint64_t t0 = 0, t_run = 0, t_drain = 0, t_close = 0;
  uint64_t host_cpu = 0;  // the whole process
  std::map<std::string, uint64_t> thread_cpu;  // by thread group
  const char* thread_cpu_clock = "";
  Tickers before, after;
  nlohmann::json lsm;  // the LSM's shape after the drain
  DcompOffload::Summary dsum;

  uint64_t delta(rocksdb::Tickers t) const { return after[t] - before[t]; }
  double run_s() const { return r.seconds; }  // the client threads alone, without the set-up around them
};

Window measure_window(std::unique_ptr<rocksdb::DB> db, rocksdb::Statistics& statistics, const PhaseSpec& spec,
                      bool drain_after, DcompOffload* offload) {
  Window w;
  // "plugin": the pulsedb plugin's own threads (its completion reaper; in
  // async-host the write-persist engine) do compaction's I/O on the host.
  ThreadCpuSampler sampler({{"compaction", "rocksdb:low"},
                            {"plugin", "pulsedb:"},
                            {"flush", "rocksdb:high"},
                            {"client", "kvbench-client"}});
  sampler.start();
  uint64_t cpu0 = process_cpu_ns();
  w.before = Tickers::read(statistics);
  w.t0 = now_ns();
  w.r = run_phase(*db, spec);
  w.t_run = now_ns();
  if (drain_after && w.r.error.empty()) drain(*db);
  w.t_drain = now_ns();
  w.lsm = lsm_shape(*db);
  // Close waits for the compactions still running, so their work (host or
  // worker) is inside the measured window like the rest.
  rocksdb::Status close_status = db->Close();
  db.reset();
  w.t_close = now_ns();
  sampler.stop();
  w.host_cpu = process_cpu_ns() - cpu0;
  w.after = Tickers::read(statistics);
  if (offload) w.dsum = offload->finish();
  if (!close_status.ok() && w.r.error.empty()) w.r.error = "closing the database: " + close_status.ToString();
  w.thread_cpu = sampler.cpu_ns();
  w.thread_cpu_clock = sampler.clock();
  return w;
}

nlohmann::json window_figures(const Window& w, const PhaseSpec& spec, bool dcomp) {
  const PhaseResult& r = w.r;
  const double run_s = w.run_s();
  const uint64_t stall = w.delta(rocksdb::STALL_MICROS);
  const uint64_t cw_host = w.delta(rocksdb::COMPACT_WRITE_BYTES), cw_worker = w.delta(rocksdb::REMOTE_COMPACT_WRITE_BYTES);
  auto thread_cpu = w.thread_cpu;
  nlohmann::json lat = nlohmann::json::object();
  for (int i = 0; i < kOpTypes; ++i)
    if (r.latency[i].count()) lat[op_name(OpType(i))] = latency_json(r.latency[i]);
  nlohmann::json figures = {
      {"command", spec.command},
      {"workload", spec.workload.name},
      {"mode", dcomp ? "dcomp" : "local"},
      {"ops", r.ops},
      {"run_seconds", run_s},
      {"throughput_ops_per_s", run_s > 0 ? r.ops / run_s : 0},
      {"latency_us", lat},
      {"read_not_found", r.not_found},
      {"scanned_rows", r.scanned_rows},
      {"write_stall_micros", stall},
      {"write_stall_ratio", run_s > 0 ? stall / 1e6 / run_s : 0},
      {"compaction",
       {{"bytes_written", cw_host + cw_worker},
        {"bytes_written_host", cw_host},
        {"bytes_written_worker", cw_worker},
        {"bytes_read_host", w.delta(rocksdb::COMPACT_READ_BYTES)},
        {"bytes_read_worker", w.delta(rocksdb::REMOTE_COMPACT_READ_BYTES)},
        {"host_cpu_ns", thread_cpu["compaction"] + thread_cpu["plugin"]},
        {"host_plugin_cpu_ns", thread_cpu["plugin"]}}},
      {"flush_bytes_written", w.delta(rocksdb::FLUSH_WRITE_BYTES)},
      {"user_bytes_written", w.delta(rocksdb::BYTES_WRITTEN)},
      {"thread_cpu_ns", thread_cpu},
      {"thread_cpu_clock", w.thread_cpu_clock},
      {"host_process_cpu_ns", w.host_cpu},
      {"dpu_cpu_ns", w.dsum.worker_cpu_ns},
      {"drain_seconds", (w.t_drain - w.t_run) / 1e9},
      {"close_seconds", (w.t_close - w.t_drain) / 1e9},
      {"lsm", w.lsm},
  };
  if (dcomp) figures["dcomp"] = w.dsum.json;
  if (!r.error.empty()) figures["error"] = r.error;
  return figures;
}

nlohmann::json phase_parameters(const ArgParser& p, const DbConfig& cfg, const PhaseSpec& spec, bool dcomp,
                                const DcompConfig& dcfg) {
  nlohmann::json params = cfg.to_json();
  params["mode"] = dcomp ? "dcomp" : "local";
  params["command"] = spec.command;
  params["workload"] = spec.workload.name;
  params["records"] = spec.records;
  params["ops"] = spec.workload.load ? spec.records : spec.ops;
  if (spec.workload.dist == KeyDist::kUniform && !spec.workload.load) params["key_space"] = spec.key_space;
  else params["zipf_constant"] = spec.zipf_constant;
  params["threads"] = spec.threads;
  params["seed"] = spec.seed;
  params["drain"] = p.has("drain");
  if (dcomp) params.update(dcomp_parameters(dcfg));
  return params;
}

// dcomp: where the compactions ran, by levels, and the worker's fate.
void print_dcomp_summary(const nlohmann::json& d) {
  std::printf("  dcomp: %llu jobs ran in the worker, %llu failed there and ran on the host; by levels:",
              (unsigned long long)d["jobs_in_worker"].get<uint64_t>(),
              (unsigned long long)d["jobs_failed"].get<uint64_t>());
  for (const auto& [tag, c] : d["by_levels"].items())
    std::printf(" %s host %llu worker %llu;", tag.c_str(), (unsigned long long)c["host"].get<uint64_t>(),
                (unsigned long long)c["worker"].get<uint64_t>());
  std::printf(" %llu worker restart(s), last worker %s\n", (unsigned long long)d["worker_restarts"].get<uint64_t>(),
              d["worker_exit"].get<std::string>().c_str());
}

// The human summary.
void print_window_summary(const Window& w, const PhaseSpec& spec, bool dcomp) {
  const PhaseResult& r = w.r;
  const double run_s = w.run_s();
  const uint64_t stall = w.delta(rocksdb::STALL_MICROS);
  const uint64_t cw_host = w.delta(rocksdb::COMPACT_WRITE_BYTES), cw_worker = w.delta(rocksdb::REMOTE_COMPACT_WRITE_BYTES);
  auto thread_cpu = w.thread_cpu;
  std::printf("%s %s (%s): %llu ops in %.2f s = %.0f ops/s, %u thread(s)\n", spec.command.c_str(),
              spec.workload.name.c_str(), dcomp ? "dcomp" : "local", (unsigned long long)r.ops, run_s,
              run_s > 0 ? r.ops / run_s : 0, spec.threads);
  for (int i = 0; i < kOpTypes; ++i) {
    const LatencyHistogram& h = r.latency[i];
    if (!h.count()) continue;
    std::printf("  %-18s %10llu ops  avg %9.1f  p50 %9.1f  p99 %9.1f  p99.9 %9.1f  max %9.1f us\n",
                op_name(OpType(i)), (unsigned long long)h.count(), h.mean() / 1e3, h.percentile(0.5) / 1e3,
                h.percentile(0.99) / 1e3, h.percentile(0.999) / 1e3, h.max() / 1e3);
  }
  if (r.not_found) std::printf("  reads of missing keys: %llu\n", (unsigned long long)r.not_found);
  std::printf("  write stall %.1f%% of the run (%.2f s); compaction wrote %s (host %s, worker %s)\n",
              run_s > 0 ? 100.0 * stall / 1e6 / run_s : 0.0, stall / 1e6, gb(cw_host + cw_worker).c_str(),
              gb(cw_host).c_str(), gb(cw_worker).c_str());
  std::printf("  host CPU: compaction threads %.2f s, flush %.2f s, clients %.2f s, whole process %.2f s",
              thread_cpu["compaction"] / 1e9, thread_cpu["flush"] / 1e9, thread_cpu["client"] / 1e9, w.host_cpu / 1e9);
  if (dcomp) std::printf("; worker (dpu) CPU %.2f s", w.dsum.worker_cpu_ns / 1e9);
  std::printf("\n");
  if (dcomp) print_dcomp_summary(w.dsum.json);
  std::printf("  measured %.2f s: run %.2f, drain %.2f, close %.2f; LSM:", (w.t_close - w.t0) / 1e9, run_s,
              (w.t_drain - w.t_run) / 1e9, (w.t_close - w.t_drain) / 1e9);
  for (const auto& l : w.lsm)
    std::printf(" L%d %llu files %s;", l["level"].get<int>(), (unsigned long long)l["files"].get<uint64_t>(),
                gb(l["bytes"].get<uint64_t>()).c_str());
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int run_measured(const ArgParser& p, PhaseSpec spec, const std::string& tool, int argc, char** argv, bool fresh_db,
                 bool create_db) {
  DbConfig cfg = db_config(p);
  spec.value_size = cfg.value_size;
  spec.threads = unsigned(p.u64("threads"));
  spec.seed = p.u64("seed");
  if (spec.threads == 0 || spec.threads > 1024) p.fail("--threads must be between 1 and 1024");
  bool dcomp = dcomp_mode(p);
  DcompConfig dcfg;
  if (dcomp) dcfg = dcomp_config(p, cfg);
  for (const char* f : {"dcomp-slots", "worker-cpus", "dcomp-dir", "dcomp-job-timeout", "dcomp-max-restarts",
                        "dcomp-first-level", "dcomp-share", "worker-die-on-job", "worker-hang-on-job"})
    if (!dcomp && p.has(f)) log_warn(std::string("--") + f + " has no effect with --mode local");
  Placement pl;
  try {
    pl = placement(p, dcomp, dcfg);
  } catch (const std::invalid_argument& e) {
    p.fail(std::string("--cpus: ") + e.what());
  }
  // Pinned before any other thread exists, so every thread RocksDB and the
  // client pool start inherits the mask: the whole process is pinned.
  if (p.has("cpus"))
    if (auto w = pin_current_thread(pl.host); !w.empty()) log_warn(w);

  EnvHandle env = make_env(cfg.fs_uri);
  rocksdb::Options o = make_options(cfg, env.env);
  o.create_if_missing = create_db;
  namespace fs = std::filesystem;
  if (fresh_db && !p.has("use-existing") && fs::exists(fs::path(cfg.db) / "CURRENT"))
    check(rocksdb::DestroyDB(cfg.db, o), "cannot clear the old database in " + cfg.db);
  if (!create_db && !fs::exists(fs::path(cfg.db) / "CURRENT"))
    throw InputError("no RocksDB database in " + cfg.db + " (load it first: `dpukit-kvbench ycsb --workload load`)");

  std::unique_ptr<DcompOffload> offload;
  if (dcomp) {
    offload = std::make_unique<DcompOffload>(dcfg);
    offload->install(o, cfg.flush_threads(), cfg.compaction_threads());
  }
  const Window w = measure_window(open_db(o, cfg.db), *o.statistics, spec, p.has("drain"), offload.get());

  Result out(tool, argc, argv);
  out.set_backend("emulated");
  out.set_placement(pl);
  out.set_dpu_speed(p.dpu_speed());
  out.parameters() = phase_parameters(p, cfg, spec, dcomp, dcfg);
  out.figures() = window_figures(w, spec, dcomp);
  CpuAccount cpu;
  cpu.add(Place::kHost, w.host_cpu);
  cpu.add(Place::kDpu, w.dsum.worker_cpu_ns);
  out.set_cpu(cpu);
  out.set_wall_ns(w.t_close - w.t0);

  print_window_summary(w, spec, dcomp);
  if (p.has("json")) out.write(p.str("json"));
  if (!w.r.error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), w.r.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace dpukit::kv::bench
