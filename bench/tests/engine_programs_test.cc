// Table 5's programs on the engine backend: Url-Filter and IPS with
// rxp_match on the RXP (IPS's tcp_seg on the submitting dpu thread),
// File-Compress on the deflate engine; checked against ref like every
// backend, byte for byte the lib backend's program, and refused naming the
// generation where the card has no such engine.
#include <gtest/gtest.h>

#include <algorithm>

#include "dpukit/bench.h"
#include "engine_backend.h"
#include "operator.h"

namespace dpukit::bench {
namespace {

bool has_engine_backend(const std::string& name) {
  const auto& b = find_operator(name).info().backends;
  return std::find(b.begin(), b.end(), Backend::kEngine) != b.end();
}

TEST(EnginePrograms, TheProgramsWithOneEngineComponentHaveTheEngineBackend) {
  for (const char* p : {"program_url_filter", "program_ips", "program_file_compress", "program_ipsec"})
    EXPECT_TRUE(has_engine_backend(p)) << p;
  for (const char* p : {"program_l3fwd", "program_file_integrity"}) {
    EXPECT_FALSE(has_engine_backend(p)) << p;
    EXPECT_FALSE(find_operator(p).engine_work()) << p;
    EXPECT_THROW(make_engine_kernels(find_operator(p), 256, 1, "bluefield2", {}), Unavailable) << p;
  }
  EXPECT_EQ(find_operator("program_ips").engine_work()->kind, EngineKind::kRegex);
  EXPECT_EQ(find_operator("program_file_compress").engine_work()->kind, EngineKind::kCompress);
}

TEST(EnginePrograms, OutputsPassTheCheckAgainstRefAndAreTheLibProgramsBytes) {
  for (const char* name : {"program_url_filter", "program_ips", "program_file_compress"}) {
    Operator& op = find_operator(name);
    op.reset_params();
    for (size_t size : {size_t{256}, size_t{1024}}) {
      auto inputs = op.make_inputs(size, 16, 5);
      auto engine = make_engine_kernels(op, size, 2, "bluefield2", {});
      EXPECT_EQ(check_against_ref(op, Backend::kEngine, size, inputs, engine), 16u) << name << " " << size;
      auto lib = op.make_kernels(Backend::kLib, size, 1);
      Bytes want, got;
      for (size_t i = 0; i < 4; ++i) {
        lib[0]->process(inputs[i], want);
        engine[1]->process(inputs[i], got);
        EXPECT_EQ(got, want) << name << " " << size << " input " << i;
      }
    }
  }
}

// The engine runs only the engine's component: IPS's engine sees the
// packets' bytes once per job, as Url-Filter's does; tcp_seg ran on the
// dpu thread (its segments are in the output, checked above).
TEST(EnginePrograms, OnlyTheEngineComponentIsTheEnginesJob) {
  for (const char* name : {"program_url_filter", "program_ips"}) {
    Operator& op = find_operator(name);
    auto inputs = op.make_inputs(512, 8, 1);
    std::vector<std::span<const uint8_t>> views(inputs.begin(), inputs.end());
    auto kernels = make_engine_kernels(op, 512, 2, "bluefield2", {});
    EngineTimingOptions t;
    t.threads = 2;
    t.depth = 8;
    t.factor = 0.45;
    t.warmup_s = 0.01;
    t.phase_s = 0.03;
    t.phases = 2;
    uint64_t sink = 0;
    const std::vector<EnginePhase> phases = time_engine(kernels, views, t, sink);
    ASSERT_EQ(phases.size(), 2u);
    for (const EnginePhase& p : phases) {
      EXPECT_GT(p.jobs, 0u) << name;
      EXPECT_EQ(p.engine.jobs, p.jobs) << name;
      EXPECT_EQ(p.engine.bytes, p.jobs * 512) << name;
    }
    EXPECT_NE(sink, 0u);
    EXPECT_EQ(dynamic_cast<EngineKernel&>(*kernels[0]).shared().engine->spec().name, "RXP");
  }
}

TEST(EnginePrograms, RefusedNamingTheGenerationWithoutTheEngine) {
  for (const char* name : {"program_url_filter", "program_ips", "program_file_compress"}) {
    try {
      make_engine_kernels(find_operator(name), 256, 1, "bluefield3", {});
      ADD_FAILURE() << name << " ran on bluefield3";
    } catch (const Unavailable& e) {
      EXPECT_NE(std::string(e.what()).find("bluefield3"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dpukit::bench
