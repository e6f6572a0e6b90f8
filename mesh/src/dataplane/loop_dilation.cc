#include "dataplane/loop_dilation.h"

#include <exception>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"

namespace dpukit::mesh {

namespace {
thread_local LoopDilation* t_current = nullptr;
}  // namespace

LoopDilation::LoopDilation(const DpuSpeed& speed, DilationCounters& counters) : d_(speed), counters_(counters) {
  // A debt of (1/F - 1) x the quantum's work is kPaymentsWorth payments' clock reads (loop_dilation.h).
  if (d_.active())
    quantum_ns_ = static_cast<uint64_t>(double(kPaymentsWorth * Dilation::overhead().pay_ns) /
                                        (1.0 / d_.factor() - 1.0));
}

void LoopDilation::report() {
  if (d_.dilated_ns() == reported_dilated_ && d_.work_ns() == reported_work_) return;  // nothing paid
  // Release: a reader that saw the bytes this payment preceded sees the payment.
  counters_.work_ns.fetch_add(d_.work_ns() - reported_work_, std::memory_order_release);
  counters_.dilated_ns.fetch_add(d_.dilated_ns() - reported_dilated_, std::memory_order_release);
  reported_work_ = d_.work_ns();
  reported_dilated_ = d_.dilated_ns();
}

void LoopDilation::pay() {
  if (!d_.active()) return;
  d_.pay();
  pay_next_ = false;
  report();
}

void LoopDilation::pay_due() {
  // A clock check at every write, not Dilation::poll()'s every few calls: poll() is for calls that come at a
  // steady rate, while writes come in bursts and after idle gaps, and a reply after a gap must pay.
  if (d_.active() && (pay_next_ || d_.due(quantum_ns_))) pay();
}

void LoopDilation::end_batch() {
  counters_.batches.fetch_add(1, std::memory_order_relaxed);
  pay_due();
}

LoopDilation* LoopDilation::current() { return t_current; }

LoopDilation::Current::Current(LoopDilation& d) : previous_(t_current) {
  if (!d.active()) return;
  t_current = &d;
  d.start();
}
LoopDilation::Current::~Current() { t_current = previous_; }

void run_loop(boost::asio::io_context& io, LoopDilation& dilation, const std::string& who) {
  LoopDilation::Current current(dilation);
  for (;;) {
    try {
      if (!dilation.active()) {
        io.run();
        return;
      }
      while (io.run_one() > 0) {
        for (int i = 1; i < kEventBatch && io.poll_one() > 0; ++i) {
        }
        dilation.end_batch();
      }
      dilation.pay();  // what the last quantum owes
      return;
    } catch (const std::exception& e) {
      dilation.pay();  // the handlers that ran before it are work too
      log_error(who + ": " + e.what());
    }
  }
}

}  // namespace dpukit::mesh
