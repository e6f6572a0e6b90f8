#include "dpukit/core/dpu_packet_path.h"


#include "dpukit/core/accounting.h"

namespace dpukit {

namespace {

// DPDK's own receive + transmit loop on one host core of this machine
// (testpmd io forwarding between two net_null ports, 64.3-67.0 Mpps; docs/core.md):
// the software half of a packet's path, without the NIC driver's
// descriptors, doorbells and completions, so a lower bound. No public
// per-core figure for DPDK on BlueField's Arm cores was found; on them this
// loop takes 1/F as long.
constexpr double kHostDpdkIoForwardNs = 15.3;

// Duet Table II, one Arm core of a BlueField-2 installing rules with DOCA
// Flow: 77 k rules/s with 500 k entries, 63 k with 1 M; the line through
// the two (12.99 us and 15.87 us a rule).
constexpr double kRuleNs = 10101, kRuleNsPerMillion = 5772;

}  // namespace

const char* const kDpuPacketPathSource =
    "packet: DPDK testpmd io forwarding on one host core (net_null, 15.3 ns a packet) slowed by 1/F, a lower bound "
    "(no public per-core figure for BlueField's Arm cores); rule: Duet Table II, one BlueField-2 Arm core, 77 k rules/s "
    "at 500 k entries and 63 k at 1 M (BlueField-3: the same, a named guess); docs/core.md";

DpuPacketPath DpuPacketPath::of(const DpuSpeed& speed) {
  if (speed.name != "bluefield2" && speed.name != "bluefield3") return {};
  return {kHostDpdkIoForwardNs / speed.factor, kRuleNs, kRuleNsPerMillion};
}

nlohmann::json DpuPacketPath::to_json() const {
  return {{"packet_ns", packet_ns}, {"rule_ns", rule_ns}, {"rule_ns_per_million", rule_ns_per_million}};
}

void spend_dpu_ns(double dpu_ns, double factor) {
  // Overshoot so far: taken off the next call's time.
  thread_local int64_t credit_ns = 0;
  const int64_t want = static_cast<int64_t>(dpu_ns * factor) - credit_ns;
  if (want <= 0) {
    credit_ns = -want;
    return;
  }
  const uint64_t start = now_ns();
  uint64_t now = start;
  while (static_cast<int64_t>(now - start) < want) now = now_ns();
  credit_ns = static_cast<int64_t>(now - start) - want;
}

}  // namespace dpukit
