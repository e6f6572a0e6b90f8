// The end-to-end client (DPUBench §5, Fig. 13: the dataset and the traffic
// generator): sends datagrams of one size at one interval for a duration
// and, for application recognition, collects the replies.
//
// One thread does both, sending and polling for replies between sends
// (run-to-completion, as a DPDK generator would): the client has one CPU
// here, and a second thread on it would wait behind the pacing sender and
// add its scheduling delay to the round-trip times it measures.
//
// Pacing: core's Pacer at 1 / interval, with bursts of up to `burst` when
// the client has fallen behind (or at interval 0); with `gso` such a burst
// goes out as one UDP GSO buffer (UDP_SEGMENT) that the kernel splits into
// datagrams, which takes far fewer system calls than sendmmsg.
//
// flowtable: each datagram carries one of `flows` synthetic 5-tuples, drawn
// Zipf(`zipf`) by rank (0 = uniform); the client sums flow_digest_term over
// what it sent, so the server's per-flow counts can be checked exactly.
// apprecog: each datagram's payload comes from a pool whose actions are
// known (make_payload_pool); every reply's action is checked against the
// expected one and every `verify_every`-th reply's body is checked in full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dpukit/bench_e2e.h"
#include "dpukit/core/flow_key.h"

namespace dpukit::bench::e2e {

// One UDP GSO send: the kernel's limits (segments, and an IP packet's payload).
inline constexpr unsigned kMaxGsoSegments = 64;
inline constexpr size_t kMaxGsoBytes = 65000;

// ClientConfig, check_client_config and run_client: dpukit/bench_e2e.h.

// The synthetic 5-tuple of flow `i` (distinct for every i < 2^23).
FlowKey client_flow_key(size_t i);

// Draws flow ranks: P(rank k) ~ 1 / (k + 1)^s over `flows` ranks (s = 0: uniform).
class ZipfFlows {
 public:
  ZipfFlows(size_t flows, double s, uint64_t seed);
  size_t next();

 private:
  std::vector<double> cdf_;
  uint64_t state_;
};

// Nearest-rank percentile of sorted values (q in [0, 1]).
double percentile_sorted(const std::vector<uint32_t>& sorted, double q);

}  // namespace dpukit::bench::e2e
