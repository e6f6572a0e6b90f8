// dpukit-kvbench: the RocksDB measurements db_bench cannot make for PulseDB.
//
//   fill          insert N keys in random order (db_bench fillrandom, each key once)
//   overwrite     N random overwrites (db_bench overwrite)
//   ycsb          a YCSB core workload phase: load, a, b, c, d, e, f
//   verify        checksums + every value against the generator
//   dcomp-worker  the DComp baseline's worker process (started by --mode dcomp)
//
// fill, overwrite and ycsb run in --mode local (vanilla RocksDB) or --mode
// dcomp (L1+ compactions in a worker process) and report throughput, latency
// per op type, write-stall ratio, compaction bytes, the CPU time of the host's
// compaction threads and the worker's CPU time.
#include <cstdio>
#include <filesystem>
#include <map>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>

#include "bench.h"
#include "dcomp_cli.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/results.h"
#include "keyval.h"
#include "options.h"

namespace dpukit::kv::bench {
namespace {

const char* kTool = "dpukit-kvbench";

int cmd_fill(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " fill",
              "Insert --num keys in random order into a fresh database, like db_bench fillrandom (which draws keys "
              "with replacement; here every key is written exactly once, so verify can count them).");
  add_db_flags(p);
  p.option("num", "keys to insert", "1000000");
  p.flag("use-existing", "keep what is already in --db (default: start from an empty database, as db_bench does)");
  add_run_flags(p);
  p.parse(argc, argv, 2);
  PhaseSpec s;
  s.command = "fill";
  s.workload.name = "fillrandom";
  s.workload.proportion[int(OpType::kInsert)] = 1;
  s.workload.load = true;
  s.records = s.ops = p.u64("num");
  if (s.records == 0) p.fail("--num must be > 0");
  s.insert_phase = Phase::kFill;
  return run_measured(p, s, std::string(kTool) + " fill", argc, argv, true, true);
}

int cmd_overwrite(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " overwrite",
              "Overwrite random keys of an existing database (db_bench overwrite): --num writes, keys drawn "
              "uniformly with replacement from the first --key-space records.");
  add_db_flags(p);
  p.option("num", "writes", "1000000");
  p.option("key-space", "records the keys are drawn from (default --num: the keys `fill --num` wrote)");
  add_run_flags(p);
  p.parse(argc, argv, 2);
  PhaseSpec s;
  s.command = "overwrite";
  s.workload.name = "overwrite";
  s.workload.proportion[int(OpType::kUpdate)] = 1;
  s.workload.dist = KeyDist::kUniform;
  s.ops = p.u64("num");
  s.key_space = p.has("key-space") ? p.u64("key-space") : s.ops;
  s.records = s.key_space;
  if (s.ops == 0 || s.key_space == 0) p.fail("--num and --key-space must be > 0");
  s.update_phase = Phase::kOverwrite;
  return run_measured(p, s, std::string(kTool) + " overwrite", argc, argv, false, true);
}

