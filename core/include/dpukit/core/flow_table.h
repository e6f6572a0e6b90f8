// The DPU's hardware match-action flow table (the eSwitch in BlueField terms):
// exact match on the 5-tuple, bounded capacity, insertions that take effect
// asynchronously at a bounded rate, per-entry packet and byte counters, and
// aging of idle entries.
//
// `FlowTable` is what the dpu side's control path sees; the emulated backend
// below is the default, and an XDP map or rte_flow with COUNT/AGE can sit
// behind the same interface.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/flow_key.h"

namespace dpukit {

struct FlowCounters {
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

struct FlowEvent {
  enum class Kind { kInserted, kRefused, kAged, kRemoved };
  enum class Reason { kNone, kTableFull, kQueueFull, kExists, kNotFound };
  Kind kind;
  Reason reason = Reason::kNone;
  FlowKey key;
  FlowCounters counters;      // at insertion: the initial counts; at aging/removal: the final ones
  uint64_t cookie = 0;        // what the requester attached
  uint64_t requested_ns = 0;  // when the request was made
  uint64_t done_ns = 0;       // when the hardware applied it
};
const char* to_string(FlowEvent::Kind);
const char* to_string(FlowEvent::Reason);

struct FlowTableStats {
  uint64_t capacity = 0;
  uint64_t entries = 0;
  uint64_t insert_requests = 0;
  uint64_t inserted = 0;
  uint64_t refused_table_full = 0;
  uint64_t refused_queue_full = 0;
  uint64_t refused_exists = 0;
  uint64_t remove_requests = 0;
  uint64_t removed = 0;
  uint64_t aged = 0;
  uint64_t lookups = 0;
  uint64_t hits = 0;
  uint64_t pending = 0;  // requests queued, not yet applied
  // Emulated table: hits on an entry by a wire context other than the one
  // that hit it first. RSS pins a flow to one queue, so nonzero means a flow
  // reached two queues; those hits are still counted, with atomic adds.
  uint64_t cross_queue_hits = 0;
  // Emulated table: entries no longer matched whose final counts wait for
  // every wire context to finish the burst it was in (see EmulatedFlowTable).
  uint64_t reclaiming = 0;
};

class FlowTable {
 public:
  virtual ~FlowTable() = default;
  virtual std::string backend() const = 0;
  virtual size_t capacity() const = 0;

  // Control path, from any thread. Asynchronous: the outcome arrives later as
  // an event. `initial` seeds the entry's counters (Duet inserts a heavy flow
  // with the count it reached in the sketch). A request refused at once
  // (queue full) still yields a kRefused event.
  virtual void request_insert(const FlowKey& key, FlowCounters initial, uint64_t cookie = 0) = 0;
  virtual void request_remove(const FlowKey& key, uint64_t cookie = 0) = 0;
  // Moves up to `max` pending events into `out` (appending); returns how many.
  virtual size_t poll_events(std::vector<FlowEvent>& out, size_t max) = 0;
  // Sleeps until an event is pending or `timeout` passes; true if one is.
  virtual bool wait_events(std::chrono::microseconds timeout) = 0;

  // Counters of an installed entry, from any thread.
  virtual std::optional<FlowCounters> query(const FlowKey& key) const = 0;
  virtual FlowTableStats stats() const = 0;
};

// The control path every backend shares, as the model has it: a rule engine
// that applies requests one at a time in order at `insert_rate` (Duet Table
// II), each taking effect `insert_latency_ns` after it starts; a bounded queue
// (a request beyond it is refused at once); and the outcomes, as events, for
// the requester. What applying a request means is the backend's (a slot of
// the emulated table, an entry of a BPF map). Thread-safe.
class FlowRuleEngine {
 public:
  struct Request {
    bool insert;
    FlowKey key;
    FlowCounters initial;
    uint64_t cookie;
    uint64_t requested_ns;
    uint64_t due_ns;  // when it takes effect
  };
  FlowRuleEngine(double insert_rate, uint64_t insert_latency_ns, size_t max_queue);

