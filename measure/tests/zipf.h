// A deterministic Zipf packet stream for the sketch tests and benchmarks:
// `flows` distinct 5-tuples, flow of rank r (0-based) drawn with probability
// proportional to 1 / (r + 1)^skew, `packets` i.i.d. draws. Self-contained so
// that the sketch tests do not depend on the trace generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

struct ZipfStream {
  std::vector<FlowKey> flows;     // by rank
  std::vector<uint32_t> packets;  // flow rank of each packet
  std::vector<uint64_t> truth;    // packets per flow rank

  ZipfStream(size_t n_flows, size_t n_packets, double skew, uint64_t seed) {
    SplitMix64 rng(seed ^ 0x5a17f00dULL);
    flows.reserve(n_flows);
    for (size_t r = 0; r < n_flows; ++r) {
      const uint64_t x = rng.next();
      // Unique by construction: the rank is in the source address.
      flows.push_back(FlowKey::from_tuple(0x0a000000u | static_cast<uint32_t>(r & 0xffffff),
                                          static_cast<uint32_t>(x), static_cast<uint16_t>(x >> 32),
                                          static_cast<uint16_t>(x >> 48), (x & 1) ? 6 : 17));
    }
    std::vector<double> cdf(n_flows);
    double acc = 0;
    for (size_t r = 0; r < n_flows; ++r) cdf[r] = acc += 1.0 / std::pow(double(r + 1), skew);
    for (double& c : cdf) c /= acc;
    truth.assign(n_flows, 0);
    packets.reserve(n_packets);
    for (size_t i = 0; i < n_packets; ++i) {
      const double u = double(rng.next() >> 11) * 0x1.0p-53;
      const size_t r = std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(), n_flows - 1);
      packets.push_back(static_cast<uint32_t>(r));
      ++truth[r];
    }
  }

  const FlowKey& key(size_t i) const { return flows[packets[i]]; }
  size_t distinct() const { return static_cast<size_t>(std::count_if(truth.begin(), truth.end(), [](uint64_t t) { return t > 0; })); }
  // Empirical entropy in bits.
  double entropy() const {
    const double m = double(packets.size());
    double h = 0;
    for (uint64_t t : truth) {
      if (t) h -= double(t) / m * std::log2(double(t) / m);
    }
    return h;
  }
};

}  // namespace dpukit::measure::sketches
