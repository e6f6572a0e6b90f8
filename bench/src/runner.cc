// The runner: the reference check, then warm-up and timed repetitions of
// each (operator, backend, size, threads) point on pinned threads.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include "dev/dev_kernel.h"
#include "dpdk_env.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/perf_counters.h"
#include "dpukit/core/results.h"
#include "engine_backend.h"
#include "operator.h"

namespace dpukit::bench {
namespace {

// Keeps every output observable, so the compiler cannot drop the work.
std::atomic<uint64_t> g_sink{0};

std::vector<std::string> expand_ops(const std::vector<std::string>& ops) {
  std::vector<std::string> names;
  for (const auto& n : ops) {
    if (n == "all") {
      for (const auto& op : registry())
        if (op->info().scenario != "program") names.push_back(op->info().name);
    } else if (n == "programs") {
      for (const auto& op : registry())
        if (op->info().scenario == "program") names.push_back(op->info().name);
    } else {
      find_operator(n);  // throws on an unknown name
      names.push_back(n);
    }
  }
  if (names.empty()) throw std::invalid_argument("no operators chosen");
  return names;
}

// The counters of a fixed-count loop: each event's count (scaled when the
// kernel multiplexed the PMU) and the ratios of Fig. 8 that the counted
// events give; a string "unavailable: <reason>" when nothing could count.
nlohmann::json counters_json(const PerfCounters& counters) {
  if (!counters.available()) return "unavailable: " + counters.unavailable_reason();
  nlohmann::json events = nlohmann::json::object();
  std::map<std::string, double> v;
  for (const PerfCount& c : counters.read()) {
    if (!c.counted) {
      events[c.name] = "not counted: " + c.why;
      continue;
    }
    events[c.name] = {{"value", c.value}, {"raw", c.raw}, {"time_enabled_ns", c.time_enabled_ns},
                      {"time_running_ns", c.time_running_ns}};
    v[c.name] = c.value;
  }
  nlohmann::json ratios = nlohmann::json::object();
  auto ratio = [&](const char* key, const char* num, const char* den) {
    if (v.count(num) && v.count(den) && v[den] > 0) ratios[key] = v[num] / v[den];
  };
  ratio("ipc", "instructions", "cycles");
  ratio("l1d_read_miss_ratio", "l1d_read_misses", "l1d_read_accesses");
  ratio("dtlb_read_miss_ratio", "dtlb_read_misses", "dtlb_read_accesses");
  ratio("itlb_read_miss_ratio", "itlb_read_misses", "itlb_read_accesses");
  ratio("branch_ratio", "branch_instructions", "instructions");
  ratio("branch_miss_ratio", "branch_misses", "branch_instructions");
  // L1D reads + writes per instruction: the load + store instruction share
  // where the kernel maps L1D accesses to retired load and store
  // instructions (Intel core PMUs); a count of accesses elsewhere.
  if (v.count("l1d_read_accesses") && v.count("l1d_write_accesses") && v.count("instructions") &&
      v["instructions"] > 0)
    ratios["l1d_accesses_per_instruction"] = (v["l1d_read_accesses"] + v["l1d_write_accesses"]) / v["instructions"];
  return {{"source", "perf_event_open"}, {"scope", "user space of the calling thread, the loop only"},
          {"events", events}, {"ratios", ratios}};
}

void check_sizes(const std::vector<size_t>& sizes) {
  if (sizes.empty()) throw std::invalid_argument("no sizes chosen");
  for (size_t s : sizes) check_input_size(s);
}

// The run's parameters for `op` ("op.key" entries of `params`), the others
// at their defaults.
void apply_params(Operator& op, const std::map<std::string, std::string>& params) {
  const std::string& name = op.info().name;
  op.reset_params();
  for (const auto& [k, v] : params)
    if (k.compare(0, name.size() + 1, name + ".") == 0) op.set_param(k.substr(name.size() + 1), v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

// The inputs as the timed loop reads them: each in its own buffer, or (an
// operator's packed_inputs) copied end to end into one array of units of
// one size.
struct TimedInputs {
  TimedInputs(const std::vector<Bytes>& inputs, bool packed) : count(inputs.size()), packed(packed) {
    if (!packed) {
      views.assign(inputs.begin(), inputs.end());
      return;
    }
    unit = inputs.empty() ? 0 : inputs[0].size();
    arena.reserve(unit * inputs.size());
    for (const Bytes& b : inputs) {
      if (b.size() != unit) throw std::logic_error("packed inputs must all be of one size");
      arena.insert(arena.end(), b.begin(), b.end());
    }
  }
  size_t count;
  bool packed;
  size_t unit = 0;
  Bytes arena;
  std::vector<std::span<const uint8_t>> views;  // unpacked
};

struct Rep {
  uint64_t ops = 0;
  uint64_t wall_ns = 0;
  uint64_t cpu_ns = 0;       // includes the dilated time (what the slower core spent)
  uint64_t work_ns = 0;      // dilated points: the bursts' own CPU time
  uint64_t dilated_ns = 0;   // dilated points: the busy time added after them
};

// Whether this run's timing threads are time-dilated: on the dpu place, at
// a speed below a host core's.
bool dilated(const RunOptions& o) { return o.place == "dpu" && !o.dpu_speed.full(); }

// Warm-up, then `reps` timed phases; all threads start each phase together
// and run until the main thread raises `stop` after the phase's time.
std::vector<Rep> time_point(std::vector<std::unique_ptr<Kernel>>& kernels, unsigned threads,
                            const TimedInputs& inputs, const CpuSet& cpus, const RunOptions& o) {
  const unsigned phases = o.repetitions + 1;
  std::atomic<bool> stop{false};
  std::barrier sync(threads + 1);
  std::vector<std::vector<uint64_t>> ops(threads, std::vector<uint64_t>(phases));
  std::vector<std::vector<uint64_t>> cpu(threads, std::vector<uint64_t>(phases));
  std::vector<std::vector<uint64_t>> work(threads, std::vector<uint64_t>(phases));
  std::vector<std::vector<uint64_t>> added(threads, std::vector<uint64_t>(phases));
  size_t burst_size = 1;  // set by the main thread after the warm-up, read by the workers after a barrier
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      if (!cpus.empty()) {
        CpuSet one;
        one.cpus.push_back(cpus.cpus[t % cpus.cpus.size()]);
        pin_current_thread(one);
      }
      Kernel& k = *kernels[t];
      // The thread's own copy of the views; a burst is a plain subspan (no wrap).
      const std::vector<std::span<const uint8_t>> views(inputs.views.begin(), inputs.views.end());
      const size_t count = inputs.count, unit = inputs.unit;
      std::vector<Bytes> outs(kMaxBurst);
      uint64_t sink = 0;
      // One per thread, on the thread. A burst takes about 2 us, too short
      // to read the thread's CPU clock after each: poll() pays every 20 us.
      Dilation dilation(dilated(o) ? o.dpu_speed.factor : 1.0);
      size_t j = (t * 7919) % count;  // threads start at different inputs
      for (unsigned p = 0; p < phases; ++p) {
        // The warm-up runs one unit at a time; the repetitions run bursts
        // sized so that one burst takes about 2 us (a packed call has
        // kMaxPacked units), which keeps the runner's own loop (stop flag,
        // virtual call, digest) out of short units.
        sync.arrive_and_wait();  // start
        // A kernel that keeps operations in flight gets its depth whatever
        // the time per unit (Kernel::min_burst).
        const size_t burst = std::max(p == 0 ? size_t{1} : burst_size, k.min_burst());
        // The warm-up is not dilated: the bursts are sized from its time per
        // unit, and they must be the same at every speed so that a dilated
        // point differs from a full-speed one by the dilation alone.
        const bool dilate = p > 0 && dilation.active();
        uint64_t c0 = thread_cpu_ns(), n = 0;
        const uint64_t w0 = dilation.work_ns(), d0 = dilation.dilated_ns();
        if (dilate) dilation.start();
        while (!stop.load(std::memory_order_relaxed)) {
          const size_t b = std::min(burst, count - j);
          if (inputs.packed) {
            k.process_packed({inputs.arena.data() + j * unit, b * unit}, unit, outs[0]);
            sink += digest(outs[0]);
          } else {
            k.process_burst({views.data() + j, b}, {outs.data(), b});
            sink += digest(outs[b - 1]);
          }
          n += b;
          j += b;
          if (j == count) j = 0;
          if (dilate) dilation.poll();
        }
        // The phase's last bursts are paid before it ends: its wall time
        // (read after every thread is done) covers them.
        if (dilate) dilation.pay();
        ops[t][p] = n;
        cpu[t][p] = thread_cpu_ns() - c0;
        work[t][p] = dilation.work_ns() - w0;
        added[t][p] = dilation.dilated_ns() - d0;
        sync.arrive_and_wait();  // done
      }
      g_sink.fetch_add(sink, std::memory_order_relaxed);
    });
  }
  std::vector<Rep> reps;
  for (unsigned p = 0; p < phases; ++p) {
    double secs = p == 0 ? o.warmup_s : o.min_time_s;
    stop.store(false);
    sync.arrive_and_wait();
    uint64_t t0 = now_ns();
    std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<uint64_t>(secs * 1e9)));
    stop.store(true);
    sync.arrive_and_wait();
    uint64_t t1 = now_ns();
    if (p == 0) {
      // All workers are waiting at the next start: size the bursts from the
      // warm-up's time per unit on one thread.
      uint64_t warm = 0;
      for (unsigned t = 0; t < threads; ++t) warm += ops[t][0];
      const double ns_per_unit = warm ? static_cast<double>(t1 - t0) * threads / static_cast<double>(warm) : 1e9;
      // A packed call is an array the kernel loops over itself, in bursts
      // of its own, as lpm_perf_autotest looks up 4096 addresses at a time.
      // Each call's end costs the lookups the CPU had in flight, which
      // calls of 32 pay 128 times as often (bench_bench OperatorArray,
      // docs/bench.md).
      burst_size = inputs.packed
                       ? kMaxPacked
                       : std::clamp<size_t>(static_cast<size_t>(2000.0 / std::max(ns_per_unit, 1.0)), 1, kMaxBurst);
      continue;
    }
    Rep r;
    r.wall_ns = t1 - t0;
    for (unsigned t = 0; t < threads; ++t) {
      r.ops += ops[t][p];
      r.cpu_ns += cpu[t][p];
      r.work_ns += work[t][p];
      r.dilated_ns += added[t][p];
    }
    reps.push_back(r);
  }
  for (auto& w : workers) w.join();
  return reps;
}

