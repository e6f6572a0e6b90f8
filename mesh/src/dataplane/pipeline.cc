#include "dataplane/pipeline.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "dataplane/worker.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "dpukit/core/shm.h"

namespace dpukit::mesh {

namespace {
constexpr size_t kRingSlots = 16384;
constexpr size_t kBatch = 64;
}  // namespace

struct Pipeline::Link {
  HeapRing<StageItem> ring{kRingSlots};
  SpscRing<StageItem> producer = ring.producer();
  SpscRing<StageItem> consumer = ring.consumer();
  UniqueFd bell{::eventfd(0, EFD_CLOEXEC)};
  // The consumer says it may sleep; with seq_cst on both sides either the
  // producer sees the flag and rings, or the consumer sees the item.
  std::atomic<bool> sleeping{true};

  bool push(const StageItem& item) {
    if (!producer.try_push(item)) return false;
    // A full fence: the head's store must be visible before the flag is read (x86 reorders a store and a later load).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_relaxed)) ring_bell();
    return true;
  }
  // The consumer, about to wait: true when it may (the ring is still empty).
  bool may_sleep() {
    sleeping.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the flag before the ring's head is read
    if (!consumer.empty()) {
      sleeping.store(false, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  void ring_bell() {
    uint64_t one = 1;
    ssize_t r = ::write(bell.get(), &one, sizeof one);
    (void)r;
  }
  void wait() {
    uint64_t n;
    ssize_t r = ::read(bell.get(), &n, sizeof n);
    (void)r;
  }
};

// The worker's end: its event loop watches the last ring's eventfd.
struct Pipeline::ReturnWatch {
  asio::posix::stream_descriptor fd;
  uint64_t value = 0;
  explicit ReturnWatch(asio::io_context& io, int bell) : fd(io, ::dup(bell)) {}
};

Pipeline::Pipeline(Worker& worker, std::vector<int> cpus)
    : worker_(worker), to_match_(std::make_unique<Link>()), to_deparse_(std::make_unique<Link>()),
      to_worker_(std::make_unique<Link>()) {
  if (!to_match_->bell || !to_deparse_->bell || !to_worker_->bell) throw_errno("eventfd");
  watch_ = std::make_unique<ReturnWatch>(worker_.io(), to_worker_->bell.get());
  auto cpu_of = [&](size_t i) { return cpus.empty() ? -1 : cpus[i % cpus.size()]; };
  // The worker's own thread is on cpus[0]; the stages follow it round robin.
  threads_.emplace_back([this, cpu = cpu_of(1)] { stage_loop(0, *to_match_, to_deparse_.get(), cpu); });
  threads_.emplace_back([this, cpu = cpu_of(2)] { stage_loop(1, *to_deparse_, to_worker_.get(), cpu); });
  arm_return();
}

Pipeline::~Pipeline() { stop(); }

void Pipeline::stop() {
  if (stop_.exchange(true)) return;
  to_match_->ring_bell();
  to_deparse_->ring_bell();
  for (auto& t : threads_) t.join();
  boost::system::error_code ignored;
  watch_->fd.close(ignored);
}

bool Pipeline::submit(StageItem item) { return to_match_->push(item); }

void Pipeline::stage_loop(int index, Link& in, Link* out, int cpu) {
  if (cpu >= 0) {
    CpuSet set;
    set.cpus = {cpu};
    std::string warn = pin_current_thread(set);
    if (!warn.empty()) log_warn("mesh pipeline: " + warn);
  }
  pthread_setname_np(pthread_self(), index == 0 ? "mesh:match" : "mesh:deparse");
  uint64_t t0 = thread_cpu_ns();
  // A stage is a dpu thread: each batch is paid for before the stage may sleep.
  LoopDilation dilation(worker_.speed(), worker_.dilation());
  dilation.start();
  StageItem batch[kBatch];
  while (!stop_.load(std::memory_order_acquire)) {
    size_t n = in.consumer.try_pop(batch, kBatch);
    if (n == 0) {
      if (in.may_sleep()) in.wait();
      in.sleeping.store(false, std::memory_order_relaxed);
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      if (index == 0) batch[i].client->stage_match_action();
      else batch[i].client->stage_deparse();
    }
    dilation.pay();  // before the batch moves on, so its time in this stage is dilated
    // The next ring is as large as this one and drained as fast as the worker can: wait for room.
    for (size_t i = 0; i < n; ++i)
      while (!out->push(batch[i]) && !stop_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  cpu_ns_.fetch_add(thread_cpu_ns() - t0, std::memory_order_relaxed);
}

void Pipeline::arm_return() {
  watch_->fd.async_read_some(asio::buffer(&watch_->value, sizeof watch_->value),
                             [this](const boost::system::error_code& ec, size_t) {
                               if (ec) return;
                               Link& link = *to_worker_;
                               StageItem batch[kBatch];
                               do {
                                 link.sleeping.store(false, std::memory_order_relaxed);
                                 size_t n;
                                 while ((n = link.consumer.try_pop(batch, kBatch)) > 0)
                                   for (size_t i = 0; i < n; ++i) batch[i].client->stage_done(batch[i].generation);
                               } while (!link.may_sleep());
                               arm_return();
                             });
}

}  // namespace dpukit::mesh
