// The RocksDB settings of PulseDB's evaluation (§IV-A), scaled to a small
// machine: what dpukit-kv gives the stock db_bench and what dpukit-kvbench
// gives RocksDB, so that every driver runs the same LSM tree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

namespace dpukit::kv {

// Fixed besides, as in the paper: no compression, leveled compaction.
struct RocksDbSettings {
  static constexpr uint64_t kKeySize = 16;  // bytes
  uint64_t value_size = 1024;
  uint64_t write_buffer_size = 64ull << 20;          // the memtable (paper: 64 MB)
  uint64_t target_file_size = 64ull << 20;           // an SST file (paper: 64 MB)
  uint64_t max_bytes_for_level_base = 256ull << 20;  // L1 (paper: 256 MB)
  double fanout = 10;                                // level size multiplier
  int num_levels = 7;
  int max_background_jobs = 4;
  int l0_slowdown = 20;  // L0 files at which RocksDB slows writes (its default)
  int l0_stop = 36;      // ... and stops them
  // writable_file_max_buffer_size: bytes an SST writer gathers per Append
  // (RocksDB's default).
  uint64_t file_buffer = 1 << 20;
  int bloom_bits = 10;                 // bloom filter bits per key; 0: none
  uint64_t cache_size = 256ull << 20;  // block cache (paper: 2 GB on a 128 GB host)
  uint64_t block_size = 4096;          // RocksDB's default
  bool direct_reads = true;            // O_DIRECT reads, as in the paper

  // RocksDB's own split of max_background_jobs (DBImpl::GetBGJobLimits): a
  // quarter (at least one) for flushes, the rest for compactions.
  int flush_threads() const { return std::max(1, max_background_jobs / 4); }
  int compaction_threads() const { return std::max(1, max_background_jobs - flush_threads()); }
};

// The settings as flags of the stock db_bench (--key_size=16 ...). db_bench
// is given its split of the jobs explicitly: one flush, the rest compactions.
std::vector<std::string> db_bench_flags(const RocksDbSettings& s);

// The settings as a result's parameters (`nlohmann::json j = settings;`).
void to_json(nlohmann::json& j, const RocksDbSettings& s);

// The block-based table factory of the settings: bloom filter, block cache,
// block size. A DB and a DComp worker writing its tables must use the same.
std::shared_ptr<rocksdb::TableFactory> make_table_factory(const RocksDbSettings& s);

// Options of a DB with the settings on `env`, created if missing, statistics on.
rocksdb::Options make_options(const RocksDbSettings& s, rocksdb::Env* env);

}  // namespace dpukit::kv
