// A BlueField's hardware engines (hw place): regular expressions (RXP),
// deflate compression and decompression, bulk crypto, public key (PKA).
// docs/core.md ("The engines") gives every parameter's source.
//
// An engine does its work without the Arm cores. Here its work is done by
// the field's library (Hyperscan, ISA-L, OpenSSL: the caller's job body) on
// an executor thread of the hw place, so a job's output is exactly what the
// library gives, and its CPU time is hw time, never dpu time. When a job
// completes is the model's: a queue of `parallel` units, each running at
// 1/parallel of the engine's rate, plus a fixed latency per job.
//
// The dpu side uses it as DOCA's job interface: a task is allocated from a
// context's pool (EngineQueue::submit refuses when the pool is used up, as
// doca_task_submit does), the progress engine is polled
// (EngineQueue::progress, doca_pe_progress) and hands back completed tasks.
// The dpu pays what a real driver costs on its own thread: building and
// posting a job, and polling for completions.
//
// Time: every call takes the caller's clock, and each queue says which kind
// it is (EngineQueue::Clock). A program in real time passes now_ns()
// (kReal); a completion is then handed back at its modelled time or, when
// the executor has not finished computing it by then, when it has (the
// emulator's CPU was the bottleneck, counted in late_jobs). A benchmark that
// wants the engine's rate beyond what the emulator's CPUs can compute runs a
// virtual clock (its threads' dilated CPU time, advanced to the next
// completion while it would wait) and waits for the computation with
// wait_computed(), which costs no model time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"

