// The L4 path (envoy.filters.network.tcp_proxy): a downstream connection is
// bound to one upstream connection chosen by the load balancer on first use
// (Algorithm 1, lines 6-8), then bytes are relayed both ways with
// back-pressure; a half-close is passed on, as Envoy does. Either side may
// be TLS (the filter chain's transport socket, the cluster's): the relay
// reads and writes plaintext, and a half-close becomes a close_notify.
#include <algorithm>

#include "dataplane/l7_chain.h"
#include "dataplane/worker.h"

namespace dpukit::mesh {

namespace {

constexpr size_t kRelayChunk = 64 * 1024;

class TcpSession : public std::enable_shared_from_this<TcpSession>, public DrainableConnection {
 public:
  TcpSession(Worker& w, DownstreamStream sock, const ListenerRuntime& lr)
      : w_(w), snapshot_(w.snapshot()), lr_(&lr), tcp_(lr.tcp.get()), stats_(tcp_->stats[w.id()]), down_(std::move(sock)),
        up_(std::make_unique<ServiceStream>(w.io().get_executor())), timer_(w.io()), idle_timer_(w.io()) {
    stats_->downstream_cx_total.inc();
    stats_->downstream_cx_active.add(1);
    drain_id_ = w_.track(this);
  }
  ~TcpSession() override {
    info_.upstream_cluster = cluster_ ? std::string_view(cluster_->name()) : std::string_view();
    tcp_->log(info_);  // a line per connection, once it is over
    w_.untrack(drain_id_);
    stats_->downstream_cx_active.add(-1);
    if (host_) host_->active_requests.fetch_sub(1, std::memory_order_relaxed);
    if (holds_connection_) cluster_->release_connection();
  }

  // ---- DrainableConnection: a byte stream cannot be told to end, so it
  // carries on until the drain time ends (as Envoy's tcp_proxy) ----
  const ListenerRuntime& served() const override { return *lr_; }
  bool served_by(const ListenerRuntime& successor) const override { return successor.tcp != nullptr; }
  void start_drain() override {}
  void drain_close() override {
    if (closed_) return;
    auto self = shared_from_this();
    close();
  }

  void start() {
    info_.start_ns = mono_ns();
    // Who it is and where it went: for the network RBAC filters and the access logs that name them.
    // Neither here: no system calls for them (reads_identity covers the RBAC filters).
    if (!tcp_->access_logs.empty() || tcp_->reads_identity) {
      facts_ = downstream_facts(down_, lr_->cfg->tls_inspector, tcp_->reads_identity);
      info_.downstream = facts_.get();
    }
    cluster_ = snapshot_->clusters.at(tcp_->pick_cluster(w_.random())->name());
    connect_next();
  }

 private:
  struct Direction {
    std::vector<char> buf = std::vector<char>(kRelayChunk);
    bool done = false;
    Counter* bytes = nullptr;
  };
  static void half_close(DownstreamStream& s) {
    boost::system::error_code ignored;
    s.shutdown(Socket::shutdown_send, ignored);
  }
  static void half_close(ServiceStream& s) { s.shutdown_send(); }

