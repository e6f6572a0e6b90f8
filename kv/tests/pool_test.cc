#include "temp_dir.h"
#include "pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <future>
#include <thread>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint64_t kSlotBytes = 1 << 20;

SstPool::Options options(const fs::path& dir, size_t slots = 4, uint64_t slot_bytes = kSlotBytes) {
  return SstPool::Options{dir.string(), slots, slot_bytes};
}

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

// Writes `len` bytes from offset 0 and sets the size, as a pool slot's
// writer does (the engine truncates a written-out slot at sync_close).
void write_file(const fs::path& p, size_t len, char fill) {
  {
    std::ofstream out(p, std::ios::binary | std::ios::in | std::ios::out);
    ASSERT_TRUE(out) << p;
    std::string data(len, fill);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  fs::resize_file(p, len);
}

struct Extent {
  uint64_t logical, length;
  uint32_t flags;
};
// The file's extents as FIEMAP reports them (past its end too: preallocated
// ones); nullopt where the filesystem has no FIEMAP.
std::optional<std::vector<Extent>> extents_of(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<Extent> found;
  std::vector<char> buf(sizeof(fiemap) + 256 * sizeof(fiemap_extent));
  auto* fm = reinterpret_cast<fiemap*>(buf.data());
  for (uint64_t at = 0;;) {
    std::fill(buf.begin(), buf.end(), 0);
    fm->fm_start = at;
    fm->fm_length = FIEMAP_MAX_OFFSET - at;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = 256;
    if (::ioctl(fd, FS_IOC_FIEMAP, fm) != 0) {
      ::close(fd);
      return std::nullopt;
    }
    bool last = fm->fm_mapped_extents == 0;
    for (unsigned i = 0; i < fm->fm_mapped_extents; ++i) {
      const fiemap_extent& e = fm->fm_extents[i];
      found.push_back({e.fe_logical, e.fe_length, e.fe_flags});
      at = e.fe_logical + e.fe_length;
      last = last || (e.fe_flags & FIEMAP_EXTENT_LAST);
    }
    if (last) break;
  }
  ::close(fd);
  return found;
}

// What a written-out slot is not: the problem, or "" (also where FIEMAP
// cannot tell: then only the size is checked).
std::string not_written_out(const fs::path& p, uint64_t slot_bytes = kSlotBytes) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return p.string() + " is missing";
  if (static_cast<uint64_t>(st.st_size) != slot_bytes)
    return p.string() + " is " + std::to_string(st.st_size) + " bytes, not " + std::to_string(slot_bytes);
  auto ext = extents_of(p);
  if (!ext) return "";
  uint64_t covered = 0;
  for (const Extent& e : *ext) {
    if (e.flags & FIEMAP_EXTENT_UNWRITTEN)
      return p.string() + " has an unwritten extent at " + std::to_string(e.logical);
    if (e.logical > covered) return p.string() + " has a hole at " + std::to_string(covered);
    covered = std::max<uint64_t>(covered, e.logical + e.length);
  }
  return covered >= slot_bytes ? "" : p.string() + " has a hole from " + std::to_string(covered);
}

bool has_unwritten_extent(const fs::path& p) {
  auto ext = extents_of(p);
  return ext &&
         std::any_of(ext->begin(), ext->end(), [](const Extent& e) { return e.flags & FIEMAP_EXTENT_UNWRITTEN; });
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Claims a slot for `owner` and makes the symlink, as the engine does.
SstPool::Slot claim_linked(SstPool& pool, const fs::path& owner) {
  auto slot = pool.claim(owner.string());
  EXPECT_TRUE(slot);
  EXPECT_EQ(::symlink(slot->path.c_str(), owner.c_str()), 0);
  return *slot;
}

TEST(SstPool, CreatesWrittenOutSlotsAndReopensWithTheSameGeometry) {
  TempDir t;
  fs::path dir = t.path / "pool";
  {
    SstPool pool(options(dir));
    EXPECT_EQ(pool.dir(), fs::canonical(dir).string());
    SstPool::Stats s = pool.stats();
    EXPECT_EQ(s.slots, 4u);
    EXPECT_EQ(s.free, 4u);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(not_written_out(dir / ("slot-00000" + std::to_string(i))), "");
    }
    EXPECT_TRUE(fs::exists(dir / "pool.index"));
  }
  SstPool again(options(dir));
  EXPECT_EQ(again.stats().free, 4u);
  EXPECT_EQ(again.stats().reclaimed, 0u);
}

TEST(SstPool, ReopeningWithAnotherGeometryIsAClearError) {
  TempDir t;
  { SstPool pool(options(t.path)); }
  std::string more_slots = message_of([&] { SstPool p(options(t.path, 8)); });
  EXPECT_NE(more_slots.find("created with 4 slots of 1048576 bytes"), std::string::npos) << more_slots;
  EXPECT_NE(more_slots.find(fs::canonical(t.path).string()), std::string::npos) << more_slots;
  std::string bigger = message_of([&] { SstPool p(options(t.path, 4, 2 * kSlotBytes)); });
  EXPECT_NE(bigger.find("not 4 slots of 2097152 bytes"), std::string::npos) << bigger;
  SstPool same(options(t.path));  // the failed attempts left the lock free
}

TEST(SstPool, ASecondOwnerIsRefusedUntilTheFirstIsGone) {
  TempDir t;
  auto first = std::make_unique<SstPool>(options(t.path));
  std::string refused = message_of([&] { SstPool p(options(t.path)); });
  EXPECT_EQ(refused, "pool " + fs::canonical(t.path).string() + " is in use by another process");
  first.reset();
  SstPool second(options(t.path));
  EXPECT_EQ(second.stats().free, 4u);
}

