// The engine backend: its outputs are the library's and pass the check
// against ref; it refuses what has no engine (naming the generation) and
// runs without a card (host speed, a bare factor); on its virtual clock a
// cheap job body reaches the model's rate at saturation, and below it the
// jobs in flight, the throughput and the latency obey Little's law.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "dpukit/bench.h"
#include "dpukit/core/accounting.h"
#include "engine_backend.h"
#include "operator.h"
#include "tool_run.h"

namespace dpukit::bench {
namespace {

const char* kGen = "bluefield2";

// Every operator with an engine whose engine exists at `gen`, with its work
// there (the PKA's operation, the crypto algorithm) present.
bool engine_has(const Operator& op, const std::string& gen) {
  auto w = op.engine_work();
  if (!w) return false;
  try {
    const EngineSpec& s = engine_spec(gen, w->kind);
    if (w->kind == EngineKind::kBulkCrypto)
      return std::find(s.algorithms.begin(), s.algorithms.end(), w->algorithm) != s.algorithms.end();
    if (w->kind == EngineKind::kPublicKey)
      return std::any_of(s.ops_per_s.begin(), s.ops_per_s.end(), [&](const auto& p) { return p.first == w->operation; });
    return true;
  } catch (const EngineUnavailable&) {
    return false;
  }
}

TEST(EngineBackend, OutputsAreTheLibrarysAndPassTheCheckAgainstRef) {
  const std::vector<std::string> engine_ops = {"rxp_match", "compress", "decompress", "aes", "aes_cbc",
                                               "rsa",       "dsa",      "ecdsa"};
  size_t tried = 0;
  for (const auto& name : engine_ops) {
    Operator& op = find_operator(name);
    op.reset_params();
    ASSERT_TRUE(op.engine_work()) << name;
    const auto& b = op.info().backends;
    EXPECT_NE(std::find(b.begin(), b.end(), Backend::kEngine), b.end()) << name;
    if (!engine_has(op, kGen)) {
      EXPECT_THROW(make_engine_kernels(op, 1024, 1, kGen, {}), Unavailable) << name;
      continue;
    }
    ++tried;
    const size_t size = 1024;
    auto inputs = op.make_inputs(size, 16, 3);
    auto engine = make_engine_kernels(op, size, 2, kGen, {});
    EXPECT_EQ(check_against_ref(op, Backend::kEngine, size, inputs, engine), 16u) << name;
    // Deterministic operators: byte for byte what the lib backend gives
    // (DSA and ECDSA draw a random k, so their signatures only verify).
    if (name == "dsa" || name == "ecdsa") continue;
    auto lib = op.make_kernels(Backend::kLib, size, 1);
    Bytes want, got;
    for (size_t i = 0; i < 4; ++i) {
      lib[0]->process(inputs[i], want);
      engine[1]->process(inputs[i], got);
      EXPECT_EQ(got, want) << name << " input " << i;
    }
  }
  EXPECT_GE(tried, 3u);  // at least RXP or deflate and the PKA are in bluefield2's model
}

TEST(EngineBackend, AnEngineTheGenerationLacksIsUnavailableNamingIt) {
  size_t seen = 0;
  for (const char* gen : {"bluefield2", "bluefield3"})
    for (const auto& info : list_operators()) {
      Operator& op = find_operator(info.name);
      op.reset_params();
      if (!op.engine_work() || engine_has(op, gen)) continue;
      ++seen;
      try {
        make_engine_kernels(op, 1024, 1, gen, {});
        ADD_FAILURE() << info.name << " on " << gen << " was not refused";
      } catch (const Unavailable& e) {
        EXPECT_NE(std::string(e.what()).find(gen), std::string::npos) << e.what();
      }
    }
  // An operator with no engine at all.
  try {
    make_engine_kernels(find_operator("lpm"), 64, 1, kGen, {});
    ADD_FAILURE() << "lpm has no engine";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("Arm cores"), std::string::npos) << e.what();
  }
  RecordProperty("refused", static_cast<int>(seen));
}

RunOptions engine_run() {
  RunOptions o;
  o.ops = {"compress"};
  o.sizes = {1024};
  o.backends = {Backend::kEngine};
  o.place = "dpu";
  o.dpu_speed = DpuSpeed::parse(kGen);
  o.warmup_s = 0.02;
  o.min_time_s = 0.05;
  o.repetitions = 2;
  o.progress = false;
  return o;
}

std::string refusal(const RunOptions& o) {
  try {
    run(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EngineBackend, RefusesARunWithoutACardOrOffTheDpuPlace) {
  RunOptions o = engine_run();
  o.dpu_speed = DpuSpeed::parse("host");
  EXPECT_NE(refusal(o).find("--dpu-speed host names none"), std::string::npos) << refusal(o);
  o.dpu_speed = DpuSpeed::parse("0.5");
  EXPECT_NE(refusal(o).find("BlueField generation"), std::string::npos) << refusal(o);
  o = engine_run();
  o.place = "host";
  EXPECT_NE(refusal(o).find("--place dpu"), std::string::npos) << refusal(o);
  // Depth is the engine's: the lib backend runs one unit at a time.
  o = engine_run();
  o.backends = {Backend::kLib};
  o.depths = {1, 4};
  EXPECT_NE(refusal(o).find("--depth is the engine backend's"), std::string::npos) << refusal(o);
}

// The tool: a run without a card exits 2 naming why; one on bluefield3
// lists rxp_match's engine as unavailable naming the generation.
TEST(EngineBackend, TheToolRefusesHostSpeedAndListsAMissingEngine) {
  auto run_tool = [](const std::string& args, std::string& out) { return run_bench_tool("run " + args, out); };
  std::string out;
  EXPECT_EQ(run_tool("--ops rxp_match --sizes 64 --backend engine --place dpu --dpu-speed host", out), 2);
  EXPECT_NE(out.find("the engine backend needs a BlueField generation"), std::string::npos) << out;
  EXPECT_EQ(run_tool("--ops rxp_match --sizes 64 --backend engine --place dpu --dpu-speed 0.5", out), 2);
  EXPECT_NE(out.find("0.5"), std::string::npos) << out;
  // (The spec gives BlueField-3 no RXP; were it to, this part would not apply.)
  ASSERT_FALSE(engine_has(find_operator("rxp_match"), "bluefield3"));
  const std::string json = testing::TempDir() + "engine_bf3.json";
  EXPECT_EQ(run_tool("--ops rxp_match --sizes 64 --backend engine --place dpu --dpu-speed bluefield3 --json " + json,
                     out),
            0)
      << out;
  std::ifstream in(json);
  const nlohmann::json r = nlohmann::json::parse(in);
  ASSERT_EQ(r["figures"]["unavailable"].size(), 1u) << r.dump();
  EXPECT_NE(r["figures"]["unavailable"][0]["why"].get<std::string>().find("bluefield3"), std::string::npos);
  EXPECT_TRUE(r["figures"]["points"].empty());
  std::remove(json.c_str());
}

TEST(EngineBackend, ARunRecordsModelTimeTheSpecAndTheEnginesFigures) {
  RunOptions o = engine_run();
  o.depths = {1, 4};
  const nlohmann::json f = run(o);
  ASSERT_EQ(f["points"].size(), 2u) << f.dump();
  for (const auto& p : f["points"]) {
    EXPECT_EQ(p["backend"], "engine");
    EXPECT_GT(p["mops"].get<double>(), 0);
    EXPECT_NE(p["basis"].get<std::string>().find("model time"), std::string::npos);
    const auto& e = p["engine"];
    EXPECT_EQ(e["generation"], kGen);
    EXPECT_EQ(e["spec"], engine_spec(kGen, EngineKind::kCompress).to_json());
    EXPECT_GT(e["hw_cpu_ns_per_job"].get<double>(), 0);
    EXPECT_GT(e["dpu_cpu_ns_per_job"].get<double>(), 0);
    EXPECT_GT(e["busy_fraction"].get<double>(), 0);
    EXPECT_LE(e["busy_fraction"].get<double>(), 1.0001);
  }
  EXPECT_EQ(f["points"][0]["depth"], 1);
  EXPECT_EQ(f["points"][1]["depth"], 4);
  EXPECT_GT(f["points"][1]["mops"].get<double>(), f["points"][0]["mops"].get<double>());
}

// A job body that costs almost nothing: the engine's model alone sets the
// rate, which the emulator's CPUs could never reach for real work.
class Touch final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override { out.assign(in.begin(), in.begin() + 1); }
};

class CheapOp final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"cheap", "test", "the first byte", 1, {Backend::kRef, Backend::kLib, Backend::kEngine}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend, size_t, unsigned threads) const override {
    return kernels_of<Touch>(threads);
  }
  std::optional<EngineWork> engine_work() const override { return EngineWork{EngineKind::kCompress, "", ""}; }
};

