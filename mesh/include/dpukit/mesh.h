// mesh: FlatProxy (docs/architecture.md §3.3) — one node-level service-mesh proxy in
// the dpu place instead of two sidecars per request, configured in Envoy's
// v3 bootstrap format. What a tool or another system may call.
#pragma once

#include <cstdint>
#include <string>

#include "dpukit/core/dpu_speed.h"

namespace dpukit::mesh {

// How the data plane's processing modules (parser -> filter -> router/load
// balancer -> deparser) are run.
enum class ExecutionModel {
  kRunToCompletion,  // one event loop per dpu CPU runs every module; connections sharded by SO_REUSEPORT
  kPipelined,        // modules on their own threads joined by SPSC rings (the paper's hardware multi-thread model)
};
const char* model_name(ExecutionModel m);  // "rtc", "pipelined"
ExecutionModel parse_model(const std::string& name);  // throws std::invalid_argument

struct ProxyOptions {
  std::string config_path;  // an Envoy v3 bootstrap (YAML)
  ExecutionModel model = ExecutionModel::kRunToCompletion;
  unsigned workers = 0;     // data-plane event loops; 0: one per dpu CPU
  std::string dpu_cpus;     // CPUs of the dpu place ("" : Placement's default)
  bool watch = false;       // reload when the config file changes (SIGHUP always reloads)
  std::string json_out;     // at exit, a dpukit.result/1 JSON with CPU per place and the stats
  // Envoy's --drain-time-s: how long the connections of a listener that a
  // reload or an xDS update removed may drain before what is left is closed.
  // Every one is told at once (Envoy's --drain-strategy immediate).
  unsigned drain_time_s = 600;
  // Envoy's --file-flush-interval-msec: how often the access logs' buffers
  // are written out (sooner when one holds 64 KiB).
  unsigned file_flush_interval_ms = 10000;
  // How fast a dpu CPU is (--dpu-speed): every loop of the proxy (workers,
  // pipeline stages, the control plane's and the xDS stream's) is dilated to it.
  DpuSpeed dpu_speed;
};

// Reads and checks a bootstrap; "" when it is accepted, otherwise
// "<path>: <reason>" naming where the fault is.
std::string validate_config(const std::string& config_path);

// Runs the proxy until SIGINT/SIGTERM or POST /quitquitquit on the admin
// listener. Returns the exit code (2: the configuration was refused).
int run_proxy(const ProxyOptions& options);

// The test and benchmark service: an HTTP/1.1 server that answers every
// request with 200 and a body naming itself (see docs/mesh.md for the
// request headers that change the answer).
struct EchoOptions {
  std::string listen;       // "127.0.0.1:9001" or "unix:/path/to.sock"
  std::string name = "echo";
  unsigned threads = 1;
  std::string cpus;         // pin the threads here ("" : unpinned)
  uint64_t body_bytes = 0;  // default response body size beyond the name line
  unsigned status = 200;    // default status (e.g. 503: an upstream that always fails, for retry tests)
};
int run_echo(const EchoOptions& options);

}  // namespace dpukit::mesh
