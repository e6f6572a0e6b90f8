#include "http2/freed_memory.h"

#include <malloc.h>

#include <algorithm>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"

namespace dpukit::mesh {

namespace {
int64_t mono_ns() { return static_cast<int64_t>(now_ns()); }
}  // namespace

FreedMemory::FreedMemory(std::chrono::nanoseconds min_interval, std::function<void()> give_back)
    : state_(std::make_shared<State>()) {
  state_->min_interval = min_interval;
  state_->give_back = give_back ? std::move(give_back) : [] { malloc_trim(0); };
}

void FreedMemory::request(boost::asio::io_context& io) {
  if (state_->waiting) {
    state_->again = true;
    return;
  }
  arm(io, state_);
}

void FreedMemory::arm(boost::asio::io_context& io, std::shared_ptr<State> s) {
  s->waiting = true;
  const int64_t wait_ns =
      s->last_ns == 0 ? 0 : std::max<int64_t>(0, s->last_ns + s->min_interval.count() - mono_ns());
  // A timer even for no wait: it runs after the handlers already queued.
  auto timer = std::make_shared<boost::asio::steady_timer>(io, std::chrono::nanoseconds(wait_ns));
  timer->async_wait([timer, s, &io](const boost::system::error_code& ec) {
    if (ec) return;  // the worker is stopping
    s->waiting = false;
    s->last_ns = mono_ns();
    s->give_back();
    log_debug("mesh: worker gave freed memory back in " + std::to_string((mono_ns() - s->last_ns) / 1000) + " us");
    if (std::exchange(s->again, false)) arm(io, s);
  });
}

void give_back_freed_memory(boost::asio::io_context& io) {
  static thread_local FreedMemory freed;
  freed.request(io);
}

}  // namespace dpukit::mesh
