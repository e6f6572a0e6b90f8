// The pipelined execution model (the paper's hardware multi-thread model,
// §IV-D): each processing module after the parser runs on a thread of its
// own — the match-action stage (filter and router) and the deparser — joined
// by core's SPSC rings. The worker's event loop stays the connection and
// parser stage; a request's metadata goes round the stages and comes back to
// it. A consumer that finds its ring empty sleeps on an eventfd, rung by the
// producer only when the ring was empty.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "dpukit/core/ring.h"

namespace dpukit::mesh {

class Worker;

// A request in the pipeline. The stages call these in order, each on its own
// thread; between the calls the request belongs to nobody else (the ring's
// release/acquire orders what each stage wrote).
struct PipelineClient {
  virtual ~PipelineClient() = default;
  virtual void stage_match_action() = 0;              // the filter and router modules
  virtual void stage_deparse() = 0;                   // the deparser module
  virtual void stage_done(uint64_t generation) = 0;   // back on the worker's thread
};

struct StageItem {
  PipelineClient* client;
  uint64_t generation;
};

class Pipeline {
 public:
  // `cpus`: where the stage threads run (round robin); empty: unpinned.
  Pipeline(Worker& worker, std::vector<int> cpus);
  ~Pipeline();
  // From the worker's thread. False when the first ring is full (the caller runs the modules inline).
  bool submit(StageItem item);
  void stop();
  uint64_t stage_cpu_ns() const { return cpu_ns_.load(std::memory_order_relaxed); }

 private:
  struct Link;  // a ring and its doorbell
  void stage_loop(int index, Link& in, Link* out, int cpu);
  void arm_return();

  Worker& worker_;
  std::unique_ptr<Link> to_match_, to_deparse_, to_worker_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> cpu_ns_{0};
  struct ReturnWatch;
  std::unique_ptr<ReturnWatch> watch_;
};

}  // namespace dpukit::mesh
