// Storage operators (Table 4, scenario "storage"): LZ77 (LZ4 block format),
// Huffman coding (raw deflate of literals), Snappy, Compress (full deflate)
// and the CRC-32C data digest. The compressors' inputs are text-like bytes
// (fill_text) so that ratios are realistic; their output is the compressed
// block, which legitimately differs between implementations, so each one is
// checked by decoding it with the ref decoder and comparing with the input.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <lz4.h>
#include <snappy.h>
#include <zlib.h>

#include "deflate_ref.h"
#include "dev/compressdev.h"
#include "operator.h"

namespace dpukit::bench {
namespace {

// compressdev is the device class for compression, but DPDK 22.11 defines
// only deflate and LZS for it: these operators have no device form.
constexpr const char* kNoDevice =
    "no device class for it: DPDK 22.11's compressdev offers deflate (the compress operator) and LZS only";

uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // host order: only compared and hashed, never stored
}

// Records why a stream is malformed; returns false for the caller to return.
bool fail(std::string& why, const char* reason) {
  why = reason;
  return false;
}

uint32_t hash32(uint32_t v, unsigned bits) { return (v * 2654435761u) >> (32 - bits); }

// Match-finder table size: about the input size, 2^8 to 2^max_bits entries,
// so a small block does not pay for clearing a large table.
unsigned table_bits(size_t n, unsigned max_bits) {
  return std::clamp<unsigned>(static_cast<unsigned>(std::bit_width(n)), 8, max_bits);
}

std::string decode_failure(const std::string& codec, std::span<const uint8_t> in, bool decoded_ok,
                           const std::string& why, const Bytes& decoded, const Bytes& got) {
  if (!decoded_ok)
    return "the ref " + codec + " decoder rejects the output (" + why + "); output " + std::to_string(got.size()) +
           " bytes: " + hex(got, 32);
  if (decoded.size() != in.size() || !std::equal(decoded.begin(), decoded.end(), in.begin()))
    return "the output decodes to other bytes than the input: " +
           describe_difference(Bytes(in.begin(), in.end()), decoded);
  return "";
}

// ------------------------------------------------------------ LZ4 block format
// The LZ4 block format (lz4 doc/lz4_Block_format.md): sequences of a token
// (4 bits literal length, 4 bits match length - 4), literal-length bytes,
// literals, a 2-byte little-endian offset and match-length bytes; lengths of
// 15 or more continue in bytes of 255 plus a final byte. The last sequence is
// literals only; the last 5 bytes are literals, and the last match starts at
// least 12 bytes before the end of the block.
constexpr size_t kLz4MinMatch = 4, kLz4LastLiterals = 5, kLz4MatchStartLimit = 12, kLz4MaxOffset = 65535;

void lz4_put_length(Bytes& out, size_t v) {  // v >= 15 was signalled in the token
  v -= 15;
  for (; v >= 255; v -= 255) out.push_back(255);
  out.push_back(static_cast<uint8_t>(v));
}

void lz4_put_sequence(Bytes& out, std::span<const uint8_t> literals, size_t offset, size_t match_len) {
  const size_t ml = match_len ? match_len - kLz4MinMatch : 0;
  out.push_back(static_cast<uint8_t>(std::min<size_t>(literals.size(), 15) << 4 | std::min<size_t>(ml, 15)));
  if (literals.size() >= 15) lz4_put_length(out, literals.size());
  out.insert(out.end(), literals.begin(), literals.end());
  if (match_len == 0) return;  // the last sequence
  out.push_back(static_cast<uint8_t>(offset));
  out.push_back(static_cast<uint8_t>(offset >> 8));
  if (ml >= 15) lz4_put_length(out, ml);
}

class Lz4RefCodec {
 public:
  // Greedy matching over a hash table of 4-byte sequences.
  void compress(std::span<const uint8_t> in, Bytes& out) {
    out.clear();
    const size_t n = in.size();
    const uint8_t* p = in.data();
    size_t anchor = 0;
    if (n > kLz4MatchStartLimit) {
      const unsigned bits = table_bits(n, 14);
      table_.assign(size_t{1} << bits, -1);
      const size_t last_start = n - kLz4MatchStartLimit, end_limit = n - kLz4LastLiterals;
      size_t ip = 0;
      while (ip <= last_start) {
        const uint32_t seq = load32(p + ip);
        const uint32_t h = hash32(seq, bits);
        const int64_t cand = table_[h];
        table_[h] = static_cast<int32_t>(ip);
        if (cand < 0 || ip - static_cast<size_t>(cand) > kLz4MaxOffset || load32(p + cand) != seq) {
          ++ip;
          continue;
        }
        size_t start = ip, from = static_cast<size_t>(cand);
        while (start > anchor && from > 0 && p[start - 1] == p[from - 1]) --start, --from;  // extend backwards
        size_t end = ip + kLz4MinMatch, src = static_cast<size_t>(cand) + kLz4MinMatch;
        while (end < end_limit && p[end] == p[src]) ++end, ++src;
        lz4_put_sequence(out, in.subspan(anchor, start - anchor), ip - static_cast<size_t>(cand), end - start);
        table_[hash32(load32(p + end - 2), bits)] = static_cast<int32_t>(end - 2);
        ip = anchor = end;
      }
    }
    lz4_put_sequence(out, in.subspan(anchor), 0, 0);
  }

