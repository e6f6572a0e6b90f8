#include "options.h"

#include <rocksdb/convenience.h>

#include "keyval.h"

namespace dpukit::kv::bench {

static_assert(kKeySize == RocksDbSettings::kKeySize, "the keys kvbench makes are the settings' size");

void add_table_flags(ArgParser& p) {
  p.option("fs-uri",
           "run RocksDB on the FileSystem this URI names (Env::CreateFromUri; a plugin linked in or "
           "LD_PRELOADed registers it, e.g. pulsedb://...)");
  p.option("bloom-bits", "bloom filter bits per key; 0 = none (paper: 10)", "10");
  p.option("cache-size", "block cache (paper: 2 GB on a 128 GB host; scaled down here)", "256MB");
  p.option("block-size", "data block size (RocksDB's default)", "4KB");
}

void table_config(const ArgParser& p, DbConfig& c) {
  c.fs_uri = p.str("fs-uri");
  c.bloom_bits = int(p.u64("bloom-bits"));
  c.cache_size = p.bytes("cache-size");
  c.block_size = p.bytes("block-size");
  if (c.bloom_bits > 64) p.fail("--bloom-bits must be at most 64 (0 disables the filter)");
  if (c.block_size < 256 || c.block_size > (16u << 20)) p.fail("--block-size must be between 256 B and 16 MB");
}

namespace {
void add_db_dir_flag(ArgParser& p) { p.option("db", "the RocksDB directory", "", true); }
const char* kNoDirectReadsHelp = "read SSTs through the page cache (default: O_DIRECT reads, as in the paper)";

std::string db_dir(const ArgParser& p) {
  std::string db = p.str("db");
  while (db.size() > 1 && db.back() == '/') db.pop_back();
  return db;
}
}  // namespace

void add_read_db_flags(ArgParser& p) {
  add_db_dir_flag(p);
  add_table_flags(p);
  p.flag("no-direct-reads", kNoDirectReadsHelp);
}

DbConfig read_db_config(const ArgParser& p) {
  DbConfig c;
  c.db = db_dir(p);
  table_config(p, c);
  c.direct_reads = !p.has("no-direct-reads");
  return c;
}

void add_db_flags(ArgParser& p) {
  add_db_dir_flag(p);
  add_table_flags(p);
  p.option("value-size", "value bytes (keys are always 16 B; values carry a 32 B check header)", "1024");
  p.option("write-buffer-size", "memtable size (paper: 64 MB)", "64MB");
  p.option("target-file-size", "SST target file size (paper: 64 MB)", "64MB");
  p.option("max-bytes-for-level-base", "L1 capacity (paper: 256 MB)", "256MB");
  p.option("fanout", "level size multiplier (paper: 10)", "10");
  p.option("num-levels", "LSM levels (paper: 7)", "7");
  p.option("max-background-jobs",
           "RocksDB background jobs: 1/4 (at least 1) flush, the rest compaction. The paper ran 4 concurrent "
           "compaction threads on 48 host cores; here 4 jobs = 1 flush + 3 compaction threads",
           "4");
  p.option("l0-slowdown", "L0 files at which writes are slowed (RocksDB's default)", "20");
  p.option("l0-stop", "L0 files at which writes stop (RocksDB's default)", "36");
  p.option("file-buffer", "writable_file_max_buffer_size: bytes a file writer gathers before it appends to the file "
           "system (RocksDB's default)", "1MB");
  p.flag("no-direct-reads", kNoDirectReadsHelp);
}

DbConfig db_config(const ArgParser& p) {
  DbConfig c = read_db_config(p);
  c.value_size = p.bytes("value-size");
  if (c.value_size < kValueHeaderSize || c.value_size > (64u << 20))
    p.fail("--value-size must be between " + std::to_string(kValueHeaderSize) + " B (the check header) and 64 MB");
  c.write_buffer_size = p.bytes("write-buffer-size");
  c.target_file_size = p.bytes("target-file-size");
  c.max_bytes_for_level_base = p.bytes("max-bytes-for-level-base");
  c.fanout = p.number("fanout");
  c.num_levels = int(p.u64("num-levels"));
  c.max_background_jobs = int(p.u64("max-background-jobs"));
  c.l0_slowdown = int(p.u64("l0-slowdown"));
  c.l0_stop = int(p.u64("l0-stop"));
  if (c.l0_slowdown < 1 || c.l0_stop < c.l0_slowdown) p.fail("want 1 <= --l0-slowdown <= --l0-stop");
  c.file_buffer = p.bytes("file-buffer");
  if (c.file_buffer < 4096 || c.file_buffer > (256u << 20)) p.fail("--file-buffer must be between 4KB and 256MB");
  if (c.write_buffer_size < (64u << 10)) p.fail("--write-buffer-size must be at least 64KB");
  if (c.target_file_size < (64u << 10)) p.fail("--target-file-size must be at least 64KB");
  if (c.max_bytes_for_level_base < c.target_file_size) p.fail("--max-bytes-for-level-base must be >= --target-file-size");
  if (!(c.fanout > 1)) p.fail("--fanout must be > 1");
  if (c.num_levels < 2 || c.num_levels > 20) p.fail("--num-levels must be between 2 and 20");
  if (c.max_background_jobs < 2) p.fail("--max-background-jobs must be at least 2 (one flush, one compaction)");
  return c;
}

nlohmann::json DbConfig::to_json() const {
  nlohmann::json j = static_cast<const RocksDbSettings&>(*this);
  j["db"] = db;
  j["fs_uri"] = fs_uri;
  return j;
}

void check(const rocksdb::Status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.ToString());
}

EnvHandle make_env(const std::string& fs_uri) {
  EnvHandle h;
  if (fs_uri.empty()) {
    h.env = rocksdb::Env::Default();
    return h;
  }
  rocksdb::ConfigOptions cfg;
  rocksdb::Status s = rocksdb::Env::CreateFromUri(cfg, "", fs_uri, &h.env, &h.guard);
  // An unregistered URI can come back OK with no FileSystem behind it
  // (LoadSharedObject reads some strings as empty option lists).
  if (!s.ok() || h.env == nullptr || h.env->GetFileSystem() == nullptr)
    throw InputError("--fs-uri " + fs_uri + ": no FileSystem registered for it" +
                     (s.ok() ? std::string() : " (" + s.ToString() + ")") +
                     "; link or LD_PRELOAD the plugin that provides it");
  return h;
}

std::unique_ptr<rocksdb::DB> open_db(const rocksdb::Options& o, const std::string& dir, bool read_only) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = read_only ? rocksdb::DB::OpenForReadOnly(o, dir, &raw) : rocksdb::DB::Open(o, dir, &raw);
  if (!s.ok()) throw std::runtime_error("cannot open the RocksDB database in " + dir + ": " + s.ToString());
  return std::unique_ptr<rocksdb::DB>(raw);
}

}  // namespace dpukit::kv::bench
