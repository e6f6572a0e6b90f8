// RFC 1951 raw deflate: a strict decoder and an encoder (see deflate_ref.h).
// Section numbers below refer to RFC 1951.
#include "deflate_ref.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace dpukit::bench {
namespace {

constexpr unsigned kMaxBits = 15;         // longest literal/length or distance code (3.2.7)
constexpr unsigned kMaxCodeLenBits = 7;   // longest code-length code (3.2.7: 3-bit lengths)
constexpr unsigned kLitLenSymbols = 286;  // 0-255 literals, 256 end of block, 257-285 lengths
constexpr unsigned kDistSymbols = 30;
constexpr unsigned kCodeLenSymbols = 19;
constexpr uint32_t kWindow = 32768;
constexpr size_t kStoredMax = 65535;      // LEN is 16 bits (3.2.4)
constexpr size_t kBlockTokens = 16384;    // tokens per block the encoder collects before writing it

// 3.2.5: the length codes 257-285 and distance codes 0-29, base and extra bits.
constexpr std::array<uint16_t, 29> kLengthBase = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<uint8_t, 29> kLengthExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                                  2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::array<uint16_t, 30> kDistBase = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,
                                                33,  49,  65,  97,  129, 193,  257,  385,  513,  769,
                                                1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::array<uint8_t, 30> kDistExtra = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                                6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
// 3.2.7: the order in which the code-length code's lengths are sent.
constexpr std::array<uint8_t, 19> kCodeLenOrder = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

uint32_t reverse_bits(uint32_t code, unsigned len) {
  uint32_t r = 0;
  for (unsigned i = 0; i < len; ++i, code >>= 1) r = (r << 1) | (code & 1);
  return r;
}

// 3.2.6: the fixed literal/length code lengths (288 symbols; 286 and 287 never occur in data).
std::array<uint8_t, 288> fixed_litlen_lengths() {
  std::array<uint8_t, 288> l{};
  for (unsigned s = 0; s < 288; ++s) l[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
  return l;
}

// ---------------------------------------------------------------- decoding

class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> in) : in_(in) {}
  // Makes at least n (<= 32) bits available; false when the input ends first.
  bool need(unsigned n) {
    while (count_ < n) {
      if (pos_ == in_.size()) return false;
      buf_ |= static_cast<uint64_t>(in_[pos_++]) << count_;
      count_ += 8;
    }
    return true;
  }
  // Loads up to n bits without failing (near the end fewer may be available).
  void fill(unsigned n) { need(n); }
  uint32_t peek(unsigned n) const { return static_cast<uint32_t>(buf_ & ((uint64_t{1} << n) - 1)); }
  void drop(unsigned n) {
    buf_ >>= n;
    count_ -= n;
  }
  bool bits(unsigned n, uint32_t& v) {
    if (!need(n)) return false;
    v = peek(n);
    drop(n);
    return true;
  }
  unsigned available() const { return count_; }
  void align_to_byte() { drop(count_ % 8); }
  // Bytes of the input not consumed (whole bytes still in the bit buffer count).
  size_t unread_bytes() const { return in_.size() - pos_ + count_ / 8; }
  // Stored-block copy: whole bytes left in the bit buffer first, then the input.
  bool copy_bytes(size_t n, Bytes& out) {
    while (n > 0 && count_ >= 8) {
      out.push_back(static_cast<uint8_t>(peek(8)));
      drop(8);
      --n;
    }
    if (in_.size() - pos_ < n) return false;
    out.insert(out.end(), in_.begin() + static_cast<std::ptrdiff_t>(pos_),
               in_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  uint64_t buf_ = 0;
  unsigned count_ = 0;
};

// A canonical Huffman decoding table: a direct lookup for codes up to
// kFastBits long, and a walk over the code-length counts for longer ones.
struct HuffmanDecoder {
  static constexpr unsigned kFastBits = 9;
  std::array<uint16_t, kMaxBits + 1> count{};  // codes of each length
  std::array<uint16_t, 288> symbol{};          // symbols ordered by (length, value)
  std::array<uint16_t, 1u << kFastBits> fast{};  // reversed code prefix -> length << 9 | symbol, 0 = not here
};

enum class CodeKind { kCodeLengths, kLitLen, kDistance };

// Builds a decoder from code lengths; returns why they are unusable or nullptr.
const char* build_decoder(HuffmanDecoder& h, const uint8_t* lens, unsigned n, CodeKind kind) {
  h.count.fill(0);
  for (unsigned s = 0; s < n; ++s) h.count[lens[s]]++;
  h.count[0] = 0;
  unsigned used = 0;
  int left = 1;  // codes still free at the current length
  for (unsigned len = 1; len <= kMaxBits; ++len) {
    used += h.count[len];
    left = left * 2 - h.count[len];
    if (left < 0) return "over-subscribed code lengths";
  }
  if (left > 0) {
    // Incomplete: zlib accepts one code of one bit, and a distance code with no codes
    // (a block of literals only); anything else is a broken encoder.
    const bool single = used == 1 && h.count[1] == 1 && kind != CodeKind::kCodeLengths;
    const bool no_distances = used == 0 && kind == CodeKind::kDistance;
    if (!single && !no_distances) return "incomplete code lengths";
  }
  std::array<uint16_t, kMaxBits + 2> offset{};
  for (unsigned len = 1; len <= kMaxBits; ++len) offset[len + 1] = offset[len] + h.count[len];
  for (unsigned s = 0; s < n; ++s)
    if (lens[s]) h.symbol[offset[lens[s]]++] = static_cast<uint16_t>(s);
  // Canonical codes are consecutive within a length, in symbol order (3.2.2).
  h.fast.fill(0);
  uint32_t code = 0;
  unsigned k = 0;
  for (unsigned len = 1; len <= kMaxBits; ++len) {
    for (unsigned i = 0; i < h.count[len]; ++i, ++k, ++code) {
      if (len > HuffmanDecoder::kFastBits) continue;
      const uint32_t rev = reverse_bits(code, len);
      for (uint32_t j = rev; j < (1u << HuffmanDecoder::kFastBits); j += 1u << len)
        h.fast[j] = static_cast<uint16_t>(len << 9 | h.symbol[k]);
    }
    code <<= 1;
  }
  return nullptr;
}

// Decodes one symbol; returns false (with `why`) on truncation or an unused code.
bool decode_symbol(const HuffmanDecoder& h, BitReader& br, unsigned& sym, const char*& why) {
  br.fill(HuffmanDecoder::kFastBits);
  const uint16_t e = h.fast[br.peek(std::min(br.available(), HuffmanDecoder::kFastBits))];
  if (e != 0 && (e >> 9) <= br.available()) {
    br.drop(e >> 9);
    sym = e & 511;
    return true;
  }
  // Bit by bit: `first` is the first code of the current length, `index` its
  // position in `symbol`.
  int code = 0, first = 0, index = 0;
  for (unsigned len = 1; len <= kMaxBits; ++len) {
    uint32_t bit;
    if (!br.bits(1, bit)) {
      why = "truncated inside a Huffman code";
      return false;
    }
    code |= static_cast<int>(bit);
    const int c = h.count[len];
    if (code - first < c) {
      sym = h.symbol[static_cast<size_t>(index + code - first)];
      return true;
    }
    index += c;
    first = (first + c) << 1;
    code <<= 1;
  }
  why = "a code that the block's Huffman code does not define";
  return false;
}

struct FixedDecoders {
  HuffmanDecoder litlen, dist;
  FixedDecoders() {
    const auto l = fixed_litlen_lengths();
    build_decoder(litlen, l.data(), 288, CodeKind::kLitLen);
    std::array<uint8_t, 32> d;
    d.fill(5);  // 30 and 31 complete the code but never occur in data
    build_decoder(dist, d.data(), 32, CodeKind::kDistance);
  }
};

// Reads a dynamic block's header (3.2.7) into the two decoders.
const char* read_dynamic_header(BitReader& br, HuffmanDecoder& litlen, HuffmanDecoder& dist) {
  uint32_t hlit, hdist, hclen;
  if (!br.bits(5, hlit) || !br.bits(5, hdist) || !br.bits(4, hclen)) return "truncated dynamic block header";
  const unsigned nlit = hlit + 257, ndist = hdist + 1, ncl = hclen + 4;
  if (nlit > kLitLenSymbols || ndist > kDistSymbols) return "too many literal/length or distance codes";
  std::array<uint8_t, kCodeLenSymbols> cl_lens{};
  for (unsigned i = 0; i < ncl; ++i) {
    uint32_t v;
    if (!br.bits(3, v)) return "truncated code-length code";
    cl_lens[kCodeLenOrder[i]] = static_cast<uint8_t>(v);
  }
  HuffmanDecoder cl;
  if (const char* e = build_decoder(cl, cl_lens.data(), kCodeLenSymbols, CodeKind::kCodeLengths)) return e;
  std::array<uint8_t, kLitLenSymbols + kDistSymbols> lens{};
  unsigned i = 0;
  while (i < nlit + ndist) {
    unsigned sym;
    const char* why = nullptr;
    if (!decode_symbol(cl, br, sym, why)) return why;
    if (sym < 16) {
      lens[i++] = static_cast<uint8_t>(sym);
      continue;
    }
    uint32_t extra;
    uint8_t value = 0;
    unsigned repeat;
    if (sym == 16) {
      if (i == 0) return "repeat code 16 with no previous length";
      value = lens[i - 1];
      if (!br.bits(2, extra)) return "truncated code lengths";
      repeat = 3 + extra;
    } else if (sym == 17) {
      if (!br.bits(3, extra)) return "truncated code lengths";
      repeat = 3 + extra;
    } else {
      if (!br.bits(7, extra)) return "truncated code lengths";
      repeat = 11 + extra;
    }
    if (i + repeat > nlit + ndist) return "code length repeat runs past the end";
    while (repeat--) lens[i++] = value;
  }
  if (lens[256] == 0) return "no end-of-block code";
  if (const char* e = build_decoder(litlen, lens.data(), nlit, CodeKind::kLitLen)) return e;
  if (const char* e = build_decoder(dist, lens.data() + nlit, ndist, CodeKind::kDistance)) return e;
  return nullptr;
}

// Decodes a Huffman block's data (3.2.5) until end of block.
const char* inflate_block_data(BitReader& br, const HuffmanDecoder& litlen, const HuffmanDecoder& dist,
                               size_t max_out, Bytes& out) {
  for (;;) {
    unsigned sym;
    const char* why = nullptr;
    if (!decode_symbol(litlen, br, sym, why)) return why;
    if (sym < 256) {
      if (out.size() >= max_out) return "output larger than the limit";
      out.push_back(static_cast<uint8_t>(sym));
      continue;
    }
    if (sym == 256) return nullptr;
    sym -= 257;
    if (sym >= kLengthBase.size()) return "invalid length symbol (286 or 287)";
    uint32_t extra;
    if (!br.bits(kLengthExtra[sym], extra)) return "truncated length";
    const size_t length = kLengthBase[sym] + extra;
    if (sym == 27 && length > 257) return "length 258 coded with symbol 284 (RFC 1951 gives it 227-257)";
    unsigned dsym;
    if (!decode_symbol(dist, br, dsym, why)) return why;
    if (dsym >= kDistBase.size()) return "invalid distance symbol (30 or 31)";
    if (!br.bits(kDistExtra[dsym], extra)) return "truncated distance";
    const size_t distance = kDistBase[dsym] + extra;
    if (distance > out.size()) return "distance too far back (before the start of the output)";
    if (out.size() + length > max_out) return "output larger than the limit";
    const size_t at = out.size();
    out.resize(at + length);
    uint8_t* p = out.data();
    for (size_t k = 0; k < length; ++k) p[at + k] = p[at + k - distance];  // may overlap: byte by byte
  }
}

// ---------------------------------------------------------------- encoding

class BitWriter {
 public:
  explicit BitWriter(Bytes& out) : out_(out) {}
  void put(uint32_t value, unsigned n) {  // n <= 32
    acc_ |= static_cast<uint64_t>(value) << count_;
    count_ += n;
    while (count_ >= 8) {
      out_.push_back(static_cast<uint8_t>(acc_));
      acc_ >>= 8;
      count_ -= 8;
    }
  }
  void align_to_byte() {
    if (count_) put(0, 8 - count_);
  }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }  // when aligned
  unsigned pending_bits() const { return count_; }

 private:
  Bytes& out_;
  uint64_t acc_ = 0;
  unsigned count_ = 0;
};

// Package-merge (Larmore & Hirschberg): the optimal lengths no longer than
// `limit`. List 0 holds the leaves by weight; list k merges the leaves with
// pairs ("packages") of list k-1. Taking the 2m-2 cheapest items of the last
// list, every leaf gets one bit per list where it is taken; the packages
// taken in list k say how many items list k-1 gives.
void package_merge(const uint32_t* freqs, unsigned n, unsigned limit, uint8_t* lens) {
  constexpr unsigned kMaxSymbols = 288, kMaxItems = 2 * kMaxSymbols;
  std::array<uint16_t, kMaxSymbols> order;
  unsigned m = 0;
  for (unsigned s = 0; s < n; ++s) {
    lens[s] = 0;
    if (freqs[s]) order[m++] = static_cast<uint16_t>(s);
  }
  if (m == 0) return;
  if (m == 1) {
    lens[order[0]] = 1;
    return;
  }
  std::sort(order.begin(), order.begin() + m, [&](uint16_t a, uint16_t b) {
    return freqs[a] != freqs[b] ? freqs[a] < freqs[b] : a < b;
  });
  std::array<std::array<uint8_t, kMaxItems>, kMaxBits> is_leaf;  // per list: item is a leaf (else a package)
  std::array<uint64_t, kMaxItems> buf_a, buf_b;
  uint64_t* weight = buf_a.data();  // the previous list's weights
  uint64_t* next = buf_b.data();
  unsigned size = m;
  for (unsigned i = 0; i < m; ++i) {
    weight[i] = freqs[order[i]];
    is_leaf[0][i] = 1;
  }
  for (unsigned list = 1; list < limit; ++list) {
    const unsigned packages = size / 2;
    unsigned a = 0, b = 0, k = 0;
    while (a < m || b < packages) {
      const uint64_t pw = b < packages ? weight[2 * b] + weight[2 * b + 1] : 0;
      if (b == packages || (a < m && freqs[order[a]] <= pw)) {
        next[k] = freqs[order[a++]];
        is_leaf[list][k++] = 1;
      } else {
        next[k] = pw;
        is_leaf[list][k++] = 0;
        ++b;
      }
    }
    size = k;
    std::swap(weight, next);
  }
  unsigned take = 2 * m - 2;
  for (unsigned list = limit; list-- > 0;) {
    unsigned leaves = 0;
    for (unsigned i = 0; i < take; ++i) leaves += is_leaf[list][i];
    for (unsigned i = 0; i < leaves; ++i) lens[order[i]]++;
    take = 2 * (take - leaves);
  }
}

// 3.2.2: canonical codes from lengths, bit-reversed because deflate sends
// Huffman codes most significant bit first into an LSB-first stream.
void assign_codes(const uint8_t* lens, unsigned n, uint16_t* codes) {
  std::array<uint16_t, kMaxBits + 1> bl_count{};
  for (unsigned s = 0; s < n; ++s) bl_count[lens[s]]++;
  bl_count[0] = 0;
  std::array<uint32_t, kMaxBits + 1> next{};
  uint32_t code = 0;
  for (unsigned bits = 1; bits <= kMaxBits; ++bits) {
    code = (code + bl_count[bits - 1]) << 1;
    next[bits] = code;
  }
  for (unsigned s = 0; s < n; ++s)
    codes[s] = lens[s] ? static_cast<uint16_t>(reverse_bits(next[lens[s]]++, lens[s])) : 0;
}

struct SymbolTables {
  std::array<uint8_t, 259> length_code{};  // match length -> index into kLengthBase
  std::array<uint8_t, 288> fixed_len{};
  std::array<uint16_t, 288> fixed_code{};
  SymbolTables() {
    for (unsigned c = 0; c < kLengthBase.size(); ++c)
      for (unsigned l = kLengthBase[c]; l < kLengthBase[c] + (1u << kLengthExtra[c]) && l <= 258; ++l)
        length_code[l] = static_cast<uint8_t>(c);
    length_code[258] = 28;  // 258 has its own code, 285 (3.2.5)
    fixed_len = fixed_litlen_lengths();
    assign_codes(fixed_len.data(), 288, fixed_code.data());
  }
};
const SymbolTables& tables() {
  static const SymbolTables t;
  return t;
}

unsigned distance_code(unsigned distance) {
  return static_cast<unsigned>(std::upper_bound(kDistBase.begin(), kDistBase.end(), distance) - kDistBase.begin()) -
         1;
}

// The lengths of a code used for building only: at least two codes, as zlib
// does, so that no decoder meets a one-code (incomplete) table.
void lengths_with_two_codes(const uint32_t* freqs, unsigned n, unsigned limit, uint8_t* lens) {
  std::array<uint32_t, 288> f;
  std::copy(freqs, freqs + n, f.begin());
  unsigned used = 0;
  for (unsigned s = 0; s < n; ++s) used += f[s] != 0;
  for (unsigned s = 0; s < n && used < 2; ++s)
    if (f[s] == 0) {
      f[s] = 1;
      ++used;
    }
  package_merge(f.data(), n, limit, lens);
}

using Token = RawDeflater::Token;

// What a block's tokens use (3.2.5): each literal/length and distance
// code's count, and the extra bits the lengths and distances carry.
struct SymbolCounts {
  std::array<uint32_t, kLitLenSymbols> lit_freq{};
  std::array<uint32_t, kDistSymbols> dist_freq{};
  uint64_t extra_bits = 0;
};

SymbolCounts count_symbols(std::span<const Token> tokens) {
  const SymbolTables& t = tables();
  SymbolCounts c;
  for (const auto& tok : tokens) {
    if (tok.distance == 0) {
      c.lit_freq[tok.length_or_literal]++;
      continue;
    }
    const unsigned lc = t.length_code[tok.length_or_literal], dc = distance_code(tok.distance);
    c.lit_freq[257 + lc]++;
    c.dist_freq[dc]++;
    c.extra_bits += kLengthExtra[lc] + kDistExtra[dc];
  }
  c.lit_freq[256] = 1;
  return c;
}

// A dynamic block's two codes and the header that sends their lengths
// (3.2.7): the length sequence run-length coded with the code length
// alphabet, itself Huffman coded.
struct DynamicCodes {
  std::array<uint8_t, kLitLenSymbols> lit_lens;
  std::array<uint8_t, kDistSymbols> dist_lens;
  unsigned nlit = kLitLenSymbols, ndist = kDistSymbols;  // HLIT + 257, HDIST + 1
  struct ClItem {
    uint8_t sym, extra;
  };
  std::array<ClItem, kLitLenSymbols + kDistSymbols> cl_items;
  unsigned ncl_items = 0;
  std::array<uint32_t, kCodeLenSymbols> cl_freq{};
  std::array<uint8_t, kCodeLenSymbols> cl_lens;
  unsigned nclen = kCodeLenSymbols;  // HCLEN + 4

