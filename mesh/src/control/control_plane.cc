#include "control/control_plane.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstring>
#include <future>
#include <set>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "dpukit/core/shm.h"

namespace dpukit::mesh {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

int64_t file_mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// A listening socket for `a`, bound now so that a busy address is an error at start (or a refused reload).
int bind_socket(const config::Address& a, bool reuse_port, int& family) {
  if (a.is_pipe()) {
    family = AF_UNIX;
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw_errno("socket");
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (a.pipe_path.size() >= sizeof sa.sun_path) {
      ::close(fd);
      throw std::runtime_error("listener " + a.pipe_path + ": path too long for a Unix socket");
    }
    std::strcpy(sa.sun_path, a.pipe_path.c_str());
    ::unlink(a.pipe_path.c_str());  // a stale socket file from an earlier run
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1024) != 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      throw_errno("cannot listen at " + a.pipe_path);
    }
    return fd;
  }
  auto addr = asio::ip::make_address(a.ip);
  tcp::endpoint ep(addr, a.port);
  family = addr.is_v4() ? AF_INET : AF_INET6;
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_errno("socket");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuse_port) ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (::bind(fd, static_cast<const sockaddr*>(ep.data()), static_cast<socklen_t>(ep.size())) != 0 ||
      ::listen(fd, 1024) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    throw_errno("cannot listen at " + a.ip + ":" + std::to_string(a.port));
  }
  return fd;
}

}  // namespace

// ---- the admin listener (Envoy's admin: /ready, /stats/prometheus, /config_dump, /clusters, /quitquitquit) ----
class ControlPlane::Admin {
 public:
  Admin(ControlPlane& cp, const config::Address& a) : cp_(cp), acceptor_(cp.io_) {
    int family = 0;
    int fd = bind_socket(a, false, family);
    acceptor_.assign(Protocol(family, 0), fd);
    accept();
  }
  void close() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  struct Conn : std::enable_shared_from_this<Conn> {
    ControlPlane& cp;
    Socket sock;
    beast::flat_buffer buf;
    bhttp::request<bhttp::string_body> req;
    bhttp::response<bhttp::string_body> res;
    Conn(ControlPlane& c, Socket s) : cp(c), sock(std::move(s)) {}
    void read() {
      req = {};
      bhttp::async_read(sock, buf, req, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return;
        self->answer();
      });
    }
    void answer() {
      bool quit = false;
      try {
        quit = fill_response();
      } catch (const std::exception& e) {
        // A page that cannot be made is the admin's failure, not the connection's: say why.
        start_response(false);
        res.result(bhttp::status::internal_server_error);
        res.body() = std::string("admin: cannot answer ") + std::string(req.target()) + ": " + e.what() + "\n";
      }
      res.prepare_payload();
      pay_before_write();  // Beast's write goes through the plain socket, not a stream that pays
      bhttp::async_write(sock, res, [self = shared_from_this(), quit](beast::error_code ec, size_t) {
        if (quit) {
          self->cp.stop();
          return;
        }
        if (ec || !self->res.keep_alive()) return;
        self->read();
      });
    }
    // A fresh plain-text 200 response.
    void start_response(bool keep_alive) {
      res = {};
      res.version(11);
      res.keep_alive(keep_alive);
      res.set(bhttp::field::content_type, "text/plain; charset=UTF-8");
      res.result(bhttp::status::ok);
    }
    // The response to req; true when it asks the proxy to quit.
    bool fill_response() {
      start_response(req.keep_alive());
      std::string target(req.target());
      std::string path = target.substr(0, target.find('?'));
      bool quit = false;
      if (path == "/ready") {
        bool ready = cp.ready_.load();
        res.result(ready ? bhttp::status::ok : bhttp::status::service_unavailable);
        res.body() = ready ? "LIVE\n" : "PRE_INITIALIZING\n";
      } else if (path == "/stats/prometheus") {
        res.body() = cp.stats_.prometheus(cp.host_views());
      } else if (path == "/stats") {
        res.body() = cp.stats_.text(cp.host_views());
      } else if (path == "/config_dump") {
        res.set(bhttp::field::content_type, "application/json");
        nlohmann::json running = config::to_json(cp.snapshot_->bootstrap);
        res.body() = (cp.xds_ ? cp.xds_->config_dump(running) : running).dump(2) + "\n";
      } else if (path == "/clusters") {
        std::string out;
        for (const auto& h : cp.host_views()) {
          std::string flags = h.healthy ? (h.ejected ? "/failed_outlier_check" : "healthy") : "/failed_active_hc";
          if (!h.healthy && h.ejected) flags += "/failed_outlier_check";
          out += h.cluster + "::" + h.address + "::health_flags::" + flags + "\n";
        }
        res.body() = out;
      } else if (path == "/server_info") {
        res.set(bhttp::field::content_type, "application/json");
        nlohmann::json j{{"state", cp.ready_.load() ? "LIVE" : "PRE_INITIALIZING"},
                         {"version", DPUKIT_VERSION},
                         {"workers", cp.workers_.size()},
                         {"model", model_name(cp.options_.model)},
                         {"config_version", cp.version_}};
        res.body() = j.dump(2) + "\n";
      } else if (path == "/reopen_logs" && req.method() == bhttp::verb::post) {
        reopen_access_logs();  // Envoy's: as SIGUSR1
        res.body() = "OK\n";
      } else if (path == "/quitquitquit" && req.method() == bhttp::verb::post) {
        res.body() = "OK\n";
        res.keep_alive(false);
        quit = true;
      } else {
        res.result(bhttp::status::not_found);
        res.body() = "invalid path; try /ready, /stats, /stats/prometheus, /config_dump, /clusters, /server_info, POST /reopen_logs, POST /quitquitquit\n";
      }
      return quit;
    }
  };

  void accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, Socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Conn>(cp_, std::move(s))->read();
      accept();
    });
  }

  ControlPlane& cp_;
  asio::basic_socket_acceptor<Protocol> acceptor_;
};

