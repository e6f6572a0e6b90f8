// The engines' model and executors, and DOCA's job interface over them
// (engine.h). The per-generation figures are in engine_specs.cc.
#include "dpukit/core/engine.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dpukit/core/log.h"
#include "dpukit/core/ring.h"  // cpu_relax

namespace dpukit {

// One task of a queue's pool. Its fields are the submitter's until post()
// hands it to an executor, the executor's until it sets `computed` (under
// work_mu_), then the submitter's again.
struct Engine::Pending {
  EngineJob job;
  uint64_t submitted_ns = 0, completed_ns = 0;
  std::exception_ptr error;
  bool real_clock = true;
  std::atomic<bool> computed{true};
};

namespace {

std::string engine_what(const EngineSpec& s) {
  std::string what = s.generation.empty() ? std::string("an engine") : s.generation;
  what += " ";
  what += s.name.empty() ? engine_kind_name(s.kind) : s.name;
  return what;
}

// A figure that must be a whole number >= 1 (parallel, queue depth).
unsigned whole_count(const EngineSpec& s, const EngineFigure& f, const char* field) {
  if (!(f.value >= 1) || f.value != std::floor(f.value) || f.value > 1 << 20)
    throw std::invalid_argument(engine_what(s) + ": " + field + " must be a whole number from 1 to 2^20, not " +
                                std::to_string(f.value));
  return static_cast<unsigned>(f.value);
}

std::string operation_names(const EngineSpec& s) {
  std::string names;
  for (const auto& [op, figure] : s.ops_per_s) names += (names.empty() ? "" : ", ") + op;
  return names;
}

}  // namespace

Engine::Engine(const EngineSpec& spec, unsigned executors, const CpuSet& hw_cpus, uint64_t idle_poll_ns)
    : spec_(spec), idle_poll_ns_(idle_poll_ns), hw_cpus_(hw_cpus) {
  const std::string what = engine_what(spec_);
  if (executors == 0) throw std::invalid_argument(what + ": an engine needs at least one executor thread");
  parallel_ = whole_count(spec_, spec_.parallel, "parallel");
  whole_count(spec_, spec_.queue_depth, "queue_depth");
  const double latency = spec_.latency_ns.value;
  if (!(latency >= 0) || !std::isfinite(latency))
    throw std::invalid_argument(what + ": latency_ns must be >= 0, not " + std::to_string(latency));
  latency_ns_ = static_cast<uint64_t>(std::llround(latency));
  if (spec_.kind == EngineKind::kPublicKey) {
    if (spec_.ops_per_s.empty()) throw std::invalid_argument(what + ": a PKA needs ops_per_s for its operations");
    for (const auto& [op, figure] : spec_.ops_per_s)
      if (!(figure.value > 0) || !std::isfinite(figure.value))
        throw std::invalid_argument(what + ": ops_per_s of " + op + " must be > 0");
  } else {
    const double rate = spec_.bytes_per_s.value;
    if (!(rate > 0) || !std::isfinite(rate))
      throw std::invalid_argument(what + ": bytes_per_s must be > 0, not " + std::to_string(rate));
    unit_ns_per_byte_ = parallel_ * 1e9 / rate;
  }
  units_.resize(parallel_);
  try {
    for (unsigned i = 0; i < executors; ++i) executors_.emplace_back([this, i] { run_executor(i); });
  } catch (...) {
    {
      std::lock_guard lk(work_mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : executors_) t.join();
    throw;
  }
}

Engine::~Engine() {
  {
    std::lock_guard lk(work_mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  // Each executor computes what is still queued before it returns.
  for (auto& t : executors_) t.join();
}

double Engine::exact_service_ns(const EngineJob& job) const {
  if (spec_.kind == EngineKind::kPublicKey) {
    if (job.bytes != 0)
      throw std::invalid_argument(engine_what(spec_) + " costs per operation, not per byte: a job names an operation (" +
                                  operation_names(spec_) + ") with bytes = 0, not bytes = " + std::to_string(job.bytes));
    for (const auto& [op, figure] : spec_.ops_per_s)
      if (op == job.operation) return parallel_ * 1e9 / figure.value;
    throw std::invalid_argument(engine_what(spec_) + " has no operation '" + job.operation + "' (it has: " +
                                operation_names(spec_) + ")");
  }
  if (!job.operation.empty())
    throw std::invalid_argument(engine_what(spec_) + " costs per byte of input: a job gives its bytes, not an operation ('" +
                                job.operation + "')");
  return static_cast<double>(job.bytes) * unit_ns_per_byte_;
}

uint64_t Engine::service_ns(const EngineJob& job) const {
  return static_cast<uint64_t>(std::llround(exact_service_ns(job)));
}

uint64_t Engine::schedule(uint64_t at_ns, const EngineJob& job) {
  const double service = exact_service_ns(job);
  std::lock_guard lk(mu_);
  Unit* u = &units_[0];
  for (auto& x : units_)
    if (x.free_ns < u->free_ns || (x.free_ns == u->free_ns && x.frac < u->frac)) u = &x;
  // The job starts when it is submitted or when the earliest unit is free.
  uint64_t start = at_ns;
  double frac = 0;
  if (u->free_ns >= at_ns) {
    start = u->free_ns;
    frac = u->frac;
  }
  const double end = frac + service;  // after `start`
  const double whole = std::floor(end);
  u->free_ns = start + static_cast<uint64_t>(whole);
  u->frac = end - whole;
  ++stats_.jobs;
  stats_.bytes += job.bytes;
  busy_exact_ns_ += service;
  // Rounded up: never handed back before the model's exact time.
  return start + static_cast<uint64_t>(std::ceil(end)) + latency_ns_;
}

Engine::Stats Engine::stats() const {
  Stats s;
  {
    std::lock_guard lk(mu_);
    s = stats_;
    s.busy_ns = static_cast<uint64_t>(std::llround(busy_exact_ns_));
  }
  s.hw_cpu_ns = hw_cpu_ns_.load(std::memory_order_relaxed);
  s.late_jobs = late_jobs_.load(std::memory_order_relaxed);
  s.wakeups = wakeups_.load(std::memory_order_relaxed);
  return s;
}

void Engine::post(Pending* p, bool wake) {
  {
    std::lock_guard lk(work_mu_);
    work_.push_back(p);
    work_size_.store(work_.size(), std::memory_order_relaxed);
    // One wake-up per sleeping executor: the ones already woken will find
    // this job too.
    wake = wake && idle_executors_ > signaled_;
    if (wake) ++signaled_;
  }
  // A busy (or polling) executor finds the job when it looks for the next
  // one: the submitter pays a wake-up only when every executor sleeps.
  if (wake) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    work_cv_.notify_one();
  }
}

void Engine::wake_one_locked(bool by_caller) {
  if (!work_.empty() && idle_executors_ > signaled_) {
    ++signaled_;
    if (by_caller) wakeups_.fetch_add(1, std::memory_order_relaxed);
    work_cv_.notify_one();
  }
}

void Engine::wake_if_sleeping() {
  std::lock_guard lk(work_mu_);
  wake_one_locked(true);
}

namespace {

// An executor reads its CPU clock (a system call, about 0.5 us here) when a
// busy period starts and ends and every this many jobs within one, not
// around every body: twice per job would cap an executor near a million
// small jobs per second.
constexpr unsigned kCpuReadEvery = 64;

}  // namespace

void Engine::run_executor(size_t i) {
  // Named for ThreadCpuSampler and top: "hw:regex", "hw:pka" (15 characters at most).
  pthread_setname_np(pthread_self(), (std::string("hw:") + engine_kind_name(spec_.kind)).substr(0, 15).c_str());
  if (!hw_cpus_.empty())
    if (auto w = pin_current_thread(hw_cpus_); !w.empty())
      log_warn(engine_what(spec_) + " executor " + std::to_string(i) + ": " + w);
  bool busy = false;  // in a busy period, whose CPU time counts from cpu_mark
  uint64_t cpu_mark = 0;
  unsigned since_read = 0;
  auto account = [&] {
    const uint64_t now = thread_cpu_ns();
    hw_cpu_ns_.fetch_add(now - cpu_mark, std::memory_order_relaxed);
    cpu_mark = now;
    since_read = 0;
  };
  std::unique_lock lk(work_mu_);
  for (;;) {
    if (work_.empty() && !stopping_ && idle_poll_ns_ > 0) {
      lk.unlock();
      const uint64_t until = now_ns() + idle_poll_ns_;
      while (work_size_.load(std::memory_order_relaxed) == 0 && !stopping_.load(std::memory_order_relaxed) &&
             now_ns() < until)
        cpu_relax();
      lk.lock();
    }
    while (work_.empty() && !stopping_) {
      ++idle_executors_;
      work_cv_.wait(lk);
      --idle_executors_;
      if (signaled_ > 0) --signaled_;  // (or a spurious wake-up: then one more notify than needed)
    }
    if (work_.empty()) return;  // stopping, and nothing is left to compute
    Pending* p = work_.front();
    work_.pop_front();
    work_size_.store(work_.size(), std::memory_order_relaxed);
    // More work than this executor: it wakes the next, so a caller that
    // woke one (wait_computed) got them all, and the hw place pays for it.
    wake_one_locked(false);
    lk.unlock();
    if (!busy) {
      cpu_mark = thread_cpu_ns();
      busy = true;
    }
    try {
      p->job.body();
    } catch (...) {
      p->error = std::current_exception();
    }
    p->job.body = nullptr;  // what it captured is released here, on the hw place
    if (p->real_clock && now_ns() > p->completed_ns) late_jobs_.fetch_add(1, std::memory_order_relaxed);
    // The period ends when no work is left; its CPU is added before the job
    // is handed back, so stats() covers every job a caller has got.
    if (work_size_.load(std::memory_order_relaxed) == 0) {
      account();
      busy = false;
    } else if (++since_read >= kCpuReadEvery) {
      account();
    }
    lk.lock();
    p->computed.store(true, std::memory_order_release);
    if (done_waiters_ > 0) done_cv_.notify_all();
  }
}

void Engine::wait_computed(const Pending* p) {
  std::unique_lock lk(work_mu_);
  if (p->computed.load(std::memory_order_relaxed)) return;
  wake_one_locked(true);  // a virtual clock's submits left the executors asleep
  ++done_waiters_;
  done_cv_.wait(lk, [p] { return p->computed.load(std::memory_order_relaxed); });
  --done_waiters_;
}

// ------------------------------------------------------------ EngineQueue

EngineQueue::EngineQueue(Engine& engine, unsigned depth, Clock clock)
    : engine_(engine),
      depth_(depth != 0 ? depth : static_cast<unsigned>(engine.spec().queue_depth.value)),
      clock_(clock),
      tasks_(std::make_unique<Engine::Pending[]>(depth_)) {
  free_.reserve(depth_);
  for (unsigned i = depth_; i-- > 0;) free_.push_back(&tasks_[i]);
  pending_.reserve(depth_);
}

EngineQueue::~EngineQueue() {
  // The bodies reference the caller's memory, which goes with this queue.
  for (const Engine::Pending* p : pending_) engine_.wait_computed(p);
}

bool EngineQueue::submit(EngineJob job, uint64_t now_ns) {
  if (free_.empty()) return false;
  if (!job.body) throw std::invalid_argument("an engine job needs a body (the work that gives its output)");
  const uint64_t done = engine_.schedule(now_ns, job);
  Engine::Pending* p = free_.back();
  free_.pop_back();
  p->job = std::move(job);
  p->submitted_ns = now_ns;
  p->completed_ns = done;
  p->error = nullptr;
  p->real_clock = clock_ == Clock::kReal;
  p->computed.store(false, std::memory_order_relaxed);
  // Usually the latest completion: found from the back in a step or two.
  auto pos = pending_.end();
  while (pos != pending_.begin() && (*(pos - 1))->completed_ns > done) --pos;
  pending_.insert(pos, p);
  engine_.post(p, clock_ == Clock::kReal);
  return true;
}

size_t EngineQueue::progress(uint64_t now_ns, std::vector<EngineCompletion>& out) {
  size_t taken = 0, keep = 0, i = 0;
  bool due_not_computed = false;
  for (; i < pending_.size() && pending_[i]->completed_ns <= now_ns; ++i) {
    Engine::Pending* p = pending_[i];
    if (p->computed.load(std::memory_order_acquire)) {
      out.push_back({p->job.user, p->submitted_ns, p->completed_ns, std::move(p->error)});
      p->error = nullptr;
      free_.push_back(p);
      ++taken;
    } else {
      pending_[keep++] = p;  // due but still computing: stays, in order
      due_not_computed = true;
    }
  }
  // A virtual clock's submits wake no executor: one that polls here instead
  // of waiting in wait_computed() must not wait for ever.
  if (due_not_computed && clock_ == Clock::kVirtual) engine_.wake_if_sleeping();
  if (taken != 0) {
    std::move(pending_.begin() + static_cast<std::ptrdiff_t>(i), pending_.end(),
              pending_.begin() + static_cast<std::ptrdiff_t>(keep));
    pending_.resize(pending_.size() - taken);
  }
  return taken;
}

std::optional<uint64_t> EngineQueue::next_completion_ns() const {
  if (pending_.empty()) return std::nullopt;
  return pending_.front()->completed_ns;
}

void EngineQueue::wait_computed() {
  if (!pending_.empty()) engine_.wait_computed(pending_.front());
}

}  // namespace dpukit
