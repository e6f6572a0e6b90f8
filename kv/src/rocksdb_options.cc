// The settings as RocksDB's own options.
#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/statistics.h>

#include "dpukit/kv_settings.h"

namespace dpukit::kv {

std::shared_ptr<rocksdb::TableFactory> make_table_factory(const RocksDbSettings& s) {
  rocksdb::BlockBasedTableOptions t;
  t.block_size = s.block_size;
  t.block_cache = rocksdb::NewLRUCache(s.cache_size);
  if (s.bloom_bits > 0) t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(double(s.bloom_bits), false));
  return std::shared_ptr<rocksdb::TableFactory>(rocksdb::NewBlockBasedTableFactory(t));
}

rocksdb::Options make_options(const RocksDbSettings& s, rocksdb::Env* env) {
  rocksdb::Options o;
  o.env = env;
  o.create_if_missing = true;
  o.compaction_style = rocksdb::kCompactionStyleLevel;
  o.compression = rocksdb::kNoCompression;
  o.bottommost_compression = rocksdb::kNoCompression;
  o.write_buffer_size = s.write_buffer_size;
  o.target_file_size_base = s.target_file_size;
  o.max_bytes_for_level_base = s.max_bytes_for_level_base;
  o.max_bytes_for_level_multiplier = s.fanout;
  o.num_levels = s.num_levels;
  o.max_background_jobs = s.max_background_jobs;
  o.level0_slowdown_writes_trigger = s.l0_slowdown;
  o.level0_stop_writes_trigger = s.l0_stop;
  o.writable_file_max_buffer_size = s.file_buffer;
  o.use_direct_reads = s.direct_reads;
  o.table_factory = make_table_factory(s);
  o.statistics = rocksdb::CreateDBStatistics();
  return o;
}

}  // namespace dpukit::kv