struct Timed {
  double mops = 0;        // median over the phases, jobs per model microsecond
  double in_flight = 0;   // Little's law's L = throughput x mean latency (median)
  double latency_ns = 0;  // mean modelled latency (median)
  double busy = 0;        // engine busy fraction (median)
  double dpu_busy = 0;    // the share of a thread's virtual time it spent on its own steps (median)
};

Timed time_cheap(size_t size, unsigned threads, unsigned depth) {
  CheapOp op;
  auto kernels = make_engine_kernels(op, size, threads, kGen, {});
  auto inputs = op.make_inputs(size, 64, 1);
  const std::vector<std::span<const uint8_t>> views(inputs.begin(), inputs.end());
  EngineTimingOptions o;
  o.threads = threads;
  o.depth = depth;
  o.factor = DpuSpeed::parse(kGen).factor;
  o.warmup_s = 0.05;
  o.phase_s = 0.2;
  o.phases = 3;
  uint64_t sink = 0;
  auto phases = time_engine(kernels, views, o, sink);
  const double parallel = engine_spec(kGen, EngineKind::kCompress).parallel.value;
  std::vector<double> mops, L, W, busy, dpu;
  for (const auto& p : phases) {
    EXPECT_GT(p.jobs, 0u);
    const double lambda = static_cast<double>(p.jobs) / static_cast<double>(p.virtual_ns);  // per ns
    const double w = static_cast<double>(p.latency_ns) / static_cast<double>(p.jobs);
    mops.push_back(lambda * 1e3);
    L.push_back(lambda * w / threads);
    W.push_back(w);
    busy.push_back(static_cast<double>(p.engine.busy_ns) / (parallel * static_cast<double>(p.virtual_ns)));
    dpu.push_back(static_cast<double>(p.dpu_cpu_ns) / o.factor / threads / static_cast<double>(p.virtual_ns));
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {med(mops), med(L), med(W), med(busy), med(dpu)};
}

TEST(EngineBackend, VirtualClockReachesTheModelsRateAtSaturation) {
  const EngineSpec& s = engine_spec(kGen, EngineKind::kCompress);
  // Jobs large enough that four threads' dpu cost per job stays well under
  // the engine's service time, small enough that the model's rate (1.2 M
  // jobs/s) is beyond what the executors here hand back in real time even
  // for this body (about 0.56 M/s): only a virtual clock gets there (the same
  // loop on the wall clock fails this test).
  const size_t size = 2048;
  const unsigned depth = std::min<unsigned>(static_cast<unsigned>(s.queue_depth.value), 64);
  const double model_mops = s.bytes_per_s.value / static_cast<double>(size) / 1e6;
  const Timed t = time_cheap(size, 4, depth);
  EXPECT_NEAR(t.mops / model_mops, 1.0, 0.05) << t.mops << " Mops against the model's " << model_mops;
  EXPECT_GT(t.busy, 0.95);
}

TEST(EngineBackend, BelowSaturationThroughputFollowsLittlesLaw) {
  const EngineSpec& s = engine_spec(kGen, EngineKind::kCompress);
  const size_t size = 1024;
  EngineJob one;
  one.bytes = size;
  // The model's unloaded latency of one job: its service on one unit plus
  // the fixed latency.
  CheapOp op;
  auto probe = make_engine_kernels(op, size, 1, kGen, {});
  const double unloaded =
      static_cast<double>(dynamic_cast<EngineKernel&>(*probe[0]).shared().engine->service_ns(one)) +
      s.latency_ns.value;
  // Few enough jobs that the engine's units are not all busy.
  const unsigned most = std::max<unsigned>(1, std::min<unsigned>(static_cast<unsigned>(s.parallel.value), 4));
  double first = 0;
  for (unsigned depth = 1; depth <= most; depth *= 2) {
    const Timed t = time_cheap(size, 1, depth);
    // L = lambda W: the thread waits only with all `depth` jobs in flight,
    // so L is at least depth x the share of its time it waits, at most depth.
    EXPECT_LE(t.in_flight, depth * 1.01) << "depth " << depth;
    EXPECT_GE(t.in_flight, depth * (1 - t.dpu_busy) * 0.98) << "depth " << depth << ", dpu busy " << t.dpu_busy;
    // No queueing below saturation: each job takes the unloaded latency.
    EXPECT_NEAR(t.latency_ns / unloaded, 1.0, 0.05) << "depth " << depth;
    // So throughput grows with the jobs in flight: lambda = L / W.
    if (depth == 1)
      first = t.mops;
    else
      EXPECT_NEAR(t.mops / first / depth, 1.0, 0.3) << "depth " << depth;
    RecordProperty("depth" + std::to_string(depth), std::to_string(t.mops) + " Mops, L " + std::to_string(t.in_flight) +
                                                        ", W " + std::to_string(t.latency_ns) + " ns, dpu busy " +
                                                        std::to_string(t.dpu_busy));
  }
}

}  // namespace
}  // namespace dpukit::bench
