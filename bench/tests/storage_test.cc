// Storage operators: the ref codecs against the libraries in both directions,
// the strict deflate decoder against malformed streams, CRC-32C against its
// published vectors, and the runner's check (Operator::mismatch) catching a
// wrong output.
#include <gtest/gtest.h>
#include <lz4.h>
#include <snappy.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>
#include <set>

#include "deflate_ref.h"
#include "operator.h"
#include "test_vectors.h"

namespace dpukit::bench {
namespace {

Bytes str(const char* s) { return Bytes(s, s + std::strlen(s)); }

// Inputs that reach every encoder path: empty and tiny, below and above the
// LZ4 end-of-block margins, runs (overlapping copies), text, incompressible
// bytes (stored blocks), and sizes past 64 KiB (several deflate blocks,
// stored pieces, Snappy fragments).
std::vector<Bytes> corpus() {
  std::vector<Bytes> c;
  for (size_t n : {0, 1, 2, 3, 4, 5, 11, 12, 13, 14, 17, 63, 64, 65, 100, 255, 256, 1000, 4096, 5000, 65535, 65536,
                   70000, 200000}) {
    c.push_back(text_bytes(n, n + 1));
    if (n <= 70000) c.push_back(random_bytes(n, n + 2));
    c.push_back(Bytes(n, 'z'));
    Bytes pattern(n);
    for (size_t i = 0; i < n; ++i) pattern[i] = static_cast<uint8_t>("abcab"[i % 5]);
    c.push_back(pattern);
  }
  // Text with a random middle: matches far back across incompressible data.
  Bytes mixed = text_bytes(30000, 9);
  Bytes noise = random_bytes(20000, 10);
  mixed.insert(mixed.end(), noise.begin(), noise.end());
  Bytes tail = text_bytes(30000, 9);
  mixed.insert(mixed.end(), tail.begin(), tail.end());
  c.push_back(mixed);
  return c;
}

Bytes zlib_raw_deflate(const Bytes& in, int level, int strategy, int mem_level = 8) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, -15, mem_level, strategy), Z_OK);
  Bytes out(deflateBound(&zs, in.size()));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// zlib's inflate of a raw stream; nullopt unless it ends exactly at the end of the input.
std::optional<Bytes> zlib_raw_inflate(const Bytes& in, size_t max_out) {
  z_stream zs{};
  if (inflateInit2(&zs, -15) != Z_OK) return std::nullopt;
  Bytes out(max_out + 1);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int r = inflate(&zs, Z_FINISH);
  const bool ok = r == Z_STREAM_END && zs.avail_in == 0;
  out.resize(zs.total_out);
  inflateEnd(&zs);
  if (!ok) return std::nullopt;
  return out;
}

int first_block_type(const Bytes& stream) { return stream.empty() ? -1 : (stream[0] >> 1) & 3; }

// Bits LSB first, as deflate packs them; Huffman codes go MSB first (put_code).
struct TestBits {
  Bytes out;
  uint32_t acc = 0;
  unsigned n = 0;
  void put(uint32_t v, unsigned bits) {
    for (unsigned i = 0; i < bits; ++i) bit((v >> i) & 1);
  }
  void put_code(uint32_t code, unsigned len) {
    for (unsigned i = len; i-- > 0;) bit((code >> i) & 1);
  }
  void bit(uint32_t b) {
    acc |= b << n;
    if (++n == 8) {
      out.push_back(static_cast<uint8_t>(acc));
      acc = 0;
      n = 0;
    }
  }
  Bytes finish() {
    if (n) out.push_back(static_cast<uint8_t>(acc));
    return out;
  }
};

std::vector<Bytes> run_kernel(const Operator& op, Backend b, const std::vector<Bytes>& inputs, size_t size) {
  auto k = op.make_kernels(b, size, 1);
  std::vector<Bytes> outs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) k[0]->process(inputs[i], outs[i]);
  return outs;
}

// -------------------------------------------------------------- CRC-32C

Bytes crc_of(Backend b, const Bytes& in) {
  Bytes out;
  find_operator("crc32c").make_kernels(b, in.size(), 1)[0]->process(in, out);
  return out;
}

uint32_t crc_value(const Bytes& out) {
  EXPECT_EQ(out.size(), 4u);
  return out[0] | out[1] << 8 | out[2] << 16 | static_cast<uint32_t>(out[3]) << 24;
}

