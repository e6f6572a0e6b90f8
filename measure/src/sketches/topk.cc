#include "sketches/topk.h"

#include <stdexcept>

#include "sketches/common.h"

namespace dpukit::measure::sketches {

namespace {
uint32_t table_size_for(size_t capacity) { return static_cast<uint32_t>(capacity + capacity / 2 + 1); }
}  // namespace

TopK::TopK(size_t capacity, uint64_t hash_seed)
    : capacity_(capacity), seed_(hash_seed), table_size_(table_size_for(capacity)) {
  if (capacity == 0 || capacity > (size_t{1} << 30)) throw std::invalid_argument("top-k capacity must be in [1, 2^30]");
  keys_.resize(capacity);
  vals_.resize(capacity);
  slot_of_.resize(capacity);
  table_.assign(table_size_, 0);
}

size_t TopK::bytes_for(size_t capacity) {
  return capacity * (sizeof(FlowKey) + sizeof(float) + sizeof(uint32_t)) + size_t{table_size_for(capacity)} * 4;
}

std::pair<uint32_t, bool> TopK::find(const FlowKey& key, uint64_t hash) const {
  uint32_t s = home(hash);
  while (table_[s] != 0) {
    if (same_key(keys_[table_[s] - 1], key)) return {s, true};
    s = next_slot(s);
  }
  return {s, false};
}

bool TopK::contains(const FlowKey& key) const { return find(key, key_hash(key)).second; }

// Backward-shift deletion: walk the cluster after `slot` and pull back every
// entry whose home is not cyclically within (slot, j], so that no lookup ever
// meets a hole before its key.
void TopK::erase_slot(uint32_t slot) {
  uint32_t hole = slot;
  uint32_t j = slot;
  for (;;) {
    j = next_slot(j);
    if (table_[j] == 0) break;
    const uint32_t k = home(key_hash(keys_[table_[j] - 1]));
    const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
    if (stays) continue;
    table_[hole] = table_[j];
    slot_of_[table_[hole] - 1] = hole;
    hole = j;
  }
  table_[hole] = 0;
}

void TopK::swap_entries(size_t a, size_t b) {
  std::swap(keys_[a], keys_[b]);
  std::swap(vals_[a], vals_[b]);
  std::swap(slot_of_[a], slot_of_[b]);
  table_[slot_of_[a]] = static_cast<uint32_t>(a + 1);
  table_[slot_of_[b]] = static_cast<uint32_t>(b + 1);
}

void TopK::sift_up(size_t pos) {
  while (pos > 0) {
    const size_t parent = (pos - 1) / 2;
    if (!(vals_[pos] < vals_[parent])) break;
    swap_entries(pos, parent);
    pos = parent;
  }
}

void TopK::sift_down(size_t pos) {
  for (;;) {
    const size_t l = 2 * pos + 1;
    if (l >= size_) break;
    size_t smallest = l;
    if (l + 1 < size_ && vals_[l + 1] < vals_[l]) smallest = l + 1;
    if (!(vals_[smallest] < vals_[pos])) break;
    swap_entries(pos, smallest);
    pos = smallest;
  }
}

void TopK::offer(const FlowKey& key, uint64_t hash, float value) {
  // Fast path: a full heap whose smallest value is not beaten. A newcomer
  // would be rejected; a resident whose estimate dropped keeps its older,
  // higher value, which only delays its eviction (queries re-estimate).
  if (size_ == capacity_ && !(value > vals_[0])) return;
  auto [slot, found] = find(key, hash);
  if (found) {
    const size_t pos = table_[slot] - 1;
    const float old = vals_[pos];
    vals_[pos] = value;
    if (value > old) {
      sift_down(pos);
    } else if (value < old) {
      sift_up(pos);
    }
    return;
  }
  if (size_ < capacity_) {
    const size_t pos = size_++;
    keys_[pos] = key;
    vals_[pos] = value;
    slot_of_[pos] = slot;
    table_[slot] = static_cast<uint32_t>(pos + 1);
    sift_up(pos);
    return;
  }
  // Full, and `value` beats the smallest entry: evict that one. Deletion may
  // shift the cluster the new key probes through, so look its slot up again.
  erase_slot(slot_of_[0]);
  slot = find(key, hash).first;
  keys_[0] = key;
  vals_[0] = value;
  slot_of_[0] = slot;
  table_[slot] = 1;
  sift_down(0);
}

}  // namespace dpukit::measure::sketches
