// The real programs of Table 5, each composed from the operators the paper
// lists for it (Rule 2: the operators make up a program's main work). One
// unit of work runs every component operator on the same packet, in order.
// They exist so that the characterization can set the operator set beside
// the programs (Figs. 9 and 10), and they can be timed like any operator.
// A program with one component that a BlueField runs on an engine
// (Url-Filter and IPS: rxp_match; File-Compress: compress; IPSec: rsa) also
// runs on the engine backend: that component as the engine's jobs, the
// others on the submitting dpu thread (engine_backend.h, ComposedOperator).
#include <cstring>
#include <mutex>

#include "engine_backend.h"
#include "operator.h"
#include "packet.h"

namespace dpukit::bench {
namespace {

struct ProgramSpec {
  const char* name;
  const char* what;
  std::vector<const char*> ops;  // Table 5's operators, in the order a packet meets them
  uint8_t proto;                 // what the packet carries (ip_frag needs UDP: DF clear; tcp_seg needs TCP)
};

// Table 5. IPSec is the paper's composition (LPM, RSA, CheckSum, CRC):
// per-packet RSA stands for its key exchange; an ESP data path would use aes.
const std::vector<ProgramSpec>& specs() {
  static const std::vector<ProgramSpec> v = {
      {"program_l3fwd", "L3fwd (Table 5): lpm, checksum, crc, ip_frag, toeplitz on one packet",
       {"lpm", "checksum", "crc", "ip_frag", "toeplitz"}, kProtoUdp},
      {"program_ipsec", "IPSec (Table 5): lpm, rsa, checksum, crc on one packet", {"lpm", "rsa", "checksum", "crc"},
       kProtoTcp},
      {"program_file_compress", "File-Compress (Table 5): compress one block", {"compress"}, kProtoTcp},
      {"program_file_integrity", "File-Integrity (Table 5): sha256, sha1, md5 of one block",
       {"sha256", "sha1", "md5"}, kProtoTcp},
      {"program_ips", "IPS (Table 5): rxp_match, tcp_seg on one packet", {"rxp_match", "tcp_seg"}, kProtoTcp},
      {"program_url_filter", "Url-Filter (Table 5): rxp_match on one packet", {"rxp_match"}, kProtoTcp},
  };
  return v;
}

// The output is every component's output, each behind a 4-byte length, so
// that the check can hand each part to its own operator's mismatch().
void append_part(Bytes& out, const Bytes& part) {
  uint8_t len[4];
  store_be32(len, static_cast<uint32_t>(part.size()));
  out.insert(out.end(), len, len + 4);
  out.insert(out.end(), part.begin(), part.end());
}

std::vector<Bytes> split_parts(const Bytes& out) {
  std::vector<Bytes> parts;
  size_t i = 0;
  while (i + 4 <= out.size()) {
    size_t n = load_be32(&out[i]);
    i += 4;
    if (n > out.size() - i) break;
    parts.emplace_back(out.begin() + static_cast<ptrdiff_t>(i), out.begin() + static_cast<ptrdiff_t>(i + n));
    i += n;
  }
  return parts;
}

class ProgramKernel final : public Kernel {
 public:
  explicit ProgramKernel(std::vector<std::unique_ptr<Kernel>> parts) : parts_(std::move(parts)) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.clear();
    for (auto& k : parts_) {
      k->process(in, part_);
      append_part(out, part_);
    }
  }

 private:
  std::vector<std::unique_ptr<Kernel>> parts_;
  Bytes part_;
};

class Program final : public Operator, public ComposedOperator {
 public:
  explicit Program(const ProgramSpec& spec) : spec_(spec) {
    info_.name = spec.name;
    info_.scenario = "program";
    info_.what = spec.what;
    info_.version = 1;
    info_.backends = {Backend::kRef, Backend::kLib};
  }
  // The engine backend is known once the registry holds the components.
  const OperatorInfo& info() const override {
    std::call_once(backends_once_, [this] {
      if (engine_component()) info_.backends.push_back(Backend::kEngine);
    });
    return info_;
  }

  // The engine of the one component that has one (none when none or several do).
  std::optional<EngineWork> engine_work() const override {
    const Operator* c = engine_component();
    return c ? c->engine_work() : std::nullopt;
  }
  std::vector<const Operator*> components() const override {
    std::vector<const Operator*> v;
    for (const char* name : spec_.ops) {
      const Operator* op = component(name);
      if (!op) throw Unavailable(std::string("component operator ") + name + " is not in this build");
      v.push_back(op);
    }
    return v;
  }
  void join_parts(std::span<const Bytes* const> parts, Bytes& out) const override {
    out.clear();
    for (const Bytes* p : parts) append_part(out, *p);
  }

  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v;
    for (size_t i = 0; i < count; ++i) v.push_back(make_ipv4_packet(size, seed * 1000003 + i, spec_.proto));
    return v;
  }

  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    if (b == Backend::kDev) throw Unavailable("the composed programs run on ref, lib or engine");
    if (b == Backend::kEngine)  // made by make_engine_kernels (engine_backend.h), as every engine kernel
      throw Unavailable("engine kernels of " + info_.name + " are made by make_engine_kernels (engine_backend.h)");
    std::vector<std::vector<std::unique_ptr<Kernel>>> per_op;
    for (const char* name : spec_.ops) {
      Operator* op = component(name);
      if (!op) throw Unavailable(std::string("component operator ") + name + " is not in this build");
      per_op.push_back(op->make_kernels(b, size, threads));
    }
    std::vector<std::unique_ptr<Kernel>> v;
    for (unsigned t = 0; t < threads; ++t) {
      std::vector<std::unique_ptr<Kernel>> parts;
      for (auto& ks : per_op) parts.push_back(std::move(ks[t]));
      v.push_back(std::make_unique<ProgramKernel>(std::move(parts)));
    }
    return v;
  }

  std::string mismatch(std::span<const uint8_t> in, const Bytes& ref_out, const Bytes& got) const override {
    std::vector<Bytes> want = split_parts(ref_out), have = split_parts(got);
    if (want.size() != spec_.ops.size() || have.size() != spec_.ops.size())
      return "output does not hold one part per component operator";
    for (size_t i = 0; i < want.size(); ++i) {
      std::string why = component(spec_.ops[i])->mismatch(in, want[i], have[i]);
      if (!why.empty()) return std::string(spec_.ops[i]) + ": " + why;
    }
    return "";
  }

 private:
  static Operator* component(const char* name) {
    for (auto& op : registry())
      if (op->info().name == name) return op.get();
    return nullptr;
  }
  const Operator* engine_component() const {
    const Operator* found = nullptr;
    for (const char* name : spec_.ops) {
      const Operator* op = component(name);
      if (!op || !op->engine_work()) continue;
      if (found) return nullptr;
      found = op;
    }
    return found;
  }
  const ProgramSpec& spec_;
  mutable OperatorInfo info_;
  mutable std::once_flag backends_once_;
};

}  // namespace

void register_programs(Registry& r) {
  for (const auto& s : specs()) r.push_back(std::make_unique<Program>(s));
}

}  // namespace dpukit::bench