  void connect_next() {
    if (attempts_++ >= std::max<uint32_t>(1, tcp_->cfg->max_connect_attempts)) {
      info_.response_flags |= response_flag::kUpstreamRetryLimitExceeded;  // as Envoy's: the attempts are used up
      stats_->downstream_cx_no_route.inc();
      close();
      return;
    }
    host_ = cluster_->choose(LbContext{false, 0, w_.random()}, mono_ns());
    if (!host_ || !cluster_->try_acquire_connection()) {
      info_.response_flags |= host_ ? response_flag::kUpstreamOverflow : response_flag::kNoHealthyUpstream;
      if (host_) cluster_->stats(w_.id()).upstream_cx_overflow.inc();
      host_.reset();
      stats_->downstream_cx_no_route.inc();
      close();
      return;
    }
    holds_connection_ = true;
    host_->active_requests.fetch_add(1, std::memory_order_relaxed);
    info_.upstream_host = host_->label;
    auto& cs = cluster_->stats(w_.id());
    cs.upstream_cx_total.inc();
    timer_.expires_after(cluster_->config().connect_timeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && !self->connected_) {
        self->cluster_->stats(self->w_.id()).upstream_cx_connect_timeout.inc();
        self->up_->close();
      }
    });
    // A STRICT_DNS name not resolved yet fails the connect: the next host is tried.
    up_->async_connect(host_->address, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (self->closed_) return;
      if (ec) {
        self->cluster_->stats(self->w_.id()).upstream_cx_connect_fail.inc();
        self->info_.upstream_transport_failure_reason = "delayed_connect_error:_" + ec.message();
        std::replace(self->info_.upstream_transport_failure_reason.begin(),
                     self->info_.upstream_transport_failure_reason.end(), ' ', '_');
        self->connect_failed();
        return;
      }
      // The cluster's TLS, if any (no ALPN of its own: the bytes are the client's).
      upstream_handshake(self, *self->up_, *self->cluster_, self->w_.id(), *self->host_, {}, [self](bool ok) {
        self->timer_.cancel();
        if (self->closed_) return;
        if (!ok) {
          self->connect_failed();
          return;
        }
        self->connected_ = true;
        if (!self->tcp_->access_logs.empty()) self->info_.upstream_local_address = local_address_of(self->up_->native_handle());
        self->cluster_->report_status(*self->host_, 200, mono_ns());
        self->to_up_.bytes = &self->stats_->downstream_cx_rx_bytes_total;
        self->to_down_.bytes = &self->stats_->downstream_cx_tx_bytes_total;
        self->last_activity_ns_ = mono_ns();
        self->arm_idle_timer();
        self->relay(self->to_up_, self->down_, *self->up_);
        self->relay(self->to_down_, *self->up_, self->down_);
      });
    });
  }

  void connect_failed() {
    info_.response_flags |= response_flag::kUpstreamConnectionFailure;
    timer_.cancel();
    cluster_->report_connect_failure(*host_, mono_ns());
    host_->active_requests.fetch_sub(1, std::memory_order_relaxed);
    host_.reset();
    cluster_->release_connection();
    holds_connection_ = false;
    up_->close();
    up_ = std::make_unique<ServiceStream>(w_.io().get_executor());
    connect_next();
  }

  // Reads from one side and writes all of it to the other before reading again:
  // at most one chunk in flight per direction is the back-pressure.
  template <typename From, typename To>
  void relay(Direction& d, From& from, To& to) {
    from.async_read_some(asio::buffer(d.buf), [self = shared_from_this(), &d, &from, &to](const boost::system::error_code& ec, size_t n) {
      if (self->closed_) return;
      if (ec) {
        // The reading side finished (or failed): pass the half-close on.
        d.done = true;
        half_close(to);
        if (ec != asio::error::eof || (self->to_up_.done && self->to_down_.done)) self->close();
        return;
      }
      (&d == &self->to_up_ ? self->info_.bytes_received : self->info_.bytes_sent) += n;  // (a refused first read too, as Envoy's)
      // The first byte from the client: the network RBAC filters decide (ONE_TIME_ON_FIRST_BYTE).
      if (&d == &self->to_up_ && !self->authorized()) {
        self->close();
        return;
      }
      d.bytes->inc(n);
      self->last_activity_ns_ = mono_ns();
      asio::async_write(to, asio::buffer(d.buf.data(), n), [self, &d, &from, &to](const boost::system::error_code& ec2, size_t) {
        if (self->closed_) return;
        if (ec2) {
          self->close();
          return;
        }
        self->relay(d, from, to);
      });
    });
  }

  // Whether the chain's network RBAC filters let this connection through,
  // decided once, on the client's first byte, as Envoy's default enforcement
  // does; each filter counts its verdict (and its shadow rules').
  bool authorized() {
    if (checked_) return allowed_;
    checked_ = true;
    if (lr_->network_rbacs.empty()) return allowed_ = true;
    static const http::RequestHead kNoRequest;  // a connection has no HTTP request: header matchers see none
    for (const auto& n : lr_->network_rbacs) {
      const RbacFilter::Verdict v = n.rules->check(kNoRequest, *facts_);
      RbacStats& s = *n.stats[w_.id()];
      if (v.shadow_counted) (v.shadow_allowed ? s.shadow_allowed : s.shadow_denied).inc();
      if (v.counted) (v.allowed ? s.allowed : s.denied).inc();
      if (!v.allowed) {
        info_.connection_termination_details =
            "rbac_access_denied_matched_policy[" + (v.policy.empty() ? std::string("none") : v.policy) + "]";
        return allowed_ = false;
      }
    }
    return allowed_ = true;
  }

  void arm_idle_timer() {
    auto timeout = tcp_->cfg->idle_timeout;
    if (timeout.count() == 0) return;  // 0 disables it, as in Envoy
    int64_t due = last_activity_ns_ + static_cast<int64_t>(timeout.count()) * 1000000;
    idle_timer_.expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, due - mono_ns())));
    idle_timer_.async_wait([self = shared_from_this(), timeout](const boost::system::error_code& ec) {
      if (ec || self->closed_) return;
      if (mono_ns() - self->last_activity_ns_ >= static_cast<int64_t>(timeout.count()) * 1000000) {
        self->stats_->idle_timeout.inc();
        self->close();
        return;
      }
      self->arm_idle_timer();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    idle_timer_.cancel();
    boost::system::error_code ignored;
    down_.shutdown(Socket::shutdown_both, ignored);
    down_.close(ignored);
    up_->close();
  }

  Worker& w_;
  std::shared_ptr<const Snapshot> snapshot_;
  const ListenerRuntime* lr_;  // in snapshot_
  const TcpProxyRuntime* tcp_;
  TcpStats* stats_;
  DownstreamStream down_;
  std::unique_ptr<ServiceStream> up_;  // a new one per connect attempt
  asio::steady_timer timer_, idle_timer_;
  std::shared_ptr<ClusterRuntime> cluster_;
  std::shared_ptr<Host> host_;
  Direction to_up_{}, to_down_{};
  std::shared_ptr<const DownstreamFacts> facts_;
  StreamInfo info_;  // what its access log line says
  uint32_t attempts_ = 0;
  int64_t last_activity_ns_ = 0;
  bool connected_ = false, closed_ = false, holds_connection_ = false;
  bool checked_ = false, allowed_ = true;  // the network RBAC filters' decision
  uint64_t drain_id_ = 0;  // with the worker's drain manager
};

}  // namespace

void start_tcp_session(Worker& w, DownstreamStream sock, const ListenerRuntime& listener) {
  std::make_shared<TcpSession>(w, std::move(sock), listener)->start();
}

}  // namespace dpukit::mesh
