#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

#include "affinity.h"
#include "dpukit/core/accounting.h"

namespace dpukit {

CpuSet CpuSet::parse(const std::string& text) {
  std::set<int> out;
  size_t i = 0;
  auto number = [&](size_t& pos) {
    size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == start || pos - start > 4) throw std::invalid_argument("bad CPU list '" + text + "': expected a CPU number");
    return std::stoi(text.substr(start, pos - start));
  };
  while (i < text.size()) {
    int a = number(i), b = a;
    if (i < text.size() && text[i] == '-') {
      ++i;
      b = number(i);
      if (b < a) throw std::invalid_argument("bad CPU list '" + text + "': range goes backwards");
    }
    for (int c = a; c <= b; ++c) out.insert(c);
    if (i < text.size()) {
      if (text[i] != ',') throw std::invalid_argument("bad CPU list '" + text + "': unexpected '" + text[i] + "'");
      ++i;
      if (i == text.size()) throw std::invalid_argument("bad CPU list '" + text + "': trailing comma");
    }
  }
  if (out.empty()) throw std::invalid_argument("bad CPU list: empty");
  return CpuSet{std::vector<int>(out.begin(), out.end())};
}

std::string CpuSet::str() const {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

namespace {
CpuSet read_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CpuSet out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.cpus.push_back(c);
  return out;
}
// Read before main(), before any thread pins itself: the CPUs the process was given.
const CpuSet g_process_cpus = read_affinity();
}  // namespace

CpuSet available_cpus() { return g_process_cpus.empty() ? read_affinity() : g_process_cpus; }

namespace detail {
CpuSet usable_cpus(const CpuSet& wanted, std::string* dropped) {
  CpuSet avail = available_cpus(), out;
  for (int c : wanted.cpus) {
    if (std::find(avail.cpus.begin(), avail.cpus.end(), c) != avail.cpus.end()) out.cpus.push_back(c);
    else if (dropped) *dropped += (dropped->empty() ? "" : ",") + std::to_string(c);
  }
  return out;
}

cpu_set_t affinity_mask(const CpuSet& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus.cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return set;
}
}  // namespace detail

std::string pin_current_thread(const CpuSet& cpus) {
  if (cpus.empty()) return "";
  std::string dropped;
  CpuSet use = detail::usable_cpus(cpus, &dropped);
  if (use.empty()) return "CPUs " + cpus.str() + " are not available here; thread left unpinned";
  cpu_set_t set = detail::affinity_mask(use);
  if (int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0)
    return std::string("pinning to ") + use.str() + " failed: " + std::strerror(e);
  return dropped.empty() ? "" : "CPUs " + dropped + " are not available here; pinned to " + use.str();
}

Placement Placement::plan(const std::string& host_cpus, const std::string& dpu_cpus, const std::string& hw_cpus) {
  Placement p;
  CpuSet avail = available_cpus();
  auto pick = [&](const std::string& asked, CpuSet fallback, const char* place) {
    if (asked.empty()) return fallback;
    std::string dropped;
    CpuSet use = detail::usable_cpus(CpuSet::parse(asked), &dropped);
    if (!dropped.empty()) p.note += std::string(place) + ": CPUs " + dropped + " not available; ";
    return use.empty() ? fallback : use;
  };
  CpuSet first, rest;
  if (!avail.empty()) first.cpus.push_back(avail.cpus.front());
  rest.cpus.assign(avail.cpus.begin() + (avail.cpus.size() > 1 ? 1 : 0), avail.cpus.end());
  if (avail.cpus.size() < 2) p.note += "one CPU: host, dpu and hw share it; ";
  p.host = pick(host_cpus, first, "host");
  p.dpu = pick(dpu_cpus, rest, "dpu");
  p.hw = pick(hw_cpus, p.dpu, "hw");
  for (int c : p.host.cpus)
    if (std::find(p.dpu.cpus.begin(), p.dpu.cpus.end(), c) != p.dpu.cpus.end()) {
      p.note += "host and dpu share CPU " + std::to_string(c) + "; ";
      break;
    }
  if (p.note.size() >= 2) p.note.resize(p.note.size() - 2);
  return p;
}

}  // namespace dpukit