TEST(StorageCrc32c, PublishedVectors) {
  Bytes zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    SCOPED_TRACE(backend_name(b));
    // Check value of CRC-32/ISCSI in the CRC catalogue (reveng.sourceforge.io/crc-catalogue).
    EXPECT_EQ(crc_value(crc_of(b, str("123456789"))), 0xE3069283u);
    // RFC 3720 (iSCSI) appendix B.4, CRC examples; the RFC lists the digest
    // bytes as sent (aa 36 91 8a for zeros), least significant byte first.
    EXPECT_EQ(crc_of(b, zeros), (Bytes{0xaa, 0x36, 0x91, 0x8a}));
    EXPECT_EQ(crc_value(crc_of(b, zeros)), 0x8A9136AAu);
    EXPECT_EQ(crc_value(crc_of(b, ones)), 0x62A8AB43u);
    EXPECT_EQ(crc_value(crc_of(b, inc)), 0x46DD794Eu);
    EXPECT_EQ(crc_value(crc_of(b, dec)), 0x113FDB5Cu);
    EXPECT_EQ(crc_value(crc_of(b, {})), 0u);
  }
}

TEST(StorageCrc32c, LibMatchesRefOnEveryLengthAndAlignment) {
  const Operator& op = find_operator("crc32c");
  auto ref = op.make_kernels(Backend::kRef, 0, 1);
  auto lib = op.make_kernels(Backend::kLib, 0, 1);
  const Bytes data = random_bytes(1200, 5);
  Bytes want, got;
  for (size_t off = 0; off < 8; ++off)
    for (size_t len = 0; len + off <= data.size(); len += (len < 300 ? 1 : 97)) {
      std::span<const uint8_t> in(data.data() + off, len);
      ref[0]->process(in, want);
      lib[0]->process(in, got);
      ASSERT_EQ(op.mismatch(in, want, got), "") << "offset " << off << " length " << len;
    }
}

// -------------------------------------------------------------- deflate

TEST(StorageInflate, DecodesZlibStoredFixedAndDynamicBlocks) {
  struct Config {
    int level, strategy, mem_level;
  };
  const Config configs[] = {{0, Z_DEFAULT_STRATEGY, 8}, {1, Z_DEFAULT_STRATEGY, 8}, {6, Z_DEFAULT_STRATEGY, 8},
                            {9, Z_DEFAULT_STRATEGY, 9}, {6, Z_FIXED, 8},            {6, Z_HUFFMAN_ONLY, 8},
                            {6, Z_RLE, 8},              {6, Z_FILTERED, 8},         {6, Z_DEFAULT_STRATEGY, 1}};
  std::set<int> block_types;
  for (const Bytes& in : corpus())
    for (const Config& c : configs) {
      const Bytes stream = zlib_raw_deflate(in, c.level, c.strategy, c.mem_level);
      block_types.insert(first_block_type(stream));
      std::string why;
      auto out = inflate_raw(stream, in.size(), &why);
      ASSERT_TRUE(out) << "size " << in.size() << " level " << c.level << " strategy " << c.strategy << ": " << why;
      ASSERT_EQ(*out, in);
    }
  EXPECT_EQ(block_types, (std::set<int>{0, 1, 2}));
}

TEST(StorageInflate, DecodesIgzipAtEveryLevel) {
  Operator& op = find_operator("compress");
  std::set<int> block_types;
  for (const char* level : {"0", "1", "2", "3"}) {
    op.set_param("level", level);
    auto k = op.make_kernels(Backend::kLib, 4096, 1);
    Bytes got;
    for (const Bytes& in : corpus()) {
      k[0]->process(in, got);
      block_types.insert(first_block_type(got));
      std::string why;
      auto out = inflate_raw(got, in.size(), &why);
      ASSERT_TRUE(out) << "igzip level " << level << " size " << in.size() << ": " << why;
      ASSERT_EQ(*out, in);
      // zlib agrees that igzip's stream is exactly one raw deflate stream.
      ASSERT_EQ(zlib_raw_inflate(got, in.size()), in);
    }
  }
  op.reset_params();
  EXPECT_TRUE(block_types.count(2)) << "igzip wrote no dynamic blocks";
}

TEST(StorageDeflate, ZlibInflatesRefOutput) {
  std::set<int> block_types;
  for (bool matches : {false, true})
    for (bool dynamic_only : {false, true}) {
      RawDeflater d(DeflateOptions{.find_matches = matches, .allow_fixed = !dynamic_only, .allow_stored = !dynamic_only});
      Bytes stream;
      for (const Bytes& in : corpus()) {
        d.compress(in, stream);
        block_types.insert(first_block_type(stream));
        if (dynamic_only) {
          ASSERT_EQ(first_block_type(stream), 2);
        }
        ASSERT_EQ(zlib_raw_inflate(stream, in.size()), in)
            << "size " << in.size() << " matches " << matches << " dynamic only " << dynamic_only;
        ASSERT_EQ(inflate_raw(stream, in.size()), in);
      }
    }
  EXPECT_EQ(block_types, (std::set<int>{0, 1, 2}));
}