// ---- active HTTP health checks, one checker per cluster ----
class ControlPlane::HealthChecker : public std::enable_shared_from_this<ControlPlane::HealthChecker> {
 public:
  HealthChecker(ControlPlane& cp, std::shared_ptr<ClusterRuntime> cluster, const config::HealthCheck& hc)
      : cp_(cp), cluster_(std::move(cluster)), hc_(hc), timer_(cp.io_) {}

  // Checks every host now, then every interval. `on_first_round` runs once when the first round has ended.
  void start(std::function<void()> on_first_round) {
    on_first_round_ = std::move(on_first_round);
    round();
  }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  struct Probe : std::enable_shared_from_this<Probe> {
    std::shared_ptr<HealthChecker> owner;  // keeps the checker alive while the probe is in flight
    HealthChecker& hc;
    std::shared_ptr<Host> host;
    ServiceStream sock;
    asio::steady_timer deadline;
    beast::flat_buffer buf;
    bhttp::request<bhttp::empty_body> req;
    bhttp::response<bhttp::string_body> res;
    bool finished = false;
    Probe(std::shared_ptr<HealthChecker> h, std::shared_ptr<Host> hst)
        : owner(std::move(h)), hc(*owner), host(std::move(hst)), sock(hc.cp_.io_.get_executor()), deadline(hc.cp_.io_) {}
    void run() {
      deadline.expires_after(hc.hc_.timeout);
      deadline.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) self->done(false);
      });
      sock.async_connect(host->address, [self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec) return self->done(false);
        // Over the cluster's TLS when it has one, as Envoy's checker uses the cluster's transport socket.
        upstream_handshake(self, self->sock, *self->hc.cluster_, kControlPlaneThread, *self->host, "http/1.1",
                           [self](bool ok) { ok ? self->send() : self->done(false); });
      });
    }
    void send() {
      auto self = shared_from_this();
      self->req.method(bhttp::verb::get);
      self->req.target(self->hc.hc_.path);
      self->req.version(11);
      self->req.set(bhttp::field::host, self->hc.hc_.host.empty() ? self->hc.cluster_->name() : self->hc.hc_.host);
      self->req.set(bhttp::field::user_agent, "Envoy/HC");
      self->req.keep_alive(false);
      bhttp::async_write(self->sock, self->req, [self](beast::error_code ec2, size_t) {
        if (ec2) return self->done(false);
        bhttp::async_read(self->sock, self->buf, self->res, [self](beast::error_code ec3, size_t) {
          if (ec3) return self->done(false);
          unsigned st = self->res.result_int();
          bool ok = false;
          if (self->hc.hc_.expected_statuses.empty()) ok = st == 200;
          for (const auto& [lo, hi] : self->hc.hc_.expected_statuses) ok = ok || (st >= lo && st < hi);
          self->done(ok);
        });
      });
    }
    void done(bool ok) {
      if (finished) return;
      finished = true;
      deadline.cancel();
      sock.close();
      hc.record(*host, ok);
    }
  };

  void round() {
    if (stopped_) return;
    auto set = cluster_->hosts();
    pending_ = set->hosts.size();
    if (pending_ == 0) return round_done();
    for (const auto& h : set->hosts) std::make_shared<Probe>(shared_from_this(), h)->run();
  }

  void record(Host& h, bool ok) {
    if (stopped_) return;  // a probe of a replaced configuration
    auto& st = state_[&h];
    if (ok) {
      st.fails = 0;
      // The first success makes a new host healthy; later, healthy_threshold successes in a row.
      if (!h.healthy.load() && (++st.successes >= hc_.healthy_threshold || !st.seen)) h.healthy = true;
    } else {
      st.successes = 0;
      if (h.healthy.load() && (++st.fails >= hc_.unhealthy_threshold || !st.seen)) h.healthy = false;
    }
    st.seen = true;
    if (--pending_ == 0) round_done();
  }

  void round_done() {
    if (on_first_round_) {
      auto f = std::move(on_first_round_);
      on_first_round_ = nullptr;
      f();
    }
    if (stopped_) return;
    timer_.expires_after(hc_.interval);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->round();
    });
  }

  struct HostState {
    uint32_t successes = 0, fails = 0;
    bool seen = false;
  };
  ControlPlane& cp_;
  std::shared_ptr<ClusterRuntime> cluster_;
  config::HealthCheck hc_;
  asio::steady_timer timer_;
  std::map<const Host*, HostState> state_;
  size_t pending_ = 0;
  std::function<void()> on_first_round_;
  bool stopped_ = false;
};