namespace dpukit {

enum class EngineKind { kRegex, kCompress, kDecompress, kBulkCrypto, kPublicKey };
const char* engine_kind_name(EngineKind k);          // "regex", "compress", "decompress", "crypto", "pka"
EngineKind parse_engine_kind(const std::string& s);  // throws std::invalid_argument naming the kinds

// One figure of an engine's model and where it comes from: a public source,
// or a named guess ("guess: ...") where no public source gives it.
struct EngineFigure {
  double value = 0;
  std::string source;
  bool guess() const { return source.rfind("guess", 0) == 0; }
};

// The model of one engine of one BlueField generation.
struct EngineSpec {
  std::string generation;  // "bluefield2", "bluefield3"
  EngineKind kind;
  std::string name;        // the card's name for it: "RXP", "deflate engine", "PKA", ...
  // Byte engines (regex, compress, decompress, crypto): the whole engine's
  // throughput in bytes per second: of input, but for decompression, whose
  // rate is of the output it writes. 0 for the PKA.
  EngineFigure bytes_per_s;
  // The PKA: operations per second of the whole engine, per operation
  // ("rsa2048_sign", "rsa2048_verify", "dsa2048_sign", "ecdsa_p256_sign",
  // ...). Empty for byte engines.
  std::vector<std::pair<std::string, EngineFigure>> ops_per_s;
  // Algorithms it runs ("AES-GCM", "AES-XTS", "deflate", "lz4", ...): what a
  // caller checks before it routes work here. The RXP: empty.
  std::vector<std::string> algorithms;
  EngineFigure latency_ns;   // per job at no load, beyond its service time
  EngineFigure queue_depth;  // the most jobs one queue (a DOCA context's task pool) holds in flight
  EngineFigure parallel;     // jobs the engine runs at once
  nlohmann::json to_json() const;  // every figure with its source
};

// Thrown when a generation has no such engine (e.g. no RXP on BlueField-3);
// its message names the generation and the engine.
struct EngineUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::span<const EngineSpec> engine_specs();  // every engine of every generation
// The engine of `kind` on `generation`; throws EngineUnavailable naming the
// generation when it has none, std::invalid_argument for an unknown
// generation (naming the known ones).
const EngineSpec& engine_spec(const std::string& generation, EngineKind kind);
// The BlueField generation a dpu speed stands for ("bluefield2" for the
// preset of that name); throws std::invalid_argument when it names none (a
// bare factor, or "host"): engines exist only on a named card.
std::string engine_generation(const DpuSpeed& speed);

// One job: what it costs the engine (bytes, or one operation of the PKA) and
// the work that gives its output, run on the executor (the hw place).
struct EngineJob {
  uint64_t bytes = 0;      // byte engines: the input's size
  std::string operation;   // the PKA: one of spec.ops_per_s's names
  std::function<void()> body;  // computes the output; runs on an executor thread, once
  uint64_t user = 0;       // handed back with the completion
};

struct EngineCompletion {
  uint64_t user = 0;
  uint64_t submitted_ns = 0, completed_ns = 0;  // on the caller's clock, as modelled
  std::exception_ptr error;  // what the body threw, if it did
};

// The engine: its model (the units' schedule) and the executor threads that
// compute the jobs. Shared by every queue on it; thread-safe.
class Engine {
 public:
  // `executors` threads run the job bodies, pinned to `hw_cpus` (empty: not
  // pinned). Throws std::invalid_argument when executors is 0.
  //
  // An executor with nothing to do sleeps, and a real clock's submit that
  // finds every executor asleep wakes one: a futex wake the submitting (dpu)
  // thread pays, 2.2-2.9 us of its CPU on our 2-CPU VM when the executor
  // shares its CPU and 7-9.4 us when it wakes another, idle CPU
  // (dpukit-core engine-bench, depth 1), where a driver's doorbell is one
  // store to the device (a virtual clock's wait pays it instead:
  // EngineQueue::Clock). An executor wakes the next itself when there is
  // work for more than one. `idle_poll_ns` > 0 makes
  // an executor poll that long for new work before it sleeps, so a dpu thread
  // submitting at shorter gaps pays no wake-up; the polling burns the
  // executor's CPU (not counted in hw_cpu_ns), so give it only to executors
  // on CPUs of their own: on a CPU it shares with the dpu thread, the poll
  // would take the CPU from the thread that waits for its result.
  explicit Engine(const EngineSpec& spec, unsigned executors = 1, const CpuSet& hw_cpus = {},
                  uint64_t idle_poll_ns = 0);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineSpec& spec() const { return spec_; }
  // The model alone: when a job of this cost submitted at `at_ns` completes,
  // with the units reserved for it (thread-safe). Throws
  // std::invalid_argument for a PKA operation the spec does not list, a job
  // without one on the PKA, or an operation or bytes on an engine that does
  // not count them. A unit keeps the fraction of a nanosecond its jobs' service
  // times leave, so a long run's rate is the spec's, not a rounded one's.
  uint64_t schedule(uint64_t at_ns, const EngineJob& job);
  // Service time of one job on one unit (no queueing, no latency), rounded
  // to the nearest nanosecond; same refusals as schedule().
  uint64_t service_ns(const EngineJob& job) const;

  struct Stats {
    uint64_t jobs = 0, bytes = 0;
    uint64_t busy_ns = 0;      // unit-time the model spent serving (sum over units)
    // CPU time of the executors while they have work (the bodies and their
    // hand-over; not sleeping or idle polling): hw. Read when an executor's
    // work runs out (so complete once every job in flight has been
    // computed) and every 64 jobs within a longer stretch.
    uint64_t hw_cpu_ns = 0;
    uint64_t late_jobs = 0;    // real-time queues: computed after their modelled completion
    uint64_t wakeups = 0;      // submits that woke a sleeping executor (see the constructor)
  };
  Stats stats() const;

 private:
  friend class EngineQueue;
  struct Pending;
  // When a unit is next free: whole nanoseconds on the callers' clock and the
  // fraction [0, 1) its last job's service left.
  struct Unit {
    uint64_t free_ns = 0;
    double frac = 0;
  };
  double exact_service_ns(const EngineJob& job) const;  // validates the job
  // Queues `p` for the executors; wakes a sleeping one when `wake` (a real
  // clock's submit), else leaves that to wait_computed().
  void post(Pending* p, bool wake);
  // With work_mu_ held: wakes a sleeping executor if work waits for one;
  // `by_caller` counts it in wakeups (an executor waking the next does not).
  void wake_one_locked(bool by_caller);
  void run_executor(size_t i);
  // Blocks until `p`'s body has run (work_mu_, done_cv_), waking an executor
  // first if every one sleeps.
  void wait_computed(const Pending* p);
  void wake_if_sleeping();