  // Decodes a block of at most max_out bytes; false (with why) when malformed.
  static bool decompress(std::span<const uint8_t> in, size_t max_out, Bytes& out, std::string& why) {
    out.clear();
    size_t ip = 0, match_start = 0, match_end = 0;
    bool had_match = false;
    auto read_length = [&](size_t& v) {
      uint8_t b;
      do {
        if (ip == in.size()) return false;
        b = in[ip++];
        v += b;
      } while (b == 255);
      return true;
    };
    for (;;) {
      if (ip == in.size()) return fail(why, "block ends without a literal-only last sequence");
      const uint8_t token = in[ip++];
      size_t lit = token >> 4;
      if (lit == 15 && !read_length(lit)) return fail(why, "truncated literal length");
      if (in.size() - ip < lit) return fail(why, "literals run past the end of the block");
      if (max_out - out.size() < lit) return fail(why, "decodes to more bytes than expected");
      out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(ip),
                 in.begin() + static_cast<std::ptrdiff_t>(ip + lit));
      ip += lit;
      if (ip == in.size()) break;  // the last sequence has no match
      if (in.size() - ip < 2) return fail(why, "truncated offset");
      const size_t offset = in[ip] | static_cast<size_t>(in[ip + 1]) << 8;
      ip += 2;
      if (offset == 0) return fail(why, "offset 0");
      if (offset > out.size()) return fail(why, "offset before the start of the output");
      size_t len = token & 15;
      if (len == 15 && !read_length(len)) return fail(why, "truncated match length");
      len += kLz4MinMatch;
      if (max_out - out.size() < len) return fail(why, "decodes to more bytes than expected");
      match_start = out.size();
      out.resize(match_start + len);
      uint8_t* o = out.data();
      for (size_t k = 0; k < len; ++k) o[match_start + k] = o[match_start + k - offset];  // may overlap
      match_end = out.size();
      had_match = true;
    }
    if (had_match && (out.size() - match_end < kLz4LastLiterals || out.size() - match_start < kLz4MatchStartLimit))
      return fail(why, "end-of-block rules broken (last 5 bytes must be literals, last match must start 12 "
                   "bytes before the end)");
    return true;
  }

 private:
  std::vector<int32_t> table_;
};

// ------------------------------------------------------------ Snappy format
// The Snappy format (snappy format_description.txt): the uncompressed length
// as a little-endian base-128 varint, then elements whose tag's low 2 bits
// say: 00 literal (length - 1 in the upper 6 bits, or 60-63 = 1-4 following
// bytes), 01 copy of 4-11 bytes with an 11-bit offset, 10 copy of 1-64 bytes
// with a 2-byte offset, 11 the same with a 4-byte offset.
class SnappyRefCodec {
 public:
  void compress(std::span<const uint8_t> in, Bytes& out) {
    out.clear();
    for (uint64_t v = in.size();; v >>= 7) {
      if (v < 128) {
        out.push_back(static_cast<uint8_t>(v));
        break;
      }
      out.push_back(static_cast<uint8_t>(v | 128));
    }
    // Like snappy, fragments of 64 KiB compressed independently, so every
    // offset fits two bytes.
    for (size_t at = 0; at < in.size(); at += kFragment)
      compress_fragment(in.subspan(at, std::min(kFragment, in.size() - at)), out);
  }

