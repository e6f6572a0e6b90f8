// The dev backend of the deflate operator: DPDK compressdev.
//
// Device choice, queue pairs and the bursts of operations in flight are as
// for the cryptodev kernels (cryptodev.h): a hardware PMD
// (RTE_COMPDEV_FF_HW_ACCELERATED) when one offers stateless DEFLATE with
// dynamic Huffman codes, else the first software PMD that does (here
// compress_isal); each device configured once per process with all its
// queue pairs; one queue pair and one private xform per kernel, given back
// when the kernel is destroyed.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "dev/dev_kernel.h"
#include "operator.h"

namespace dpukit::bench {

// Raw DEFLATE (RFC 1951: no zlib or gzip wrapper, no checksum) of the whole
// input as one stateless operation with dynamic Huffman codes and a 32 KiB
// window; the output is the compressed bytes (inflate with zlib's
// windowBits -15). `level` is compressdev's: 1 (fastest) to 9, or -1 for
// the PMD's default; each PMD maps it to what it has (compress_isal: 1 and
// 2 to ISA-L levels 1 and 2, 3-9 to ISA-L level 3 on AVX2/AVX-512 CPUs,
// else 2; level 0, "stored only", it refuses). `size` is the largest input;
// the output buffer holds the worst case for it, or `out_room` bytes where
// that is given (an operation whose output does not fit then fails on the
// device, RTE_COMP_OP_STATUS_OUT_OF_SPACE_TERMINATED).
std::vector<std::unique_ptr<Kernel>> dev_deflate_kernels(int level, size_t size, unsigned threads,
                                                         size_t out_room = 0);

// The output room a kernel made for `size` has: more than DEFLATE can
// produce for any `size`-byte input (stored blocks cost 5 bytes per 64 KiB;
// a dynamic block header is under 300 bytes).
size_t dev_deflate_bound(size_t size);

}  // namespace dpukit::bench