// ---- ControlPlane ----

ControlPlane::ControlPlane(ProxyOptions options, std::vector<int> dpu_cpus, unsigned workers)
    : options_(std::move(options)), dpu_cpus_(std::move(dpu_cpus)), stats_(workers), signals_(io_),
      watch_timer_(io_), dns_timer_(io_), secrets_init_timer_(io_), xds_init_timer_(io_) {
  for (unsigned i = 0; i < workers; ++i)
    workers_.push_back(std::make_unique<Worker>(i, stats_, options_.model, std::chrono::seconds(options_.drain_time_s),
                                                options_.dpu_speed, data_dilation_));
}

ControlPlane::~ControlPlane() {
  io_.stop();  // an xDS install still waited for (run() never ran) gives up
  if (xds_) xds_->stop();
  for (auto& [cluster, client] : sds_clients_) client->stop();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  for (auto& [k, ls] : listen_)
    for (int fd : ls.fds) ::close(fd);
}

std::map<std::string, ControlPlane::ListenSocket> ControlPlane::bind_listeners(const config::Bootstrap& b) {
  std::map<std::string, ListenSocket> out;
  try {
    for (const auto& l : b.listeners) {
      std::string key = address_key(l.address);
      if (auto it = listen_.find(key); it != listen_.end()) {
        out.emplace(key, it->second);  // the same address keeps its sockets across a reload
        continue;
      }
      ListenSocket ls;
      ls.key = key;
      size_t n = l.address.is_pipe() ? 1 : workers_.size();
      for (size_t i = 0; i < n; ++i) ls.fds.push_back(bind_socket(l.address, !l.address.is_pipe(), ls.family));
      out.emplace(key, std::move(ls));
    }
  } catch (...) {
    for (auto& [k, ls] : out)
      if (!listen_.count(k))
        for (int fd : ls.fds) ::close(fd);
    throw;
  }
  return out;
}