TEST(SstPool, ClaimsEverySlotOnceThenReportsExhaustionUntilOneIsReleased) {
  TempDir t;
  SstPool pool(options(t.path));
  std::vector<uint32_t> taken;
  for (int i = 0; i < 4; ++i) {
    auto slot = pool.claim((t.path / ("owner" + std::to_string(i))).string());
    ASSERT_TRUE(slot);
    EXPECT_EQ(fs::path(slot->path).parent_path(), pool.dir());
    EXPECT_TRUE(fs::path(slot->path).is_absolute());
    EXPECT_EQ(std::count(taken.begin(), taken.end(), slot->index), 0);
    taken.push_back(slot->index);
  }
  EXPECT_FALSE(pool.claim((t.path / "owner4").string()));
  EXPECT_EQ(pool.stats().exhausted, 1u);
  EXPECT_EQ(pool.stats().free, 0u);
  pool.release(taken[2]);
  EXPECT_EQ(pool.stats().free, 1u);
  auto again = pool.claim((t.path / "owner5").string());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->index, taken[2]);
  SstPool::Stats s = pool.stats();
  EXPECT_EQ(s.claims, 5u);
  EXPECT_EQ(s.released, 1u);
  EXPECT_THROW(pool.release(99), std::invalid_argument);
  pool.release(taken[0]);
  EXPECT_THROW(pool.release(taken[0]), std::invalid_argument) << "a free slot cannot be released";
  try {
    pool.claim(std::string(5000, 'x'));
    ADD_FAILURE() << "an owner longer than a record must be refused";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENAMETOOLONG);
  }
}

// A tmpfs of a few MB mounted for the test, so that ENOSPC is real. Needs
// CAP_SYS_ADMIN; `why` says what refused it otherwise.
struct SmallFs {
  fs::path dir;
  std::string why;
  bool mounted = false;
  SmallFs(const fs::path& d, const std::string& size) : dir(d) {
    fs::create_directories(d);
    if (::mount("tmpfs", d.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size).c_str()) == 0) mounted = true;
    else why = std::strerror(errno);
  }
  ~SmallFs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