TEST(StorageDeflate, ChoosesTheBlockTypeThatFits) {
  RawDeflater huff(DeflateOptions{.find_matches = false});
  RawDeflater full;
  Bytes s;
  huff.compress(text_bytes(4096, 3), s);
  EXPECT_EQ(first_block_type(s), 2);  // skewed text: dynamic Huffman
  EXPECT_LT(s.size(), 4096u * 3 / 4);
  const Bytes noise = random_bytes(70000, 4);
  full.compress(noise, s);
  EXPECT_EQ(first_block_type(s), 0);  // incompressible: stored
  EXPECT_LE(s.size(), 70000u + 5 * 5);  // 5 blocks of up to 16384 tokens, 5 header bytes each
  EXPECT_EQ(inflate_raw(s, noise.size()), noise);
  full.compress({}, s);
  EXPECT_EQ(s, (Bytes{0x03, 0x00}));  // an empty final fixed block, as zlib writes it
}

// Huffman's algorithm: the cost (sum of freq * length) of an optimal
// unlimited code, and the depth of the tree it built.
std::pair<uint64_t, unsigned> huffman_cost(const std::vector<uint32_t>& freqs) {
  using Node = std::pair<uint64_t, unsigned>;  // weight, depth
  std::priority_queue<Node, std::vector<Node>, std::greater<>> q;
  for (uint32_t f : freqs)
    if (f) q.push({f, 0});
  uint64_t cost = 0;
  while (q.size() > 1) {
    Node a = q.top();
    q.pop();
    Node b = q.top();
    q.pop();
    cost += a.first + b.first;
    q.push({a.first + b.first, std::max(a.second, b.second) + 1});
  }
  return {cost, q.top().second};
}

TEST(StorageDeflate, CodeLengthsAreOptimalWithinTheLimit) {
  auto kraft_complete = [](const std::vector<uint8_t>& lens, unsigned limit) {
    uint64_t sum = 0;
    for (uint8_t l : lens)
      if (l) sum += uint64_t{1} << (limit - l);
    return sum == (uint64_t{1} << limit);
  };
  EXPECT_EQ(limited_code_lengths(std::vector<uint32_t>{1, 1, 2, 4}, 15), (std::vector<uint8_t>{3, 3, 2, 1}));
  EXPECT_EQ(limited_code_lengths(std::vector<uint32_t>{1, 1, 2, 4}, 2), (std::vector<uint8_t>{2, 2, 2, 2}));
  EXPECT_EQ(limited_code_lengths(std::vector<uint32_t>{0, 7, 0}, 15), (std::vector<uint8_t>{0, 1, 0}));
  // Fibonacci weights: an unlimited Huffman code would be 24 bits deep.
  std::vector<uint32_t> fib = {1, 1};
  while (fib.size() < 25) fib.push_back(fib[fib.size() - 1] + fib[fib.size() - 2]);
  auto lens = limited_code_lengths(fib, 15);
  EXPECT_EQ(*std::max_element(lens.begin(), lens.end()), 15);
  EXPECT_TRUE(kraft_complete(lens, 15));
  // Where an optimal code fits in 15 bits, the same cost as Huffman's
  // algorithm; where none does, more.
  unsigned deeper = 0;
  for (uint64_t seed = 1; seed < 50; ++seed) {
    Bytes r = random_bytes(286, seed);
    std::vector<uint32_t> f(286);
    for (size_t i = 0; i < f.size(); ++i) f[i] = r[i] % 4 == 0 ? 0 : r[i] * (1 + r[(i + 1) % 286] % 16);
    auto l = limited_code_lengths(f, 15);
    uint64_t cost = 0;
    for (size_t i = 0; i < f.size(); ++i) cost += uint64_t{f[i]} * l[i];
    const auto [optimal, depth] = huffman_cost(f);
    if (depth <= 15) {
      EXPECT_EQ(cost, optimal) << seed;
    } else {
      EXPECT_GT(cost, optimal) << seed;
      ++deeper;
    }
    EXPECT_LE(*std::max_element(l.begin(), l.end()), 15) << seed;
    EXPECT_TRUE(kraft_complete(l, 15)) << seed;
  }
  EXPECT_GT(deeper, 0u);  // the weights do reach past 15 bits sometimes
}

