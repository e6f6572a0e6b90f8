// run_proxy: the node proxy's process — configuration plane, control plane
// on the main thread, data-plane workers on the dpu CPUs.
#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "control/control_plane.h"
#include "dataplane/worker.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "dpukit/core/results.h"
#include "dpukit/mesh.h"
#include "tls/engine_crypto.h"

namespace dpukit::mesh {

const char* model_name(ExecutionModel m) { return m == ExecutionModel::kPipelined ? "pipelined" : "rtc"; }

ExecutionModel parse_model(const std::string& name) {
  if (name == "rtc" || name == "run-to-completion") return ExecutionModel::kRunToCompletion;
  if (name == "pipelined") return ExecutionModel::kPipelined;
  throw std::invalid_argument("unknown execution model '" + name + "' (rtc or pipelined)");
}

namespace {

config::Bootstrap load_checked(const std::string& path) {
  return config::load_bootstrap(path);
}

}  // namespace

std::string validate_config(const std::string& config_path) {
  try {
    load_checked(config_path);
    return "";
  } catch (const config::ConfigError& e) {
    return e.what();
  }
}

int run_proxy(const ProxyOptions& o) {
  config::Bootstrap bootstrap;
  try {
    bootstrap = load_checked(o.config_path);
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "dpukit-mesh run: error: %s\n", e.what());
    return 2;
  }
  set_record_crypto_speed(o.dpu_speed);  // the generation whose crypto engine a TLS context may ask for
  Placement placement = Placement::plan("", o.dpu_cpus);
  unsigned workers = o.workers ? o.workers : static_cast<unsigned>(std::max<size_t>(1, placement.dpu.cpus.size()));
  // The whole proxy is the dpu place: the control plane shares the dpu CPUs with the workers.
  std::string warn = pin_current_thread(placement.dpu);
  if (!warn.empty()) log_warn("dpukit-mesh: " + warn);
  uint64_t t0 = now_ns();
  ControlPlane cp(o, placement.dpu.cpus, workers);
  try {
    cp.start(std::move(bootstrap));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpukit-mesh run: error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "dpukit-mesh: serving with %u worker(s), model %s, dpu CPUs %s, dpu speed %s (%g)\n", workers,
               model_name(o.model), placement.dpu.str().c_str(), o.dpu_speed.name.c_str(), o.dpu_speed.factor);
  cp.run();
  if (!o.json_out.empty()) {
    Result r("dpukit-mesh", {"dpukit-mesh", "run", "--config", o.config_path, "--model", model_name(o.model),
                             "--workers", std::to_string(workers), "--dpu-cpus", placement.dpu.str(),
                             "--dpu-speed", o.dpu_speed.name});
    r.set_placement(placement);
    r.set_dpu_speed(o.dpu_speed);
    r.parameters() = {{"model", model_name(o.model)}, {"workers", workers}, {"config", o.config_path}};
    // Record crypto on the engine ran on the proxy's threads but is the hw place's (tls/engine_crypto.h).
    const EngineCryptoTotals engine = engine_crypto_totals();
    CpuAccount cpu;
    cpu.add(Place::kDpu, process_cpu_ns() - std::min(engine.hw_ns, process_cpu_ns()));
    cpu.add(Place::kHw, engine.hw_ns);
    r.set_cpu(cpu);
    r.set_wall_ns(now_ns() - t0);
    nlohmann::json modules = nlohmann::json::object();
    for (int m = 0; m < static_cast<int>(Module::kCount); ++m) {
      auto [ns, calls] = cp.stats().module_total(static_cast<Module>(m));
      modules[module_name(static_cast<Module>(m))] = {{"ns_total", ns}, {"calls", calls}};
    }
    // The loops' dilation: their units' CPU time and the busy time added after them (work x (1/F - 1)), in all
    // and per plane; both are in the CPU figures too (what the slower core would have spent).
    const auto counted = [](const DilationCounters& c) {
      return nlohmann::json{{"work_ns", c.work_ns.load()}, {"dilated_ns", c.dilated_ns.load()}};
    };
    const DilationCounters &data = cp.data_plane_dilation(), &control = cp.control_plane_dilation();
    r.figures() = {{"requests", cp.requests_total()},
                   {"workers_cpu_ns", cp.workers_cpu_ns()},
                   {"modules", modules},
                   {"dilation",
                    {{"work_ns", data.work_ns.load() + control.work_ns.load()},
                     {"dilated_ns", data.dilated_ns.load() + control.dilated_ns.load()},
                     {"data_plane", counted(data)},
                     {"control_plane", counted(control)}}}};
    if (engine_crypto_in_use())
      r.figures()["record_crypto_engine"] = {{"calls", engine.calls}, {"bytes", engine.bytes}, {"hw_ns", engine.hw_ns},
                                             {"excluded_ns", engine.excluded_ns}, {"preempted", engine.preempted},
                                             {"clock_read_ns", engine_clock_read_ns()}};
    r.write(o.json_out);
  }
  return 0;
}

}  // namespace dpukit::mesh
