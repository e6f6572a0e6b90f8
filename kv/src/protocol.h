// The queue-pair protocol between the host side (the RocksDB FileSystem
// plugin) and the write-persist engine (in the dpu-side agent, or in a thread
// of the host process for the async-host baseline). It rides on the core
// channel: ChannelRequest.op is an Op, ChannelRequest.id names the file.
//
// Per file the host sends, in order on ONE queue pair: kOpen, then kWrite or
// kWriteFrom and kRangeSync in file order, then exactly one kSyncClose. Only
// kHello, kWriteFrom, kSyncClose, kRecycle and kReleaseSlot are completed; an
// error of any write, open or range_sync of a file is kept by the engine and
// reported by that file's kSyncClose completion (the first one wins).
#pragma once

#include <cstdint>

namespace dpukit::kv {

inline constexpr uint32_t kProtocolVersion = 3;  // 2: kWriteFrom; 3: kReleaseSlot
// The oldest version an engine still serves (a version-2 host sends no kReleaseSlot).
inline constexpr uint32_t kMinProtocolVersion = 2;

enum class Op : uint32_t {
  // args[0] = kProtocolVersion. Completion: result = the engine's version,
  // status = 0, or -EPROTO if it does not speak the host's version (older
  // than kMinProtocolVersion, or newer than its own).
  kHello = 1,
  // id = file id (unique per queue pair for the life of the connection);
  // payload = RocksDB's absolute file name; args[0] = OpenFlags. The engine
  // takes a pool slot and makes the name a symlink to it, or, without a pool
  // or with the pool exhausted, creates a normal file at the name (counted).
  kOpen = 2,
  // id = file id; args[0] = offset in the file; payload = the bytes.
  kWrite = 3,
  // id = file id; args[0] = offset, args[1] = bytes: sync_file_range of that
  // range, once every write sent before it has completed.
  kRangeSync = 4,
  // id = file id; args[0] = the file's final size. Once every earlier write
  // and range_sync of the file completed: fsync linked to close.
  // Completion: status = the file's first error (0 if none, else -errno),
  // result = bytes the engine wrote, arg = the pool slot or kNoSlot.
  kSyncClose = 5,
  // id = request id; payload = a path. If it is a symlink into the pool, the
  // link is removed and its slot recycled; otherwise the file is unlinked.
  // The slot's release (writing its tail out) runs off the write thread, and
  // for a file of this queue pair still closing, after its close. A pool file
  // of this queue pair still open for writing is refused (-EBUSY, nothing
  // done). Completion: status 0 or -errno, result = 1 if a slot was
  // recycled, else 0.
  kRecycle = 6,
  // The DMA path (PulseDB §III-C): id = file id; args[0] = offset in the
  // file, args[1] = the address of the bytes in the host process, args[2] =
  // their length. The engine's DMA stage pulls them from the host's memory
  // (process_vm_readv: the host's process is the channel's peer) and writes
  // them. Completion once they are pulled (the host may reuse its buffer
  // then): status 0 and result = bytes pulled (0 if the file had failed
  // already: its sync_close reports why), or status -errno if the pull
  // itself failed (EPERM: cross-memory attach refused): nothing of it was
  // written and the host may send the bytes again as a kWrite; arg = args[0].
  kWriteFrom = 7,
  // An operator's `dpukit-agent pool release` through the running agent
  // (version 3): id = request id; payload = the pool directory the operator
  // named; args[0] = the slot. The slot is freed (its data dropped) only if
  // it is quarantined now and the directory is the engine's own pool.
  // Completion: arg = args[0]; status 0 and result = the bytes dropped;
  // -ENXIO: the engine has no pool, or another one; -EPERM: the slot is not
  // quarantined (free, in use or no such slot); else -errno of a release
  // that failed (the slot stays quarantined). Nothing is freed but on 0.
  kReleaseSlot = 8,
};

enum OpenFlags : uint64_t {
  kUsePool = 1,  // take a pool slot (otherwise: a normal file at the name)
};

inline constexpr uint64_t kNoSlot = UINT64_MAX;

}  // namespace dpukit::kv