  void emit(unsigned sym, unsigned extra) {
    cl_items[ncl_items++] = {static_cast<uint8_t>(sym), static_cast<uint8_t>(extra)};
    cl_freq[sym]++;
  }
  // Run-length codes the `total` lengths: 16 repeats the previous length
  // 3-6 times, 17 and 18 give 3-10 and 11-138 zeros.
  void run_length_code(const uint8_t* lens, unsigned total) {
    for (unsigned i = 0; i < total;) {
      const uint8_t v = lens[i];
      unsigned run = 1;
      while (i + run < total && lens[i + run] == v) ++run;
      i += run;
      if (v == 0) {
        while (run >= 11) {
          const unsigned r = std::min(run, 138u);
          emit(18, r - 11);
          run -= r;
        }
        if (run >= 3) {
          emit(17, run - 3);
          run = 0;
        }
        while (run--) emit(0, 0);
      } else {
        emit(v, 0);
        --run;
        while (run >= 3) {
          const unsigned r = std::min(run, 6u);
          emit(16, r - 3);
          run -= r;
        }
        while (run--) emit(v, 0);
      }
    }
  }
};

DynamicCodes dynamic_codes(const SymbolCounts& c) {
  DynamicCodes d;
  lengths_with_two_codes(c.lit_freq.data(), kLitLenSymbols, kMaxBits, d.lit_lens.data());
  lengths_with_two_codes(c.dist_freq.data(), kDistSymbols, kMaxBits, d.dist_lens.data());
  while (d.lit_lens[d.nlit - 1] == 0) --d.nlit;  // >= 257: end of block has a code
  while (d.ndist > 1 && d.dist_lens[d.ndist - 1] == 0) --d.ndist;
  std::array<uint8_t, kLitLenSymbols + kDistSymbols> lens;  // the sequence the header codes
  std::copy(d.lit_lens.begin(), d.lit_lens.begin() + d.nlit, lens.begin());
  std::copy(d.dist_lens.begin(), d.dist_lens.begin() + d.ndist, lens.begin() + d.nlit);
  // The two length lists as one sequence (runs may cross).
  d.run_length_code(lens.data(), d.nlit + d.ndist);
  lengths_with_two_codes(d.cl_freq.data(), kCodeLenSymbols, kMaxCodeLenBits, d.cl_lens.data());
  while (d.nclen > 4 && d.cl_lens[kCodeLenOrder[d.nclen - 1]] == 0) --d.nclen;
  return d;
}

// The extra bits after a code length code: 16, 17 and 18 carry a run.
unsigned cl_extra_bits(unsigned sym) { return sym == 16 ? 2 : sym == 17 ? 3 : sym == 18 ? 7 : 0; }

// The sizes of the block as each type, in bits.
uint64_t dynamic_block_bits(const SymbolCounts& c, const DynamicCodes& d) {
  uint64_t bits = 3 + 5 + 5 + 4 + 3 * d.nclen + c.extra_bits;
  for (unsigned i = 0; i < d.ncl_items; ++i) {
    const unsigned s = d.cl_items[i].sym;
    bits += d.cl_lens[s] + cl_extra_bits(s);
  }
  for (unsigned s = 0; s < kLitLenSymbols; ++s) bits += static_cast<uint64_t>(c.lit_freq[s]) * d.lit_lens[s];
  for (unsigned s = 0; s < kDistSymbols; ++s) bits += static_cast<uint64_t>(c.dist_freq[s]) * d.dist_lens[s];
  return bits;
}

uint64_t fixed_block_bits(const SymbolCounts& c) {
  const SymbolTables& t = tables();
  uint64_t bits = 3 + c.extra_bits;
  for (unsigned s = 0; s < kLitLenSymbols; ++s) bits += static_cast<uint64_t>(c.lit_freq[s]) * t.fixed_len[s];
  for (unsigned s = 0; s < kDistSymbols; ++s) bits += static_cast<uint64_t>(c.dist_freq[s]) * 5;
  return bits;
}

size_t stored_pieces(size_t raw_bytes) { return std::max<size_t>(1, (raw_bytes + kStoredMax - 1) / kStoredMax); }

// Stored: each piece of at most 65535 bytes has a 3-bit header, padding to
// a byte, LEN and NLEN.
uint64_t stored_block_bits(size_t raw_bytes, unsigned pending_bits) {
  const size_t pieces = stored_pieces(raw_bytes);
  return 3 + (8 - (pending_bits + 3) % 8) % 8 + (pieces - 1) * 8 + pieces * 32 + 8 * static_cast<uint64_t>(raw_bytes);
}

// Stored blocks (3.2.4), the last one final when `final`.
void write_stored(BitWriter& bw, std::span<const uint8_t> raw, bool final) {
  const size_t pieces = stored_pieces(raw.size());
  size_t at = 0;
  for (size_t p = 0; p < pieces; ++p) {
    const size_t len = std::min(kStoredMax, raw.size() - at);
    bw.put((final && p + 1 == pieces) ? 1 : 0, 3);  // BTYPE 00
    bw.align_to_byte();
    bw.put(static_cast<uint32_t>(len), 16);
    bw.put(static_cast<uint32_t>(~len & 0xFFFF), 16);
    bw.bytes(raw.subspan(at, len));
    at += len;
  }
}

// A dynamic block's header after BTYPE: HLIT, HDIST, HCLEN, the code
// length code's lengths, then the run-length coded sequence.
void write_dynamic_header(BitWriter& bw, const DynamicCodes& d) {
  bw.put(d.nlit - 257, 5);
  bw.put(d.ndist - 1, 5);
  bw.put(d.nclen - 4, 4);
  for (unsigned i = 0; i < d.nclen; ++i) bw.put(d.cl_lens[kCodeLenOrder[i]], 3);
  std::array<uint16_t, kCodeLenSymbols> cl_codes;
  assign_codes(d.cl_lens.data(), kCodeLenSymbols, cl_codes.data());
  for (unsigned i = 0; i < d.ncl_items; ++i) {
    const DynamicCodes::ClItem& c = d.cl_items[i];
    bw.put(cl_codes[c.sym], d.cl_lens[c.sym]);
    if (const unsigned extra = cl_extra_bits(c.sym)) bw.put(c.extra, extra);
  }
}

// The block's data (3.2.5): each token in the two codes, then end of block.
void write_tokens(BitWriter& bw, std::span<const Token> tokens, const uint16_t* lit_codes, const uint8_t* lit_lens,
                  const uint16_t* dist_codes, const uint8_t* dist_lens) {
  const SymbolTables& t = tables();
  for (const auto& tok : tokens) {
    if (tok.distance == 0) {
      bw.put(lit_codes[tok.length_or_literal], lit_lens[tok.length_or_literal]);
      continue;
    }
    const unsigned lc = t.length_code[tok.length_or_literal], dc = distance_code(tok.distance);
    bw.put(lit_codes[257 + lc], lit_lens[257 + lc]);
    bw.put(tok.length_or_literal - kLengthBase[lc], kLengthExtra[lc]);
    bw.put(dist_codes[dc], dist_lens[dc]);
    bw.put(tok.distance - kDistBase[dc], kDistExtra[dc]);
  }
  bw.put(lit_codes[256], lit_lens[256]);
}

// Writes one block of `tokens` (which cover `raw`), choosing the cheapest of
// dynamic, fixed and stored the options allow.
void write_block(BitWriter& bw, std::span<const Token> tokens, std::span<const uint8_t> raw, bool final,
                 const DeflateOptions& options) {
  const SymbolCounts counts = count_symbols(tokens);
  const DynamicCodes dyn = dynamic_codes(counts);
  const uint64_t dynamic_bits = dynamic_block_bits(counts, dyn), fixed_bits = fixed_block_bits(counts);
  const uint64_t stored_bits = stored_block_bits(raw.size(), bw.pending_bits());

  enum { kDynamic, kFixed, kStored } type = kDynamic;
  uint64_t best = dynamic_bits;
  if (options.allow_fixed && fixed_bits < best) type = kFixed, best = fixed_bits;
  if (options.allow_stored && stored_bits < best) type = kStored, best = stored_bits;

  if (type == kStored) {
    write_stored(bw, raw, final);
    return;
  }
  if (type == kFixed) {
    bw.put(final ? 1 | 1 << 1 : 1 << 1, 3);  // BTYPE 01
    const SymbolTables& t = tables();
    std::array<uint16_t, 32> dist_codes;
    for (unsigned d = 0; d < 32; ++d) dist_codes[d] = static_cast<uint16_t>(reverse_bits(d, 5));
    std::array<uint8_t, 32> dist_lens;
    dist_lens.fill(5);
    write_tokens(bw, tokens, t.fixed_code.data(), t.fixed_len.data(), dist_codes.data(), dist_lens.data());
    return;
  }
  bw.put(final ? 1 | 2 << 1 : 2 << 1, 3);  // BTYPE 10
  write_dynamic_header(bw, dyn);
  std::array<uint16_t, kLitLenSymbols> lit_codes;
  std::array<uint16_t, kDistSymbols> dist_codes;
  assign_codes(dyn.lit_lens.data(), kLitLenSymbols, lit_codes.data());
  assign_codes(dyn.dist_lens.data(), kDistSymbols, dist_codes.data());
  write_tokens(bw, tokens, lit_codes.data(), dyn.lit_lens.data(), dist_codes.data(), dyn.dist_lens.data());
}

}  // namespace

