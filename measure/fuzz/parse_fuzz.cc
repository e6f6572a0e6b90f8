// Fuzz target for the packet parser (trace/parse.h).
//
// Input: the first byte chooses the link type (modulo the five supported
// ones), the rest is the captured frame. Built with clang's libFuzzer by
// scripts/fuzz-measure.sh; built with GCC into measure_fuzz_seeds, which
// replays the corpus and mutations of it (run_seeds.cc) as a ctest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "trace/parse.h"

namespace {

// DLT_EN10MB, DLT_RAW, DLT_IPV4, DLT_LINUX_SLL, DLT_LINUX_SLL2
constexpr int kLinktypes[] = {1, 12, 228, 113, 276};

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int linktype = kLinktypes[data[0] % (sizeof kLinktypes / sizeof kLinktypes[0])];
  const uint8_t* frame = data + 1;
  const size_t caplen = size - 1;

  dpukit::FlowKey key;
  key.bytes.fill(0xee);
  const dpukit::FlowKey untouched = key;
  dpukit::measure::ParseResult r = dpukit::measure::parse_frame(linktype, frame, caplen, &key);
  // Invariants: a key only on success, and then for TCP or UDP; the same
  // answer without a key; a valid result code.
  if (r == dpukit::measure::ParseResult::kOk) {
    check(key.proto() == 6 || key.proto() == 17);
  } else {
    check(key == untouched);
  }
  check(dpukit::measure::parse_frame(linktype, frame, caplen, nullptr) == r);
  check(dpukit::measure::parse_result_name(r)[0] != '?');
  // Any prefix that yields a key yields the same key (the parser looks at
  // nothing past the ports).
  if (r == dpukit::measure::ParseResult::kOk && caplen > 0) {
    dpukit::FlowKey shorter;
    dpukit::measure::ParseResult r2 = dpukit::measure::parse_frame(linktype, frame, caplen - 1, &shorter);
    check(r2 == dpukit::measure::ParseResult::kOk ? shorter == key
                                                  : r2 == dpukit::measure::ParseResult::kTruncated);
  }
  return 0;
}
