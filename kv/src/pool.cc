#include "pool.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <isa-l/crc.h>

#include "dpukit/core/log.h"
#include "dpukit/core/shm.h"

namespace dpukit::kv {
namespace {

// `v` with `digits` after the point, for the creation's progress lines.
std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

namespace fs = std::filesystem;

constexpr char kIndexName[] = "pool.index";
constexpr char kLockName[] = "pool.lock";
constexpr uint64_t kIndexMagic = 0x6c6f6f706b757064ull;  // "dpukpool" as little-endian bytes
// Version 1 had owner records without checksums, all-zero meaning free; it is
// read and rewritten as version 2 when an owner opens it (see migrate_v1).
constexpr uint32_t kIndexVersion = 2;
constexpr uint32_t kRecordMagic = 0x534c4f54;  // "SLOT"
constexpr uint32_t kRecordFree = 1, kRecordOwned = 2;
// A page per record: an owner record is written whole and never shares a
// page with another slot's record.
constexpr size_t kRecordBytes = 4096;
constexpr size_t kHeaderBytes = 4096;
// Linux 6.17's fallocate mode that has the device write the zeros and leaves
// written extents; refused (EOPNOTSUPP) by devices without write-zeroes.
constexpr int kFallocWriteZeroes = 0x80;
// Zeros are written in pieces of this size, direct I/O aligned to a page.
constexpr size_t kZeroChunk = 1 << 20;
constexpr uint64_t kDirectAlign = 4096;

// The first page of pool.index: the geometry the pool was created with.
// Version 1 ended after slot_bytes.
struct IndexHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t record_bytes;
  uint64_t slots;
  uint64_t slot_bytes;
  uint32_t crc;  // CRC-32C of the fields above (version 2)
  uint32_t reserved;
};

// The identity of the directory an owner was created in: an owner missing
// from that very directory was deleted; missing from another one at the same
// path (a filesystem not mounted, a directory renamed and replaced) it may
// only be out of sight. fsid (statfs) is the filesystem's, stable across
// reboots on ext4 and btrfs, where device numbers may change.
struct DirId {
  uint64_t dev = 0, ino = 0, fsid = 0;
  bool known() const { return ino != 0; }
};

// The start of a slot's owner record; the owner path follows. All zero, or a
// wrong checksum: damaged.
struct RecordHeader {
  uint32_t magic;
  uint32_t slot;
  uint32_t state;  // kRecordFree or kRecordOwned
  uint32_t owner_len;
  uint64_t dir_dev, dir_ino, dir_fsid;  // DirId of the owner's directory; 0 if unknown (from version 1)
  uint32_t crc;                         // CRC-32C of the record up to owner_len, with this field 0
  uint32_t reserved;
};
constexpr size_t kMaxOwner = kRecordBytes - sizeof(RecordHeader);

struct RecordV1 {
  uint32_t magic;
  uint32_t slot;
  uint32_t owner_len;
  uint32_t reserved;
};

// A decoded owner record.
struct Record {
  bool owned = false;
  std::string owner;
  DirId dir;
};

// CRC-32C (Castagnoli), the checksum RocksDB and ext4 use, from ISA-L
// (whose crc32_iscsi neither starts from nor ends with the inversion).
uint32_t crc32c(const void* data, size_t len) {
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(len), ~0u);
}

uint32_t header_crc(const IndexHeader& h) { return crc32c(&h, offsetof(IndexHeader, crc)); }

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

off_t record_offset(uint32_t slot) { return static_cast<off_t>(kHeaderBytes + uint64_t{slot} * kRecordBytes); }

// The directory `owner` is in, if it exists.
std::optional<DirId> dir_id_of(const std::string& owner) {
  std::string parent = fs::path(owner).parent_path().string();
  struct stat st {};
  struct statfs sf {};
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::statfs(parent.c_str(), &sf) != 0)
    return std::nullopt;
  uint64_t fsid;
  static_assert(sizeof(sf.f_fsid) == sizeof(fsid));
  std::memcpy(&fsid, &sf.f_fsid, sizeof(fsid));
  return DirId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), fsid};
}

bool same_dir(const DirId& now, const DirId& then) {
  if (now.ino != then.ino) return false;
  return then.fsid != 0 && now.fsid != 0 ? now.fsid == then.fsid : now.dev == then.dev;
}

// A version-2 record: free if `owner` is empty.
std::array<char, kRecordBytes> encode_record(uint32_t slot, const std::string& owner, const DirId& dir) {
  std::array<char, kRecordBytes> rec{};
  RecordHeader h{kRecordMagic, slot, owner.empty() ? kRecordFree : kRecordOwned, static_cast<uint32_t>(owner.size()),
                 dir.dev,      dir.ino, dir.fsid, 0, 0};
  std::memcpy(rec.data(), &h, sizeof(h));
  std::memcpy(rec.data() + sizeof(h), owner.data(), owner.size());
  h.crc = crc32c(rec.data(), sizeof(h) + owner.size());
  std::memcpy(rec.data(), &h, sizeof(h));
  return rec;
}