// A small ext4 on a loop device, for what tmpfs hides: a failed fallocate
// there keeps the blocks it got (the file stays grown part-way), where tmpfs
// rolls it back. Needs CAP_SYS_ADMIN, a loop device and mkfs.ext4; `why` says
// what was missing otherwise. The loop device goes with the unmount.
struct SmallExt4 {
  fs::path dir;
  std::string why;
  bool mounted = false;
  SmallExt4(const fs::path& d, uint64_t bytes) : dir(d) {
    const fs::path image = d.string() + ".img";
    fs::create_directories(d);
    {
      std::ofstream img(image, std::ios::binary);
    }
    fs::resize_file(image, bytes);
    if (std::system(("mkfs.ext4 -q -F " + image.string() + " >/dev/null 2>&1").c_str()) != 0) {
      why = "mkfs.ext4 failed";
      return;
    }
    int control = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    const int n = control < 0 ? -1 : ::ioctl(control, LOOP_CTL_GET_FREE);
    if (control >= 0) ::close(control);
    if (n < 0) {
      why = std::string("no free loop device: ") + std::strerror(errno);
      return;
    }
    const std::string device = "/dev/loop" + std::to_string(n);
    int loop = ::open(device.c_str(), O_RDWR | O_CLOEXEC), file = ::open(image.c_str(), O_RDWR | O_CLOEXEC);
    loop_config config{};
    config.fd = static_cast<uint32_t>(file);
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (loop < 0 || file < 0 || ::ioctl(loop, LOOP_CONFIGURE, &config) != 0) why = device + ": " + std::strerror(errno);
    else if (::mount(device.c_str(), d.c_str(), "ext4", MS_NOSUID | MS_NODEV, nullptr) == 0) mounted = true;
    else why = std::string("mount: ") + std::strerror(errno);
    if (file >= 0) ::close(file);
    if (loop >= 0) ::close(loop);  // with the mount's reference gone, autoclear frees the device
  }
  ~SmallExt4() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

// The slots are preallocated, so a full filesystem must not stop the pool
// from handing them out or taking them back: recording or clearing an owner
// needs no new space. (A claim that fails turns a file that fits its slot into
// a failed one.)
TEST(SstPool, ClaimAndReleaseNeedNoSpaceOnAFullFilesystem) {
  TempDir t;
  SmallFs small(t.path / "small", "1m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs for a real ENOSPC: " << small.why;
  SstPool pool(options(small.dir / "pool", 4, 64 << 10));
  {
    std::ofstream filler(small.dir / "filler", std::ios::binary);
    std::string chunk(4096, 'f');
    while (filler.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && filler.flush()) {}
  }
  std::ofstream probe(small.dir / "probe", std::ios::binary);
  ASSERT_FALSE(probe.write("x", 1) && probe.flush()) << "the filesystem is full";
  std::vector<SstPool::Slot> slots;
  for (int i = 0; i < 4; ++i) {
    fs::path owner = t.path / ("00000" + std::to_string(i) + ".sst");
    try {
      slots.push_back(claim_linked(pool, owner));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "claim " << i << " on a full filesystem: " << e.what();
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    ASSERT_EQ(::unlink((t.path / ("00000" + std::to_string(i) + ".sst")).c_str()), 0);
    EXPECT_NO_THROW(pool.release(slots[i].index)) << "release " << i << " on a full filesystem";
  }
  EXPECT_EQ(pool.stats().free, 4u);
}

TEST(SstPool, StatReportsTheBytesWrittenAndReleaseWritesTheSlotOutAgain) {
  TempDir t;
  SstPool pool(options(t.path / "pool"));
  fs::path owner = t.path / "000007.sst";
  SstPool::Slot slot = claim_linked(pool, owner);
  write_file(owner, 12345, 'a');
  EXPECT_EQ(stat_of(owner).st_size, 12345) << "the writer's size";
  EXPECT_EQ(pool.slot_of(owner.string()), slot.index);
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  pool.release(slot.index);
  EXPECT_EQ(not_written_out(slot.path), "");
}

TEST(SstPool, SlotOfKnowsOnlySymlinksIntoThisPool) {
  TempDir t;
  SstPool pool(options(t.path / "pool"));
  SstPool::Slot slot = claim_linked(pool, t.path / "linked.sst");
  EXPECT_EQ(pool.slot_of((t.path / "linked.sst").string()), slot.index);
  EXPECT_FALSE(pool.slot_of(slot.path)) << "the slot file itself is not a symlink";
  EXPECT_FALSE(pool.slot_of((t.path / "missing.sst").string()));
  std::ofstream(t.path / "plain").put('x');
  EXPECT_FALSE(pool.slot_of((t.path / "plain").string()));
  fs::create_symlink(t.path / "plain", t.path / "elsewhere.sst");
  EXPECT_FALSE(pool.slot_of((t.path / "elsewhere.sst").string()));
  fs::create_symlink(t.path / "pool" / "pool.index", t.path / "index-link");
  EXPECT_FALSE(pool.slot_of((t.path / "index-link").string()));
  // A relative link into the pool counts too.
  fs::create_symlink(fs::path("pool") / fs::path(slot.path).filename(), t.path / "relative.sst");
  EXPECT_EQ(pool.slot_of((t.path / "relative.sst").string()), slot.index);
}

// After a crash a slot is in use exactly when its owner record names a path
// that is still a symlink to it.
TEST(SstPool, ReopeningFreesEverySlotWhoseOwnerIsNoLongerItsSymlink) {
  TempDir t;
  fs::path dir = t.path / "pool";
  fs::path kept = t.path / "kept.sst", never = t.path / "never.sst", deleted = t.path / "deleted.sst",
           moved = t.path / "moved.sst";
  uint32_t kept_slot;
  {
    SstPool pool(options(dir));
    kept_slot = claim_linked(pool, kept).index;
    write_file(kept, 3000, 'k');
    pool.claim(never.string());  // crashed before the symlink was made
    claim_linked(pool, deleted);
    write_file(deleted, 100, 'd');
    ASSERT_EQ(::unlink(deleted.c_str()), 0);  // crashed between unlink and release
    claim_linked(pool, moved);
    ASSERT_EQ(::unlink(moved.c_str()), 0);
    std::ofstream(moved) << "a normal file took the name";
    EXPECT_EQ(pool.stats().free, 0u);
  }  // "crash": no release
  SstPool pool(options(dir));
  SstPool::Stats s = pool.stats();
  EXPECT_EQ(s.reclaimed, 3u);
  EXPECT_EQ(s.free, 3u);
  EXPECT_EQ(pool.slot_of(kept.string()), kept_slot);
  EXPECT_EQ(stat_of(kept).st_size, 3000) << "the live file keeps its data";
  for (uint32_t i = 0; i < 4; ++i) {
    if (i == kept_slot) continue;
    char name[32];
    std::snprintf(name, sizeof(name), "slot-%06u", i);
    EXPECT_EQ(not_written_out(dir / name), "") << name << " was freed";
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(pool.claim((t.path / ("new" + std::to_string(i))).string()));
  EXPECT_FALSE(pool.claim((t.path / "one-too-many").string()));
}

std::string slot_file_name(uint32_t slot) {
  char name[32];
  std::snprintf(name, sizeof(name), "slot-%06u", slot);
  return name;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Zeroes every 4 KB page of pool.index that holds `owner`'s path: the slot's
// owner record, whatever the layout. Returns how many pages.
int zero_records_naming(const fs::path& index, const std::string& owner) {
  std::string bytes = read_all(index);
  std::fstream io(index, std::ios::binary | std::ios::in | std::ios::out);
  int pages = 0;
  for (size_t at = bytes.find(owner); at != std::string::npos; at = bytes.find(owner, at + 1)) {
    io.seekp(static_cast<std::streamoff>(at / 4096 * 4096));
    io.write(std::string(4096, '\0').data(), 4096);
    ++pages;
  }
  return pages;
}

// A pool with one live file `owner` (3000 bytes) in `db`, closed again (the
// agent stopped). Returns its slot.
uint32_t pool_with_one_file(const fs::path& dir, const fs::path& owner) {
  SstPool pool(options(dir));
  uint32_t slot = claim_linked(pool, owner).index;
  write_file(owner, 3000, 'k');
  return slot;
}

// The DB's directory is out of sight (not mounted yet, renamed away) when the
// pool is opened: the slot is kept, counted and never claimed; once the
// owner is back it is in use again.
TEST(SstPool, ASlotWhoseOwnersDirectoryIsGoneIsQuarantinedUntilItComesBack) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db", away = t.path / "db.away";
  fs::create_directories(db);
  const uint32_t slot = pool_with_one_file(dir, db / "000050.sst");
  fs::rename(db, away);
  SstPool pool(options(dir));
  SstPool::Stats s = pool.stats();
  EXPECT_EQ(s.reclaimed, 0u);
  EXPECT_EQ(s.quarantined, 1u);
  EXPECT_EQ(s.free, 3u);
  EXPECT_EQ(stat_of(dir / slot_file_name(slot)).st_size, 3000) << "the data is kept";
  auto q = pool.quarantined();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].slot, slot);
  EXPECT_EQ(q[0].owner, (db / "000050.sst").string());
  EXPECT_EQ(q[0].bytes, 3000u);
  EXPECT_NE(q[0].reason.find("is missing with its directory"), std::string::npos) << q[0].reason;
  for (int i = 0; i < 3; ++i) {
    auto c = pool.claim((t.path / ("new" + std::to_string(i))).string());
    ASSERT_TRUE(c);
    EXPECT_NE(c->index, slot) << "a quarantined slot is never claimed";
  }
  EXPECT_FALSE(pool.claim((t.path / "one-too-many").string()));
  EXPECT_EQ(pool.recheck(), 0u) << "still away";
  fs::rename(away, db);
  EXPECT_EQ(pool.recheck(), 1u);
  s = pool.stats();
  EXPECT_EQ(s.quarantined, 0u);
  EXPECT_EQ(s.returned, 1u);
  EXPECT_EQ(pool.slot_of((db / "000050.sst").string()), slot);
  EXPECT_EQ(read_all(db / "000050.sst"), std::string(3000, 'k'));
}

// A directory replaced by another at the same path (a filesystem mounted
// over it, or made anew) does not prove its files were deleted; the very
// directory without the name does.
TEST(SstPool, AnOwnerIsShownDeletedOnlyFromTheDirectoryItWasMadeIn) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  uint32_t slot = pool_with_one_file(dir, db / "000050.sst");
  fs::rename(db, t.path / "db.old");
  fs::create_directories(db);  // another directory by the same name, empty
  {
    SstPool pool(options(dir));
    EXPECT_EQ(pool.stats().quarantined, 1u);
    EXPECT_EQ(pool.stats().reclaimed, 0u);
    ASSERT_EQ(pool.quarantined().size(), 1u);
    EXPECT_NE(pool.quarantined()[0].reason.find("is not the directory it was made in"), std::string::npos)
        << pool.quarantined()[0].reason;
  }
  EXPECT_EQ(stat_of(dir / slot_file_name(slot)).st_size, 3000);
  fs::remove_all(db);
  fs::rename(t.path / "db.old", db);
  ASSERT_EQ(::unlink((db / "000050.sst").c_str()), 0);  // RocksDB deleted it while the agent was away
  SstPool pool(options(dir));
  EXPECT_EQ(pool.stats().reclaimed, 1u);
  EXPECT_EQ(pool.stats().quarantined, 0u);
  EXPECT_EQ(pool.stats().free, 4u);
}

// Repro of issue 22 §1.2: zeroing one owner record, or flipping a byte of
// it, used to free the slot and truncate a live SST.
TEST(SstPool, ADamagedOwnerRecordQuarantinesItsSlot) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  const std::string owner = (db / "000050.sst").string();
  pool_with_one_file(dir, owner);
  ASSERT_EQ(zero_records_naming(dir / "pool.index", owner), 1);
  {
    SstPool pool(options(dir));
    EXPECT_EQ(pool.stats().quarantined, 1u);
    EXPECT_EQ(pool.stats().reclaimed, 0u);
    ASSERT_EQ(pool.quarantined().size(), 1u);
    EXPECT_NE(pool.quarantined()[0].reason.find("damaged"), std::string::npos);
  }
  EXPECT_EQ(read_all(owner), std::string(3000, 'k')) << "the live file keeps its data";

