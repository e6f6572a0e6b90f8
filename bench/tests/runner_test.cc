// The runner: the reference check stops a wrong backend, the sweep's
// figures are consistent, options are validated, inputs fit the budget,
// compare refuses to mix operator versions and what is not a run result.
// Also the registry's parameter handling and the composed programs' output
// framing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "dpukit/bench.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/results.h"
#include "operator.h"
#include "packet.h"
#include "tool_run.h"

namespace dpukit::bench {
namespace {

// ref reverses the input; "lib" does too unless told to break input #k.
class Reverse final : public Kernel {
 public:
  explicit Reverse(int break_at) : break_at_(break_at) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.assign(in.rbegin(), in.rend());
    if (calls_++ == break_at_ && !out.empty()) out[out.size() / 2] ^= 1;
  }

 private:
  int break_at_;
  int calls_ = 0;
};

class ReverseOp final : public Operator {
 public:
  explicit ReverseOp(int break_at) : break_at_(break_at) {}
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"reverse", "test", "reverse the bytes", 1, {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    return kernels_of<Reverse>(threads, b == Backend::kRef ? -1 : break_at_);
  }

 private:
  int break_at_;
};

TEST(RunnerCheck, PassesARightBackend) {
  ReverseOp op(-1);
  auto inputs = op.make_inputs(64, 100, 1);
  auto kernels = op.make_kernels(Backend::kLib, 64, 3);
  EXPECT_EQ(check_against_ref(op, Backend::kLib, 64, inputs, kernels), 100u);
}

TEST(RunnerCheck, StopsAWrongBackendNamingOperatorBackendAndInput) {
  ReverseOp op(37);  // the 38th output of the lib kernel is wrong
  auto inputs = op.make_inputs(64, 100, 1);
  auto kernels = op.make_kernels(Backend::kLib, 64, 2);
  try {
    check_against_ref(op, Backend::kLib, 64, inputs, kernels);
    FAIL() << "a wrong output passed the check";
  } catch (const CheckFailed& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("reverse lib differs from ref at size 64"), std::string::npos) << what;
    EXPECT_NE(what.find("output differs at byte 32"), std::string::npos) << what;
  }
}

TEST(RunnerCheck, ChecksEveryThreadsKernel) {
  // Only the second kernel is wrong, on its first call: the check must still see it.
  ReverseOp good(-1);
  auto inputs = good.make_inputs(16, 8, 1);
  std::vector<std::unique_ptr<Kernel>> kernels;
  kernels.push_back(std::make_unique<Reverse>(-1));
  kernels.push_back(std::make_unique<Reverse>(0));
  EXPECT_THROW(check_against_ref(good, Backend::kLib, 16, inputs, kernels), CheckFailed);
}

RunOptions short_run(std::vector<std::string> ops) {
  RunOptions o;
  o.ops = std::move(ops);
  o.sizes = {64, 1024};
  o.threads = {1, 2};
  o.backends = {Backend::kRef, Backend::kLib};
  o.warmup_s = 0.01;
  o.min_time_s = 0.02;
  o.repetitions = 3;
  o.progress = false;
  return o;
}

TEST(RunnerSweep, EveryPointHasConsistentFigures) {
  nlohmann::json f = run(short_run({"memcpy"}));
  ASSERT_EQ(f.at("points").size(), 2u * 2u * 2u);
  for (const auto& p : f.at("points")) {
    double mops = p.at("mops"), gbps = p.at("gbps");
    EXPECT_GT(mops, 0) << p;
    EXPECT_LE(p.at("mops_min").get<double>(), mops);
    EXPECT_GE(p.at("mops_max").get<double>(), mops);
    EXPECT_EQ(p.at("reps_mops").size(), 3u);
    // Gbps is Mops times the bits of one unit of work.
    EXPECT_NEAR(gbps, mops * 8.0 * p.at("size").get<double>() / 1e3, gbps * 1e-9);
    if (p.at("backend") == "lib") {
      EXPECT_GT(p.at("checked_inputs").get<int>(), 0);
    }
  }
  EXPECT_EQ(f.at("operators").at("memcpy"), 1);
}

