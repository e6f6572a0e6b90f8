// dpukit-bench: DPUBench's operators, runner and comparison (docs/bench.md).
//   dpukit-bench list
//   dpukit-bench check [--ops all] [--backend ref,lib,dev] [--sizes 64,1024]
//   dpukit-bench run --ops aes,lpm|all --sizes 64,...,1024 --threads 1,2 --backend lib --place host --json OUT
//   dpukit-bench run --ops rxp_match --backend engine --place dpu --dpu-speed bluefield2 --threads 1,8 --depth 1,64
//   dpukit-bench compare A.json B.json [--json OUT]
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "dpukit/bench.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/results.h"

namespace dpukit::bench {

int cmd_e2e_server(int argc, char** argv);  // tools/e2e.cc
int cmd_e2e_client(int argc, char** argv);

namespace {

const char* kTool = "dpukit-bench";

// The comma-separated items of --name; an empty item ("1,,2", a trailing
// comma) is a typo to refuse, not a thing to skip.
std::vector<std::string> items(const ArgParser& p, const std::string& name) {
  const std::string text = p.str(name);
  std::vector<std::string> v;
  if (text.empty()) return v;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    v.push_back(text.substr(at, comma - at));
    if (v.back().empty()) p.fail("--" + name + ": empty item in '" + text + "'");
    if (comma == std::string::npos) return v;
    at = comma + 1;
  }
}

std::vector<size_t> sizes(const ArgParser& p) {
  std::vector<size_t> v;
  for (const auto& w : items(p, "sizes")) {
    try {
      v.push_back(parse_bytes(w));
    } catch (const std::exception& e) {
      p.fail("--sizes: " + std::string(e.what()));
    }
  }
  if (v.empty()) p.fail("--sizes is empty");
  return v;
}

// A whole number from `least` to `most`, in decimal digits only: no sign, no
// suffix, and nothing that wraps when it is narrowed (4294967297 is not 1).
uint64_t whole(const ArgParser& p, const std::string& name, const std::string& text, uint64_t least,
               uint64_t most) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 19;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) v = std::stoull(text);
  if (!ok || v < least || v > most)
    p.fail("--" + name + ": '" + text + "' is not a whole number from " + std::to_string(least) + " to " +
           std::to_string(most));
  return v;
}

std::vector<unsigned> thread_counts(const ArgParser& p) {
  std::vector<unsigned> v;
  for (const auto& w : items(p, "threads")) v.push_back(static_cast<unsigned>(whole(p, "threads", w, 1, kMaxThreads)));
  if (v.empty()) p.fail("--threads is empty");
  return v;
}

std::vector<Backend> backends(const ArgParser& p) {
  std::vector<Backend> v;
  try {
    for (const auto& w : items(p, "backend")) v.push_back(parse_backend(w));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  if (v.empty()) p.fail("--backend is empty");
  return v;
}

int cmd_list(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " list", "Lists the operators, their scenario and their backends.");
  p.flag("params", "also each operator's parameters and their defaults");
  p.parse(argc, argv, 2);
  for (const auto& op : list_operators()) {
    std::string b;
    for (Backend x : op.backends) b += (b.empty() ? "" : ",") + std::string(backend_name(x));
    std::printf("%-18s %-9s v%-2d %-12s %s\n", op.name.c_str(), op.scenario.c_str(), op.version, b.c_str(),
                op.what.c_str());
    if (p.has("params"))
      for (const auto& [k, v] : operator_params(op.name)) std::printf("    --param %s.%s=%s\n", op.name.c_str(), k.c_str(), v.c_str());
  }
  return 0;
}

int cmd_devices(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " devices", "Starts DPDK's EAL and lists the devices the dev backend can use.");
  p.parse(argc, argv, 2);
  for (const auto& line : devices()) std::printf("%s\n", line.c_str());
  return 0;
}

