// The DComp baseline (PulseDB §IV-A; Ding et al., ICPP'23): whole compaction
// jobs that start at L1 or deeper run in a separate worker process that
// stands for the DPU's Arm cores; L0->L0 and L0->L1 stay on the host.
//
// Primary side: a rocksdb::CompactionService. For each (sub)compaction
// RocksDB calls StartV2 with the serialized CompactionServiceInput; we take
// the output level from that input and the start level from the
// OnCompactionBegin event of the same job (CompactionServiceJobInfo carries
// neither), keep level-0 work local (kUseLocal), and send the rest to the
// worker over a Unix socket, one connection per job. RocksDB's compaction
// thread then blocks in WaitForCompleteV2 until the worker answers with the
// serialized CompactionServiceResult; RocksDB renames the outputs from the
// job's directory into the DB and installs them.
//
// Worker side (`dpukit-kvbench dcomp-worker`): a long-lived process that runs
// DB::OpenAndCompact per job in a thread of its own, writing into the job's
// output directory through a FileSystem that refuses to delete or overwrite
// anything outside that directory. That guards RocksDB 7.8.3's bug where an
// empty subcompaction output deletes TableFileName(cf_paths, n) — a path in
// the PRIMARY's directory, possibly a live SST (compaction_job.cc:1560).
//
// Failure: a worker that dies or drops the connection fails the job
// (kFailure), never hangs it. RocksDB keeps the inputs; the listener stops
// that one failure from becoming a fatal background error (it would stop all
// writes), and later jobs run on the host.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <rocksdb/options.h>

#include "dpukit/core/cli.h"
#include "options.h"

namespace dpukit::kv::bench {

struct DcompConfig {
  unsigned slots = 4;
  std::string worker_cpus;  // empty: the worker runs wherever the OS puts it
  std::string dir;          // parent of the per-job output directories
  uint64_t die_on_job = 0;  // fault injection: the worker dies on this job (1-based); 0 = never
};

// --mode and the dcomp options, shared by fill, overwrite and ycsb.
void add_mode_flags(ArgParser& p);
bool dcomp_mode(const ArgParser& p);  // false for --mode local; fails on anything else
DcompConfig dcomp_config(const ArgParser& p, const DbConfig& db);

struct DcompState;

class DcompOffload {
 public:
  // Starts the worker (pinned to cfg.worker_cpus) and waits until it listens.
  // Call before the DB opens, so the worker is there for the first compaction
  // (and the fork happens while RocksDB has no threads yet).
  DcompOffload(const DbConfig& db, const DcompConfig& cfg);
  ~DcompOffload();  // kills the worker if finish() did not stop it
  DcompOffload(const DcompOffload&) = delete;
  DcompOffload& operator=(const DcompOffload&) = delete;

  // Sets the compaction service and the listener. Also gives RocksDB
  // cfg.slots more compaction threads than --max-background-jobs would: a
  // thread waiting for the worker uses no host CPU, so the host keeps its
  // full set of compaction threads for local work, as DComp's host keeps its
  // compaction slots while the DPU runs others.
  void install(rocksdb::Options& o, const DbConfig& db);

  struct Summary {
    nlohmann::json json;
    uint64_t worker_cpu_ns = 0;  // the worker process's CPU time (wait4), the "dpu" CPU
    uint64_t jobs_in_worker = 0;
  };
  // After the DB is closed: collects the worker's counters, stops it, reaps it.
  Summary finish();

 private:
  std::shared_ptr<DcompState> state_;
};

// `dpukit-kvbench dcomp-worker --listen SOCKET`.
int cmd_dcomp_worker(int argc, char** argv);
// `dpukit-kvbench dcomp-selfcheck --db DIR`: makes RocksDB 7.8.3's
// empty-output bug happen in the worker and checks the guard stops it.
int cmd_dcomp_selfcheck(int argc, char** argv);

}  // namespace dpukit::kv::bench