// An operator whose inputs are packed into one array (lpm input=address) is
// checked and timed like any other; Gbps counts its work bytes (4 a lookup).
TEST(RunnerSweep, PackedInputsAreTimed) {
  RunOptions o = short_run({"lpm"});
  o.threads = {1, 2};
  o.params = {{"lpm.routes", "2000"}, {"lpm.inputs", "4096"}, {"lpm.input", "address"}};
  nlohmann::json f = run(o);
  ASSERT_EQ(f.at("points").size(), o.backends.size() * o.sizes.size() * 2);
  for (const auto& p : f.at("points")) {
    const double mops = p.at("mops").get<double>();
    EXPECT_GT(mops, 0);
    EXPECT_NEAR(p.at("gbps").get<double>(), mops * 8.0 * 4 / 1e3, mops * 1e-9);
  }
  EXPECT_EQ(f.at("operator_parameters").at("lpm").at("input"), "address");
  find_operator("lpm").reset_params();  // the run leaves them set
}

TEST(RunnerSweep, UnavailableBackendsAreReportedNotTimed) {
  RunOptions o = short_run({"memcpy"});
  o.backends = {Backend::kDev};
  o.threads = {1};
  nlohmann::json f = run(o);
  EXPECT_TRUE(f.at("points").empty());
  ASSERT_EQ(f.at("unavailable").size(), 2u);
  EXPECT_NE(f.at("unavailable")[0].at("why").get<std::string>().find("no DPDK copy device"), std::string::npos);
}

TEST(RunnerOptions, BadOptionsAreRefused) {
  RunOptions o = short_run({"memcpy"});
  o.sizes = {0};
  EXPECT_THROW(run(o), std::invalid_argument);
  o = short_run({"memcpy"});
  o.threads = {0};
  EXPECT_THROW(run(o), std::invalid_argument);
  o = short_run({"no_such_operator"});
  EXPECT_THROW(run(o), std::invalid_argument);
  o = short_run({"memcpy"});
  o.place = "nic";
  EXPECT_THROW(run(o), std::invalid_argument);
  o = short_run({"memcpy"});
  o.params["memcpy.nonsense"] = "1";
  EXPECT_THROW(run(o), std::invalid_argument);
  o = short_run({"memcpy"});
  o.params["lpm.routes"] = "1";  // an operator that is not in this run
  EXPECT_THROW(run(o), std::invalid_argument);
}

// A dpukit-bench run result as the tool writes it, with these figures.
nlohmann::json run_result(nlohmann::json points, nlohmann::json operators) {
  Result r("dpukit-bench run", {"dpukit-bench", "run"});
  r.figures() = {{"points", std::move(points)}, {"operators", std::move(operators)}};
  return r.to_json();
}

nlohmann::json point(const char* op, double mops) {
  return {{"op", op}, {"backend", "lib"}, {"size", 64}, {"threads", 1}, {"mops", mops}, {"gbps", mops * 0.512}};
}

