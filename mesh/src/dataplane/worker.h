// A data-plane worker: one event loop (Boost.Asio over epoll) on a dpu CPU
// that runs every processing module for the connections it accepted
// (run-to-completion). Listener sockets are bound by the control plane and
// handed over (one SO_REUSEPORT socket per worker for TCP), so the kernel
// shards new connections across workers.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dataplane/loop_dilation.h"
#include "dataplane/pipeline.h"
#include "dataplane/downstream_stream.h"
#include "dataplane/service_stream.h"
#include "dataplane/snapshot.h"
#include "dpukit/mesh.h"
#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"
#include "stats.h"
#include "tls/client_hello.h"
#include "tls/tls_context.h"

namespace dpukit::mesh {

class UpstreamConn;
class H2UpstreamPool;  // http2/h2_upstream.h

// Bytes read from a socket: [rpos, wpos) wait for the parser, reads land after wpos.
struct ReadBuffer {
  std::vector<char> bytes;
  size_t rpos = 0, wpos = 0;
  explicit ReadBuffer(size_t size) : bytes(size) {}
  std::string_view unread() const { return {bytes.data() + rpos, wpos - rpos}; }
  bool empty() const { return rpos == wpos; }
  void consume(size_t n) {
    rpos += n;
    if (rpos == wpos) rpos = wpos = 0;
  }
  // Room for the next read: moves the unread bytes to the front, or doubles
  // the buffer up to `max_size` (a head longer than one read). False when full at that size.
  bool make_room(size_t max_size) {
    if (wpos < bytes.size()) return true;
    if (rpos > 0) {
      std::memmove(bytes.data(), bytes.data() + rpos, wpos - rpos);
      wpos -= rpos;
      rpos = 0;
      return true;
    }
    if (bytes.size() >= max_size) return false;
    bytes.resize(std::min(max_size, bytes.size() * 2));
    return true;
  }
  asio::mutable_buffer space() { return asio::buffer(bytes.data() + wpos, bytes.size() - wpos); }
  // A buffer starts small and grows only while reads fill it (a large body),
  // so that an idle connection holds little (1,000 idle downstream
  // connections with 64 KiB each took 66 MB).
  // After a read of `n` bytes at `wpos`: twice the room for the next, up to `cap`, when it filled the buffer.
  void grow_if_filled(size_t n, size_t cap) {
    if (wpos + n == bytes.size() && bytes.size() < cap) bytes.resize(std::min(cap, 2 * bytes.size()));
  }
  // Nothing unread: back to `small`.
  void shrink_if_empty(size_t small) {
    if (!empty() || bytes.size() <= small) return;
    std::vector<char>(small).swap(bytes);
    rpos = wpos = 0;
  }
};

// Bytes for a socket with at most one async_write in flight: what is added
// meanwhile waits in `pending` and goes out next, in one write.
struct WriteQueue {
  std::string pending, in_flight;
  bool writing = false;
  size_t size() const { return pending.size() + in_flight.size(); }
  bool idle() const { return !writing && pending.empty(); }
  // Writes everything pending unless a write is in flight; `done(ec)` runs
  // after it (the caller's handler keeps the owner, and so this queue, alive).
  template <typename Stream, typename Done>
  void start(Stream& stream, Done done) {
    if (writing || pending.empty()) return;
    writing = true;
    in_flight.swap(pending);
    pending.clear();
    asio::async_write(stream, asio::buffer(in_flight),
                      [this, done = std::move(done)](const boost::system::error_code& ec, size_t) mutable {
                        writing = false;
                        in_flight.clear();
                        done(ec);
                      });
  }
};

// Nanoseconds on CLOCK_MONOTONIC (core's now_ns), signed: the clock of ejections, timeouts and token buckets.
inline int64_t mono_ns() { return static_cast<int64_t>(now_ns()); }

// A downstream connection as the worker's drain manager sees it: when an
// install leaves its listener (or filter chain) without a successor, it is
// told to drain, and closed when the drain time ends (Envoy's listener drain).
class DrainableConnection {
 public:
  virtual ~DrainableConnection() = default;
  // The listener or filter chain that serves it (in the snapshot it holds).
  virtual const ListenerRuntime& served() const = 0;
  // Whether `successor` (of served(), in a newer snapshot) can serve it on.
  virtual bool served_by(const ListenerRuntime& successor) const = 0;
  // Its listener went away: HTTP/1.1 closes after the response in flight
  // (Connection: close) or now when idle; HTTP/2 sends GOAWAY; TCP waits.
  virtual void start_drain() = 0;
  // The drain time ended: whatever is left closes.
  virtual void drain_close() = 0;
};

class Worker {
 public:
  // Its loops (and its pipeline's stages) run at `speed`, adding what they dilate to `dilation`.
  Worker(unsigned id, StatsStore& stats, ExecutionModel model, std::chrono::milliseconds drain_time,
         const DpuSpeed& speed, DilationCounters& dilation);
  ~Worker();