void ControlPlane::install(std::shared_ptr<const Snapshot> snapshot, std::vector<int> retired) {
  snapshot_ = snapshot;
  auto left = std::make_shared<std::atomic<size_t>>(workers_.size());
  auto to_close = std::make_shared<std::vector<int>>(std::move(retired));
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::map<std::string, std::pair<int, int>> fds;
    for (const auto& [key, ls] : listen_)
      if (i < ls.fds.size()) fds.emplace(key, std::make_pair(ls.fds[i], ls.family));
    Worker* w = workers_[i].get();
    asio::post(w->io(), [w, snapshot, fds = std::move(fds), left, to_close]() mutable {
      w->install(snapshot, std::move(fds));
      // Every worker has now dropped its copy of the listeners this install
      // leaves out (each takes installs in order, so none still queued names
      // them): closing ours closes the sockets, and new connections to a
      // listener that went away are refused while accepted ones carry on.
      if (--*left == 0)
        for (int fd : *to_close) ::close(fd);
    });
  }
}

void ControlPlane::start(config::Bootstrap bootstrap) {
  set_access_log_flush_interval(std::chrono::milliseconds(options_.file_flush_interval_ms));
  listen_ = bind_listeners(bootstrap);
  sds_ = std::make_unique<SdsSecrets>(io_, [this] { return snapshot_; });
  fill_secrets(bootstrap);
  auto snapshot = Snapshot::build(std::move(bootstrap), stats_, nullptr, ++version_, mono_ns());
  snapshot_ = snapshot;
  resolve_dns(true);
  for (auto& w : workers_) w->start(dpu_cpus_);
  install(snapshot);
  if (snapshot->bootstrap.admin.address) admin_ = std::make_unique<Admin>(*this, *snapshot->bootstrap.admin.address);
  file_mtime_ns_ = file_mtime_ns(options_.config_path);
  const auto take = [this](const std::string& stream, std::map<std::string, config::Secret> secrets) {
    return on_control_thread([&] { return take_secrets(stream, secrets); });
  };
  if (snapshot->bootstrap.dynamic_resources) {
    awaiting_xds_ = true;
    xds_ = std::make_unique<xds::AdsClient>(
        YAML::LoadFile(options_.config_path), snapshot->bootstrap,
        [this](config::Bootstrap b) {
          auto shared = std::make_shared<config::Bootstrap>(std::move(b));
          return on_control_thread([this, shared] { return apply(std::move(*shared), "xDS"); });
        },
        take);
    xds_->dilate(options_.dpu_speed, control_dilation_);
  }
  subscribe_secrets(snapshot->bootstrap);
  start_services();
  if (xds_) {
    xds_->start();
    if (const auto timeout = snapshot->bootstrap.dynamic_resources->initial_fetch_timeout; timeout.count() > 0) {
      xds_init_timer_.expires_after(timeout);
      xds_init_timer_.async_wait([this, timeout](const boost::system::error_code& ec) {
        if (ec || !awaiting_xds_) return;
        log_warn("mesh xDS: no complete configuration from the control plane within initial_fetch_timeout (" +
                 std::to_string(timeout.count()) + " ms): serving the static part, LIVE");
        awaiting_xds_ = false;
        maybe_ready();
      });
    }
  }
}

// Health checks (and readiness once their first round is in), DNS refresh, the file watch.
void ControlPlane::start_services() {
  for (auto& h : health_) h->stop();
  health_.clear();
  auto pending = std::make_shared<size_t>(0);
  hc_pending_ = pending;
  for (const auto& [name, c] : snapshot_->clusters)
    for (const auto& hc : c->config().health_checks) {
      health_.push_back(std::make_shared<HealthChecker>(*this, c, hc));
      ++*pending;
    }
  maybe_ready();
  for (auto& h : health_) {
    // A host of a checked cluster is unhealthy until its first check passes (Envoy's warming).
    h->start([this, pending] {
      --*pending;
      maybe_ready();
    });
  }
  bool any_dns = false;
  for (const auto& [name, c] : snapshot_->clusters) any_dns |= c->config().type == config::Cluster::Type::kStrictDns;
  if (any_dns) resolve_dns(false);
  if (options_.watch) watch_file();
}

