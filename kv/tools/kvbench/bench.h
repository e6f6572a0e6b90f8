// One measured phase (fill, overwrite, a YCSB phase) against one DB: the
// client threads, and the driver around them that opens the DB in local or
// dcomp mode, measures, and reports on stdout and in the dpukit result JSON.
#pragma once

#include <cstdint>
#include <string>

#include "dpukit/core/cli.h"
#include "histogram.h"
#include "keyval.h"
#include "ycsb.h"

namespace rocksdb {
class DB;
}

namespace dpukit::kv::bench {

struct PhaseSpec {
  std::string command;          // "fill", "overwrite", "ycsb"
  Workload workload;
  uint64_t records = 0;         // records that exist before the phase (load: records to insert)
  uint64_t ops = 0;             // operations (load: = records)
  uint64_t key_space = 0;       // uniform key choice draws from [0, key_space)
  unsigned threads = 1;
  uint64_t seed = 1;
  size_t value_size = 1024;
  double zipf_constant = 0.99;
  Phase insert_phase = Phase::kRunInsert, update_phase = Phase::kRunUpdate;
};

struct PhaseResult {
  uint64_t ops = 0;
  double seconds = 0;
  LatencyHistogram latency[kOpTypes];
  uint64_t not_found = 0;     // reads (and read-modify-writes) of a key that was not there
  uint64_t scanned_rows = 0;
  std::string error;          // the first RocksDB error; the phase stops at it
};

// Runs the phase with spec.threads client threads (named "kvbench-client").
PhaseResult run_phase(rocksdb::DB& db, const PhaseSpec& spec);

// The flags every measured command shares besides the DB settings: --threads,
// --seed, --cpus, --json, --drain, and the --mode flags.
void add_run_flags(ArgParser& p);

// Parses the DB and run flags, opens the DB (fresh for fill/load unless
// --use-existing), runs the phase, and reports. Returns the exit code.
int run_measured(const ArgParser& p, PhaseSpec spec, const std::string& tool, int argc, char** argv,
                 bool fresh_db, bool create_db);

}  // namespace dpukit::kv::bench