  static bool decompress(std::span<const uint8_t> in, size_t max_out, Bytes& out, std::string& why) {
    out.clear();
    size_t ip = 0;
    uint64_t declared = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (ip == in.size()) return fail(why, "truncated length preamble");
      if (shift > 28) return fail(why, "length preamble longer than 5 bytes");
      const uint8_t b = in[ip++];
      declared |= static_cast<uint64_t>(b & 127) << shift;
      if (!(b & 128)) break;
    }
    if (declared > 0xFFFFFFFFu) return fail(why, "length preamble above 2^32 - 1");
    if (declared > max_out) return fail(why, "length preamble larger than expected");
    out.reserve(declared);
    while (ip < in.size()) {
      const uint8_t tag = in[ip++];
      size_t len, offset;
      auto little_endian = [&](unsigned bytes) {
        size_t v = 0;
        for (unsigned k = 0; k < bytes; ++k) v |= static_cast<size_t>(in[ip + k]) << (8 * k);
        ip += bytes;
        return v;
      };
      switch (tag & 3) {
        case 0: {
          len = (tag >> 2) + 1;
          if (len > 60) {
            const unsigned bytes = static_cast<unsigned>(len - 60);
            if (in.size() - ip < bytes) return fail(why, "truncated literal length");
            len = little_endian(bytes) + 1;
          }
          if (in.size() - ip < len) return fail(why, "literal runs past the end of the input");
          if (declared - out.size() < len) return fail(why, "more data than the length preamble says");
          out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(ip),
                     in.begin() + static_cast<std::ptrdiff_t>(ip + len));
          ip += len;
          continue;
        }
        case 1:
          if (in.size() - ip < 1) return fail(why, "truncated copy");
          len = ((tag >> 2) & 7) + 4;
          offset = static_cast<size_t>(tag >> 5) << 8 | little_endian(1);
          break;
        case 2:
          if (in.size() - ip < 2) return fail(why, "truncated copy");
          len = (tag >> 2) + 1;
          offset = little_endian(2);
          break;
        default:
          if (in.size() - ip < 4) return fail(why, "truncated copy");
          len = (tag >> 2) + 1;
          offset = little_endian(4);
          break;
      }
      if (offset == 0) return fail(why, "copy with offset 0");
      if (offset > out.size()) return fail(why, "copy from before the start of the output");
      if (declared - out.size() < len) return fail(why, "more data than the length preamble says");
      const size_t at = out.size();
      out.resize(at + len);
      uint8_t* o = out.data();
      for (size_t k = 0; k < len; ++k) o[at + k] = o[at + k - offset];  // may overlap
    }
    if (out.size() != declared) return fail(why, "less data than the length preamble says");
    return true;
  }

 private:
  static constexpr size_t kFragment = 65536;

  static void put_literal(Bytes& out, std::span<const uint8_t> lit) {
    if (lit.empty()) return;
    const size_t v = lit.size() - 1;
    if (v < 60) {
      out.push_back(static_cast<uint8_t>(v << 2));
    } else {
      const unsigned bytes = v < (1u << 8) ? 1 : v < (1u << 16) ? 2 : v < (1u << 24) ? 3 : 4;
      out.push_back(static_cast<uint8_t>((59 + bytes) << 2));
      for (unsigned k = 0; k < bytes; ++k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
    }
    out.insert(out.end(), lit.begin(), lit.end());
  }

  static void put_copy_piece(Bytes& out, size_t offset, size_t len) {  // 4 <= len <= 64, offset < 65536
    if (len < 12 && offset < 2048) {
      out.push_back(static_cast<uint8_t>(1 | (len - 4) << 2 | (offset >> 8) << 5));
      out.push_back(static_cast<uint8_t>(offset));
    } else {
      out.push_back(static_cast<uint8_t>(2 | (len - 1) << 2));
      out.push_back(static_cast<uint8_t>(offset));
      out.push_back(static_cast<uint8_t>(offset >> 8));
    }
  }

  static void put_copy(Bytes& out, size_t offset, size_t len) {
    // Pieces of at most 64 bytes, none left shorter than 4.
    for (; len >= 68; len -= 64) put_copy_piece(out, offset, 64);
    if (len > 64) {
      put_copy_piece(out, offset, 60);
      len -= 60;
    }
    put_copy_piece(out, offset, len);
  }

  void compress_fragment(std::span<const uint8_t> in, Bytes& out) {
    const size_t n = in.size();
    const uint8_t* p = in.data();
    size_t anchor = 0, ip = 0;
    if (n >= 4) {
      const unsigned bits = table_bits(n, 14);
      table_.assign(size_t{1} << bits, -1);
      while (ip + 4 <= n) {
        const uint32_t seq = load32(p + ip);
        const uint32_t h = hash32(seq, bits);
        const int32_t cand = table_[h];
        table_[h] = static_cast<int32_t>(ip);
        if (cand < 0 || load32(p + cand) != seq) {
          ++ip;
          continue;
        }
        size_t end = ip + 4, src = static_cast<size_t>(cand) + 4;
        while (end < n && p[end] == p[src]) ++end, ++src;
        put_literal(out, in.subspan(anchor, ip - anchor));
        put_copy(out, ip - static_cast<size_t>(cand), end - ip);
        ip = anchor = end;
      }
    }
    put_literal(out, in.subspan(anchor));
  }

  std::vector<int32_t> table_;
};