void ControlPlane::resolve_dns(bool first) {
  std::chrono::milliseconds next{0};
  for (const auto& [name, c] : snapshot_->clusters) {
    if (c->config().type != config::Cluster::Type::kStrictDns) continue;
    std::vector<config::Endpoint> eps;
    for (const auto& ep : c->config().endpoints) {
      if (ep.address.is_pipe()) {
        eps.push_back(ep);
        continue;
      }
      // Resolution is rare and cheap next to a data-plane stall: it runs on this thread only.
      tcp::resolver r(io_);
      boost::system::error_code ec;
      auto results = r.resolve(ep.address.ip, std::to_string(ep.address.port), ec);
      if (ec) {
        log_warn("mesh: cluster " + name + ": cannot resolve " + ep.address.ip + ": " + ec.message());
        continue;
      }
      std::set<std::string> seen;
      for (const auto& e : results) {
        config::Endpoint resolved = ep;
        resolved.address.ip = e.endpoint().address().to_string();
        if (seen.insert(resolved.address.ip).second) eps.push_back(resolved);
      }
    }
    c->set_hosts(std::move(eps));
    next = next.count() == 0 ? c->config().dns_refresh_rate : std::min(next, c->config().dns_refresh_rate);
  }
  if (first || next.count() == 0) return;
  dns_timer_.expires_after(next);
  dns_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) resolve_dns(false);
  });
}

void ControlPlane::watch_file() {
  watch_timer_.expires_after(std::chrono::seconds(1));
  watch_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    int64_t m = file_mtime_ns(options_.config_path);
    if (m != 0 && m != file_mtime_ns_) {
      file_mtime_ns_ = m;
      reload("the file changed");
    }
    watch_file();
  });
}

void ControlPlane::reload(const std::string& why) {
  if (xds_) {
    log_warn("mesh: reload (" + why + ") ignored: with dynamic_resources the bootstrap file is read at start only");
    return;
  }
  std::string error;
  try {
    error = apply(config::load_bootstrap(options_.config_path), why);
  } catch (const std::exception& e) {  // ConfigError too
    error = e.what();
  }
  if (!error.empty()) log_error("mesh: reload refused, keeping the running configuration: " + error);
}

std::string ControlPlane::apply(config::Bootstrap bootstrap, const std::string& why) {
  std::map<std::string, ListenSocket> listen;
  bool taken = false;
  try {
    listen = bind_listeners(bootstrap);
    fill_secrets(bootstrap);
    // Built before anything changes: a snapshot that cannot be built (a TLS
    // context, say) leaves the running configuration as it was.
    auto snapshot = Snapshot::build(std::move(bootstrap), stats_, snapshot_.get(), ++version_, mono_ns());
    std::vector<int> retired;  // sockets of addresses that are gone
    for (auto& [k, ls] : listen_)
      if (!listen.count(k)) retired.insert(retired.end(), ls.fds.begin(), ls.fds.end());
    listen_ = std::move(listen);
    taken = true;
    install(snapshot, std::move(retired));
    subscribe_secrets(snapshot->bootstrap);
    dns_timer_.cancel();
    awaiting_xds_ = false;
    start_services();
    log_info("mesh: configuration reloaded (" + why + "), version " + std::to_string(version_));
    return "";
  } catch (const std::exception& e) {
    if (!taken)
      for (auto& [k, ls] : listen)
        if (!listen_.count(k))
          for (int fd : ls.fds) ::close(fd);
    return e.what();
  }
}

std::string ControlPlane::on_control_thread(std::function<std::string()> work) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  asio::post(io_, [work, done] { done->set_value(work()); });
  // The control loop may be stopping (it then never runs the work): stop waiting too.
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready)
    if (io_.stopped()) return "the proxy is stopping";
  return result.get();
}

void ControlPlane::maybe_ready() {
  if (hc_pending_ && *hc_pending_ == 0 && !awaiting_xds_ && !awaiting_secrets_) ready_ = true;
}

void ControlPlane::fill_secrets(config::Bootstrap& bootstrap) {
  const std::vector<std::string> missing = sds_->fill(bootstrap);
  if (missing.empty()) return;
  std::string names;
  for (const std::string& m : missing) names += (names.empty() ? "" : ", ") + m;
  log_info("mesh SDS: waiting for " + names + " (until then their listeners close connections, their clusters fail them)");
  if (ready_ || awaiting_secrets_) return;
  // Not ready until they are here, or for their initial_fetch_timeout (Envoy's init).
  awaiting_secrets_ = true;
  std::chrono::milliseconds timeout{0};
  bool forever = false;
  config::for_each_tls(bootstrap, [&](const config::CommonTlsContext& c) {
    for (const auto* sds : {&c.tls_certificate_sds, &c.validation_sds})
      if (*sds && (*sds)->pushed()) {
        forever |= (*sds)->initial_fetch_timeout.count() == 0;
        timeout = std::max(timeout, (*sds)->initial_fetch_timeout);
      }
  });
  if (forever) return;
  secrets_init_timer_.expires_after(timeout);
  secrets_init_timer_.async_wait([this, timeout](const boost::system::error_code& ec) {
    if (ec || !awaiting_secrets_) return;
    log_warn("mesh SDS: secrets not received within initial_fetch_timeout (" + std::to_string(timeout.count()) +
             " ms): LIVE without them; their listeners close connections until they come");
    awaiting_secrets_ = false;
    maybe_ready();
  });
}

