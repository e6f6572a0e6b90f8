// NitroSketch's counter-array sampling (Liu et al., SIGCOMM 2019) over the
// d = 3 rows of a Count-Min or a Count Sketch: each (packet, row) slot is
// selected with probability p (geometric gaps, so an untouched packet costs
// a compare) and adds 1/p. The modes, the L2 switching rule, hashing and
// float counters: docs/measure.md, "NitroSketch's counter-array sampling".
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

enum class NitroKind { kCountMin, kCountSketch };
enum class SwitchRule {
  kLineRate,  // AlwaysLineRate: sample from the first packet
  kPackets,   // AlwaysCorrect: exact for the first N packets
  kL2,        // AlwaysCorrect: exact until the L2 estimate reaches the bound
  kExternal,  // AlwaysCorrect: exact until start_sampling() is called
};

template <NitroKind K>
class NitroRows {
 public:
  static constexpr int kRows = RowHash::kRows;

  NitroRows(uint32_t width, uint64_t sampler_seed, double p, SwitchRule rule, uint64_t switch_packets = 0)
      : width_(width),
        p_(p),
        rule_(rule),
        switch_packets_(switch_packets),
        sampler_(p, sampler_seed),
        f2_threshold_(double(width) * width * (1.0 + 3.0 * std::sqrt(2.0 / width))) {
    check_sample_p(p);
    counters_.assign(size_t(kRows) * width_, 0.0f);
    if (rule_ == SwitchRule::kLineRate || (rule_ == SwitchRule::kPackets && switch_packets_ == 0)) start_sampling();
  }

  static constexpr uint32_t kAllRows = (1u << kRows) - 1;

  // Adds `count` packets of a key. `hash()` gives the key's RowHash; it is
  // called at most once, and only when a row is updated. Returns the mask of
  // the rows updated; when it is not zero, `h` holds the key's hash.
  template <class HashFn>
  uint32_t update(uint32_t count, HashFn&& hash, RowHash& h) {
    if (count == 0) return 0;
    if (sampling_) return sampled_update(count, hash, h, 0);
    uint32_t exact = count;
    if (rule_ == SwitchRule::kPackets) exact = uint32_t(std::min<uint64_t>(count, switch_packets_ - packets_));
    h = hash();
    exact_update(h, exact);
    if (rule_ == SwitchRule::kPackets ? packets_ >= switch_packets_
                                      : rule_ == SwitchRule::kL2 && f2_estimate() >= f2_threshold_) {
      start_sampling();
    }
    if (exact < count) sampled_update(count - exact, hash, h, kAllRows);
    return kAllRows;
  }

  // Batched updates while sampling. `n` packets (of count 1) that the
  // sampler passes over whole, known from unselected_slots() >= 3n: one step
  // instead of one a packet.
  uint64_t unselected_slots() const { return skip_; }
  void pass(uint64_t n) {
    packets_ += n;
    skip_ -= n * kRows;
  }
  // Otherwise one packet at a time in two steps: the
  // rows the sampler selects for the next packet (advancing it; no hash
  // needed), then, for a packet with some, add_selected() with its hash.
  // Together they do what update(1, ..) does.
  uint32_t select_one() {
    ++packets_;
    if (skip_ >= kRows) {  // the common case at small p: no row touched
      skip_ -= kRows;
      return 0;
    }
    uint32_t mask = 0;
    uint64_t pos = skip_;
    do {
      mask |= 1u << pos;
      ++selected_;
      pos += sampler_.next_gap();
    } while (pos < kRows);
    skip_ = pos - kRows;
    return mask;
  }
  void add_selected(const RowHash& h, uint32_t mask) {
    for (int r = 0; r < kRows; ++r)
      if (mask & (1u << r)) add_weight(r, h);
  }
  // Asks for the counters a packet's estimate reads.
  void prefetch(const RowHash& h) const {
    for (int r = 0; r < kRows; ++r) __builtin_prefetch(&counters_[size_t(r) * width_ + h.index(r, width_)], 1);
  }

  double estimate_hashed(const RowHash& h) const {
    double v[kRows];
    for (int r = 0; r < kRows; ++r) v[r] = row_read(r, h);
    if constexpr (K == NitroKind::kCountMin) {
      return std::min({v[0], v[1], v[2]});
    } else {
      return median3(v[0], v[1], v[2]);
    }
  }

  // Leave the exact phase (AlwaysCorrect): from now on p = sample_p.
  void start_sampling() {
    if (sampling_) return;
    sampling_ = true;
    weight_ = static_cast<float>(1.0 / p_);
    skip_ = sampler_.failures();
  }