  // One flipped byte of the owner path: the checksum catches it.
  TempDir t2;
  fs::path dir2 = t2.path / "pool", db2 = t2.path / "db";
  fs::create_directories(db2);
  const std::string owner2 = (db2 / "000051.sst").string();
  pool_with_one_file(dir2, owner2);
  std::string bytes = read_all(dir2 / "pool.index");
  size_t at = bytes.find(owner2);
  ASSERT_NE(at, std::string::npos);
  {
    std::fstream io(dir2 / "pool.index", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(at + owner2.size() - 5));
    io.put('2');  // 000051.sst -> 000052.sst
  }
  SstPool pool2(options(dir2));
  EXPECT_EQ(pool2.stats().quarantined, 1u);
  EXPECT_EQ(read_all(owner2), std::string(3000, 'k'));
}

// The header holds the geometry every record's place depends on: a damaged
// one stops the pool (nothing is changed), it is not guessed around.
TEST(SstPool, ADamagedOrTruncatedIndexIsRefusedAndNothingChanges) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  pool_with_one_file(dir, db / "000050.sst");
  const std::string good = read_all(dir / "pool.index");
  {
    std::fstream io(dir / "pool.index", std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(24);  // slot_bytes
    io.put('\x01');
  }
  std::string refused = message_of([&] { SstPool p(options(dir)); });
  EXPECT_NE(refused.find("has a damaged header (checksum); nothing was changed"), std::string::npos) << refused;
  EXPECT_FALSE(check_pool(dir.string()).usable);
  std::ofstream(dir / "pool.index", std::ios::binary | std::ios::trunc) << good;
  fs::resize_file(dir / "pool.index", 4096 * 3);
  refused = message_of([&] { SstPool p(options(dir)); });
  EXPECT_NE(refused.find("is truncated"), std::string::npos) << refused;
  EXPECT_EQ(read_all(db / "000050.sst"), std::string(3000, 'k'));
  std::ofstream(dir / "pool.index", std::ios::binary | std::ios::trunc) << good;
  SstPool pool(options(dir));
  EXPECT_EQ(pool.stats().free, 3u);
}

