#include "pool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "dpukit/core/log.h"
#include "dpukit/core/shm.h"

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;

constexpr char kIndexName[] = "pool.index";
constexpr char kLockName[] = "pool.lock";
constexpr uint64_t kIndexMagic = 0x6c6f6f706b757064ull;  // "dpukpool" as little-endian bytes
constexpr uint32_t kIndexVersion = 1;
constexpr uint32_t kRecordMagic = 0x534c4f54;  // "SLOT"
// A page per record: an owner record is written whole and never shares a
// page with another slot's record.
constexpr size_t kRecordBytes = 4096;
constexpr size_t kHeaderBytes = 4096;

// The first page of pool.index: the geometry the pool was created with.
struct IndexHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t record_bytes;
  uint64_t slots;
  uint64_t slot_bytes;
};

// The start of a slot's owner record; the owner path follows. All zero = free.
struct RecordHeader {
  uint32_t magic;
  uint32_t slot;
  uint32_t owner_len;
  uint32_t reserved;
};
constexpr size_t kMaxOwner = kRecordBytes - sizeof(RecordHeader);

std::string slot_name(uint32_t slot) {
  char name[32];
  std::snprintf(name, sizeof(name), "slot-%06u", slot);
  return name;
}

[[noreturn]] void throw_sys(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

// "SST pool DIR: ACTION SUBJECT". No argument allocates, so an `errno` passed
// as `err` is read before anything could change it.
[[noreturn]] void throw_sys(int err, const std::string& dir, const char* action, const std::string& subject) {
  throw_sys(err, "SST pool " + dir + ": " + action + " " + subject);
}

void pwrite_all(int fd, const void* data, size_t len, off_t off, const std::string& what) {
  auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::pwrite(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_sys(n < 0 ? errno : EIO, what);
    p += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
}

bool pread_all(int fd, void* data, size_t len, off_t off) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::pread(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
  return true;
}

void fsync_dir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd) ::fsync(fd.get());
}

}  // namespace

// Everything the constructor opens is closed again if it throws (the
// destructor does not run then).
SstPool::SstPool(const Options& options) : options_(options) {
  if (options.dir.empty()) throw std::runtime_error("SST pool: no directory given");
  if (options.slots == 0 || options.slot_bytes == 0 || options.slots > UINT32_MAX)
    throw std::runtime_error("SST pool " + options.dir + ": needs 1 to 2^32-1 slots of at least one byte");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) throw std::runtime_error("SST pool " + options.dir + ": cannot create the directory: " + ec.message());
  // Canonical, so that slot_of() can compare it with what realpath() says.
  dir_ = fs::canonical(options.dir, ec).string();
  if (ec) throw std::runtime_error("SST pool " + options.dir + ": " + ec.message());
  try {
    lock();
    open_index();
    used_.assign(options_.slots, false);
    for (uint32_t i = 0; i < options_.slots; ++i) prepare_slot(i);
  } catch (...) {
    close_fds();
    throw;
  }
}

SstPool::~SstPool() { close_fds(); }

void SstPool::close_fds() {
  if (index_fd_ >= 0) ::close(index_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // drops the flock
  index_fd_ = lock_fd_ = -1;
}

std::string SstPool::slot_path(uint32_t slot) const { return dir_ + "/" + slot_name(slot); }

std::string SstPool::what(const std::string& problem) const { return "SST pool " + dir_ + ": " + problem; }

void SstPool::lock() {
  std::string path = dir_ + "/" + kLockName;
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw_sys(errno, dir_, "cannot open", path);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) throw std::runtime_error("pool " + dir_ + " is in use by another process");
    throw_sys(errno, dir_, "cannot lock", path);
  }
}