// ------------------------------------------------------------ CRC-32C
// Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78; initial value and
// final xor 0xFFFFFFFF (RFC 3720 B.4, the CRC catalogue's CRC-32/ISCSI).
uint32_t crc32c_ref(std::span<const uint8_t> in) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t b : in) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

// The digest as iSCSI and NVMe/TCP put it on the wire: least significant byte first.
void put_crc(Bytes& out, uint32_t crc) {
  out.resize(4);
  for (int k = 0; k < 4; ++k) out[k] = static_cast<uint8_t>(crc >> (8 * k));
}

// ------------------------------------------------------------ kernels

class Lz4RefKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override { codec_.compress(in, out); }

 private:
  Lz4RefCodec codec_;
};

class Lz4LibKernel final : public Kernel {
 public:
  explicit Lz4LibKernel(size_t size)
      : state_(new uint64_t[(static_cast<size_t>(LZ4_sizeofState()) + 7) / 8]),
        buf_(static_cast<size_t>(LZ4_compressBound(static_cast<int>(size)))) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const int cap = LZ4_compressBound(static_cast<int>(in.size()));
    if (buf_.size() < static_cast<size_t>(cap)) buf_.resize(static_cast<size_t>(cap));
    const int n = LZ4_compress_fast_extState(state_.get(), reinterpret_cast<const char*>(in.data()),
                                             reinterpret_cast<char*>(buf_.data()), static_cast<int>(in.size()), cap,
                                             /*acceleration=*/1);
    if (n <= 0) throw std::runtime_error("LZ4_compress_fast_extState failed");
    out.assign(buf_.begin(), buf_.begin() + n);
  }

 private:
  std::unique_ptr<uint64_t[]> state_;  // LZ4's state must be 8-byte aligned
  Bytes buf_;
};

class DeflateRefKernel final : public Kernel {
 public:
  explicit DeflateRefKernel(bool find_matches) : deflater_(DeflateOptions{.find_matches = find_matches}) {}
  void process(std::span<const uint8_t> in, Bytes& out) override { deflater_.compress(in, out); }

 private:
  RawDeflater deflater_;
};