// An operator's release (or the owner's deletion through the plugin) frees a
// quarantined slot.
TEST(SstPool, AQuarantinedSlotIsFreedOnlyByARelease) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  const uint32_t slot = pool_with_one_file(dir, db / "000050.sst");
  fs::rename(db, t.path / "gone");
  SstPool pool(options(dir));
  ASSERT_EQ(pool.stats().quarantined, 1u);
  pool.release(slot);
  EXPECT_EQ(pool.stats().quarantined, 0u);
  EXPECT_EQ(pool.stats().free, 4u);
  EXPECT_EQ(not_written_out(dir / slot_file_name(slot)), "");
  EXPECT_THROW(pool.release(slot), std::invalid_argument);
}

// A pool whose one file's slot is quarantined (the owner's directory was
// away when the pool was opened), the directory then back without the
// owner (deleted meanwhile): the next recheck shows the slot free.
struct OwnerDeletedWhileAway {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  uint32_t slot = 0;
  std::unique_ptr<SstPool> pool;
  OwnerDeletedWhileAway() {
    fs::create_directories(db);
    slot = pool_with_one_file(dir, db / "000050.sst");
    fs::rename(db, t.path / "away");
    pool = std::make_unique<SstPool>(options(dir));
    EXPECT_EQ(pool->stats().quarantined, 1u);
    fs::rename(t.path / "away", db);
    EXPECT_EQ(::unlink((db / "000050.sst").c_str()), 0);
  }
};

// Back under its name as something else (RocksDB renamed a file over it):
// shown free.
TEST(SstPool, AQuarantinedSlotWhoseOwnerComesBackAsAnotherFileIsFreed) {
  OwnerDeletedWhileAway q;
  SstPool& pool = *q.pool;
  std::ofstream(q.db / "000050.sst") << "a normal file";
  EXPECT_EQ(pool.recheck(), 1u);
  EXPECT_EQ(pool.stats().quarantined, 0u);
  EXPECT_EQ(pool.stats().free, 4u);
  EXPECT_EQ(pool.stats().reclaimed, 1u);
  EXPECT_EQ(not_written_out(q.dir / slot_file_name(q.slot)), "");
}

// recheck() writes a slot it finds free out after it lets go of the pool's
// lock: here the write-out waits (the slot file is a FIFO nobody reads, so
// its open for writing blocks) and a claim is answered meanwhile. Under the
// lock, the claim got no answer in 60 s.
TEST(SstPool, AClaimIsAnsweredWhileARecheckWritesASlotOut) {
  OwnerDeletedWhileAway q;
  SstPool& pool = *q.pool;
  const TempDir& t = q.t;
  const uint32_t slot = q.slot;
  const fs::path slot_file = q.dir / slot_file_name(slot);
  fs::remove(slot_file);
  ASSERT_EQ(::mkfifo(slot_file.c_str(), 0600), 0);
  auto recheck = std::async(std::launch::async, [&] { return pool.recheck(); });
  size_t free_meanwhile = 0;
  auto claim = std::async(std::launch::async, [&] {
    // The recheck has the slot once it is not quarantined (busy: neither free nor quarantined).
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         pool.stats().quarantined == 1 && std::chrono::steady_clock::now() < deadline;)
      std::this_thread::sleep_for(1ms);
    free_meanwhile = pool.stats().free;
    return pool.claim((t.path / "new.sst").string());
  });
  const bool answered = claim.wait_for(60s) == std::future_status::ready;
  EXPECT_TRUE(answered) << "the claim waited for the recheck's write-out";
  EXPECT_EQ(recheck.wait_for(0s), std::future_status::timeout) << "the write-out was still waiting";
  const int rd = ::open(slot_file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // lets the write-out go on
  ASSERT_GE(rd, 0);
  EXPECT_EQ(recheck.get(), 0u) << "a FIFO cannot be written out: the slot stays quarantined";
  ::close(rd);
  auto c = claim.get();
  ASSERT_TRUE(c);
  EXPECT_NE(c->index, slot);
  if (answered) {
    EXPECT_EQ(free_meanwhile, 3u) << "the slot being written out was not free";
  }
  EXPECT_EQ(pool.stats().quarantined, 1u);
  EXPECT_EQ(pool.stats().reclaimed, 0u);
}

// The pool directory moved: its owners' links name slots that are not this
// pool's, and the data is theirs.
TEST(SstPool, AMovedPoolKeepsTheSlotsItsOwnersStillName) {
  TempDir t;
  fs::path db = t.path / "db";
  fs::create_directories(db);
  const uint32_t slot = pool_with_one_file(t.path / "pool", db / "000050.sst");
  fs::rename(t.path / "pool", t.path / "pool2");
  SstPool pool(options(t.path / "pool2"));
  EXPECT_EQ(pool.stats().quarantined, 1u);
  EXPECT_EQ(pool.stats().reclaimed, 0u);
  ASSERT_EQ(pool.quarantined().size(), 1u);
  EXPECT_NE(pool.quarantined()[0].reason.find("was the pool moved?"), std::string::npos)
      << pool.quarantined()[0].reason;
  EXPECT_EQ(stat_of(t.path / "pool2" / slot_file_name(slot)).st_size, 3000);
}

