#include "dpukit/core/ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace dpukit {
namespace {

TEST(SpscRing, RejectsCapacityThatIsNotAPowerOfTwo) {
  EXPECT_THROW(HeapRing<uint64_t>(1000), std::invalid_argument);
  EXPECT_THROW(HeapRing<uint64_t>(1), std::invalid_argument);
}

TEST(SpscRing, FifoOrderAndExactCapacity) {
  HeapRing<uint64_t> mem(8);
  auto p = mem.producer();
  auto c = mem.consumer();
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(p.try_push(i * 3));
  EXPECT_FALSE(p.try_push(99)) << "a full ring must refuse";
  EXPECT_EQ(p.size(), 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    uint64_t v;
    ASSERT_TRUE(c.try_pop(v));
    EXPECT_EQ(v, i * 3);
  }
  uint64_t v;
  EXPECT_FALSE(c.try_pop(v)) << "an empty ring must return nothing";
}

// In shared memory the other side writes the indices: a tail moved past the
// head (or a head moved far ahead) must not make a transfer overrun the slots.
TEST(SpscRing, IndicesCorruptedByTheOtherSideNeverOverrunTheSlots) {
  constexpr size_t kCap = 16;
  std::vector<std::byte> mem(SpscRing<uint8_t>::bytes_needed(kCap) + 64, std::byte{0x5a});  // + a guard zone
  auto ring = SpscRing<uint8_t>::create(mem.data(), kCap);
  auto* h = reinterpret_cast<RingHeader*>(mem.data());
  const size_t end = SpscRing<uint8_t>::bytes_needed(kCap);
  ASSERT_EQ(ring.try_push(reinterpret_cast<const uint8_t*>("abc"), 3), 3u);
  h->tail.store(h->head.load() + (1u << 20));  // a consumer that "read" a megabyte it never had
  auto writer = SpscRing<uint8_t>::attach(mem.data(), end);
  std::vector<uint8_t> big(1000, 7);
  EXPECT_LE(writer.try_push(big.data(), big.size()), kCap);
  for (size_t i = end; i < mem.size(); ++i) ASSERT_EQ(mem[i], std::byte{0x5a}) << "wrote past the ring at " << i;
  h->head.store(h->tail.load() + (1u << 20));  // a producer that "wrote" a megabyte
  auto reader = SpscRing<uint8_t>::attach(mem.data(), end);
  std::vector<uint8_t> out(1000, 0);
  EXPECT_LE(reader.try_pop(out.data(), out.size()), kCap);
  for (size_t i = kCap; i < out.size(); ++i) ASSERT_EQ(out[i], 0) << "read past the ring at " << i;
}

TEST(SpscRing, BatchesWrapAroundAndArePartialWhenShort) {
  HeapRing<uint32_t> mem(16);
  auto p = mem.producer();
  auto c = mem.consumer();
  std::vector<uint32_t> in(10), out(16);
  uint32_t next_in = 0, next_out = 0;
  for (int round = 0; round < 50; ++round) {
    for (auto& x : in) x = next_in++;
    size_t pushed = p.try_push(in.data(), in.size());
    next_in -= static_cast<uint32_t>(in.size() - pushed);
    size_t got = c.try_pop(out.data(), 7);
    for (size_t i = 0; i < got; ++i) ASSERT_EQ(out[i], next_out++);
  }
  while (p.try_push(in.data(), in.size()) > 0) {}
  EXPECT_EQ(p.free_slots(), 0u);
  EXPECT_EQ(p.try_push(in.data(), 1), 0u) << "no room left after filling";
  EXPECT_EQ(c.try_pop(out.data(), 16), 16u);
}

TEST(SpscRing, TwoThreadsMoveEveryMessageInOrder) {
  HeapRing<uint64_t> mem(1024);
  constexpr uint64_t kN = 2'000'000;
  std::thread prod([&] {
    auto p = mem.producer();
    uint64_t buf[32];
    for (uint64_t sent = 0; sent < kN;) {
      size_t want = std::min<uint64_t>(32, kN - sent);
      for (size_t i = 0; i < want; ++i) buf[i] = sent + i;
      sent += p.try_push(buf, want);
    }
  });
  auto c = mem.consumer();
  uint64_t expect = 0, buf[64];
  while (expect < kN) {
    size_t k = c.try_pop(buf, 64);
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(buf[i], expect++);
  }
  prod.join();
}

TEST(SpscRing, WorksAcrossProcessesInSharedMemory) {
  constexpr size_t kCap = 256;
  constexpr uint64_t kN = 200'000;
  size_t bytes = SpscRing<uint64_t>::bytes_needed(kCap);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  SpscRing<uint64_t>::create(mem, kCap);
  pid_t child = fork();
  if (child == 0) {
    auto p = SpscRing<uint64_t>::attach(mem, bytes);
    for (uint64_t i = 0; i < kN;) i += p.try_push(i * 7 + 1);
    _exit(0);
  }
  auto c = SpscRing<uint64_t>::attach(mem, bytes);
  for (uint64_t i = 0; i < kN;) {
    uint64_t v;
    if (c.try_pop(v)) {
      ASSERT_EQ(v, i * 7 + 1);
      ++i;
    }
  }
  int st;
  waitpid(child, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  munmap(mem, bytes);
}

TEST(SpscRing, AttachRefusesForeignMemoryAndSlotMismatch) {
  alignas(64) static uint8_t junk[4096] = {1, 2, 3};
  EXPECT_THROW(SpscRing<uint64_t>::attach(junk, sizeof(junk)), std::runtime_error);
  alignas(64) static uint8_t mem[sizeof(RingHeader) + 16 * 8];
  SpscRing<uint64_t>::create(mem, 16);
  EXPECT_THROW(SpscRing<uint32_t>::attach(mem, sizeof(mem)), std::runtime_error);
  EXPECT_THROW(SpscRing<uint64_t>::attach(mem, sizeof(mem) - 8), std::runtime_error);
}

}  // namespace
}  // namespace dpukit