bool inflate_raw_into(std::span<const uint8_t> in, size_t max_out, Bytes& out, std::string* why) {
  static const FixedDecoders fixed;
  out.clear();
  BitReader br(in);
  auto fail = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  HuffmanDecoder litlen, dist;
  bool final = false;
  while (!final) {
    uint32_t header;
    if (!br.bits(3, header)) return fail("truncated block header (no final block)");
    final = header & 1;
    switch (header >> 1) {
      case 0: {  // stored (3.2.4)
        br.align_to_byte();
        uint32_t len, nlen;
        if (!br.bits(16, len) || !br.bits(16, nlen)) return fail("truncated stored block header");
        if ((len ^ 0xFFFF) != nlen) return fail("stored block LEN and NLEN do not match");
        if (out.size() + len > max_out) return fail("output larger than the limit");
        if (!br.copy_bytes(len, out)) return fail("truncated stored block");
        break;
      }
      case 1:  // fixed Huffman (3.2.6)
        if (const char* e = inflate_block_data(br, fixed.litlen, fixed.dist, max_out, out)) return fail(e);
        break;
      case 2:  // dynamic Huffman (3.2.7)
        if (const char* e = read_dynamic_header(br, litlen, dist)) return fail(e);
        if (const char* e = inflate_block_data(br, litlen, dist, max_out, out)) return fail(e);
        break;
      default: return fail("reserved block type 3");
    }
  }
  if (br.unread_bytes() != 0) return fail("bytes after the final block");
  return true;
}

