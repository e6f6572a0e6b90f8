// dpukit-core: benchmarks and peers for the emulated DPU model (core/).
//
//   ring-bench       in-process SPSC ring throughput between a host and a dpu thread
//   channel-bench    channel throughput, between threads or between processes
//   channel-peer     the dpu side of a channel, listening on a Unix socket
//   channel-host     the host side of a channel, connecting to a channel-peer
//   flowtable-bench  hardware flow-table insertion rate, latency and lookup rate
//   engines          every BlueField engine's model, each figure with its source, as JSON
//   engine-bench     what the dpu pays per engine job: submit and progress (DOCA's job interface)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "channel_peer.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/channel.h"
#include "dpukit/core/dpu_packet_path.h"
#include "dpukit/core/cli.h"
#include "dpukit/core/engine.h"
#include "dpukit/core/flow_table.h"
#include "dpukit/core/log.h"
#include "dpukit/core/process.h"
#include "dpukit/core/results.h"
#include "dpukit/core/ring.h"


namespace dpukit {
namespace {

const char* kTool = "dpukit-core";

void add_placement_options(ArgParser& p) {
  p.cpus_option("host-cpus", "CPUs for the host side, e.g. 0 or 0-1");
  p.cpus_option("dpu-cpus", "CPUs for the dpu side");
}

Placement placement_of(const ArgParser& p) {
  try {
    return Placement::plan(p.str("host-cpus"), p.str("dpu-cpus"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
}

void pin(const CpuSet& cpus, const char* place) {
  if (auto w = pin_current_thread(cpus); !w.empty()) log_warn(std::string(place) + ": " + w);
}

// The channel's two sides: this thread pinned to --cpus, if given.
void pin_to_cpus_option(const ArgParser& p, const char* place) {
  CpuSet cpus;
  try {
    if (p.has("cpus")) cpus = CpuSet::parse(p.str("cpus"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  pin(cpus, place);
}

void finish(const ArgParser& p, Result& r) {
  if (p.has("json")) r.write(p.str("json"));
}

// ------------------------------------------------------------ ring-bench

int ring_bench(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " ring-bench",
              "In-process SPSC ring throughput: a host thread pushes 8-byte messages in batches, a dpu thread pops them.");
  p.option("messages", "messages to move", "10000000").option("batch", "messages per push and pop", "32");
  p.option("slots", "ring capacity (power of two)", "4096").option("json", "write the result here");
  add_placement_options(p);
  p.parse(argc, argv, 2);
  uint64_t n = p.u64("messages"), batch = p.u64("batch"), slots = p.u64("slots");
  if (n == 0 || batch == 0 || batch > slots) p.fail("need messages > 0 and 0 < batch <= slots");
  Placement pl = placement_of(p);
  HeapRing<uint64_t> ring(slots);
  CpuAccount acct;
  std::atomic<bool> go{false};
  uint64_t sum = 0;
  std::thread consumer([&] {
    pin(pl.dpu, "dpu");
    auto q = ring.consumer();
    std::vector<uint64_t> buf(batch);
    while (!go.load(std::memory_order_acquire)) {}
    PlaceTimer t(acct, Place::kDpu);
    uint64_t got = 0, expect = 0;
    while (got < n) {
      size_t k = q.try_pop(buf.data(), batch);
      for (size_t i = 0; i < k; ++i) {
        if (buf[i] != expect++) throw std::runtime_error("ring delivered out of order");
        sum += buf[i];
      }
      got += k;
    }
  });
  pin(pl.host, "host");
  auto prod = ring.producer();
  std::vector<uint64_t> buf(batch);
  go.store(true, std::memory_order_release);
  uint64_t t0 = now_ns();
  {
    PlaceTimer t(acct, Place::kHost);
    for (uint64_t sent = 0; sent < n;) {
      size_t want = std::min<uint64_t>(batch, n - sent);
      for (size_t i = 0; i < want; ++i) buf[i] = sent + i;
      sent += prod.try_push(buf.data(), want);
    }
  }
  consumer.join();
  uint64_t wall = now_ns() - t0;
  if (sum != n * (n - 1) / 2) throw std::runtime_error("ring lost or duplicated messages");
  Result r(std::string(kTool) + " ring-bench", argc, argv);
  r.set_placement(pl);
  r.parameters() = {{"messages", n}, {"batch", batch}, {"slots", slots}, {"message_bytes", 8}};
  double secs = wall / 1e9;
  r.figures() = {{"messages", n}, {"batch", batch}, {"seconds", secs}, {"messages_per_sec", n / secs},
                 {"ns_per_message", wall / double(n)}};
  r.set_cpu(acct);
  r.set_wall_ns(wall);
  std::printf("ring: %llu messages, batch %llu: %.1f M messages/s (%.2f ns/message)\n", (unsigned long long)n,
              (unsigned long long)batch, n / secs / 1e6, wall / double(n));
  finish(p, r);
  return 0;
}

// ------------------------------------------------------------ channel

ChannelConfig channel_config(const ArgParser& p) {
  ChannelConfig c;
  c.request_slots = p.u64("request-slots");
  c.payload_bytes = p.bytes("payload-region");
  c.completion_slots = c.request_slots;
  return c;
}

void add_channel_options(ArgParser& p) {
  p.option("request-slots", "request ring slots (power of two)", "4096");
  p.option("payload-region", "payload region bytes (power of two)", "32M");
}

// Starts `channel-peer` as a separate process listening at `path`.
ChildProcess spawn_peer(const std::string& path, bool verify, const CpuSet& cpus) {
  std::vector<std::string> args = {own_executable().string(), "channel-peer", "--listen", path, "--quiet"};
  if (verify) args.push_back("--verify");
  if (!cpus.empty()) args.insert(args.end(), {"--cpus", cpus.str()});
  return ChildProcess::spawn(args);
}

ChannelHost connect_when_ready(const std::string& path, const ChannelConfig& cfg, ChildProcess& peer) {
  for (int i = 0;; ++i) {
    try {
      return ChannelHost::connect(path, cfg);
    } catch (const ChannelError& e) {
      if (!peer.running()) throw std::runtime_error("the dpu peer exited before listening (" + peer.exit_text() + ")");
      if (i > 500) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

int channel_bench(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " channel-bench",
              "Channel throughput: the host sends messages with payloads, the dpu side copies each payload out\n"
              "(the DMA read) and completes it. --mode process puts the dpu side in a process of its own.");
  p.option("mode", "thread or process", "process").option("messages", "messages to send", "1000000");
  p.option("payload", "payload bytes per message", "1024").flag("vary", "vary payload sizes between 1 and --payload");
  p.flag("verify", "check every payload byte and answer with its checksum").option("json", "write the result here");
  add_channel_options(p);
  add_placement_options(p);
  p.parse(argc, argv, 2);
  std::string mode = p.str("mode");
  if (mode != "thread" && mode != "process") p.fail("--mode must be thread or process, not '" + mode + "'");
  uint64_t n = p.u64("messages");
  size_t size = p.bytes("payload");
  bool verify = p.has("verify"), vary = p.has("vary");
  ChannelConfig cfg = channel_config(p);
  if (size > cfg.payload_bytes) p.fail("--payload is larger than --payload-region");
  Placement pl = placement_of(p);
  CpuAccount acct;
  peer::Totals sent;
  uint64_t t0 = 0, wall = 0;
  if (mode == "thread") {
    auto [host, dpu] = make_channel_pair(cfg);
    std::exception_ptr dpu_error;
    std::thread dpu_thread([&, d = std::move(dpu)]() mutable {
      pin(pl.dpu, "dpu");
      PlaceTimer t(acct, Place::kDpu);
      try {
        peer::run_dpu(d, verify);
      } catch (...) {
        dpu_error = std::current_exception();
      }
    });
    pin(pl.host, "host");
    t0 = now_ns();
    {
      PlaceTimer t(acct, Place::kHost);
      sent = peer::run_host(host, n, size, vary, verify);
    }
    dpu_thread.join();
    wall = now_ns() - t0;
    if (dpu_error) std::rethrow_exception(dpu_error);
  } else {
    std::string path = (std::filesystem::temp_directory_path() / ("dpukit-ch-" + std::to_string(getpid()) + ".sock"));
    ChildProcess child = spawn_peer(path, verify, pl.dpu);  // killed and reaped if this throws
    pin(pl.host, "host");
    {
      ChannelHost host = connect_when_ready(path, cfg, child);
      t0 = now_ns();
      PlaceTimer t(acct, Place::kHost);
      sent = peer::run_host(host, n, size, vary, verify);
    }
    child.wait();
    wall = now_ns() - t0;
    if (!child.succeeded()) throw std::runtime_error("the dpu peer process failed (" + child.exit_text() + ")");
    acct.add(Place::kDpu, child.cpu_ns());
  }
  double secs = wall / 1e9;
  Result r(std::string(kTool) + " channel-bench", argc, argv);
  r.set_placement(pl);
  r.parameters() = {{"mode", mode},        {"messages", n},
                    {"payload_bytes", size}, {"vary", vary},
                    {"verify", verify},      {"request_slots", cfg.request_slots},
                    {"payload_region_bytes", cfg.payload_bytes}};
  r.figures() = {{"messages", sent.messages},
                 {"payload_bytes", size},
                 {"bytes_moved", sent.payload_bytes},
                 {"seconds", secs},
                 {"messages_per_sec", sent.messages / secs},
                 {"gbytes_per_sec", sent.payload_bytes / secs / 1e9},
                 {"verified", verify}};
  r.set_cpu(acct);
  r.set_wall_ns(wall);
  std::printf("channel (%s): %llu messages of %zu B: %.2f M messages/s, %.2f GB/s%s\n", mode.c_str(),
              (unsigned long long)sent.messages, size, sent.messages / secs / 1e6, sent.payload_bytes / secs / 1e9,
              verify ? ", every payload verified" : "");
  finish(p, r);
  return 0;
}

int channel_peer(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " channel-peer",
              "The dpu side of a channel: listens, accepts one host, checks and completes its messages until it closes.");
  p.option("listen", "Unix socket path to listen at", "", true).flag("verify", "check every payload byte");
  p.cpus_option("cpus", "CPUs to pin to").option("accept-timeout-ms", "give up if no host connects in time", "30000");
  p.flag("quiet", "print no summary");
  p.parse(argc, argv, 2);
  pin_to_cpus_option(p, "dpu");
  ChannelListener listener(p.str("listen"));
  ChannelDpu ch = listener.accept(std::chrono::milliseconds(p.u64("accept-timeout-ms")));
  peer::Totals t = peer::run_dpu(ch, p.has("verify"));
  if (!p.has("quiet"))
    std::printf("channel-peer: %llu messages, %llu payload bytes received in order%s\n",
              (unsigned long long)t.messages, (unsigned long long)t.payload_bytes,
              p.has("verify") ? ", every payload verified" : "");
  return 0;
}

int channel_host(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " channel-host", "The host side of a channel: connects to a channel-peer and sends.");
  p.option("connect", "Unix socket path of the dpu side", "", true).option("messages", "messages to send", "1000000");
  p.option("payload", "payload bytes per message", "256").flag("vary", "vary payload sizes between 1 and --payload");
  p.flag("verify", "answer checks: the peer must run with --verify too").cpus_option("cpus", "CPUs to pin to");
  add_channel_options(p);
  p.parse(argc, argv, 2);
  pin_to_cpus_option(p, "host");
  ChannelHost ch = ChannelHost::connect(p.str("connect"), channel_config(p));
  peer::Totals t = peer::run_host(ch, p.u64("messages"), p.bytes("payload"), p.has("vary"), p.has("verify"));
  std::printf("channel-host: %llu messages, %llu payload bytes sent and acknowledged in order\n",
              (unsigned long long)t.messages, (unsigned long long)t.payload_bytes);
  return 0;
}

// ------------------------------------------------------------ flowtable-bench

int flowtable_bench(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " flowtable-bench",
              "Hardware flow table (emulated): requests a burst of insertions from the dpu control path, measures the\n"
              "rate and latency at which the NIC thread applies them, then the lookup rate on the filled table.");
  p.option("rate", "configured insertion rate, rules/s", "77000").option("inserts", "insertions to request", "20000");
  p.option("latency-us", "configured insertion latency, µs", "20").option("capacity", "table capacity", "65536");
  p.option("lookups", "lookups to time after the inserts (half hit, half miss)", "2000000");
  p.option("json", "write the result here");
  add_placement_options(p);
  p.parse(argc, argv, 2);
  uint64_t n = p.u64("inserts"), lookups = p.u64("lookups");
  EmulatedFlowTable::Config cfg;
  cfg.insert_rate = p.number("rate");
  cfg.insert_latency_ns = static_cast<uint64_t>(p.number("latency-us") * 1000);
  cfg.capacity = p.u64("capacity");
  cfg.insert_queue = std::max<size_t>(n, 1);
  if (n < 2) p.fail("--inserts must be at least 2");
  if (cfg.insert_rate <= 0) p.fail("--rate must be > 0");
  if (cfg.capacity == 0) p.fail("--capacity must be > 0");
  Placement pl = placement_of(p);
  EmulatedFlowTable table(cfg);
  CpuAccount acct;
  std::vector<FlowKey> keys(n);
  for (uint64_t i = 0; i < n; ++i)
    keys[i] = FlowKey::from_tuple(0x0a000000u + static_cast<uint32_t>(i), 0xc0a80001u, 1024 + (i % 50000), 80, 6);
  pin(pl.dpu, "dpu");
  std::vector<FlowEvent> events;
  uint64_t t0 = now_ns();
  {
    FlowTableNicThread nic(table, &acct, pl.hw);
    PlaceTimer control(acct, Place::kDpu);
    for (uint64_t i = 0; i < n; ++i) table.request_insert(keys[i], {}, i);
    while (events.size() < n) {
      if (table.poll_events(events, n) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  uint64_t wall = now_ns() - t0;

  // Unloaded latency: a few more rules offered at a tenth of the rate, so that
  // none waits behind another and the figure is the rule engine's own latency.
  std::vector<double> unloaded_us;
  {
    EmulatedFlowTable quiet(cfg);
    FlowTableNicThread nic(quiet, &acct, pl.hw);
    PlaceTimer control(acct, Place::kDpu);
    // Sleep between requests rather than spin: on a small machine the control
    // thread may share a CPU with the NIC thread.
    const auto gap = std::chrono::nanoseconds(static_cast<int64_t>(10e9 / cfg.insert_rate));
    const uint64_t m = std::min<uint64_t>(n, 200);
    for (uint64_t i = 0; i < m; ++i) {
      std::this_thread::sleep_for(gap);
      quiet.request_insert(keys[i], {}, i);
    }
    std::vector<FlowEvent> ev;
    while (ev.size() < m) {
      if (quiet.poll_events(ev, m) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (const auto& e : ev) unloaded_us.push_back((e.done_ns - e.requested_ns) / 1e3);
    std::sort(unloaded_us.begin(), unloaded_us.end());
  }

  uint64_t inserted = 0, refused = 0, first_done = UINT64_MAX, last_done = 0;
  std::vector<double> lat_us;
  for (const auto& e : events) {
    if (e.kind == FlowEvent::Kind::kInserted) {
      ++inserted;
      first_done = std::min(first_done, e.done_ns);
      last_done = std::max(last_done, e.done_ns);
      lat_us.push_back((e.done_ns - e.requested_ns) / 1e3);
    } else {
      ++refused;
    }
  }
  std::sort(lat_us.begin(), lat_us.end());
  auto pct = [](const std::vector<double>& v, double q) {
    return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(q * v.size()))];
  };
  // The steady rate of the rule engine: applied rules per second between the first and the last.
  double measured = inserted > 1 && last_done > first_done ? (inserted - 1) * 1e9 / (last_done - first_done) : 0;

  // Lookups: this thread now stands for the NIC's packet path.
  double lookup_rate = 0;
  if (lookups) {
    pin(pl.hw, "hw");
    std::vector<FlowKey> probe(4096);
    std::mt19937_64 rng(1);
    for (auto& k : probe)
      k = (rng() & 1) ? keys[rng() % n] : FlowKey::from_tuple(static_cast<uint32_t>(rng()), 1, 2, 3, 17);
    PlaceTimer hw(acct, Place::kHw);
    uint64_t l0 = now_ns(), hits = 0;
    for (uint64_t i = 0; i < lookups; ++i) hits += table.match(probe[i & 4095], 64, l0);
    lookup_rate = lookups * 1e9 / std::max<uint64_t>(1, now_ns() - l0);
    if (hits == 0 && inserted) throw std::runtime_error("no lookup hit an installed entry");
  }
  FlowTableStats st = table.stats();
  Result r(std::string(kTool) + " flowtable-bench", argc, argv);
  r.set_placement(pl);
  r.parameters() = {{"configured_rate", cfg.insert_rate}, {"inserts", n},
                    {"latency_us", cfg.insert_latency_ns / 1e3}, {"capacity", cfg.capacity}, {"lookups", lookups}};
  r.figures() = {{"configured_rate", cfg.insert_rate},
                 {"inserts_requested", n},
                 {"inserted", inserted},
                 {"refused", refused},
                 {"refused_table_full", st.refused_table_full},
                 {"entries", st.entries},
                 {"measured_rate", measured},
                 {"rate_error", cfg.insert_rate > 0 ? measured / cfg.insert_rate - 1 : 0},
                 // Of the burst: mostly waiting behind the rate limit.
                 {"latency_us_p50", pct(lat_us, 0.5)},
                 {"latency_us_p99", pct(lat_us, 0.99)},
                 {"latency_us_max", lat_us.empty() ? 0.0 : lat_us.back()},
                 // Offered at a tenth of the rate: the engine's own latency plus the NIC thread's wake-up.
                 {"unloaded_latency_us_p50", pct(unloaded_us, 0.5)},
                 {"unloaded_latency_us_p99", pct(unloaded_us, 0.99)},
                 {"lookups_per_sec", lookup_rate}};
  r.set_cpu(acct);
  r.set_wall_ns(wall);
  std::printf("flow table: %llu of %llu inserted (%llu refused) at %.0f rules/s (configured %.0f, %+.1f%%); "
              "burst latency p50 %.0f µs p99 %.0f µs; unloaded p50 %.0f µs p99 %.0f µs; %.1f M lookups/s\n",
              (unsigned long long)inserted, (unsigned long long)n, (unsigned long long)refused, measured,
              cfg.insert_rate, (measured / cfg.insert_rate - 1) * 100, pct(lat_us, 0.5), pct(lat_us, 0.99),
              pct(unloaded_us, 0.5), pct(unloaded_us, 0.99), lookup_rate / 1e6);
  finish(p, r);
  return 0;
}

// The speed a tool runs at (--dpu-speed, or $DPUKIT_DPU_SPEED, else host),
// or with --presets every preset, as JSON: what `dpukit eval --dpu` checks its
// argument with, so the presets are written once (core/src/dpu_speed.cc).
int dpu_speed(int argc, char** argv) {
  ArgParser args(std::string(kTool) + " dpu-speed",
                 "Print the dpu speed a tool would run at, or every preset, as JSON.");
  args.dpu_speed_option().flag("presets", "list the presets with their sources instead");
  args.parse(argc, argv, 2);
  nlohmann::json out;
  if (args.has("presets")) {
    out = nlohmann::json::array();
    for (const auto& p : dpu_speed_presets()) {
      const DpuSpeed speed = DpuSpeed::parse(p.name);
      out.push_back({{"name", p.name},
                     {"factor", p.factor},
                     {"source", p.source},
                     {"packet_path", DpuPacketPath::of(speed).to_json()},
                     {"packet_path_source", DpuPacketPath::of(speed).any() ? kDpuPacketPathSource : "none"}});
    }
  } else {
    out = args.dpu_speed().to_json();
    out["packet_path"] = DpuPacketPath::of(args.dpu_speed()).to_json();
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// ------------------------------------------------------------ engines

// Every engine spec with its sources, as JSON: what docs/core.md's table and
// the benchmarks' results cite (core/src/engine_specs.cc holds the figures).
int engines(int argc, char** argv) {
  ArgParser args(std::string(kTool) + " engines",
                 "Print every BlueField engine's model (each figure with its source) as JSON.");
  args.option("generation", "only this generation's engines (bluefield2, bluefield3)");
  args.parse(argc, argv, 2);
  nlohmann::json out = nlohmann::json::array();
  std::string known;
  for (const auto& spec : engine_specs()) {
    if (known.find(spec.generation) == std::string::npos) known += (known.empty() ? "" : ", ") + spec.generation;
    if (!args.has("generation") || spec.generation == args.str("generation")) out.push_back(spec.to_json());
  }
  if (out.empty()) args.fail("no engines for generation '" + args.str("generation") + "' (known: " + known + ")");
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// ------------------------------------------------------------ engine-bench

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void declare_engine_bench_options(ArgParser& p) {
  p.option("generation", "BlueField generation", "bluefield2");
  p.option("engine", "regex, compress, decompress, crypto or pka", "compress");
  p.option("bytes", "input bytes per job (byte engines)", "1024");
  p.option("operation", "the PKA's operation (default: its first)");
  p.option("depths", "jobs per round (queue depths), comma-separated", "1,16,128");
  p.option("rounds", "rounds per depth", "2000").option("polls", "empty polls to time", "1000000");
  p.option("idle-poll-us", "the executor polls this long before it sleeps (Engine's idle_poll_ns)", "0");
  p.option("clock", "the queue's clock: real (submits wake the executor) or virtual", "real");
  p.option("json", "write the result here");
  add_placement_options(p);
  p.cpus_option("hw-cpus", "CPUs for the engine's executor");
}

// --depths: a comma-separated list of queue depths.
std::vector<unsigned> parse_depths(const ArgParser& p) {
  std::vector<unsigned> depths;
  const std::string list = p.str("depths");
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    const std::string d = list.substr(at, comma - at);
    char* end = nullptr;
    const unsigned long v = std::strtoul(d.c_str(), &end, 10);
    if (d.empty() || *end || v == 0 || v > (1u << 20)) p.fail("--depths: '" + d + "' is not a depth from 1 to 2^20");
    depths.push_back(static_cast<unsigned>(v));
    at = comma + 1;
  }
  return depths;
}

// The engine and the spec --generation and --engine name.
std::pair<EngineKind, const EngineSpec*> chosen_engine(const ArgParser& p) {
  EngineKind kind{};
  try {
    kind = parse_engine_kind(p.str("engine"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  const EngineSpec* spec = nullptr;
  try {
    spec = &engine_spec(p.str("generation"), kind);
  } catch (const std::exception& e) {  // no such generation, or no such engine on it
    p.fail(e.what());
  }
  return {kind, spec};
}

// The job every round submits: a trivial body that counts itself computed,
// with the PKA's operation or the byte engines' input size.
EngineJob bench_job(const ArgParser& p, EngineKind kind, const EngineSpec& spec, std::atomic<uint64_t>& computed) {
  EngineJob job;
  job.body = [&computed] { computed.fetch_add(1, std::memory_order_release); };
  if (kind == EngineKind::kPublicKey) {
    job.operation = p.has("operation") ? p.str("operation") : spec.ops_per_s.at(0).first;
  } else {
    if (p.has("operation")) p.fail("--operation is for the PKA; " + p.str("engine") + " takes --bytes");
    job.bytes = p.bytes("bytes");
  }
  return job;
}

// Each block is timed by the thread's CPU clock (what the dpu pays, even
// when another process takes the CPU meanwhile) and by the wall clock;
// what reading each around a block costs is taken off it.
struct BlockClocks {
  struct Stamp {
    uint64_t cpu, wall;
  };
  static double read_cost(uint64_t (*clock)()) {
    std::vector<double> reads;
    for (int i = 0; i < 1001; ++i) {
      const uint64_t a = clock();
      reads.push_back(double(clock() - a));
    }
    return median(reads);
  }
  static Stamp stamp() { return Stamp{thread_cpu_ns(), now_ns()}; }
  // A stamp reads the CPU clock first: the wall clock's interval holds one
  // CPU clock read, the CPU clock's one wall clock read.
  double cpu_of(Stamp a, Stamp b) const { return std::max(0.0, double(b.cpu - a.cpu) - cpu_read_ns - wall_read_ns); }
  double wall_of(Stamp a, Stamp b) const { return std::max(0.0, double(b.wall - a.wall) - cpu_read_ns - wall_read_ns); }

  const double cpu_read_ns = read_cost([] { return thread_cpu_ns(); });
  const double wall_read_ns = read_cost([] { return now_ns(); });
};

// What an engine-bench run times with, over its depths.
struct EngineBenchRun {
  const EngineSpec& spec;
  EngineKind kind;
  Engine& engine;
  const EngineJob& job;
  EngineQueue::Clock clock;
  uint64_t rounds, polls;
  const BlockClocks& clocks;
  const std::atomic<uint64_t>& computed;  // the bodies run so far
  uint64_t expected = 0;                  // the jobs submitted so far
  std::vector<EngineCompletion> out;
};

// Per job, of each round: the submits' CPU and wall time, and the progress
// call's that took the jobs back.
struct RoundTimes {
  std::vector<double> submit_ns, progress_ns, submit_wall_ns, progress_wall_ns;
};

RoundTimes time_rounds(EngineBenchRun& run, EngineQueue& q, unsigned depth, uint64_t& now) {
  const BlockClocks& c = run.clocks;
  RoundTimes t;
  for (uint64_t round = 0; round < run.rounds; ++round) {
    if (run.clock == EngineQueue::Clock::kReal) now = now_ns();
    auto t0 = c.stamp();
    for (unsigned i = 0; i < depth; ++i)
      if (!q.submit(run.job, now)) throw std::runtime_error("a submit was refused below the queue's depth");
    auto t1 = c.stamp();
    t.submit_ns.push_back(c.cpu_of(t0, t1) / depth);
    t.submit_wall_ns.push_back(c.wall_of(t0, t1) / depth);
    run.expected += depth;
    // Not timed: the hw place computes; the last body's task is flagged
    // computed just after its body returns.
    q.wait_computed();
    while (run.computed.load(std::memory_order_acquire) < run.expected) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    run.out.clear();
    t0 = c.stamp();
    const size_t got = q.progress(UINT64_MAX, run.out);
    t1 = c.stamp();
    if (got != 0) {
      t.progress_ns.push_back(c.cpu_of(t0, t1) / double(got));
      t.progress_wall_ns.push_back(c.wall_of(t0, t1) / double(got));
    }
    while (q.in_flight() != 0) {  // a task not flagged yet: taken back, not timed
      q.wait_computed();
      q.progress(UINT64_MAX, run.out);
    }
    if (run.clock == EngineQueue::Clock::kVirtual && !run.out.empty()) now = run.out.back().completed_ns;
  }
  return t;
}

// Empty polls: `depth` jobs in flight, none due yet. Returns the CPU time
// of one (0 when none could be timed).
double time_empty_polls(EngineBenchRun& run, EngineQueue& q, unsigned depth, uint64_t& now) {
  double poll_ns = 0;
  if (run.clock == EngineQueue::Clock::kReal) now = now_ns();
  for (unsigned i = 0; i < depth; ++i) q.submit(run.job, now);
  const uint64_t first = *q.next_completion_ns();
  if (first > now && run.polls > 0) {
    const auto t0 = run.clocks.stamp();
    size_t found = 0;
    for (uint64_t i = 0; i < run.polls; ++i) found += q.progress(now, run.out);
    poll_ns = run.clocks.cpu_of(t0, run.clocks.stamp()) / double(run.polls);
    if (found != 0) throw std::runtime_error("an empty poll handed back a job before its time");
  }
  return poll_ns;
}

// One depth's point: the medians of its rounds, and its empty polls.
nlohmann::json depth_point(EngineBenchRun& run, unsigned depth) {
  EngineQueue q(run.engine, depth, run.clock);
  run.out.reserve(depth);
  const uint64_t wakeups0 = run.engine.stats().wakeups;
  uint64_t now = 0;
  const RoundTimes t = time_rounds(run, q, depth, now);
  const double poll_ns = time_empty_polls(run, q, depth, now);
  const double sub = median(t.submit_ns), prog = median(t.progress_ns);
  nlohmann::json point = {{"depth", depth},
                          {"jobs", run.rounds * depth},
                          {"submit_cpu_ns_per_job", sub},
                          {"progress_cpu_ns_per_job", prog},
                          {"dpu_cpu_ns_per_job", sub + prog},
                          {"submit_wall_ns_per_job", median(t.submit_wall_ns)},
                          {"progress_wall_ns_per_job", median(t.progress_wall_ns)},
                          {"empty_poll_cpu_ns", poll_ns}};
  const uint64_t woke = run.engine.stats().wakeups - wakeups0;
  point["wakeups_per_round"] = double(woke) / double(run.rounds);
  std::printf("%s %s, %s: depth %u: dpu CPU per job: submit %.0f ns, progress %.0f ns, %.0f ns in all "
              "(wall %.0f ns); an empty poll %.0f ns; %.2f wake-ups a round (medians of %llu rounds)\n",
              run.spec.generation.c_str(), engine_kind_name(run.kind),
              run.job.operation.empty() ? (std::to_string(run.job.bytes) + " B").c_str() : run.job.operation.c_str(),
              depth, sub, prog, sub + prog, median(t.submit_wall_ns) + median(t.progress_wall_ns), poll_ns,
              double(woke) / double(run.rounds), (unsigned long long)run.rounds);
  return point;
}

// The dpu side's cost per job, as a real driver pays it on its own thread:
// posting a task (submit) and taking its completion (progress). Each round
// submits `depth` jobs with a trivial body (timed), lets the executor
// compute them (not timed), then takes them back with one progress call
// (timed); separately, the cost of a poll that finds nothing due. Taking
// every completion at once (progress at the end of time), the model's times
// never make the loop wait. The executor sleeps between rounds: on a real
// clock each round's first submit pays its wake-up (a futex wake: the
// emulator's cost, where a real driver rings a doorbell), on a virtual clock
// the untimed wait does.
int engine_bench(int argc, char** argv) {
  ArgParser p(std::string(kTool) + " engine-bench",
              "What the dpu thread pays per engine job (submit, progress) and per empty poll, with a trivial body.");
  declare_engine_bench_options(p);
  p.parse(argc, argv, 2);
  Placement pl;
  try {
    pl = Placement::plan(p.str("host-cpus"), p.str("dpu-cpus"), p.str("hw-cpus"));
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  const auto [kind, spec] = chosen_engine(p);
  const std::vector<unsigned> depths = parse_depths(p);
  const uint64_t rounds = p.u64("rounds"), polls = p.u64("polls");
  if (rounds == 0) p.fail("--rounds must be > 0");
  std::atomic<uint64_t> computed{0};
  const EngineJob job = bench_job(p, kind, *spec, computed);
  pin(pl.dpu, "dpu");
  const std::string clock_name = p.str("clock");
  if (clock_name != "real" && clock_name != "virtual") p.fail("--clock must be real or virtual, not '" + clock_name + "'");
  const EngineQueue::Clock clock = clock_name == "real" ? EngineQueue::Clock::kReal : EngineQueue::Clock::kVirtual;
  const double idle_poll_us = p.number("idle-poll-us");
  if (!(idle_poll_us >= 0)) p.fail("--idle-poll-us must be >= 0");
  Engine engine(*spec, 1, pl.hw, static_cast<uint64_t>(idle_poll_us * 1000));
  try {
    engine.service_ns(job);  // an operation the card's PKA does not have: refused before timing
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
  const BlockClocks clocks;

  Result r(std::string(kTool) + " engine-bench", argc, argv);
  r.set_placement(pl);
  nlohmann::json points = nlohmann::json::array();
  EngineBenchRun run{*spec, kind, engine, job, clock, rounds, polls, clocks, computed, 0, {}};
  const uint64_t wall0 = now_ns();
  for (unsigned depth : depths) points.push_back(depth_point(run, depth));
  Engine::Stats st = engine.stats();
  r.parameters() = {{"generation", spec->generation}, {"engine", engine_kind_name(kind)},
                    {"bytes", job.bytes},             {"operation", job.operation},
                    {"rounds", rounds},               {"polls", polls},
                    {"idle_poll_us", idle_poll_us},   {"clock", clock_name},
                    {"cpu_clock_read_ns", clocks.cpu_read_ns}, {"wall_clock_read_ns", clocks.wall_read_ns}};
  r.figures() = {{"points", points},
                 {"jobs", st.jobs},
                 {"wakeups", st.wakeups},
                 {"hw_cpu_ns_per_job", double(st.hw_cpu_ns) / double(st.jobs)}};
  CpuAccount acct;
  acct.add(Place::kHw, st.hw_cpu_ns);
  r.set_cpu(acct);
  r.set_wall_ns(now_ns() - wall0);
  finish(p, r);
  return 0;
}

const Subcommand kCommands[] = {
    {"dpu-speed", dpu_speed, "the dpu speed a tool runs at, or the presets (host, bluefield2, bluefield3), as JSON"},
    {"ring-bench", ring_bench, "in-process SPSC ring throughput"},
    {"channel-bench", channel_bench, "channel throughput, between threads or processes"},
    {"channel-peer", channel_peer, "the dpu side of a channel, listening on a Unix socket"},
    {"channel-host", channel_host, "the host side of a channel, connecting to a channel-peer"},
    {"flowtable-bench", flowtable_bench, "hardware flow-table insertion rate, latency and lookups"},
    {"engines", engines, "every BlueField engine's model, each figure with its source, as JSON"},
    {"engine-bench", engine_bench, "what the dpu pays per engine job: submit and progress"},
};

}  // namespace
}  // namespace dpukit

int main(int argc, char** argv) {
  return dpukit::run_subcommands(dpukit::kTool, "The emulated DPU model: benchmarks and channel peers.",
                                 dpukit::kCommands, argc, argv);
}