  // Starts the event loop thread, pinned to `cpus` (may be empty).
  void start(std::vector<int> cpus);
  // Installs a snapshot and this worker's listening sockets (address key ->
  // fd, owned by the control plane; the worker duplicates what it keeps).
  // Runs on the worker's thread.
  void install(std::shared_ptr<const Snapshot> snapshot, std::map<std::string, std::pair<int, int>> listen_fds);
  void stop();
  void join();

  unsigned id() const { return id_; }
  asio::io_context& io() { return io_; }
  const std::shared_ptr<const Snapshot>& snapshot() const { return snapshot_; }
  ModuleStats& modules() { return modules_; }
  uint64_t random() { return rng_(); }
  uint64_t cpu_ns() const { return cpu_ns_.load(std::memory_order_relaxed); }
  pid_t tid() const { return tid_.load(); }
  const DpuSpeed& speed() const { return speed_; }
  DilationCounters& dilation() { return dilation_; }
  // The stage threads of the pipelined model (nullptr when run-to-completion).
  Pipeline* pipeline() { return pipeline_.get(); }

  // Upstream connection pool (per worker, per host): idle keep-alive connections.
  std::shared_ptr<UpstreamConn> take_idle(const Host* host);
  void put_idle(std::shared_ptr<UpstreamConn> conn);
  void forget_idle(const UpstreamConn* conn);

  // The drain manager: a downstream connection registers for its life (the
  // id to unregister with); a draining one is told at once (start_drain) and
  // closed when --drain-time-s ends.
  uint64_t track(DrainableConnection* c);
  // When the last of at least kGiveBackAfterConnections connections goes,
  // the memory they freed is given back to the system (http2/freed_memory.h).
  void untrack(uint64_t id);
  static constexpr size_t kGiveBackAfterConnections = 256;
  // Whether the connection `id` drains (its listener went away).
  bool draining(uint64_t id) const { return draining_ids_.count(id) > 0; }

 private:
  // After an install: the connections whose listener or chain has no successor start draining.
  void drain_removed();
  void arm_drain_timer();
  struct Acceptor;
  void accept_next(Acceptor& a);
  void on_accept(const std::string& key, Socket sock);
  // The tls_inspector: peeks at the first bytes until the ClientHello is read (or they are not TLS).
  struct Inspection;
  void inspect(std::shared_ptr<Inspection> in);
  // The filter chain whose filter_chain_match fits, as Envoy orders them; nullptr: none.
  const ListenerRuntime* select_chain(const ListenerRuntime& listener, const ClientHello* hello) const;
  // Runs the chain's TLS handshake, if it has one, then starts its codec or TCP proxy.
  void serve(std::shared_ptr<const Snapshot> snapshot, const ListenerRuntime& chain, Socket sock);
  void start_session(const ListenerRuntime& chain, DownstreamStream stream);

  unsigned id_;
  StatsStore& stats_;
  ModuleStats& modules_;
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::thread thread_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::map<std::string, std::unique_ptr<Acceptor>> acceptors_;
  std::unordered_map<const Host*, std::vector<std::shared_ptr<UpstreamConn>>> idle_;
  std::mt19937_64 rng_;
  ExecutionModel model_;
  DpuSpeed speed_;
  DilationCounters& dilation_;
  std::unique_ptr<Pipeline> pipeline_;
  std::atomic<uint64_t> cpu_ns_{0};
  std::atomic<pid_t> tid_{0};
  std::chrono::milliseconds drain_time_;
  uint64_t next_connection_id_ = 1;
  std::unordered_map<uint64_t, DrainableConnection*> connections_;
  size_t peak_connections_ = 0;  // since the memory was last given back
  std::unordered_set<uint64_t> draining_ids_;
  // (when its drain time ends in mono_ns, id), in order since every drain is
  // as long; the timer is armed while it is not empty.
  std::deque<std::pair<int64_t, uint64_t>> drain_deadlines_;
  std::optional<asio::steady_timer> drain_timer_;

 public:
  // HTTP/2 upstream connections, one per host (http2/h2_upstream.h); declared
  // after io_ so that its sockets go before the event loop does.
  std::shared_ptr<H2UpstreamPool> h2_upstreams;
};

// One upstream connection. Owned by the stream that uses it, or by the
// worker's pool while idle. It always keeps a read outstanding (unless
// paused for back-pressure): data or a close while idle retires it.
class UpstreamConn : public std::enable_shared_from_this<UpstreamConn> {
 public:
  // What the connection reports to the stream that uses it.
  struct User {
    virtual ~User() = default;
    virtual void upstream_connected() = 0;
    enum class Failure { kConnect, kConnectTimeout, kReset, kProtocol };
    virtual void upstream_failed(Failure f) = 0;
    virtual void upstream_drained() = 0;  // the write queue emptied
    // The response ended (after its on_complete event, once the parser has
    // let go of the bytes): the user may now pool or close the connection.
    virtual void upstream_response_complete() = 0;
    virtual http::ResponseEvents& response_events() = 0;
  };

  UpstreamConn(Worker& w, std::shared_ptr<ClusterRuntime> cluster, std::shared_ptr<Host> host);
  ~UpstreamConn();