int cmd_ycsb(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " ycsb",
              "One YCSB core-workload phase. load: insert --records records into a fresh database. a: 50% read / "
              "50% update; b: 95/5 read/update; c: 100% read (all scrambled zipfian); d: 95% read / 5% insert "
              "(latest); e: 95% scan of 1-100 records / 5% insert (zipfian); f: 50% read / 50% read-modify-write "
              "(zipfian). Load once, then run the phases on the same --db with the same --records.");
  add_db_flags(p);
  p.option("workload", "load, a, b, c, d, e or f", "", true);
  p.option("records", "records in the database (load writes them)", "1000000");
  p.option("ops", "operations of a run phase (a-f; load does --records inserts)", "1000000");
  p.option("zipf-constant", "zipfian constant", "0.99");
  p.flag("use-existing", "load: keep what is already in --db (default: start from an empty database)");
  add_run_flags(p);
  p.parse(argc, argv, 2);
  PhaseSpec s;
  s.command = "ycsb";
  try {
    s.workload = ycsb_workload(p.str("workload"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  s.records = p.u64("records");
  s.ops = s.workload.load ? s.records : p.u64("ops");
  s.zipf_constant = p.number("zipf-constant");
  if (s.records == 0) p.fail("--records must be > 0");
  if (s.ops == 0) p.fail("--ops must be > 0");
  if (!(s.zipf_constant > 0 && s.zipf_constant < 1)) p.fail("--zipf-constant must be in (0, 1)");
  s.insert_phase = s.workload.load ? Phase::kLoad : Phase::kRunInsert;
  s.update_phase = Phase::kRunUpdate;
  return run_measured(p, s, std::string(kTool) + " ycsb", argc, argv, s.workload.load, s.workload.load);
}

int cmd_verify(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " verify",
              "Check a database written by dpukit-kvbench: DB::VerifyChecksum over every live SST, then a full scan "
              "checking that every value is exactly what the generator wrote for its key and write. Exit 0 if all "
              "is well, 1 on any mismatch (each named by its key).");
  add_read_db_flags(p);
  p.option("expect-keys", "also require exactly this many keys");
  p.flag("compact", "compact the whole database first (opens it read-write), as the PulseDB paper's check does");
  p.option("max-report", "mismatches printed one by one", "10");
  p.option("json", "write the result here (dpukit.result/1)");
  p.parse(argc, argv, 2);
  DbConfig cfg = read_db_config(p);
  uint64_t max_report = p.u64("max-report");
  if (!std::filesystem::exists(std::filesystem::path(cfg.db) / "CURRENT"))
    throw InputError("no RocksDB database in " + cfg.db);
  EnvHandle env = make_env(cfg.fs_uri);
  rocksdb::Options o = make_options(cfg, env.env);
  o.create_if_missing = false;
  uint64_t t0 = now_ns(), cpu0 = process_cpu_ns();
  bool compact = p.has("compact");
  std::unique_ptr<rocksdb::DB> db = open_db(o, cfg.db, !compact);
  if (compact) {
    rocksdb::CompactRangeOptions cro;
    cro.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    check(db->CompactRange(cro, nullptr, nullptr), "compacting " + cfg.db);
  }

  uint64_t mismatches = 0;
  auto report = [&](const std::string& line) {
    if (++mismatches <= max_report) std::fprintf(stderr, "verify: %s\n", line.c_str());
  };
  rocksdb::Status cs = db->VerifyChecksum();
  if (!cs.ok()) report("checksum verification failed: " + cs.ToString());

  uint64_t keys = 0, bytes = 0;
  std::map<std::string, uint64_t> by_phase;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  std::string why;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ++keys;
    rocksdb::Slice k = it->key(), v = it->value();
    bytes += k.size() + v.size();
    std::string key = k.ToString(k.size() != kKeySize);  // hex if it cannot be one of ours
    auto info = check_value(std::string_view(k.data(), k.size()), std::string_view(v.data(), v.size()), why);
    if (!info) report("key " + key + ": " + why);
    else ++by_phase[phase_name(Gen::phase(info->generation))];
  }
  if (!it->status().ok()) report("scan stopped: " + it->status().ToString());
  it.reset();
  bool count_ok = !p.has("expect-keys") || keys == p.u64("expect-keys");
  if (!count_ok)
    report("found " + std::to_string(keys) + " keys, expected " + std::to_string(p.u64("expect-keys")));
  check(db->Close(), "closing " + cfg.db);
  db.reset();

  std::string phases;
  for (const auto& [name, n] : by_phase) phases += (phases.empty() ? "" : ", ") + name + " " + std::to_string(n);
  if (mismatches == 0)
    std::printf("verify %s: OK: %llu keys (%.1f MB), checksums ok, every value matches the generator (last written "
                "by: %s)\n",
                cfg.db.c_str(), (unsigned long long)keys, bytes / 1048576.0, phases.empty() ? "-" : phases.c_str());
  else
    std::printf("verify %s: FAILED: %llu problem(s) among %llu keys%s\n", cfg.db.c_str(),
                (unsigned long long)mismatches, (unsigned long long)keys,
                mismatches > max_report ? " (the first ones are listed above)" : "");

  if (p.has("json")) {
    Result out(std::string(kTool) + " verify", argc, argv);
    out.parameters() = {{"db", cfg.db},
                        {"fs_uri", cfg.fs_uri},
                        {"direct_reads", cfg.direct_reads},
                        {"compact", compact},
                        {"expect_keys", p.has("expect-keys") ? nlohmann::json(p.u64("expect-keys")) : nullptr}};
    out.figures() = {{"keys", keys},
                     {"bytes", bytes},
                     {"checksums_ok", cs.ok()},
                     {"mismatches", mismatches},
                     {"last_written_by", by_phase},
                     {"ok", mismatches == 0}};
    CpuAccount cpu;
    cpu.add(Place::kHost, process_cpu_ns() - cpu0);
    out.set_cpu(cpu);
    out.set_wall_ns(now_ns() - t0);
    out.write(p.str("json"));
  }
  return mismatches == 0 ? 0 : 1;
}

const Subcommand kCommands[] = {
    {"fill", cmd_fill, "insert N keys in random order into a fresh DB (db_bench fillrandom)"},
    {"overwrite", cmd_overwrite, "N random overwrites of existing keys (db_bench overwrite)"},
    {"ycsb", cmd_ycsb, "a YCSB core workload phase: load, a, b, c, d, e or f"},
    {"verify", cmd_verify, "checksums and every value against the generator; exit 1 on any mismatch"},
    {"dcomp-worker", cmd_dcomp_worker, "the DComp baseline's compaction worker (started by --mode dcomp)"},
};

}  // namespace
}  // namespace dpukit::kv::bench

int main(int argc, char** argv) {
  using namespace dpukit::kv::bench;
  return dpukit::run_subcommands(kTool,
                                 "RocksDB benchmarks for PulseDB and its baselines: fill/overwrite/YCSB in local "
                                 "or DComp mode, with per-thread compaction CPU, and a value verifier.",
                                 kCommands, argc, argv);
}
