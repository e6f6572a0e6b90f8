// The YCSB core workloads (Cooper et al., SoCC'10) and their key choosers,
// written from the published definitions:
//
//   load  100% insert                         records 0..N-1
//   a     50% read, 50% update                scrambled zipfian
//   b     95% read, 5% update                 scrambled zipfian
//   c     100% read                           scrambled zipfian
//   d     95% read, 5% insert                 latest
//   e     95% scan (length uniform 1..100), 5% insert   scrambled zipfian
//   f     50% read, 50% read-modify-write     scrambled zipfian
//
// Zipfian is Gray et al.'s generator ("Quickly generating billion-record
// synthetic databases", SIGMOD'94) with constant 0.99. The scrambled variant
// draws a popularity rank over a fixed space of 10^10 items and hashes it
// onto the records, so popular keys are spread over the key space instead of
// being the lowest record numbers. "Latest" draws a zipfian rank counted back
// from the newest inserted record.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "dpukit/core/random.h"

namespace dpukit::kv::bench {

// zeta(n, theta) = sum_{i=1..n} i^-theta. Summed term by term for the first
// 10^5 terms; beyond that the tail uses the Euler-Maclaurin formula (the
// error is far below double precision for theta in (0, 1)).
double zeta(uint64_t n, double theta);

// Items 0..n-1, item 0 the most popular. The item count may grow between
// draws (the latest distribution); zeta is then extended term by term.
class Zipfian {
 public:
  Zipfian(uint64_t n, double theta);
  Zipfian(uint64_t n, double theta, double zeta_n);  // zeta(n, theta) already known
  uint64_t next(SplitMix64& rng);
  uint64_t next(SplitMix64& rng, uint64_t n);  // with the item count now n (>= 1)
  uint64_t items() const { return n_; }

 private:
  void set_items(uint64_t n);
  uint64_t n_;
  double theta_, alpha_, zeta2_, zetan_, eta_;
};

class ScrambledZipfian {
 public:
  static constexpr uint64_t kItemSpace = 10'000'000'000ull;  // YCSB's ITEM_COUNT
  // `ranks` spans kItemSpace items (its zeta is the expensive part: build it once, copy it per thread).
  ScrambledZipfian(uint64_t records, const Zipfian& ranks) : records_(records), ranks_(ranks) {}
  uint64_t next(SplitMix64& rng) { return mix64(ranks_.next(rng) + 0x5bd1e995ull) % records_; }

 private:
  uint64_t records_;
  Zipfian ranks_;
};

// Record numbers handed to inserts, and how far they are known to be all
// written: the latest distribution and the zipfian key choice only pick
// records below limit(), so a read never races the insert of its key.
class InsertSequence {
 public:
  explicit InsertSequence(uint64_t existing) : next_(existing), limit_(existing) {}
  uint64_t claim() { return next_.fetch_add(1, std::memory_order_relaxed); }
  void acknowledge(uint64_t record);
  uint64_t limit() const { return limit_.load(std::memory_order_acquire); }  // records [0, limit) all written

 private:
  std::atomic<uint64_t> next_, limit_;
  std::mutex mu_;
  std::set<uint64_t> done_above_;  // acknowledged records above limit
};

enum class OpType { kRead = 0, kUpdate, kInsert, kScan, kRmw };
inline constexpr int kOpTypes = 5;
const char* op_name(OpType t);

enum class KeyDist { kZipfian, kLatest, kUniform };

struct Workload {
  std::string name;
  double proportion[kOpTypes] = {0, 0, 0, 0, 0};
  KeyDist dist = KeyDist::kZipfian;
  uint32_t max_scan = 100;
  bool load = false;  // insert records 0..N-1 once each, in record order
};

// "load" or "a".."f"; throws std::invalid_argument for anything else.
Workload ycsb_workload(const std::string& name);

}  // namespace dpukit::kv::bench
