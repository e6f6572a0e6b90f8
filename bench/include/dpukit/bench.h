// bench: DPUBench (docs/architecture.md §3.4) — the operator set of
// Table 4 (plus SHA-1 and MemCpy) on up to three backends, a runner that
// sweeps input size x threads with warm-up and repetitions, and the
// comparison of two runs (Fig. 12). What a tool or another system may call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/core/dpu_speed.h"

namespace dpukit::bench {

// Which implementation of an operator runs.
enum class Backend {
  kRef,  // portable C++ written here, checked against published vectors
  kLib,  // the field's library (DPDK, ISA-L, OpenSSL, zlib, LZ4, snappy, Hyperscan)
  kDev,  // a DPDK device class (cryptodev, compressdev): soft PMDs here, hardware PMDs on a DPU
  // A BlueField's hardware engine (core's Engine: RXP, deflate, bulk crypto,
  // PKA) driven through its job interface from dpu threads; the library's
  // code computes each job on the hw place, the model says when it is done,
  // and the throughput is on a virtual clock (docs/bench.md, "The engine
  // backend").
  kEngine,
};
const char* backend_name(Backend b);             // "ref", "lib", "dev", "engine"
Backend parse_backend(const std::string& name);  // throws std::invalid_argument

struct OperatorInfo {
  std::string name;      // "aes", "lpm", ... (what --ops takes)
  std::string scenario;  // "network", "storage", "security", "copy" or "program" (Table 5)
  std::string what;      // one line: what one unit of work is
  int version = 1;       // bumped whenever what is measured changes; compare refuses to mix versions
  std::vector<Backend> backends;  // the backends this build implements for it
};
std::vector<OperatorInfo> list_operators();  // Table 4 order, then the composed programs
// An operator's parameters with their defaults ("" when it has none).
std::map<std::string, std::string> operator_params(const std::string& op);

// The limits of a run. One input (a unit of work) is 1 byte to
// kMaxInputSize; the distinct inputs a point cycles through hold at most
// kInputBudget bytes, so large sizes get fewer of them (2 at 64 MiB) rather
// than the operator's usual count (256 would be 16 GiB).
constexpr size_t kMaxInputSize = size_t{64} << 20;
constexpr size_t kInputBudget = size_t{128} << 20;
constexpr unsigned kMaxThreads = 1024;
// Each timing thread holds its own output and kernel state, about one unit
// of work each: threads x size is bounded too (1024 threads at 64 MiB would
// be 64 GiB), so 32 threads at 64 MiB, 1024 at 2 MiB.
constexpr size_t kThreadWorkBudget = size_t{2} << 30;
// The engine backend holds one output per job in flight: threads x depth
// jobs at most (and threads x depth x size within kThreadWorkBudget).
constexpr unsigned kMaxInFlight = 16384;

struct RunOptions {
  std::vector<std::string> ops;  // names; {"all"} = every operator
  std::vector<size_t> sizes = {64, 128, 256, 512, 1024};
  std::vector<unsigned> threads = {1};
  std::vector<Backend> backends = {Backend::kLib};
  std::string place = "host";  // "host" or "dpu": the threads are pinned to that place's CPUs
  // How fast a dpu CPU is (docs/core.md). On place "dpu" each timing thread
  // is time-dilated (core's Dilation): after its bursts it stays busy for
  // (1/F - 1) x their CPU time, so Mops are F of a full-speed core's. The
  // host place never dilates, and neither does fixed-count mode (it counts
  // instructions, not time). The engine backend takes its card from it
  // (core's engine_generation: bluefield2, bluefield3) and divides its
  // threads' CPU time by F on its virtual clock.
  DpuSpeed dpu_speed;
  std::string host_cpus, dpu_cpus;  // as core's Placement takes them ("" = its default)
  // The engine backend: the CPUs of the hw place, whose threads (one per
  // CPU) compute the jobs ("" = core's default, the dpu place's CPUs).
  std::string hw_cpus;
  // The engine backend: jobs each thread keeps in flight, swept like
  // threads. The other backends run one unit at a time, so for them only
  // {1} is accepted.
  std::vector<unsigned> depths = {1};
  double warmup_s = 0.2;     // per point, before the repetitions
  double min_time_s = 0.5;   // each repetition lasts at least this long
  unsigned repetitions = 5;  // the median and the range of these are reported
  uint64_t seed = 1;
  // Operator parameters, "op.key" -> value (e.g. "lpm.routes" -> "1000000");
  // `dpukit-bench list --params` shows them.
  std::map<std::string, std::string> params;
  bool progress = true;      // one line per point on stderr
  // Fixed-count mode (for instruction-counting tools): run exactly this many
  // units of work on one thread instead of timing; 0 = timed mode.
  uint64_t iterations = 0;
  // Fixed-count mode only: count the loop's hardware events (core's
  // PerfCounters) into the point, or say why they are unavailable.
  bool counters = false;
};

// Runs the sweep; every (operator, backend, size) is checked against the ref
// backend before it is timed. Returns the figures in the dpukit.result/1
// shape (figures.points, figures.unavailable, figures.operators). Throws
// CheckFailed on a mismatch and std::invalid_argument on bad options,
// including inputs that cannot fit in kInputBudget, before anything runs.
nlohmann::json run(const RunOptions& options);

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Checks every operator x backend x size against ref (no timing); the
// report lists what passed, what failed and what is unavailable and why.
// Throws std::invalid_argument on sizes the runner would refuse.
struct CheckReport {
  std::vector<std::string> passed, failed, unavailable;
};
// The engine backend is checked on `engine_generation`'s engines.
CheckReport check_all(const std::vector<std::string>& ops, const std::vector<Backend>& backends,
                      const std::vector<size_t>& sizes, uint64_t seed,
                      const std::string& engine_generation = "bluefield2");

// The inputs `run` times for operator `op` at `size` bytes with `seed`
// (the operator's pool for one thread), end to end: so that another tool
// (dpdk-test-compress-perf) can run on the same bytes. Throws
// std::invalid_argument for an unknown operator or a size run refuses.
std::vector<uint8_t> timed_inputs(const std::string& op, size_t size, uint64_t seed);

// The DPDK devices a dev backend can use here (starts EAL), one per line.
std::vector<std::string> devices();

// The first way `result` is not a dpukit-bench run result that compare can
// read, as "<field>: <what>" (e.g. "figures.points[2].mops: is 0, ..."):
// the result schema (core's result_schema_violation), then the tool, the
// operator versions and every point's keys and throughput. "" when it is one.
std::string run_result_violation(const nlohmann::json& result);

// The per-operator ratio table of two runs (Fig. 12): for each point present
// in both, b / a of the median throughput. Throws std::invalid_argument
// naming the run (a_name, b_name) and the field when either is not a run
// result (run_result_violation), and when an operator's version differs
// between the runs.
nlohmann::json compare(const nlohmann::json& a, const nlohmann::json& b, const std::string& a_name = "the first run",
                       const std::string& b_name = "the second run");

}  // namespace dpukit::bench