TEST(StorageDeflate, LengthLimitHoldsInARealStream) {
  // Byte k appears Fib(k) times: one block whose unlimited literal code would
  // be 18 bits deep, so the 15-bit limit is what makes it decodable.
  std::vector<uint32_t> fib = {1, 1};
  while (fib.size() < 19) fib.push_back(fib[fib.size() - 1] + fib[fib.size() - 2]);
  Bytes in;
  for (size_t k = 0; k < fib.size(); ++k) in.insert(in.end(), fib[k], static_cast<uint8_t>('A' + k));
  Bytes order = random_bytes(in.size(), 77);  // shuffle so that nothing depends on runs
  for (size_t i = in.size(); i > 1; --i) std::swap(in[i - 1], in[(order[i - 1] | order[i - 2] << 8) % i]);
  RawDeflater d(DeflateOptions{.find_matches = false, .allow_fixed = false, .allow_stored = false});
  Bytes s;
  d.compress(in, s);
  EXPECT_EQ(zlib_raw_inflate(s, in.size()), in);
  EXPECT_EQ(inflate_raw(s, in.size()), in);
}

// A fixed-Huffman block (RFC 1951 3.2.6): literal 'a', then a match of length
// 3 at `distance` (1 or 2), then end of block.
Bytes fixed_block_with_match(unsigned distance) {
  TestBits b;
  b.put(1, 1);                 // BFINAL
  b.put(1, 2);                 // BTYPE 01
  b.put_code(0x30 + 'a', 8);   // literals 0-143: 00110000 + value
  b.put_code(257 - 256, 7);    // length 3 = symbol 257: 7-bit codes from 0000000
  b.put_code(distance - 1, 5); // distances 1 and 2 are codes 0 and 1, 5 bits, no extra
  b.put_code(0, 7);            // end of block (256)
  return b.finish();
}

// A dynamic block whose code-length code has two 1-bit codes, for 1 and 18.
// `with_eob` false leaves the end-of-block code without a length.
Bytes dynamic_block(bool with_eob) {
  TestBits b;
  b.put(1, 1);
  b.put(2, 2);   // BTYPE 10
  b.put(0, 5);   // HLIT: 257 codes
  b.put(0, 5);   // HDIST: 1 code
  b.put(14, 4);  // HCLEN: 18 code-length lengths, to reach symbol 1 (order 16,17,18,0,8,...,14,1)
  const int order[] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1};
  for (int sym : order) b.put(sym == 1 || sym == 18 ? 1 : 0, 3);
  // Canonical: symbol 1 is code 0, symbol 18 is code 1.
  auto one = [&] { b.put_code(0, 1); };
  auto zeros = [&](unsigned n) {  // 11-138 zeros
    b.put_code(1, 1);
    b.put(n - 11, 7);
  };
  if (with_eob) {
    one();        // literal 0: length 1
    zeros(138);   // literals 1-138
    zeros(117);   // literals 139-255
    one();        // end of block: length 1
    one();        // distance 0: length 1 (one code, which zlib allows)
    b.put_code(0, 1);  // literal 0
    b.put_code(1, 1);  // end of block
  } else {
    one();        // literal 0
    one();        // literal 1
    zeros(138);   // literals 2-139
    zeros(118);   // literals 140-256 and the distance code
    b.put_code(0, 1);
    b.put_code(1, 1);
  }
  return b.finish();
}

TEST(StorageInflate, HandBuiltBlocks) {
  // Positive controls: zlib decodes them the same way.
  EXPECT_EQ(inflate_raw(fixed_block_with_match(1), 100), str("aaaa"));
  EXPECT_EQ(zlib_raw_inflate(fixed_block_with_match(1), 100), str("aaaa"));
  EXPECT_EQ(inflate_raw(dynamic_block(true), 100), Bytes{0});
  EXPECT_EQ(zlib_raw_inflate(dynamic_block(true), 100), Bytes{0});
  // Stored block "hi" (3.2.4): LEN 2, NLEN ~2.
  EXPECT_EQ(inflate_raw(Bytes{0x01, 0x02, 0x00, 0xFD, 0xFF, 'h', 'i'}, 100), str("hi"));
}