// zlib with Z_HUFFMAN_ONLY: no string matching, Huffman-coded literals.
class ZlibHuffmanKernel final : public Kernel {
 public:
  explicit ZlibHuffmanKernel(size_t size) {
    // Raw deflate (windowBits -15), the default memLevel (16K-symbol blocks);
    // with Z_HUFFMAN_ONLY the level only has to be non-zero.
    if (deflateInit2(&zs_, 1, Z_DEFLATED, -15, 8, Z_HUFFMAN_ONLY) != Z_OK)
      throw std::runtime_error("zlib deflateInit2 failed");
    buf_.resize(deflateBound(&zs_, static_cast<uLong>(size)));
  }
  ~ZlibHuffmanKernel() override { deflateEnd(&zs_); }
  ZlibHuffmanKernel(const ZlibHuffmanKernel&) = delete;
  ZlibHuffmanKernel& operator=(const ZlibHuffmanKernel&) = delete;

  void process(std::span<const uint8_t> in, Bytes& out) override {
    deflateReset(&zs_);
    const size_t cap = deflateBound(&zs_, static_cast<uLong>(in.size()));
    if (buf_.size() < cap) buf_.resize(cap);
    zs_.next_in = const_cast<Bytef*>(in.data());  // zlib does not write its input
    zs_.avail_in = static_cast<uInt>(in.size());
    zs_.next_out = buf_.data();
    zs_.avail_out = static_cast<uInt>(cap);
    if (deflate(&zs_, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("zlib deflate did not finish");
    out.assign(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(zs_.total_out));
  }

 private:
  z_stream zs_{};
  Bytes buf_;
};

// ISA-L igzip, stateful API with one stream (and its level buffer) per kernel.
class IgzipKernel final : public Kernel {
 public:
  IgzipKernel(size_t size, unsigned level) : zs_(std::make_unique<isal_zstream>()) {
    static constexpr size_t kLevelBuf[] = {0, ISAL_DEF_LVL1_DEFAULT, ISAL_DEF_LVL2_DEFAULT, ISAL_DEF_LVL3_DEFAULT};
    level_buf_.resize(kLevelBuf[level]);
    isal_deflate_init(zs_.get());
    zs_->level = level;
    zs_->level_buf = level_buf_.empty() ? nullptr : level_buf_.data();
    zs_->level_buf_size = static_cast<uint32_t>(level_buf_.size());
    zs_->gzip_flag = IGZIP_DEFLATE;  // raw deflate, no header or trailer
    zs_->flush = NO_FLUSH;
    zs_->end_of_stream = 1;  // each input is a whole stream
    buf_.resize(initial_capacity(size));
  }

  void process(std::span<const uint8_t> in, Bytes& out) override {
    isal_deflate_reset(zs_.get());  // keeps level, level buffer, wrapper and end_of_stream
    if (buf_.size() < initial_capacity(in.size())) buf_.resize(initial_capacity(in.size()));
    zs_->next_in = const_cast<uint8_t*>(in.data());  // igzip does not write its input
    zs_->avail_in = static_cast<uint32_t>(in.size());
    zs_->next_out = buf_.data();
    zs_->avail_out = static_cast<uint32_t>(buf_.size());
    for (;;) {
      if (int r = isal_deflate(zs_.get()); r != COMP_OK)
        throw std::runtime_error("isal_deflate failed: " + std::to_string(r));
      if (zs_->internal_state.state == ZSTATE_END) break;
      if (zs_->avail_out != 0) throw std::runtime_error("isal_deflate stopped before the end of the stream");
      const size_t done = zs_->total_out;  // out of room (incompressible input): grow and go on
      buf_.resize(buf_.size() * 2);
      zs_->next_out = buf_.data() + done;
      zs_->avail_out = static_cast<uint32_t>(buf_.size() - done);
    }
    out.assign(buf_.begin(), buf_.begin() + zs_->total_out);
  }

 private:
  // Room for stored blocks of incompressible data plus headers.
  static size_t initial_capacity(size_t n) { return n + n / 16 + 1024; }

  std::unique_ptr<isal_zstream> zs_;
  Bytes level_buf_;
  Bytes buf_;
};

class SnappyRefKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override { codec_.compress(in, out); }

 private:
  SnappyRefCodec codec_;
};

class SnappyLibKernel final : public Kernel {
 public:
  explicit SnappyLibKernel(size_t size) : buf_(snappy::MaxCompressedLength(size)) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const size_t cap = snappy::MaxCompressedLength(in.size());
    if (buf_.size() < cap) buf_.resize(cap);
    size_t n = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data()), in.size(), reinterpret_cast<char*>(buf_.data()),
                        &n);
    out.assign(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n));
  }

 private:
  Bytes buf_;
};

