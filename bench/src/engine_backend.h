// The engine backend (private to bench): an operator on a BlueField's
// hardware engine (core's Engine), driven from dpu threads through DOCA's job
// interface (EngineQueue: submit, progress, completions), its job bodies the
// lib backend's kernels run on the hw place's executor threads.
//
// Timing (time_engine): the engine's rate is beyond what this machine's CPUs
// compute, so each submitting thread runs a virtual clock: it advances by the
// thread's own CPU time per loop step (less one read of its CPU clock, the
// emulator's cost) divided by F (what building, posting and polling jobs
// costs a dpu core at that speed) and, when the thread has
// nothing to do but wait, jumps to the next modelled completion and waits for
// the executor with wait_computed(), which costs no model time. Throughput is
// jobs over the longest thread's virtual time (docs/bench.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/engine.h"
#include "operator.h"

namespace dpukit::bench {

// What the kernels of one (operator, size) share: the engine, the lib
// kernels its executors run the bodies with (one per executor, lent out per
// job), and the model's clock between points and checks.
struct EngineShared {
  ~EngineShared();
  std::vector<std::unique_ptr<Kernel>> owned;  // the lib kernels
  std::mutex mu;
  std::condition_variable returned;
  std::vector<Kernel*> idle;  // lib kernels no body is using
  std::unique_ptr<Engine> engine;  // declared after the kernels: its executors stop before they go
  Operator::EngineWork work;
  uint64_t job_bytes = 0;  // what one job costs the engine; 0: its input's size
  // Where the model's time has reached: checks and timed phases start here,
  // so that their jobs never queue behind an earlier phase's.
  std::atomic<uint64_t> clock{0};
  void run_body(std::span<const uint8_t> in, Bytes& out);  // on an executor
};

// An operator made of others (Table 5's programs, ops/programs.cc). On the
// engine backend its one component with an engine runs there, and the
// others run on the submitting dpu thread as each job completes (IPS:
// rxp_match on the RXP, tcp_seg on the Arm core).
class ComposedOperator {
 public:
  virtual ~ComposedOperator() = default;
  // The components, in the order a unit of work meets them.
  virtual std::vector<const Operator*> components() const = 0;
  // The composed output from every component's output, in order.
  virtual void join_parts(std::span<const Bytes* const> parts, Bytes& out) const = 0;
};

// One dpu thread's context on the engine: its task pool (an EngineQueue of
// `depth` tasks) and one output buffer per task.
class EngineKernel final : public Kernel {
 public:
  EngineKernel(std::shared_ptr<EngineShared> shared, unsigned depth = 1);
  ~EngineKernel() override;
  // One job, waited for (the check's path): the engine's output is the
  // library's, computed on the hw place.
  void process(std::span<const uint8_t> in, Bytes& out) override;

  // A new task pool of `depth` tasks (nothing may be in flight).
  void set_depth(unsigned depth);
  unsigned depth() const { return queue_->depth(); }
  size_t in_flight() const { return queue_->in_flight(); }
  // doca_task_submit of one job on `in` at `now_ns`; false when the pool is
  // used up. `in` must stay valid until the job is reaped.
  bool post(std::span<const uint8_t> in, uint64_t now_ns);
  // doca_pe_progress at `now_ns`: takes the completed jobs, rethrows what a
  // body threw, folds each output into `sink`; returns how many. Adds each
  // job's modelled latency (completion - submission) to `latency_ns`.
  size_t reap(uint64_t now_ns, uint64_t& sink, uint64_t& latency_ns);
  std::optional<uint64_t> next_completion_ns() const { return queue_->next_completion_ns(); }
  void wait_computed() { queue_->wait_computed(); }
  EngineShared& shared() { return *shared_; }
  // A composed operator's kernel: the job computes component `engine_part`,
  // and `dpu_parts` (one lib kernel per component, null at engine_part) the
  // others on this thread when the job completes, in process() and reap().
  void set_program(const ComposedOperator* program, size_t engine_part,
                   std::vector<std::unique_ptr<Kernel>> dpu_parts);