// Opens pool.index, creating it for a new pool. It is written under a
// temporary name and renamed, so a crash never leaves a half-written header.
void SstPool::open_index() {
  std::string path = dir_ + "/" + kIndexName;
  index_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (index_fd_ < 0 && errno == ENOENT) {
    create_index(path);
    index_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  if (index_fd_ < 0) throw_sys(errno, dir_, "cannot open", path);
  IndexHeader h{};
  if (!pread_all(index_fd_, &h, sizeof(h), 0) || h.magic != kIndexMagic)
    throw std::runtime_error(what(path + " is not an SST pool index"));
  if (h.version != kIndexVersion || h.record_bytes != kRecordBytes)
    throw std::runtime_error(what(path + " has index version " + std::to_string(h.version) + ", this build reads " +
                                  std::to_string(kIndexVersion)));
  if (h.slots != options_.slots || h.slot_bytes != options_.slot_bytes)
    throw std::runtime_error(what("it was created with " + std::to_string(h.slots) + " slots of " +
                                  std::to_string(h.slot_bytes) + " bytes, not " + std::to_string(options_.slots) +
                                  " slots of " + std::to_string(options_.slot_bytes) +
                                  " bytes: use the same --slots and --slot-size, or another directory"));
  const off_t bytes = static_cast<off_t>(kHeaderBytes + h.slots * kRecordBytes);
  struct stat st {};
  if (::fstat(index_fd_, &st) != 0 || st.st_size < bytes) throw std::runtime_error(what(path + " is truncated"));
  // An index made by an earlier build is sparse: allocate its records now
  // (a no-op for one made by this build). If the space is not there, claims
  // of slots whose record is unallocated fail until it is.
  if (::fallocate(index_fd_, 0, 0, bytes) != 0)
    log_warn(what(std::string("cannot allocate the owner records of ") + kIndexName + ": " + std::strerror(errno)));
}

void SstPool::create_index(const std::string& path) {
  std::string tmp = path + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw_sys(errno, dir_, "cannot create", tmp);
  // ftruncate gives all-zero (free) owner records, and fallocate their
  // space: recording or clearing an owner must never need new space, or a
  // full pool filesystem would refuse claims of slots that are preallocated.
  const off_t bytes = static_cast<off_t>(kHeaderBytes + options_.slots * kRecordBytes);
  if (::ftruncate(fd.get(), bytes) != 0) throw_sys(errno, dir_, "cannot size", tmp);
  if (::fallocate(fd.get(), 0, 0, bytes) != 0) throw_sys(errno, dir_, "cannot allocate", tmp);
  IndexHeader h{kIndexMagic, kIndexVersion, kRecordBytes, options_.slots, options_.slot_bytes};
  pwrite_all(fd.get(), &h, sizeof(h), 0, what("cannot write " + tmp));
  if (::fdatasync(fd.get()) != 0) throw_sys(errno, dir_, "cannot sync", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw_sys(errno, dir_, "cannot rename", tmp);
  fsync_dir(dir_);
}

// Makes sure slot file `slot` exists and is preallocated (a new pool, or one
// whose creation was interrupted), then decides from its owner record whether
// it is in use: only if the owner is still a symlink to it.
void SstPool::prepare_slot(uint32_t slot) {
  std::string path = slot_path(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  const bool existed = !fd && errno == EEXIST;
  if (existed) fd = UniqueFd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw_sys(errno, dir_, "cannot create", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_sys(errno, dir_, "cannot stat", path);
  // A slot that lost its reservation to a full filesystem (see reset_slot)
  // still works; only a new one must get its space now.
  if (static_cast<uint64_t>(st.st_blocks) * 512 < options_.slot_bytes && !reserve(fd.get(), path, existed))
    log_warn(what("no space to preallocate " + path + " again; it is used without its reservation"));
  std::optional<std::string> owner = read_owner(slot);
  if (owner && links_to(*owner, path)) {
    used_[slot] = true;
    return;
  }
  // Orphaned: the owner's symlink is gone (or was never made), or data
  // without an owner (a release interrupted after clearing the record).
  if (owner || st.st_size != 0) {
    reset_slot(slot);
    ++stats_.reclaimed;
  }
}

bool SstPool::reserve(int fd, const std::string& path, bool tolerate_no_space) const {
  if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(options_.slot_bytes)) == 0) return true;
  int err = errno;
  if (err == ENOSPC && tolerate_no_space) return false;
  if (err == EOPNOTSUPP)
    throw_sys(err, what("the filesystem refuses fallocate(FALLOC_FL_KEEP_SIZE) for " + path +
                        "; put the pool on ext4, xfs, btrfs or tmpfs"));
  if (err == ENOSPC)
    throw_sys(err, what("no space to preallocate " + path + " (" + std::to_string(options_.slots) + " slots of " +
                        std::to_string(options_.slot_bytes) + " bytes)"));
  throw_sys(err, what("cannot preallocate " + path));
}

// The owner named by slot `slot`'s record, or nullopt if it is free. A record
// that fails its checks (torn by a crash during a claim, before the symlink
// existed) counts as an owner that is gone: it names nothing.
std::optional<std::string> SstPool::read_owner(uint32_t slot) const {
  char rec[kRecordBytes];
  if (!pread_all(index_fd_, rec, sizeof(rec), static_cast<off_t>(kHeaderBytes + slot * kRecordBytes)))
    throw std::runtime_error(what(std::string("cannot read ") + kIndexName));
  RecordHeader h;
  std::memcpy(&h, rec, sizeof(h));
  if (h.magic == 0 && h.owner_len == 0) return std::nullopt;
  if (h.magic != kRecordMagic || h.slot != slot || h.owner_len == 0 || h.owner_len > kMaxOwner) return "";
  return std::string(rec + sizeof(h), h.owner_len);
}

// True if `owner` is a symlink that resolves to `slot_file`.
bool SstPool::links_to(const std::string& owner, const std::string& slot_file) {
  struct stat st {};
  if (owner.empty() || ::lstat(owner.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(owner.c_str(), nullptr), &std::free);
  return real && slot_file == real.get();
}

void SstPool::write_owner(uint32_t slot, const std::string& owner) {
  char rec[kRecordBytes] = {};
  if (!owner.empty()) {
    RecordHeader h{kRecordMagic, slot, static_cast<uint32_t>(owner.size()), 0};
    std::memcpy(rec, &h, sizeof(h));
    std::memcpy(rec + sizeof(h), owner.data(), owner.size());
  }
  std::string problem = what("cannot record the owner of " + slot_name(slot) + " in " + kIndexName);
  pwrite_all(index_fd_, rec, sizeof(rec), static_cast<off_t>(kHeaderBytes + slot * kRecordBytes), problem);
  // Durable before the caller makes the symlink (claim) or reuses the slot (release).
  if (::fdatasync(index_fd_) != 0) throw_sys(errno, problem);
}

// Drops a slot's data, keeps its space allocated, clears its owner. The
// truncation frees the space too: if another slot that outgrew its
// reservation takes it meanwhile, the slot is freed all the same (it works,
// its writes just need free space) rather than kept out of use for good.
void SstPool::reset_slot(uint32_t slot) {
  std::string path = slot_path(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw_sys(errno, dir_, "cannot open", path);
  if (::ftruncate(fd.get(), 0) != 0) throw_sys(errno, dir_, "cannot truncate", path);
  if (!reserve(fd.get(), path, true))
    log_warn(what("no space to preallocate " + path + " again; it is used without its reservation"));
  write_owner(slot, "");
}

std::optional<SstPool::Slot> SstPool::claim(const std::string& owner) {
  if (owner.empty() || owner.size() > kMaxOwner)
    throw_sys(ENAMETOOLONG, what("owner path of " + std::to_string(owner.size()) + " bytes does not fit a record"));
  uint32_t slot = 0;
  {
    std::lock_guard lock(mu_);
    while (slot < used_.size() && used_[slot]) ++slot;
    if (slot == used_.size()) {
      ++stats_.exhausted;
      return std::nullopt;
    }
    used_[slot] = true;  // taken while its record is written outside the lock
  }
  try {
    write_owner(slot, owner);
  } catch (...) {
    std::lock_guard lock(mu_);
    used_[slot] = false;
    throw;
  }
  std::lock_guard lock(mu_);
  ++stats_.claims;
  return Slot{slot, slot_path(slot)};
}

void SstPool::release(uint32_t slot) {
  {
    std::lock_guard lock(mu_);
    if (slot >= used_.size() || !used_[slot])
      throw std::invalid_argument(what(slot_name(slot) + " is not in use, so it cannot be released"));
  }
  // On failure the slot stays taken: the next open frees it, since its
  // owner's symlink is gone.
  reset_slot(slot);
  std::lock_guard lock(mu_);
  used_[slot] = false;
  ++stats_.released;
}

std::optional<uint32_t> SstPool::slot_of(const std::string& path) const {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return std::nullopt;
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (!real) return std::nullopt;
  fs::path target(real.get());
  if (target.parent_path() != dir_) return std::nullopt;
  std::string name = target.filename().string();
  unsigned slot = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "slot-%6u%n", &slot, &used) != 1 || static_cast<size_t>(used) != name.size() ||
      slot >= options_.slots || name != slot_name(slot))
    return std::nullopt;
  return slot;
}

SstPool::Stats SstPool::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.slots = used_.size();
  s.free = 0;
  for (bool u : used_) s.free += !u;
  return s;
}

}  // namespace dpukit::kv
