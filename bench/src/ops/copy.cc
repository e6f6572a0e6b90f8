// MemCpy (§4.1.1: the copy a packet takes between kernel and user space).
// ref copies byte by byte; lib is the C library's memcpy. A DPDK dmadev
// would be the device class, but no copy engine exists on this machine
// (dmadev's only software PMD is a test skeleton), so dev says so.
#include <cstring>

#include "operator.h"

namespace dpukit::bench {
namespace {

class RefCopy final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(in.size());
    volatile uint8_t* dst = out.data();  // volatile: keep the byte loop, not a call to memcpy
    for (size_t i = 0; i < in.size(); ++i) dst[i] = in[i];
  }
};

class LibCopy final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(in.size());
    std::memcpy(out.data(), in.data(), in.size());
  }
};

class MemCpy final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"memcpy", "copy", "copy one packet to another buffer", 1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<RefCopy>(threads);
      case Backend::kLib: return kernels_of<LibCopy>(threads);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("no DPDK copy device here (dmadev has no software engine but its test skeleton)");
  }
};

}  // namespace

void register_copy_ops(Registry& r) { r.push_back(std::make_unique<MemCpy>()); }

}  // namespace dpukit::bench
