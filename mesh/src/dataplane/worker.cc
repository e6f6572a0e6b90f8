#include "dataplane/worker.h"

#include "dataplane/l7_chain.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "http2/freed_memory.h"
#include "http2/h2_session.h"

namespace dpukit::mesh {

struct Worker::Acceptor {
  std::string key;
  asio::basic_socket_acceptor<Protocol> acceptor;
  Acceptor(asio::io_context& io, std::string k) : key(std::move(k)), acceptor(io) {}
};

Worker::Worker(unsigned id, StatsStore& stats, ExecutionModel model, std::chrono::milliseconds drain_time,
               const DpuSpeed& speed, DilationCounters& dilation)
    : id_(id), stats_(stats), modules_(stats.modules(id)), rng_(0x6d657368u + id), model_(model), speed_(speed),
      dilation_(dilation), drain_time_(drain_time) {}

Worker::~Worker() {
  stop();
  join();
}

void Worker::start(std::vector<int> cpus) {
  guard_.emplace(io_.get_executor());
  if (model_ == ExecutionModel::kPipelined) pipeline_ = std::make_unique<Pipeline>(*this, cpus);
  thread_ = std::thread([this, cpus = std::move(cpus)] {
    tid_ = static_cast<pid_t>(syscall(SYS_gettid));
    if (!cpus.empty()) {
      CpuSet set;
      set.cpus = cpus;
      std::string warn = pin_current_thread(set);
      if (!warn.empty()) log_warn("mesh worker " + std::to_string(id_) + ": " + warn);
    }
    pthread_setname_np(pthread_self(), ("mesh:w" + std::to_string(id_)).c_str());
    uint64_t t0 = thread_cpu_ns();
    LoopDilation dilation(speed_, dilation_);
    run_loop(io_, dilation, "mesh worker " + std::to_string(id_));
    cpu_ns_ = thread_cpu_ns() - t0;
  });
}

void Worker::stop() {
  if (!guard_) return;
  asio::post(io_, [this] {
    if (drain_timer_) drain_timer_->cancel();
    for (auto& [k, a] : acceptors_) a->acceptor.close();
    acceptors_.clear();
    for (auto& [h, conns] : idle_)
      for (auto& c : conns) c->close();
    idle_.clear();
    io_.stop();
  });
  guard_.reset();
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
  if (pipeline_) {
    pipeline_->stop();
    cpu_ns_ += pipeline_->stage_cpu_ns();
  }
}

void Worker::install(std::shared_ptr<const Snapshot> snapshot, std::map<std::string, std::pair<int, int>> listen_fds) {
  snapshot_ = std::move(snapshot);
  drain_removed();
  // Listeners whose address is gone stop accepting; their open connections drain (drain_removed).
  for (auto it = acceptors_.begin(); it != acceptors_.end();) {
    if (!listen_fds.count(it->first)) {
      it->second->acceptor.close();
      it = acceptors_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, fd_family] : listen_fds) {
    if (acceptors_.count(key)) continue;
    auto a = std::make_unique<Acceptor>(io_, key);
    int fd = ::dup(fd_family.first);
    boost::system::error_code ec;
    a->acceptor.assign(Protocol(fd_family.second, 0), fd, ec);
    if (ec) {
      ::close(fd);
      log_error("mesh worker " + std::to_string(id_) + ": cannot take listener " + key + ": " + ec.message());
      continue;
    }
    a->acceptor.non_blocking(true);
    Acceptor& ref = *a;
    acceptors_.emplace(key, std::move(a));
    accept_next(ref);
  }
}

void Worker::accept_next(Acceptor& a) {
  a.acceptor.async_accept([this, &a, key = a.key](const boost::system::error_code& ec, Socket sock) {
    if (ec == asio::error::operation_aborted) return;
    auto it = acceptors_.find(key);
    if (it == acceptors_.end() || it->second.get() != &a) return;  // removed (and maybe re-added) meanwhile
    if (!ec) on_accept(key, std::move(sock));
    else if (ec != asio::error::connection_aborted) log_warn("mesh: accept on " + key + ": " + ec.message());
    accept_next(a);
  });
}

namespace {

// Keeps the chains that pass `fits`; when none does, those for which `fits_any` holds (the catch-alls).
template <typename Fits, typename FitsAny>
void narrow(std::vector<const ListenerRuntime*>& chains, Fits fits, FitsAny fits_any) {
  std::vector<const ListenerRuntime*> exact, wildcard;
  for (const auto* c : chains) {
    if (fits(c->chain->match)) exact.push_back(c);
    else if (fits_any(c->chain->match)) wildcard.push_back(c);
  }
  chains = exact.empty() ? std::move(wildcard) : std::move(exact);
}
}  // namespace

struct Worker::Inspection {
  Inspection(Socket s, std::shared_ptr<const Snapshot> snap, const ListenerRuntime& l)
      : sock(std::move(s)), timer(sock.get_executor()), snapshot(std::move(snap)), listener(l) {}
  Socket sock;
  asio::steady_timer timer;
  std::shared_ptr<const Snapshot> snapshot;  // what `listener` points into
  const ListenerRuntime& listener;
  std::vector<uint8_t> peeked = std::vector<uint8_t>(kMaxClientHello);
  bool done = false;
};

void Worker::on_accept(const std::string& key, Socket sock) {
  const ListenerRuntime* lr = nullptr;
  for (const auto& l : snapshot_->listeners)
    if (l.address_key == key) lr = &l;
  if (!lr) return;  // the listener went away with a reload
  if (sock.local_endpoint().protocol().family() != AF_UNIX) {
    int one = 1;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  if (lr->cfg->tls_inspector) {
    auto in = std::make_shared<Inspection>(std::move(sock), snapshot_, *lr);
    if (lr->cfg->listener_filters_timeout.count() > 0) {
      in->timer.expires_after(lr->cfg->listener_filters_timeout);
      in->timer.async_wait([this, in](const boost::system::error_code& ec) {
        if (ec || in->done) return;
        in->done = true;
        // No ClientHello in time: closed, unless continue_on_listener_filters_timeout (then served as plaintext).
        const ListenerRuntime* chain =
            in->listener.cfg->continue_on_listener_filters_timeout ? select_chain(in->listener, nullptr) : nullptr;
        boost::system::error_code ignored;
        if (chain) {
          in->sock.cancel(ignored);  // the inspector's wait ends before the socket moves on
          serve(in->snapshot, *chain, std::move(in->sock));
          return;
        }
        in->sock.close(ignored);
      });
    }
    inspect(std::move(in));
    return;
  }
  const ListenerRuntime* chain = select_chain(*lr, nullptr);
  if (!chain) {
    lr->stats[id_]->no_filter_chain_match.inc();
    return;  // the socket closes as it goes
  }
  serve(snapshot_, *chain, std::move(sock));
}

void Worker::inspect(std::shared_ptr<Inspection> in) {
  // Peek first (the bytes may be there already), then wait for more: the
  // socket is edge-triggered, so a wait alone could miss bytes already read by the kernel.
  const ssize_t n = ::recv(in->sock.native_handle(), in->peeked.data(), in->peeked.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    in->done = true;  // the client went away before saying anything
    in->timer.cancel();
    return;
  }
  ClientHello hello;
  const auto result = n > 0 ? parse_client_hello(in->peeked.data(), static_cast<size_t>(n), hello)
                            : ClientHello::Result::kNeedMore;
  if (result == ClientHello::Result::kNeedMore) {
    in->sock.async_wait(Socket::wait_read, [this, in](const boost::system::error_code& ec) {
      if (ec || in->done) return;
      inspect(in);
    });
    return;
  }
  in->done = true;
  in->timer.cancel();
  const ListenerRuntime* chain = select_chain(in->listener, result == ClientHello::Result::kTls ? &hello : nullptr);
  if (!chain) {
    in->listener.stats[id_]->no_filter_chain_match.inc();
    boost::system::error_code ignored;
    in->sock.close(ignored);
    return;
  }
  serve(in->snapshot, *chain, std::move(in->sock));
}

const ListenerRuntime* Worker::select_chain(const ListenerRuntime& listener, const ClientHello* hello) const {
  std::vector<const ListenerRuntime*> chains;
  if (listener.chains.empty()) chains.push_back(&listener);  // one chain: its match must still fit
  for (const auto& c : listener.chains) chains.push_back(c.get());
  // server_names: an exact name, else the longest "*.suffix" that covers the SNI, else the chains that name none.
  const std::string sni = hello ? hello->sni : "";
  const auto wildcard_fits = [&](const std::string& n) {
    return n.starts_with("*.") && sni.size() > n.size() - 1 && sni.ends_with(std::string_view(n).substr(1));
  };
  bool exact = false;
  size_t best = 0;
  for (const auto* c : chains)
    for (const auto& n : c->chain->match.server_names) {
      if (!sni.empty() && n == sni) exact = true;
      else if (wildcard_fits(n)) best = std::max(best, n.size());
    }
  std::vector<const ListenerRuntime*> kept;
  for (const auto* c : chains) {
    const auto& names = c->chain->match.server_names;
    const bool fits = exact ? std::find(names.begin(), names.end(), sni) != names.end()
                      : best > 0 ? std::any_of(names.begin(), names.end(),
                                               [&](const std::string& n) { return n.size() == best && wildcard_fits(n); })
                                 : names.empty();
    if (fits) kept.push_back(c);
  }
  chains = std::move(kept);
  // transport_protocol: what the inspector saw ("tls", else "raw_buffer"), else the chains that name none.
  const std::string transport = hello ? "tls" : "raw_buffer";
  narrow(
      chains, [&](const config::FilterChainMatch& m) { return m.transport_protocol == transport; },
      [](const config::FilterChainMatch& m) { return m.transport_protocol.empty(); });
  // application_protocols: any the client offers, else the chains that name none.
  narrow(
      chains,
      [&](const config::FilterChainMatch& m) {
        if (!hello) return false;
        for (const auto& p : m.application_protocols)
          if (std::find(hello->alpn.begin(), hello->alpn.end(), p) != hello->alpn.end()) return true;
        return false;
      },
      [](const config::FilterChainMatch& m) { return m.application_protocols.empty(); });
  return chains.empty() ? nullptr : chains.front();
}

namespace {
// The runtime of `chain` in `snapshot`: the same listener (by name) and the same chain position.
const ListenerRuntime* same_chain(const Snapshot& snapshot, const ListenerRuntime& chain, const Snapshot& old) {
  const ListenerRuntime* l = snapshot.listener(chain.cfg->name);
  const ListenerRuntime* was = old.listener(chain.cfg->name);
  if (!l || !was || l->chains.size() != was->chains.size()) return nullptr;
  if (l->chains.empty()) return l;
  for (size_t i = 0; i < was->chains.size(); ++i)
    if (was->chains[i].get() == &chain) return l->chains[i].get();
  return nullptr;
}
}  // namespace

void Worker::serve(std::shared_ptr<const Snapshot> snapshot, const ListenerRuntime& chain, Socket sock) {
  if (!chain.tls) {
    if (snapshot != snapshot_) {  // a reload while the inspector waited: the chain's runtime in the new tables
      const ListenerRuntime* now = same_chain(*snapshot_, chain, *snapshot);
      if (now) start_session(*now, DownstreamStream(std::move(sock)));
      return;
    }
    start_session(chain, DownstreamStream(std::move(sock)));
    return;
  }
  struct Handshake {
    Handshake(DownstreamStream s, asio::io_context& io) : stream(std::move(s)), timer(io) {}
    DownstreamStream stream;
    asio::steady_timer timer;
  };
  if (!chain.tls->secrets_ready()) {  // a pushed secret not here yet: closed before any handshake, as Envoy does
    chain.tls->count_not_ready(id_);
    return;  // `sock` closes as it goes
  }
  SSL* ssl = chain.tls->new_ssl();
  auto hs = std::make_shared<Handshake>(DownstreamStream(std::move(sock), ssl), io_);
  hs->timer.expires_after(chain.chain->transport_socket_connect_timeout);
  hs->timer.async_wait([hs](const boost::system::error_code& ec) {
    if (ec) return;
    boost::system::error_code ignored;
    hs->stream.close(ignored);  // the handshake then ends with operation_aborted
  });
  hs->stream.tls()->async_handshake([this, hs, snapshot, &chain](const boost::system::error_code& ec) {
    hs->timer.cancel();
    chain.tls->count_handshake(hs->stream.tls()->ssl(), id_, ec);
    if (ec || !hs->stream.is_open()) {
      boost::system::error_code ignored;
      hs->stream.close(ignored);
      return;
    }
    const ListenerRuntime* now = snapshot == snapshot_ ? &chain : same_chain(*snapshot_, chain, *snapshot);
    if (now) start_session(*now, std::move(hs->stream));
  });
}

void Worker::start_session(const ListenerRuntime& chain, DownstreamStream stream) {
  if (chain.tcp) {
    start_tcp_session(*this, std::move(stream), chain);
    return;
  }
  // ALPN h2 from the handshake: HTTP/2 from the first byte (the client sends the preface next).
  if (TlsStream* tls = stream.tls()) {
    const unsigned char* alpn = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(tls->ssl(), &alpn, &len);
    if (std::string_view(reinterpret_cast<const char*>(alpn), len) == "h2") {
      start_h2_session(*this, std::move(stream), chain, {});
      return;
    }
  }
  start_http_session(*this, std::move(stream), chain);
}

uint64_t Worker::track(DrainableConnection* c) {
  uint64_t id = next_connection_id_++;
  connections_.emplace(id, c);
  peak_connections_ = std::max(peak_connections_, connections_.size());
  return id;
}

void Worker::untrack(uint64_t id) {
  connections_.erase(id);
  draining_ids_.erase(id);  // its deadline entry is skipped when due
  // Not once the loop has stopped: connections then go as its queued handlers are destroyed.
  if (connections_.empty() && peak_connections_ >= kGiveBackAfterConnections && !io_.stopped()) {
    peak_connections_ = 0;
    give_back_freed_memory(io());
  }
}

void Worker::drain_removed() {
  if (!snapshot_) return;
  const int64_t deadline = mono_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(drain_time_).count();
  std::vector<uint64_t> starting;
  for (const auto& [id, c] : connections_) {
    if (draining_ids_.count(id)) continue;
    const ListenerRuntime& served = c->served();
    const ListenerRuntime* next = snapshot_->successor(served);
    // Moved to another address, or no longer the same kind of filter: that listener went away too.
    if (next && next->address_key == served.address_key && c->served_by(*next)) continue;
    starting.push_back(id);
  }
  if (starting.empty()) return;
  for (uint64_t id : starting) {
    draining_ids_.insert(id);
    drain_deadlines_.emplace_back(deadline, id);
  }
  // Told after all are marked: a connection that closes at once unregisters meanwhile.
  for (uint64_t id : starting)
    if (auto it = connections_.find(id); it != connections_.end()) it->second->start_drain();
  if (drain_deadlines_.size() == starting.size()) arm_drain_timer();  // else the timer is armed for an earlier one
}

void Worker::arm_drain_timer() {
  while (!drain_deadlines_.empty() && !draining_ids_.count(drain_deadlines_.front().second)) drain_deadlines_.pop_front();
  if (drain_deadlines_.empty()) return;
  if (!drain_timer_) drain_timer_.emplace(io_);
  drain_timer_->expires_after(std::chrono::nanoseconds(std::max<int64_t>(0, drain_deadlines_.front().first - mono_ns())));
  drain_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    const int64_t now = mono_ns();
    while (!drain_deadlines_.empty() && drain_deadlines_.front().first <= now) {
      uint64_t id = drain_deadlines_.front().second;
      drain_deadlines_.pop_front();
      auto it = connections_.find(id);
      if (it != connections_.end() && draining_ids_.count(id)) it->second->drain_close();
    }
    arm_drain_timer();
  });
}