TEST(StorageInflate, RejectsMalformedStreams) {
  auto rejects = [](const Bytes& s, const char* reason_part, size_t max_out = 1 << 20) {
    std::string why;
    EXPECT_FALSE(inflate_raw(s, max_out, &why)) << "accepted " << hex(s);
    EXPECT_NE(why.find(reason_part), std::string::npos) << why;
  };
  rejects(fixed_block_with_match(2), "too far back");
  rejects(dynamic_block(false), "end-of-block");
  rejects(Bytes{0x07}, "reserved block type");
  rejects(Bytes{0x01, 0x02, 0x00, 0xFC, 0xFF, 'h', 'i'}, "NLEN");
  rejects(Bytes{0x01, 0x02, 0x00, 0xFD, 0xFF, 'h'}, "truncated");
  rejects(Bytes{0x00, 0x00, 0x00, 0xFF, 0xFF}, "truncated");  // a non-final block and nothing after it
  rejects(Bytes{0x01, 0x02, 0x00, 0xFD, 0xFF, 'h', 'i', 0x00}, "after the final block");
  rejects(Bytes{0x01, 0x02, 0x00, 0xFD, 0xFF, 'h', 'i'}, "limit", 1);
  {
    TestBits b;  // dynamic header with four 1-bit code-length codes: over-subscribed
    b.put(5, 3);
    b.put(0, 5);
    b.put(0, 5);
    b.put(0, 4);
    for (int i = 0; i < 4; ++i) b.put(1, 3);
    rejects(b.finish(), "over-subscribed");
  }
  {
    TestBits b;  // only one code-length code, of 2 bits: incomplete
    b.put(5, 3);
    b.put(0, 5);
    b.put(0, 5);
    b.put(0, 4);
    b.put(2, 3);
    for (int i = 0; i < 3; ++i) b.put(0, 3);
    rejects(b.finish(), "incomplete");
  }
  {
    TestBits b;  // HLIT 30: 287 literal/length codes
    b.put(5, 3);
    b.put(30, 5);
    b.put(0, 5);
    b.put(0, 4);
    for (int i = 0; i < 4; ++i) b.put(2, 3);
    rejects(b.finish(), "too many");
  }
  // Every strict prefix of a valid stream is truncated.
  const Bytes text = text_bytes(3000, 11);
  RawDeflater d;
  Bytes ref_stream;
  d.compress(text, ref_stream);
  for (const Bytes& s : {zlib_raw_deflate(text, 6, Z_DEFAULT_STRATEGY), zlib_raw_deflate(text, 6, Z_FIXED),
                         zlib_raw_deflate(text, 0, Z_DEFAULT_STRATEGY), ref_stream})
    for (size_t n = 0; n < s.size(); ++n) {
      std::string why;
      ASSERT_FALSE(inflate_raw(std::span<const uint8_t>(s.data(), n), 1 << 20, &why)) << "prefix " << n;
    }
}

TEST(StorageInflate, SurvivesGarbageAndBitFlips) {
  // Nothing to compare with: it must return (and bound its output), not crash.
  size_t accepted = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    Bytes g = random_bytes(1 + seed % 200, seed);
    auto out = inflate_raw(g, 4096);
    if (out) {
      ++accepted;
      EXPECT_LE(out->size(), 4096u);
    }
  }
  const Bytes text = text_bytes(2000, 12);
  const Bytes s = zlib_raw_deflate(text, 6, Z_DEFAULT_STRATEGY);
  size_t changed = 0;
  for (size_t bit = 0; bit < s.size() * 8; ++bit) {
    Bytes f = s;
    f[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto out = inflate_raw(f, 1 << 16);
    if (!out || *out != text) ++changed;
  }
  // Nearly every flip is noticed; the few that are not are in the last byte's padding.
  EXPECT_GE(changed + 8, s.size() * 8);
  std::printf("garbage accepted: %zu of 3000; bit flips noticed: %zu of %zu\n", accepted, changed, s.size() * 8);
}

// -------------------------------------------------------------- LZ4 and Snappy

TEST(StorageLz4, RefOutputDecodesWithLibLz4) {
  const Operator& op = find_operator("lz77");
  auto k = op.make_kernels(Backend::kRef, 0, 1);
  Bytes got;
  for (const Bytes& in : corpus()) {
    k[0]->process(in, got);
    Bytes dec(in.size() + 1);
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(got.data()), reinterpret_cast<char*>(dec.data()),
                                      static_cast<int>(got.size()), static_cast<int>(in.size()));
    ASSERT_EQ(n, static_cast<int>(in.size())) << "size " << in.size();
    dec.resize(in.size());
    ASSERT_EQ(dec, in);
    ASSERT_EQ(op.mismatch(in, {}, got), "");
  }
}

TEST(StorageLz4, LibOutputPassesRefDecoder) {
  const Operator& op = find_operator("lz77");
  auto k = op.make_kernels(Backend::kLib, 4096, 1);
  Bytes got;
  for (const Bytes& in : corpus()) {
    k[0]->process(in, got);
    ASSERT_EQ(op.mismatch(in, {}, got), "") << "size " << in.size();
  }
}

// LZ4 sequence: token, literals, and (unless last) offset and match length.
void lz4_sequence(Bytes& b, const Bytes& literals, unsigned offset, size_t match_len) {
  auto len_bytes = [&](size_t v) {
    for (v -= 15; v >= 255; v -= 255) b.push_back(255);
    b.push_back(static_cast<uint8_t>(v));
  };
  const size_t ml = match_len ? match_len - 4 : 0;
  b.push_back(static_cast<uint8_t>(std::min<size_t>(literals.size(), 15) << 4 | std::min<size_t>(ml, 15)));
  if (literals.size() >= 15) len_bytes(literals.size());
  b.insert(b.end(), literals.begin(), literals.end());
  if (!match_len) return;
  b.push_back(static_cast<uint8_t>(offset));
  b.push_back(static_cast<uint8_t>(offset >> 8));
  if (ml >= 15) len_bytes(ml);
}