  // `now` stamps the request (CLOCK_MONOTONIC ns, or a model clock).
  void request_insert(const FlowKey& key, FlowCounters initial, uint64_t cookie, uint64_t now);
  void request_remove(const FlowKey& key, uint64_t cookie, uint64_t now);
  // Moves the requests due at `now` into `out` (appending), in order.
  void take_due(uint64_t now, std::vector<Request>& out);
  // When the next request falls due (UINT64_MAX: none queued); lock-free.
  uint64_t next_due() const { return next_due_ns_.load(std::memory_order_acquire); }
  // Sleeps until a request arrives into an empty queue, interrupt() is
  // called, or `timeout` passes; true if a request is queued.
  bool wait_for_request(std::chrono::nanoseconds timeout);
  void interrupt();

  void emit(const FlowEvent& e);
  size_t poll_events(std::vector<FlowEvent>& out, size_t max);
  bool wait_events(std::chrono::microseconds timeout);

  // insert_requests, remove_requests, refused_queue_full and pending; the rest is the backend's.
  FlowTableStats control_stats() const;

 private:
  void enqueue_locked(Request r);

  const double insert_rate_;
  const uint64_t insert_latency_ns_;
  const size_t max_queue_;
  mutable std::mutex mu_;
  std::condition_variable requested_, evented_;
  std::deque<Request> queue_;
  std::deque<FlowEvent> events_;
  FlowTableStats control_;
  uint64_t last_start_ns_ = 0;  // when the previous request began to be applied
  bool interrupted_ = false;
  std::atomic<uint64_t> next_due_ns_{UINT64_MAX};
};

// What a backend's applying thread did to its table, readable from any thread.
struct FlowTableOutcomes {
  std::atomic<uint64_t> entries{0}, inserted{0}, refused_full{0}, refused_exists{0}, removed{0}, aged{0};
  void fill(FlowTableStats& st) const;  // entries, inserted, refused_table_full, refused_exists, removed, aged
};

// The emulated eSwitch, shared by several wire contexts as one eSwitch is by
// a NIC's queues.
//
// Concurrency model:
// - The firmware work (`service`: applying due insertions and removals,
//   aging) runs on ONE thread at a time: the control path.
// - The packet path runs in wire contexts, any number of them at once, each
//   a `Wire` from attach_wire(), used by one thread at a time (one per RSS
//   queue). The table's own `match` / `match_burst_by_id` are the default
//   context's, which belongs to the thread that calls `service` (the
//   single-threaded NIC of a test or a one-queue wire).
// - Lookups only read what the control path writes: an entry's counters live
//   in a slot that never moves while the entry is installed (the hash index
//   holds slot numbers, and only the index is reshuffled on removal), and
//   the dense-id index is one word per flow. Key lookups retry across a
//   removal (a seqlock on the index).
// - Counters: an entry belongs to the first context that hits it, which adds
//   to its counters with plain stores (one writer, nothing locked). Another
//   context's hit goes to a second pair of counters with atomic adds and is
//   counted in stats().cross_queue_hits, so no count is ever lost; under RSS
//   it does not happen.
// - Removal and aging take an entry out of the index at once; its slot and
//   its final counts (the aging/removal event) follow once every attached
//   context has ended the burst it was in (quiescent-state reclamation: each
//   context publishes the table's epoch at the end of every match call; a
//   context that stops matching for a while calls Wire::idle()). A packet
//   that found the entry just before it left is thus in the final count.
// - Lookup and hit statistics and the per-burst miss sinks are per context,
//   each on its own cache lines; stats() sums them. Nothing is written per
//   packet on a line that two contexts share.
// Time is passed in explicitly (CLOCK_MONOTONIC ns, see now_ns()) to the
// packet path and `service`, and requests are stamped by Config::clock, so a
// test that drives a model clock gets a model that does not depend on
// scheduling. Everything in the FlowTable interface is safe from any thread.
class EmulatedFlowTable final : public FlowTable {
  struct Context;

