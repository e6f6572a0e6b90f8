// dpukit-agent: the dpu side of PulseDB (docs/architecture.md §3.2), the
// agent of dpukit/kv_agent.h as a process: it owns the SST file pool, listens
// for hosts, and runs one write-persist engine per queue pair, each on a
// thread of its own. A host that dies ends only its own thread. SIGUSR1
// writes the statistics (a dpukit.result/1 whose cpu_ns.dpu is the agent's
// CPU time so far, its DMA threads' in cpu_ns.hw); SIGTERM or SIGINT stops
// accepting, lets every queue pair finish its I/O in flight, writes them and
// exits 0. Also `dpukit-agent pool check|release`, the operator's commands.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/log.h"
#include "dpukit/kv_agent.h"

namespace dpukit::kv {
namespace {

const char* kTool = "dpukit-agent";

AgentOptions parse_args(int argc, char** argv) {
  ArgParser p(kTool,
              "The dpu-side agent of PulseDB: serves write-persist queue pairs from RocksDB hosts over the channel,\n"
              "writing SST files into a pre-allocated file pool.\n"
              "Also: `dpukit-agent pool check --pool DIR [--db DIR]` and\n"
              "`dpukit-agent pool release SLOT --pool DIR [--agent SOCKET]` (through this agent while it runs).");
  p.option("listen", "Unix socket path to listen at", "", true);
  p.option("pool", "directory of the SST file pool. Created if missing: every slot is written out with zeros\n"
                   "once (slots x slot size: 4.5 GiB by default, 1.8-7.9 s on this project's VM, about 20 s on a\n"
                   "slower disk; docs/kv.md, \"What it costs\"); the agent prints its progress and listens when it\n"
                   "is done. An existing pool is opened in well under a second");
  p.option("slots", "slot files in the pool", "64");
  p.option("slot-size", "bytes per slot file", "72MiB");
  p.cpus_option("cpus", "CPUs for the agent and all its threads, e.g. 1 or 1-3");
  p.dpu_speed_option();
  const char* io_engine = std::getenv("DPUKIT_AGENT_IO_ENGINE");
  p.option("io-engine", "how the writes reach the kernel (PulseDB §IV-E): io_uring (a submit per batch),\n"
                        "io_uring-sqpoll (a kernel thread polls the submission queue), libaio (Linux AIO: io_submit per\n"
                        "batch, io_getevents; sync_file_range and close as system calls) or pwrite (a system call per\n"
                        "I/O, waited for) (default $DPUKIT_AGENT_IO_ENGINE, else io_uring)",
           io_engine && *io_engine ? io_engine : "io_uring");
  p.option("stats", "write statistics as JSON to this file on SIGUSR1 and at exit");
  p.flag("no-pool", "no pool: every SST file is a normal file at its name");
  p.flag("buffered", "write through the page cache (default: O_DIRECT where the filesystem takes it, so that the\n"
                     "kernel's work for the writes runs in the agent's threads, not in writeback kworkers)");
  p.parse(argc, argv);
  AgentOptions c;
  c.command_line.assign(argv, argv + argc);
  c.listen = p.str("listen");
  c.stats = p.str("stats");
  c.direct_io = !p.has("buffered");
  c.dpu_speed = p.dpu_speed();
  try {
    c.io_engine = parse_io_engine(p.str("io-engine"));
  } catch (const std::invalid_argument& e) {
    p.fail(std::string("--io-engine: ") + e.what());
  }
  if (p.has("no-pool") && p.has("pool")) p.fail("--pool and --no-pool exclude each other");
  if (!p.has("no-pool")) {
    if (!p.has("pool")) p.fail("--pool DIR is required (or --no-pool)");
    uint64_t slots = p.u64("slots"), slot_bytes = p.bytes("slot-size");
    if (slots == 0 || slots > 1'000'000) p.fail("--slots must be between 1 and 1000000");
    if (slot_bytes == 0) p.fail("--slot-size must be positive");
    c.pool = AgentOptions::Pool{p.str("pool"), slots, slot_bytes};
  }
  if (p.has("cpus")) {
    try {
      c.cpus = CpuSet::parse(p.str("cpus"));
    } catch (const std::invalid_argument& e) {
      p.fail(std::string("--cpus: ") + e.what());
    }
  }
  return c;
}

// Signals arrive as reads of a signalfd in the main loop, never in a handler.
// Blocked before any thread starts, so every thread inherits the mask.
int block_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, sig);
  if (int e = pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0)
    throw std::runtime_error(std::string("pthread_sigmask: ") + std::strerror(e));
  ::signal(SIGPIPE, SIG_IGN);
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  return fd;
}

int run(const AgentOptions& c) {
  // Pinned first: threads made later inherit the affinity.
  if (auto warning = pin_current_thread(c.cpus); !warning.empty()) log_warn(warning);
  int sigfd = block_signals();
  Agent agent(c);
  for (;;) {
    pollfd fds[2] = {{agent.listen_fd(), POLLIN, 0}, {sigfd, POLLIN, 0}};
    int n = ::poll(fds, 2, 1000);
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    agent.reap();
    agent.recheck_pool();
    if (n > 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo si{};
      if (::read(sigfd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        if (si.ssi_signo == SIGUSR1) {
          agent.write_stats();
          continue;
        }
        log_info(std::string("stopping on ") + strsignal(static_cast<int>(si.ssi_signo)));
        break;
      }
    }
    if (n > 0 && (fds[0].revents & POLLIN)) agent.accept();
  }
  agent.stop();
  agent.write_stats();
  ::close(sigfd);
  return 0;
}

// `dpukit-agent pool check`: the pool as it is on disk, read without its lock
// (the agent may be running). Exit 0 clean, 1 findings, 2 unusable.
int pool_check(int argc, char** argv) {
  ArgParser p("dpukit-agent pool check",
              "Reports every slot of an SST pool: its owner, whether the owner still links to it, its size, and\n"
              "the slots the agent keeps quarantined. Exit 0: clean; 1: findings; 2: no usable pool there.");
  p.option("pool", "directory of the SST file pool", "", true);
  p.option("db", "a DB directory: also check its symlinks into the pool against the slots' records");
  p.flag("json", "print the report as JSON");
  p.parse(argc, argv, 3);
  PoolCheck c = check_pool(p.str("pool"), p.has("db") ? p.str("db") : "");
  if (p.has("json")) {
    nlohmann::json slots = nlohmann::json::array();
    for (const auto& s : c.reports)
      slots.push_back({{"slot", s.slot},
                       {"verdict", verdict_name(s.verdict)},
                       {"owner", s.owner},
                       {"reason", s.reason},
                       {"bytes", s.bytes},
                       {"allocated", s.allocated}});
    nlohmann::json j = {{"pool", c.dir},       {"usable", c.usable}, {"problem", c.problem},
                        {"in_use", c.in_use},  {"version", c.version}, {"slots", c.slots},
                        {"slot_bytes", c.slot_bytes}, {"slot_reports", slots}, {"findings", c.findings}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (c.usable) {
    std::printf("pool %s: version %u, %llu slots of %llu bytes, %s\n", c.dir.c_str(), c.version,
                static_cast<unsigned long long>(c.slots), static_cast<unsigned long long>(c.slot_bytes),
                c.in_use ? "held by a running agent (or plugin)" : "not held");
    size_t counts[4] = {};
    for (const auto& s : c.reports) {
      ++counts[static_cast<int>(s.verdict)];
      if (s.verdict == PoolCheck::Verdict::kFree) continue;
      std::printf("  slot-%06u  %-11s %12llu bytes  %s\n", s.slot, verdict_name(s.verdict),
                  static_cast<unsigned long long>(s.bytes), (s.reason.empty() ? s.owner : s.reason).c_str());
    }
    std::printf("%zu in use, %zu free, %zu reclaimable (freed when the agent next opens the pool), %zu quarantined\n",
                counts[1], counts[0], counts[2], counts[3]);
    for (const auto& f : c.findings) std::printf("finding: %s\n", f.c_str());
  }
  if (!c.usable) {
    std::fprintf(stderr, "dpukit-agent pool check: no usable pool: %s\n", c.problem.c_str());
    return 2;
  }
  return c.findings.empty() ? 0 : 1;
}

// `dpukit-agent pool release SLOT --pool DIR [--agent SOCKET]`: an operator
// frees a quarantined slot (its data goes): itself, with no agent running, or
// through the running agent that holds the pool.
int pool_release(int argc, char** argv) {
  ArgParser p("dpukit-agent pool release",
              "usage: dpukit-agent pool release SLOT --pool DIR [--agent SOCKET]\n"
              "Frees a quarantined slot of a pool: its data is dropped and the slot reused. With no agent running\n"
              "it opens the pool itself; with --agent the running agent listening at SOCKET, which holds the\n"
              "pool, does it (it checks that DIR is its pool and that the slot is quarantined).");
  p.option("pool", "directory of the SST file pool", "", true);
  p.option("slot", "the slot: its number, or its file name slot-NNNNNN");
  p.option("agent", "the socket of the running agent that holds the pool (its --listen)");
  int first = 3;
  std::string slot_arg;
  if (argc > 3 && argv[3][0] != '-') {
    slot_arg = argv[3];
    first = 4;
  }
  p.parse(argc, argv, first);
  if (p.has("slot")) slot_arg = p.str("slot");
  if (slot_arg.empty()) p.fail("which slot? give SLOT (a number, or slot-NNNNNN)");
  if (slot_arg.rfind("slot-", 0) == 0) slot_arg = slot_arg.substr(5);
  char* end = nullptr;
  errno = 0;
  unsigned long n = std::strtoul(slot_arg.c_str(), &end, 10);
  if (slot_arg.empty() || *end != '\0' || errno != 0 || n > UINT32_MAX) p.fail("SLOT must be a slot number");
  const auto slot = static_cast<uint32_t>(n);
  SlotRelease r;
  try {
    r = p.has("agent") ? release_quarantined_slot_through(p.str("agent"), p.str("pool"), slot)
                       : release_quarantined_slot(p.str("pool"), slot);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.find("in use by another process") != std::string::npos)
      why += ": an agent holds it; give its socket with --agent SOCKET to release the slot through it, or stop "
             "the agent (SIGTERM) first (it keeps quarantined slots out of use meanwhile)";
    std::fprintf(stderr, "dpukit-agent pool release: error: %s\n", why.c_str());
    return 1;
  }
  if (const auto& q = r.released) {
    std::printf("released slot-%06u: %llu bytes dropped (owner %s: %s)\n", slot,
                static_cast<unsigned long long>(q->bytes), q->owner.empty() ? "unknown" : q->owner.c_str(),
                q->reason.c_str());
    return 0;
  }
  std::fprintf(stderr,
               "dpukit-agent pool release: error: slot %lu is not quarantined (%s); only a quarantined slot is "
               "released by hand, a slot in use is freed when RocksDB deletes its file\n",
               n, n >= r.slots ? "no such slot" : "free or in use: see `dpukit-agent pool check`");
  return 1;
}

int pool_command(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  try {
    if (sub == "check") return pool_check(argc, argv);
    if (sub == "release") return pool_release(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpukit-agent pool %s: error: %s\n", sub.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: dpukit-agent pool check --pool DIR [--db DIR] [--json]\n"
               "       dpukit-agent pool release SLOT --pool DIR [--agent SOCKET]\n");
  return sub == "--help" || sub == "-h" ? 0 : 2;
}

}  // namespace
}  // namespace dpukit::kv

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "pool") return dpukit::kv::pool_command(argc, argv);
  dpukit::kv::AgentOptions config = dpukit::kv::parse_args(argc, argv);  // exits 2 on bad arguments
  try {
    return dpukit::kv::run(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", dpukit::kv::kTool, e.what());
    return 1;
  }
}
