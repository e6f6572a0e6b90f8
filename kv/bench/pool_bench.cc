// The SST file pool's costs (docs/kv.md, "Free slots are written out"):
// creating a pool and releasing a slot, with free slots written out (the
// default) against the earlier layout (empty, preallocated with
// FALLOC_FL_KEEP_SIZE: Options::write_out = false). The pool is made under
// $TMPDIR (ext4 here: tmpfs would hide the extents' cost) and removed after.
//
//   build/bin/kv_pool_bench --benchmark_filter=SlotRelease
//   build/bin/kv_pool_bench --benchmark_filter=PoolCreation
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "pool.h"

namespace fs = std::filesystem;
using dpukit::kv::SstPool;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kFileBytes = 16 * kMiB;  // an SST of the stall regime (16 MB target files)

fs::path fresh_dir(const char* name) {
  fs::path dir = fs::temp_directory_path() / (std::string("dpukit-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

SstPool::Options options(const fs::path& dir, size_t slots, uint64_t slot_mib, bool write_out) {
  SstPool::Options o;
  o.dir = dir.string();
  o.slots = slots;
  o.slot_bytes = slot_mib * kMiB;
  o.write_out = write_out;
  return o;
}

// Writes an SST into the slot as the engine does: O_DIRECT from offset 0,
// durable, then truncated to its size.
void write_file(const std::string& path, void* data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  for (uint64_t at = 0; at < kFileBytes; at += kMiB)
    if (::pwrite(fd, data, kMiB, static_cast<off_t>(at)) != static_cast<ssize_t>(kMiB))
      throw std::runtime_error("pwrite " + path + ": " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(kFileBytes)) != 0 || ::fdatasync(fd) != 0)
    throw std::runtime_error("truncate " + path + ": " + std::strerror(errno));
  ::close(fd);
}

// Args: slot size in MiB, written out (1) or the earlier layout (0). Only
// the release is timed.
void BM_SlotRelease(benchmark::State& state) {
  const fs::path dir = fresh_dir("pool-release");
  {
    SstPool pool(options(dir, 2, static_cast<uint64_t>(state.range(0)), state.range(1) != 0));
    std::unique_ptr<void, decltype(&std::free)> data(std::aligned_alloc(4096, kMiB), &std::free);
    std::memset(data.get(), 0x5a, kMiB);
    for (auto _ : state) {
      state.PauseTiming();
      auto slot = pool.claim((dir / "owner.sst").string());
      if (!slot) throw std::runtime_error("no free slot");
      write_file(slot->path, data.get());
      state.ResumeTiming();
      pool.release(slot->index);
    }
  }
  fs::remove_all(dir);
}
BENCHMARK(BM_SlotRelease)
    ->ArgsProduct({{19, 72}, {0, 1}})
    ->ArgNames({"slot_mib", "written_out"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(16)
    ->UseRealTime();

// Args: slots, slot size in MiB, written out or not. The pool is made and
// removed each iteration (the removal untimed).
void BM_PoolCreation(benchmark::State& state) {
  const fs::path dir = fresh_dir("pool-create");
  for (auto _ : state) {
    { SstPool pool(options(dir, static_cast<size_t>(state.range(0)), static_cast<uint64_t>(state.range(1)),
                           state.range(2) != 0)); }
    state.PauseTiming();
    fs::remove_all(dir);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_PoolCreation)
    ->ArgsProduct({{32}, {19}, {0, 1}})
    ->Args({64, 72, 0})
    ->Args({64, 72, 1})
    ->ArgNames({"slots", "slot_mib", "written_out"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