// A slot that holds data while its record says free was never written by
// this pool (claims record the owner first; releases truncate first): kept.
TEST(SstPool, DataInASlotRecordedFreeIsQuarantined) {
  TempDir t;
  fs::path dir = t.path / "pool";
  { SstPool pool(options(dir)); }
  write_file(dir / slot_file_name(2), 500, 'x');
  SstPool pool(options(dir));
  EXPECT_EQ(pool.stats().quarantined, 1u);
  EXPECT_EQ(stat_of(dir / slot_file_name(2)).st_size, 500);
}

// The bytes this process has passed to write system calls (wchar of
// /proc/self/io): the index's and the slots' writes alike.
uint64_t bytes_written_by_this_process() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  ADD_FAILURE() << "no wchar in /proc/self/io";
  return 0;
}

// Repro of issue 22 §1.3 on a small filesystem: a pool that does not fit
// used to leave its first slot's partial preallocation and an index that
// refused the corrected geometry.
TEST(SstPool, ACreationThatFailsLeavesNothingBehind) {
  TempDir t;
  SmallFs small(t.path / "small", "8m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs for a real ENOSPC: " << small.why;
  struct statvfs before {};
  ASSERT_EQ(::statvfs(small.dir.c_str(), &before), 0);
  fs::path dir = small.dir / "pool";
  const uint64_t written_before = bytes_written_by_this_process();
  std::string refused = message_of([&] { SstPool p(options(dir, 4, 3 << 20)); });
  EXPECT_NE(refused.find("no space to preallocate"), std::string::npos) << refused;
  EXPECT_LT(bytes_written_by_this_process() - written_before, uint64_t{3} << 20)
      << "every slot's space is taken before any slot is written out";
  EXPECT_FALSE(fs::exists(dir)) << "the directory it made is gone with everything in it";
  struct statvfs after {};
  ASSERT_EQ(::statvfs(small.dir.c_str(), &after), 0);
  EXPECT_EQ(after.f_bfree, before.f_bfree) << "every block it allocated is free again";
  // In a directory that was there before: it stays, empty.
  fs::create_directories(dir);
  EXPECT_THROW(SstPool(options(dir, 4, 3 << 20)), std::system_error);
  EXPECT_TRUE(fs::is_empty(dir));
  SstPool fits(options(dir, 4, 1 << 20));
  EXPECT_EQ(fits.stats().free, 4u);
}

// A creation killed half-way (pool.index.tmp and some slots) is removed and
// made again; slot files without any index are refused, never reused.
TEST(SstPool, AnInterruptedCreationIsRedoneButSlotsWithoutAnIndexAreRefused) {
  TempDir t;
  fs::path dir = t.path / "pool";
  fs::create_directories(dir);
  std::ofstream(dir / "pool.index.tmp") << "half";
  std::ofstream(dir / "slot-000000") << "never claimed";
  {
    SstPool pool(options(dir));
    EXPECT_EQ(pool.stats().free, 4u);
    EXPECT_EQ(pool.stats().quarantined, 0u);
  }
  TempDir t2;
  fs::create_directories(t2.path / "pool");
  std::ofstream(t2.path / "pool" / "slot-000003") << "live data of a pool whose index is lost";
  std::string refused = message_of([&] { SstPool p(options(t2.path / "pool")); });
  EXPECT_NE(refused.find("holds 1 slot files but no pool.index"), std::string::npos) << refused;
  EXPECT_EQ(read_all(t2.path / "pool" / "slot-000003"), "live data of a pool whose index is lost");
}

// An index written by the previous build (version 1: owner records without
// checksums, all-zero meaning free) is upgraded in place; nothing is freed
// that the new rules cannot show free.
TEST(SstPool, AVersion1IndexIsUpgradedAndNothingUnaccountedIsFreed) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  {  // the slot files, empty as version 1 left free slots
    SstPool pool(options(dir));
    for (uint32_t i = 0; i < 4; ++i) fs::resize_file(dir / slot_file_name(i), 0);
  }
  // Version 1: a header page, then one page per slot {magic, slot, len, 0, path}.
  std::string index(4096 * 5, '\0');
  auto put32 = [&](size_t at, uint32_t v) { std::memcpy(index.data() + at, &v, 4); };
  auto put64 = [&](size_t at, uint64_t v) { std::memcpy(index.data() + at, &v, 8); };
  put64(0, 0x6c6f6f706b757064ull);
  put32(8, 1);
  put32(12, 4096);
  put64(16, 4);
  put64(24, kSlotBytes);
  auto owner_record = [&](uint32_t slot, const std::string& owner) {
    size_t at = 4096 * (1 + slot);
    put32(at, 0x534c4f54);
    put32(at + 4, slot);
    put32(at + 8, static_cast<uint32_t>(owner.size()));
    std::memcpy(index.data() + at + 16, owner.data(), owner.size());
  };
  const fs::path live = db / "000010.sst", missing = db / "000011.sst";
  owner_record(0, live.string());
  fs::create_symlink(dir / slot_file_name(0), live);
  write_file(live, 100, 'a');
  owner_record(1, missing.string());
  write_file(dir / slot_file_name(1), 200, 'b');  // its owner is gone: deleted, or out of sight?
  write_file(dir / slot_file_name(2), 300, 'c');  // all-zero record over data
  // The slot's size: what a written-out free slot looks like, but version 1
  // never left a free slot other than empty.
  write_file(dir / slot_file_name(3), kSlotBytes, 'd');
  {
    std::ofstream out(dir / "pool.index", std::ios::binary | std::ios::trunc);
    out.write(index.data(), static_cast<std::streamsize>(index.size()));
  }
  {
    SstPool pool(options(dir));
    SstPool::Stats s = pool.stats();
    EXPECT_EQ(s.reclaimed, 0u);
    EXPECT_EQ(s.quarantined, 3u);
    EXPECT_EQ(s.free, 0u);
    EXPECT_EQ(pool.slot_of(live.string()), 0u);
  }
  EXPECT_EQ(stat_of(dir / slot_file_name(1)).st_size, 200);
  EXPECT_EQ(stat_of(dir / slot_file_name(2)).st_size, 300);
  EXPECT_EQ(read_all(dir / slot_file_name(3)), std::string(kSlotBytes, 'd'));
  EXPECT_EQ(read_all(live), std::string(100, 'a'));
  PoolCheck c = check_pool(dir.string());
  EXPECT_TRUE(c.usable) << c.problem;
  EXPECT_EQ(c.version, 2u) << "rewritten as version 2";
  // The upgraded live owner carries its directory now: deleted, it is shown free.
  ASSERT_EQ(::unlink(live.c_str()), 0);
  SstPool pool(options(dir));
  EXPECT_EQ(pool.stats().reclaimed, 1u);
  EXPECT_EQ(pool.stats().quarantined, 3u);
}