TEST(StorageLz4, RefDecoderRejectsMalformedBlocks) {
  const Operator& op = find_operator("lz77");
  const Bytes want = str("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaabbbbb");  // 30 'a', 5 'b'
  Bytes good;
  lz4_sequence(good, str("a"), 1, 29);
  lz4_sequence(good, str("bbbbb"), 0, 0);
  EXPECT_EQ(op.mismatch(want, {}, good), "");
  Bytes lib(want.size());
  ASSERT_EQ(LZ4_decompress_safe(reinterpret_cast<const char*>(good.data()), reinterpret_cast<char*>(lib.data()),
                                static_cast<int>(good.size()), static_cast<int>(lib.size())),
            static_cast<int>(want.size()));
  EXPECT_EQ(lib, want);

  auto rejected = [&](const Bytes& in, const Bytes& block, const char* reason_part) {
    const std::string m = op.mismatch(in, {}, block);
    EXPECT_NE(m.find(reason_part), std::string::npos) << m;
  };
  Bytes zero_offset;
  lz4_sequence(zero_offset, str("a"), 0, 29);
  lz4_sequence(zero_offset, str("bbbbb"), 0, 0);
  rejected(want, zero_offset, "offset 0");
  Bytes far;
  lz4_sequence(far, str("a"), 2, 29);
  lz4_sequence(far, str("bbbbb"), 0, 0);
  rejected(want, far, "before the start");
  rejected(want, Bytes(good.begin(), good.end() - 2), "past the end");
  rejected(want, Bytes(good.begin(), good.begin() + 5), "literal-only last sequence");  // ends after a match
  Bytes other = good;
  other.back() = 'c';  // a valid block of other bytes
  rejected(want, other, "decodes to other bytes");
  Bytes short_tail;  // the last 5 bytes must be literals
  lz4_sequence(short_tail, str("a"), 1, 31);
  lz4_sequence(short_tail, str("bbb"), 0, 0);
  rejected(want, short_tail, "end-of-block rules");
  Bytes truncated_length{0xF0, 255};  // literal length continues past the end
  rejected(want, truncated_length, "truncated literal length");
}

TEST(StorageSnappy, RefOutputDecodesWithLibSnappy) {
  const Operator& op = find_operator("snappy");
  auto k = op.make_kernels(Backend::kRef, 0, 1);
  Bytes got;
  for (const Bytes& in : corpus()) {
    k[0]->process(in, got);
    const char* c = reinterpret_cast<const char*>(got.data());
    ASSERT_TRUE(snappy::IsValidCompressedBuffer(c, got.size())) << "size " << in.size();
    size_t n = 0;
    ASSERT_TRUE(snappy::GetUncompressedLength(c, got.size(), &n));
    ASSERT_EQ(n, in.size());
    Bytes dec(n);
    ASSERT_TRUE(snappy::RawUncompress(c, got.size(), reinterpret_cast<char*>(dec.data())));
    ASSERT_EQ(dec, in);
    ASSERT_EQ(op.mismatch(in, {}, got), "");
  }
}

TEST(StorageSnappy, LibOutputPassesRefDecoder) {
  const Operator& op = find_operator("snappy");
  auto k = op.make_kernels(Backend::kLib, 4096, 1);
  Bytes got;
  for (const Bytes& in : corpus()) {
    k[0]->process(in, got);
    ASSERT_EQ(op.mismatch(in, {}, got), "") << "size " << in.size();
  }
}

Bytes snappy_lib_uncompress(const Bytes& c) {
  size_t n = 0;
  const char* p = reinterpret_cast<const char*>(c.data());
  if (!snappy::GetUncompressedLength(p, c.size(), &n)) return {};
  Bytes out(n);
  if (!snappy::RawUncompress(p, c.size(), reinterpret_cast<char*>(out.data()))) return {};
  return out;
}