std::shared_ptr<UpstreamConn> Worker::take_idle(const Host* host) {
  auto it = idle_.find(host);
  if (it == idle_.end()) return nullptr;
  while (!it->second.empty()) {
    auto c = std::move(it->second.back());
    it->second.pop_back();
    if (c->reusable()) return c;
    c->close();
  }
  return nullptr;
}

void Worker::put_idle(std::shared_ptr<UpstreamConn> conn) {
  conn->detach();
  UpstreamConn& c = *conn;
  idle_[&c.host()].push_back(std::move(conn));
  c.resume_reading();  // paused for a slow client: an idle connection must watch for the upstream's close
}

void Worker::forget_idle(const UpstreamConn* conn) {
  auto it = idle_.find(&const_cast<UpstreamConn*>(conn)->host());
  if (it == idle_.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].get() == conn) {
      v.erase(v.begin() + static_cast<long>(i));
      return;
    }
}

// ---- UpstreamConn ----

namespace {
// The read buffer starts at kSmallReadChunk (a response head and a small body)
// and doubles up to kReadChunk while reads fill it (a large body).
constexpr size_t kSmallReadChunk = 4 * 1024;
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxReadBuffer = 256 * 1024;

}  // namespace

Protocol::endpoint endpoint_of(const config::Address& a) {
  if (a.is_pipe()) return Protocol::endpoint(asio::local::stream_protocol::endpoint(a.pipe_path));
  return Protocol::endpoint(asio::ip::tcp::endpoint(asio::ip::make_address(a.ip), a.port));
}

