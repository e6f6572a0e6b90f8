#include "dpukit/core/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace dpukit {
namespace {

// AnonHugePages (kB) of the mapping that contains `p`, from /proc/self/smaps.
long huge_kb_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    uintptr_t lo, hi;
    char dash;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

TEST(HugePages, CollapsesTheWholeHugePagesOfARangeAndKeepsItsBytes) {
  constexpr size_t kBytes = 8u << 20;
  void* m = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(m);
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  // From an odd offset: only the huge pages wholly inside count.
  const size_t got = back_with_huge_pages(bytes + 100, kBytes - 200);
  if (got == 0) {
    munmap(m, kBytes);
    GTEST_SKIP() << "this kernel does not collapse into huge pages (MADV_COLLAPSE needs Linux 6.1 and THP)";
  }
  EXPECT_EQ(got % (2u << 20), 0u);
  EXPECT_GE(got, 4u << 20);  // 8 MiB less 200 bytes holds at least 2 whole 2 MiB pages wherever it starts
  // The advice splits the mapping: the huge part is its own, from the first 2 MiB boundary.
  const auto first_huge = (reinterpret_cast<uintptr_t>(bytes + 100) + (2u << 20) - 1) & ~uintptr_t{(2u << 20) - 1};
  EXPECT_GE(huge_kb_of(reinterpret_cast<void*>(first_huge)) * 1024, static_cast<long>(got));
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 7 + i / 4096)) << "byte " << i;
  munmap(m, kBytes);
}

TEST(HugePages, ARangeWithoutAWholeHugePageIsLeftAlone) {
  static char small[4096];
  EXPECT_EQ(back_with_huge_pages(small, sizeof small), 0u);
  EXPECT_EQ(back_with_huge_pages(nullptr, 0), 0u);
}

}  // namespace
}  // namespace dpukit