void ControlPlane::subscribe_secrets(const config::Bootstrap& bootstrap) {
  for (auto& [stream, names] : config::pushed_secret_names(bootstrap)) {
    if (!stream.starts_with("grpc:")) continue;  // ads: the ADS client follows the configuration itself
    const std::string cluster = stream.substr(5);
    auto& client = sds_clients_[cluster];
    if (!client) {
      for (const config::Cluster& c : bootstrap.clusters)
        if (c.name == cluster)
          client = std::make_unique<xds::SdsClient>(c, bootstrap.node, [this](const std::string& s, std::map<std::string, config::Secret> secrets) {
            return on_control_thread([&] { return take_secrets(s, secrets); });
          });
      client->dilate(options_.dpu_speed, control_dilation_);
      client->subscribe(names);
      client->start();
      continue;
    }
    client->subscribe(names);
  }
}

std::string ControlPlane::take_secrets(const std::string& stream, const std::map<std::string, config::Secret>& secrets) {
  std::string error = sds_->push(stream, secrets);
  if (awaiting_secrets_ && snapshot_ && sds_->complete(snapshot_->bootstrap)) {
    awaiting_secrets_ = false;
    secrets_init_timer_.cancel();
    maybe_ready();
  }
  return error;
}

void ControlPlane::run() {
  signals_.add(SIGINT);
  signals_.add(SIGTERM);
  signals_.add(SIGHUP);
  signals_.add(SIGUSR1);  // Envoy's: reopen the access logs (logrotate moved them)
  std::function<void(const boost::system::error_code&, int)> on_signal = [this, &on_signal](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP || sig == SIGUSR1) {
      if (sig == SIGHUP) reload("SIGHUP");
      else reopen_access_logs();
      signals_.async_wait(on_signal);
      return;
    }
    stop();
  };
  signals_.async_wait(on_signal);
  // The control plane runs on the dpu's cores too: its loop is dilated as the workers' are.
  LoopDilation dilation(options_.dpu_speed, control_dilation_);
  run_loop(io_, dilation, "mesh control plane");
  if (xds_) xds_->stop();
  for (auto& [cluster, client] : sds_clients_) client->stop();
  for (auto& w : workers_) w->stop();
  for (auto& w : workers_) w->join();
  flush_access_logs();  // the lines of the last requests are not lost at exit
}

void ControlPlane::stop() {
  asio::post(io_, [this] {
    if (admin_) admin_->close();
    if (sds_) sds_->stop();
    for (auto& h : health_) h->stop();
    boost::system::error_code ignored;
    signals_.cancel(ignored);
    watch_timer_.cancel();
    dns_timer_.cancel();
    xds_init_timer_.cancel();
    secrets_init_timer_.cancel();
    io_.stop();
  });
}

uint64_t ControlPlane::workers_cpu_ns() const {
  uint64_t s = 0;
  for (const auto& w : workers_) s += w->cpu_ns();
  return s;
}

uint64_t ControlPlane::requests_total() const {
  uint64_t n = 0;
  for (const auto& l : snapshot_->listeners)
    if (l.hcm)
      for (const auto* s : l.hcm->stats) n += s->downstream_rq_total.get();
  return n;
}

std::vector<HostStatsView> ControlPlane::host_views() const {
  std::vector<HostStatsView> out;
  int64_t now = mono_ns();
  for (const auto& [name, c] : snapshot_->clusters)
    for (const auto& h : c->hosts()->hosts)
      out.push_back({name, h->label, h->healthy.load(), h->ejected_until_ns.load() > now, h->ejections.load()});
  return out;
}

}  // namespace dpukit::mesh
