// What a dpu's cores pay for the NIC around them, beside their speed
// (docs/core.md, "The Arm's packet path and table management").
//
// On a DPU a packet the eSwitch's hardware table does not absorb is
// delivered to an Arm core and sent back to the wire: a DPDK receive and
// transmit on that core, which the emulated wire does for free. And each
// rule the dpu's control path installs in the hardware table, or removes
// when it ages, costs that core the driver's work, more with more entries
// (Duet Table II). Without these every offload that keeps packets off the
// Arm cores looks no better than its sketch's arithmetic.
//
// Both are in ns of a dpu core and billed as busy time on the thread that
// does the work: F x the time on this host core, which the thread's
// Dilation (dpu_speed.h) stretches to the whole. A preset's figures; none
// at `host` or at a factor given as a number.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "dpukit/core/dpu_speed.h"

namespace dpukit {

struct DpuPacketPath {
  // A packet delivered to a dpu core and sent back: receive + transmit.
  double packet_ns = 0;
  // A hardware rule installed, or removed (aged), by the dpu's control
  // path: `rule_ns` with the table empty, and `rule_ns_per_million` more
  // per million entries it holds.
  double rule_ns = 0;
  double rule_ns_per_million = 0;

  bool any() const { return packet_ns > 0 || rule_ns > 0 || rule_ns_per_million > 0; }
  double rule_cost_ns(uint64_t entries) const { return rule_ns + rule_ns_per_million * double(entries) / 1e6; }

  // The preset's figures for a speed named by a preset (bluefield2,
  // bluefield3); zero for host and for a factor given as a number.
  static DpuPacketPath of(const DpuSpeed& speed);
  // {"packet_ns", "rule_ns", "rule_ns_per_million"}: what results record.
  nlohmann::json to_json() const;
};

// Where each preset's figures come from, cited (docs/core.md derives them).
extern const char* const kDpuPacketPathSource;

// Keeps the calling thread busy for `dpu_ns` of a dpu core's time: `factor`
// x that on this core, which the thread's Dilation (at the same factor)
// makes dpu_ns; at factor 1, dpu_ns itself. What one call overshoots (a
// clock read) is taken off the next call on the same thread, so over many
// calls the busy time is what was asked.
void spend_dpu_ns(double dpu_ns, double factor);

}  // namespace dpukit
