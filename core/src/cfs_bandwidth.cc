// CfsBandwidth: a cgroup of the cpu controller whose quota makes its tasks
// run F of each CPU's time (docs/core.md, "The dpu's speed"; the choice of
// period is explained in dpu_speed.h).
//
// The group is made below the cgroup this process is in (the root group when
// the process is at the top, as on our machines), so the tasks go back where
// they came from when it is removed. The cpu controller is found in
// /proc/self/mountinfo: a cgroup v1 hierarchy that has it (cpu.cfs_quota_us,
// cpu.cfs_period_us) or, when only cgroup2 carries it, the unified hierarchy
// (cpu.max).
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/log.h"
#include "file_text.h"

namespace dpukit {

namespace {

constexpr const char* kWhat = "cfs bandwidth";
constexpr uint64_t kLongestPeriodUs = 1'000'000;  // the kernel's maximum period (1 s)

// Where the cpu controller is and which cgroup of it this process is in.
struct CpuHierarchy {
  bool v2 = false;
  std::string own_dir;  // the directory of this process's cgroup
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

bool has_word(const std::string& list, const std::string& word, char sep) {
  for (const auto& w : split(list, sep))
    if (w == word) return true;
  return false;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// mountinfo escapes spaces and such as \040.
std::string unescape_mount_path(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// This process's path in the hierarchy that carries `controller` ("" for
// cgroup2's line "0::/path"), from /proc/self/cgroup.
bool own_cgroup_path(const std::string& controller, std::string& path) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controller.empty() ? controllers.empty() : has_word(controllers, controller, ',')) {
      path = line.substr(b + 1);
      return true;
    }
  }
  return false;
}

// The directory of the cgroup at `path` of a hierarchy mounted at
// `mount_point` whose mount shows the subtree `mount_root` (not "/" inside
// some containers).
std::string cgroup_dir(const std::string& mount_point, const std::string& mount_root, const std::string& path) {
  std::string rel = path;
  if (mount_root != "/" && rel.compare(0, mount_root.size(), mount_root) == 0) rel = rel.substr(mount_root.size());
  if (rel == "/") rel.clear();
  return mount_point + rel;
}

// Finds the cpu controller; on failure `why` says what is missing.
bool find_cpu_hierarchy(CpuHierarchy& h, std::string& why) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) {
    why = "cannot read /proc/self/mountinfo";
    return false;
  }
  std::string line, v2_point, v2_root;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const auto fields = split(line, ' ');
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 5 || dash + 3 >= fields.size()) continue;
    const std::string& fstype = fields[dash + 1];
    const std::string root = unescape_mount_path(fields[3]), point = unescape_mount_path(fields[4]);
    if (fstype == "cgroup" && has_word(fields[dash + 3], "cpu", ',')) {
      std::string path;
      if (!own_cgroup_path("cpu", path)) {
        why = "the cpu controller is mounted at " + point + " but /proc/self/cgroup has no line for it";
        return false;
      }
      h = {false, cgroup_dir(point, root, path)};
      return true;
    }
    if (fstype == "cgroup2" && v2_point.empty()) {
      v2_point = point;
      v2_root = root;
    }
  }
  if (v2_point.empty()) {
    why = "no cpu controller: no cgroup v1 hierarchy with cpu and no cgroup2 mounted";
    return false;
  }
  std::string path, controllers;
  if (!own_cgroup_path("", path)) {
    why = "cgroup2 is mounted at " + v2_point + " but /proc/self/cgroup has no 0:: line";
    return false;
  }
  h = {true, cgroup_dir(v2_point, v2_root, path)};
  // The controllers a group below ours may enable are those ours has.
  if (!read_text_file(h.own_dir + "/cgroup.controllers", controllers) || !has_word(trim(controllers), "cpu", ' ')) {
    why = "no cpu controller: no cgroup v1 hierarchy has it, and cgroup2 at " + v2_point + " does not offer it to " +
          h.own_dir + " (cgroup.controllers: '" + trim(controllers) + "')";
    return false;
  }
  return true;
}

// Writes `text` to a cgroup file in one write(), as the kernel wants it;
// returns errno, 0 on success.
int write_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) err = errno ? errno : EIO;
  ::close(fd);
  return err;
}