// nullopt: damaged (what a version-2 record that fails its checks, or a
// version-1 record that is neither all-zero nor well-formed, is).
std::optional<Record> decode_record(const char* rec, uint32_t slot, uint32_t version) {
  if (version == 1) {
    RecordV1 h;
    std::memcpy(&h, rec, sizeof(h));
    if (h.magic == 0 && h.owner_len == 0) return Record{};
    if (h.magic != kRecordMagic || h.slot != slot || h.owner_len == 0 || h.owner_len > kRecordBytes - sizeof(h))
      return std::nullopt;
    return Record{true, std::string(rec + sizeof(h), h.owner_len), {}};
  }
  RecordHeader h;
  std::memcpy(&h, rec, sizeof(h));
  if (h.magic != kRecordMagic || h.slot != slot || h.owner_len > kMaxOwner) return std::nullopt;
  if (!(h.state == kRecordFree && h.owner_len == 0) && !(h.state == kRecordOwned && h.owner_len > 0))
    return std::nullopt;
  RecordHeader zeroed = h;
  zeroed.crc = 0;
  std::array<char, kRecordBytes> copy;
  std::memcpy(copy.data(), rec, sizeof(h) + h.owner_len);
  std::memcpy(copy.data(), &zeroed, sizeof(zeroed));
  if (crc32c(copy.data(), sizeof(h) + h.owner_len) != h.crc) return std::nullopt;
  if (h.state == kRecordFree) return Record{};
  return Record{true, std::string(rec + sizeof(h), h.owner_len), DirId{h.dir_dev, h.dir_ino, h.dir_fsid}};
}

// Reads slot `slot`'s record. A reader without the pool's lock may catch a
// record half-written by its owner: `tries` reads before it counts as damaged.
std::optional<Record> read_record(int fd, uint32_t slot, uint32_t version, int tries = 1) {
  std::array<char, kRecordBytes> rec;
  for (int i = 0;; ++i) {
    if (!pread_all(fd, rec.data(), rec.size(), record_offset(slot)))
      throw std::runtime_error(std::string("cannot read ") + kIndexName);
    if (auto r = decode_record(rec.data(), slot, version); r || i + 1 >= tries) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The target `link` names, if it is a symlink.
std::string link_target(const std::string& link) {
  std::error_code ec;
  fs::path t = fs::read_symlink(link, ec);
  return ec ? std::string() : t.string();
}

std::string realpath_of(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  return real ? std::string(real.get()) : std::string();
}

// How far from offset 0 up to `end` the file is written blocks: the offset
// of its first hole or unwritten (preallocated) extent, or `end`. nullopt
// where the filesystem has no FIEMAP (tmpfs, which has no unwritten extents).
std::optional<uint64_t> written_through(int fd, uint64_t end) {
  constexpr unsigned kExtents = 64;
  std::vector<char> buf(sizeof(fiemap) + kExtents * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  uint64_t at = 0;
  while (at < end) {
    std::fill(buf.begin(), buf.end(), 0);
    fm->fm_start = at;
    fm->fm_length = end - at;
    fm->fm_flags = FIEMAP_FLAG_SYNC;  // delayed allocations are reported as what they become
    fm->fm_extent_count = kExtents;
    if (::ioctl(fd, FS_IOC_FIEMAP, fm) != 0) return at == 0 ? std::nullopt : std::optional<uint64_t>(at);
    const uint64_t before = at;
    for (unsigned i = 0; i < fm->fm_mapped_extents; ++i) {
      const fiemap_extent& e = fm->fm_extents[i];
      if (e.fe_logical > at || (e.fe_flags & (FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_UNKNOWN))) return at;
      at = std::max<uint64_t>(at, e.fe_logical + e.fe_length);
    }
    if (at == before) return at;  // a hole to the end
  }
  return end;
}

struct Judgement {
  PoolCheck::Verdict verdict;
  std::string reason;
};

// Whether slot `slot` (its record, its file and the bytes in it) is free, in
// use, shown free (reclaimable) or not accounted for (quarantined). Read-only.
// A free slot is empty (preallocated, or made by an earlier build) or written
// out to the slot's size; a release leaves one of the two before it records
// the slot free, so any other size is data the pool did not leave there.
Judgement judge(uint32_t slot, const std::optional<Record>& rec, const std::string& slot_file, uint64_t bytes,
                uint64_t slot_bytes) {
  using V = PoolCheck::Verdict;
  if (!rec) return {V::kQuarantined, std::string("its owner record in ") + kIndexName + " is damaged"};
  if (!rec->owned) {
    if (bytes == 0 || bytes == slot_bytes) return {V::kFree, ""};
    return {V::kQuarantined, "it holds " + std::to_string(bytes) +
                                 " bytes, but its record says free (a free slot is empty or written out to " +
                                 std::to_string(slot_bytes) + ")"};
  }
  const std::string& owner = rec->owner;
  struct stat st {};
  if (::lstat(owner.c_str(), &st) == 0) {
    if (!S_ISLNK(st.st_mode)) return {V::kReclaimable, owner + " is now another file"};
    if (realpath_of(owner) == slot_file) return {V::kInUse, ""};
    std::string target = link_target(owner);
    // A link by this slot's name that does not reach it: the pool directory
    // was moved, and the data is still the owner's.
    if (fs::path(target).filename() == slot_name(slot))
      return {V::kQuarantined, owner + " links to " + target + ", not to this slot (was the pool moved?)"};
    return {V::kReclaimable, owner + " now links to " + target};
  }
  const int err = errno;
  if (err != ENOENT && err != ENOTDIR) return {V::kQuarantined, "cannot look at " + owner + ": " + std::strerror(err)};
  const std::string parent = fs::path(owner).parent_path().string();
  if (!rec->dir.known())
    return {V::kQuarantined, owner + " is missing, and its record (from a version-1 index) cannot show it was deleted"};
  std::optional<DirId> now = dir_id_of(owner);
  if (!now) return {V::kQuarantined, owner + " is missing with its directory " + parent + " (not mounted, renamed or removed?)"};
  if (!same_dir(*now, rec->dir))
    return {V::kQuarantined, owner + " is missing, and " + parent +
                                 " is not the directory it was made in (a filesystem not mounted there, or the directory replaced?)"};
  return {V::kReclaimable, owner + " was deleted"};
}

// Reads and checks pool.index's header; the problem, or "".
std::string read_header(int fd, IndexHeader& h) {
  h = {};
  if (!pread_all(fd, &h, sizeof(h), 0) || h.magic != kIndexMagic) return std::string("is not an SST pool index");
  if (h.version != 1 && h.version != kIndexVersion)
    return "has index version " + std::to_string(h.version) + ", this build reads 1 and " + std::to_string(kIndexVersion);
  if (h.version == kIndexVersion && h.crc != header_crc(h)) return "has a damaged header (checksum)";
  if (h.record_bytes != kRecordBytes || h.slots == 0 || h.slots > UINT32_MAX || h.slot_bytes == 0)
    return "has a damaged header (geometry)";
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kHeaderBytes + h.slots * kRecordBytes)
    return "is truncated";
  return "";
}

// The slot files directly in `dir` (slot-NNNNNN).
std::vector<std::string> slot_files_in(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    unsigned n;
    int used = 0;
    if (std::sscanf(name.c_str(), "slot-%6u%n", &n, &used) == 1 && static_cast<size_t>(used) == name.size())
      found.push_back(e.path().string());
  }
  return found;
}

}  // namespace