TEST(SstPool, CheckReportsEverySlotAndTheDbLinksWithoutTakingThePool) {
  TempDir t;
  fs::path dir = t.path / "pool", db = t.path / "db";
  fs::create_directories(db);
  auto pool = std::make_unique<SstPool>(options(dir));
  SstPool::Slot live = claim_linked(*pool, db / "000007.sst");
  write_file(db / "000007.sst", 1234, 'l');
  PoolCheck c = check_pool(dir.string(), db.string());
  ASSERT_TRUE(c.usable) << c.problem;
  EXPECT_TRUE(c.in_use) << "the pool is open";
  EXPECT_EQ(c.slots, 4u);
  ASSERT_EQ(c.reports.size(), 4u);
  EXPECT_EQ(c.reports[live.index].verdict, PoolCheck::Verdict::kInUse);
  EXPECT_EQ(c.reports[live.index].bytes, 1234u);
  EXPECT_TRUE(c.findings.empty()) << c.findings[0];
  pool.reset();
  EXPECT_FALSE(check_pool(dir.string()).in_use);
  // The DB renamed away: quarantined, and the link found under its new name.
  fs::rename(db, t.path / "moved");
  c = check_pool(dir.string(), (t.path / "moved").string());
  EXPECT_EQ(c.reports[live.index].verdict, PoolCheck::Verdict::kQuarantined);
  ASSERT_EQ(c.findings.size(), 2u);
  EXPECT_NE(c.findings[0].find("quarantined"), std::string::npos) << c.findings[0];
  EXPECT_NE(c.findings[1].find("whose record names " + (db / "000007.sst").string()), std::string::npos)
      << c.findings[1];
  EXPECT_FALSE(check_pool((t.path / "nothing").string()).usable);
  std::ofstream(t.path / "moved" / "pool.index") << "not an index";
  c = check_pool((t.path / "moved").string());
  EXPECT_FALSE(c.usable);
  EXPECT_NE(c.problem.find("is not an SST pool index"), std::string::npos) << c.problem;
}

// Issue 25: the agent's direct writes into a slot must be overwrites of
// written blocks, not writes into unwritten (preallocated) extents, whose
// conversion at I/O completion the kernel's workers do on the host. A free
// slot is written out, so is the slot a file was written into (from offset
// 0, then truncated to its size, as the engine does), and so is it again
// once released.
TEST(SstPool, SlotsHaveNoUnwrittenExtentsBeforeOrAfterAFileIsWrittenIntoThem) {
  TempDir t;
  fs::path dir = t.path / "pool", owner = t.path / "000012.sst";
  SstPool pool(options(dir));
  if (!extents_of(dir / slot_file_name(0))) GTEST_SKIP() << "no FIEMAP on " << dir;
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(not_written_out(dir / slot_file_name(i)), "");
    EXPECT_FALSE(has_unwritten_extent(dir / slot_file_name(i))) << i;
  }
  SstPool::Slot slot = claim_linked(pool, owner);
  {
    constexpr size_t kWritten = 300 << 10, kFinal = 300'000;
    int fd = ::open(owner.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    void* data = std::aligned_alloc(4096, kWritten);
    std::memset(data, 's', kWritten);
    EXPECT_EQ(::pwrite(fd, data, kWritten, 0), static_cast<ssize_t>(kWritten));
    std::free(data);
    EXPECT_EQ(::ftruncate(fd, kFinal), 0);
    EXPECT_EQ(::fsync(fd), 0);
    ::close(fd);
    EXPECT_EQ(stat_of(owner).st_size, static_cast<off_t>(kFinal));
  }
  EXPECT_FALSE(has_unwritten_extent(slot.path)) << "the file, and nothing preallocated past its end";
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  pool.release(slot.index);
  EXPECT_EQ(not_written_out(slot.path), "");
  EXPECT_FALSE(has_unwritten_extent(slot.path));
}