void write_or_throw(const std::string& path, const std::string& text, const std::string& what) {
  if (const int err = write_file(path, text); err != 0)
    throw std::runtime_error(std::string(kWhat) + ": " + what + " (writing '" + text + "' to " + path +
                             "): " + std::strerror(err) +
                             (err == EACCES || err == EPERM ? " (needs root or a cgroup delegated to this user)" : ""));
}

std::vector<pid_t> read_ids(const std::string& path) {
  std::vector<pid_t> ids;
  std::ifstream in(path);
  long id = 0;
  while (in >> id) ids.push_back(static_cast<pid_t>(id));
  return ids;
}

// Makes the cpu controller available to groups below `dir` on cgroup2.
void enable_cpu_below(const std::string& dir) {
  std::string control;
  read_text_file(dir + "/cgroup.subtree_control", control);
  if (has_word(trim(control), "cpu", ' ')) return;
  write_or_throw(dir + "/cgroup.subtree_control", "+cpu", "cannot enable the cpu controller below " + dir);
}

std::atomic<unsigned> group_serial{0};

}  // namespace

uint64_t CfsBandwidth::default_period_us() {
  timespec tick{};
  if (::clock_getres(CLOCK_MONOTONIC_COARSE, &tick) != 0 || tick.tv_sec != 0 || tick.tv_nsec <= 0)
    tick.tv_nsec = 4'000'000;  // 250 Hz, the common default
  return std::max<uint64_t>(kShortestPeriodUs, 2 * static_cast<uint64_t>(tick.tv_nsec) / 1000);
}

std::string CfsBandwidth::unavailable_reason() {
  CpuHierarchy h;
  std::string why;
  if (!find_cpu_hierarchy(h, why)) return why;
  // Making and removing a group is the only test that covers every case
  // (not root, a read-only mount, a kernel without CFS bandwidth control).
  const std::string probe = h.own_dir + "/dpukit-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(group_serial.fetch_add(1));
  if (h.v2) {
    try {
      enable_cpu_below(h.own_dir);
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  if (::mkdir(probe.c_str(), 0755) != 0) {
    const int err = errno;
    return std::string("cannot create a cgroup in ") + h.own_dir + ": " + std::strerror(err) +
           (err == EACCES || err == EPERM ? " (needs root or a cgroup delegated to this user)" : "");
  }
  const std::string quota_file = probe + (h.v2 ? "/cpu.max" : "/cpu.cfs_quota_us");
  const bool bandwidth = ::access(quota_file.c_str(), W_OK) == 0;
  ::rmdir(probe.c_str());
  if (!bandwidth) return "the kernel has no CFS bandwidth control (no " + std::string(h.v2 ? "cpu.max" : "cpu.cfs_quota_us") + ")";
  return "";
}

CfsBandwidth::CfsBandwidth(const std::string& name, double factor, unsigned cpus, uint64_t period_us) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw std::invalid_argument(std::string(kWhat) + ": group name '" + name + "' must be a non-empty file name");
  if (!(factor > 0.0 && factor <= 1.0))
    throw std::invalid_argument(std::string(kWhat) + ": factor must be in (0, 1]");
  if (cpus == 0) throw std::invalid_argument(std::string(kWhat) + ": cpus must be at least 1");
  // The kernel refuses a period or a quota under 1 ms and a period over 1 s.
  period_us_ = std::max<uint64_t>(period_us ? period_us : default_period_us(), kShortestPeriodUs);
  if (factor < 1.0) {
    const double share = factor * cpus;
    period_us_ = std::max<uint64_t>(period_us_, static_cast<uint64_t>(std::ceil(kShortestQuotaUs / share)));
    if (period_us_ > kLongestPeriodUs)
      throw std::invalid_argument(std::string(kWhat) + ": factor " + std::to_string(factor) +
                                  " is too small: the kernel's quota is at least 1 ms in a period of at most 1 s");
    quota_us_ = std::max<uint64_t>(kShortestQuotaUs, static_cast<uint64_t>(std::llround(share * period_us_)));
  } else {
    quota_us_ = 0;  // no limit
  }

  CpuHierarchy h;
  std::string why;
  if (!find_cpu_hierarchy(h, why)) throw std::runtime_error(std::string(kWhat) + ": " + why);
  v2_ = h.v2;
  parent_ = h.own_dir;
  if (v2_) enable_cpu_below(parent_);
  dir_ = parent_ + "/dpukit-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(group_serial.fetch_add(1));
  if (::mkdir(dir_.c_str(), 0755) != 0) {
    const int err = errno;
    throw std::runtime_error(std::string(kWhat) + ": cannot create " + dir_ + ": " + std::strerror(err) +
                             (err == EACCES || err == EPERM ? " (needs root or a cgroup delegated to this user)" : ""));
  }
  try {
    // The group stands for dpu cores of its own, so within its quota it
    // does not yield to whatever else shares the host CPU: the largest
    // weight. Otherwise, on a busy machine, competition and not the quota
    // would set its speed, and F would be a ceiling, not a speed.
    write_or_throw(dir_ + (v2_ ? "/cpu.weight" : "/cpu.shares"), v2_ ? "10000" : "262144", "cannot set the weight");
    if (v2_) {
      write_or_throw(dir_ + "/cpu.max",
                     (quota_us_ ? std::to_string(quota_us_) : std::string("max")) + " " + std::to_string(period_us_),
                     "cannot set the quota");
    } else {
      // The quota of a new group is unlimited, so any valid period is
      // accepted first.
      write_or_throw(dir_ + "/cpu.cfs_period_us", std::to_string(period_us_), "cannot set the period");
      write_or_throw(dir_ + "/cpu.cfs_quota_us", quota_us_ ? std::to_string(quota_us_) : std::string("-1"),
                     "cannot set the quota");
    }
  } catch (...) {
    ::rmdir(dir_.c_str());
    throw;
  }
}

CfsBandwidth::~CfsBandwidth() {
  // Threads and processes go back to the group this process is in; a task
  // that was added or forked meanwhile is moved on the next pass.
  for (int pass = 0; pass < 100; ++pass) {
    if (v2_ && threaded_) {
      for (pid_t tid : read_ids(dir_ + "/cgroup.threads")) write_file(parent_ + "/cgroup.threads", std::to_string(tid));
    } else {
      for (pid_t pid : read_ids(dir_ + "/cgroup.procs")) write_file(parent_ + "/cgroup.procs", std::to_string(pid));
      if (!v2_)
        for (pid_t tid : read_ids(dir_ + "/tasks")) write_file(parent_ + "/tasks", std::to_string(tid));
    }
    if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) return;
    if (errno != EBUSY) break;
    ::usleep(1000);
  }
  log_warn(std::string(kWhat) + ": could not remove " + dir_ + ": " + std::strerror(errno));
}