  EngineSpec spec_;
  unsigned parallel_ = 1;
  double unit_ns_per_byte_ = 0;  // one unit's service time per byte (byte engines)
  uint64_t latency_ns_ = 0;
  mutable std::mutex mu_;  // the model: units_ and stats_
  std::vector<Unit> units_;
  Stats stats_;
  double busy_exact_ns_ = 0;  // stats_.busy_ns before rounding
  std::atomic<uint64_t> hw_cpu_ns_{0}, late_jobs_{0}, wakeups_{0};  // added by the executors, post()
  uint64_t idle_poll_ns_ = 0;
  std::mutex work_mu_;  // work_, stopping_, every Pending's `computed` flag
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;  // a body has run and someone waits for one
  unsigned done_waiters_ = 0;
  unsigned idle_executors_ = 0;  // asleep on work_cv_
  unsigned signaled_ = 0;        // of those, woken and not yet running
  std::deque<Pending*> work_;
  std::atomic<size_t> work_size_{0};  // work_.size(), for polling without the lock
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> executors_;
  CpuSet hw_cpus_;
};

// One DOCA context's task pool and its progress engine, owned by one dpu
// thread (not thread-safe; any number of queues share an Engine, which must
// outlive them).
class EngineQueue {
 public:
  // What the caller's clock is. kReal: now_ns() (CLOCK_MONOTONIC), so a job
  // whose body finishes after its modelled completion counts in late_jobs,
  // and a submit wakes a sleeping executor at once (the body must run now).
  // kVirtual: any other clock (a benchmark's dilated CPU time, a test's
  // counter); computing never makes a job late on it, since the caller waits
  // for it (wait_computed) without advancing its clock. Its submits wake no
  // executor: wait_computed() does, so the wake-up (the emulator's cost, not
  // a driver's) falls in the wait a virtual clock does not bill; progress()
  // does too when it finds a job due and not computed.
  enum class Clock { kReal, kVirtual };
  // depth 0: the spec's queue depth. The task pool is allocated here, once:
  // submit() allocates nothing of its own.
  explicit EngineQueue(Engine& engine, unsigned depth = 0, Clock clock = Clock::kReal);
  ~EngineQueue();  // waits for the jobs still computing
  EngineQueue(const EngineQueue&) = delete;
  EngineQueue& operator=(const EngineQueue&) = delete;

  unsigned depth() const { return depth_; }
  size_t in_flight() const { return pending_.size(); }
  // doca_task_submit: false when `depth` jobs are in flight (the pool is
  // used up; progress() frees them). Throws std::invalid_argument for a job
  // the engine refuses (Engine::schedule) or one without a body, before it
  // takes a task or a unit.
  bool submit(EngineJob job, uint64_t now_ns);
  // doca_pe_progress: appends the jobs whose modelled completion is at or
  // before `now_ns` and whose body has run, oldest completion first; returns
  // how many. A job due but still computing stays in flight and does not
  // hold back the ones due after it.
  size_t progress(uint64_t now_ns, std::vector<EngineCompletion>& out);
  // The earliest modelled completion in flight (none when nothing is).
  std::optional<uint64_t> next_completion_ns() const;
  // Blocks until the job completing first (in the model) has been computed;
  // for virtual clocks, which must not advance while the emulator computes.
  // Returns at once when nothing is in flight.
  void wait_computed();

 private:
  Engine& engine_;
  unsigned depth_;
  Clock clock_;
  std::unique_ptr<Engine::Pending[]> tasks_;  // the pool: depth_ tasks
  std::vector<Engine::Pending*> free_;        // tasks not in flight
  std::vector<Engine::Pending*> pending_;     // in flight, by modelled completion (ties: submission order)
};

}  // namespace dpukit
