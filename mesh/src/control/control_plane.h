// The control plane (the slow path), on a thread of its own so that none of
// its work runs on a data-plane thread: it binds listeners and installs
// compiled match-action tables into the workers, runs active health checks
// and STRICT_DNS resolution, returns ejected hosts, aggregates statistics for
// the admin listener, and reloads the configuration on SIGHUP or a file change.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/snapshot.h"
#include "dataplane/worker.h"
#include "dpukit/mesh.h"
#include "stats.h"
#include "tls/sds_secrets.h"
#include "xds/sds_client.h"
#include "xds/xds_client.h"

namespace dpukit::mesh {

class ControlPlane {
 public:
  ControlPlane(ProxyOptions options, std::vector<int> dpu_cpus, unsigned workers);
  ~ControlPlane();

  // Binds and installs `bootstrap`, starts the workers; throws on a listener
  // that cannot be bound (the message names the address).
  void start(config::Bootstrap bootstrap);
  // Runs the control loop on the calling thread until stop() (signals, /quitquitquit).
  void run();
  void stop();

  const StatsStore& stats() const { return stats_; }
  uint64_t workers_cpu_ns() const;
  uint64_t requests_total() const;
  // What the proxy's loops dilated at options.dpu_speed: the workers' and
  // pipeline stages', and the control plane's (its loop and the xDS stream's
  // thread: on a DPU they run on the Arm cores too).
  const DilationCounters& data_plane_dilation() const { return data_dilation_; }
  const DilationCounters& control_plane_dilation() const { return control_dilation_; }
  std::vector<HostStatsView> host_views() const;

 private:
  struct ListenSocket {
    std::string key;
    int family = 0;
    std::vector<int> fds;  // one per worker (SO_REUSEPORT), or one for a Unix socket
  };
  class Admin;
  class HealthChecker;

  // Hands `snapshot` to every worker; `retired` (listener sockets it leaves
  // out) close once every worker has taken it.
  void install(std::shared_ptr<const Snapshot> snapshot, std::vector<int> retired = {});
  std::map<std::string, ListenSocket> bind_listeners(const config::Bootstrap& b);
  void reload(const std::string& why);
  // Binds what is new and installs `bootstrap` (a reload, or a set from
  // xDS); "" when it runs, otherwise why not (the running one stays).
  std::string apply(config::Bootstrap bootstrap, const std::string& why);
  // From another thread (the xDS and SDS streams'): `work` on this thread, waited for.
  std::string on_control_thread(std::function<std::string()> work);
  // Secrets pushed on `stream`: into the running contexts; the proxy is ready once all it names are here.
  std::string take_secrets(const std::string& stream, const std::map<std::string, config::Secret>& secrets);
  // A configuration about to be built: the pushed secrets it names put in,
  // an SDS stream for each gRPC cluster it takes them from.
  void fill_secrets(config::Bootstrap& bootstrap);
  void subscribe_secrets(const config::Bootstrap& bootstrap);
  void maybe_ready();
  void watch_file();
  void resolve_dns(bool first);
  void start_services();

  ProxyOptions options_;
  std::vector<int> dpu_cpus_;
  StatsStore stats_;
  DilationCounters data_dilation_, control_dilation_;  // before the workers and the xDS client that add to them
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer watch_timer_, dns_timer_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<const Snapshot> snapshot_;
  std::map<std::string, ListenSocket> listen_;
  std::unique_ptr<Admin> admin_;
  std::unique_ptr<SdsSecrets> sds_;  // SDS secrets: files watched, pushes taken (tls/sds_secrets.h)
  std::map<std::string, std::unique_ptr<xds::SdsClient>> sds_clients_;  // SDS over gRPC, by cluster
  bool awaiting_secrets_ = false;               // not ready until the pushed secrets it names are here (Envoy's init)
  boost::asio::steady_timer secrets_init_timer_;  // their initial_fetch_timeout: then ready without them
  std::vector<std::shared_ptr<HealthChecker>> health_;  // shared: probes in flight outlive a reload
  std::atomic<bool> ready_{false};
  std::unique_ptr<xds::AdsClient> xds_;  // with dynamic_resources
  bool awaiting_xds_ = false;            // not ready until the first xDS set is installed (Envoy's init)
  boost::asio::steady_timer xds_init_timer_;  // initial_fetch_timeout: then ready with the static part
  std::shared_ptr<size_t> hc_pending_;        // health checks whose first round is still out
  uint64_t version_ = 0;
  int64_t file_mtime_ns_ = 0;
};

}  // namespace dpukit::mesh