void CfsBandwidth::add_thread(pid_t tid) {
  if (v2_) {
    // A thread of a process can sit in another group than its process only
    // in a threaded group below the process's own (cgroup-v2.rst,
    // "Threads"); making the group threaded cannot be undone, and then it
    // takes no whole processes.
    if (!threaded_) {
      std::string type;
      read_text_file(dir_ + "/cgroup.type", type);
      if (trim(type) != "threaded")
        write_or_throw(dir_ + "/cgroup.type", "threaded", "cannot make the group threaded for a single thread");
      threaded_ = true;
    }
    write_or_throw(dir_ + "/cgroup.threads", std::to_string(tid),
                   "cannot move thread " + std::to_string(tid) + " (on cgroup2 its process must be in " + parent_ + ")");
  } else {
    write_or_throw(dir_ + "/tasks", std::to_string(tid), "cannot move thread " + std::to_string(tid));
  }
}

void CfsBandwidth::add_process(pid_t pid) {
  if (v2_ && threaded_)
    throw std::runtime_error(std::string(kWhat) + ": " + dir_ +
                             " already holds single threads (a threaded group on cgroup2) and cannot take a process");
  write_or_throw(dir_ + "/cgroup.procs", std::to_string(pid), "cannot move process " + std::to_string(pid));
}

CfsBandwidth::Stat CfsBandwidth::stat() const {
  std::string text;
  if (!read_text_file(dir_ + "/cpu.stat", text)) throw std::runtime_error(std::string(kWhat) + ": cannot read " + dir_ + "/cpu.stat");
  Stat s;
  std::istringstream in(text);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "nr_periods") s.periods = value;
    else if (key == "nr_throttled") s.throttled_periods = value;
    else if (key == "throttled_time") s.throttled_ns = value;          // v1: ns
    else if (key == "throttled_usec") s.throttled_ns = value * 1000;  // v2: us
  }
  return s;
}

}  // namespace dpukit