const char* verdict_name(PoolCheck::Verdict v) {
  switch (v) {
    case PoolCheck::Verdict::kFree: return "free";
    case PoolCheck::Verdict::kInUse: return "in use";
    case PoolCheck::Verdict::kReclaimable: return "reclaimable";
    case PoolCheck::Verdict::kQuarantined: return "quarantined";
  }
  return "?";
}

// Everything the constructor opens is closed again if it throws (the
// destructor does not run then), and a directory it made is removed.
SstPool::SstPool(const Options& options) : options_(options) {
  if (options.dir.empty()) throw std::runtime_error("SST pool: no directory given");
  if (!options.existing_only &&
      (options.slots == 0 || options.slot_bytes == 0 || options.slots > UINT32_MAX))
    throw std::runtime_error("SST pool " + options.dir + ": needs 1 to 2^32-1 slots of at least one byte");
  std::error_code ec;
  bool made_dir = false, made_lock = false;
  if (options.existing_only) {
    if (!fs::is_directory(options.dir, ec)) throw std::runtime_error("SST pool " + options.dir + ": no such directory");
  } else {
    made_dir = fs::create_directories(options.dir, ec);
    if (ec) throw std::runtime_error("SST pool " + options.dir + ": cannot create the directory: " + ec.message());
  }
  // Canonical, so that slot_of() can compare it with what realpath() says.
  dir_ = fs::canonical(options.dir, ec).string();
  if (ec) throw std::runtime_error("SST pool " + options.dir + ": " + ec.message());
  try {
    made_lock = !fs::exists(dir_ + "/" + kLockName, ec);
    lock();
    open_index();
    state_.assign(options_.slots, State::kFree);
    quarantine_.resize(options_.slots);
    for (uint32_t i = 0; i < options_.slots; ++i) open_slot(i);
    if (written_at_open_ > 0)
      log_info(what("wrote out " + std::to_string(written_at_open_) +
                    " bytes of free slots that were not (made by an earlier build, or interrupted)"));
  } catch (...) {
    close_fds();
    if (!fs::exists(dir_ + "/" + kIndexName, ec)) {  // a pool that was never made leaves nothing
      if (made_lock) fs::remove(dir_ + "/" + kLockName, ec);
      if (made_dir) fs::remove(dir_, ec);
    }
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

// Opens pool.index, creating the pool if there is none, and upgrading a
// version-1 index.
void SstPool::open_index() {
  std::string path = dir_ + "/" + kIndexName;
  index_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (index_fd_ < 0 && errno == ENOENT) {
    if (options_.existing_only) throw std::runtime_error(what(std::string("no ") + kIndexName + ": not an SST pool"));
    create(path);
    index_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  if (index_fd_ < 0) throw_sys(errno, dir_, "cannot open", path);
  IndexHeader h;
  if (std::string problem = read_header(index_fd_, h); !problem.empty())
    throw std::runtime_error(what(path + " " + problem + "; nothing was changed"));
  if (options_.existing_only) {
    options_.slots = h.slots;
    options_.slot_bytes = h.slot_bytes;
  }
  if (h.slots != options_.slots || h.slot_bytes != options_.slot_bytes)
    throw std::runtime_error(what("it was created with " + std::to_string(h.slots) + " slots of " +
                                  std::to_string(h.slot_bytes) + " bytes, not " + std::to_string(options_.slots) +
                                  " slots of " + std::to_string(options_.slot_bytes) +
                                  " bytes: use the same --slots and --slot-size, or another directory"));
  if (h.version == 1) {
    ::close(index_fd_);
    index_fd_ = -1;
    migrate_v1(path);
    index_fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (index_fd_ < 0) throw_sys(errno, dir_, "cannot open", path);
  }
}

// A new pool, made atomically: the index is written as pool.index.tmp, the
// slot files are made and written out (or preallocated), and the rename to
// pool.index completes it. If anything fails, every file made is removed (a
// slot whose allocation failed half-way would otherwise keep the space it
// got).
void SstPool::create(const std::string& index_path) {
  const std::string tmp = index_path + ".tmp";
  remove_unfinished_creation(tmp);
  std::vector<uint32_t> made;
  try {
    UniqueFd fd = new_index(tmp);
    for (uint32_t i = 0; i < options_.slots; ++i) {
      auto rec = encode_record(i, "", {});
      pwrite_all(fd.get(), rec.data(), rec.size(), record_offset(i), what("cannot write " + tmp));
    }
    if (::fdatasync(fd.get()) != 0) throw_sys(errno, dir_, "cannot sync", tmp);
    // Every slot's space first, so that a pool that does not fit fails
    // before any zeros are written.
    for (uint32_t i = 0; i < options_.slots; ++i) {
      std::string path = slot_path(i);
      UniqueFd slot(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      if (!slot) throw_sys(errno, dir_, "cannot create", path);
      made.push_back(i);
      reserve(slot.get(), path, false, options_.write_out);
    }
    // Writing every slot out is most of a creation's time (4.5 GiB for the
    // default 64 x 72 MiB: 1.8-7.9 s on this project's VM, 21.7 s on a
    // slower disk; docs/kv.md): say so, and how far it has got, so that an
    // agent that has not begun to listen does not look hung.
    const auto began = std::chrono::steady_clock::now();
    const auto seconds = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    };
    const double gib = double(options_.slots) * double(options_.slot_bytes) / double(1ull << 30);
    if (options_.write_out)
      log_info(what("creating " + std::to_string(options_.slots) + " slots of " +
                    std::to_string(options_.slot_bytes >> 20) + " MiB: writing " + fixed(gib, 2) +
                    " GiB of zeros, so that direct writes overwrite written blocks (once per pool)"));
    const uint32_t report_every = std::max<uint32_t>(1, options_.slots / 8);
    for (uint32_t i = 0; options_.write_out && i < options_.slots; ++i) {
      std::string path = slot_path(i);
      UniqueFd slot(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
      if (!slot) throw_sys(errno, dir_, "cannot open", path);
      write_out(slot.get(), path, 0, false);
      if ((i + 1) % report_every == 0 || i + 1 == options_.slots)
        log_info(what("written out " + std::to_string(i + 1) + " of " + std::to_string(options_.slots) + " slots (" +
                      fixed(gib * (i + 1) / options_.slots, 2) + " of " + fixed(gib, 2) + " GiB) in " +
                      fixed(seconds(), 1) + " s"));
    }
    if (::rename(tmp.c_str(), index_path.c_str()) != 0) throw_sys(errno, dir_, "cannot rename", tmp);
  } catch (...) {
    for (uint32_t i : made) ::unlink(slot_path(i).c_str());
    ::unlink(tmp.c_str());
    fsync_dir(dir_);
    throw;
  }
  fsync_dir(dir_);
}

// A version-2 index file at `tmp`, its header written, all its records
// allocated (and zero: damaged until written). Allocated now: recording or
// clearing an owner must never need new space, or a full pool filesystem
// would refuse claims of slots that are preallocated.
UniqueFd SstPool::new_index(const std::string& tmp) const {
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw_sys(errno, dir_, "cannot create", tmp);
  const off_t bytes = static_cast<off_t>(kHeaderBytes + options_.slots * kRecordBytes);
  if (::ftruncate(fd.get(), bytes) != 0) throw_sys(errno, dir_, "cannot size", tmp);
  if (::fallocate(fd.get(), 0, 0, bytes) != 0) throw_sys(errno, dir_, "cannot allocate", tmp);
  IndexHeader h{kIndexMagic, kIndexVersion, kRecordBytes, options_.slots, options_.slot_bytes, 0, 0};
  h.crc = header_crc(h);
  pwrite_all(fd.get(), &h, sizeof(h), 0, what("cannot write " + tmp));
  return fd;
}

// What an interrupted creation left (pool.index.tmp and slot files, which no
// claim can have used) goes. Slot files without either index are refused:
// they may hold live SST files whose owner records are lost.
void SstPool::remove_unfinished_creation(const std::string& tmp) {
  std::vector<std::string> slots = slot_files_in(dir_);
  std::error_code ec;
  if (!fs::exists(tmp, ec)) {
    if (!slots.empty())
      throw std::runtime_error(what("it holds " + std::to_string(slots.size()) + " slot files but no " + kIndexName +
                                    ": their owner records are lost, and they may hold live SST files. Nothing was "
                                    "changed; give --pool another directory, or move these files aside"));
    return;
  }
  for (const auto& s : slots) ::unlink(s.c_str());
  ::unlink(tmp.c_str());
  log_warn(what("removed an unfinished creation (" + std::to_string(slots.size()) + " slot files)"));
}

// Rewrites a version-1 index (owner records without checksums) as version 2,
// under a temporary name and renamed, so a crash leaves one or the other.
// Nothing is freed here: a record that was free stays free if its slot is
// empty, as version 1 left free slots, and is recorded damaged if not (a
// free slot may now be the slot's size, so data there would pass for one);
// an owner stays the owner (with its
// directory's identity if it still links to the slot, else unknown, which
// quarantines it if it is missing), and a malformed record becomes damaged.
void SstPool::migrate_v1(const std::string& index_path) {
  UniqueFd in(::open(index_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) throw_sys(errno, dir_, "cannot open", index_path);
  const std::string tmp = index_path + ".tmp";
  try {
    UniqueFd out = new_index(tmp);
    size_t owners = 0, damaged = 0;
    for (uint32_t i = 0; i < options_.slots; ++i) {
      std::optional<Record> r = read_record(in.get(), i, 1);
      std::array<char, kRecordBytes> rec{};  // all zero: damaged
      struct stat st {};
      const bool empty = ::stat(slot_path(i).c_str(), &st) != 0 || st.st_size == 0;
      if (r && !r->owned && empty) rec = encode_record(i, "", {});
      damaged += r && !r->owned && !empty;
      if (r && r->owned) {
        DirId dir;
        if (realpath_of(r->owner) == slot_path(i)) dir = dir_id_of(r->owner).value_or(DirId{});
        rec = encode_record(i, r->owner, dir);
        ++owners;
      }
      damaged += !r;
      pwrite_all(out.get(), rec.data(), rec.size(), record_offset(i), what("cannot write " + tmp));
    }
    if (::fdatasync(out.get()) != 0) throw_sys(errno, dir_, "cannot sync", tmp);
    if (::rename(tmp.c_str(), index_path.c_str()) != 0) throw_sys(errno, dir_, "cannot rename", tmp);
    fsync_dir(dir_);
    log_warn(what(std::string("upgraded ") + kIndexName + " from version 1 (no checksums) to " +
                  std::to_string(kIndexVersion) + ": " + std::to_string(owners) + " owner records, " +
                  std::to_string(damaged) + " malformed"));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

// Makes sure slot file `slot` exists, decides what it is from its record, and
// gives a free one its free shape: a free slot an earlier build left empty
// and preallocated is written out here, once.
void SstPool::open_slot(uint32_t slot) {
  std::string path = slot_path(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    // Only a version-1 pool can lack one (its index came first); a lost
    // slot file of a version-2 pool is reported by its owner's dangling link.
    fd = UniqueFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd) log_warn(what(path + " was missing: made again"));
  }
  if (!fd) throw_sys(errno, dir_, "cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_sys(errno, dir_, "cannot stat", path);
  // A slot that lost its reservation to a full filesystem (see reset_slot)
  // still works. Data past a slot's end is never preallocated where free
  // slots are written out: a release writes the tail out anyway.
  if (!options_.write_out && static_cast<uint64_t>(st.st_blocks) * 512 < options_.slot_bytes &&
      !reserve(fd.get(), path, true))
    log_warn(what("no space to preallocate " + path + " again; it is used without its reservation"));
  examine(slot, true);
  if (state_[slot] == State::kFree) ready_free(slot);
}

void SstPool::ready_free(uint32_t slot) {
  const std::string path = slot_path(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) throw_sys(errno, dir_, "cannot open", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!options_.write_out) {
    if (size != 0) empty_slot(fd.get(), path);
    return;
  }
  const uint64_t from = written_through(fd.get(), size).value_or(size);
  if (from >= options_.slot_bytes) return;
  // Only writes: a crash part-way leaves a free slot of the slot's size (the
  // first step sizes it), written out again at the next open.
  try {
    if (write_out_or_empty(fd.get(), path, from)) written_at_open_ += options_.slot_bytes - from;
  } catch (const std::exception& e) {
    // A write-out that failed after its fallocate left the file at a size a
    // free slot never has: emptied, as for no space.
    log_warn(std::string(e.what()) + "; " + slot_name(slot) + " is emptied and used without its reservation");
    try {
      empty_slot(fd.get(), path);
    } catch (const std::exception& e2) {
      log_warn(e2.what());
    }
  }
}

// Decides slot `slot`'s state from its record: in use, free, freed now (shown
// free: counted in reclaimed), or quarantined. At open a slot shown free is
// reset here; from recheck() (mu held) it is only marked busy, and the
// reason returned: recheck() resets it outside the lock, since a reset
// writes the slot's tail out (up to a whole slot).
std::optional<std::string> SstPool::examine(uint32_t slot, bool at_open) {
  std::string path = slot_path(slot);
  struct stat st {};
  const uint64_t bytes = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::optional<Record> rec = read_record(index_fd_, slot, kIndexVersion);
  Judgement j = judge(slot, rec, path, bytes, options_.slot_bytes);
  const State was = state_[slot];
  switch (j.verdict) {
    case PoolCheck::Verdict::kFree:
      state_[slot] = State::kFree;
      break;
    case PoolCheck::Verdict::kInUse:
      state_[slot] = State::kInUse;
      if (was == State::kQuarantined) {
        ++stats_.returned;
        log_info(what(slot_name(slot) + ": its owner " + rec->owner + " is back; in use again"));
      }
      break;
    case PoolCheck::Verdict::kReclaimable:
      if (!at_open) {
        state_[slot] = State::kBusy;
        return j.reason;
      }
      reset_slot(slot);
      freed(slot, j.reason);
      break;
    case PoolCheck::Verdict::kQuarantined:
      state_[slot] = State::kQuarantined;
      quarantine_[slot] = {slot, rec ? rec->owner : std::string(), j.reason, bytes};
      if (at_open)
        log_warn(what(slot_name(slot) + " quarantined: " + j.reason + ". It keeps its " + std::to_string(bytes) +
                      " bytes and is not reused until its owner is back or `dpukit-agent pool release " +
                      std::to_string(slot) + " --pool " + dir_ + "` frees it"));
      break;
  }
  return std::nullopt;
}

// A slot shown free and reset; mu held, or at open.
void SstPool::freed(uint32_t slot, const std::string& reason) {
  state_[slot] = State::kFree;
  ++stats_.reclaimed;
  log_info(what(slot_name(slot) + " freed: " + reason));
}

// Examines the quarantined slots under the lock; the ones shown free are
// kept busy meanwhile and reset after it, so that claims and releases never
// wait for a write-out.
size_t SstPool::recheck() {
  std::vector<std::pair<uint32_t, std::string>> shown_free;
  size_t left = 0;
  {
    std::lock_guard lock(mu_);
    for (uint32_t i = 0; i < state_.size(); ++i) {
      if (state_[i] != State::kQuarantined) continue;
      try {
        if (auto reason = examine(i, false)) shown_free.emplace_back(i, std::move(*reason));
      } catch (const std::exception& e) {
        state_[i] = State::kQuarantined;  // cannot be examined: still not accounted for
        log_warn(e.what());
      }
      left += state_[i] != State::kQuarantined && state_[i] != State::kBusy;
    }
  }
  for (const auto& [slot, reason] : shown_free) {
    try {
      reset_slot(slot);
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      state_[slot] = State::kQuarantined;  // a reset that failed: still not accounted for
      log_warn(e.what());
      continue;
    }
    std::lock_guard lock(mu_);
    freed(slot, reason);
    ++left;
  }
  return left;
}

std::vector<SstPool::Quarantined> SstPool::quarantined() const {
  std::lock_guard lock(mu_);
  std::vector<Quarantined> q;
  for (uint32_t i = 0; i < state_.size(); ++i)
    if (state_[i] == State::kQuarantined) q.push_back(quarantine_[i]);
  return q;
}

bool SstPool::reserve(int fd, const std::string& path, bool tolerate_no_space, bool sized, uint64_t from) const {
  const int mode = sized ? 0 : FALLOC_FL_KEEP_SIZE;
  if (::fallocate(fd, mode, static_cast<off_t>(from), static_cast<off_t>(options_.slot_bytes - from)) == 0)
    return true;
  int err = errno;
  if (err == ENOSPC && tolerate_no_space) return false;
  if (err == EOPNOTSUPP)
    throw_sys(err, what(std::string("the filesystem refuses fallocate(") + (sized ? "0" : "FALLOC_FL_KEEP_SIZE") +
                        ") for " + path + "; put the pool on ext4, xfs, btrfs or tmpfs"));
  if (err == ENOSPC)
    throw_sys(err, what("no space to preallocate " + path + " (" + std::to_string(options_.slots) + " slots of " +
                        std::to_string(options_.slot_bytes) + " bytes)"));
  throw_sys(err, what("cannot preallocate " + path));
}

// Records `owner` (free if empty) with its directory's identity, durably
// before the caller makes the symlink (claim) or reuses the slot (release).
void SstPool::write_record(uint32_t slot, const std::string& owner) {
  DirId dir = owner.empty() ? DirId{} : dir_id_of(owner).value_or(DirId{});
  auto rec = encode_record(slot, owner, dir);
  std::string problem = what("cannot record the owner of " + slot_name(slot) + " in " + kIndexName);
  pwrite_all(index_fd_, rec.data(), rec.size(), record_offset(slot), problem);
  if (::fdatasync(index_fd_) != 0) throw_sys(errno, problem);
}

// Space first (fallocate: the file becomes the slot's size, and a full
// filesystem fails here, before anything is written), then zeros over it:
// by the device (FALLOC_FL_WRITE_ZEROES) where it can, else written with
// direct I/O by this thread, so that converting the preallocated extents is
// done here and not by the kernel's workers at writeback. Durable on return.
bool SstPool::write_out(int fd, const std::string& path, uint64_t from, bool tolerate_no_space) const {
  const uint64_t end = options_.slot_bytes;
  if (from >= end) return true;
  if (!reserve(fd, path, tolerate_no_space, true, from)) return false;
  const std::string problem = what("cannot write out " + path);
  if (::fallocate(fd, kFallocWriteZeroes, static_cast<off_t>(from), static_cast<off_t>(end - from)) != 0) {
    if (errno != EOPNOTSUPP && errno != EINVAL) throw_sys(errno, problem);
    static const std::unique_ptr<void, decltype(&std::free)> zeros(
        [] {
          void* p = std::aligned_alloc(kDirectAlign, kZeroChunk);
          if (p) std::memset(p, 0, kZeroChunk);
          return p;
        }(),
        &std::free);
    if (!zeros) throw_sys(ENOMEM, problem);
    // The direct part is page-aligned: a released file's last partial page is
    // zeroed too (it is dropped anyway). tmpfs takes no O_DIRECT: buffered.
    uint64_t at = from / kDirectAlign * kDirectAlign;
    const uint64_t direct_end = end / kDirectAlign * kDirectAlign;
    UniqueFd direct(::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
    if (direct)
      for (; at < direct_end; at += std::min<uint64_t>(kZeroChunk, direct_end - at))
        pwrite_all(direct.get(), zeros.get(), std::min<uint64_t>(kZeroChunk, direct_end - at),
                   static_cast<off_t>(at), problem);
    at = std::max(at, from);
    for (; at < end; at += std::min<uint64_t>(kZeroChunk, end - at))
      pwrite_all(fd, zeros.get(), std::min<uint64_t>(kZeroChunk, end - at), static_cast<off_t>(at), problem);
  }
  if (::fdatasync(fd) != 0) throw_sys(errno, problem);
  return true;
}

// A free slot's write-out where the filesystem may lack the space: without
// it, the slot is emptied, since a failed fallocate can leave the file grown
// part-way (ext4 keeps what it allocated), a size that judge() takes for data.
bool SstPool::write_out_or_empty(int fd, const std::string& path, uint64_t from) const {
  if (write_out(fd, path, from, true)) return true;
  log_warn(what("no space to write " + path + " out; it is emptied and used without its reservation"));
  empty_slot(fd, path);
  return false;
}

void SstPool::empty_slot(int fd, const std::string& path) const {
  if (::ftruncate(fd, 0) != 0) throw_sys(errno, dir_, "cannot truncate", path);
  if (::fdatasync(fd) != 0) throw_sys(errno, dir_, "cannot sync", path);
  if (!reserve(fd, path, true))
    log_warn(what("no space to preallocate " + path + " again; it is used without its reservation"));
}

// Gives a slot its free shape, records it free (last, so that a crash before
// leaves an owner record, never a free one with data). Written out: the old
// file's bytes stay (a writer writes from offset 0 and truncates at close),
// the tail the writer's truncation freed is written again. Where the
// filesystem has no space for the tail, the slot is emptied instead: it
// works, its writes just need space, rather than kept out of use for good.
void SstPool::reset_slot(uint32_t slot) {
  std::string path = slot_path(slot);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw_sys(errno, dir_, "cannot open", path);
  if (!options_.write_out) {
    empty_slot(fd.get(), path);
    return write_record(slot, "");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_sys(errno, dir_, "cannot stat", path);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > options_.slot_bytes) {  // a file that outgrew its slot
    if (::ftruncate(fd.get(), static_cast<off_t>(options_.slot_bytes)) != 0)
      throw_sys(errno, dir_, "cannot truncate", path);
    size = options_.slot_bytes;
  }
  // Holes or unwritten extents inside the old file (a failed writer, or one
  // an earlier build preallocated) are written out with the tail.
  const uint64_t from = std::min(size, written_through(fd.get(), size).value_or(size));
  if (write_out_or_empty(fd.get(), path, from) && from == size && size == options_.slot_bytes &&
      ::fdatasync(fd.get()) != 0)
    throw_sys(errno, dir_, "cannot sync", path);  // the truncation above, if any
  write_record(slot, "");
}

std::optional<SstPool::Slot> SstPool::claim(const std::string& owner) {
  if (owner.empty() || owner.size() > kMaxOwner)
    throw_sys(ENAMETOOLONG, what("owner path of " + std::to_string(owner.size()) + " bytes does not fit a record"));
  uint32_t slot = 0;
  {
    std::lock_guard lock(mu_);
    while (slot < state_.size() && state_[slot] != State::kFree) ++slot;
    if (slot == state_.size()) {
      ++stats_.exhausted;
      return std::nullopt;
    }
    state_[slot] = State::kBusy;  // taken while its record is written outside the lock
  }
  try {
    write_record(slot, owner);
  } catch (...) {
    std::lock_guard lock(mu_);
    state_[slot] = State::kFree;
    throw;
  }
  std::lock_guard lock(mu_);
  state_[slot] = State::kInUse;
  ++stats_.claims;
  return Slot{slot, slot_path(slot)};
}

void SstPool::release(uint32_t slot) { release_if(slot, false); }

std::optional<SstPool::Quarantined> SstPool::release_quarantined(uint32_t slot) { return release_if(slot, true); }

// The slot's state is checked and made busy under one lock, so that a
// recheck bringing a quarantined slot's owner back and an operator's
// release of it never both win.
std::optional<SstPool::Quarantined> SstPool::release_if(uint32_t slot, bool only_quarantined) {
  State was;
  Quarantined held{};
  {
    std::lock_guard lock(mu_);
    const bool quarantined = slot < state_.size() && state_[slot] == State::kQuarantined;
    if (only_quarantined && !quarantined) return std::nullopt;
    if (slot >= state_.size() || (state_[slot] != State::kInUse && !quarantined))
      throw std::invalid_argument(what(slot_name(slot) + " is not in use, so it cannot be released"));
    was = state_[slot];
    if (quarantined) held = quarantine_[slot];
    state_[slot] = State::kBusy;
  }
  try {
    reset_slot(slot);
  } catch (...) {
    // The slot stays as it was: its owner's symlink is gone, so the next
    // open shows it free.
    std::lock_guard lock(mu_);
    state_[slot] = was;
    throw;
  }
  std::lock_guard lock(mu_);
  state_[slot] = State::kFree;
  ++stats_.released;
  if (was != State::kQuarantined) return std::nullopt;
  log_info(what(slot_name(slot) + " released from quarantine"));
  return held;
}

std::optional<uint32_t> SstPool::slot_of(const std::string& path) const {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return std::nullopt;
  std::string real = realpath_of(path);
  if (real.empty()) return std::nullopt;
  fs::path target(real);
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
  s.slots = state_.size();
  for (State st : state_) {
    s.free += st == State::kFree;
    s.quarantined += st == State::kQuarantined;
  }
  return s;
}

PoolCheck check_pool(const std::string& dir, const std::string& db_dir) {
  PoolCheck r;
  r.dir = dir;
  std::error_code ec;
  const std::string canon = fs::canonical(dir, ec).string();
  if (ec) {
    r.problem = dir + ": " + ec.message();
    return r;
  }
  r.dir = canon;
  const std::string index = canon + "/" + kIndexName;
  UniqueFd fd(::open(index.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    int err = errno;
    r.problem = index + ": " + std::strerror(err);
    if (err == ENOENT && fs::exists(index + ".tmp", ec))
      r.problem += " (an unfinished creation: the agent removes it when it next starts)";
    return r;
  }
  IndexHeader h;
  if (std::string problem = read_header(fd.get(), h); !problem.empty()) {
    r.problem = index + " " + problem;
    return r;
  }
  r.usable = true;
  r.version = h.version;
  r.slots = h.slots;
  r.slot_bytes = h.slot_bytes;
  {
    // Held exclusively by the agent (or a plugin) that owns the pool.
    UniqueFd lock(::open((canon + "/" + kLockName).c_str(), O_RDONLY | O_CLOEXEC));
    if (lock && ::flock(lock.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) r.in_use = true;
  }
  if (h.version == 1)
    r.findings.push_back(std::string(kIndexName) +
                         " is version 1 (no checksums): the agent upgrades it when it next opens the pool");
  for (uint32_t i = 0; i < h.slots; ++i) {
    const std::string path = canon + "/" + slot_name(i);
    struct stat st {};
    PoolCheck::SlotReport s{i, PoolCheck::Verdict::kFree, "", "", 0, 0};
    std::optional<Record> rec = read_record(fd.get(), i, h.version, r.in_use ? 5 : 1);
    if (rec) s.owner = rec->owner;
    if (::stat(path.c_str(), &st) != 0) {
      s.verdict = PoolCheck::Verdict::kQuarantined;
      s.reason = path + " is missing";
      r.findings.push_back(slot_name(i) + ": " + s.reason);
      r.reports.push_back(s);
      continue;
    }
    s.bytes = static_cast<uint64_t>(st.st_size);
    s.allocated = static_cast<uint64_t>(st.st_blocks) * 512;
    Judgement j = judge(i, rec, path, s.bytes, h.slot_bytes);
    s.verdict = j.verdict;
    s.reason = j.reason;
    if (j.verdict == PoolCheck::Verdict::kQuarantined)
      r.findings.push_back(slot_name(i) + " quarantined: " + j.reason + " (" + std::to_string(s.bytes) + " bytes)");
    r.reports.push_back(s);
  }
  if (!db_dir.empty()) {
    std::error_code dec;
    fs::directory_iterator it(db_dir, dec);
    if (dec) r.findings.push_back("cannot list " + db_dir + ": " + dec.message());
    for (; !dec && it != fs::directory_iterator(); it.increment(dec)) {
      const std::string link = fs::absolute(it->path()).lexically_normal().string();
      if (!it->is_symlink(dec)) continue;
      const std::string target = link_target(link), real = realpath_of(link);
      if (real.empty()) {
        if (fs::path(target).parent_path() == canon || fs::path(target).filename().string().rfind("slot-", 0) == 0)
          r.findings.push_back(link + " links to " + target + ", which does not exist");
        continue;
      }
      if (fs::path(real).parent_path() != canon) continue;
      unsigned n = 0;
      int used = 0;
      std::string name = fs::path(real).filename().string();
      if (std::sscanf(name.c_str(), "slot-%6u%n", &n, &used) != 1 || static_cast<size_t>(used) != name.size() ||
          n >= r.reports.size())
        continue;
      const PoolCheck::SlotReport& s = r.reports[n];
      if (s.owner != link)
        r.findings.push_back(link + " links to " + slot_name(n) + ", whose record names " +
                             (s.owner.empty() ? std::string("no owner") : s.owner) + " (" + verdict_name(s.verdict) +
                             ")");
    }
  }
  return r;
}

}  // namespace dpukit::kv