// What every timed point has: where it ran and its throughput over the
// repetitions (the median, the range, each one).
nlohmann::json point_figures(const Operator& op, Backend backend, size_t size, unsigned threads, const CpuSet& cpus,
                             const std::vector<double>& mops) {
  const double work_bits = 8.0 * static_cast<double>(op.work_bytes(size));
  const double m = median(mops);
  const auto [lo, hi] = std::minmax_element(mops.begin(), mops.end());
  return {{"op", op.info().name},
          {"scenario", op.info().scenario},
          {"backend", backend_name(backend)},
          {"size", size},
          {"threads", threads},
          {"cpus", std::min<size_t>(threads, std::max<size_t>(cpus.cpus.size(), 1))},
          {"mops", m},
          {"mops_min", *lo},
          {"mops_max", *hi},
          {"gbps", m * work_bits / 1e3},
          {"gbps_min", *lo * work_bits / 1e3},
          {"gbps_max", *hi * work_bits / 1e3},
          {"reps_mops", mops}};
}

// One point of the engine backend: the virtual-clock loop (time_engine)
// at `threads` x `depth`, its figures in model time.
nlohmann::json time_engine_point(const Operator& op, std::vector<std::unique_ptr<Kernel>>& kernels,
                                 const std::vector<Bytes>& inputs, size_t size, unsigned threads, unsigned depth,
                                 const CpuSet& cpus, const RunOptions& o, size_t checked) {
  EngineTimingOptions t;
  t.threads = threads;
  t.depth = depth;
  t.factor = std::min(o.dpu_speed.factor, 1.0);
  t.warmup_s = o.warmup_s;
  t.phase_s = o.min_time_s;
  t.phases = o.repetitions;
  t.cpus = cpus;
  const std::vector<std::span<const uint8_t>> views(inputs.begin(), inputs.end());
  uint64_t sink = 0;
  const std::vector<EnginePhase> phases = time_engine(kernels, views, t, sink);
  g_sink.fetch_add(sink, std::memory_order_relaxed);
  const EngineShared& shared = dynamic_cast<EngineKernel&>(*kernels[0]).shared();
  const Engine& engine = *shared.engine;
  const EngineSpec& spec = engine.spec();
  std::vector<double> mops, busy, wall_mops;
  uint64_t jobs = 0, dpu_cpu = 0, hw_cpu = 0, late = 0, latency = 0, waits = 0, virt = 0, wakeups = 0;
  for (const EnginePhase& p : phases) {
    const double secs = static_cast<double>(p.virtual_ns) / 1e9;
    mops.push_back(secs > 0 ? static_cast<double>(p.jobs) / secs / 1e6 : 0.0);
    wall_mops.push_back(static_cast<double>(p.jobs) / (static_cast<double>(p.wall_ns) / 1e9) / 1e6);
    busy.push_back(p.virtual_ns ? static_cast<double>(p.engine.busy_ns) /
                                      (spec.parallel.value * static_cast<double>(p.virtual_ns))
                                : 0.0);
    jobs += p.jobs;
    dpu_cpu += p.dpu_cpu_ns;
    hw_cpu += p.engine.hw_cpu_ns;
    late += p.engine.late_jobs;
    wakeups += p.engine.wakeups;
    latency += p.latency_ns;
    waits += p.waits;
    virt += p.virtual_ns;
  }
  const double per_job = jobs ? 1.0 / static_cast<double>(jobs) : 0.0;
  nlohmann::json pt = point_figures(op, Backend::kEngine, size, threads, cpus, mops);
  pt["depth"] = depth;
  pt.update(nlohmann::json{
          // Units per second of the dpu threads' own CPU time at F (what they would
          // spend on a dpu core): the driver's cost, the engine's work excluded.
          {"mops_per_cpu_second",
           dpu_cpu ? static_cast<double>(jobs) / (static_cast<double>(dpu_cpu) / t.factor / 1e9) / 1e6 : 0.0},
          {"cpu_per_wall", 0.0},
          {"inputs", inputs.size()},
          {"checked_inputs", checked},
          {"basis",
           "model time: each submitting thread's virtual clock (its own CPU time per loop step / F, advanced to "
           "the next modelled completion while it waits); throughput = jobs / the longest thread's virtual time"},
          {"engine",
           {{"generation", spec.generation},
            {"kind", engine_kind_name(spec.kind)},
            {"name", spec.name},
            {"operation", shared.work.operation},  // the PKA's figure in spec.ops_per_s
            {"algorithm", shared.work.algorithm},  // bulk crypto's, in spec.algorithms
            // A decompress job counts its output's bytes (the inflate engine's rate is of output).
            {"job_bytes", shared.job_bytes ? shared.job_bytes : size},
            {"busy_fraction", median(busy)},
            {"late_jobs", late},
            {"jobs", jobs},
            {"virtual_ns", virt},
            {"waits", waits},
            // One read of a thread's CPU clock, taken off each loop step's bill (not the driver's).
            {"clock_read_ns", phases.empty() ? 0 : phases[0].clock_read_ns},
            // Submits that woke a sleeping executor: the emulator's cost (a futex wake) on the
            // dpu thread, where a driver writes a doorbell.
            {"executor_wakeups", wakeups},
            {"mean_latency_ns", static_cast<double>(latency) * per_job},
            {"hw_cpu_ns_per_job", static_cast<double>(hw_cpu) * per_job},
            {"dpu_cpu_ns_per_job", static_cast<double>(dpu_cpu) * per_job},
            {"dpu_cpu_ns_per_job_at_speed", static_cast<double>(dpu_cpu) * per_job / t.factor},
            {"wall_mops", median(wall_mops)},
            {"spec", spec.to_json()}}}});
  return pt;
}

}  // namespace