UpstreamConn::UpstreamConn(Worker& w, std::shared_ptr<ClusterRuntime> cluster, std::shared_ptr<Host> host)
    : w_(w), cluster_(std::move(cluster)), host_(std::move(host)), sock_(w.io().get_executor()), timer_(w.io()),
      in_(kSmallReadChunk) {
  cluster_->stats(w_.id()).upstream_cx_total.inc();
  cluster_->stats(w_.id()).upstream_cx_active.add(1);
}

UpstreamConn::~UpstreamConn() {
  cluster_->stats(w_.id()).upstream_cx_active.add(-1);
  cluster_->stats(w_.id()).upstream_cx_destroy.inc();
  cluster_->release_connection();
}

void UpstreamConn::connect(User* user) {
  user_ = user;
  connect_upstream(shared_from_this(), sock_, timer_, *cluster_, w_.id(), *host_, [this](ConnectOutcome o,
                                                                                        std::string reason) {
    if (closed_ || connected_) return;
    if (o == ConnectOutcome::kTimedOut) {
      cluster_->stats(w_.id()).upstream_cx_connect_timeout.inc();
      fail(User::Failure::kConnectTimeout);
    } else if (o == ConnectOutcome::kFailed) {
      failure_reason_ = std::move(reason);
      fail(User::Failure::kConnect);
    } else {
      connected_ = true;
      do_read();
      flush();
      if (user_) user_->upstream_connected();
    }
  });
}