int cmd_check(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " check",
              "Checks every backend's output against ref on the same inputs, without timing.");
  p.option("ops", "operators (comma-separated), all, or programs", "all");
  p.option("backend", "backends to check", "lib,dev");
  p.option("sizes", "input sizes in bytes", "64,1024");
  p.option("seed", "input seed", "1");
  p.parse(argc, argv, 2);
  CheckReport r;
  try {
    r = check_all(items(p, "ops"), backends(p), sizes(p), p.u64("seed"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  for (const auto& s : r.passed) std::printf("ok           %s\n", s.c_str());
  for (const auto& s : r.unavailable) std::printf("unavailable  %s\n", s.c_str());
  for (const auto& s : r.failed) std::printf("FAILED       %s\n", s.c_str());
  std::printf("%zu passed, %zu failed, %zu unavailable\n", r.passed.size(), r.failed.size(), r.unavailable.size());
  return r.failed.empty() ? 0 : 1;
}

int cmd_inputs(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " inputs",
              "Writes the inputs `run` times for one operator and size, end to end, to a file (for another tool to "
              "run on the same bytes).");
  p.option("op", "operator", "compress");
  p.option("size", "input size in bytes", "1024");
  p.option("seed", "input seed (run's default)", "1");
  p.option("out", "file to write", "");
  p.parse(argc, argv, 2);
  if (p.str("out").empty()) p.fail("--out is required");
  std::vector<uint8_t> bytes;
  try {
    bytes = timed_inputs(p.str("op"), parse_bytes(p.str("size")), p.u64("seed"));
  } catch (const std::exception& e) {  // an unknown operator, a size run refuses
    p.fail(e.what());
  }
  std::ofstream out(p.str("out"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) p.fail("cannot write " + p.str("out"));
  return 0;
}

int cmd_run(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " run",
              "Checks each backend against ref, then times the operators over sizes x threads.");
  p.option("ops", "operators (comma-separated), all, or programs", "all");
  p.option("sizes", "input sizes in bytes", "64,128,256,512,1024");
  p.option("threads", "thread counts", "1");
  p.option("backend", "ref, lib, dev, engine (comma-separated)", "lib");
  p.option("depth", "engine backend: jobs in flight per thread (comma-separated sweep)", "1");
  p.option("place", "host or dpu: pin the threads to that place's CPUs", "host");
  p.cpus_option("host-cpus", "CPUs of the host place (default: the first)");
  p.cpus_option("dpu-cpus", "CPUs of the dpu place (default: all but the first)");
  p.cpus_option("hw-cpus", "engine backend: CPUs of the hw place, one executor each (default: the dpu place's)");
  p.dpu_speed_option();  // --place dpu only: the timing threads are dilated to it; the engine backend's card
  p.option("warmup", "warm-up seconds per point", "0.2");
  p.option("min-time", "seconds per repetition", "0.5");
  p.option("repetitions", "timed repetitions per point (median and range reported)", "5");
  p.option("iterations", "run exactly N units of work on one thread instead of timing (for instruction counters)",
           "0");
  p.flag("counters", "with --iterations: hardware counters (perf_event_open) around the loop, or why unavailable");
  p.option("seed", "input seed", "1");
  p.option("param", "operator parameters, op.key=value[,op.key=value...] (list --params shows them)");
  p.flag("quiet", "no progress lines");
  p.option("json", "write the result (dpukit.result/1) here");
  p.parse(argc, argv, 2);
  RunOptions o;
  o.ops = items(p, "ops");
  o.sizes = sizes(p);
  o.threads = thread_counts(p);
  o.backends = backends(p);
  o.place = p.str("place");
  o.host_cpus = p.str("host-cpus");
  o.dpu_cpus = p.str("dpu-cpus");
  o.hw_cpus = p.str("hw-cpus");
  o.depths.clear();
  for (const auto& w : items(p, "depth")) o.depths.push_back(static_cast<unsigned>(whole(p, "depth", w, 1, kMaxInFlight)));
  if (o.depths.empty()) p.fail("--depth is empty");
  o.dpu_speed = p.dpu_speed();
  o.warmup_s = p.number("warmup");
  o.min_time_s = p.number("min-time");
  o.repetitions = static_cast<unsigned>(whole(p, "repetitions", p.str("repetitions"), 0, 1000000));
  o.iterations = p.u64("iterations");
  o.counters = p.has("counters");
  if (o.counters && o.iterations == 0) p.fail("--counters needs --iterations");
  o.seed = p.u64("seed");
  o.progress = !p.has("quiet");
  for (const auto& kv : items(p, "param")) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) p.fail("--param: '" + kv + "' is not op.key=value");
    o.params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (o.warmup_s < 0) p.fail("--warmup must not be negative");
  Result out(std::string(kTool) + " run", argc, argv);
  const uint64_t started = now_ns();
  try {
    out.figures() = run(o);
  } catch (const CheckFailed& e) {
    std::fprintf(stderr, "%s run: check against ref failed: %s\n", kTool, e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  out.parameters() = {{"ops", o.ops}, {"sizes", o.sizes}, {"threads", o.threads}, {"depth", o.depths},
                      {"backend", p.str("backend")},
                      {"place", o.place}, {"warmup_s", o.warmup_s}, {"min_time_s", o.min_time_s},
                      {"repetitions", o.repetitions}, {"iterations", o.iterations}, {"seed", o.seed},
                      {"params", o.params}, {"counters", o.counters}, {"dpu_speed", o.dpu_speed.to_json()}};
  // The process's CPU time, all of it spent in the place the threads ran in.
  CpuAccount cpu;
  cpu.add(o.place == "dpu" ? Place::kDpu : Place::kHost, process_cpu_ns());
  out.set_cpu(cpu);
  out.set_wall_ns(now_ns() - started);
  out.set_placement(Placement::plan(o.host_cpus, o.dpu_cpus, o.hw_cpus));
  out.set_dpu_speed(o.dpu_speed);
  if (p.has("json")) {
    try {
      out.write(p.str("json"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s run: %s\n", kTool, e.what());
      return 1;
    }
  }
  return 0;
}

nlohmann::json read_json(const ArgParser& p, const std::string& path) {
  std::ifstream in(path);
  if (!in) p.fail("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    p.fail(path + " is not JSON: " + e.what());
  }
}

int cmd_compare(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " compare",
              "The per-operator throughput ratio B / A of two runs (say a DPU's Arm cores against an x86 host).");
  p.option("a", "the first run's JSON (the denominator)", "", true);
  p.option("b", "the second run's JSON", "", true);
  p.option("json", "write the ratio table here");
  // Positional form: compare A.json B.json.
  std::vector<char*> args(argv, argv + argc);
  std::vector<std::string> keep;
  if (argc >= 4 && argv[2][0] != '-' && argv[3][0] != '-') {
    keep = {"--a", argv[2], "--b", argv[3]};
    args.erase(args.begin() + 2, args.begin() + 4);
    args.insert(args.begin() + 2, {keep[0].data(), keep[1].data(), keep[2].data(), keep[3].data()});
  }
  p.parse(static_cast<int>(args.size()), args.data(), 2);
  nlohmann::json table;
  try {
    table = compare(read_json(p, p.str("a")), read_json(p, p.str("b")), p.str("a"), p.str("b"));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s compare: refused: %s\n", kTool, e.what());
    return 2;
  }
  std::printf("%-16s %-4s %6s %4s %12s %12s %8s\n", "operator", "back", "size", "thr", "A Gbps", "B Gbps", "B/A");
  for (const auto& r : table.at("rows"))
    std::printf("%-16s %-4s %6zu %4u %12.3f %12.3f %8.3f\n", r.at("op").get<std::string>().c_str(),
                r.at("backend").get<std::string>().c_str(), r.at("size").get<size_t>(), r.at("threads").get<unsigned>(),
                r.at("a_gbps").get<double>(), r.at("b_gbps").get<double>(), r.at("ratio").get<double>());
  std::printf("\nper operator (median of its points): ");
  for (const auto& s : table.at("summary"))
    std::printf("%s/%s %.3f  ", s.at("op").get<std::string>().c_str(), s.at("backend").get<std::string>().c_str(),
                s.at("median_ratio").get<double>());
  std::printf("\n");
  if (p.has("json")) {
    std::ofstream out(p.str("json"));
    out << table.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "%s compare: cannot write %s\n", kTool, p.str("json").c_str());
      return 1;
    }
  }
  return table.at("rows").empty() ? 3 : 0;
}

const Subcommand kCommands[] = {
    {"list", cmd_list, "the operators and their backends"},
    {"devices", cmd_devices, "the DPDK devices the dev backend can use here"},
    {"check", cmd_check, "check every backend against ref (no timing)"},
    {"run", cmd_run, "time operators over sizes x threads x backends"},
    {"inputs", cmd_inputs, "write one operator's timed inputs to a file"},
    {"compare", cmd_compare, "ratio table of two runs (Fig. 12)"},
    {"e2e-server", cmd_e2e_server, "end-to-end server: flow table or application recognition (§5)"},
    {"e2e-client", cmd_e2e_client, "end-to-end client: UDP load, replies, loss and latency (§5)"},
};

}  // namespace
}  // namespace dpukit::bench

int main(int argc, char** argv) {
  return dpukit::run_subcommands(dpukit::bench::kTool, "DPUBench: operators, runner, comparison", dpukit::bench::kCommands,
                                 argc, argv);
}