TEST(RunnerCompare, RatiosOfMatchingPoints) {
  nlohmann::json a = run_result({point("aes", 2.0), point("crc", 10.0)}, {{"aes", 1}, {"crc", 1}});
  nlohmann::json b = run_result({point("aes", 1.0), point("md5", 3.0)}, {{"aes", 1}, {"md5", 1}});
  nlohmann::json t = compare(a, b);
  ASSERT_EQ(t.at("rows").size(), 1u);  // only aes is in both
  EXPECT_DOUBLE_EQ(t.at("rows")[0].at("ratio").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(t.at("summary")[0].at("median_ratio").get<double>(), 0.5);
}

TEST(RunnerCompare, RefusesDifferentOperatorVersions) {
  nlohmann::json a = run_result(nlohmann::json::array(), {{"aes", 1}});
  nlohmann::json b = run_result(nlohmann::json::array(), {{"aes", 2}});
  EXPECT_THROW(compare(a, b), std::invalid_argument);
}

// Each way a file can fail to be a run result is refused naming the file
// and the field, before anything is read from it.
TEST(RunnerCompare, RefusesWhatIsNotARunResultNamingTheFileAndTheField) {
  const nlohmann::json good = run_result({point("aes", 2.0)}, {{"aes", 1}});
  auto refusal = [&](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json b = good;
    edit(b);
    try {
      compare(good, b, "a.json", "b.json");
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refusal([](auto&) {}), "accepted");
  EXPECT_EQ(refusal([](auto& j) { j["figures"].erase("operators"); }).rfind("b.json: figures.operators: missing", 0),
            0u);
  // The schema's own refusals carry valijson's words after the field and the value.
  EXPECT_EQ(refusal([](auto& j) { j["schema"] = "other/2"; }).rfind(R"(b.json: schema: is the string "other/2" ()", 0), 0u);
  EXPECT_EQ(refusal([](auto& j) { j = j["figures"]; }), "b.json: backend: missing");  // the first, in sorted order
  EXPECT_EQ(refusal([](auto& j) { j["tool"] = "dpukit-measure run"; }),
            R"(b.json: tool: is "dpukit-measure run", not "dpukit-bench run")");
  EXPECT_EQ(refusal([](auto& j) { j["figures"]["points"][0]["mops"] = "fast"; }),
            R"(b.json: figures.points[0].mops: is "fast", not a throughput above 0)");
  EXPECT_EQ(refusal([](auto& j) { j["figures"]["points"][0]["mops"] = 0; }),
            "b.json: figures.points[0].mops: is 0, not a throughput above 0");
  EXPECT_EQ(refusal([](auto& j) { j["figures"]["points"][0]["size"] = -64; }),
            "b.json: figures.points[0].size: is -64, not 1 to 67108864");
  EXPECT_EQ(refusal([](auto& j) { j["figures"]["points"][0]["op"] = "md5"; }),
            R"(b.json: figures.points[0].op: "md5" has no version in figures.operators)");
  EXPECT_EQ(refusal([](auto& j) { j["figures"]["operators"]["aes"] = "1"; }),
            R"(b.json: figures.operators.aes: is "1", not a version (an integer from 1))");
  // A fixed-count point (--iterations) has no throughput and is not compared.
  nlohmann::json counted = run_result({{{"op", "aes"}, {"backend", "lib"}, {"size", 64}, {"threads", 1},
                                        {"iterations", 100}}},
                                      {{"aes", 1}});
  EXPECT_EQ(compare(good, counted).at("rows").size(), 0u);
}

TEST(RunnerRegistry, ParametersHaveDefaultsAndRefuseUnknownKeys) {
  Operator& op = find_operator("memcpy");
  EXPECT_THROW(op.set_param("size", "1"), std::invalid_argument);
  EXPECT_THROW(find_operator("nonexistent"), std::invalid_argument);
  for (const auto& info : list_operators()) {
    Operator& o = find_operator(info.name);
    for (const auto& [k, v] : o.default_params()) EXPECT_EQ(o.param(k), v) << info.name << "." << k;
  }
}

// Every operator's inputs fit in the budget at every size, large sizes
// getting fewer of them; sizes beyond the largest and asked-for inputs that
// cannot fit are refused.
TEST(RunnerInputs, EveryOperatorsInputsFitTheBudget) {
  for (const auto& info : list_operators()) {
    Operator& op = find_operator(info.name);
    op.reset_params();
    for (size_t size : {size_t{1}, size_t{64}, size_t{1024}, size_t{1} << 20, kMaxInputSize}) {
      const size_t n = op.inputs_within_budget(size);
      EXPECT_GE(n, 1u) << info.name << " " << size;
      EXPECT_LE(n * size, kInputBudget) << info.name << " " << size;
    }
    EXPECT_EQ(op.inputs_within_budget(kMaxInputSize), 2u) << info.name;
    EXPECT_THROW(op.inputs_within_budget(0), std::invalid_argument);
    EXPECT_THROW(op.inputs_within_budget(kMaxInputSize + 1), std::invalid_argument);
  }
  Operator& lpm = find_operator("lpm");
  lpm.set_param("inputs", "4096");
  EXPECT_EQ(lpm.inputs_within_budget(1024), 4096u);
  EXPECT_THROW(lpm.inputs_within_budget(size_t{1} << 20), std::invalid_argument);  // 4 GiB
  lpm.reset_params();
  EXPECT_THROW(check_all({"memcpy"}, {Backend::kLib}, {kMaxInputSize + 1}, 1), std::invalid_argument);
}

TEST(RunnerInputs, TextAndRandomAreReproducible) {
  Bytes a(300), b(300), c(300);
  fill_text(a, 5);
  fill_text(b, 5);
  fill_text(c, 6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  fill_random(a, 5);
  fill_random(b, 5);
  EXPECT_EQ(a, b);
}

TEST(RunnerPackets, HeadersAndChecksumsAreValid) {
  for (uint8_t proto : {kProtoTcp, kProtoUdp}) {
    for (size_t size : {64, 65, 1024, 1514}) {
      Bytes p = make_ipv4_packet(size, size, proto);
      ASSERT_EQ(p.size(), size);
      std::span<const uint8_t> ip(p.data() + kEthLen, p.size() - kEthLen);
      EXPECT_EQ(load_be16(&ip[2]), size - kEthLen);
      EXPECT_EQ(inet_checksum(ip.subspan(0, kIpv4Len)), 0) << "IPv4 header checksum";
      // Summing a segment with its checksum in place gives all ones.
      EXPECT_EQ(ones_complement_sum(ip.subspan(kIpv4Len), [&] {
                  uint8_t pseudo[12];
                  std::memcpy(pseudo, &ip[12], 8);
                  pseudo[8] = 0;
                  pseudo[9] = proto;
                  store_be16(&pseudo[10], static_cast<uint16_t>(size - kEthLen - kIpv4Len));
                  return ones_complement_sum(pseudo);
                }()),
                0xFFFFu);
    }
  }
  EXPECT_THROW(make_ipv4_packet(53, 1, kProtoTcp), std::invalid_argument);
  EXPECT_NO_THROW(make_ipv4_packet(42, 1, kProtoUdp));
}

TEST(RunnerPackets, Rfc1071Example) {
  // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 (one's complement, folded).
  const uint8_t bytes[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(ones_complement_sum(bytes), 0xddf2u);
  EXPECT_EQ(inet_checksum(bytes), static_cast<uint16_t>(~0xddf2));
}

TEST(RunnerTool, CheckFailureExitsNonZeroAndNamesTheOperator) {
  // The tool refuses an unknown operator with exit 2 and a message.
  std::string out;
  EXPECT_EQ(run_bench_tool("run --ops nope --sizes 64", out), 2);
  EXPECT_NE(out.find("unknown operator 'nope'"), std::string::npos) << out;
}

// ------------------------------------------------------------ the dpu's speed

// A CPU-bound point (ref SHA-256, 256 B, one thread, no library or check in
// the loop) on `place` at `speed`; both places pinned to the same CPU so
// that only the dilation differs between runs.
nlohmann::json cpu_bound_point(const std::string& place, const char* speed) {
  RunOptions o;
  o.ops = {"sha256"};
  o.sizes = {256};
  o.threads = {1};
  o.backends = {Backend::kRef};
  o.place = place;
  o.host_cpus = o.dpu_cpus = std::to_string(available_cpus().cpus.back());
  o.dpu_speed = DpuSpeed::parse(speed);
  o.warmup_s = 0.02;
  o.min_time_s = 0.1;
  o.repetitions = 3;
  o.progress = false;
  nlohmann::json f = run(o);
  EXPECT_EQ(f.at("dpu_speed").at("factor").get<double>(), o.dpu_speed.factor);
  return f;
}

// Units per second of the timing thread's own CPU time (the dilation
// included): what the place does per second when it has its CPU, which other
// load on a shared machine does not lower in one run of a pair and not the
// other (wall-clock Mops did, to 0.64 of the pair's other run at load 12).
double mops_of(const nlohmann::json& f) { return f.at("points").at(0).at("mops_per_cpu_second").get<double>(); }

// Three interleaved pairs on `place`: at host speed, then at `speed`; each
// pair is given to `check`; returns the median ratio slow / full and writes
// the three ratios to `text`.
double paired_ratio(const std::string& place, const char* speed, std::string& text,
                    const std::function<void(const nlohmann::json&, const nlohmann::json&)>& check) {
  std::vector<double> ratios;
  for (int round = 0; round < 3; ++round) {
    const nlohmann::json full = cpu_bound_point(place, "host");
    const nlohmann::json slow = cpu_bound_point(place, speed);
    check(full, slow);
    ratios.push_back(mops_of(slow) / mops_of(full));
    text += std::to_string(ratios.back()) + " ";
  }
  std::sort(ratios.begin(), ratios.end());
  return ratios[1];
}

// The dpu place at F = 0.5 does about half the work per second of the dpu
// place at host speed: the median of paired, interleaved rounds, with bounds
// loose enough for a shared machine (core's tests hold the 5 %); the
// accounting of the dilation is exact, so it is checked closely.
TEST(RunnerDpuSpeed, TheDpuPlaceIsDilatedToItsSpeed) {
  std::string ratios;
  const double r = paired_ratio("dpu", "0.5", ratios, [](const nlohmann::json& full, const nlohmann::json& half) {
    EXPECT_FALSE(full.at("dilated").get<bool>());
    EXPECT_FALSE(full.at("points").at(0).contains("dilation"));
    ASSERT_TRUE(half.at("dilated").get<bool>());
    const auto& d = half.at("points").at(0).at("dilation");
    const double work = d.at("work_cpu_ns").get<double>(), added = d.at("dilated_cpu_ns").get<double>();
    EXPECT_GT(work, 0);
    // (1/F - 1) x the work: the debt is paid in full, then a clock read's worth more.
    EXPECT_GE(added, 0.99 * work) << d;
    EXPECT_LE(added, 1.25 * work) << d;
  });
  EXPECT_GT(r, 0.35) << "ratios " << ratios;
  EXPECT_LT(r, 0.7) << "ratios " << ratios;
}

// The host place never dilates, whatever the dpu's speed.
TEST(RunnerDpuSpeed, TheHostPlaceIgnoresTheDpuSpeed) {
  std::string ratios;
  const double r = paired_ratio("host", "0.5", ratios, [](const nlohmann::json&, const nlohmann::json& slow) {
    EXPECT_FALSE(slow.at("dilated").get<bool>());
    EXPECT_FALSE(slow.at("points").at(0).contains("dilation"));
  });
  EXPECT_GT(r, 0.75) << "ratios " << ratios;
}

// Fixed-count mode counts instructions: a spinning dilation would add its own.
TEST(RunnerDpuSpeed, FixedCountModeIsNotDilated) {
  RunOptions o = short_run({"memcpy"});
  o.threads = {1};
  o.backends = {Backend::kLib};
  o.sizes = {64};
  o.place = "dpu";
  o.dpu_speed = DpuSpeed::parse("0.25");
  o.iterations = 1000;
  const nlohmann::json f = run(o);
  EXPECT_FALSE(f.at("dilated").get<bool>());
}

// The tool takes --dpu-speed, records it in the result, and refuses a bad one.
TEST(RunnerTool, DpuSpeedIsTakenAndRecorded) {
  const std::string json = ::testing::TempDir() + "dpukit-bench-dpu-speed.json";
  const std::string cmd = std::string(DPUKIT_BENCH_TOOL) +
                          " run --ops crc --backend ref --sizes 64 --place dpu --dpu-speed bluefield2 --warmup 0"
                          " --min-time 0.01 --repetitions 1 --quiet --json " + json + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json);
  const nlohmann::json r = nlohmann::json::parse(in);
  std::remove(json.c_str());
  EXPECT_EQ(r.at("placement").at("dpu_speed").at("name"), "bluefield2");
  EXPECT_EQ(r.at("figures").at("dpu_speed").at("name"), "bluefield2");
  EXPECT_TRUE(r.at("figures").at("dilated").get<bool>());
  EXPECT_TRUE(r.at("figures").at("points").at(0).contains("dilation"));
  const std::string bad = std::string(DPUKIT_BENCH_TOOL) + " run --ops crc --sizes 64 --dpu-speed 2 >/dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(bad.c_str())), 2);
}

}  // namespace
}  // namespace dpukit::bench