std::string UpstreamConn::local_address() {
  if (local_address_.empty() && connected_) local_address_ = local_address_of(sock_.native_handle());  // read once
  return local_address_;
}

void UpstreamConn::send(std::string_view bytes) {
  out_.pending.append(bytes);
  if (connected_) flush();
}

void UpstreamConn::flush() {
  if (closed_) return;
  out_.start(sock_, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (self->closed_) return;
    if (ec) {
      self->fail(User::Failure::kReset);
      return;
    }
    if (!self->out_.pending.empty()) self->flush();
    else if (self->user_) self->user_->upstream_drained();
  });
}

void UpstreamConn::do_read() {
  if (reading_ || paused_ || closed_) return;
  // Back to kSmallReadChunk once a large body has passed and the connection is
  // pooled (it then only watches for the upstream's close): a burst of
  // requests that opened many connections leaves little held by them.
  if (!user_) in_.shrink_if_empty(kSmallReadChunk);
  // A response head beyond this fails in the parser (its header limit) before the buffer is full.
  if (!in_.make_room(kMaxReadBuffer)) return;
  reading_ = true;
  sock_.async_read_some(in_.space(),
                        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                          self->reading_ = false;
                          if (self->closed_) return;
                          if (ec) {
                            if (ec == asio::error::eof && self->user_) {
                              // The end of a response framed by the close (or a close before one).
                              self->parser_.finish(self->user_->response_events());
                              if (self->closed_ || !self->user_) {
                                self->close();
                                return;
                              }
                              if (self->parser_.done()) {
                                User* u = self->user_;
                                self->close();
                                u->upstream_response_complete();
                                return;
                              }
                            }
                            if (!self->user_) self->w_.forget_idle(self.get());  // an idle pooled one went away
                            self->fail(User::Failure::kReset);
                            return;
                          }
                          self->in_.grow_if_filled(n, kReadChunk);  // a large body: more room
                          self->on_read(n);
                        });
}