class Crc32cRefKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override { put_crc(out, crc32c_ref(in)); }
};

class Crc32cLibKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    // ISA-L's crc32_iscsi neither inverts on entry nor on exit: seeding it
    // with ~0 and inverting the result gives the standard CRC-32C.
    const unsigned crc =
        crc32_iscsi(const_cast<unsigned char*>(in.data()), static_cast<int>(in.size()), 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
    put_crc(out, crc);
  }
};

// ------------------------------------------------------------ operators

// Compressors work on text; large blocks get fewer distinct inputs so that
// the inputs of one point stay within about 64 MiB.
class StorageOperator : public Operator {
 public:
  size_t input_count(size_t size) const override {
    return std::clamp<size_t>((size_t{64} << 20) / std::max<size_t>(size, 1), 2, 256);
  }
};

class TextCompressor : public StorageOperator {
 public:
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v(count, Bytes(size));
    for (size_t i = 0; i < count; ++i) fill_text(v[i], seed * 1000003 + i);
    return v;
  }
};

class Lz77 final : public TextCompressor {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"lz77", "storage",
                                "LZ77-compress one block of text into the LZ4 block format (matching, no entropy coding)",
                                1, {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<Lz4RefKernel>(threads);
      case Backend::kLib: return kernels_of<Lz4LibKernel>(threads, size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    Bytes decoded;
    std::string why;
    const bool ok = Lz4RefCodec::decompress(got, in.size(), decoded, why);
    return decode_failure("LZ4 block", in, ok, why, decoded, got);
  }
};

class Huffman final : public TextCompressor {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"huffman", "storage",
                                "Huffman-code one block of text as a raw deflate stream of literals (no matching)", 1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<DeflateRefKernel>(threads, false);
      case Backend::kLib: return kernels_of<ZlibHuffmanKernel>(threads, size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    Bytes decoded;
    std::string why;
    const bool ok = inflate_raw_into(got, in.size(), decoded, &why);
    return decode_failure("deflate", in, ok, why, decoded, got);
  }
};

class Snappy final : public TextCompressor {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"snappy", "storage", "Snappy-compress one block of text (raw Snappy format)", 1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<SnappyRefKernel>(threads);
      case Backend::kLib: return kernels_of<SnappyLibKernel>(threads, size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    Bytes decoded;
    std::string why;
    const bool ok = SnappyRefCodec::decompress(got, in.size(), decoded, why);
    return decode_failure("Snappy", in, ok, why, decoded, got);
  }
};

class Compress final : public TextCompressor {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"compress", "storage",
                                "deflate-compress one block of text (LZ77 + Huffman, raw RFC 1951 stream)", 1,
                                {Backend::kRef, Backend::kLib, Backend::kDev, Backend::kEngine}};
    return i;
  }
  // BlueField's deflate engine; the body is igzip at compress.level.
  std::optional<EngineWork> engine_work() const override { return EngineWork{EngineKind::kCompress, "", ""}; }
  // level: the igzip level of the lib backend (0-3; ISA-L's fastest is 0,
  // its default 1). The ref encoder has one effort (greedy, 32-deep chains).
  std::map<std::string, std::string> default_params() const override { return {{"level", "1"}}; }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    const uint64_t level = param_u64("level");
    if (level > ISAL_DEF_MAX_LEVEL)
      throw std::invalid_argument("compress.level must be 0 to " + std::to_string(ISAL_DEF_MAX_LEVEL) +
                                  " (the igzip levels)");
    switch (b) {
      case Backend::kRef: return kernels_of<DeflateRefKernel>(threads, true);
      case Backend::kLib: return kernels_of<IgzipKernel>(threads, size, static_cast<unsigned>(level));
      // compressdev (compress_isal here, a DPU's engine there): its levels
      // 1-3 are the same ISA-L levels; level 0 has no compressdev equivalent.
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: return dev_deflate_kernels(static_cast<int>(level), size, threads);
    }
    throw Unavailable(kNoDevice);
  }
  std::string mismatch(std::span<const uint8_t> in, const Bytes&, const Bytes& got) const override {
    Bytes decoded;
    std::string why;
    const bool ok = inflate_raw_into(got, in.size(), decoded, &why);
    return decode_failure("deflate", in, ok, why, decoded, got);
  }
};

