// Regression driver for a fuzz target when built without libFuzzer (GCC),
// linked with the target's LLVMFuzzerTestOneInput:
//   <target>_fuzz_seeds <corpus dir> [mutations per seed, default 3000]
//                       [selector values, default 0]
// Feeds every file of the corpus, each of its prefixes, and deterministic
// pseudo-random mutations of it (bit flips, interesting bytes, insertions,
// deletions, truncations, splices with another seed) to
// LLVMFuzzerTestOneInput. For a target whose first byte selects a mode (a
// link type, a way to split the input), "selector values" N also feeds each
// seed with its first byte set to 0, 1, ..., N-1. Each input is placed so that it ends right at an
// inaccessible page: a read past the end faults even without a sanitizer.
// Exits non-zero if the corpus is missing or empty; a failed invariant in the
// target aborts.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dpukit/core/random.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

// A buffer followed by a PROT_NONE page; inputs are copied to its end.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t capacity) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    usable_ = (capacity + page_ - 1) / page_ * page_;
    void* p = mmap(nullptr, usable_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      std::exit(2);
    }
    base_ = static_cast<uint8_t*>(p);
    if (mprotect(base_ + usable_, page_, PROT_NONE) != 0) {
      std::perror("mprotect");
      std::exit(2);
    }
  }
  ~GuardedBuffer() { munmap(base_, usable_ + page_); }
  size_t capacity() const { return usable_; }
  void run(const Bytes& in) {
    if (in.size() > usable_) {
      LLVMFuzzerTestOneInput(in.data(), in.size());
      return;
    }
    uint8_t* at = base_ + usable_ - in.size();
    if (!in.empty()) std::memcpy(at, in.data(), in.size());
    LLVMFuzzerTestOneInput(at, in.size());
  }

 private:
  uint8_t* base_ = nullptr;
  size_t page_ = 4096, usable_ = 0;
};

using Rng = dpukit::SplitMix64;

constexpr uint8_t kInteresting[] = {0x00, 0x01, 0x04, 0x05, 0x06, 0x08, 0x0f, 0x11, 0x1f, 0x20, 0x3f, 0x40,
                                    0x45, 0x46, 0x4f, 0x60, 0x7f, 0x80, 0x81, 0x86, 0x88, 0x91, 0xa8, 0xdd,
                                    0xfe, 0xff};

Bytes mutate(const Bytes& seed, const std::vector<Bytes>& all, Rng& rng) {
  Bytes b = seed;
  size_t edits = 1 + rng.below(6);
  for (size_t e = 0; e < edits; ++e) {
    switch (rng.below(7)) {
      case 0:  // bit flip
        if (!b.empty()) b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // interesting byte
        if (!b.empty()) b[rng.below(b.size())] = kInteresting[rng.below(sizeof kInteresting)];
        break;
      case 2:  // random byte
        if (!b.empty()) b[rng.below(b.size())] = static_cast<uint8_t>(rng.next());
        break;
      case 3:  // insert bytes
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng.below(b.size() + 1)), 1 + rng.below(8),
                 static_cast<uint8_t>(rng.next()));
        break;
      case 4:  // delete bytes
        if (!b.empty()) {
          size_t at = rng.below(b.size());
          size_t n = std::min(b.size() - at, 1 + rng.below(8));
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
        break;
      case 5:  // truncate
        b.resize(rng.below(b.size() + 1));
        break;
      default: {  // splice: our head, another seed's tail
        const Bytes& other = all[rng.below(all.size())];
        size_t cut = rng.below(b.size() + 1), from = rng.below(other.size() + 1);
        b.resize(cut);
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus dir> [mutations per seed] [selector values]\n", argv[0]);
    return 2;
  }
  long per_seed = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 3000;
  long selectors = argc > 3 ? std::clamp(std::strtol(argv[3], nullptr, 10), 0L, 256L) : 0;
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1], ec)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  if (ec) {
    std::fprintf(stderr, "%s: %s\n", argv[1], ec.message().c_str());
    return 2;
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "%s: no seed files\n", argv[1]);
    return 2;
  }
  std::vector<Bytes> seeds;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  GuardedBuffer buf(1 << 16);
  uint64_t runs = 0;
  buf.run({});
  ++runs;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const Bytes& s = seeds[i];
    for (size_t len = 0; len <= s.size(); ++len) {
      buf.run(Bytes(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(len)));
      ++runs;
    }
    // The same input under every mode.
    for (long v = 0; v < selectors && !s.empty(); ++v) {
      Bytes b = s;
      b[0] = static_cast<uint8_t>(v);
      buf.run(b);
      ++runs;
    }
    Rng rng(0x5eed0000 + i);
    for (long m = 0; m < per_seed; ++m) {
      buf.run(mutate(s, seeds, rng));
      ++runs;
    }
  }
  std::printf("%s: %zu seed files, %llu inputs, no failure\n",
              std::filesystem::path(argv[0]).filename().c_str(), seeds.size(), static_cast<unsigned long long>(runs));
  return 0;
}