void UpstreamConn::on_read(size_t n) {
  in_.wpos += n;
  if (!user_) {
    // Bytes or a close on an idle pooled connection: it cannot be reused.
    w_.forget_idle(this);
    close();
    return;
  }
  auto self = shared_from_this();  // the user may drop us during the events
  while (!in_.empty() && user_ && !closed_) {
    size_t used = parser_.feed(in_.unread(), user_->response_events());
    in_.consume(used);
    if (parser_.failure()) {
      cluster_->stats(w_.id()).upstream_cx_protocol_error.inc();
      fail(User::Failure::kProtocol);
      return;
    }
    if (parser_.done() || used == 0) break;
  }
  if (parser_.done() && user_ && !closed_) {
    user_->upstream_response_complete();  // may pool us (reading goes on) or close us
    if (closed_) return;
  }
  if (!closed_) do_read();
}

void UpstreamConn::resume_reading() {
  if (!paused_) return;
  paused_ = false;
  // Bytes already buffered are parsed before reading more.
  if (!in_.empty()) on_read(0);
  else do_read();
}

void UpstreamConn::fail(User::Failure f) {
  User* u = user_;
  close();
  if (u) u->upstream_failed(f);
}

void UpstreamConn::close() {
  if (closed_) return;
  closed_ = true;
  user_ = nullptr;
  timer_.cancel();
  sock_.close();
}

}  // namespace dpukit::mesh
