// What the end-to-end tests share: the server on loopback, serving on a
// thread of its own until the test finishes it, and its client.
#pragma once

#include <arpa/inet.h>

#include <atomic>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "dpukit/bench_e2e.h"
#include "e2e/server.h"

namespace dpukit::bench::e2e {

struct LoopbackServer {
  std::unique_ptr<Server> server;
  std::atomic<bool> stop{false};
  CpuAccount cpu;
  nlohmann::json figures, parameters;
  std::thread thread;

  // `c` on 127.0.0.1 (a free port), unpinned, polling its stop every 5 ms.
  explicit LoopbackServer(ServerConfig c) {
    c.bind_host = "127.0.0.1";
    c.port = 0;
    c.recv_timeout_us = 5000;
    c.placement = Placement::plan("", "", "");
    server = std::make_unique<Server>(c);
    parameters = server->parameters();
    thread = std::thread([this] { figures = server->run(stop, cpu); });
  }
  uint16_t port() const { return ntohs(server->local().sin_port); }
  // Stops it; what it measured.
  nlohmann::json finish() {
    stop = true;
    thread.join();
    return figures;
  }
};

// A client of `srv`: `size`-byte requests every `interval_us` for `seconds`,
// apprecog's payloads from a pool of 60, 0.3 s for the last replies.
inline ClientConfig client_of(const LoopbackServer& srv, Program program, size_t size, double interval_us,
                              double seconds) {
  ClientConfig cc;
  cc.program = program;
  cc.server_host = "127.0.0.1";
  cc.port = srv.port();
  cc.size = size;
  cc.interval_us = interval_us;
  cc.duration_s = seconds;
  cc.pool = 60;
  cc.drain_s = 0.3;
  return cc;
}

// The client `cc` run for its whole duration (its thread's CPU in `cpu`): what it measured.
inline nlohmann::json run_client_to_end(const ClientConfig& cc, CpuAccount& cpu) {
  std::atomic<bool> stop{false};
  return run_client(cc, stop, cpu);
}

}  // namespace dpukit::bench::e2e
