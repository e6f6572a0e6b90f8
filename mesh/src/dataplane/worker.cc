#include "dataplane/worker.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"

namespace dpukit::mesh {

struct Worker::Acceptor {
  std::string key;
  asio::basic_socket_acceptor<Protocol> acceptor;
  Acceptor(asio::io_context& io, std::string k) : key(std::move(k)), acceptor(io) {}
};

Worker::Worker(unsigned id, StatsStore& stats, ExecutionModel model)
    : id_(id), stats_(stats), modules_(stats.modules(id)), rng_(0x6d657368u + id), model_(model) {}

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
    for (;;) {
      try {
        io_.run();
        break;
      } catch (const std::exception& e) {
        // A handler's exception must not take the proxy down: log it and keep serving.
        log_error("mesh worker " + std::to_string(id_) + ": " + e.what());
      }
    }
    cpu_ns_ = thread_cpu_ns() - t0;
  });
}

void Worker::stop() {
  if (!guard_) return;
  asio::post(io_, [this] {
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
  // Listeners whose address is gone stop accepting; their open connections carry on.
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

void Worker::on_accept(const std::string& key, Socket sock) {
  const ListenerRuntime* lr = nullptr;
  for (const auto& l : snapshot_->listeners)
    if (l.address_key == key) lr = &l;
  if (!lr) return;  // the listener went away with a reload
  if (sock.local_endpoint().protocol().family() != AF_UNIX) {
    int one = 1;
    ::setsockopt(sock.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  if (lr->hcm) start_http_session(*this, std::move(sock), *lr);
  else start_tcp_session(*this, std::move(sock), *lr);
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
  connect_upstream(shared_from_this(), sock_, timer_, *cluster_, w_.id(), *host_, [this](ConnectOutcome o) {
    if (closed_ || connected_) return;
    if (o == ConnectOutcome::kTimedOut) {
      cluster_->stats(w_.id()).upstream_cx_connect_timeout.inc();
      fail(User::Failure::kConnectTimeout);
    } else if (o == ConnectOutcome::kFailed) {
      fail(User::Failure::kConnect);
    } else {
      connected_ = true;
      do_read();
      flush();
      if (user_) user_->upstream_connected();
    }
  });
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
  if (!user_ && in_.empty() && in_.bytes.size() > kSmallReadChunk) {
    std::vector<char>(kSmallReadChunk).swap(in_.bytes);
    in_.rpos = in_.wpos = 0;
  }
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
                          ReadBuffer& in = self->in_;
                          if (in.wpos + n == in.bytes.size() && in.bytes.size() < kReadChunk)
                            in.bytes.resize(std::min(kReadChunk, 2 * in.bytes.size()));  // a large body: more room
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
