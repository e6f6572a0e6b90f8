// The dev backend's kernels: an operator's unit of work done by a DPDK
// device (cryptodev, compressdev) through one queue pair that the kernel
// owns, with up to a burst of operations in flight per process_burst() call.
#pragma once

#include <string>

#include "operator.h"

namespace dpukit::bench {

class DevKernel : public Kernel {
 public:
  // The name of the DPDK device doing the work, e.g. "crypto_aesni_mb".
  virtual std::string device() const = 0;
};

// The device of a kernel made by the dev backend; "" for any other kernel.
std::string dev_kernel_device(const Kernel& kernel);

}  // namespace dpukit::bench