 public:
  struct Config {
    size_t capacity = 65536;
    double insert_rate = 77000;          // rules/s; Duet Table II, one Arm core
    uint64_t insert_latency_ns = 20000;  // from request to effect, on top of queueing (assumed; the paper gives no figure)
    size_t insert_queue = 65536;         // requests waiting beyond this are refused
    uint64_t idle_timeout_ns = 0;        // aging; 0 = entries never age
    std::function<uint64_t()> clock;     // stamps requests; empty = now_ns()
  };
  explicit EmulatedFlowTable(const Config& config);
  ~EmulatedFlowTable() override;  // every Wire must be gone

  std::string backend() const override { return "emulated"; }
  size_t capacity() const override { return config_.capacity; }
  void request_insert(const FlowKey& key, FlowCounters initial, uint64_t cookie = 0) override;
  void request_remove(const FlowKey& key, uint64_t cookie = 0) override;
  size_t poll_events(std::vector<FlowEvent>& out, size_t max) override;
  bool wait_events(std::chrono::microseconds timeout) override;
  std::optional<FlowCounters> query(const FlowKey& key) const override;
  FlowTableStats stats() const override;

  // Dense flow ids, for a packet source that numbered its flows ahead of
  // time (an emulated wire): the table then keeps an index from id to entry,
  // maintained as entries come and go, and matching by id is one array read,
  // as a hardware lookup costs the same whatever the table holds. `id_of`
  // gives a key's id (or kNoFlowId), and is asked only when an entry is
  // installed. Call before any request is applied and any Wire attached.
  static constexpr uint32_t kNoFlowId = UINT32_MAX;
  void index_flow_ids(size_t ids, std::function<uint32_t(const FlowKey&)> id_of);

  static constexpr size_t kMaxBurst = 64;
  static constexpr unsigned kMaxWires = 128;  // attached at once, besides the default context

  // One wire context's packet path (one RSS queue's). From one thread at a
  // time; several Wires run concurrently with each other and with `service`.
  class Wire {
   public:
    ~Wire();  // detaches: holds no entry any more; its counts stay in stats()
    Wire(const Wire&) = delete;
    Wire& operator=(const Wire&) = delete;
    // On a hit, counts the packet and returns true.
    bool match(const FlowKey& key, uint32_t bytes, uint64_t now);
    // A burst at once, as a NIC pipelines its lookups: every packet's entry
    // is found before any is counted, and nothing branches on hit or miss (in
    // a skewed trace a third of the packets miss, in no order a branch
    // predictor follows): a miss is counted into a sink entry that no key
    // owns, one for each place in the burst and context (one for all would
    // chain every miss's count on the previous one's). Writes the positions
    // (0..n-1) of the packets NOT counted to `missed`, in order, and returns
    // how many there are; `missed` needs room for n (every place is written).
    // bytes: one size for all, or per packet. n <= kMaxBurst.
    size_t match_burst_by_id(const uint32_t* ids, size_t n, const uint32_t* bytes, uint32_t same_bytes, uint64_t now,
                             uint32_t* missed);
    // Says this context holds no entry until its next match: call before
    // waiting long (a paced wire between bursts need not), or removed
    // entries' final counts wait for it.
    void idle();
    unsigned id() const;  // 1..kMaxWires; 0 is the default context

   private:
    friend class EmulatedFlowTable;
    Wire(EmulatedFlowTable& table, Context& ctx) : table_(table), ctx_(ctx) {}
    EmulatedFlowTable& table_;
    Context& ctx_;
  };
  // Throws std::length_error beyond kMaxWires attached at once.
  std::unique_ptr<Wire> attach_wire();