// An earlier build left free slots empty and preallocated (unwritten
// extents), and preallocated past the end of the files in use. Opened now,
// its free slots are written out (also one a crash left sized but not
// written); a file in use keeps every byte and is written out on release.
TEST(SstPool, APoolOfAnEarlierBuildIsWrittenOutAtOpenAndKeepsItsFiles) {
  TempDir t;
  fs::path dir = t.path / "pool", owner = t.path / "000013.sst";
  uint32_t used;
  {
    SstPool pool(options(dir));
    if (!extents_of(dir / slot_file_name(0))) GTEST_SKIP() << "no FIEMAP on " << dir;
    used = claim_linked(pool, owner).index;
    write_file(owner, 3000, 'k');
  }
  for (uint32_t i = 0; i < 4; ++i) {
    const fs::path p = dir / slot_file_name(i);
    int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    if (i != used) {
      ASSERT_EQ(::ftruncate(fd, 0), 0);
    }
    ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, kSlotBytes), 0);
    ::close(fd);
    EXPECT_TRUE(has_unwritten_extent(p)) << i << ": as the earlier build left it";
  }
  const uint32_t sparse = used == 3 ? 2 : 3;  // sized, never written: a write-out cut short
  fs::resize_file(dir / slot_file_name(sparse), 0);
  fs::resize_file(dir / slot_file_name(sparse), kSlotBytes);
  SstPool pool(options(dir));
  EXPECT_EQ(pool.stats().free, 3u);
  EXPECT_EQ(pool.stats().quarantined, 0u);
  for (uint32_t i = 0; i < 4; ++i)
    if (i != used) {
      EXPECT_EQ(not_written_out(dir / slot_file_name(i)), "");
    }
  EXPECT_EQ(read_all(owner), std::string(3000, 'k'));
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  pool.release(used);
  EXPECT_EQ(not_written_out(dir / slot_file_name(used)), "");
  EXPECT_FALSE(has_unwritten_extent(dir / slot_file_name(used)));
}

// Writers that append to their slot (RocksDB's reopened files: filepool)
// get empty, preallocated free slots, also from a pool that was written out.
TEST(SstPool, APoolForAppendingWritersKeepsItsFreeSlotsEmpty) {
  TempDir t;
  fs::path dir = t.path / "pool", owner = t.path / "000014.sst";
  { SstPool written(options(dir)); }
  SstPool::Options o = options(dir);
  o.write_out = false;
  SstPool pool(o);
  EXPECT_EQ(pool.stats().free, 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    struct stat st = stat_of(dir / slot_file_name(i));
    EXPECT_EQ(st.st_size, 0) << i;
    EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSlotBytes) << "preallocated";
  }
  SstPool::Slot slot = claim_linked(pool, owner);
  write_file(owner, 5000, 'a');
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  pool.release(slot.index);
  EXPECT_EQ(stat_of(slot.path).st_size, 0);
}

// A release that finds no space for the tail the writer's truncation gave
// back still frees the slot (emptied, usable without its reservation).
TEST(SstPool, AReleaseWithoutSpaceForTheTailEmptiesTheSlot) {
  TempDir t;
  SmallFs small(t.path / "small", "1m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs for a real ENOSPC: " << small.why;
  fs::path owner = t.path / "000015.sst";
  SstPool pool(options(small.dir / "pool", 4, 64 << 10));
  SstPool::Slot slot = claim_linked(pool, owner);
  write_file(owner, 1000, 'w');
  {
    std::ofstream filler(small.dir / "filler", std::ios::binary);
    std::string chunk(4096, 'f');
    while (filler.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && filler.flush()) {}
  }
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  EXPECT_NO_THROW(pool.release(slot.index));
  EXPECT_EQ(pool.stats().free, 4u);
  EXPECT_EQ(stat_of(slot.path).st_size, 0);
  PoolCheck c = check_pool((small.dir / "pool").string());
  EXPECT_EQ(c.reports[slot.index].verdict, PoolCheck::Verdict::kFree);
}

// A free slot that an open finds no space to write out is emptied, not left
// at the size a failed fallocate grew it to (ext4 keeps what it allocated):
// a free slot of any size but 0 or the slot's would be quarantined at the
// next open, although it was always free.
TEST(SstPool, AWriteOutAtOpenWithoutSpaceEmptiesTheSlot) {
  TempDir t;
  SmallExt4 small(t.path / "small", 16 << 20);
  if (!small.mounted) GTEST_SKIP() << "cannot mount a small ext4 for a partial fallocate: " << small.why;
  const fs::path dir = small.dir / "pool";
  const fs::path slot = dir / slot_file_name(1);
  {
    SstPool::Options o = options(dir, 2, 4 << 20);
    o.write_out = false;  // an earlier build's pool: its free slots empty
    SstPool pool(o);
  }
  fs::resize_file(slot, 0);  // and without their preallocation (ftruncate frees it)
  {
    std::ofstream filler(small.dir / "filler", std::ios::binary);
    std::string chunk(64 << 10, 'f');
    while (filler.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && filler.flush()) {}
  }
  // Room for part of a slot, not all of it.
  fs::resize_file(small.dir / "filler", fs::file_size(small.dir / "filler") - (1 << 20));
  {
    SstPool pool(options(dir, 2, 4 << 20));
    EXPECT_EQ(pool.stats().free, 2u);
  }
  EXPECT_EQ(stat_of(slot).st_size, 0) << "the slot is left as a failed write-out made it";
  PoolCheck c = check_pool(dir.string());
  ASSERT_EQ(c.reports.size(), 2u);
  EXPECT_EQ(c.reports[1].verdict, PoolCheck::Verdict::kFree) << c.reports[1].reason;
  SstPool again(options(dir, 2, 4 << 20));
  EXPECT_EQ(again.stats().quarantined, 0u);
}

TEST(SstPool, RefusesAnEmptyGeometry) {
  TempDir t;
  EXPECT_THROW(SstPool(options(t.path, 0)), std::runtime_error);
  EXPECT_THROW(SstPool(options(t.path, 4, 0)), std::runtime_error);
  EXPECT_THROW(SstPool(SstPool::Options{"", 4, kSlotBytes}), std::runtime_error);
}

}  // namespace
}  // namespace dpukit::kv
