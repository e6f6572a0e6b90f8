#include "dataplane/loop_dilation.h"

#include <exception>

#include "dpukit/core/log.h"

namespace dpukit::mesh {

namespace {
thread_local LoopDilation* t_current = nullptr;
}  // namespace

void LoopDilation::pay() {
  if (!d_.active()) return;
  d_.pay();
  // Release: a reader that saw the bytes this payment preceded sees the payment.
  counters_.work_ns.fetch_add(d_.work_ns() - reported_work_, std::memory_order_release);
  counters_.dilated_ns.fetch_add(d_.dilated_ns() - reported_dilated_, std::memory_order_release);
  reported_work_ = d_.work_ns();
  reported_dilated_ = d_.dilated_ns();
}

void LoopDilation::end_batch() {
  counters_.batches.fetch_add(1, std::memory_order_relaxed);
  pay();
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
      return;
    } catch (const std::exception& e) {
      dilation.pay();  // the handlers that ran before it are work too
      log_error(who + ": " + e.what());
    }
  }
}

}  // namespace dpukit::mesh