  void connect(User* user);
  void attach(User* user) { user_ = user; }
  void detach() { user_ = nullptr; }
  void send(std::string_view bytes);
  size_t queued() const { return out_.size(); }
  void pause_reading() { paused_ = true; }
  void resume_reading();
  void close();
  bool open() const { return sock_.is_open() && !closed_; }
  bool attached() const { return sock_.attached(); }  // socket direct (shared-memory rings)
  bool connected() const { return connected_; }
  // Why the connection could not be made ("delayed connect error: Connection refused"), for the access log.
  const std::string& failure_reason() const { return failure_reason_; }
  // Its local address ("ip:port"; "" for a Unix socket or before it connected), for the access log.
  std::string local_address();
  http::ResponseParser& parser() { return parser_; }
  Host& host() { return *host_; }
  ClusterRuntime& cluster() { return *cluster_; }
  // Reusable for another request: open, the last response ended cleanly, nothing buffered.
  bool reusable() const { return open() && !parser_.in_message() && !parser_.failure() && in_.empty(); }

 private:
  void do_read();
  void on_read(size_t n);
  void flush();
  void fail(User::Failure f);

  Worker& w_;
  std::shared_ptr<ClusterRuntime> cluster_;
  std::shared_ptr<Host> host_;
  ServiceStream sock_;
  asio::steady_timer timer_;
  User* user_ = nullptr;
  http::ResponseParser parser_;
  ReadBuffer in_;
  WriteQueue out_;
  std::string failure_reason_;
  std::string local_address_;  // once connected, for the access log
  bool reading_ = false, paused_ = false, connected_ = false, closed_ = false;
};

// How an upstream connection attempt ended (connect_upstream).
enum class ConnectOutcome { kConnected, kFailed, kTimedOut };

// The `worker` of a handshake the control plane's thread runs (a health
// check): not counted, since each worker's counters have that worker as their only writer.
inline constexpr unsigned kControlPlaneThread = ~0u;

// Runs the cluster's TLS handshake on a connected `sock` (nothing for a
// plaintext cluster or a shared-memory attach): SNI, verification and ALPN
// from its UpstreamTlsContext (`alpn_default` when it names none), counted in
// cluster.<name>.ssl.*. `done(ok)`; `owner` is kept alive meanwhile.
template <typename Owner, typename Done>
void upstream_handshake(std::shared_ptr<Owner> owner, ServiceStream& sock, ClusterRuntime& cluster, unsigned worker,
                        const Host& host, std::string_view alpn_default, Done done) {
  if (!cluster.tls || host.address.shm_attach) {
    done(true);
    return;
  }
  if (!cluster.tls->secrets_ready()) {  // a pushed secret not here yet: the connection fails, as Envoy's
    if (worker != kControlPlaneThread) cluster.tls->count_not_ready(worker);
    done(false);
    return;
  }
  sock.start_tls(cluster.tls->new_ssl(alpn_default));
  sock.tls()->async_handshake([owner, &sock, &cluster, worker, done](const boost::system::error_code& ec) mutable {
    if (sock.tls() && worker != kControlPlaneThread) cluster.tls->count_handshake(sock.tls()->ssl(), worker, ec);
    done(!ec);
  });
}

// Connects `sock` to `host` within the cluster's connect_timeout (the TLS
// handshake included), counting Envoy's upstream_cx_connect_fail / _timeout.
// `done(outcome)` runs once per event (the timer's and the connect's): the
// owner ignores the one that comes after it is connected or closed. `owner`
// is kept alive meanwhile. The HTTP pools offer ALPN h2 or http/1.1 by the
// cluster's protocol when its TLS context names none, as Envoy's do.
template <typename Owner, typename Done>
void connect_upstream(std::shared_ptr<Owner> owner, ServiceStream& sock, asio::steady_timer& timer,
                      ClusterRuntime& cluster, unsigned worker, const Host& host, Done done) {
  timer.expires_after(cluster.config().connect_timeout);
  timer.async_wait([owner, done](const boost::system::error_code& ec) mutable {
    if (ec) return;
    done(ConnectOutcome::kTimedOut, "");
  });
  sock.async_connect(host.address, [owner, &sock, &timer, &cluster, &host, worker, done](
                                       const boost::system::error_code& ec) mutable {
    // host_not_found: a STRICT_DNS name not resolved yet (no connection was tried).
    if (ec && ec != asio::error::host_not_found) cluster.stats(worker).upstream_cx_connect_fail.inc();
    if (ec || !sock.is_open()) {
      timer.cancel();
      done(ConnectOutcome::kFailed, "delayed connect error: " + (ec ? ec.message() : std::string("closed")));
      return;
    }
    upstream_handshake(owner, sock, cluster, worker, host, cluster.config().http2 ? "h2" : "http/1.1",
                       [&timer, done](bool ok) mutable {
                         timer.cancel();
                         done(ok ? ConnectOutcome::kConnected : ConnectOutcome::kFailed, ok ? "" : "TLS error");
                       });
  });
}

// Starts serving an accepted downstream connection (http_session.cc / tcp_session.cc).
void start_http_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener);
void start_tcp_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener);

}  // namespace dpukit::mesh