size_t check_against_ref(const Operator& op, Backend backend, size_t size, const std::vector<Bytes>& inputs,
                         std::vector<std::unique_ptr<Kernel>>& kernels, bool fixed_count) {
  if (backend == Backend::kRef) return 0;  // ref is checked against the published vectors in the tests
  auto ref = op.make_kernels(Backend::kRef, size, 1);
  // Up to 512 inputs, but at least 16 and no more than about a second of
  // checking: a ref RSA or ECDSA signature takes milliseconds.
  // With fixed_count exactly the least: a run under an instruction counter
  // must do the same start-up work each time, whatever its speed.
  const size_t least = std::min<size_t>(inputs.size(), 16);
  const size_t most = fixed_count ? least : std::min<size_t>(inputs.size(), 512);
  const uint64_t deadline = now_ns() + 1'000'000'000ull;
  Bytes want, got;
  size_t n = 0;
  for (size_t i = 0; i < most && (i < least || now_ns() < deadline); ++i, ++n) {
    ref[0]->process(inputs[i], want);
    // Every kernel on the first inputs (shared state must be right from any
    // thread), the first kernel on all of them.
    for (size_t k = 0; k < kernels.size() && (k == 0 || i < 8); ++k) {
      kernels[k]->process(inputs[i], got);
      std::string why = op.mismatch(inputs[i], want, got);
      if (!why.empty()) {
        throw CheckFailed(op.info().name + " " + backend_name(backend) + " differs from ref at size " +
                          std::to_string(size) + ", input #" + std::to_string(i) + " (" + hex(inputs[i], 24) +
                          "), kernel " + std::to_string(k) + ": " + why);
      }
    }
  }
  // The burst form must give the same outputs (a kernel may override it),
  // and for packed inputs the packed form too.
  const size_t b = std::min({n, kMaxBurst, inputs.size()});
  if (b == 0) return n;
  if (op.packed_inputs()) {
    // Full bursts and a part of one, as the kernel may split the array.
    const size_t units = std::min({n, 2 * kMaxBurst + 3, inputs.size()});
    Bytes packed, want_all, got_all;
    for (size_t i = 0; i < units; ++i) {
      packed.insert(packed.end(), inputs[i].begin(), inputs[i].end());
      ref[0]->process(inputs[i], want);
      want_all.insert(want_all.end(), want.begin(), want.end());
    }
    kernels[0]->process_packed(packed, inputs[0].size(), got_all);
    if (got_all != want_all)
      throw CheckFailed(op.info().name + " " + backend_name(backend) + " differs from ref at size " +
                        std::to_string(size) + " in a packed call of " + std::to_string(units) + ": " +
                        describe_difference(want_all, got_all));
  }
  std::vector<std::span<const uint8_t>> views(inputs.begin(), inputs.begin() + static_cast<ptrdiff_t>(b));
  std::vector<Bytes> outs(b);
  kernels[0]->process_burst(views, outs);
  for (size_t i = 0; i < b; ++i) {
    ref[0]->process(inputs[i], want);
    std::string why = op.mismatch(inputs[i], want, outs[i]);
    if (!why.empty())
      throw CheckFailed(op.info().name + " " + backend_name(backend) + " differs from ref at size " +
                        std::to_string(size) + ", input #" + std::to_string(i) + " in a burst of " +
                        std::to_string(b) + ": " + why);
  }
  return n;
}

namespace {

// The sweep's shape: threads, place, repetitions, depths, and the outputs
// each thread holds within the budget.
void check_sweep(const RunOptions& o) {
  if (o.threads.empty() || o.backends.empty()) throw std::invalid_argument("empty sweep");
  check_sizes(o.sizes);
  for (unsigned t : o.threads)
    if (t == 0 || t > kMaxThreads)
      throw std::invalid_argument("threads " + std::to_string(t) + " is not 1 to " + std::to_string(kMaxThreads));
  if (o.place != "host" && o.place != "dpu") throw std::invalid_argument("place must be host or dpu");
  if (o.iterations == 0 && (o.repetitions == 0 || o.min_time_s <= 0))
    throw std::invalid_argument("repetitions and min time must be positive");
  const unsigned max_threads = *std::max_element(o.threads.begin(), o.threads.end());
  if (o.iterations == 0)
    for (size_t size : o.sizes)
      if (static_cast<uint64_t>(max_threads) * size > kThreadWorkBudget)
        throw std::invalid_argument("threads " + std::to_string(max_threads) + " at size " + std::to_string(size) +
                                    " would hold " + bytes_text(uint64_t{max_threads} * size) +
                                    " of outputs, more than " + bytes_text(kThreadWorkBudget) +
                                    ": fewer threads or a smaller size");
  if (o.depths.empty()) throw std::invalid_argument("no depths chosen");
  for (unsigned d : o.depths)
    if (d == 0 || d > kMaxInFlight)
      throw std::invalid_argument("depth " + std::to_string(d) + " is not 1 to " + std::to_string(kMaxInFlight));
  if (o.depths != std::vector<unsigned>{1})
    for (Backend b : o.backends)
      if (b != Backend::kEngine)
        throw std::invalid_argument(std::string("--depth is the engine backend's (jobs in flight per thread); the ") +
                                    backend_name(b) + " backend runs one unit at a time: run it without --depth");
}

// The engine backend: its jobs are submitted by dpu threads, to the
// engines of the card the dpu speed names. Returns that card's generation
// ("" without the engine backend).
std::string check_engine_sweep(const RunOptions& o) {
  if (std::find(o.backends.begin(), o.backends.end(), Backend::kEngine) == o.backends.end()) return "";
  if (o.place != "dpu")
    throw std::invalid_argument("the engine backend runs on --place dpu: its jobs are submitted by dpu threads");
  std::string generation;
  try {
    generation = engine_generation(o.dpu_speed);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("the engine backend needs a BlueField generation: ") + e.what());
  }
  const unsigned max_threads = *std::max_element(o.threads.begin(), o.threads.end());
  const unsigned max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  if (o.iterations == 0) {
    if (uint64_t{max_threads} * max_depth > kMaxInFlight)
      throw std::invalid_argument("threads " + std::to_string(max_threads) + " x depth " + std::to_string(max_depth) +
                                  " is more than " + std::to_string(kMaxInFlight) + " jobs in flight");
    for (size_t size : o.sizes)
      if (uint64_t{max_threads} * max_depth * size > kThreadWorkBudget)
        throw std::invalid_argument("threads x depth x size = " + bytes_text(uint64_t{max_threads} * max_depth * size) +
                                    " of outputs in flight, more than " + bytes_text(kThreadWorkBudget));
  }
  return generation;
}

// The operators of the run, their parameters checked, and every point's
// inputs within the budget before the first one runs: a refusal halfway
// would lose the points already measured.
std::vector<std::string> check_operators(const RunOptions& o) {
  std::vector<std::string> names = expand_ops(o.ops);
  for (const auto& [k, v] : o.params) {
    auto dot = k.find('.');
    if (dot == std::string::npos || std::find(names.begin(), names.end(), k.substr(0, dot)) == names.end())
      throw std::invalid_argument("parameter '" + k + "' is not op.key for an operator of this run");
  }
  for (const auto& name : names) {
    Operator& op = find_operator(name);
    apply_params(op, o.params);
    for (size_t size : o.sizes) op.inputs_within_budget(size);
  }
  return names;
}

// A sweep's points as they are measured, the ones that could not be, and
// its progress.
struct Sweep {
  const RunOptions& o;
  const CpuSet& cpus;
  nlohmann::json points = nlohmann::json::array(), unavailable = nlohmann::json::array();
  size_t total = 0, done = 0;

  // The points of one operator, backend and size.
  size_t points_per_size(Backend b) const {
    return o.iterations ? 1 : o.threads.size() * (b == Backend::kEngine ? o.depths.size() : 1);
  }
};

// One operator, backend and size that is the point (or, with the engine,
// the points) of the sweep: its inputs, its kernels checked against ref.
struct PointSet {
  Operator& op;
  const std::string& name;
  Backend backend;
  size_t size;
  const std::vector<Bytes>& inputs;
  std::vector<std::unique_ptr<Kernel>>& kernels;
  size_t checked;
};

