// The engine backend: kernels that post the lib backend's work to a
// BlueField engine (core's Engine), and the virtual-clock loop that times
// them (engine_backend.h).
#include "engine_backend.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <limits>
#include <thread>

namespace dpukit::bench {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

}  // namespace

EngineShared::~EngineShared() { engine.reset(); }

void EngineShared::run_body(std::span<const uint8_t> in, Bytes& out) {
  Kernel* k = nullptr;
  {
    // As many lib kernels as executors: a body on each finds one idle (the
    // wait covers bodies run anywhere else).
    std::unique_lock lock(mu);
    returned.wait(lock, [this] { return !idle.empty(); });
    k = idle.back();
    idle.pop_back();
  }
  auto give_back = [&] {
    {
      std::lock_guard lock(mu);
      idle.push_back(k);
    }
    returned.notify_one();
  };
  try {
    k->process(in, out);
  } catch (...) {
    give_back();
    throw;
  }
  give_back();
}

EngineKernel::EngineKernel(std::shared_ptr<EngineShared> shared, unsigned depth) : shared_(std::move(shared)) {
  set_depth(depth);
}

EngineKernel::~EngineKernel() { queue_.reset(); }

void EngineKernel::set_depth(unsigned depth) {
  if (queue_ && queue_->in_flight() != 0) throw std::logic_error("engine kernel: depth changed with jobs in flight");
  if (depth == 0) throw std::invalid_argument("engine depth must be at least 1");
  const unsigned most = static_cast<unsigned>(shared_->engine->spec().queue_depth.value);
  if (depth > most)
    throw std::invalid_argument("depth " + std::to_string(depth) + " is more than the " +
                                shared_->engine->spec().generation + " " + shared_->engine->spec().name +
                                "'s queue holds (" + std::to_string(most) + ": " +
                                shared_->engine->spec().queue_depth.source + ")");
  queue_.reset();
  queue_ = std::make_unique<EngineQueue>(*shared_->engine, depth, EngineQueue::Clock::kVirtual);
  outs_.assign(depth, Bytes());
  ins_.assign(depth, {});
  free_.clear();
  for (uint32_t i = depth; i > 0; --i) free_.push_back(i - 1);
}

EngineJob EngineKernel::job(std::span<const uint8_t> in, Bytes* out, uint64_t user) const {
  EngineJob j;
  if (shared_->work.kind == EngineKind::kPublicKey)
    j.operation = shared_->work.operation;
  else
    j.bytes = shared_->job_bytes ? shared_->job_bytes : in.size();
  EngineShared* sh = shared_.get();
  j.body = [sh, in, out] { sh->run_body(in, *out); };
  j.user = user;
  return j;
}

void EngineKernel::set_program(const ComposedOperator* program, size_t engine_part,
                               std::vector<std::unique_ptr<Kernel>> dpu_parts) {
  if (!program || engine_part >= dpu_parts.size() || dpu_parts[engine_part])
    throw std::invalid_argument("engine kernel: a program needs one kernel per component but its engine's");
  program_ = program;
  engine_part_ = engine_part;
  dpu_parts_ = std::move(dpu_parts);
  part_outs_.assign(dpu_parts_.size(), Bytes());
  part_ptrs_.assign(dpu_parts_.size(), nullptr);
}

void EngineKernel::finish(std::span<const uint8_t> in, const Bytes& engine_out, Bytes& out) {
  // The other components run here, on the dpu thread: their CPU is in its step.
  for (size_t i = 0; i < dpu_parts_.size(); ++i) {
    if (i == engine_part_) {
      part_ptrs_[i] = &engine_out;
      continue;
    }
    dpu_parts_[i]->process(in, part_outs_[i]);
    part_ptrs_[i] = &part_outs_[i];
  }
  program_->join_parts(part_ptrs_, out);
}

void EngineKernel::process(std::span<const uint8_t> in, Bytes& out) {
  if (queue_->in_flight() != 0) throw std::logic_error("engine kernel: process() with jobs in flight");
  const uint64_t now = shared_->clock.load();
  if (!queue_->submit(job(in, program_ ? &engine_out_ : &out, 0), now))
    throw std::logic_error("engine kernel: an empty queue refused a job");
  done_.clear();
  while (done_.empty()) {
    const std::optional<uint64_t> at = queue_->next_completion_ns();
    if (!at) throw std::logic_error("engine kernel: a submitted job is not in flight");
    queue_->wait_computed();
    queue_->progress(*at, done_);
  }
  // Later checks and phases start after this job in the model.
  uint64_t c = shared_->clock.load();
  while (c < done_[0].completed_ns && !shared_->clock.compare_exchange_weak(c, done_[0].completed_ns)) {
  }
  if (done_[0].error) std::rethrow_exception(done_[0].error);
  if (program_) finish(in, engine_out_, out);
}

bool EngineKernel::post(std::span<const uint8_t> in, uint64_t now_ns) {
  if (free_.empty()) return false;
  const uint32_t slot = free_.back();
  if (!queue_->submit(job(in, &outs_[slot], slot), now_ns)) return false;
  ins_[slot] = in;
  free_.pop_back();
  return true;
}

size_t EngineKernel::reap(uint64_t now_ns, uint64_t& sink, uint64_t& latency_ns) {
  done_.clear();
  const size_t n = queue_->progress(now_ns, done_);
  for (const EngineCompletion& c : done_) {
    free_.push_back(static_cast<uint32_t>(c.user));
    if (c.error) std::rethrow_exception(c.error);
    if (program_) {
      finish(ins_[c.user], outs_[c.user], joined_);
      sink += digest(joined_);
    } else {
      sink += digest(outs_[c.user]);
    }
    latency_ns += c.completed_ns - c.submitted_ns;
  }
  return n;
}

std::vector<std::unique_ptr<Kernel>> make_engine_kernels(const Operator& op, size_t size, unsigned threads,
                                                         const std::string& generation, const CpuSet& hw_cpus) {
  const std::optional<Operator::EngineWork> work = op.engine_work();
  if (!work)
    throw Unavailable(op.info().name +
                      " has no engine on a BlueField: it runs on the Arm cores (the lib backend on --place dpu)");
  const EngineSpec* spec = nullptr;
  try {
    spec = &engine_spec(generation, work->kind);
  } catch (const EngineUnavailable& e) {
    throw Unavailable(e.what());
  }
  if (work->kind == EngineKind::kBulkCrypto &&
      std::find(spec->algorithms.begin(), spec->algorithms.end(), work->algorithm) == spec->algorithms.end())
    throw Unavailable(generation + "'s " + spec->name + " does not do " + work->algorithm + " (it does: " +
                      joined(spec->algorithms) + ")");
  if (work->kind == EngineKind::kPublicKey) {
    std::vector<std::string> ops;
    for (const auto& [name, fig] : spec->ops_per_s) ops.push_back(name);
    if (std::find(ops.begin(), ops.end(), work->operation) == ops.end())
      throw Unavailable(generation + "'s " + spec->name + " has no figure for " + work->operation +
                        " in its model (it has: " + joined(ops) + ")");
  }
  // A composed operator: the component with the engine on it, the others on the dpu threads.
  const auto* program = dynamic_cast<const ComposedOperator*>(&op);
  const Operator* body_op = &op;
  size_t engine_part = 0;
  if (program) {
    const std::vector<const Operator*> parts = program->components();
    size_t on_engine = 0;
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i]->engine_work()) {
        engine_part = i;
        ++on_engine;
      }
    if (on_engine != 1)
      throw Unavailable(op.info().name + " has " + std::to_string(on_engine) +
                        " components with an engine: the engine backend runs a program with exactly one");
    body_op = parts[engine_part];
  }
  auto shared = std::make_shared<EngineShared>();
  shared->work = *work;
  // The inflate engine's rate is of its output (the spec's figure says so):
  // a job counts the bytes it inflates to.
  if (work->kind == EngineKind::kDecompress) shared->job_bytes = size;
  const unsigned executors = std::max<unsigned>(1, static_cast<unsigned>(hw_cpus.cpus.size()));
  // The bodies are the lib backend's code; made here, on the caller's thread,
  // as every backend's shared state is.
  shared->owned = body_op->make_kernels(Backend::kLib, size, executors);
  for (auto& k : shared->owned) shared->idle.push_back(k.get());
  shared->engine = std::make_unique<Engine>(*spec, executors, hw_cpus);
  std::vector<std::unique_ptr<Kernel>> v;
  for (unsigned i = 0; i < threads; ++i) v.push_back(std::make_unique<EngineKernel>(shared));
  if (program) {
    // The other components on the lib backend, one kernel per dpu thread.
    const std::vector<const Operator*> parts = program->components();
    std::vector<std::vector<std::unique_ptr<Kernel>>> per_part(parts.size());
    for (size_t i = 0; i < parts.size(); ++i)
      if (i != engine_part) per_part[i] = parts[i]->make_kernels(Backend::kLib, size, threads);
    for (unsigned t = 0; t < threads; ++t) {
      std::vector<std::unique_ptr<Kernel>> mine(parts.size());
      for (size_t i = 0; i < parts.size(); ++i)
        if (i != engine_part) mine[i] = std::move(per_part[i][t]);
      static_cast<EngineKernel&>(*v[t]).set_program(program, engine_part, std::move(mine));
    }
  }
  return v;
}

