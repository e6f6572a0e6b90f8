// The settings as db_bench's flags and as JSON. Kept apart from
// rocksdb_options.cc: a driver that only runs db_bench (dpukit-kv) then
// links no RocksDB.
#include <cstdio>

#include "dpukit/kv_settings.h"

namespace dpukit::kv {

std::vector<std::string> db_bench_flags(const RocksDbSettings& s) {
  char fanout[32];
  std::snprintf(fanout, sizeof fanout, "%g", s.fanout);
  const int jobs = s.max_background_jobs;
  return {
      "--key_size=" + std::to_string(RocksDbSettings::kKeySize),
      "--value_size=" + std::to_string(s.value_size),
      "--compression_type=none",
      "--write_buffer_size=" + std::to_string(s.write_buffer_size),
      "--target_file_size_base=" + std::to_string(s.target_file_size),
      "--max_bytes_for_level_base=" + std::to_string(s.max_bytes_for_level_base),
      std::string("--max_bytes_for_level_multiplier=") + fanout,
      "--num_levels=" + std::to_string(s.num_levels),
      "--max_background_jobs=" + std::to_string(jobs),
      "--max_background_compactions=" + std::to_string(jobs - 1),
      "--max_background_flushes=1",
      "--level0_slowdown_writes_trigger=" + std::to_string(s.l0_slowdown),
      "--level0_stop_writes_trigger=" + std::to_string(s.l0_stop),
      "--writable_file_max_buffer_size=" + std::to_string(s.file_buffer),
      "--bloom_bits=" + std::to_string(s.bloom_bits),
      "--cache_size=" + std::to_string(s.cache_size),
      "--block_size=" + std::to_string(s.block_size),
      std::string("--use_direct_reads=") + (s.direct_reads ? "true" : "false"),
  };
}

void to_json(nlohmann::json& j, const RocksDbSettings& s) {
  j = {{"key_size", RocksDbSettings::kKeySize},
       {"value_size", s.value_size},
       {"compression", "none"},
       {"compaction_style", "leveled"},
       {"write_buffer_size", s.write_buffer_size},
       {"target_file_size", s.target_file_size},
       {"max_bytes_for_level_base", s.max_bytes_for_level_base},
       {"fanout", s.fanout},
       {"num_levels", s.num_levels},
       {"max_background_jobs", s.max_background_jobs},
       {"l0_slowdown", s.l0_slowdown},
       {"l0_stop", s.l0_stop},
       {"file_buffer", s.file_buffer},
       {"flush_threads", s.flush_threads()},
       {"compaction_threads", s.compaction_threads()},
       {"bloom_bits", s.bloom_bits},
       {"cache_size", s.cache_size},
       {"block_size", s.block_size},
       {"direct_reads", s.direct_reads}};
}

}  // namespace dpukit::kv