// Fixed count on the calling thread: what an instruction counter sees.
void fixed_count_point(Sweep& sw, PointSet& ps) {
  const RunOptions& o = sw.o;
  std::unique_ptr<PerfCounters> counters;
  if (o.counters) counters = std::make_unique<PerfCounters>(PerfCounters::default_hardware_groups());
  Bytes out;
  uint64_t sink = 0, t0 = now_ns();
  if (counters) counters->start();
  for (uint64_t i = 0; i < o.iterations; ++i) {
    ps.kernels[0]->process(ps.inputs[i % ps.inputs.size()], out);
    sink += digest(out);
  }
  if (counters) counters->stop();
  const uint64_t wall_ns = now_ns() - t0;
  g_sink.fetch_add(sink);
  nlohmann::json pt = {{"op", ps.name}, {"backend", backend_name(ps.backend)}, {"size", ps.size}, {"threads", 1},
                       {"iterations", o.iterations}, {"wall_ns", wall_ns}, {"inputs", ps.inputs.size()},
                       {"checked_inputs", ps.checked}};
  if (counters) pt["counters"] = counters_json(*counters);
  sw.points.push_back(pt);
  ++sw.done;
}

// The engine backend: a point per threads and depth, in model time.
void engine_points(Sweep& sw, PointSet& ps) {
  const RunOptions& o = sw.o;
  const char* backend = backend_name(ps.backend);
  const EngineSpec& spec = dynamic_cast<EngineKernel&>(*ps.kernels[0]).shared().engine->spec();
  for (unsigned threads : o.threads)
    for (unsigned depth : o.depths) {
      // A DOCA context's task pool holds at most the engine's queue depth.
      if (depth > spec.queue_depth.value) {
        const std::string why = "depth " + std::to_string(depth) + " is more than the " + spec.generation + " " +
                                spec.name + "'s queue holds (" +
                                std::to_string(static_cast<unsigned>(spec.queue_depth.value)) + ": " +
                                spec.queue_depth.source + ")";
        sw.unavailable.push_back({{"op", ps.name}, {"backend", backend}, {"size", ps.size},
                                  {"threads", threads}, {"depth", depth}, {"why", why}});
        if (o.progress)
          std::fprintf(stderr, "%s %s %zuB %ut d%u: unavailable: %s\n", ps.name.c_str(), backend, ps.size, threads,
                       depth, why.c_str());
        ++sw.done;
        continue;
      }
      sw.points.push_back(
          time_engine_point(ps.op, ps.kernels, ps.inputs, ps.size, threads, depth, sw.cpus, o, ps.checked));
      ++sw.done;
      if (o.progress) {
        const nlohmann::json& pt = sw.points.back();
        std::fprintf(stderr,
                     "[%zu/%zu] %-16s %-6s %6zuB %2ut d%-3u %10.4g Mops  %9.4g Gbps  (model time; engine "
                     "busy %.0f%%, range %.1f%%)\n",
                     sw.done, sw.total, ps.name.c_str(), backend, ps.size, threads, depth, pt["mops"].get<double>(),
                     pt["gbps"].get<double>(), 100 * pt["engine"]["busy_fraction"].get<double>(),
                     pt["mops"].get<double>() > 0
                         ? 100 * (pt["mops_max"].get<double>() - pt["mops_min"].get<double>()) / pt["mops"].get<double>()
                         : 0.0);
      }
    }
}

// The other backends: a point per threads count, timed by the wall clock
// over the repetitions.
void timed_points(Sweep& sw, PointSet& ps) {
  const RunOptions& o = sw.o;
  const std::string device = dev_kernel_device(*ps.kernels[0]);  // "" unless a DPDK device does the work
  const double work_bits = 8.0 * static_cast<double>(ps.op.work_bytes(ps.size));
  const TimedInputs timed(ps.inputs, ps.op.packed_inputs());
  for (unsigned threads : o.threads) {
    std::vector<Rep> reps = time_point(ps.kernels, threads, timed, sw.cpus, o);
    std::vector<double> mops, util, per_cpu;
    uint64_t work_ns = 0, dilated_ns = 0;
    for (const Rep& r : reps) {
      mops.push_back(static_cast<double>(r.ops) / (static_cast<double>(r.wall_ns) / 1e9) / 1e6);
      per_cpu.push_back(r.cpu_ns ? static_cast<double>(r.ops) / (static_cast<double>(r.cpu_ns) / 1e9) / 1e6 : 0.0);
      util.push_back(static_cast<double>(r.cpu_ns) / static_cast<double>(r.wall_ns));
      work_ns += r.work_ns;
      dilated_ns += r.dilated_ns;
    }
    const double m = median(mops);
    const auto [lo, hi] = std::minmax_element(mops.begin(), mops.end());
    nlohmann::json pt = point_figures(ps.op, ps.backend, ps.size, threads, sw.cpus, mops);
    pt.update(nlohmann::json{
        {"cpu_per_wall", median(util)},
        // Units per second of the threads' own CPU time (dilation included):
        // unlike mops, not lowered by other work that takes their CPUs.
        {"mops_per_cpu_second", median(per_cpu)},
        {"inputs", ps.inputs.size()},
        {"checked_inputs", ps.checked}});
    if (!device.empty()) pt["device"] = device;
    // Over all repetitions: the bursts' CPU time and the busy time the
    // dilation added after them, (1/F - 1) x the former when it works.
    if (dilated(o)) pt["dilation"] = {{"work_cpu_ns", work_ns}, {"dilated_cpu_ns", dilated_ns}};
    sw.points.push_back(pt);
    ++sw.done;
    if (o.progress) {
      std::fprintf(stderr, "[%zu/%zu] %-16s %-3s %6zuB %2ut  %10.4g Mops  %9.4g Gbps  (range %.1f%%)%s\n", sw.done,
                   sw.total, ps.name.c_str(), backend_name(ps.backend), ps.size, threads, m, m * work_bits / 1e3,
                   m > 0 ? 100.0 * (*hi - *lo) / m : 0.0, threads > sw.cpus.cpus.size() ? "  [threads share CPUs]" : "");
    }
  }
}

