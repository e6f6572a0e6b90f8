// A BPF program's event counters: a per-CPU array `counters` of COUNTERS
// slots (the program defines COUNTERS before including this), and the one
// way to bump one. A program does not leave its CPU mid-run, so its slot
// needs no atomic. User space sums the CPUs with dpukit::sum_percpu_counters
// (core/include/dpukit/core/bpf_counters.h).
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, COUNTERS);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_add(__u32 which, __u64 amount) {
  __u64 *value = bpf_map_lookup_elem(&counters, &which);
  if (value) *value += amount;
}
