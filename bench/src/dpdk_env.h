// DPDK's EAL, started once per process and only when a DPDK backend is
// chosen: no hugepages, no PCI scan, without shared config or telemetry (no
// files under /var/run, so several runs can share a machine), with the software device PMDs this
// machine has (on a BlueField the hardware PMDs probe instead, same code).
#pragma once

#include <string>
#include <vector>

namespace dpukit::bench {

struct DpdkEnv {
  bool ok = false;
  std::string error;                // why EAL did not start
  std::vector<std::string> vdevs;   // the virtual devices that probed
  double tsc_hz = 0;                // rte_get_tsc_hz(), for cycle figures
};

// Starts EAL on first call (thread-safe) and returns its state; later calls
// return the same state. The calling thread's CPU affinity is kept (EAL
// would otherwise pin it to its main lcore).
const DpdkEnv& dpdk_env();

// The state if some backend already started EAL, else nullptr (never starts it).
const DpdkEnv* dpdk_env_if_started();

// One line per DPDK device (cryptodev, compressdev, regexdev) after EAL
// starts, or why EAL did not start.
std::vector<std::string> device_inventory();

// Throws Unavailable("DPDK EAL did not start: ...") unless EAL is up.
void require_dpdk();

// Extra EAL arguments (e.g. "--vdev=crypto_mlx5,..." on a DPU); must be set
// before the first dpdk_env() call. DPUKIT_EAL_ARGS in the environment adds
// to these.
void set_extra_eal_args(std::vector<std::string> args);

}  // namespace dpukit::bench
