// The agent (dpukit/kv_agent.h): a listener, the pool, and one
// write-persist engine per queue pair, each on a thread of its own.
#include "dpukit/kv_agent.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <list>
#include <span>
#include <system_error>
#include <thread>

#include <nlohmann/json.hpp>

#include "dpukit/core/channel.h"
#include "dpukit/core/log.h"
#include "dpukit/core/results.h"
#include "engine.h"
#include "pool.h"
#include "protocol.h"

namespace dpukit::kv {

using namespace std::chrono_literals;

namespace {

// The statistics are the dpukit-agent program's result, whoever drives the agent.
constexpr const char* kTool = "dpukit-agent";

// One queue pair: its engine and the thread serving it.
struct Session {
  std::unique_ptr<WritePersistEngine> engine;
  std::thread thread;
  std::atomic<bool> done{false};
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

EngineOptions engine_options(const AgentOptions& o) {
  EngineOptions e;
  e.direct_io = o.direct_io;
  e.dpu_speed = o.dpu_speed.factor;
  e.io_engine = o.io_engine;
  return e;
}

std::unique_ptr<SstPool> open_pool(const AgentOptions& o) {
  if (!o.pool) return nullptr;
  return std::make_unique<SstPool>(SstPool::Options{o.pool->dir, o.pool->slots, o.pool->slot_bytes});
}

}  // namespace

struct Agent::Impl {
  explicit Impl(const AgentOptions& o)
      : options(o), engine(engine_options(o)), start_ns(now_ns()), started(kTool, o.command_line), pool(open_pool(o)),
        listener(std::in_place, o.listen) {}

  Result stats() const;