// One operator, backend and size: its kernels (or why the backend is
// unavailable), checked against ref, then its points.
void measure_size(Sweep& sw, Operator& op, const std::string& name, Backend backend, size_t size,
                  const std::string& generation, const CpuSet& hw) {
  const RunOptions& o = sw.o;
  const unsigned max_threads = *std::max_element(o.threads.begin(), o.threads.end());
  const std::vector<Bytes> inputs = op.make_inputs(size, op.inputs_within_budget(size), o.seed);
  std::vector<std::unique_ptr<Kernel>> kernels;
  try {
    kernels = make_backend_kernels(op, backend, size, o.iterations ? 1 : max_threads, generation, hw);
  } catch (const Unavailable& e) {
    sw.unavailable.push_back({{"op", name}, {"backend", backend_name(backend)}, {"size", size}, {"why", e.what()}});
    if (o.progress)
      std::fprintf(stderr, "%s %s %zuB: unavailable: %s\n", name.c_str(), backend_name(backend), size, e.what());
    sw.done += sw.points_per_size(backend);
    return;
  }
  const size_t checked = check_against_ref(op, backend, size, inputs, kernels, o.iterations > 0);
  PointSet ps{op, name, backend, size, inputs, kernels, checked};
  if (o.iterations)
    fixed_count_point(sw, ps);
  else if (backend == Backend::kEngine)
    engine_points(sw, ps);
  else
    timed_points(sw, ps);
}

}  // namespace

nlohmann::json run(const RunOptions& o) {
  check_sweep(o);
  const std::string generation = check_engine_sweep(o);
  const std::vector<std::string> names = check_operators(o);
  Placement pl = Placement::plan(o.host_cpus, o.dpu_cpus, o.hw_cpus);
  const CpuSet& cpus = o.place == "dpu" ? pl.dpu : pl.host;

  Sweep sw{o, cpus};
  nlohmann::json versions = nlohmann::json::object(), params = nlohmann::json::object();
  for (Backend b : o.backends) sw.total += names.size() * o.sizes.size() * sw.points_per_size(b);
  for (const auto& name : names) {
    Operator& op = find_operator(name);
    apply_params(op, o.params);
    versions[name] = op.info().version;
    params[name] = op.parameters();
    for (Backend backend : o.backends)
      for (size_t size : o.sizes) measure_size(sw, op, name, backend, size, generation, pl.hw);
  }
  nlohmann::json figures = {{"points", sw.points},
                            {"unavailable", sw.unavailable},
                            {"operators", versions},
                            {"operator_parameters", params},
                            {"place", o.place},
                            {"place_cpus", cpus.str()},
                            // The speed of the dpu place, and whether this run's timing threads were
                            // dilated by it (the dpu place only; not in fixed-count mode).
                            {"dpu_speed", o.dpu_speed.to_json()},
                            {"dilated", dilated(o) && o.iterations == 0},
                            {"placement_note", pl.note},
                            {"input_budget_bytes", kInputBudget},
                            {"sink", g_sink.load() & 1}};
  if (const DpdkEnv* env = dpdk_env_if_started(); env && env->ok)
    figures["dpdk"] = {{"tsc_hz", env->tsc_hz}, {"vdevs", env->vdevs}};
  return figures;
}

std::vector<std::string> devices() { return device_inventory(); }

CheckReport check_all(const std::vector<std::string>& ops, const std::vector<Backend>& backends,
                      const std::vector<size_t>& sizes, uint64_t seed, const std::string& engine_generation) {
  CheckReport rep;
  const CpuSet hw = Placement::plan("", "").hw;
  check_sizes(sizes);
  for (const auto& name : expand_ops(ops)) {
    Operator& op = find_operator(name);
    op.reset_params();
    for (Backend b : backends) {
      for (size_t size : sizes) {
        std::string what = name + " " + backend_name(b) + " " + std::to_string(size) + "B";
        try {
          auto inputs = op.make_inputs(size, op.inputs_within_budget(size), seed);
          auto kernels = make_backend_kernels(op, b, size, 2, engine_generation, hw);
          check_against_ref(op, b, size, inputs, kernels);
          rep.passed.push_back(what);
        } catch (const Unavailable& e) {
          rep.unavailable.push_back(what + ": " + e.what());
        } catch (const std::exception& e) {
          rep.failed.push_back(what + ": " + e.what());
        }
      }
    }
  }
  return rep;
}

