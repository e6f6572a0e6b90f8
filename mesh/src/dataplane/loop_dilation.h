// The node proxy's loops at a dpu's speed (docs/mesh.md, "At BlueField
// speed"): every thread of the proxy (the workers' event loops, the pipeline
// stages, the control plane's loop and the xDS stream) runs on the dpu's
// Arm cores, so each is time-dilated with core's Dilation (docs/core.md).
//
// A loop pays after each batch of handlers, before it may block again, and a
// thread pays before it hands bytes to the kernel (or to a service's
// shared-memory ring): a reply then leaves only once the work it depends on
// has been paid for, so the latency it adds at the dpu's speed is exact, not
// a lower bound, up to one quantum's debt (below). At host speed (F = 1) none
// of this runs: the loop is Asio's plain run() and a write costs one
// thread-local load.
//
// Why a quantum: a payment reads the thread's CPU clock, a system call here
// (0.7-1.6 us on this VM, docs/core.md, "The model's own cost"), and a
// request of a few microseconds was written, and paid for, on its own, and
// its batch's end paid again. Where the clock reads outweigh a payment's
// debt they are work the full-speed loop does not do (issue 31). So both
// places pay only once the wall time since the last payment (the vDSO's
// monotonic clock) reaches a quantum whose debt is worth kPaymentsWorth
// payments' clock reads: quantum = kPaymentsWorth x overhead().pay_ns /
// (1/F - 1). Wall time since the last payment bounds the work since, so a
// reply leaves with at most that debt unpaid (kPaymentsWorth clock reads'
// worth, whatever F), carried into the next payment; a reply whose work
// exceeds the quantum, or that follows a wake from epoll, is paid for before
// it leaves, as before.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <cstdint>
#include <string>

#include "dpukit/core/dpu_speed.h"

namespace dpukit::mesh {

// What a group of loops (the data plane's, or the control plane's) dilated:
// the CPU time of their units of work and the busy time added after them
// (work x (1/F - 1)), and how many batches their event loops paid for.
struct DilationCounters {
  std::atomic<uint64_t> work_ns{0}, dilated_ns{0}, batches{0};
};

// One thread's Dilation at the proxy's dpu speed, adding what it pays to
// `counters`. Not thread-safe: the thread that start()s it pays.
class LoopDilation {
 public:
  // A payment is skipped while its debt could be worth fewer than this many payments' own cost.
  static constexpr uint64_t kPaymentsWorth = 16;
  LoopDilation(const DpuSpeed& speed, DilationCounters& counters);
  bool active() const { return d_.active(); }
  // Counting starts now, on the calling thread.
  void start() {
    d_.start();
    pay_next_ = true;  // the first write pays
  }
  // Stays busy for (1/F - 1) x the CPU time since the last payment.
  void pay();
  // pay() once quantum_ns() of wall time has passed since the last payment
  // (one time stamp counter read otherwise, billed as the model's own cost:
  // Dilation::due): before writes.
  void pay_due();
  // The end of an event loop's batch of handlers: pay_due() for it.
  void end_batch();
  uint64_t quantum_ns() const { return quantum_ns_; }
  // CPU time since the last payment that is not the dpu's (record crypto on the engine): not dilated.
  void exclude(uint64_t ns) { d_.exclude(ns); }

  // The calling thread's loop dilation while a Current lives (none at host
  // speed): what pay_before_write() pays into.
  static LoopDilation* current();
  class Current {
   public:
    // Makes `d` the thread's current and start()s it, when it is active.
    explicit Current(LoopDilation& d);
    ~Current();
    Current(const Current&) = delete;
    Current& operator=(const Current&) = delete;

   private:
    LoopDilation* previous_;
  };

 private:
  void report();

  Dilation d_;
  DilationCounters& counters_;
  uint64_t quantum_ns_ = 0;
  bool pay_next_ = false;
  uint64_t reported_work_ = 0, reported_dilated_ = 0;
};

// Bytes are about to be handed to the kernel or a ring: the calling thread's
// loop pays for the work they depend on first (pay_due: all of it but at
// most one quantum's). Every place where the proxy issues a write calls it
// (the streams, TLS's record writes, the admin).
inline void pay_before_write() {
  if (LoopDilation* d = LoopDilation::current()) d->pay_due();
}

// Runs `io` until it stops on the calling thread with `dilation` started and
// current. Dilated: run_one blocks in epoll with at most one quantum's debt
// owed, up to kEventBatch - 1 more ready handlers run, then the batch is paid
// for (pay_due); what is owed when the loop ends is paid. At host speed:
// io.run(), no clock read. A handler's exception is logged as
// "<who>: <what>" (what ran before it is paid for) and the loop goes on: it
// must not take the proxy down.
inline constexpr int kEventBatch = 64;
void run_loop(boost::asio::io_context& io, LoopDilation& dilation, const std::string& who);

}  // namespace dpukit::mesh
