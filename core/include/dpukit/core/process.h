// Processes that stand for a place (an agent or a worker on the dpu side, a
// benchmarked program on the host): started pinned to that place's CPUs with
// their output in a log, reaped with the CPU time they used; and where this
// program's own executable is, to start another copy of it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dpukit/core/accounting.h"

namespace dpukit {

// This program's executable (/proc/self/exe). Throws std::runtime_error.
std::filesystem::path own_executable();

struct SpawnOptions {
  // The child's CPUs. Empty: every CPU this process was started with (so a
  // child of a pinned process is not pinned with it). CPUs this process may
  // not use are dropped with a warning.
  CpuSet cpus;
  std::string log;                         // stdout and stderr to this file; empty: inherited
  bool append_log = false;                 // add to the log instead of starting it afresh
  std::map<std::string, std::string> env;  // set in the child's environment
  // SIGKILL the child when the thread that spawned it ends (PR_SET_PDEATHSIG
  // follows the thread, not the process): spawn from a thread that outlives it.
  bool die_with_parent = false;
};

// One child process. Not thread-safe: one thread (or a mutex) at a time.
class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts argv (argv[0] is looked up in PATH when it has no '/'). Throws
  // std::runtime_error naming the program when it cannot be started.
  static ChildProcess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // a child still running is killed (SIGKILL) and reaped

  pid_t pid() const { return pid_; }  // -1 when none was started
  bool running();                     // reaps the child if it has exited; never blocks
  bool wait_for(std::chrono::milliseconds timeout);  // true once the child has exited and was reaped
  void wait();
  void kill(int sig = SIGKILL) const;  // nothing once it was reaped

  // After it was reaped:
  bool exited() const { return reaped_; }
  int status() const { return status_; }  // as wait4() gives it
  bool succeeded() const;                 // exited with status 0
  uint64_t cpu_ns() const { return cpu_ns_; }  // user + system (wait4's rusage)
  std::string exit_text() const;  // "running", "exited with status N", "killed by signal N"

 private:
  bool reap(bool block);
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  uint64_t cpu_ns_ = 0;
};

}  // namespace dpukit
