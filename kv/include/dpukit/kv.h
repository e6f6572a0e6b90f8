// dpukit kv — PulseDB (docs/architecture.md §3.2) on an unmodified RocksDB.
//
// A RocksDB FileSystem that sends the write-persist half of compaction — the
// writes, range syncs and the final fsync+close of every SST file compaction
// writes — to a write-persist engine: in the dpu-side agent process
// (build/bin/dpukit-agent), or, for the async-host baseline, in a thread of
// this process. WAL, MANIFEST, flush outputs and all reads stay on the normal
// path. Two ways in:
//   - link it: env = rocksdb::NewCompositeEnv(dpukit::kv::NewOffloadFileSystem(
//         rocksdb::FileSystem::Default(), dpukit::kv::ParseOffloadUri(uri)));
//   - load it: LD_PRELOAD=build/lib/libdpukit_kv.so db_bench --fs_uri=pulsedb://AGENT_SOCKET
// URIs and tunables are documented in docs/kv.md and at ParseOffloadUri.
#pragma once

#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>

#include <cstdint>
#include <memory>
#include <string>

namespace dpukit::kv {

enum class OffloadMode {
  kPulseDb,    // pulsedb://SOCKET  — the engine in the agent process
  kAsyncHost,  // pulsedb-async://[POOLDIR] — the same engine in a thread of this process (+AsyncIO)
  kFilePool,   // pulsedb-filepool://POOLDIR — the SST file pool only, written by the compaction thread
};

// How an Append's bytes reach the engine (pulsedb only; async-host copies).
enum class PayloadPath {
  kPull,  // the engine pulls them from this process's memory (the DPU's DMA read; process_vm_readv)
  kCopy,  // Append copies them into the queue pair's shared payload ring
};

struct OffloadOptions {
  OffloadMode mode = OffloadMode::kPulseDb;
  std::string agent;                        // kPulseDb: the agent's socket
  std::string pool;                         // kAsyncHost (optional), kFilePool: the pool directory
  size_t pool_slots = 64;                   // for a pool this process creates
  uint64_t slot_bytes = 72ull << 20;
  size_t write_threshold = 4u << 20;        // appends batched into one write request
  size_t sync_interval = 1u << 20;          // a range_sync per this many bytes written
  size_t request_queue = 32u << 20;         // payload bytes per queue pair (power of two)
  size_t completion_queue = 1u << 20;       // completion ring bytes per queue pair (power of two)
  bool offload_flush = false;               // also send flush outputs (the paper: compaction only)
  // pulsedb. The copy by measurement in the compaction-bound regime (docs/kv.md:
  // level or better throughput, a third of the pull's write P99); a pull falls
  // back to kCopy if the kernel refuses it.
  PayloadPath payload = PayloadPath::kCopy;
  std::string stats_file;                   // if set: JSON counters written here at shutdown
};

// Parses "pulsedb://SOCKET", "pulsedb-async://[POOLDIR]" or
// "pulsedb-filepool://POOLDIR", each optionally followed by
// "?key:value&key:value" with keys write_threshold, sync_interval, queue,
// completion_queue, slots, slot_size (sizes take K/M/G), offload
// (compaction | compaction+flush), payload (pull | copy), stats. A plain
// "pulsedb" takes the socket from DPUKIT_AGENT. Anything the URI leaves out
// comes from the environment (DPUKIT_KV_WRITE_THRESHOLD,
// DPUKIT_KV_SYNC_INTERVAL, DPUKIT_KV_QUEUE, DPUKIT_KV_COMPLETION_QUEUE,
// DPUKIT_KV_SLOTS, DPUKIT_KV_SLOT_SIZE, DPUKIT_KV_OFFLOAD, DPUKIT_KV_PAYLOAD,
// DPUKIT_KV_STATS), then from the defaults above.
// Throws std::invalid_argument naming what is wrong.
OffloadOptions ParseOffloadUri(const std::string& uri);

// The FileSystem. Throws std::runtime_error if the mode cannot start (a pool
// that cannot be opened); an agent that is not there is not an error: files
// go the normal path until it is.
std::shared_ptr<rocksdb::FileSystem> NewOffloadFileSystem(std::shared_ptr<rocksdb::FileSystem> base,
                                                          const OffloadOptions& options);

// Optional: a listener that tells the FileSystem exactly which files are
// compaction outputs (OnTableFileCreationStarted). Without it the FileSystem
// recognises them by the preallocation call and the IO_LOW priority that
// RocksDB gives compaction outputs only.
std::shared_ptr<rocksdb::EventListener> NewOffloadListener();

}  // namespace dpukit::kv
