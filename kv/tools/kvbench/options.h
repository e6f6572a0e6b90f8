// The RocksDB configuration every dpukit-kvbench command shares: the PulseDB
// paper's settings (dpukit/kv_settings.h), each one a flag.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>

#include "dpukit/core/cli.h"
#include "dpukit/kv_settings.h"

namespace dpukit::kv::bench {

// The settings and where the DB is.
struct DbConfig : RocksDbSettings {
  std::string db;
  std::string fs_uri;  // empty: the default file system

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

// Opens --db (read-only when asked); throws std::runtime_error naming the
// directory and RocksDB's reason.
std::unique_ptr<rocksdb::DB> open_db(const rocksdb::Options& o, const std::string& dir, bool read_only = false);

// Throws std::runtime_error naming `what` when `s` is not ok.
void check(const rocksdb::Status& s, const std::string& what);

}  // namespace dpukit::kv::bench
