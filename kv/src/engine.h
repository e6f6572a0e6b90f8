// The write-persist engine (PulseDB §III-B3/B4): serves one queue pair. A
// request dispatcher (the thread calling serve) takes requests off the
// channel, copies payloads into engine-owned buffers (the channel's receive
// is the DMA read) and turns them into io_uring SQEs; a kWriteFrom's bytes
// are pulled from the host process's memory by a DMA thread (the DMA
// engine: hw), which then submits the write; a per-file context
// tracks in-flight I/O; user-space dependency tracking submits a range_sync
// only after the writes before it completed, and defers sync_close until all
// of the file's writes and syncs completed, then submits fsync linked
// (IOSQE_IO_LINK) to close. Files are independent of each other. A polling
// thread harvests CQEs, advances the file contexts and posts completions.
//
// The same engine runs in the dpu-side agent process (pulsedb) and in a
// thread of the host process (the async-host baseline).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "dpukit/core/channel.h"
#include "dpukit/kv_agent.h"  // IoEngine
#include "pool.h"

namespace dpukit::kv {

// One SQE handed to io_uring, or its CQE harvested: what the trace hook sees.
struct IoEvent {
  enum class Kind { kSubmit, kComplete };
  enum class Io { kWrite, kRangeSync, kFsync, kClose };
  Kind kind;
  Io io;
  uint64_t file;  // the file id
  uint64_t seq;   // kWrite: the write's number in its file (1, 2, ...); kRangeSync: writes sent before it
  int32_t res;    // kComplete: the CQE's result
};

// IoEngine, io_engine_name and parse_io_engine: dpukit/kv_agent.h (the agent's --io-engine).

struct EngineOptions {
  unsigned ring_entries = 256;                 // io_uring queue depth
  uint64_t max_inflight_bytes = 64ull << 20;   // write bytes in flight before the dispatcher waits
  // Files opened O_DIRECT (where the filesystem takes it): the kernel's work
  // for the writes runs in this process's threads, not in writeback kworkers.
  bool direct_io = true;
  // The dpu CPU's speed F (docs/core.md): everything the dispatcher, the
  // write thread, the polling thread and the DMA thread do is dilated to it
  // (Dilation), the channel's receive and the hand-offs between them
  // included; the pull's copy is the DMA engine's, not the dpu CPU's, and
  // is not. 1 in the host process (async-host).
  double dpu_speed = 1.0;
  IoEngine io_engine = IoEngine::kIoUring;
  // Called under the engine's lock for every IoEvent, in order (tests check
  // the dependency tracking with it). Keep it short.
  std::function<void(const IoEvent&)> trace;
};

// Counters shared by every queue pair of a process (relaxed atomics).
struct EngineStats {
  std::atomic<uint64_t> queue_pairs{0}, requests{0}, writes{0}, write_bytes{0}, range_syncs{0}, sync_closes{0},
      recycles{0}, files_opened{0}, pool_files{0}, normal_files{0}, direct_files{0}, errors{0};
  std::atomic<uint64_t> sqes_submitted{0}, submit_calls{0}, cqes_completed{0};
  // kLibaio: the ops done as system calls because AIO has no command for them (sync_file_range, close)
  // or the file system refused the IOCB_CMD_FSYNC (then every later fsync is a system call too).
  std::atomic<uint64_t> aio_sync_calls{0}, aio_fsync_refused{0};
  std::atomic<uint64_t> max_batch{0};           // most requests taken off a queue pair at once
  std::atomic<uint64_t> max_inflight_ios{0};    // most SQEs in flight at once
  std::atomic<uint64_t> inflight_ios{0};        // SQEs in flight now
  // The DMA stage: kWriteFrom pulls, their bytes, the ones refused or failed,
  // and the CPU time of the DMA threads (the hw share of the process's).
  std::atomic<uint64_t> pulls{0}, pull_bytes{0}, pull_failures{0}, pull_cpu_ns{0};
  // Busy time the engine's threads added to model a slower dpu CPU (0 at F = 1).
  std::atomic<uint64_t> dilated_ns{0};
  // Where a pull's time goes at the engine, summed over pulls (ns): from its
  // batch's receive until it is handed to the DMA thread (admission: the
  // requests before it, the write budget), until the DMA thread takes it,
  // until its completion is posted.
  std::atomic<uint64_t> pull_admit_ns{0}, pull_queue_ns{0}, pull_reply_ns{0};
};

class WritePersistEngine {
 public:
  // `pool` may be null: every file is then a normal file. Both must outlive serve().
  WritePersistEngine(SstPool* pool, EngineStats& stats, const EngineOptions& options = {});
  ~WritePersistEngine();

  // Serves `qp` until the host closes it in order or stop() is called
  // (returns) or the host is gone (throws ChannelError). Either way every
  // file left open is closed before it returns, and the slots of files whose
  // sync_close never came are recycled (their symlinks removed): the host
  // never installed them.
  void serve(ChannelDpu& qp);
  // Makes serve() stop taking requests, finish the I/O in flight, recycle
  // unfinished files as if the host were gone, and return (the agent's
  // shutdown). Any thread.
  void stop();

 private:
  struct Impl;
  Impl* impl_;
  SstPool* pool_;
  EngineStats& stats_;
  EngineOptions options_;
};

}  // namespace dpukit::kv