  // F2 = L2^2 estimated from the counters (maintained while exact).
  double f2_estimate() const {
    double e[kRows];
    for (int r = 0; r < kRows; ++r) {
      if constexpr (K == NitroKind::kCountMin) {
        e[r] = width_ > 1 ? (double(width_) * sumsq_[r] - f1_ * f1_) / (double(width_) - 1.0) : sumsq_[r];
      } else {
        e[r] = sumsq_[r];
      }
    }
    return median3(e[0], e[1], e[2]);
  }
  double f2_threshold() const { return f2_threshold_; }
  // The median over rows of the sum of squared counters, from the counters
  // themselves (O(width), query time): for Count Sketch an estimate of F2 plus
  // the sampling noise.
  double f2_from_counters() const {
    double s[kRows] = {0, 0, 0};
    for (int r = 0; r < kRows; ++r) {
      for (uint32_t i = 0; i < width_; ++i) s[r] += double(counters_[size_t(r) * width_ + i]) * counters_[size_t(r) * width_ + i];
    }
    return median3(s[0], s[1], s[2]);
  }
  // Variance that sampling adds to one row read of a flow of size f.
  double own_noise_var(double f) const { return sampling_ ? std::max(f, 0.0) * (1.0 / p_ - 1.0) : 0.0; }

  bool sampling() const { return sampling_; }
  double p() const { return p_; }
  float weight() const { return weight_; }           // 1 while exact, float(1/p) while sampling
  uint64_t packets() const { return packets_; }      // packets seen
  uint64_t selected() const { return selected_; }    // slots updated while sampling
  uint32_t width() const { return width_; }
  uint32_t index(const RowHash& h, int r) const { return h.index(r, width_); }
  float counter(int r, uint32_t i) const { return counters_[size_t(r) * width_ + i]; }
  double row_read(int r, const RowHash& h) const {
    const float c = counters_[size_t(r) * width_ + h.index(r, width_)];
    if constexpr (K == NitroKind::kCountMin) {
      return c;
    } else {
      return double(h.sign(r)) * c;
    }
  }
  size_t memory_bytes() const { return counters_.size() * sizeof(float); }

 private:
  // p = 1: every row, weight 1 per packet: the vanilla sketch.
  void exact_update(const RowHash& h, uint32_t n) {
    packets_ += n;
    f1_ += n;
    for (int r = 0; r < kRows; ++r) {
      float& c = counters_[size_t(r) * width_ + h.index(r, width_)];
      const double delta = (K == NitroKind::kCountSketch && !h.plus(r)) ? -double(n) : double(n);
      sumsq_[r] += (2.0 * c + delta) * delta;  // (c + d)^2 - c^2
      c = static_cast<float>(c + delta);
    }
  }

  // One selected slot of row r: the weight, with the row's sign (Count Sketch).
  void add_weight(int r, const RowHash& h) {
    float& c = counters_[size_t(r) * width_ + h.index(r, width_)];
    if constexpr (K == NitroKind::kCountMin) {
      c += weight_;
    } else {
      c += h.plus(r) ? weight_ : -weight_;
    }
  }

  // Hashes the key only when the sampler selects one of its slots.
  template <class HashFn>
  uint32_t sampled_update(uint32_t n, HashFn&& hash, RowHash& h, uint32_t mask) {
    packets_ += n;
    const uint64_t slots = uint64_t(n) * kRows;
    if (skip_ >= slots) {  // the common case at small p: no row touched
      skip_ -= slots;
      return mask;
    }
    if (!mask) h = hash();
    uint64_t pos = skip_;
    do {
      const int r = static_cast<int>(pos % kRows);
      mask |= 1u << r;
      add_weight(r, h);
      ++selected_;
      pos += sampler_.next_gap();
    } while (pos < slots);
    skip_ = pos - slots;
    return mask;
  }

  uint32_t width_;
  double p_;
  SwitchRule rule_;
  uint64_t switch_packets_;
  GeometricSampler sampler_;
  double f2_threshold_;
  bool sampling_ = false;
  float weight_ = 1.0f;
  uint64_t skip_ = 0;  // unselected slots before the next selected one
  uint64_t packets_ = 0;
  uint64_t selected_ = 0;
  double f1_ = 0;
  double sumsq_[kRows] = {0, 0, 0};
  std::vector<float> counters_;  // row-major, kRows x width_
};

}  // namespace dpukit::measure::sketches
