// The paper's RocksDB settings (dpukit/kv_settings.h): db_bench is told
// what RocksDB's own options say.
#include <gtest/gtest.h>

#include <rocksdb/table.h>

#include <algorithm>

#include "dpukit/kv_settings.h"

namespace dpukit::kv {
namespace {

bool has(const std::vector<std::string>& flags, const std::string& flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

TEST(KvSettings, DbBenchGetsThePapersSettings) {
  EXPECT_EQ(db_bench_flags(RocksDbSettings{}),
            (std::vector<std::string>{"--key_size=16",
                                      "--value_size=1024",
                                      "--compression_type=none",
                                      "--write_buffer_size=67108864",
                                      "--target_file_size_base=67108864",
                                      "--max_bytes_for_level_base=268435456",
                                      "--max_bytes_for_level_multiplier=10",
                                      "--num_levels=7",
                                      "--max_background_jobs=4",
                                      "--max_background_compactions=3",
                                      "--max_background_flushes=1",
                                      "--level0_slowdown_writes_trigger=20",
                                      "--level0_stop_writes_trigger=36",
                                      "--writable_file_max_buffer_size=1048576",
                                      "--bloom_bits=10",
                                      "--cache_size=268435456",
                                      "--block_size=4096",
                                      "--use_direct_reads=true"}));
}

// Every setting reaches both: the flags db_bench gets and the options a DB opens with.
TEST(KvSettings, DbBenchFlagsAndRocksDbOptionsAgree) {
  RocksDbSettings s;
  s.value_size = 4000;
  s.write_buffer_size = 8 << 20;
  s.target_file_size = 4 << 20;
  s.max_bytes_for_level_base = 16 << 20;
  s.fanout = 2.5;
  s.num_levels = 5;
  s.max_background_jobs = 6;
  s.l0_slowdown = 8;
  s.l0_stop = 12;
  s.file_buffer = 64 << 10;
  s.bloom_bits = 0;
  s.cache_size = 32 << 20;
  s.block_size = 16 << 10;
  s.direct_reads = false;
  const rocksdb::Options o = make_options(s, rocksdb::Env::Default());
  const std::vector<std::string> f = db_bench_flags(s);
  EXPECT_TRUE(has(f, "--value_size=4000"));
  EXPECT_TRUE(has(f, "--write_buffer_size=" + std::to_string(o.write_buffer_size)));
  EXPECT_TRUE(has(f, "--target_file_size_base=" + std::to_string(o.target_file_size_base)));
  EXPECT_TRUE(has(f, "--max_bytes_for_level_base=" + std::to_string(o.max_bytes_for_level_base)));
  EXPECT_DOUBLE_EQ(o.max_bytes_for_level_multiplier, 2.5);
  EXPECT_TRUE(has(f, "--max_bytes_for_level_multiplier=2.5"));
  EXPECT_TRUE(has(f, "--num_levels=" + std::to_string(o.num_levels)));
  EXPECT_TRUE(has(f, "--max_background_jobs=" + std::to_string(o.max_background_jobs)));
  EXPECT_TRUE(has(f, "--max_background_compactions=5"));
  EXPECT_TRUE(has(f, "--level0_slowdown_writes_trigger=" + std::to_string(o.level0_slowdown_writes_trigger)));
  EXPECT_TRUE(has(f, "--level0_stop_writes_trigger=" + std::to_string(o.level0_stop_writes_trigger)));
  EXPECT_TRUE(has(f, "--writable_file_max_buffer_size=" + std::to_string(o.writable_file_max_buffer_size)));
  EXPECT_TRUE(has(f, "--bloom_bits=0"));
  EXPECT_TRUE(has(f, "--cache_size=" + std::to_string(32 << 20)));
  EXPECT_TRUE(has(f, "--use_direct_reads=false"));
  EXPECT_FALSE(o.use_direct_reads);
  EXPECT_EQ(o.compression, rocksdb::kNoCompression);
  EXPECT_EQ(o.bottommost_compression, rocksdb::kNoCompression);
  EXPECT_EQ(o.compaction_style, rocksdb::kCompactionStyleLevel);
  EXPECT_TRUE(o.create_if_missing);
  EXPECT_NE(o.statistics, nullptr);
  const auto* table = o.table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  ASSERT_NE(table, nullptr);
  EXPECT_TRUE(has(f, "--block_size=" + std::to_string(table->block_size)));
  EXPECT_EQ(table->block_cache->GetCapacity(), 32u << 20);
  EXPECT_EQ(table->filter_policy, nullptr) << "0 bits: no bloom filter";
  EXPECT_NE(make_table_factory(RocksDbSettings{})->GetOptions<rocksdb::BlockBasedTableOptions>()->filter_policy,
            nullptr);
}

TEST(KvSettings, ParametersNameEverySetting) {
  RocksDbSettings s;
  s.max_background_jobs = 5;
  const nlohmann::json j = s;
  EXPECT_EQ(j.at("key_size"), 16);
  EXPECT_EQ(j.at("compression"), "none");
  EXPECT_EQ(j.at("compaction_style"), "leveled");
  EXPECT_EQ(j.at("fanout"), 10.0);
  EXPECT_EQ(j.at("flush_threads"), 1);
  EXPECT_EQ(j.at("compaction_threads"), 4);
  EXPECT_EQ(j.at("direct_reads"), true);
  EXPECT_EQ(j.size(), 19u);
}

}  // namespace
}  // namespace dpukit::kv