TEST(StorageSnappy, HandBuiltStreams) {
  const Operator& op = find_operator("snappy");
  // Every element kind of format_description.txt, decoded by both decoders.
  struct Case {
    Bytes stream, want;
  } cases[] = {
      // length 10; literal "ab"; copy-1 (tag 01) of 8 bytes at offset 2 (overlapping)
      {{0x0A, 0x04, 'a', 'b', 0x11, 0x02}, str("ababababab")},
      // length 6; literal "abc"; copy-4 (tag 11) of 3 bytes at offset 3
      {{0x06, 0x08, 'a', 'b', 'c', 0x0B, 0x03, 0x00, 0x00, 0x00}, str("abcabc")},
      // length 4; literal "ab"; copy-2 (tag 10) of 2 bytes at offset 2
      {{0x04, 0x04, 'a', 'b', 0x06, 0x02, 0x00}, str("abab")},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(op.mismatch(c.want, {}, c.stream), "");
    EXPECT_EQ(snappy_lib_uncompress(c.stream), c.want);
  }
  // A 61-byte literal needs the 1-extra-byte form (tag 60).
  Bytes lit61 = text_bytes(61, 3);
  Bytes s{61, 60 << 2, 60};
  s.insert(s.end(), lit61.begin(), lit61.end());
  EXPECT_EQ(op.mismatch(lit61, {}, s), "");
  EXPECT_EQ(snappy_lib_uncompress(s), lit61);

  auto rejected = [&](const Bytes& want, const Bytes& stream, const char* reason_part) {
    const std::string m = op.mismatch(want, {}, stream);
    EXPECT_NE(m.find(reason_part), std::string::npos) << m;
  };
  rejected(str("ababababab"), {0x0A, 0x04, 'a', 'b', 0x11, 0x00}, "offset 0");
  rejected(str("ababababab"), {0x0A, 0x04, 'a', 'b', 0x11, 0x03}, "before the start");
  rejected(str("ababababab"), {0x0A, 0x04, 'a', 'b', 0x11}, "truncated copy");
  rejected(str("ababababab"), {0x0A, 0x04, 'a', 'b'}, "less data");
  rejected(str("ababababab"), {0x0A, 0x04, 'a', 'b', 0x11, 0x02, 0x04, 'c', 'd'}, "more data");
  rejected(str("ab"), {0x02, 0x0C, 'a', 'b'}, "past the end");
  rejected(str("ab"), {0x82}, "truncated length");
  rejected(str("ab"), {0x0A, 0x04, 'a', 'b'}, "larger than expected");
}

// -------------------------------------------------------------- operators

const char* const kStorageOps[] = {"lz77", "huffman", "snappy", "compress", "crc32c"};

TEST(StorageOps, RegisteredInOrderWithTheirDevBackends) {
  std::vector<std::string> names;
  for (const auto& info : list_operators())
    if (info.scenario == "storage") names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lz77", "huffman", "snappy", "compress", "decompress", "crc32c"}));
  for (const char* name : {"lz77", "huffman", "snappy", "crc32c"}) {
    try {
      find_operator(name).make_kernels(Backend::kDev, 64, 1);
      ADD_FAILURE() << name << " dev did not throw";
    } catch (const Unavailable& e) {
      EXPECT_NE(std::string(e.what()).find("compressdev offers deflate"), std::string::npos) << e.what();
    }
  }
  // compress runs on compressdev (compress_isal here), checked like lib: by the ref inflate.
  Operator& dev = find_operator("compress");
  auto inputs = dev.make_inputs(1024, 16, 3);
  auto kernels = dev.make_kernels(Backend::kDev, 1024, 2);
  EXPECT_EQ(check_against_ref(dev, Backend::kDev, 1024, inputs, kernels), 16u);
  Operator& c = find_operator("compress");
  c.set_param("level", "4");
  EXPECT_THROW(c.make_kernels(Backend::kLib, 64, 1), std::invalid_argument);
  c.reset_params();
}

// decompress: the inputs are the ref encoder's streams of compress's text;
// ref and ISA-L inflate them back to exactly that text, and refuse a
// truncated stream instead of returning what they got so far.
TEST(StorageOps, DecompressInflatesTheStreamsOfCompresssTextBack) {
  Operator& op = find_operator("decompress");
  op.reset_params();
  const size_t size = 4096;
  auto inputs = op.make_inputs(size, 8, 3);
  Bytes text(size);
  for (size_t i = 0; i < inputs.size(); ++i) {
    fill_text(text, 3 * 1000003 + i);
    EXPECT_LT(inputs[i].size(), size / 2) << "text compresses";
    EXPECT_EQ(inflate_raw(inputs[i], size), std::optional<Bytes>(text)) << i;
  }
  auto lib = op.make_kernels(Backend::kLib, size, 2);
  EXPECT_EQ(check_against_ref(op, Backend::kLib, size, inputs, lib), 8u);
  Bytes out;
  lib[0]->process(inputs[0], out);
  EXPECT_EQ(out, inflate_raw(inputs[0], size).value());
  const Bytes cut(inputs[0].begin(), inputs[0].begin() + static_cast<std::ptrdiff_t>(inputs[0].size() / 2));
  auto ref = op.make_kernels(Backend::kRef, size, 1);
  EXPECT_THROW(ref[0]->process(cut, out), std::runtime_error);
  EXPECT_THROW(lib[0]->process(cut, out), std::runtime_error);
}

