// dpukit kv, the dpu side of PulseDB (docs/architecture.md §3.2): the agent
// that owns the SST file pool and serves the write-persist queue pairs of
// RocksDB hosts, one engine per queue pair on a thread of its own, and the
// operator's view of a pool. build/bin/dpukit-agent drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpukit/core/accounting.h"  // CpuSet
#include "dpukit/core/dpu_speed.h"

namespace dpukit::kv {

// How the engine hands its SQEs to the kernel (PulseDB §IV-E compares them).
enum class IoEngine {
  kIoUring,       // io_uring_submit: one io_uring_enter per batch
  kIoUringSqpoll, // IORING_SETUP_SQPOLL: a kernel thread polls the SQ, no system call per batch
  kPwrite,        // plain system calls (pwrite, sync_file_range, fsync, close), each waited for in turn
  // Linux AIO (libaio): writes and fsyncs as iocbs (io_submit per batch, io_getevents in the polling
  // thread); sync_file_range and close have no iocb and are system calls (close once its fsync completed).
  kLibaio,
};
const char* io_engine_name(IoEngine e);
IoEngine parse_io_engine(const std::string& name);  // throws std::invalid_argument naming the choices

struct AgentOptions {
  std::vector<std::string> command_line;  // what ran: the statistics record it
  std::string listen;                     // the Unix socket hosts connect to
  std::string stats;                      // where write_stats() writes; empty: nowhere
  struct Pool {
    std::string dir;  // created if missing: every slot is written out once (slots x slot_bytes)
    uint64_t slots = 64;
    uint64_t slot_bytes = 72ull << 20;
  };
  std::optional<Pool> pool;  // none: every SST file is a normal file at its name
  CpuSet cpus;               // the dpu place, as recorded; pinning is the caller's
  DpuSpeed dpu_speed;        // the engines' threads are dilated to it
  // O_DIRECT where the filesystem takes it, so that the kernel's work for the
  // writes runs in the agent's threads, not in writeback kworkers.
  bool direct_io = true;
  IoEngine io_engine = IoEngine::kIoUring;
};

// The agent's statistics are a dpukit.result/1 whose cpu_ns.dpu is its CPU
// time so far and cpu_ns.hw its DMA threads' (they stand for the DPU's DMA
// engine). Block SIGPIPE, and any signal the caller reads itself, before
// making an Agent: its threads inherit the mask.
class Agent {
 public:
  // Opens (or creates) the pool, then listens; logs both. Throws
  // std::runtime_error naming the problem (the pool in use by another
  // process, its geometry, no space; the socket).
  explicit Agent(const AgentOptions& options);
  ~Agent();  // stop()
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Readable when a host waits to be taken (poll it with the caller's own fds).
  int listen_fd() const;
  // Takes a waiting host (up to 1 s for its handshake) and serves its queue
  // pair on a new thread. A failed handshake or engine start is logged and
  // costs only that host its queue pair.
  void accept();
  // Joins the threads of queue pairs that ended (a host that dies ends only its own).
  void reap();
  // Looks again, every few seconds at most, at the quarantined slots: they
  // leave quarantine when their owner is back.
  void recheck_pool();
  // Stops taking hosts (the socket file goes), lets every queue pair finish
  // its I/O in flight and joins them. Idempotent.
  void stop();
  // Writes the statistics to options.stats, if set; a failure is logged.
  void write_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A claimed slot the pool cannot account for: kept, reported, never claimed,
// until its owner is back or an operator releases it.
struct QuarantinedSlot {
  uint32_t slot;
  std::string owner;   // as recorded; empty if the record is damaged
  std::string reason;  // why it cannot be shown free
  uint64_t bytes;      // the data it holds
};

// What `dpukit-agent pool check` finds: the pool read as it is on disk,
// without its lock (the agent may be running and writing records).
struct PoolCheck {
  enum class Verdict { kFree, kInUse, kReclaimable, kQuarantined };
  struct SlotReport {
    uint32_t slot;
    Verdict verdict;
    std::string owner;
    std::string reason;
    uint64_t bytes;      // data in the slot (its size; a free slot's size if written out)
    uint64_t allocated;  // bytes allocated to it
  };
  std::string dir;
  bool usable = false;  // false: no pool here, or its index cannot be read
  std::string problem;  // why not usable
  bool in_use = false;  // an agent (or plugin) holds the pool now
  uint32_t version = 0;
  uint64_t slots = 0, slot_bytes = 0;
  std::vector<SlotReport> reports;
  std::vector<std::string> findings;  // each a sentence; empty when clean
};
// `db_dir`, if not empty: also every symlink in it into the pool, checked
// against the slot's record.
PoolCheck check_pool(const std::string& dir, const std::string& db_dir = "");
const char* verdict_name(PoolCheck::Verdict v);

// `dpukit-agent pool release`: an operator frees a quarantined slot of the
// pool at `dir` (its data goes). Opens the pool, so no agent may hold it:
// throws std::runtime_error (saying "in use by another process" when one
// does; release_quarantined_slot_through below goes through that agent).
struct SlotRelease {
  std::optional<QuarantinedSlot> released;  // what the slot held; none: it was not quarantined
  size_t slots = 0;                         // the pool's slots (a larger number names no slot)
};
SlotRelease release_quarantined_slot(const std::string& dir, uint32_t slot);
// The same through the running agent that holds the pool, listening at
// `socket` (a queue pair of its own): the agent frees the slot only if it is
// quarantined now and `dir` is its own pool. The owner and reason reported
// are what the pool's index said just before (check_pool). Throws
// std::runtime_error when the agent cannot be reached or does not speak the
// request, holds another pool, or fails the release (the slot then stays
// quarantined).
SlotRelease release_quarantined_slot_through(const std::string& socket, const std::string& dir, uint32_t slot);

// Deletes the files of the DB directory `db_dir` that are slots of the pool
// at `pool_dir`, as the agent does when RocksDB deletes them: each symlink in
// it that is the recorded owner of a slot in use is removed and its slot
// released (written out, if `written_out`: the pool's layout, false for
// filepool's). Nothing else is touched: a link that is not its slot's owner,
// other files, other slots. Opens the pool, so no agent may hold it (throws
// std::runtime_error then, or if there is no pool). Returns the slots
// released. `dpukit-kv bench` uses it to keep one pool across runs.
size_t release_db_slots(const std::string& pool_dir, const std::string& db_dir, bool written_out = true);

}  // namespace dpukit::kv
