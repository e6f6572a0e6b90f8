// The SST file pool (PulseDB §III-C): slot files pre-allocated once in a
// directory outside the DB directory. A new compaction output takes a free
// slot and RocksDB's file name becomes a symlink to it; deleting the file
// recycles the slot.
//
// On disk, DIR holds slot-NNNNNN (the data; preallocated with
// FALLOC_FL_KEEP_SIZE, so the size stat reports is the bytes written), and
// `pool.index`: one fixed-size owner record per slot naming the symlink that
// uses it. A claim writes the owner record durably (fdatasync) before the
// caller creates the symlink, so after any crash a slot is in use exactly when
// its owner record names a path that is still a symlink to it; opening the
// pool frees every other slot. One process owns a pool at a time (flock).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dpukit::kv {

class SstPool {
 public:
  struct Options {
    std::string dir;
    size_t slots = 64;
    uint64_t slot_bytes = 72ull << 20;  // RocksDB's 64 MB target file size plus slack
  };
  struct Slot {
    uint32_t index;
    std::string path;  // absolute path of the slot file
  };
  struct Stats {
    size_t slots = 0;
    size_t free = 0;
    uint64_t claims = 0;
    uint64_t exhausted = 0;   // claims refused: no free slot
    uint64_t released = 0;
    uint64_t reclaimed = 0;   // freed when the pool was opened (owner gone)
  };

  // Creates the pool (the slot files, preallocated once) or opens an existing
  // one with the same geometry, takes its lock, and frees orphaned slots.
  // Throws std::runtime_error naming the directory and the problem (in use by
  // another process, geometry mismatch, no space, ...).
  explicit SstPool(const Options& options);
  ~SstPool();
  SstPool(const SstPool&) = delete;
  SstPool& operator=(const SstPool&) = delete;

  // Takes a free slot for `owner` (the absolute path that the caller will make
  // a symlink to Slot::path) and records the owner durably. nullopt when every
  // slot is taken (counted in Stats::exhausted). Thread-safe.
  std::optional<Slot> claim(const std::string& owner);
  // Frees a slot: truncates its data, preallocates it again, clears its owner
  // record. The caller has removed the symlink. Thread-safe.
  void release(uint32_t slot);
  // The slot `path` refers to, if it is a symlink to one of this pool's slots.
  std::optional<uint32_t> slot_of(const std::string& path) const;

  const std::string& dir() const { return dir_; }
  uint64_t slot_bytes() const { return options_.slot_bytes; }
  Stats stats() const;

 private:
  void lock();
  void open_index();
  void create_index(const std::string& path);
  void prepare_slot(uint32_t slot);
  // Preallocates the slot file; false on ENOSPC if `tolerate_no_space`, else throws.
  bool reserve(int fd, const std::string& path, bool tolerate_no_space) const;
  std::optional<std::string> read_owner(uint32_t slot) const;
  static bool links_to(const std::string& owner, const std::string& slot_file);
  void write_owner(uint32_t slot, const std::string& owner);
  void reset_slot(uint32_t slot);
  void close_fds();
  std::string slot_path(uint32_t slot) const;
  std::string what(const std::string& problem) const;  // "SST pool DIR: problem"

  Options options_;
  std::string dir_;  // absolute
  int lock_fd_ = -1;
  int index_fd_ = -1;
  mutable std::mutex mu_;
  std::vector<bool> used_;
  Stats stats_;
};

}  // namespace dpukit::kv
