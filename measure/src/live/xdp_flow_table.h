// Duet's hardware flow table on a real interface (issue 11 §1): the XDP
// program measure/bpf/duet_hw.bpf.c counts the packets of installed (heavy)
// flows in the kernel; this class loads and attaches it and is its control
// path, with the semantics of core's EmulatedFlowTable: bounded capacity,
// insertions applied in order at `insert_rate` after `insert_latency_ns`,
// per-entry counters, and aging of idle entries. Misses go to the dpu
// workers through AF_XDP (xsk_receiver.h).
//
// Needs root (or CAP_BPF + CAP_NET_ADMIN). Errors are LiveError, whose
// kind says what was missing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/flow_key.h"
#include "dpukit/core/flow_table.h"

struct bpf_object;

namespace dpukit::measure {

class LiveError : public std::runtime_error {
 public:
  enum class Kind {
    kPermission,     // not root, or bpf()/XDP attach returned EPERM (no CAP_BPF / CAP_NET_ADMIN)
    kNoInterface,    // no interface of that name
    kXdpRefused,     // the kernel or driver refuses XDP (or AF_XDP) in the asked mode
    kObjectMissing,  // the compiled BPF object is not there
    kSystem,         // anything else; the message names the call and errno
  };
  LiveError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};
const char* to_string(LiveError::Kind);

// libbpf's and libxdp's own messages (the verifier log among them) go to
// stderr only with DPUKIT_LIVE_VERBOSE=1; otherwise our errors name the call.
bool live_verbose();

// Generic (skb) mode runs on any interface; native (driver) mode needs the
// driver's XDP support (veth has it).
enum class XdpMode { kGeneric, kNative };
const char* to_string(XdpMode);

// The interface's receive queues, counted in /sys/class/net/IF/queues/rx-*.
// Throws LiveError(kNoInterface) when the interface does not exist.
unsigned rx_queue_count(const std::string& interface);

// Where the build puts the object: <build>/lib/duet_hw.bpf.o beside <build>/bin.
std::filesystem::path default_duet_hw_object();

// One entry of the `flows` map, as duet_hw.bpf.c lays it out.
struct HwFlowEntry {
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t last_seen_ns = 0;  // CLOCK_MONOTONIC (bpf_ktime_get_ns)
};
static_assert(sizeof(HwFlowEntry) == 24);

class XdpFlowTable final : public FlowTable {
 public:
  struct Options {
    // capacity, insert_rate, insert_latency_ns, insert_queue and
    // idle_timeout_ns as for the emulated table (the same flags). `clock`
    // must be empty: the kernel stamps hits with CLOCK_MONOTONIC, so the
    // control path must use it too.
    EmulatedFlowTable::Config table;
    std::filesystem::path bpf_object;  // empty: default_duet_hw_object()
    std::string interface;
    XdpMode mode = XdpMode::kGeneric;
    // A hit is dropped after counting (a monitoring port); true lets it go on
    // to the kernel stack instead.
    bool pass_hits = false;
    CpuAccount* account = nullptr;  // the service thread's CPU time goes here as hw time
    CpuSet service_cpus;            // where the service thread runs (empty: unpinned)
  };

  // Summed over the CPUs: the program's per-CPU `counters`.
  struct DatapathCounters {
    uint64_t frames = 0;      // frames the program saw
    uint64_t hits = 0;        // counted in the table and done
    uint64_t redirected = 0;  // misses handed to an AF_XDP socket
    uint64_t not_a_flow = 0;  // not IPv4 TCP/UDP (also counted as redirected or passed)
    uint64_t passed = 0;      // misses on a queue without a socket: to the kernel stack
    // The program's own CPU time, the hw place's work: the kernel's
    // run-time statistics (BPF_ENABLE_STATS), on while the table exists.
    bool run_time_measured = false;
    uint64_t run_ns = 0;  // summed over its runs
    uint64_t runs = 0;
  };

  // Opens and loads the object, sizes the maps, attaches to the interface and
  // starts the service thread. Throws LiveError.
  explicit XdpFlowTable(const Options& options);
  // Stops the service thread and detaches the program (the map goes with it).
  ~XdpFlowTable() override;
  XdpFlowTable(const XdpFlowTable&) = delete;
  XdpFlowTable& operator=(const XdpFlowTable&) = delete;

  std::string backend() const override { return "xdp"; }
  size_t capacity() const override { return options_.table.capacity; }
  void request_insert(const FlowKey& key, FlowCounters initial, uint64_t cookie = 0) override;
  void request_remove(const FlowKey& key, uint64_t cookie = 0) override;
  size_t poll_events(std::vector<FlowEvent>& out, size_t max) override;
  bool wait_events(std::chrono::microseconds timeout) override;
  std::optional<FlowCounters> query(const FlowKey& key) const override;
  // lookups = frames that were flows; hits = frames counted in the table.
  FlowTableStats stats() const override;

  // --- for the receive side (xsk_receiver.h) ---
  const std::string& interface() const { return options_.interface; }
  int ifindex() const { return ifindex_; }
  XdpMode mode() const { return options_.mode; }
  unsigned rx_queues() const { return rx_queues_; }
  int xsks_map_fd() const { return xsks_fd_; }
  DatapathCounters datapath_counters() const;

 private:
  using Request = FlowRuleEngine::Request;
  void service_loop();
  void apply(const Request& r, uint64_t now);
  void age(uint64_t now);
  void close_all();

  Options options_;
  int ifindex_ = 0;
  unsigned rx_queues_ = 0;
  bpf_object* object_ = nullptr;
  int flows_fd_ = -1, xsks_fd_ = -1, counters_fd_ = -1;
  int link_fd_ = -1;  // the XDP link: closing it detaches, also if the process dies
  int prog_fd_ = -1;
  int run_time_fd_ = -1;  // the kernel counts programs' run time while this is open

  FlowRuleEngine rules_;  // the queue of requests and events, as the emulated table's
  std::atomic<bool> stop_{false};

  // The service thread's own: which keys are installed and their cookies.
  // Only it changes the map's key set, so this mirror is exact.
  std::unordered_map<FlowKey, uint64_t, FlowKeyHash> installed_;
  std::vector<uint8_t> batch_keys_, batch_values_;  // aging scan buffers
  FlowTableOutcomes outcomes_;
  std::thread service_;
};

}  // namespace dpukit::measure
