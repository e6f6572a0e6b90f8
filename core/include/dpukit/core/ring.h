// Lock-free single-producer/single-consumer ring.
//
// The ring's header and slots live in caller-provided memory, so the same ring
// works between threads (heap memory) and between processes (a shared mapping;
// the indices are address-free 64-bit atomics). Head and tail sit on separate
// cache lines and each side caches the other's index, so a transfer touches a
// shared line only when the cached view runs out.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace dpukit {

inline constexpr size_t kCacheLine = 64;

// One step of a spin-wait: tells the core that this thread is polling.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

struct alignas(kCacheLine) RingHeader {
  uint64_t magic;
  uint64_t capacity;   // slots, a power of two
  uint64_t slot_size;  // sizeof(T), checked on attach
  alignas(kCacheLine) std::atomic<uint64_t> head;  // next slot the producer writes
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // next slot the consumer reads
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "rings need lock-free 64-bit atomics");

template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>, "ring slots are copied as bytes");

 public:
  static constexpr uint64_t kMagic = 0x6470756b69747267ull;  // "dpukitrg"

  static size_t bytes_needed(size_t capacity) {
    check_capacity(capacity);
    return sizeof(RingHeader) + capacity * sizeof(T);
  }

  // Initialises a new ring in `mem` (at least bytes_needed(capacity), 64-byte aligned).
  static SpscRing create(void* mem, size_t capacity) {
    check_capacity(capacity);
    auto* h = new (mem) RingHeader{};
    h->magic = kMagic;
    h->capacity = capacity;
    h->slot_size = sizeof(T);
    h->head.store(0, std::memory_order_relaxed);
    h->tail.store(0, std::memory_order_release);
    return SpscRing(h, capacity);
  }

  // Attaches to a ring another thread or process created; refuses a mismatch.
  static SpscRing attach(void* mem, size_t mem_size) {
    auto* h = static_cast<RingHeader*>(mem);
    if (mem_size < sizeof(RingHeader) || h->magic != kMagic)
      throw std::runtime_error("ring: no ring at this address (bad magic)");
    if (h->slot_size != sizeof(T)) throw std::runtime_error("ring: slot size mismatch");
    // Read once: in shared memory the other side could change it between a check and its use.
    const uint64_t capacity = __atomic_load_n(&h->capacity, __ATOMIC_RELAXED);
    if (capacity == 0 || (capacity & (capacity - 1)) || capacity > (mem_size - sizeof(RingHeader)) / sizeof(T))
      throw std::runtime_error("ring: capacity does not fit the mapping");
    return SpscRing(h, capacity);
  }

  SpscRing() = default;

  size_t capacity() const { return mask_ + 1; }

  // Producer: pushes up to n items, returns how many fit.
  size_t try_push(const T* items, size_t n) {
    uint64_t head = h_->head.load(std::memory_order_relaxed);
    if (cached_tail_ + capacity() - head < n) {
      cached_tail_ = h_->tail.load(std::memory_order_acquire);
    }
    // Clamped: in shared memory the other side may be hostile or broken, and
    // a tail it moved past the head must not let a push overrun the slots.
    size_t room = std::min<uint64_t>(cached_tail_ + capacity() - head, capacity());
    if (n > room) n = room;
    if (n == 0) return 0;
    copy_in(head, items, n);
    h_->head.store(head + n, std::memory_order_release);
    return n;
  }
  bool try_push(const T& item) { return try_push(&item, 1) == 1; }

  // Consumer: pops up to max items into out, returns how many.
  size_t try_pop(T* out, size_t max) {
    uint64_t tail = h_->tail.load(std::memory_order_relaxed);
    if (cached_head_ - tail < max) {
      cached_head_ = h_->head.load(std::memory_order_acquire);
    }
    size_t avail = std::min<uint64_t>(cached_head_ - tail, capacity());  // clamped, as room above
    if (max > avail) max = avail;
    if (max == 0) return 0;
    copy_out(tail, out, max);
    h_->tail.store(tail + max, std::memory_order_release);
    return max;
  }
  bool try_pop(T& out) { return try_pop(&out, 1) == 1; }

  // Either side: a snapshot, exact only when the other side is idle.
  size_t size() const {
    return h_->head.load(std::memory_order_acquire) - h_->tail.load(std::memory_order_acquire);
  }
  bool empty() const { return size() == 0; }
  size_t free_slots() const { return capacity() - size(); }

 private:
  SpscRing(RingHeader* h, uint64_t capacity)
      : h_(h), slots_(reinterpret_cast<T*>(h + 1)), mask_(capacity - 1),
        cached_head_(h->head.load(std::memory_order_acquire)),
        cached_tail_(h->tail.load(std::memory_order_acquire)) {}

  static void check_capacity(size_t capacity) {
    if (capacity < 2 || (capacity & (capacity - 1)))
      throw std::invalid_argument("ring: capacity must be a power of two >= 2");
  }
  void copy_in(uint64_t pos, const T* items, size_t n) {
    size_t first = pos & mask_;
    size_t k = std::min(n, capacity() - first);
    std::memcpy(slots_ + first, items, k * sizeof(T));
    if (n > k) std::memcpy(slots_, items + k, (n - k) * sizeof(T));
  }
  void copy_out(uint64_t pos, T* out, size_t n) const {
    size_t first = pos & mask_;
    size_t k = std::min(n, capacity() - first);
    std::memcpy(out, slots_ + first, k * sizeof(T));
    if (n > k) std::memcpy(out + k, slots_, (n - k) * sizeof(T));
  }

  RingHeader* h_ = nullptr;
  T* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t cached_head_ = 0;  // consumer's view of head
  uint64_t cached_tail_ = 0;  // producer's view of tail
};

// Heap memory for a ring used between threads of one process.
template <typename T>
class HeapRing {
 public:
  explicit HeapRing(size_t capacity)
      : mem_(static_cast<std::byte*>(::operator new(SpscRing<T>::bytes_needed(capacity),
                                                    std::align_val_t{kCacheLine}))) {
    ring_ = SpscRing<T>::create(mem_.get(), capacity);
  }
  // Separate handles for the two sides: each caches the other's index.
  SpscRing<T> producer() const { return SpscRing<T>::attach(mem_.get(), SpscRing<T>::bytes_needed(ring_.capacity())); }
  SpscRing<T> consumer() const { return producer(); }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{kCacheLine}); }
  };
  std::unique_ptr<std::byte, Free> mem_;
  SpscRing<T> ring_;
};

}  // namespace dpukit
