// Huge pages for a datapath's packet memory, as DPDK's mbufs live in them.
#pragma once

#include <cstddef>

namespace dpukit {

// Asks the kernel to back the whole 2 MiB pages inside [p, p + bytes) with
// transparent huge pages now (MADV_COLLAPSE, Linux 6.1 and later) and on
// later faults (MADV_HUGEPAGE). A worker that reads scattered packets of a
// large buffer otherwise pays a TLB miss, a nested page walk on a VM, for
// most of them. Returns the bytes collapsed: 0 when the range holds no whole
// huge page or the kernel did not collapse all of it (too old, THP compiled
// out, no memory to spare: it may have collapsed a part, which is not
// counted); the memory stays usable either way.
size_t back_with_huge_pages(const void* p, size_t bytes);

}  // namespace dpukit
