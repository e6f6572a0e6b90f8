#include "dpukit/core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older C library headers lack it
#endif

namespace dpukit {

size_t back_with_huge_pages(const void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end <= begin) return 0;
  void* at = reinterpret_cast<void*>(begin);
  const size_t len = end - begin;
  madvise(at, len, MADV_HUGEPAGE);  // best effort: later faults
  return madvise(at, len, MADV_COLLAPSE) == 0 ? len : 0;
}

}  // namespace dpukit