std::vector<std::unique_ptr<Kernel>> make_backend_kernels(const Operator& op, Backend backend, size_t size,
                                                          unsigned threads, const std::string& generation,
                                                          const CpuSet& hw_cpus) {
  if (backend == Backend::kEngine) return make_engine_kernels(op, size, threads, generation, hw_cpus);
  return op.make_kernels(backend, size, threads);
}

std::vector<EnginePhase> time_engine(std::vector<std::unique_ptr<Kernel>>& kernels,
                                     const std::vector<std::span<const uint8_t>>& inputs,
                                     const EngineTimingOptions& o, uint64_t& sink_out) {
  const unsigned threads = o.threads, phases = o.phases + 1;
  if (threads == 0 || threads > kernels.size()) throw std::invalid_argument("engine timing: threads out of range");
  if (inputs.empty()) throw std::invalid_argument("engine timing: no inputs");
  if (!(o.factor > 0 && o.factor <= 1)) throw std::invalid_argument("engine timing: F must be in (0, 1]");
  std::vector<EngineKernel*> ks;
  for (unsigned t = 0; t < threads; ++t) {
    auto* k = dynamic_cast<EngineKernel*>(kernels[t].get());
    if (!k) throw std::invalid_argument("engine timing: not an engine kernel");
    k->set_depth(o.depth);
    ks.push_back(k);
  }
  EngineShared& shared = ks[0]->shared();
  constexpr uint64_t kDone = std::numeric_limits<uint64_t>::max();
  std::vector<std::atomic<uint64_t>> clocks(threads);
  std::atomic<bool> stop{false};
  std::barrier sync(threads + 1);
  struct PerThread {
    uint64_t jobs = 0, v_end = 0, dpu_cpu = 0, latency = 0, waits = 0;
  };
  std::vector<std::vector<PerThread>> res(threads, std::vector<PerThread>(phases));
  std::atomic<uint64_t> sink_all{0};
  // The loop reads its CPU clock once per step (a system call here), an
  // emulator's cost a driver does not have: one read's CPU time is taken off
  // each step's bill (a read spans the boundary of two steps, half in each).
  // Core measures it once per process for its Dilation: a payment's reads
  // (one thread CPU clock read and one wall clock read) less the wall read.
  const Dilation::Overhead& model_cost = Dilation::overhead();
  const uint64_t read_ns = model_cost.pay_ns - std::min(model_cost.pay_ns, model_cost.poll_ns);
  uint64_t epoch = 0;  // the phase's model start, set by the main thread before it releases the workers
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      if (!o.cpus.empty()) {
        CpuSet one;
        one.cpus.push_back(o.cpus.cpus[t % o.cpus.cpus.size()]);
        pin_current_thread(one);
      }
      EngineKernel& k = *ks[t];
      const size_t count = inputs.size();
      size_t j = (t * 7919) % count;
      uint64_t sink = 0;
      for (unsigned p = 0; p < phases; ++p) {
        sync.arrive_and_wait();  // start
        PerThread r;
        uint64_t v = epoch;
        bool draining = false;
        uint64_t c_prev = thread_cpu_ns();
        for (;;) {
          if (!draining && stop.load(std::memory_order_relaxed)) draining = true;
          // Build and post jobs while the pool has tasks, then poll.
          if (!draining)
            while (k.in_flight() < o.depth && k.post(inputs[j], v)) j = j + 1 == count ? 0 : j + 1;
          r.jobs += k.reap(v, sink, r.latency);
          const uint64_t c = thread_cpu_ns();
          const uint64_t step = c - c_prev > read_ns ? c - c_prev - read_ns : 0;
          r.dpu_cpu += step;
          v += static_cast<uint64_t>(static_cast<double>(step) / o.factor);
          c_prev = c;
          clocks[t].store(v, std::memory_order_relaxed);
          if (k.in_flight() == 0) {
            if (draining) break;
            continue;
          }
          if (!draining && k.in_flight() < o.depth) continue;
          // Nothing to do but wait: the clock goes to the next completion,
          // and the emulator's computing of it costs no model time.
          ++r.waits;
          if (const std::optional<uint64_t> at = k.next_completion_ns(); at && *at > v) v = *at;
          k.wait_computed();
          clocks[t].store(v, std::memory_order_relaxed);
          // The engine model is shared: stay within kLockstepWindowNs of the
          // slowest thread still running, so that one thread's later jobs do
          // not take the units before another's earlier ones.
          while (!draining && !stop.load(std::memory_order_relaxed)) {
            uint64_t least = kDone;
            for (unsigned u = 0; u < threads; ++u)
              if (u != t) least = std::min(least, clocks[u].load(std::memory_order_relaxed));
            if (least == kDone || v <= least + kLockstepWindowNs) break;
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          }
          c_prev = thread_cpu_ns();  // the waits are not the dpu's work
        }
        clocks[t].store(kDone, std::memory_order_relaxed);
        r.v_end = v;
        res[t][p] = r;
        sync.arrive_and_wait();  // done
      }
      sink_all.fetch_add(sink, std::memory_order_relaxed);
    });
  }
  std::vector<EnginePhase> out;
  for (unsigned p = 0; p < phases; ++p) {
    epoch = shared.clock.load();
    for (auto& c : clocks) c.store(epoch, std::memory_order_relaxed);
    const Engine::Stats s0 = shared.engine->stats();
    stop.store(false);
    sync.arrive_and_wait();
    const uint64_t t0 = now_ns();
    std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<uint64_t>((p == 0 ? o.warmup_s : o.phase_s) * 1e9)));
    stop.store(true);
    sync.arrive_and_wait();
    const uint64_t t1 = now_ns();
    const Engine::Stats s1 = shared.engine->stats();
    EnginePhase ph;
    ph.wall_ns = t1 - t0;
    uint64_t end = epoch;
    for (unsigned t = 0; t < threads; ++t) {
      const PerThread& r = res[t][p];
      ph.jobs += r.jobs;
      ph.virtual_ns = std::max(ph.virtual_ns, r.v_end - epoch);
      ph.dpu_cpu_ns += r.dpu_cpu;
      ph.latency_ns += r.latency;
      ph.waits += r.waits;
      end = std::max(end, r.v_end);
    }
    ph.engine.jobs = s1.jobs - s0.jobs;
    ph.engine.bytes = s1.bytes - s0.bytes;
    ph.engine.busy_ns = s1.busy_ns - s0.busy_ns;
    ph.engine.hw_cpu_ns = s1.hw_cpu_ns - s0.hw_cpu_ns;
    ph.engine.late_jobs = s1.late_jobs - s0.late_jobs;
    ph.engine.wakeups = s1.wakeups - s0.wakeups;
    // Every job is drained, so the units are free from the latest clock on.
    uint64_t c = shared.clock.load();
    while (c < end && !shared.clock.compare_exchange_weak(c, end)) {
    }
    if (p > 0) out.push_back(ph);
  }
  for (auto& w : workers) w.join();
  for (EnginePhase& ph : out) ph.clock_read_ns = read_ns;
  sink_out += sink_all.load();
  return out;
}

}  // namespace dpukit::bench
