// The RocksDB configuration every dpukit-kvbench command shares: the PulseDB
// paper's settings (§IV-A) scaled to a small machine, each one a flag.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include "dpukit/core/cli.h"

namespace dpukit::kv::bench {

struct DbConfig {
  std::string db;
  std::string fs_uri;               // empty: the default file system
  uint64_t value_size = 1024;
  uint64_t write_buffer_size = 64ull << 20;
  uint64_t target_file_size = 64ull << 20;
  uint64_t max_bytes_for_level_base = 256ull << 20;
  double fanout = 10;
  int num_levels = 7;
  int max_background_jobs = 4;
  int l0_slowdown = 20;  // L0 files at which RocksDB slows writes (its default)
  int l0_stop = 36;      // ... and stops them
  uint64_t file_buffer = 1 << 20;  // writable_file_max_buffer_size: bytes an SST writer gathers per Append (RocksDB's default)
  int bloom_bits = 10;
  uint64_t cache_size = 256ull << 20;
  uint64_t block_size = 4096;
  bool direct_reads = true;

  // RocksDB's own split of max_background_jobs (DBImpl::GetBGJobLimits): a
  // quarter (at least one) for flushes, the rest for compactions.
  int flush_threads() const { return std::max(1, max_background_jobs / 4); }
  int compaction_threads() const { return std::max(1, max_background_jobs - flush_threads()); }

  nlohmann::json to_json() const;
};

// Adds --db, --fs-uri and the RocksDB settings to a command that writes.
void add_db_flags(ArgParser& p);
DbConfig db_config(const ArgParser& p);

// What a command that only reads needs: --db, the table flags, --no-direct-reads.
void add_read_db_flags(ArgParser& p);
DbConfig read_db_config(const ArgParser& p);

// The subset the dcomp worker needs to write the same tables on the same file
// system: --fs-uri, --bloom-bits, --cache-size, --block-size.
void add_table_flags(ArgParser& p);
void table_config(const ArgParser& p, DbConfig& c);

// The Env the DB runs on: Env::Default(), or the one `--fs-uri` names through
// RocksDB's object registry (a FileSystem plugin linked in or LD_PRELOADed
// registers a factory for its URIs). Throws InputError naming the URI.
struct EnvHandle {
  rocksdb::Env* env = nullptr;
  std::shared_ptr<rocksdb::Env> guard;  // owns env when it came from the registry
};
EnvHandle make_env(const std::string& fs_uri);

// The block-based table factory of the settings: bloom filter, block cache,
// block size. The primary and the dcomp worker must write identical tables.
std::shared_ptr<rocksdb::TableFactory> make_table_factory(const DbConfig& c);

// Options for the primary DB on `env`, statistics on.
rocksdb::Options make_options(const DbConfig& c, rocksdb::Env* env);

// Opens --db (read-only when asked); throws std::runtime_error naming the
// directory and RocksDB's reason.
std::unique_ptr<rocksdb::DB> open_db(const rocksdb::Options& o, const std::string& dir, bool read_only = false);

// Throws std::runtime_error naming `what` when `s` is not ok.
void check(const rocksdb::Status& s, const std::string& what);

}  // namespace dpukit::kv::bench
