// The SST file pool (PulseDB §III-C): slot files pre-allocated once in a
// directory outside the DB directory. A new compaction output takes a free
// slot and RocksDB's file name becomes a symlink to it; deleting the file
// recycles the slot.
//
// On disk, DIR holds slot-NNNNNN (the data), and `pool.index`: a header with
// the geometry, then one owner record per slot, each with a CRC-32C. A free
// slot is **written out**: the slot's size, every block allocated and written
// (zeros, or a released file's old bytes), so that the agent's direct writes
// into it are overwrites that need no unwritten-extent conversion (done at I/O
// completion in the kernel's workers otherwise). The writer writes the file
// from offset 0 and truncates the slot to the file's size when it closes it;
// a release writes the tail out again. (ext4 cannot keep written blocks past
// the end of a file, so a free slot cannot be both empty and written out.)
// A claim writes the owner record durably (fdatasync)
// before the caller creates the symlink. The pool never destroys data it
// cannot account for: when it is opened, a slot is reused only if it can be
// shown to be free (its record says free and it is empty or exactly the
// slot's size, the two shapes a free slot has; its owner path
// exists and is not a link to it; or its owner is gone from the very
// directory it was created in). A claimed slot whose owner cannot be found
// (the DB's filesystem not mounted, its directory renamed away) or whose
// record is damaged is **quarantined**: kept, reported, never claimed, until
// its owner is back or an operator releases it. One process owns a pool at a
// time (flock); `check_pool` reads one without taking it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dpukit/core/shm.h"  // UniqueFd
#include "dpukit/kv_agent.h"  // QuarantinedSlot, PoolCheck

namespace dpukit::kv {

class SstPool {
 public:
  struct Options {
    std::string dir;
    size_t slots = 64;
    uint64_t slot_bytes = 72ull << 20;  // RocksDB's 64 MB target file size plus slack
    // Open an existing pool with the geometry it was created with (slots and
    // slot_bytes are ignored); never create one.
    bool existing_only = false;
    // Keep free slots written out (above). False for writers that append to
    // the slot (RocksDB's reopened files, filepool mode): their free slots
    // are empty and preallocated with FALLOC_FL_KEEP_SIZE instead.
    bool write_out = true;
  };
  struct Slot {
    uint32_t index;
    std::string path;  // absolute path of the slot file
  };
  struct Stats {
    size_t slots = 0;
    size_t free = 0;
    size_t quarantined = 0;   // now
    uint64_t claims = 0;
    uint64_t exhausted = 0;   // claims refused: no free slot
    uint64_t released = 0;
    uint64_t reclaimed = 0;   // freed without a release: shown free when the pool was opened or re-examined
    uint64_t returned = 0;    // quarantined slots whose owner came back
  };
  using Quarantined = QuarantinedSlot;

  // Creates the pool or opens an existing one with the same geometry, takes
  // its lock, frees the slots shown free and quarantines the ones it cannot
  // account for (each logged). Creation is atomic: slot files are made while
  // the index is `pool.index.tmp`, and the rename to `pool.index` completes
  // the pool; on failure everything made is removed again. Throws
  // std::runtime_error naming the directory and the problem (in use by
  // another process, geometry mismatch, no space, a damaged header, ...).
  explicit SstPool(const Options& options);
  ~SstPool();
  SstPool(const SstPool&) = delete;
  SstPool& operator=(const SstPool&) = delete;

  // Takes a free slot for `owner` (the absolute path that the caller will make
  // a symlink to Slot::path) and records the owner durably. nullopt when every
  // slot is taken (counted in Stats::exhausted). Thread-safe.
  std::optional<Slot> claim(const std::string& owner);
  // Frees a slot in use or quarantined: writes its tail out again (a slot
  // larger than the slot's size is cut to it), records it free. The caller has removed the symlink (or an
  // operator decided the quarantined data may go). Thread-safe.
  void release(uint32_t slot);
  // The slot `path` refers to, if it is a symlink to one of this pool's slots.
  std::optional<uint32_t> slot_of(const std::string& path) const;
  // Frees slot `slot` only if it is quarantined now (an operator decided its
  // data may go), as release() does; what it held, or nullopt (and nothing
  // done) if it is not quarantined. Thread-safe.
  std::optional<Quarantined> release_quarantined(uint32_t slot);
  // Looks again at the quarantined slots: one whose owner is back is in use
  // again, one now shown free is written out and freed (outside the lock:
  // meanwhile it is neither claimed nor released). Returns how many left
  // quarantine.
  size_t recheck();
  std::vector<Quarantined> quarantined() const;

  const std::string& dir() const { return dir_; }
  uint64_t slot_bytes() const { return options_.slot_bytes; }
  size_t slots() const { return options_.slots; }
  Stats stats() const;

 private:
  enum class State : uint8_t { kFree, kInUse, kQuarantined, kBusy };
  void lock();
  void open_index();
  void create(const std::string& index_path);
  void remove_unfinished_creation(const std::string& tmp);
  UniqueFd new_index(const std::string& tmp) const;
  void migrate_v1(const std::string& index_path);
  void open_slot(uint32_t slot);
  std::optional<std::string> examine(uint32_t slot, bool at_open);
  void freed(uint32_t slot, const std::string& reason);
  std::optional<Quarantined> release_if(uint32_t slot, bool only_quarantined);
  // Preallocates the slot file (FALLOC_FL_KEEP_SIZE, or the whole slot if
  // `sized`); false on ENOSPC if `tolerate_no_space`, else throws.
  bool reserve(int fd, const std::string& path, bool tolerate_no_space, bool sized = false,
               uint64_t from = 0) const;
  // Writes the slot out from `from` on; false on ENOSPC if tolerated.
  bool write_out(int fd, const std::string& path, uint64_t from, bool tolerate_no_space) const;
  // write_out(), or empty_slot() where there is no space; true if written out.
  bool write_out_or_empty(int fd, const std::string& path, uint64_t from) const;
  // Gives a free slot its free shape (written out, or empty and preallocated).
  void ready_free(uint32_t slot);
  // Empties the slot file and preallocates it again (a free slot of a pool
  // that does not write out, or one that had no space to be written out).
  void empty_slot(int fd, const std::string& path) const;
  void write_record(uint32_t slot, const std::string& owner);
  void reset_slot(uint32_t slot);
  void close_fds();
  std::string slot_path(uint32_t slot) const;
  std::string what(const std::string& problem) const;  // "SST pool DIR: problem"

  Options options_;
  std::string dir_;  // absolute
  int lock_fd_ = -1;
  int index_fd_ = -1;
  mutable std::mutex mu_;
  std::vector<State> state_;
  std::vector<Quarantined> quarantine_;  // by slot; meaningful where state_ is kQuarantined
  Stats stats_;
  uint64_t written_at_open_ = 0;  // bytes written out at open (free slots an earlier build left empty)
};

// check_pool and verdict_name (`dpukit-agent pool check`) are in dpukit/kv_agent.h.

}  // namespace dpukit::kv
