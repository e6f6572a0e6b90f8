// What the sketch tests share to show a sampled sketch unbiased: its
// per-flow estimate error over many seeds.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "zipf.h"

namespace dpukit::measure::sketches {

struct EstimateError {
  double mean = 0, sd = 0;  // over the seeds
};

// The sketches `sketch(seed)`, seed 1 to `seeds`, each fed the whole stream:
// for each `tracked` flow (by rank), the mean of its estimate's error is
// within four standard errors of 0 (+1 for the rounding of a sample's
// weight) and varies. The errors, for more checks.
template <class MakeSketch>
std::vector<EstimateError> expect_unbiased(const ZipfStream& z, const std::vector<size_t>& tracked, size_t seeds,
                                           MakeSketch sketch) {
  std::vector<double> sum(tracked.size(), 0), sumsq(tracked.size(), 0);
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    auto s = sketch(seed);
    for (size_t i = 0; i < z.packets.size(); ++i) s.update(z.key(i));
    for (size_t t = 0; t < tracked.size(); ++t) {
      const double e = s.estimate(z.flows[tracked[t]]) - double(z.truth[tracked[t]]);
      sum[t] += e;
      sumsq[t] += e * e;
    }
  }
  std::vector<EstimateError> errors;
  for (size_t t = 0; t < tracked.size(); ++t) {
    const double mean = sum[t] / double(seeds);
    const double sd = std::sqrt(sumsq[t] / double(seeds) - mean * mean);
    SCOPED_TRACE("rank " + std::to_string(tracked[t]) + " size " + std::to_string(z.truth[tracked[t]]) +
                 ": mean error " + std::to_string(mean) + " sd " + std::to_string(sd));
    EXPECT_LE(std::abs(mean), 4.0 * sd / std::sqrt(double(seeds)) + 1.0);
    EXPECT_GT(sd, 0.0);
    errors.push_back({mean, sd});
  }
  return errors;
}

}  // namespace dpukit::measure::sketches
