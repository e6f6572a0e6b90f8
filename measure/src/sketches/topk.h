// The top-k candidate store of UnivMon's levels and NitroSketch: a min-heap of
// the k keys with the largest current estimates, plus an open-addressing index
// (linear probing, backward-shift deletion) so that a key's entry is found in
// O(1) and re-ordered in O(log k). No allocation after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "sketches/common.h"

namespace dpukit::measure::sketches {

class TopK {
 public:
  // `hash_seed`: the seed of the RowHash the caller hands to offer(key, hash, ..).
  TopK(size_t capacity, uint64_t hash_seed);

  // Bytes a TopK of this capacity allocates: per entry the key (13 B), its
  // value (4 B) and its index slot (4 B), plus the index (1.5 slots per entry,
  // 4 B each).
  static size_t bytes_for(size_t capacity);
  size_t memory_bytes() const { return bytes_for(capacity_); }

  size_t capacity() const { return capacity_; }
  size_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  float min_value() const { return vals_[0]; }  // when size() > 0
  uint64_t hash_seed() const { return seed_; }

  // The key's estimate is now `value`: update its entry, or insert it if the
  // heap has room or `value` beats the smallest entry (which is evicted).
  // When the heap is full and `value` does not beat the smallest entry,
  // nothing changes, not even a resident's value (it keeps its last, higher
  // estimate). `hash` must be key_hash(key): RowHash::of(key, hash_seed()).table_hash(),
  // which a sketch hashing its rows with the same seed already has.
  void offer(const FlowKey& key, uint64_t hash, float value);
  void offer(const FlowKey& key, float value) { offer(key, key_hash(key), value); }
  uint64_t key_hash(const FlowKey& key) const { return RowHash::of(key, seed_).table_hash(); }

  bool contains(const FlowKey& key) const;
  // Entries in heap order (index 0 holds the smallest value).
  const FlowKey& key(size_t i) const { return keys_[i]; }
  float value(size_t i) const { return vals_[i]; }

 private:
  uint32_t home(uint64_t hash) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(hash >> 1)) * table_size_) >> 32);
  }
  uint32_t next_slot(uint32_t s) const { return s + 1 == table_size_ ? 0 : s + 1; }
  // The key's index slot if present (second = true), else the empty slot where
  // it would go.
  std::pair<uint32_t, bool> find(const FlowKey& key, uint64_t hash) const;
  void erase_slot(uint32_t slot);
  void swap_entries(size_t a, size_t b);
  void sift_up(size_t pos);
  void sift_down(size_t pos);

  size_t capacity_;
  uint64_t seed_;
  uint32_t table_size_;
  size_t size_ = 0;
  std::vector<FlowKey> keys_;
  std::vector<float> vals_;
  std::vector<uint32_t> slot_of_;  // heap position -> index slot
  std::vector<uint32_t> table_;    // index slot -> heap position + 1 (0 = empty)
};

}  // namespace dpukit::measure::sketches
