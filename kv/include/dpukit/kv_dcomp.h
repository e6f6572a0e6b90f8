// The DComp baseline (PulseDB §IV-A; Ding et al., ICPP'23): whole compaction
// jobs that start at L1 or deeper run in a separate worker process that
// stands for the DPU's Arm cores; L0->L0 and L0->L1 stay on the host.
//
// Primary side (DcompOffload): a rocksdb::CompactionService. For each
// (sub)compaction RocksDB calls StartV2 with the serialized
// CompactionServiceInput; we take the output level from that input and the
// start level from the OnCompactionBegin event of the same job
// (CompactionServiceJobInfo carries neither), keep level-0 work local
// (kUseLocal), and send the rest to the worker, one connection per job
// (kv/src/dcomp/wire.h). RocksDB's compaction thread then blocks in
// WaitForCompleteV2 until the worker answers with the serialized
// CompactionServiceResult; RocksDB renames the outputs from the job's
// directory into the DB and installs them.
//
// Which compactions go (PulseDB Figs. 2-3, how much whole-task offloading
// costs when the DPU is slow): those starting at `first_level` or deeper (1:
// DComp's; 0 also sends L0->L1), and of those the fraction `share`, spread
// evenly over them; intra-L0 compactions always stay.
//
// Worker side (run_worker): a long-lived process that runs
// DB::OpenAndCompact per job in a thread of its own, writing into the job's
// output directory through JobDirGuardFs (kv/src/dcomp/guard_fs.h), its
// thread time-dilated to the dpu's speed (WorkerOptions::dpu_speed).
//
// Failure: a job the worker does not finish — it reports an error, dies, or
// does not answer within the job time-out — falls back to the host:
// WaitForCompleteV2 answers kUseLocal and RocksDB runs that compaction
// itself. A worker that died or hung is killed and started again (at most
// max_restarts times; after that every compaction runs on the host).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include "dpukit/core/accounting.h"

namespace dpukit::kv {

struct DcompConfig {
  // The worker's command line; the primary appends "--listen SOCKET".
  std::vector<std::string> worker_command;
  CpuSet worker_cpus;      // the DPU's cores; empty: every CPU this process was started with
  std::string worker_log;  // the worker's stdout and stderr; empty: this process's
  unsigned slots = 4;      // jobs the worker runs at once; a job finding all busy runs on the host
  int first_level = 1;     // compactions from this level down may go to the worker (0: L0->L1 too)
  double share = 1.0;      // of those, this fraction goes (spread evenly); the rest stays on the host
  std::string dir;         // parent of the per-job output directories, on the DB's file system
  // A job not answered in this time is given up: its compaction runs on the
  // host and the worker is restarted. Zero: wait as long as it takes.
  std::chrono::milliseconds job_timeout{0};
  unsigned max_restarts = 3;  // restarts of a worker that died or hung
  // Fault injection for tests: the worker dies (or hangs) on the Nth job the
  // primary sends it, counted over every worker it started; 0: never.
  uint64_t die_on_job = 0;
  uint64_t hang_on_job = 0;
};

struct DcompState;

class DcompOffload {
 public:
  // Starts the worker and waits until it listens; throws std::runtime_error
  // if it cannot. Call before the DB opens, so the worker is there for the
  // first compaction (and the fork happens while RocksDB has no threads yet).
  explicit DcompOffload(const DcompConfig& cfg);
  ~DcompOffload();  // kills the worker if finish() did not stop it
  DcompOffload(const DcompOffload&) = delete;
  DcompOffload& operator=(const DcompOffload&) = delete;

  // Sets the compaction service and the listener. Also gives RocksDB
  // cfg.slots more compaction threads than the host's own: a thread waiting
  // for the worker uses no host CPU, so the host keeps its full set of
  // compaction threads for local work, as DComp's host keeps its compaction
  // slots while the DPU runs others.
  void install(rocksdb::Options& o, int flush_threads, int compaction_threads);

  // Waits up to `timeout` for a worker to be serving (after a restart);
  // returns how many were started so far, or 0 if none is serving.
  unsigned wait_for_worker(std::chrono::milliseconds timeout);

  struct Summary {
    nlohmann::json json;
    uint64_t worker_cpu_ns = 0;  // every worker process's CPU time (wait4): the "dpu" CPU
    uint64_t jobs_in_worker = 0;
  };
  // After the DB is closed: collects the worker's counters, stops it, reaps it.
  Summary finish();

 private:
  std::shared_ptr<DcompState> state_;
};

struct WorkerOptions {
  std::string listen;                                     // socket name ('@name': abstract namespace)
  std::shared_ptr<rocksdb::FileSystem> fs;                // the file system the jobs run on
  std::shared_ptr<rocksdb::TableFactory> table_factory;  // must write the tables the primary would
  double dpu_speed = 1.0;  // F of a host core (--dpu-speed): each job's thread is time-dilated to it
};

// Serves jobs until a primary asks it to stop; returns the exit code.
int run_worker(const WorkerOptions& options);

}  // namespace dpukit::kv