std::optional<Bytes> inflate_raw(std::span<const uint8_t> in, size_t max_out, std::string* why) {
  Bytes out;
  if (!inflate_raw_into(in, max_out, out, why)) return std::nullopt;
  return out;
}

std::vector<uint8_t> limited_code_lengths(std::span<const uint32_t> freqs, unsigned limit) {
  if (freqs.size() > 288 || limit == 0 || limit > kMaxBits)
    throw std::invalid_argument("limited_code_lengths: at most 288 symbols and 1-15 bits");
  size_t used = 0;
  for (uint32_t f : freqs) used += f != 0;
  if (limit < 64 && used > (size_t{1} << limit))
    throw std::invalid_argument("limited_code_lengths: more symbols than codes of that length");
  std::vector<uint8_t> lens(freqs.size());
  package_merge(freqs.data(), static_cast<unsigned>(freqs.size()), limit, lens.data());
  return lens;
}

RawDeflater::RawDeflater(DeflateOptions options) : options_(options), prev_(kWindow) {
  tokens_.reserve(kBlockTokens);
}

void RawDeflater::compress(std::span<const uint8_t> in, Bytes& out) {
  out.clear();
  BitWriter bw(out);
  const size_t n = in.size();
  const unsigned hash_bits = std::clamp<unsigned>(static_cast<unsigned>(std::bit_width(n)), 8, 15);
  if (options_.find_matches) head_.assign(size_t{1} << hash_bits, -1);
  auto hash3 = [&](size_t i) {
    const uint32_t v = in[i] | static_cast<uint32_t>(in[i + 1]) << 8 | static_cast<uint32_t>(in[i + 2]) << 16;
    return (v * 0x9E3779B1u) >> (32 - hash_bits);
  };
  auto insert = [&](size_t i) {  // i + 3 <= n
    const uint32_t h = hash3(i);
    prev_[i & (kWindow - 1)] = head_[h];
    head_[h] = static_cast<int32_t>(i);
  };
  tokens_.clear();
  size_t block_start = 0, i = 0;
  bool wrote_final = false;
  while (i < n) {
    unsigned best_len = 0, best_dist = 0;
    if (options_.find_matches && i + 3 <= n) {
      const unsigned max_len = static_cast<unsigned>(std::min<size_t>(258, n - i));
      int32_t cand = head_[hash3(i)];
      for (unsigned chain = options_.max_chain; cand >= 0 && i - static_cast<size_t>(cand) <= kWindow && chain > 0;
           --chain) {
        const uint8_t* a = in.data() + cand;
        const uint8_t* b = in.data() + i;
        if (a[best_len] == b[best_len]) {  // cannot beat best_len otherwise
          unsigned len = 0;
          while (len < max_len && a[len] == b[len]) ++len;
          if (len > best_len) {
            best_len = len;
            best_dist = static_cast<unsigned>(i - static_cast<size_t>(cand));
            if (len == max_len) break;
          }
        }
        // An entry is current while its position is within the window of i
        // (checked at the top), so the chain only goes back.
        const int32_t next = prev_[static_cast<size_t>(cand) & (kWindow - 1)];
        if (next >= cand) break;
        cand = next;
      }
      insert(i);
    }
    if (best_len >= 3) {
      tokens_.push_back({static_cast<uint16_t>(best_len), static_cast<uint16_t>(best_dist)});
      for (size_t j = i + 1; j < i + best_len && j + 3 <= n; ++j) insert(j);
      i += best_len;
    } else {
      tokens_.push_back({in[i], 0});
      ++i;
    }
    if (tokens_.size() == kBlockTokens) {
      wrote_final = i == n;
      write_block(bw, tokens_, in.subspan(block_start, i - block_start), wrote_final, options_);
      tokens_.clear();
      block_start = i;
    }
  }
  if (!wrote_final) write_block(bw, tokens_, in.subspan(block_start), true, options_);
  bw.align_to_byte();
}

}  // namespace dpukit::bench