  // --- the default context: the thread that calls `service` only ---
  bool match(const FlowKey& key, uint32_t bytes, uint64_t now);
  size_t match_burst_by_id(const uint32_t* ids, size_t n, const uint32_t* bytes, uint32_t same_bytes, uint64_t now,
                           uint32_t* missed);

  // --- the control path: one thread at a time ---
  // Applies what is due at `now`, ages idle entries and hands out the final
  // counts of entries every context has let go of; returns when it wants to
  // run next (UINT64_MAX when nothing is queued), so a NIC thread can sleep.
  uint64_t service(uint64_t now);

  // Sleeps until a request is queued or `timeout` passes; true if one is queued.
  bool wait_for_request(std::chrono::microseconds timeout);

  const Config& config() const { return config_; }

 private:
  struct Slot;
  struct Retired {
    uint32_t slot;
    uint64_t epoch;  // reclaimable once every attached context has published it
    FlowEvent event;
  };
  using Request = FlowRuleEngine::Request;
  static constexpr uint32_t kNoOwner = UINT32_MAX;

  size_t find(const FlowKey& key, uint32_t& slot) const;  // index position or npos; the slot in `slot`
  bool match_in(Context& c, const FlowKey& key, uint32_t bytes, uint64_t now);
  size_t burst_in(Context& c, const uint32_t* ids, size_t n, const uint32_t* bytes, uint32_t same_bytes,
                  uint64_t now, uint32_t* missed);
  void count_hit(Slot& s, Context& c, uint32_t me, uint32_t bytes, uint64_t now);
  void count_cross_queue(Slot& s, Context& c, uint32_t bytes);
  void enter(Context& c);
  void leave(Context& c);
  void detach(Context& c);
  void apply(const Request& r, uint64_t now);
  void unpublish(size_t pos, FlowEvent e);
  void age(uint64_t now);
  void reclaim();
  uint64_t request_time() const;

  // Read by the packet path, written only at construction.
  Config config_;
  size_t mask_;
  size_t sinks_;  // the first sink slot: context c's burst sinks are sinks_ + c * kMaxBurst
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<std::atomic<uint64_t>[]> index_;  // (hash tag << 32) | slot, or kEmpty
  std::unique_ptr<std::atomic<uint32_t>[]> slot_of_id_;  // index_flow_ids: each id's slot or kNoFlowId
  uint32_t ids_ = 0;
  std::unique_ptr<Context[]> contexts_;  // [0] the default, [1..kMaxWires] the Wires'

  // Written by the control path on structural changes only (read-mostly).
  // version_: a seqlock around index changes, for key lookups on other threads.
  // epoch_: bumped after entries leave the index; contexts publish what they saw.
  alignas(64) mutable std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> epoch_{1};

  // The control path's own.
  alignas(64) FlowRuleEngine rules_;
  std::vector<Request> due_;
  FlowTableOutcomes outcomes_;
  std::atomic<uint64_t> reclaiming_{0};
  uint64_t next_aging_ns_ = 0;
  std::function<uint32_t(const FlowKey&)> id_of_;
  std::vector<uint32_t> free_;       // slots free for an entry
  std::vector<uint64_t> cookie_;     // per slot
  std::vector<uint32_t> flow_id_;    // per slot, with index_flow_ids
  std::deque<Retired> retired_;      // out of the index, not yet reclaimed, in epoch order
  size_t unsealed_ = 0;              // retired_'s tail that has no epoch yet
  std::mutex attach_mu_;
};

// Runs the table's firmware work (service) on a thread of its own, for users
// with no packet path of their own: tests and the insertion-rate benchmark.
// Its CPU time is added to `account` as hw time when it stops.
class FlowTableNicThread {
 public:
  FlowTableNicThread(EmulatedFlowTable& table, CpuAccount* account = nullptr, const CpuSet& cpus = {});
  ~FlowTableNicThread();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpukit
