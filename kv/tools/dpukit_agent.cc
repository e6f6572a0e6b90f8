// dpukit-agent: the dpu side of PulseDB (docs/architecture.md §3.2). Owns the
// SST file pool, listens for hosts, and runs one write-persist engine per
// queue pair, each on a thread of its own. A host that dies ends only its own
// thread. SIGUSR1 writes the statistics (a dpukit.result/1 whose cpu_ns.dpu
// is the agent's CPU time so far, its DMA threads' in cpu_ns.hw); SIGTERM or SIGINT stops accepting, lets
// every queue pair finish its I/O in flight, writes them and exits 0.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/channel.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/log.h"
#include "dpukit/core/results.h"
#include "engine.h"
#include "pool.h"

namespace dpukit::kv {
namespace {

using namespace std::chrono_literals;

const char* kTool = "dpukit-agent";

struct Config {
  std::vector<std::string> command_line;
  std::string listen, stats;
  std::optional<SstPool::Options> pool;
  CpuSet cpus;
  DpuSpeed dpu_speed;  // the engine's threads are dilated to it
  EngineOptions engine;
};

Config parse_args(int argc, char** argv) {
  ArgParser p(kTool,
              "The dpu-side agent of PulseDB: serves write-persist queue pairs from RocksDB hosts over the channel,\n"
              "writing SST files into a pre-allocated file pool.\n"
              "Also: `dpukit-agent pool check --pool DIR [--db DIR]` and `dpukit-agent pool release SLOT --pool DIR`.");
  p.option("listen", "Unix socket path to listen at", "", true);
  p.option("pool", "directory of the SST file pool (created if missing: every slot is written out with zeros once, "
                   "slots x slot size, 4.5 GiB by default: 1.8-7.9 s on this project's VM, more on a slow disk; the "
                   "agent prints its progress and listens when it is done)");
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
  Config c;
  c.command_line.assign(argv, argv + argc);
  c.listen = p.str("listen");
  c.stats = p.str("stats");
  c.engine.direct_io = !p.has("buffered");
  c.dpu_speed = p.dpu_speed();
  try {
    c.engine.io_engine = parse_io_engine(p.str("io-engine"));
  } catch (const std::invalid_argument& e) {
    p.fail(std::string("--io-engine: ") + e.what());
  }
  c.engine.dpu_speed = c.dpu_speed.factor;
  if (p.has("no-pool") && p.has("pool")) p.fail("--pool and --no-pool exclude each other");
  if (!p.has("no-pool")) {
    if (!p.has("pool")) p.fail("--pool DIR is required (or --no-pool)");
    uint64_t slots = p.u64("slots"), slot_bytes = p.bytes("slot-size");
    if (slots == 0 || slots > 1'000'000) p.fail("--slots must be between 1 and 1000000");
    if (slot_bytes == 0) p.fail("--slot-size must be positive");
    c.pool = SstPool::Options{p.str("pool"), slots, slot_bytes};
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

// One queue pair: its engine and the thread serving it.
struct Session {
  std::unique_ptr<WritePersistEngine> engine;
  std::thread thread;
  std::atomic<bool> done{false};
};

class Agent {
 public:
  explicit Agent(const Config& c) : config_(c), start_ns_(now_ns()), started_(kTool, c.command_line) {
    if (c.pool) pool_ = std::make_unique<SstPool>(*c.pool);
  }

  void accept(ChannelListener& listener);
  void recheck_pool();
  void reap(bool all);
  void stop_all();
  void write_stats() const;
  const SstPool* pool() const { return pool_.get(); }

 private:
  Result stats() const;
  Config config_;
  uint64_t start_ns_;
  Result started_;  // what ran and when; each statistics file adds the figures so far
  std::unique_ptr<SstPool> pool_;
  uint64_t next_recheck_ns_ = 0;
  EngineStats stats_;
  std::list<Session> sessions_;
};

nlohmann::json quarantine_json(const std::vector<SstPool::Quarantined>& q) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : q) a.push_back({{"slot", s.slot}, {"owner", s.owner}, {"reason", s.reason}, {"bytes", s.bytes}});
  return a;
}

void serve_queue_pair(WritePersistEngine& engine, ChannelDpu qp) {
  std::string who = "queue pair of host pid " + std::to_string(qp.peer_pid());
  try {
    engine.serve(qp);
    log_info(who + " closed");
  } catch (const ChannelError& e) {
    log_warn(who + " ended: " + e.what());
  } catch (const std::exception& e) {
    log_error(who + " failed: " + e.what());
  }
}

void Agent::accept(ChannelListener& listener) {
  try {
    ChannelDpu qp = listener.accept(1s);
    auto engine = std::make_unique<WritePersistEngine>(pool_.get(), stats_, config_.engine);
    log_info("queue pair from host pid " + std::to_string(qp.peer_pid()));
    Session& s = sessions_.emplace_back();
    s.engine = std::move(engine);
    try {
      s.thread = std::thread([&s, qp = std::move(qp)]() mutable {
        serve_queue_pair(*s.engine, std::move(qp));
        s.done = true;
      });
    } catch (...) {
      sessions_.pop_back();
      throw;
    }
  } catch (const std::exception& e) {
    // A failed handshake or engine start costs only this host its queue pair.
    log_warn(std::string("cannot take a queue pair: ") + e.what());
  }
}

// Quarantined slots leave quarantine when their owner is back (the DB's
// filesystem mounted, its directory renamed back): looked at every few seconds.
void Agent::recheck_pool() {
  if (!pool_ || now_ns() < next_recheck_ns_) return;
  next_recheck_ns_ = now_ns() + 2'000'000'000ull;
  if (pool_->stats().quarantined > 0) pool_->recheck();
}

// Joins the threads of queue pairs that ended (all: every thread).
void Agent::reap(bool all) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (!all && !it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    it = sessions_.erase(it);
  }
}

void Agent::stop_all() {
  for (auto& s : sessions_) s.engine->stop();
  reap(true);
}

Result Agent::stats() const {
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  Result r = started_;
  Placement where;
  where.dpu = config_.cpus;
  r.set_placement(where);
  r.set_dpu_speed(config_.dpu_speed);
  r.parameters() = {{"listen", config_.listen},
                    {"pool", config_.pool ? nlohmann::json(config_.pool->dir) : nlohmann::json(nullptr)},
                    {"cpus", config_.cpus.str()},
                    {"direct_io", config_.engine.direct_io},
                    {"io_engine", io_engine_name(config_.engine.io_engine)}};
  r.figures() = {
      {"pid", ::getpid()},
      {"queue_pairs", {{"accepted", get(stats_.queue_pairs)}, {"active", sessions_.size()}}},
      {"requests", get(stats_.requests)},
      {"writes", get(stats_.writes)},
      {"write_bytes", get(stats_.write_bytes)},
      {"dma",
       {{"pulls", get(stats_.pulls)},
        {"pull_bytes", get(stats_.pull_bytes)},
        {"pull_failures", get(stats_.pull_failures)},
        {"cpu_ns", get(stats_.pull_cpu_ns)},
        {"admit_ns", get(stats_.pull_admit_ns)},
        {"queue_ns", get(stats_.pull_queue_ns)},
        {"reply_ns", get(stats_.pull_reply_ns)}}},
      {"range_syncs", get(stats_.range_syncs)},
      {"sync_closes", get(stats_.sync_closes)},
      {"recycles", get(stats_.recycles)},
      {"files_opened", get(stats_.files_opened)},
      {"pool_files", get(stats_.pool_files)},
      {"normal_files", get(stats_.normal_files)},
      {"direct_files", get(stats_.direct_files)},
      {"errors", get(stats_.errors)},
      {"dilated_ns", get(stats_.dilated_ns)},  // busy time added to run at the dpu's speed
      {"max_batch", get(stats_.max_batch)},
      {"io_uring",
       {{"sqes_submitted", get(stats_.sqes_submitted)},
        {"submit_calls", get(stats_.submit_calls)},
        {"cqes_completed", get(stats_.cqes_completed)},
        {"inflight_ios", get(stats_.inflight_ios)},
        {"max_inflight_ios", get(stats_.max_inflight_ios)},
        // libaio: the ops done as system calls (no AIO command, or IOCB_CMD_FSYNC refused)
        {"aio_sync_calls", get(stats_.aio_sync_calls)},
        {"aio_fsync_refused", get(stats_.aio_fsync_refused)}}},
      {"pool", nullptr},
  };
  if (pool_) {
    SstPool::Stats p = pool_->stats();
    r.figures()["pool"] = {{"dir", pool_->dir()},          {"slots", p.slots},
                           {"slot_bytes", pool_->slot_bytes()}, {"free", p.free},
                           {"claims", p.claims},           {"exhausted", p.exhausted},
                           {"released", p.released},       {"reclaimed", p.reclaimed},
                           {"quarantined", p.quarantined}, {"returned", p.returned},
                           {"quarantine", quarantine_json(pool_->quarantined())}};
  }
  // The agent is the dpu side, but for its DMA threads, which stand for the
  // DPU's DMA engine pulling payloads from host memory: their time is hw.
  const uint64_t all = process_cpu_ns(), dma = std::min(all, get(stats_.pull_cpu_ns));
  CpuAccount cpu;
  cpu.add(Place::kDpu, all - dma);
  cpu.add(Place::kHw, dma);
  r.set_cpu(cpu);
  r.set_wall_ns(now_ns() - start_ns_);
  return r;
}

void Agent::write_stats() const {
  if (config_.stats.empty()) return;
  try {
    stats().write(config_.stats);
  } catch (const std::exception& e) {
    log_error(std::string("cannot write the statistics: ") + e.what());
  }
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

int run(const Config& c) {
  // Pinned first: threads made later inherit the affinity.
  if (auto warning = pin_current_thread(c.cpus); !warning.empty()) log_warn(warning);
  int sigfd = block_signals();
  Agent agent(c);
  std::optional<ChannelListener> listener(std::in_place, c.listen);
  log_info(std::string("listening at ") + c.listen + (c.pool ? " with the pool at " + c.pool->dir : " without a pool"));
  if (const SstPool* pool = agent.pool()) {
    SstPool::Stats s = pool->stats();
    std::string line = "pool " + pool->dir() + ": " + std::to_string(s.slots) + " slots, " + std::to_string(s.free) +
                       " free, " + std::to_string(s.reclaimed) + " freed at start, " + std::to_string(s.quarantined) +
                       " quarantined";
    if (s.quarantined > 0) {
      log_warn(line + " (kept and not reused; `dpukit-agent pool check --pool " + pool->dir() + "` lists them)");
    } else {
      log_info(line);
    }
  }
  for (;;) {
    pollfd fds[2] = {{listener->fd(), POLLIN, 0}, {sigfd, POLLIN, 0}};
    int n = ::poll(fds, 2, 1000);
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    agent.reap(false);
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
    if (n > 0 && (fds[0].revents & POLLIN)) agent.accept(*listener);
  }
  listener.reset();  // no new hosts; the socket file goes
  agent.stop_all();
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

// `dpukit-agent pool release SLOT --pool DIR`: an operator frees a quarantined
// slot (its data goes). Needs the pool: the agent must be stopped.
int pool_release(int argc, char** argv) {
  ArgParser p("dpukit-agent pool release",
              "usage: dpukit-agent pool release SLOT --pool DIR\n"
              "Frees a quarantined slot of a pool no agent has open: its data is dropped and the slot reused.");
  p.option("pool", "directory of the SST file pool", "", true);
  p.option("slot", "the slot: its number, or its file name slot-NNNNNN");
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
  std::unique_ptr<SstPool> pool;
  try {
    pool = std::make_unique<SstPool>(SstPool::Options{p.str("pool"), 0, 0, true});
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.find("in use by another process") != std::string::npos)
      why += ": stop the agent (SIGTERM) first; it keeps quarantined slots out of use meanwhile";
    std::fprintf(stderr, "dpukit-agent pool release: error: %s\n", why.c_str());
    return 1;
  }
  const auto slot = static_cast<uint32_t>(n);
  for (const auto& q : pool->quarantined()) {
    if (q.slot != slot) continue;
    pool->release(slot);
    std::printf("released slot-%06u: %llu bytes dropped (owner %s: %s)\n", slot,
                static_cast<unsigned long long>(q.bytes), q.owner.empty() ? "unknown" : q.owner.c_str(),
                q.reason.c_str());
    return 0;
  }
  std::fprintf(stderr,
               "dpukit-agent pool release: error: slot %lu is not quarantined (%s); only a quarantined slot is "
               "released by hand, a slot in use is freed when RocksDB deletes its file\n",
               n, n >= pool->slots() ? "no such slot" : "free or in use: see `dpukit-agent pool check`");
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
               "       dpukit-agent pool release SLOT --pool DIR\n");
  return sub == "--help" || sub == "-h" ? 0 : 2;
}

}  // namespace
}  // namespace dpukit::kv

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "pool") return dpukit::kv::pool_command(argc, argv);
  dpukit::kv::Config config = dpukit::kv::parse_args(argc, argv);  // exits 2 on bad arguments
  try {
    return dpukit::kv::run(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", dpukit::kv::kTool, e.what());
    return 1;
  }
}
