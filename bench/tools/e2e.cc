// dpukit-bench e2e-server / e2e-client: DPUBench's end-to-end programs
// (DPUBench §5, docs/architecture.md §3.4) of dpukit/bench_e2e.h.
//   dpukit-bench e2e-server --program flowtable --table sw|hw --place host|dpu --port 9000 --json S.json
//   dpukit-bench e2e-client --program flowtable --server 10.199.0.2 --size 64 --interval 5 --duration 2 --json C.json
//   dpukit-bench e2e-server --program apprecog --place dpu --dpu-speed bluefield2 --engine regex,compress
// The server runs until SIGTERM / SIGINT (or --duration), then writes its
// result; it prints "listening on ADDR:PORT" once it accepts datagrams.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>

#include "dpukit/bench_e2e.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/results.h"

namespace dpukit::bench {
namespace {

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked receive returns at once
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

uint16_t port_of(const ArgParser& p) {
  const uint64_t v = p.u64("port");
  if (v > 65535) p.fail("--port must be 0 to 65535");
  return static_cast<uint16_t>(v);
}

e2e::Program program_of(const ArgParser& p) {
  try {
    return e2e::parse_program(p.str("program"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
}

int write_result(const Result& out, const ArgParser& p, const char* cmd) {
  if (!p.has("json")) return 0;
  try {
    out.write(p.str("json"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpukit-bench %s: %s\n", cmd, e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int cmd_e2e_server(int argc, char** argv) {
  ArgParser p("dpukit-bench e2e-server",
              "The end-to-end server (DPUBench §5): receives UDP datagrams and counts flows (flowtable) or recognizes, "
              "acts and replies (apprecog), with its work on the host or the dpu place; runs until SIGTERM/SIGINT or "
              "--duration.");
  p.option("program", "flowtable or apprecog", "", true);
  p.option("table", "flowtable: sw (software hash table) or hw (emulated hardware flow table)", "sw");
  p.option("place", "where the server's work runs: host or dpu", "host");
  p.option("dpu-work", "apprecog on dpu: recognition (matching on dpu, the actions on host) or all", "recognition");
  p.option("engine",
           "apprecog on dpu: regex (the matching on the RXP) and/or compress (the compress action on the deflate "
           "engine), comma-separated, on the engines of --dpu-speed's BlueField generation; the dpu thread posts "
           "the jobs and polls their completions (refused where the generation has no such engine)",
           "");
  p.option("bind", "IPv4 address to listen on", "0.0.0.0");
  p.option("port", "UDP port (0 = any free one)", "9000");
  p.cpus_option("host-cpus", "CPUs of the host place (default: the first)");
  p.cpus_option("dpu-cpus", "CPUs of the dpu place (default: all but the first)");
  p.cpus_option("hw-cpus", "CPUs of the NIC thread (default: the dpu's)");
  p.dpu_speed_option();  // the dpu place's threads are dilated to it; host and the NIC thread never
  p.option("batch", "datagrams per recvmmsg/sendmmsg", "32");
  p.option("rcvbuf", "socket receive buffer", "8M");
  p.option("duration", "stop after this many seconds (0 = at SIGTERM/SIGINT)", "0");
  p.option("flows-hint", "software tables are sized for this many flows", "65536");
  p.option("hw-capacity", "hw: flow table entries", "65536");
  p.option("insert-rate", "hw: rule insertions per second (Duet Table II: 77000 on one Arm core)", "77000");
  p.option("insert-latency-us", "hw: from request to effect, beyond queueing", "20");
  p.option("insert-queue", "hw: insertion requests that may wait", "65536");
  p.option("ring-slots", "hand-off ring slots (and the dpu split's buffer pool)", "4096");
  p.option("json", "write the result (dpukit.result/1) here");
  p.parse(argc, argv, 2);

  e2e::ServerConfig c;
  c.program = program_of(p);
  c.table = p.str("table");
  c.place = p.str("place");
  c.dpu_work = p.str("dpu-work");
  c.bind_host = p.str("bind");
  c.port = port_of(p);
  try {
    c.placement = Placement::plan(p.str("host-cpus"), p.str("dpu-cpus"), p.str("hw-cpus"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  c.dpu_speed = p.dpu_speed();
  c.batch = static_cast<unsigned>(p.u64("batch"));
  c.rcvbuf = p.bytes("rcvbuf");
  c.duration_s = p.number("duration");
  c.expected_flows = p.u64("flows-hint");
  c.hw.capacity = p.u64("hw-capacity");
  c.hw.insert_rate = p.number("insert-rate");
  c.hw.insert_latency_ns = static_cast<uint64_t>(p.number("insert-latency-us") * 1000);
  c.hw.insert_queue = p.u64("insert-queue");
  c.ring_slots = p.u64("ring-slots");
  c.engines = p.str("engine");
  if (c.program == e2e::Program::kAppRecog && p.has("table")) p.fail("--table is for --program flowtable");

  install_stop_handlers();
  std::unique_ptr<e2e::Server> server;
  try {
    server = std::make_unique<e2e::Server>(c);
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  Result out("dpukit-bench e2e-server", argc, argv);
  out.parameters() = server->parameters();
  std::printf("e2e-server: listening on %s (%s, place %s, dpu speed %s%s%s)\n",
              server->endpoint().c_str(), e2e::program_name(c.program), c.place.c_str(),
              c.dpu_speed.name.c_str(), c.engines.empty() ? "" : ", engines ", c.engines.c_str());
  std::fflush(stdout);
  CpuAccount cpu;
  const uint64_t started = now_ns();
  out.figures() = server->run(g_stop, cpu);
  out.set_wall_ns(now_ns() - started);
  out.set_cpu(cpu);
  out.set_placement(c.placement);
  out.set_dpu_speed(c.dpu_speed);
  const auto& f = out.figures();
  std::printf("e2e-server: %llu datagrams, %llu processed, %llu bad, %.0f pps over %.3f s\n",
              static_cast<unsigned long long>(f.at("datagrams_received").get<uint64_t>()),
              static_cast<unsigned long long>(f.at("packets_processed").get<uint64_t>()),
              static_cast<unsigned long long>(f.at("bad_total").get<uint64_t>()), f.at("throughput_pps").get<double>(),
              f.at("active_s").get<double>());
  return write_result(out, p, "e2e-server");
}

int cmd_e2e_client(int argc, char** argv) {
  ArgParser p("dpukit-bench e2e-client",
              "The end-to-end client (DPUBench §5): sends datagrams of one size at one interval for a duration from "
              "one thread; for apprecog it also collects the replies (loss, round-trip percentiles, checks).");
  p.option("program", "flowtable or apprecog", "", true);
  p.option("server", "the server's IPv4 address", "127.0.0.1");
  p.option("port", "the server's UDP port", "9000");
  p.option("size", "bytes per datagram (UDP payload, the 40-byte header included)", "64");
  p.option("interval", "microseconds between datagrams (0 = as fast as possible)", "0");
  p.option("rate", "datagrams per second instead of --interval");
  p.option("duration", "seconds of sending", "1");
  p.option("burst", "most datagrams per send call", "16");
  p.flag("gso", "send each burst as one UDP GSO buffer (UDP_SEGMENT): far fewer system calls per datagram");
  p.option("flows", "synthetic 5-tuples", "1024");
  p.option("zipf", "skew of the flows' popularity (0 = uniform)", "1.1");
  p.option("seed", "seed of flows and payloads", "1");
  p.option("mix", "apprecog: shares of hash,compress,echo payloads", "1,1,1");
  p.option("pool", "apprecog: distinct payloads", "240");
  p.option("drain", "apprecog: seconds to wait for the last replies", "0.5");
  p.option("verify-every", "apprecog: check every Nth reply's body in full (0 = never)", "16");
  p.cpus_option("cpus", "pin the client's thread to these CPUs");
  p.option("json", "write the result (dpukit.result/1) here");
  p.parse(argc, argv, 2);

  e2e::ClientConfig c;
  c.program = program_of(p);
  c.server_host = p.str("server");
  c.port = port_of(p);
  c.size = p.bytes("size");
  c.interval_us = p.number("interval");
  if (p.has("rate")) {
    if (p.has("interval")) p.fail("--rate and --interval exclude each other");
    const double rate = p.number("rate");
    if (!(rate > 0)) p.fail("--rate must be > 0");
    c.interval_us = 1e6 / rate;
  }
  c.duration_s = p.number("duration");
  c.burst = static_cast<unsigned>(p.u64("burst"));
  c.gso = p.has("gso");
  c.flows = p.u64("flows");
  c.zipf = p.number("zipf");
  c.seed = p.u64("seed");
  c.pool = p.u64("pool");
  c.drain_s = p.number("drain");
  c.verify_every = static_cast<unsigned>(p.u64("verify-every"));
  try {
    c.mix = e2e::parse_mix(p.str("mix"));
    e2e::check_client_config(c);  // --server too
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  std::string pin_warning;
  if (p.has("cpus")) {
    try {
      pin_warning = pin_current_thread(CpuSet::parse(p.str("cpus")));
    } catch (const std::invalid_argument& e) {
      p.fail(e.what());
    }
  }
  install_stop_handlers();
  Result out("dpukit-bench e2e-client", argc, argv);
  CpuAccount cpu;
  const uint64_t started = now_ns();
  try {
    out.figures() = e2e::run_client(c, g_stop, cpu);
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  out.set_wall_ns(now_ns() - started);
  out.set_cpu(cpu);
  Placement where;
  where.host = available_cpus();
  where.note = "the client: its CPU time is reported as host (the client machine's own CPU); host_cpus is its affinity";
  if (!pin_warning.empty()) where.note += "; " + pin_warning;
  out.set_placement(where);
  out.parameters() = {{"role", "client"},       {"program", p.str("program")}, {"server", c.server_host},
                      {"port", c.port},         {"size", c.size},              {"interval_us", c.interval_us},
                      {"duration_s", c.duration_s}, {"burst", c.burst},        {"gso", c.gso},
                      {"flows", c.flows},
                      {"zipf", c.zipf},         {"seed", c.seed},              {"mix", p.str("mix")},
                      {"pool", c.pool},         {"drain_s", c.drain_s},        {"verify_every", c.verify_every}};
  const auto& f = out.figures();
  std::printf("e2e-client: sent %llu (%.0f pps)", static_cast<unsigned long long>(f.at("sent").get<uint64_t>()),
              f.at("achieved_pps").get<double>());
  if (c.program == e2e::Program::kAppRecog)
    std::printf(", replies %llu, loss %.4f, rtt p50 %.1f us p99 %.1f us",
                static_cast<unsigned long long>(f.at("replies").at("unique").get<uint64_t>()), f.at("loss").get<double>(),
                f.at("rtt_us").at("p50").get<double>(), f.at("rtt_us").at("p99").get<double>());
  std::printf("\n");
  return write_result(out, p, "e2e-client");
}

}  // namespace dpukit::bench
