#include "temp_dir.h"
#include "pool.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace dpukit::kv {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSlotBytes = 1 << 20;

SstPool::Options options(const fs::path& dir, size_t slots = 4, uint64_t slot_bytes = kSlotBytes) {
  return SstPool::Options{dir.string(), slots, slot_bytes};
}

struct stat stat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

void write_file(const fs::path& p, size_t len, char fill) {
  std::ofstream out(p, std::ios::binary | std::ios::in | std::ios::out);
  ASSERT_TRUE(out) << p;
  std::string data(len, fill);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
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

TEST(SstPool, CreatesPreallocatedSlotsAndReopensWithTheSameGeometry) {
  TempDir t;
  fs::path dir = t.path / "pool";
  {
    SstPool pool(options(dir));
    EXPECT_EQ(pool.dir(), fs::canonical(dir).string());
    SstPool::Stats s = pool.stats();
    EXPECT_EQ(s.slots, 4u);
    EXPECT_EQ(s.free, 4u);
    for (int i = 0; i < 4; ++i) {
      struct stat st = stat_of(dir / ("slot-00000" + std::to_string(i)));
      EXPECT_EQ(st.st_size, 0) << "KEEP_SIZE: preallocated but empty";
      EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSlotBytes) << "preallocated";
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

TEST(SstPool, StatReportsTheBytesWrittenAndReleaseEmptiesTheSlot) {
  TempDir t;
  SstPool pool(options(t.path / "pool"));
  fs::path owner = t.path / "000007.sst";
  SstPool::Slot slot = claim_linked(pool, owner);
  write_file(owner, 12345, 'a');
  EXPECT_EQ(stat_of(owner).st_size, 12345) << "KEEP_SIZE preallocation must not show in the size";
  EXPECT_EQ(pool.slot_of(owner.string()), slot.index);
  ASSERT_EQ(::unlink(owner.c_str()), 0);
  pool.release(slot.index);
  struct stat st = stat_of(slot.path);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kSlotBytes) << "preallocated again";
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
    EXPECT_EQ(stat_of(dir / name).st_size, 0) << name << " was emptied";
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(pool.claim((t.path / ("new" + std::to_string(i))).string()));
  EXPECT_FALSE(pool.claim((t.path / "one-too-many").string()));
}

TEST(SstPool, RefusesAnEmptyGeometry) {
  TempDir t;
  EXPECT_THROW(SstPool(options(t.path, 0)), std::runtime_error);
  EXPECT_THROW(SstPool(options(t.path, 4, 0)), std::runtime_error);
  EXPECT_THROW(SstPool(SstPool::Options{"", 4, kSlotBytes}), std::runtime_error);
}

}  // namespace
}  // namespace dpukit::kv