// ------------------------------------------------------------ decompress
// Inflating: what a storage target does on reads of compressed blocks. Its
// inputs are the raw deflate streams of the compress operator's text blocks
// (the same seed gives the same text), made by the ref encoder; one unit
// inflates one back to `size` bytes, which is what it counts for Gbps.

class InflateRefKernel final : public Kernel {
 public:
  explicit InflateRefKernel(size_t size) : size_(size) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    std::string why;
    if (!inflate_raw_into(in, size_, out, &why)) throw std::runtime_error("the ref inflater rejects its input: " + why);
  }

 private:
  size_t size_;
};

// ISA-L's inflate (igzip), raw deflate, one state per kernel.
class IgzipInflateKernel final : public Kernel {
 public:
  explicit IgzipInflateKernel(size_t size) : state_(std::make_unique<inflate_state>()), size_(size) {
    isal_inflate_init(state_.get());
  }
  void process(std::span<const uint8_t> in, Bytes& out) override {
    isal_inflate_reset(state_.get());
    state_->crc_flag = ISAL_DEFLATE;  // raw deflate, no header or trailer
    out.resize(size_);
    state_->next_in = const_cast<uint8_t*>(in.data());  // igzip does not write its input
    state_->avail_in = static_cast<uint32_t>(in.size());
    state_->next_out = out.data();
    state_->avail_out = static_cast<uint32_t>(out.size());
    if (int r = isal_inflate(state_.get()); r != ISAL_DECOMP_OK)
      throw std::runtime_error("isal_inflate failed: " + std::to_string(r));
    if (state_->block_state != ISAL_BLOCK_FINISH)
      throw std::runtime_error("isal_inflate stopped before the end of the stream");
    out.resize(state_->total_out);
  }

 private:
  std::unique_ptr<inflate_state> state_;
  size_t size_;
};

class Decompress final : public StorageOperator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"decompress", "storage",
                                "inflate one raw RFC 1951 stream (the ref encoder's, of a block of text as compress "
                                "takes) back to its size bytes",
                                1, {Backend::kRef, Backend::kLib, Backend::kEngine}};
    return i;
  }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v(count);
    Bytes text(size);
    RawDeflater deflater;
    for (size_t i = 0; i < count; ++i) {
      fill_text(text, seed * 1000003 + i);
      deflater.compress(text, v[i]);
    }
    return v;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<InflateRefKernel>(threads, size);
      case Backend::kLib: return kernels_of<IgzipInflateKernel>(threads, size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("not written: bench's compressdev kernels compress only (compressdev could decompress)");
  }
  // BlueField's deflate engine, decompressing; the body is igzip's inflate.
  std::optional<EngineWork> engine_work() const override { return EngineWork{EngineKind::kDecompress, "", ""}; }
};

class Crc32c final : public StorageOperator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"crc32c", "storage",
                                "CRC-32C (Castagnoli, the iSCSI/NVMe-TCP data digest) of one block; output 4 bytes, "
                                "least significant first",
                                1, {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<Crc32cRefKernel>(threads);
      case Backend::kLib: return kernels_of<Crc32cLibKernel>(threads);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
};

}  // namespace

void register_storage_ops(Registry& r) {
  r.push_back(std::make_unique<Lz77>());
  r.push_back(std::make_unique<Huffman>());
  r.push_back(std::make_unique<Snappy>());
  r.push_back(std::make_unique<Compress>());
  r.push_back(std::make_unique<Decompress>());
  r.push_back(std::make_unique<Crc32c>());
}

}  // namespace dpukit::bench
