#include "dpukit/core/process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "affinity.h"
#include "dpukit/core/log.h"

extern char** environ;

namespace dpukit {

std::filesystem::path own_executable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this program's executable (/proc/self/exe): " + ec.message());
  return p;
}

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) throw std::invalid_argument("spawn: no program given");
  const std::string& program = argv[0];
  // Everything the child needs is made before fork: between fork and exec a
  // child of a threaded process may only make async-signal-safe calls.
  std::string dropped;
  CpuSet cpus = options.cpus.empty() ? available_cpus() : detail::usable_cpus(options.cpus, &dropped);
  if (!dropped.empty()) log_warn(program + ": CPUs " + dropped + " are not available here");
  if (cpus.empty()) cpus = available_cpus();
  cpu_set_t mask = detail::affinity_mask(cpus);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> added;
  std::vector<char*> envp;
  if (!options.env.empty()) {
    for (char** e = environ; *e; ++e) {
      std::string_view var(*e);
      if (!options.env.count(std::string(var.substr(0, var.find('='))))) envp.push_back(*e);
    }
    for (const auto& [k, v] : options.env) added.push_back(k + "=" + v);
    for (auto& a : added) envp.push_back(a.data());
    envp.push_back(nullptr);
  }

  int log_fd = -1;
  if (!options.log.empty()) {
    int mode = options.append_log ? O_APPEND : O_TRUNC;
    log_fd = ::open(options.log.c_str(), O_WRONLY | O_CREAT | mode | O_CLOEXEC, 0644);
    if (log_fd < 0) throw std::runtime_error("cannot create the log " + options.log + ": " + std::strerror(errno));
  }
  // The child reports a failed exec through this pipe; a successful exec closes it.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    if (log_fd >= 0) ::close(log_fd);
    throw std::runtime_error("cannot start " + program + ": pipe: " + std::strerror(e));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the parent may block signals it takes from a signalfd
    ::sched_setaffinity(0, sizeof(mask), &mask);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    if (options.env.empty()) ::execvp(args[0], args.data());
    else ::execvpe(args[0], args.data(), envp.data());
    int e = errno;
    [[maybe_unused]] ssize_t w = ::write(report[1], &e, sizeof(e));
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(report[1]);
  if (log_fd >= 0) ::close(log_fd);
  if (pid < 0) {
    ::close(report[0]);
    throw std::runtime_error("cannot start " + program + ": fork: " + std::strerror(fork_errno));
  }
  ChildProcess c;
  c.pid_ = pid;
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(report[0], &exec_errno, sizeof(exec_errno));
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    c.wait();
    throw std::runtime_error("cannot run " + program + ": " + std::strerror(exec_errno));
  }
  return c;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), reaped_(o.reaped_), status_(o.status_), cpu_ns_(o.cpu_ns_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !reaped_) {
      kill(SIGKILL);
      reap(true);
    }
    pid_ = std::exchange(o.pid_, -1);
    reaped_ = o.reaped_;
    status_ = o.status_;
    cpu_ns_ = o.cpu_ns_;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(SIGKILL);
    reap(true);
  }
}

bool ChildProcess::reap(bool block) {
  if (pid_ <= 0 || reaped_) return reaped_;
  int status = 0;
  rusage ru{};
  pid_t r;
  do r = ::wait4(pid_, &status, block ? 0 : WNOHANG, &ru);
  while (r < 0 && errno == EINTR);
  if (r == pid_) {
    reaped_ = true;
    status_ = status;
    cpu_ns_ = rusage_cpu_ns(ru);
  } else if (r < 0 && errno == ECHILD) {
    reaped_ = true;  // reaped elsewhere (or SIGCHLD ignored): nothing more to learn
    status_ = -1;
  }
  return reaped_;
}

bool ChildProcess::running() { return pid_ > 0 && !reap(false); }

bool ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reap(false)) {
    if (pid_ <= 0 || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void ChildProcess::wait() { reap(true); }

void ChildProcess::kill(int sig) const {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

bool ChildProcess::succeeded() const { return reaped_ && status_ >= 0 && WIFEXITED(status_) && WEXITSTATUS(status_) == 0; }

std::string ChildProcess::exit_text() const {
  if (pid_ <= 0) return "not started";
  if (!reaped_) return "running";
  if (status_ < 0) return "reaped elsewhere";
  if (WIFSIGNALED(status_)) return "killed by signal " + std::to_string(WTERMSIG(status_));
  return "exited with status " + std::to_string(WEXITSTATUS(status_));
}

}  // namespace dpukit
