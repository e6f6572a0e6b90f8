// User space's side of core/bpf/percpu_counters.bpf.h: a BPF program's
// per-CPU counters summed over the CPUs. Header-only, so that only code that
// loads BPF programs needs libbpf.
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <span>
#include <vector>

namespace dpukit {

// Fills sums[i] with counter i summed over every possible CPU. The counters
// are read from the highest index down, so a program that bumps its
// counter 0 before the others never shows another ahead of it. Returns 0,
// or the errno of the call that failed, which *failed then names.
inline int sum_percpu_counters(int map_fd, std::span<uint64_t> sums, const char** failed) {
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) {
    *failed = "libbpf_num_possible_cpus";
    return -cpus;
  }
  std::vector<uint64_t> per_cpu(static_cast<size_t>(cpus));
  for (uint32_t i = static_cast<uint32_t>(sums.size()); i-- > 0;) {
    if (bpf_map_lookup_elem(map_fd, &i, per_cpu.data()) != 0) {
      *failed = "bpf_map_lookup_elem(counters)";
      return errno;
    }
    sums[i] = 0;
    for (uint64_t v : per_cpu) sums[i] += v;
  }
  return 0;
}

}  // namespace dpukit
