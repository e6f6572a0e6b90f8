// A one-way hand-off between two threads of the end-to-end server (the NIC
// stage to the software path, the dpu stage to the host stage): core's SPSC
// ring plus a futex doorbell, so that an idle consumer sleeps instead of
// burning the CPU whose utilization is being measured. The sleep is bounded
// (kSleepNs): a wake-up that went astray would cost that much, never a hang.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "dpukit/core/ring.h"

namespace dpukit::bench::e2e {

template <class T>
class Handoff {
 public:
  explicit Handoff(size_t capacity) : ring_(capacity), producer_(ring_.producer()), consumer_(ring_.consumer()) {}
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  size_t capacity() const { return producer_.capacity(); }

  // --- producer side ---
  // Pushes all `n` items, waiting while the ring is full (backpressure, as a
  // full descriptor ring stalls a NIC); returns how many times it had to wait.
  uint64_t push_all(const T* items, size_t n) {
    uint64_t waits = 0;
    size_t done = 0;
    while (done < n) {
      const size_t k = producer_.try_push(items + done, n - done);
      done += k;
      if (k) ring_bell();
      if (done < n) {
        ++waits;
        std::this_thread::yield();  // the consumer may share this CPU
      }
    }
    return waits;
  }
  // The producer is done: a consumer waiting for items returns.
  void close() {
    closed_.store(true, std::memory_order_seq_cst);
    bell_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake();
  }

  // --- consumer side ---
  size_t pop(T* out, size_t max) { return consumer_.try_pop(out, max); }
  // Waits until an item is there (true) or the producer closed the hand-off
  // and everything it pushed has been popped (false). Spins briefly, then
  // sleeps on the doorbell.
  bool wait() {
    for (int i = 0; i < kSpins; ++i) {
      if (!consumer_.empty()) return true;
      if (closed_.load(std::memory_order_acquire)) return !consumer_.empty();
      cpu_relax();
    }
    for (;;) {
      const uint32_t seen = bell_.load(std::memory_order_seq_cst);
      sleeping_.store(true, std::memory_order_seq_cst);
      // Dekker with ring_bell(): either the producer sees sleeping_ or we see its push.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const bool ready = !consumer_.empty();
      const bool closed = closed_.load(std::memory_order_seq_cst);
      if (ready || closed) {
        sleeping_.store(false, std::memory_order_relaxed);
        return ready || !consumer_.empty();
      }
      futex_wait(seen);
      sleeping_.store(false, std::memory_order_relaxed);
      ++sleeps_;
    }
  }
  uint64_t sleeps() const { return sleeps_; }  // consumer's count of doorbell sleeps

 private:
  static constexpr int kSpins = 64;
  static constexpr long kSleepNs = 1'000'000;
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex word is the atomic itself");

  void ring_bell() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      bell_.fetch_add(1, std::memory_order_seq_cst);
      futex_wake();
    }
  }
  // Sleeps while the bell still reads `seen` (or until kSleepNs pass).
  void futex_wait(uint32_t seen) {
    timespec timeout{0, kSleepNs};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell_), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0);
  }
  void futex_wake() {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

  HeapRing<T> ring_;
  SpscRing<T> producer_, consumer_;
  alignas(kCacheLine) std::atomic<uint32_t> bell_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> closed_{false};
  uint64_t sleeps_ = 0;
};

}  // namespace dpukit::bench::e2e
