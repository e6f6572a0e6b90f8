// Ground truth and accuracy metrics.
//
// Definitions (f = a flow's true packet count, f^ = its estimate; a true flow
// without an estimate has f^ = 0; entries of the truth with f = 0 are not
// flows and are ignored everywhere; estimates for keys outside the truth are
// ignored):
//   ARE  = mean over true flows of |f^ - f| / f
//   AAE  = mean over true flows of |f^ - f|
//   RMSE = sqrt(mean over true flows of (f^ - f)^2)
//   WMRE (Kumar et al., SIGMETRICS'04) = sum_i |n_i - n^_i| / sum_i (n_i + n^_i)/2
//        over sizes i >= 1, where n_i = number of true flows of size i and
//        n^_i = number of true flows whose estimate, rounded to the nearest
//        integer (halves away from zero; negative or NaN -> 0), is i.
//        Flows estimated at 0 fall outside every bucket. 0 when both
//        distributions are empty.
//   Heavy hitters: truth T = {flows with f >= threshold}, reported R = the
//        distinct keys of the given list. precision = |T & R| / |R|,
//        recall = |T & R| / |T|, F1 = harmonic mean.
//        0/0 conventions: nothing reported -> precision 1 (no false
//        positives); no true heavy flow -> recall 1 (nothing missed);
//        F1 = 0 when precision + recall = 0, and 1 when both T and R are
//        empty (precision = recall = 1).
// An empty truth gives all error metrics 0.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "dpukit/measure.h"

namespace dpukit::measure {

GroundTruth ground_truth(std::span<const Packet> packets) {
  GroundTruth truth;
  // Traces have far fewer flows than packets; start modestly and let it grow.
  truth.reserve(std::min<size_t>(packets.size(), 1u << 16));
  for (const Packet& p : packets) ++truth[p.key];
  return truth;
}

namespace {

// Nearest integer, halves away from zero; negative, NaN -> 0; clamped so the
// conversion is defined.
uint64_t round_size(double e) {
  if (!(e >= 0.5)) return 0;  // also NaN
  constexpr double kMax = 9.0e18;
  if (e >= kMax) return static_cast<uint64_t>(kMax);
  return static_cast<uint64_t>(std::floor(e + 0.5));
}

}  // namespace

Metrics evaluate(const GroundTruth& truth, const std::unordered_map<FlowKey, double, FlowKeyHash>& estimates,
                 const std::vector<FlowKey>& reported_heavy, double hh_threshold) {
  Metrics m;
  double sum_rel = 0, sum_abs = 0, sum_sq = 0;
  uint64_t flows = 0;
  // size -> (n_i, n^_i)
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> dist;
  for (const auto& [key, count] : truth) {
    if (count == 0) continue;
    ++flows;
    double f = static_cast<double>(count);
    auto it = estimates.find(key);
    double e = it == estimates.end() ? 0.0 : it->second;
    double err = std::fabs(e - f);
    sum_rel += err / f;
    sum_abs += err;
    sum_sq += (e - f) * (e - f);
    ++dist[count].first;
    uint64_t r = round_size(e);
    if (r >= 1) ++dist[r].second;
    if (f >= hh_threshold) ++m.hh_true;
  }
  if (flows > 0) {
    m.are = sum_rel / static_cast<double>(flows);
    m.aae = sum_abs / static_cast<double>(flows);
    m.rmse = std::sqrt(sum_sq / static_cast<double>(flows));
  }
  double num = 0, den = 0;
  for (const auto& [size, n] : dist) {
    (void)size;
    double a = static_cast<double>(n.first), b = static_cast<double>(n.second);
    num += std::fabs(a - b);
    den += (a + b) / 2;
  }
  m.wmre = den > 0 ? num / den : 0.0;

  std::unordered_set<FlowKey, FlowKeyHash> reported(reported_heavy.begin(), reported_heavy.end());
  m.hh_reported = reported.size();
  uint64_t tp = 0;
  for (const FlowKey& k : reported) {
    auto it = truth.find(k);
    if (it != truth.end() && it->second > 0 && static_cast<double>(it->second) >= hh_threshold) ++tp;
  }
  m.hh_precision = m.hh_reported == 0 ? 1.0 : static_cast<double>(tp) / static_cast<double>(m.hh_reported);
  m.hh_recall = m.hh_true == 0 ? 1.0 : static_cast<double>(tp) / static_cast<double>(m.hh_true);
  double ps = m.hh_precision + m.hh_recall;
  m.hh_f1 = ps > 0 ? 2 * m.hh_precision * m.hh_recall / ps : 0.0;
  return m;
}

}  // namespace dpukit::measure
