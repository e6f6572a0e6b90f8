// dpukit-mesh: FlatProxy, the node-level service-mesh proxy (docs/mesh.md).
//   dpukit-mesh run --config envoy.yaml [--model rtc|pipelined] [--workers N] [--dpu-cpus 1] [--watch] [--json OUT]
//                   [--drain-time-s 600] [--drain-strategy immediate] [--dpu-speed host|bluefield2|bluefield3|F]
//                   [--file-flush-interval-msec 10000]
//   dpukit-mesh validate --config envoy.yaml
//   dpukit-mesh echo --listen 127.0.0.1:9001 --name a [--threads N] [--cpus 0]
#include <cstdio>

#include "dpukit/core/cli.h"
#include "dpukit/mesh.h"

namespace dpukit::mesh {
namespace {

const char* kTool = "dpukit-mesh";

int cmd_run(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " run",
              "Runs the node proxy on the dpu CPUs with an Envoy v3 bootstrap until SIGTERM or POST /quitquitquit.");
  p.option("config", "Envoy v3 bootstrap (YAML)", "", true);
  p.option("model", "execution model of the data plane: rtc (run-to-completion) or pipelined", "rtc");
  p.option("workers", "data-plane event loops (0: one per dpu CPU)", "0");
  p.cpus_option("dpu-cpus", "CPUs of the dpu place, e.g. 1 or 1-3 (default: all but the first)");
  p.dpu_speed_option();
  p.flag("watch", "reload the configuration when its file changes (SIGHUP always reloads)");
  p.option("json", "at exit, write a dpukit.result/1 JSON (CPU per place, stats) here");
  p.option("drain-time-s", "seconds the connections of a removed listener may drain before they are closed (Envoy's)",
           "600");
  p.option("drain-strategy", "how draining connections are told: immediate (all at once; Envoy's gradual is not offered)",
           "immediate");
  p.option("file-flush-interval-msec",
           "how often the access logs are written out, in ms (Envoy's; sooner when 64 KiB are buffered)", "10000");
  p.parse(argc, argv, 2);
  if (p.str("drain-strategy") != "immediate")
    p.fail("--drain-strategy: only immediate is offered (every draining connection is told at once), not " +
           p.str("drain-strategy"));
  ProxyOptions o;
  o.config_path = p.str("config");
  try {
    o.model = parse_model(p.str("model"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  o.workers = static_cast<unsigned>(p.u64("workers"));
  o.dpu_cpus = p.str("dpu-cpus");
  o.watch = p.has("watch");
  o.json_out = p.str("json");
  o.dpu_speed = p.dpu_speed();
  uint64_t drain = p.u64("drain-time-s");
  if (drain > 24u * 3600) p.fail("--drain-time-s must be at most 86400");
  o.drain_time_s = static_cast<unsigned>(drain);
  uint64_t flush = p.u64("file-flush-interval-msec");
  if (flush < 1 || flush > 3600u * 1000) p.fail("--file-flush-interval-msec must be 1 to 3600000");
  o.file_flush_interval_ms = static_cast<unsigned>(flush);
  return run_proxy(o);
}

int cmd_validate(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " validate",
              "Checks an Envoy v3 bootstrap as the proxy would read it; names the path of the first fault.");
  p.option("config", "Envoy v3 bootstrap (YAML)", "", true);
  p.parse(argc, argv, 2);
  std::string fault = validate_config(p.str("config"));
  if (!fault.empty()) {
    std::fprintf(stderr, "%s validate: error: %s\n", kTool, fault.c_str());
    return 2;
  }
  std::printf("%s: configuration OK\n", p.str("config").c_str());
  return 0;
}

int cmd_echo(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " echo",
              "The test and benchmark service: answers every HTTP/1.1 request with 200 and its name.");
  p.option("listen", "address: 127.0.0.1:PORT or unix:PATH", "", true);
  p.option("name", "name in the answer and in x-served-by", "echo");
  p.option("threads", "server threads", "1");
  p.cpus_option("cpus", "pin the threads to these CPUs, e.g. 0");
  p.option("body-bytes", "extra response body bytes by default", "0");
  p.option("status", "status of every answer unless x-echo-status says otherwise (200-599)", "200");
  p.parse(argc, argv, 2);
  EchoOptions o;
  o.listen = p.str("listen");
  o.name = p.str("name");
  o.threads = static_cast<unsigned>(p.u64("threads"));
  o.cpus = p.str("cpus");
  o.body_bytes = p.bytes("body-bytes");
  o.status = static_cast<unsigned>(p.u64("status"));
  if (o.status < 200 || o.status > 599) p.fail("--status must be 200-599");
  if (o.threads == 0) p.fail("--threads must be at least 1");
  return run_echo(o);
}

const Subcommand kCommands[] = {
    {"run", cmd_run, "run the node proxy with an Envoy bootstrap"},
    {"validate", cmd_validate, "check an Envoy bootstrap (exit 2 naming the fault's path)"},
    {"echo", cmd_echo, "the test and benchmark HTTP service"},
};

}  // namespace
}  // namespace dpukit::mesh

int main(int argc, char** argv) {
  using namespace dpukit::mesh;
  return dpukit::run_subcommands(kTool, "FlatProxy: a node-level service-mesh proxy on the dpu, Envoy-configured.",
                                 kCommands, argc, argv);
}