  AgentOptions options;
  EngineOptions engine;
  uint64_t start_ns;
  Result started;  // what ran and when; each statistics file adds the figures so far
  std::unique_ptr<SstPool> pool;  // made before the listener: a socket to connect to means the pool is ready
  std::optional<ChannelListener> listener;
  uint64_t next_recheck_ns = 0;
  EngineStats engine_stats;
  std::list<Session> sessions;
};

Agent::Agent(const AgentOptions& options) : impl_(std::make_unique<Impl>(options)) {
  const AgentOptions& o = impl_->options;
  log_info(std::string("listening at ") + o.listen + (o.pool ? " with the pool at " + o.pool->dir : " without a pool"));
  if (const SstPool* pool = impl_->pool.get()) {
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
}

Agent::~Agent() { stop(); }

int Agent::listen_fd() const { return impl_->listener ? impl_->listener->fd() : -1; }

void Agent::accept() {
  Impl& a = *impl_;
  if (!a.listener) return;
  try {
    ChannelDpu qp = a.listener->accept(1s);
    auto engine = std::make_unique<WritePersistEngine>(a.pool.get(), a.engine_stats, a.engine);
    log_info("queue pair from host pid " + std::to_string(qp.peer_pid()));
    Session& s = a.sessions.emplace_back();
    s.engine = std::move(engine);
    try {
      s.thread = std::thread([&s, qp = std::move(qp)]() mutable {
        serve_queue_pair(*s.engine, std::move(qp));
        s.done = true;
      });
    } catch (...) {
      a.sessions.pop_back();
      throw;
    }
  } catch (const std::exception& e) {
    log_warn(std::string("cannot take a queue pair: ") + e.what());
  }
}

// Quarantined slots leave quarantine when their owner is back (the DB's
// filesystem mounted, its directory renamed back).
void Agent::recheck_pool() {
  Impl& a = *impl_;
  if (!a.pool || now_ns() < a.next_recheck_ns) return;
  a.next_recheck_ns = now_ns() + 2'000'000'000ull;
  if (a.pool->stats().quarantined > 0) a.pool->recheck();
}

void Agent::reap() {
  auto& sessions = impl_->sessions;
  for (auto it = sessions.begin(); it != sessions.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();
    it = sessions.erase(it);
  }
}

void Agent::stop() {
  Impl& a = *impl_;
  a.listener.reset();  // no new hosts; the socket file goes
  for (auto& s : a.sessions) s.engine->stop();
  for (auto& s : a.sessions) s.thread.join();
  a.sessions.clear();
}

Result Agent::Impl::stats() const {
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  const EngineStats& st = engine_stats;
  Result r = started;
  Placement where;
  where.dpu = options.cpus;
  r.set_placement(where);
  r.set_dpu_speed(options.dpu_speed);
  r.parameters() = {{"listen", options.listen},
                    {"pool", options.pool ? nlohmann::json(options.pool->dir) : nlohmann::json(nullptr)},
                    {"cpus", options.cpus.str()},
                    {"direct_io", options.direct_io},
                    {"io_engine", io_engine_name(options.io_engine)}};
  r.figures() = {
      {"pid", ::getpid()},
      {"queue_pairs", {{"accepted", get(st.queue_pairs)}, {"active", sessions.size()}}},
      {"requests", get(st.requests)},
      {"writes", get(st.writes)},
      {"write_bytes", get(st.write_bytes)},
      {"dma",
       {{"pulls", get(st.pulls)},
        {"pull_bytes", get(st.pull_bytes)},
        {"pull_failures", get(st.pull_failures)},
        {"cpu_ns", get(st.pull_cpu_ns)},
        {"admit_ns", get(st.pull_admit_ns)},
        {"queue_ns", get(st.pull_queue_ns)},
        {"reply_ns", get(st.pull_reply_ns)}}},
      {"range_syncs", get(st.range_syncs)},
      {"sync_closes", get(st.sync_closes)},
      {"recycles", get(st.recycles)},
      {"files_opened", get(st.files_opened)},
      {"pool_files", get(st.pool_files)},
      {"normal_files", get(st.normal_files)},
      {"direct_files", get(st.direct_files)},
      {"errors", get(st.errors)},
      {"dilated_ns", get(st.dilated_ns)},  // busy time added to run at the dpu's speed
      {"max_batch", get(st.max_batch)},
      {"io_uring",
       {{"sqes_submitted", get(st.sqes_submitted)},
        {"submit_calls", get(st.submit_calls)},
        {"cqes_completed", get(st.cqes_completed)},
        {"inflight_ios", get(st.inflight_ios)},
        {"max_inflight_ios", get(st.max_inflight_ios)},
        // libaio: the ops done as system calls (no AIO command, or IOCB_CMD_FSYNC refused)
        {"aio_sync_calls", get(st.aio_sync_calls)},
        {"aio_fsync_refused", get(st.aio_fsync_refused)}}},
      {"pool", nullptr},
  };
  if (pool) {
    SstPool::Stats p = pool->stats();
    r.figures()["pool"] = {{"dir", pool->dir()},          {"slots", p.slots},
                           {"slot_bytes", pool->slot_bytes()}, {"free", p.free},
                           {"claims", p.claims},           {"exhausted", p.exhausted},
                           {"released", p.released},       {"reclaimed", p.reclaimed},
                           {"quarantined", p.quarantined}, {"returned", p.returned},
                           {"quarantine", quarantine_json(pool->quarantined())}};
  }
  // The agent is the dpu side, but for its DMA threads, which stand for the
  // DPU's DMA engine pulling payloads from host memory: their time is hw.
  const uint64_t all = process_cpu_ns(), dma = std::min(all, get(st.pull_cpu_ns));
  CpuAccount cpu;
  cpu.add(Place::kDpu, all - dma);
  cpu.add(Place::kHw, dma);
  r.set_cpu(cpu);
  r.set_wall_ns(now_ns() - start_ns);
  return r;
}

void Agent::write_stats() const {
  if (impl_->options.stats.empty()) return;
  try {
    impl_->stats().write(impl_->options.stats);
  } catch (const std::exception& e) {
    log_error(std::string("cannot write the statistics: ") + e.what());
  }
}

SlotRelease release_quarantined_slot(const std::string& dir, uint32_t slot) {
  SstPool pool(SstPool::Options{dir, 0, 0, true});
  SlotRelease r;
  r.slots = pool.slots();
  r.released = pool.release_quarantined(slot);
  return r;
}

size_t release_db_slots(const std::string& pool_dir, const std::string& db_dir, bool written_out) {
  PoolCheck check = check_pool(pool_dir, db_dir);
  if (!check.usable) throw std::runtime_error("no usable pool: " + check.problem);
  if (check.in_use) throw std::runtime_error("pool " + check.dir + " is in use by another process");
  std::error_code ec;
  const std::string db = std::filesystem::absolute(db_dir, ec).lexically_normal().string();
  SstPool::Options o;
  o.dir = pool_dir;
  o.existing_only = true;
  o.write_out = written_out;
  SstPool pool(o);
  size_t released = 0;
  for (const PoolCheck::SlotReport& r : check.reports) {
    if (r.verdict != PoolCheck::Verdict::kInUse || std::filesystem::path(r.owner).parent_path() != db) continue;
    if (pool.slot_of(r.owner) != r.slot) continue;  // changed since the check
    if (::unlink(r.owner.c_str()) != 0)
      throw std::system_error(errno, std::generic_category(), "cannot remove " + r.owner);
    pool.release(r.slot);
    ++released;
  }
  return released;
}

namespace {

// The one completion a control request gets, waited for up to `patience`.
ChannelCompletion await_completion(ChannelHost& ch, Op op, uint64_t id, std::chrono::seconds patience,
                                   const std::string& socket) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < deadline) {
    ChannelCompletion c{};
    if (ch.wait_completions(&c, 1, 100ms) == 1 && c.op == static_cast<uint32_t>(op) && c.id == id) return c;
  }
  throw std::runtime_error("the agent at " + socket + " did not answer within " + std::to_string(patience.count()) +
                           " s");
}

}  // namespace

SlotRelease release_quarantined_slot_through(const std::string& socket, const std::string& dir, uint32_t slot) {
  PoolCheck before = check_pool(dir);
  if (!before.usable) throw std::runtime_error("no usable pool: " + before.problem);
  SlotRelease r;
  r.slots = before.slots;
  ChannelConfig small;
  small.request_slots = small.completion_slots = 16;
  small.payload_bytes = 64 << 10;
  ChannelHost ch = ChannelHost::connect(socket, small);
  ch.submit(static_cast<uint32_t>(Op::kHello), 0, {}, {kProtocolVersion});
  ChannelCompletion hello = await_completion(ch, Op::kHello, 0, 10s, socket);
  if (hello.status != 0 || hello.result < 3)
    throw std::runtime_error("the agent at " + socket + " speaks protocol version " + std::to_string(hello.result) +
                             ", which has no release through the agent: stop it, then release the slot without --agent");
  const std::string& pool_dir = before.dir;  // canonical
  ch.submit(static_cast<uint32_t>(Op::kReleaseSlot), 1,
            std::span(reinterpret_cast<const uint8_t*>(pool_dir.data()), pool_dir.size()), {slot});
  // A release writes at most one slot out.
  ChannelCompletion c = await_completion(ch, Op::kReleaseSlot, 1, 300s, socket);
  ch.close();
  if (c.status == -ENXIO)
    throw std::runtime_error("the agent at " + socket + " does not hold the pool " + pool_dir + "; nothing was released");
  if (c.status == -EPERM) return r;  // not quarantined
  if (c.status != 0)
    throw std::system_error(static_cast<int>(-c.status), std::generic_category(),
                            "the agent at " + socket + " could not release slot " + std::to_string(slot) +
                                " (it stays quarantined)");
  QuarantinedSlot q{slot, "", "", static_cast<uint64_t>(c.result)};
  if (slot < before.reports.size()) {
    q.owner = before.reports[slot].owner;
    q.reason = before.reports[slot].reason;
  }
  r.released = q;
  return r;
}

}  // namespace dpukit::kv
