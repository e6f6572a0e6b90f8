#include "dpdk_env.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include <rte_bus_vdev.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_compressdev.h>
#include <rte_cryptodev.h>
#include <rte_log.h>
#include <rte_regexdev.h>

#include "operator.h"

namespace dpukit::bench {
namespace {

std::vector<std::string>& extra_args() {
  static std::vector<std::string> args;
  return args;
}

// The soft PMDs of this machine's DPDK; each is probed on its own after EAL
// starts, so one that is missing does not stop the others.
const char* const kSoftDevices[] = {"crypto_aesni_mb", "crypto_openssl", "compress_isal"};

DpdkEnv start() {
  DpdkEnv env;
  cpu_set_t saved;
  CPU_ZERO(&saved);
  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);

  std::vector<std::string> args = {"dpukit-bench", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "-m", "512",
                                   "--log-level=lib.*:error", "--log-level=pmd.*:error",
                                   "--log-level=user1:error"};
  for (const auto& a : extra_args()) args.push_back(a);
  if (const char* e = std::getenv("DPUKIT_EAL_ARGS")) {
    std::istringstream in(e);
    for (std::string w; in >> w;) args.push_back(w);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  if (rc < 0) {
    env.error = std::string("rte_eal_init: ") + rte_strerror(rte_errno);
    return env;
  }
  env.ok = true;
  env.tsc_hz = static_cast<double>(rte_get_tsc_hz());
  for (const char* dev : kSoftDevices) {
    if (rte_vdev_init(dev, nullptr) == 0) env.vdevs.push_back(dev);
  }
  return env;
}

}  // namespace

std::vector<std::string> device_inventory() {
  std::vector<std::string> v;
  const DpdkEnv& env = dpdk_env();
  if (!env.ok) return {"DPDK EAL did not start: " + env.error};
  for (uint8_t i = 0; i < rte_cryptodev_count(); ++i) {
    rte_cryptodev_info info;
    rte_cryptodev_info_get(i, &info);
    v.push_back("cryptodev " + std::to_string(i) + ": " + rte_cryptodev_name_get(i) + " (" + info.driver_name +
                ", " + std::to_string(info.max_nb_queue_pairs) + " queue pairs)");
  }
  for (uint8_t i = 0; i < rte_compressdev_count(); ++i) {
    rte_compressdev_info info;
    rte_compressdev_info_get(i, &info);
    v.push_back("compressdev " + std::to_string(i) + ": " + rte_compressdev_name_get(i) + " (" + info.driver_name +
                ")");
  }
  if (rte_regexdev_count() == 0)
    v.push_back("regexdev: none (a regexdev needs RXP hardware, e.g. BlueField-2's; no software PMD exists)");
  for (uint8_t i = 0; i < rte_regexdev_count(); ++i) v.push_back("regexdev " + std::to_string(i));
  return v;
}

void set_extra_eal_args(std::vector<std::string> args) { extra_args() = std::move(args); }

namespace {
std::once_flag g_once;
DpdkEnv g_env;
std::atomic<bool> g_started{false};
}  // namespace

const DpdkEnv& dpdk_env() {
  std::call_once(g_once, [] {
    g_env = start();
    g_started = true;
  });
  return g_env;
}

const DpdkEnv* dpdk_env_if_started() { return g_started ? &g_env : nullptr; }

void require_dpdk() {
  const DpdkEnv& env = dpdk_env();
  if (!env.ok) throw Unavailable("DPDK EAL did not start: " + env.error);
}

}  // namespace dpukit::bench
