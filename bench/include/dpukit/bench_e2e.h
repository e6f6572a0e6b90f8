// bench: DPUBench's end-to-end programs (§5, Fig. 13; docs/architecture.md
// §3.4): a UDP client that sends datagrams of one size at one interval, and
// a server that counts their flows (flowtable) or recognizes, acts on and
// answers them (apprecog), its work on the host or the dpu place. What
// `dpukit-bench e2e-server` and `e2e-client` drive (docs/bench.md,
// "End-to-end programs").
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/flow_table.h"

namespace dpukit::bench::e2e {

enum class Program : uint8_t { kFlowTable = 1, kAppRecog = 2 };  // as the datagram's program byte
const char* program_name(Program p);          // "flowtable", "apprecog"
Program parse_program(const std::string& s);  // throws std::invalid_argument

struct Mix {  // apprecog: shares of the three actions among the client's payloads
  double hash = 1, compress = 1, echo = 1;
};
Mix parse_mix(const std::string& text);  // "1,1,1" (hash,compress,echo); throws std::invalid_argument

struct ClientConfig {
  Program program = Program::kFlowTable;
  std::string server_host = "127.0.0.1";
  uint16_t port = 9000;
  size_t size = 64;          // UDP payload bytes of a request, the 40-byte header included
  double interval_us = 0;    // between datagrams; 0 = as fast as possible
  double duration_s = 1;     // of sending
  unsigned burst = 16;       // most datagrams per send call (the pacer's largest burst)
  bool gso = false;          // send a burst as one UDP GSO buffer (UDP_SEGMENT) instead of sendmmsg
  size_t flows = 1024;
  double zipf = 1.1;
  uint64_t seed = 1;
  Mix mix;                   // apprecog: hash, compress, echo shares
  size_t pool = 240;         // apprecog: distinct payloads
  double drain_s = 0.5;      // apprecog: how long to wait for the last replies
  unsigned verify_every = 16;  // apprecog: check every Nth reply's body in full (0 = never)
  size_t sndbuf = 4u << 20;
  size_t max_rtt_samples = 50'000'000;
};

// Throws std::invalid_argument on a bad configuration (server_host not an
// IPv4 address included), naming the flag.
void check_client_config(const ClientConfig& c);

// Runs the client until its duration ends or `stop` is set; its thread's CPU
// time goes to `cpu` as host time (the client machine's own CPU). Returns
// the figures.
nlohmann::json run_client(const ClientConfig& config, const std::atomic<bool>& stop, CpuAccount& cpu);

struct ServerConfig {
  Program program = Program::kFlowTable;
  std::string table = "sw";              // flowtable: "sw" or "hw"
  std::string place = "host";            // the server's own work: "host" or "dpu"
  std::string dpu_work = "recognition";  // apprecog on dpu: "recognition" or "all"
  std::string bind_host = "0.0.0.0";
  uint16_t port = 9000;                  // 0: the kernel picks one (see local())
  Placement placement;                   // CPUs of host, dpu and hw
  DpuSpeed dpu_speed;                    // how fast the dpu place's CPU is (host: no dilation)
  unsigned batch = 32;                   // datagrams per recvmmsg / sendmmsg
  size_t rcvbuf = 8u << 20;              // socket receive buffer asked for
  double duration_s = 0;                 // stop after this long; 0 = only when told
  uint64_t recv_timeout_us = 20000;      // how often a blocked receiver looks at the stop flag
  size_t expected_flows = 65536;         // software tables are sized for this many flows
  EmulatedFlowTable::Config hw;          // the emulated table (capacity, insert_rate, latency)
  size_t ring_slots = 4096;              // hand-off capacity (and the dpu split's buffer pool)
  std::string engines;                   // apprecog on dpu: "regex", "compress", "regex,compress" or "" (none)
};

class Server {
 public:
  // Checks the configuration, binds the socket and makes the operator
  // kernels and the engines. Throws std::invalid_argument (bad
  // configuration; an engine the dpu speed's generation lacks, naming it),
  // std::runtime_error (socket) or Unavailable (a library backend).
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  sockaddr_in local() const;     // where it receives
  std::string endpoint() const;  // local() as "ADDR:PORT"
  size_t rcvbuf() const;         // the receive buffer the kernel gave

  // Serves until `stop` is set (or the configured duration passes), then
  // returns the figures; adds each thread's CPU time to `cpu` by place.
  nlohmann::json run(const std::atomic<bool>& stop, CpuAccount& cpu);

  nlohmann::json parameters() const;

 private:
  struct Impl;  // bench/src/e2e/server.h
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpukit::bench::e2e