std::string run_result_violation(const nlohmann::json& r) {
  if (std::string why = result_schema_violation(r); !why.empty()) return why;
  if (r.at("tool") != "dpukit-bench run") return "tool: is " + r.at("tool").dump() + ", not \"dpukit-bench run\"";
  const nlohmann::json& f = r.at("figures");
  if (!f.contains("operators"))
    return "figures.operators: missing (the operator versions say what each figure measured)";
  const nlohmann::json& ops = f.at("operators");
  if (!ops.is_object() || ops.empty()) return "figures.operators: is " + ops.dump() + ", not the operators' versions";
  for (const auto& [name, ver] : ops.items())
    if (!ver.is_number_integer() || ver.get<int64_t>() < 1)
      return "figures.operators." + name + ": is " + ver.dump() + ", not a version (an integer from 1)";
  if (!f.contains("points")) return "figures.points: missing";
  if (!f.at("points").is_array()) return "figures.points: is not an array";
  size_t i = 0;
  for (const auto& p : f.at("points")) {
    const std::string at = "figures.points[" + std::to_string(i++) + "]";
    if (!p.is_object()) return at + ": is not an object";
    for (const char* k : {"op", "backend"})
      if (!p.contains(k) || !p.at(k).is_string()) return at + "." + k + ": missing or not a string";
    if (!ops.contains(p.at("op").get<std::string>()))
      return at + ".op: " + p.at("op").dump() + " has no version in figures.operators";
    auto whole = [&](const char* k, uint64_t most) -> std::string {
      if (!p.contains(k) || !p.at(k).is_number_integer() || p.at(k).get<int64_t>() < 1 ||
          p.at(k).get<uint64_t>() > most)
        return at + "." + k + ": is " + (p.contains(k) ? p.at(k).dump() : "missing") + ", not 1 to " +
               std::to_string(most);
      return "";
    };
    if (std::string why = whole("size", kMaxInputSize); !why.empty()) return why;
    if (std::string why = whole("threads", kMaxThreads); !why.empty()) return why;
    if (p.contains("iterations")) continue;  // a fixed-count point: no throughput to compare
    // A timed point completes at least one unit in each repetition.
    for (const char* k : {"mops", "gbps"})
      if (!p.contains(k) || !p.at(k).is_number() || !(p.at(k).get<double>() > 0))
        return at + "." + k + ": is " + (p.contains(k) ? p.at(k).dump() : "missing") +
               ", not a throughput above 0";
  }
  return "";
}

nlohmann::json compare(const nlohmann::json& a, const nlohmann::json& b, const std::string& a_name,
                       const std::string& b_name) {
  for (const auto& [r, name] : {std::pair{&a, &a_name}, std::pair{&b, &b_name}})
    if (std::string why = run_result_violation(*r); !why.empty())
      throw std::invalid_argument(*name + ": " + why);
  const nlohmann::json& fa = a.at("figures");
  const nlohmann::json& fb = b.at("figures");
  const nlohmann::json& va = fa.at("operators");
  const nlohmann::json& vb = fb.at("operators");
  for (const auto& [name, ver] : va.items()) {
    if (vb.contains(name) && vb.at(name) != ver)
      throw std::invalid_argument("operator '" + name + "' is version " + ver.dump() + " in " + a_name + " and " +
                                  vb.at(name).dump() + " in " + b_name + ": they measure different things");
  }
  auto key = [](const nlohmann::json& p) {
    return p.at("op").get<std::string>() + "|" + p.at("backend").get<std::string>() + "|" +
           std::to_string(p.at("size").get<size_t>()) + "|" + std::to_string(p.at("threads").get<unsigned>()) +
           (p.contains("depth") ? "|" + std::to_string(p.at("depth").get<unsigned>()) : "");
  };
  std::map<std::string, const nlohmann::json*> in_a;
  // Fixed-count points (--iterations) have no throughput.
  for (const auto& p : fa.at("points"))
    if (!p.contains("iterations")) in_a[key(p)] = &p;
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, std::vector<double>> per_op;
  for (const auto& p : fb.at("points")) {
    if (p.contains("iterations")) continue;
    auto it = in_a.find(key(p));
    if (it == in_a.end()) continue;
    const auto& pa = *it->second;
    const double ratio = p.at("mops").get<double>() / pa.at("mops").get<double>();
    rows.push_back({{"op", p.at("op")}, {"backend", p.at("backend")}, {"size", p.at("size")},
                    {"threads", p.at("threads")}, {"a_gbps", pa.at("gbps")}, {"b_gbps", p.at("gbps")},
                    {"ratio", ratio}});
    per_op[p.at("op").get<std::string>() + "|" + p.at("backend").get<std::string>()].push_back(ratio);
  }
  nlohmann::json summary = nlohmann::json::array();
  for (auto& [k, v] : per_op) {
    auto bar = k.find('|');
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    summary.push_back({{"op", k.substr(0, bar)}, {"backend", k.substr(bar + 1)}, {"median_ratio", median(v)},
                       {"min_ratio", *lo}, {"max_ratio", *hi}, {"points", v.size()}});
  }
  return {{"rows", rows}, {"summary", summary}};
}

}  // namespace dpukit::bench
