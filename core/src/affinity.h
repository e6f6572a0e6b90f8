// CPU lists as affinity masks (private to core): shared by pinning the calling
// thread and pinning a child process before it runs.
#pragma once

#include <sched.h>

#include <string>

#include "dpukit/core/accounting.h"

namespace dpukit::detail {

// The CPUs of `wanted` this process may use; the others are appended to
// `dropped` ("1,5") when it is given.
CpuSet usable_cpus(const CpuSet& wanted, std::string* dropped);

cpu_set_t affinity_mask(const CpuSet& cpus);

}  // namespace dpukit::detail