TEST(StorageOps, CompressorsGetTextInputs) {
  for (const char* name : {"lz77", "huffman", "snappy", "compress"}) {
    auto inputs = find_operator(name).make_inputs(256, 4, 1);
    ASSERT_EQ(inputs.size(), 4u);
    for (const Bytes& in : inputs) {
      ASSERT_EQ(in.size(), 256u);
      for (uint8_t b : in) ASSERT_TRUE(b == '\n' || (b >= 0x20 && b < 0x7F)) << name;
    }
    EXPECT_NE(inputs[0], inputs[1]);
  }
}

// What the runner does before timing: every lib kernel's output passes the
// operator's check for the same inputs, and so does ref's own output.
TEST(StorageOps, LibAndRefPassTheCheck) {
  auto check = [](Operator& op, const char* what) {
    for (size_t size : {1, 13, 64, 100, 1024, 4096, 70000}) {
      const auto inputs = op.make_inputs(size, 6, 7);
      auto ref = op.make_kernels(Backend::kRef, size, 1);
      Bytes want;
      for (const Bytes& in : inputs) {
        ref[0]->process(in, want);
        ASSERT_EQ(op.mismatch(in, want, want), "") << op.info().name << " ref " << what << " size " << size;
      }
      ASSERT_EQ(lib_differs_from_ref(op, size, inputs), "") << op.info().name << " lib " << what << " size " << size;
    }
  };
  for (const char* name : kStorageOps) check(find_operator(name), "");
  Operator& c = find_operator("compress");
  for (const char* level : {"0", "2", "3"}) {
    c.set_param("level", level);
    check(c, level);
  }
  c.reset_params();
}

TEST(StorageOps, WrongOutputIsCaught) {
  for (const char* name : kStorageOps) {
    const Operator& op = find_operator(name);
    const Bytes in = op.make_inputs(1024, 1, 3)[0];
    Bytes want, got;
    op.make_kernels(Backend::kRef, 1024, 1)[0]->process(in, want);
    op.make_kernels(Backend::kLib, 1024, 1)[0]->process(in, got);
    ASSERT_EQ(op.mismatch(in, want, got), "") << name;
    Bytes flipped = got;
    flipped[flipped.size() / 2] ^= 0x01;
    EXPECT_NE(op.mismatch(in, want, flipped), "") << name << ": a flipped byte passed";
    Bytes shorter(got.begin(), got.end() - 1);
    EXPECT_NE(op.mismatch(in, want, shorter), "") << name << ": a truncated output passed";
    Bytes other_input = in;
    other_input[10] ^= 0x20;  // got is the right output for a different input
    Bytes other_want;
    op.make_kernels(Backend::kRef, 1024, 1)[0]->process(other_input, other_want);
    EXPECT_NE(op.mismatch(other_input, other_want, got), "") << name << ": output of another input passed";
  }
}

// Compressed bytes / input bytes over the default inputs.
double compression_ratio(const char* name, Backend b, size_t size) {
  const Operator& op = find_operator(name);
  const auto inputs = op.make_inputs(size, 64, 1);
  size_t in_bytes = 0, out_bytes = 0;
  for (const Bytes& out : run_kernel(op, b, inputs, size)) out_bytes += out.size();
  for (const Bytes& in : inputs) in_bytes += in.size();
  return static_cast<double>(out_bytes) / static_cast<double>(in_bytes);
}

TEST(StorageRatio, DefaultTextInputs) {
  std::printf("compressed/input bytes on the default text inputs (64 inputs per size, seed 1)\n%-9s %-4s", "op",
              "");
  const size_t sizes[] = {64, 256, 1024, 4096};
  for (size_t s : sizes) std::printf(" %7zu", s);
  std::printf("\n");
  std::map<std::string, double> at4k;
  for (const char* name : {"lz77", "huffman", "snappy", "compress"})
    for (Backend b : {Backend::kRef, Backend::kLib}) {
      std::printf("%-9s %-4s", name, backend_name(b));
      for (size_t s : sizes) {
        const double r = compression_ratio(name, b, s);
        std::printf(" %7.3f", r);
        if (s == 4096) at4k[std::string(name) + "/" + backend_name(b)] = r;
      }
      std::printf("\n");
    }
  for (const auto& [k, r] : at4k) EXPECT_LT(r, 0.75) << k;
  EXPECT_LT(at4k["compress/lib"], at4k["huffman/lib"]);
  EXPECT_LT(at4k["compress/ref"], at4k["huffman/ref"]);
  EXPECT_LT(at4k["compress/ref"], at4k["lz77/ref"]);
}

}  // namespace
}  // namespace dpukit::bench