 private:
  EngineJob job(std::span<const uint8_t> in, Bytes* out, uint64_t user) const;
  // The composed output for `in` whose engine part is `engine_out`.
  void finish(std::span<const uint8_t> in, const Bytes& engine_out, Bytes& out);

  std::shared_ptr<EngineShared> shared_;
  std::unique_ptr<EngineQueue> queue_;
  std::vector<Bytes> outs_;     // one per task of the pool
  std::vector<uint32_t> free_;  // tasks not in flight
  std::vector<EngineCompletion> done_;
  // A composed operator (set_program): its other components' kernels, each
  // task's input, and the buffers its output is joined from.
  const ComposedOperator* program_ = nullptr;
  size_t engine_part_ = 0;
  std::vector<std::unique_ptr<Kernel>> dpu_parts_;
  std::vector<std::span<const uint8_t>> ins_;  // one per task of the pool
  std::vector<Bytes> part_outs_;
  std::vector<const Bytes*> part_ptrs_;
  Bytes engine_out_, joined_;
};

// The engine kernels of `op` at `size` for `threads` dpu threads on
// `generation`'s engine, its executors one per CPU of `hw_cpus` (one,
// unpinned, when empty). Throws Unavailable naming the generation when it has
// no such engine, the engine lacks the operator's algorithm or operation, or
// the operator has no engine; what the lib backend throws otherwise.
std::vector<std::unique_ptr<Kernel>> make_engine_kernels(const Operator& op, size_t size, unsigned threads,
                                                         const std::string& generation, const CpuSet& hw_cpus);

// The kernels of any backend: the engine's through make_engine_kernels, the
// others through the operator.
std::vector<std::unique_ptr<Kernel>> make_backend_kernels(const Operator& op, Backend backend, size_t size,
                                                          unsigned threads, const std::string& generation,
                                                          const CpuSet& hw_cpus);

// One timed phase of the engine backend's loop, summed over its threads.
struct EnginePhase {
  uint64_t jobs = 0;
  uint64_t virtual_ns = 0;  // the longest thread's virtual time
  uint64_t wall_ns = 0;
  uint64_t dpu_cpu_ns = 0;      // the submitting threads' own CPU time (before dividing by F)
  uint64_t latency_ns = 0;      // sum over jobs of their modelled completion - submission
  uint64_t waits = 0;           // times a thread had nothing to do but wait for a completion
  uint64_t clock_read_ns = 0;   // one CPU-clock read's CPU time, taken off each step (median over threads)
  Engine::Stats engine;         // the engine's counters over the phase
};

struct EngineTimingOptions {
  unsigned threads = 1;
  unsigned depth = 1;
  double factor = 1.0;  // F of the dpu place: a step's CPU time / F is its model time
  double warmup_s = 0.2, phase_s = 0.5;
  unsigned phases = 5;   // timed, after the warm-up
  CpuSet cpus;           // the submitting threads are pinned to these (round robin); empty: not pinned
};

// Warm-up, then `phases` timed phases of the virtual-clock loop on
// `kernels[0..threads)` (all EngineKernels of one engine), each thread
// cycling through `inputs` from its own start. Every phase drains its jobs
// before it ends.
std::vector<EnginePhase> time_engine(std::vector<std::unique_ptr<Kernel>>& kernels,
                                     const std::vector<std::span<const uint8_t>>& inputs,
                                     const EngineTimingOptions& o, uint64_t& sink);

// A thread's virtual clock may run at most this far (model time) ahead of
// the slowest other thread's before it sleeps until they catch up (wall
// time, not billed): the engine model is shared, and a job submitted at a
// later clock reserves the units before one submitted at an earlier clock.
// A named guess, a few jobs' latency: small against a phase (tens to
// hundreds of ms of model time), large against one loop step.
constexpr uint64_t kLockstepWindowNs = 20'000;

}  // namespace dpukit::bench
