// Network operators: each ref against its published vectors, every lib
// backend against ref on many packets (through the registry, as the runner
// reaches them), the LPM trie and rte_lpm against a linear scan on random
// tables with nested prefixes, and a wrong output being caught.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "operator.h"
#include "packet.h"
#include "test_vectors.h"

namespace dpukit::bench {
namespace {

// Sets an operator's parameters for one test and puts the defaults back.
class WithParams {
 public:
  WithParams(Operator& op, const std::map<std::string, std::string>& params) : op_(op) {
    op_.reset_params();
    for (const auto& [k, v] : params) op_.set_param(k, v);
  }
  ~WithParams() { op_.reset_params(); }

 private:
  Operator& op_;
};

Bytes one(Kernel& k, std::span<const uint8_t> in) {
  Bytes out;
  k.process(in, out);
  return out;
}

Bytes str(const char* s) { return Bytes(s, s + std::strlen(s)); }

std::unique_ptr<Kernel> kernel(const std::string& op, Backend b) {
  return std::move(find_operator(op).make_kernels(b, 64, 1)[0]);
}

// ---------------------------------------------------------------------------
// Checksum
// ---------------------------------------------------------------------------

TEST(NetworkChecksum, Rfc1071NumericalExample) {
  // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (folded);
  // the checksum is its complement, 220d.
  const Bytes example = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  // The same bytes without the last one: RFC 1071 §1 pads an odd count
  // with a zero byte, so the words are 0001 f203 f4f5 f600, summing to
  // 2dcf9 -> dcfb; the checksum is 2304.
  const Bytes odd(example.begin(), example.end() - 1);
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    auto k = kernel("checksum", b);
    EXPECT_EQ(one(*k, example), (Bytes{0x22, 0x0d})) << backend_name(b);
    EXPECT_EQ(one(*k, odd), (Bytes{0x23, 0x04})) << backend_name(b);
    EXPECT_EQ(one(*k, Bytes{}), (Bytes{0xff, 0xff})) << backend_name(b);  // nothing summed: ~0
    EXPECT_EQ(one(*k, Bytes{0xab}), (Bytes{0x54, 0xff})) << backend_name(b);  // ~ab00
  }
}

TEST(NetworkChecksum, AHeaderWithItsChecksumSumsToZero) {
  // RFC 1071 §1: the receiver's sum over the data and its checksum is all
  // ones, i.e. the checksum computed over both is zero.
  auto ref = kernel("checksum", Backend::kRef);
  auto lib = kernel("checksum", Backend::kLib);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Bytes p = make_ipv4_packet(60 + seed, seed);
    std::span<const uint8_t> header(p.data() + kEthLen, kIpv4Len);
    EXPECT_EQ(one(*ref, header), (Bytes{0, 0}));
    EXPECT_EQ(one(*lib, header), (Bytes{0, 0}));
  }
}

TEST(NetworkChecksum, BackendsAgreeWithPacketHelperOnAllLengths) {
  // Odd and even lengths, and past rte_raw_cksum's 32-bit accumulator
  // (about 128 KiB of 0xff words), which the lib kernel sums in pieces.
  auto ref = kernel("checksum", Backend::kRef);
  auto lib = kernel("checksum", Backend::kLib);
  std::vector<Bytes> inputs;
  for (size_t n = 0; n < 300; ++n) inputs.push_back(random_bytes(n, n));
  for (size_t n : {65535, 65536, 65537, 131073, 200001, 1 << 20}) {
    inputs.push_back(random_bytes(n, n));
    inputs.push_back(Bytes(n, 0xff));
  }
  for (const Bytes& in : inputs) {
    const uint16_t want = inet_checksum(in);
    const Bytes want_bytes = {static_cast<uint8_t>(want >> 8), static_cast<uint8_t>(want)};
    ASSERT_EQ(one(*ref, in), want_bytes) << in.size() << " bytes";
    ASSERT_EQ(one(*lib, in), want_bytes) << in.size() << " bytes";
  }
}

// ---------------------------------------------------------------------------
// CRC-32
// ---------------------------------------------------------------------------

TEST(NetworkCrc, CatalogueCheckValue) {
  // Catalogue of parametrised CRC algorithms (reveng), CRC-32/ISO-HDLC
  // (the IEEE 802.3 CRC): check = 0xcbf43926 for "123456789", residue
  // 0xdebb20e3. The FCS is sent least significant byte first.
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    auto k = kernel("crc", b);
    EXPECT_EQ(one(*k, str("123456789")), (Bytes{0x26, 0x39, 0xf4, 0xcb})) << backend_name(b);
    EXPECT_EQ(one(*k, Bytes{}), (Bytes{0, 0, 0, 0})) << backend_name(b);
  }
}

TEST(NetworkCrc, FrameWithItsFcsLeavesTheResidue) {
  // A receiver running the CRC over a frame and its FCS gets the residue
  // 0xdebb20e3 before the final xor, 0x2144df1c after it: this fixes the
  // FCS byte order.
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    auto k = kernel("crc", b);
    for (uint64_t seed = 0; seed < 20; ++seed) {
      Bytes frame = make_ipv4_packet(60 + 7 * seed, seed);
      Bytes fcs = one(*k, frame);
      frame.insert(frame.end(), fcs.begin(), fcs.end());
      EXPECT_EQ(one(*k, frame), (Bytes{0x1c, 0xdf, 0x44, 0x21})) << backend_name(b) << " seed " << seed;
    }
  }
}

TEST(NetworkCrc, BackendsAgreeWithZlibOnAllLengths) {
  // zlib's crc32 is the same CRC (CRC-32/ISO-HDLC): a third implementation.
  auto ref = kernel("crc", Backend::kRef);
  auto lib = kernel("crc", Backend::kLib);
  std::vector<Bytes> inputs;
  for (size_t n = 0; n < 600; ++n) inputs.push_back(random_bytes(n, 1000 + n));
  for (size_t n : {4095, 4096, 65537, 1 << 20}) inputs.push_back(random_bytes(n, n));
  for (const Bytes& in : inputs) {
    const uint32_t z = static_cast<uint32_t>(crc32(0L, in.data(), static_cast<uInt>(in.size())));
    const Bytes want = {static_cast<uint8_t>(z), static_cast<uint8_t>(z >> 8), static_cast<uint8_t>(z >> 16),
                        static_cast<uint8_t>(z >> 24)};
    ASSERT_EQ(one(*ref, in), want) << in.size() << " bytes";
    ASSERT_EQ(one(*lib, in), want) << in.size() << " bytes";
  }
}

// ---------------------------------------------------------------------------
// Toeplitz
// ---------------------------------------------------------------------------

struct RssVector {
  uint8_t src[4], dst[4];
  uint16_t sport, dport;
  uint32_t hash_l3, hash_l4;
};

// Microsoft, "Verifying the RSS Hash Calculation" (RSS verification suite,
// IPv4 table; also Intel 82599 datasheet §7.1.2.8.3), with the key below.
const RssVector kRssSuite[] = {
    {{66, 9, 149, 187}, {161, 142, 100, 80}, 2794, 1766, 0x323e8fc2, 0x51ccc178},
    {{199, 92, 111, 2}, {65, 69, 140, 83}, 14230, 4739, 0xd718262a, 0xc626b0ea},
    {{24, 19, 198, 95}, {12, 22, 207, 184}, 12898, 38024, 0xd2d0a5de, 0x5c2b394a},
    {{38, 27, 205, 30}, {209, 142, 163, 6}, 48228, 2217, 0x82989176, 0xafc7327f},
    {{153, 39, 163, 191}, {202, 188, 127, 2}, 44251, 1303, 0x5d1809c5, 0x10e828a2},
};

Bytes packet_with_flow(const RssVector& v, uint64_t seed) {
  Bytes p = make_ipv4_packet(64 + seed, seed);
  std::memcpy(&p[kEthLen + 12], v.src, 4);
  std::memcpy(&p[kEthLen + 16], v.dst, 4);
  store_be16(&p[kEthLen + kIpv4Len], v.sport);
  store_be16(&p[kEthLen + kIpv4Len + 2], v.dport);
  return p;
}

Bytes be32(uint32_t v) {
  Bytes b(4);
  store_be32(b.data(), v);
  return b;
}

TEST(NetworkToeplitz, MicrosoftVerificationSuite) {
  Operator& op = find_operator("toeplitz");
  for (const char* tuple : {"l4", "l3"}) {
    WithParams with(op, {{"tuple", tuple}});
    for (Backend b : {Backend::kRef, Backend::kLib}) {
      auto k = std::move(op.make_kernels(b, 64, 1)[0]);
      uint64_t seed = 0;
      for (const RssVector& v : kRssSuite) {
        const uint32_t want = std::string(tuple) == "l4" ? v.hash_l4 : v.hash_l3;
        EXPECT_EQ(one(*k, packet_with_flow(v, seed++)), be32(want))
            << backend_name(b) << " " << tuple << " " << int(v.src[0]) << "." << int(v.src[1]) << "...";
      }
    }
  }
}

TEST(NetworkToeplitz, UnknownTupleIsRefused) {
  Operator& op = find_operator("toeplitz");
  WithParams with(op, {{"tuple", "l2"}});
  EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Every lib == ref on packets made the runner's way
// ---------------------------------------------------------------------------

TEST(NetworkOps, LibAgreesWithRefOnManyPackets) {
  for (const char* name : {"checksum", "crc", "toeplitz"}) {
    Operator& op = find_operator(name);
    op.reset_params();
    for (size_t size : {54, 55, 64, 65, 127, 256, 1023, 1500, 9000}) {
      const auto inputs = op.make_inputs(size, 300, 7);
      for (const Bytes& in : inputs) ASSERT_EQ(in.size(), size);
      ASSERT_EQ(lib_differs_from_ref(op, size, inputs), "") << name << " " << size << "B";
    }
  }
}

TEST(NetworkOps, PacketsShorterThanTheHeadersAreRefused) {
  for (const char* name : {"lpm", "checksum", "crc", "toeplitz"}) {
    EXPECT_THROW(find_operator(name).make_inputs(53, 4, 1), std::invalid_argument) << name;
    EXPECT_NO_THROW(find_operator(name).make_inputs(54, 4, 1)) << name;
  }
}

TEST(NetworkOps, RegisteredInOrderWithoutDevBackend) {
  std::vector<std::string> names;
  for (const auto& info : list_operators())
    if (info.scenario == "network" && (info.name == "lpm" || info.name == "checksum" || info.name == "crc" ||
                                       info.name == "toeplitz"))
      names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"lpm", "checksum", "crc", "toeplitz"}));
  for (const auto& n : names) EXPECT_THROW(find_operator(n).make_kernels(Backend::kDev, 64, 1), Unavailable) << n;
}

TEST(NetworkOps, WrongOutputIsCaught) {
  Operator& lpm = find_operator("lpm");
  WithParams with(lpm, {{"table", "list:10.0.0.0/8=1;0.0.0.0/0=2"}});
  for (const char* name : {"lpm", "checksum", "crc", "toeplitz"}) {
    Operator& op = find_operator(name);
    auto in = op.make_inputs(128, 4, 3);
    auto ref = op.make_kernels(Backend::kRef, 128, 1);
    auto lib = op.make_kernels(Backend::kLib, 128, 1);
    for (const Bytes& p : in) {
      Bytes want = one(*ref[0], p), got = one(*lib[0], p);
      EXPECT_EQ(op.mismatch(p, want, got), "") << name;
      Bytes flipped = got;
      flipped[flipped.size() - 1] ^= 0x01;
      EXPECT_NE(op.mismatch(p, want, flipped), "") << name;
      Bytes shorter(got.begin(), got.end() - 1);
      EXPECT_NE(op.mismatch(p, want, shorter), "") << name;
    }
  }
}

// ---------------------------------------------------------------------------
// LPM
// ---------------------------------------------------------------------------

uint32_t ipv4(int a, int b, int c, int d) { return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d; }

std::string dotted(uint32_t ip) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
  return buf;
}

// Looks addresses up through one kernel (the kernel reads only the
// destination field of the packet).
class Lookup {
 public:
  explicit Lookup(std::unique_ptr<Kernel> k) : k_(std::move(k)), packet_(make_ipv4_packet(64, 1)) {}
  uint32_t operator()(uint32_t dst) {
    store_be32(&packet_[kEthLen + 16], dst);
    k_->process(packet_, out_);
    EXPECT_EQ(out_.size(), 4u);
    return load_be32(out_.data());
  }

 private:
  std::unique_ptr<Kernel> k_;
  Bytes packet_, out_;
};

struct TestRoute {
  uint32_t prefix;
  unsigned depth;
  uint32_t hop;
};

// The definition itself: the longest route covering the address; a later
// duplicate of (prefix, depth) replaces the next hop.
uint32_t linear_lpm(const std::vector<TestRoute>& routes, uint32_t addr) {
  int best_depth = -1;
  uint32_t hop = 0xFFFFFFFF;
  for (const TestRoute& r : routes) {
    const uint32_t mask = r.depth == 0 ? 0 : ~0u << (32 - r.depth);
    if ((addr & mask) == (r.prefix & mask) && int(r.depth) >= best_depth) {
      best_depth = int(r.depth);
      hop = r.hop;
    }
  }
  return hop;
}

std::string list_spec(const std::vector<TestRoute>& routes) {
  std::string s = "list:";
  for (const TestRoute& r : routes)
    s += dotted(r.prefix) + "/" + std::to_string(r.depth) + "=" + std::to_string(r.hop) + (r.hop % 2 ? ";" : ",");
  return s;
}

TEST(NetworkLpm, HandPickedTable) {
  const std::vector<TestRoute> routes = {
      {ipv4(0, 0, 0, 0), 0, 100},            // default route
      {ipv4(10, 0, 0, 0), 8, 1},
      {ipv4(10, 1, 0, 0), 16, 2},
      {ipv4(10, 1, 2, 255), 24, 3},          // host bits are ignored
      {ipv4(10, 1, 2, 128), 25, 4},          // deeper than /24: a tbl8 group in rte_lpm
      {ipv4(10, 1, 2, 129), 32, 5},
      {ipv4(10, 1, 2, 130), 31, 6},
      {ipv4(255, 255, 255, 255), 32, 7},
      {ipv4(128, 0, 0, 0), 1, 8},
      {ipv4(172, 16, 0, 0), 12, 10},
      {ipv4(172, 16, 0, 0), 16, 11},
      {ipv4(172, 16, 0, 0), 28, 12},
      {ipv4(172, 16, 0, 0), 16, 13},         // a second add replaces the next hop
      {ipv4(0, 0, 0, 0), 32, 14},
      {ipv4(1, 2, 3, 0), 25, 16777215},      // the largest next hop rte_lpm holds
  };
  const std::pair<uint32_t, uint32_t> expect[] = {
      {ipv4(10, 1, 2, 129), 5},  {ipv4(10, 1, 2, 130), 6},      {ipv4(10, 1, 2, 131), 6},
      {ipv4(10, 1, 2, 132), 4},  {ipv4(10, 1, 2, 128), 4},      {ipv4(10, 1, 2, 255), 4},
      {ipv4(10, 1, 2, 127), 3},  {ipv4(10, 1, 2, 0), 3},        {ipv4(10, 1, 3, 0), 2},
      {ipv4(10, 2, 0, 0), 1},    {ipv4(10, 255, 255, 255), 1},  {ipv4(11, 0, 0, 0), 100},
      {ipv4(0, 0, 0, 1), 100},   {ipv4(0, 0, 0, 0), 14},        {ipv4(255, 255, 255, 255), 7},
      {ipv4(255, 255, 255, 254), 8}, {ipv4(128, 0, 0, 0), 8},   {ipv4(172, 16, 0, 15), 12},
      {ipv4(172, 16, 0, 16), 13}, {ipv4(172, 16, 1, 0), 13},    {ipv4(172, 17, 0, 0), 10},
      {ipv4(172, 32, 0, 0), 8},  {ipv4(1, 2, 3, 127), 16777215}, {ipv4(1, 2, 3, 128), 100},
  };
  Operator& op = find_operator("lpm");
  WithParams with(op, {{"table", list_spec(routes)}});
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    Lookup lookup(std::move(op.make_kernels(b, 64, 1)[0]));
    for (const auto& [addr, hop] : expect) {
      EXPECT_EQ(lookup(addr), hop) << backend_name(b) << " " << dotted(addr);
      EXPECT_EQ(linear_lpm(routes, addr), hop) << dotted(addr);
    }
  }
}

TEST(NetworkLpm, MissWithoutDefaultRoute) {
  Operator& op = find_operator("lpm");
  WithParams with(op, {{"table", "list:10.0.0.0/8=1,10.1.2.3/32=2"}});
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    Lookup lookup(std::move(op.make_kernels(b, 64, 1)[0]));
    EXPECT_EQ(lookup(ipv4(11, 0, 0, 0)), 0xFFFFFFFFu) << backend_name(b);
    EXPECT_EQ(lookup(ipv4(10, 1, 2, 4)), 1u) << backend_name(b);
    EXPECT_EQ(lookup(ipv4(10, 1, 2, 3)), 2u) << backend_name(b);
  }
}

// Random tables built to nest: most routes refine or widen one drawn before,
// so every depth 0..32 meets overlapping prefixes, several /32s per /24 and
// deep routes under shallow ones.
std::vector<TestRoute> nested_routes(size_t n, uint64_t seed, bool with_default) {
  std::mt19937_64 rng(seed);
  std::vector<TestRoute> routes;
  if (with_default) routes.push_back({0, 0, static_cast<uint32_t>(rng() & 0xFFFFFF)});
  while (routes.size() < n) {
    uint32_t base = static_cast<uint32_t>(rng());
    if (!routes.empty() && rng() % 4 != 0) {  // the top `keep` bits of an earlier route, the rest random
      const TestRoute& near = routes[rng() % routes.size()];
      const unsigned keep = static_cast<unsigned>(rng() % (near.depth + 1));
      const uint32_t kept = keep == 0 ? 0 : ~0u << (32 - keep);
      base = (near.prefix & kept) | (base & ~kept);
    }
    unsigned depth = 1 + static_cast<unsigned>(rng() % 32);
    if (rng() % 3 == 0) depth = 24 + static_cast<unsigned>(rng() % 9);  // many tbl8 routes
    routes.push_back({base & (~0u << (32 - depth)), depth, static_cast<uint32_t>(rng() & 0xFFFFFF)});
  }
  return routes;
}

TEST(NetworkLpm, TrieAndRteLpmAgreeWithLinearScanOnRandomTables) {
  Operator& op = find_operator("lpm");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const auto routes = nested_routes(seed == 1 ? 50 : 800, seed, seed % 2 == 0);
    WithParams with(op, {{"table", list_spec(routes)}});
    Lookup ref(std::move(op.make_kernels(Backend::kRef, 64, 1)[0]));
    Lookup lib(std::move(op.make_kernels(Backend::kLib, 64, 1)[0]));
    std::vector<uint32_t> addrs = {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF};
    for (const TestRoute& r : routes) {  // each route's first and last address and both neighbours
      const uint32_t last = r.prefix | (r.depth == 0 ? ~0u : ~(~0u << (32 - r.depth)));
      for (uint32_t a : {r.prefix - 1, r.prefix, r.prefix + 1, last - 1, last, last + 1}) addrs.push_back(a);
    }
    std::mt19937_64 rng(seed * 77);
    for (int i = 0; i < 5000; ++i) addrs.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t a : addrs) {
      const uint32_t want = linear_lpm(routes, a);
      ASSERT_EQ(ref(a), want) << "ref, table seed " << seed << ", " << dotted(a);
      ASSERT_EQ(lib(a), want) << "lib, table seed " << seed << ", " << dotted(a);
    }
  }
}

TEST(NetworkLpm, RandomTableBackendsAgreeOnPackets) {
  Operator& op = find_operator("lpm");
  for (const char* addresses : {"packet", "uniform"}) {
    WithParams with(op, {{"routes", "20000"}, {"seed", "5"}, {"addresses", addresses}});
    auto inputs = op.make_inputs(64, 20000, 9);
    auto ref = op.make_kernels(Backend::kRef, 64, 1);
    auto lib = op.make_kernels(Backend::kLib, 64, 2);
    Bytes want, got;
    size_t hits = 0;
    std::set<uint32_t> destinations;
    for (const Bytes& in : inputs) {
      ASSERT_EQ(inet_checksum(std::span<const uint8_t>(in).subspan(kEthLen, kIpv4Len)), 0) << "IP header checksum";
      destinations.insert(load_be32(&in[kEthLen + 16]));
      ref[0]->process(in, want);
      hits += load_be32(want.data()) != 0xFFFFFFFF;
      for (auto& k : lib) {
        k->process(in, got);
        ASSERT_EQ(op.mismatch(in, want, got), "") << addresses;
      }
    }
    EXPECT_GT(destinations.size(), 19000u) << addresses;  // distinct addresses, not a few cache-hot ones
    EXPECT_GT(hits, 0u) << addresses;
    EXPECT_LT(hits, inputs.size()) << addresses;
  }
}

// input=address (the work of lpm_perf_autotest): each input is the packet's
// destination alone, in host byte order, packed into one array, and looks up
// the same next hop (out in host byte order).
TEST(NetworkLpm, AddressInputLooksUpWhatThePacketDoes) {
  Operator& op = find_operator("lpm");
  for (const char* addresses : {"packet", "uniform"}) {
    WithParams packets(op, {{"routes", "20000"}, {"seed", "5"}, {"addresses", addresses}});
    const auto frames = op.make_inputs(64, 5000, 9);
    EXPECT_FALSE(op.packed_inputs());
    EXPECT_EQ(op.work_bytes(64), 64u);
    auto ref = op.make_kernels(Backend::kRef, 64, 1);
    std::vector<Bytes> want(frames.size());
    for (size_t i = 0; i < frames.size(); ++i) ref[0]->process(frames[i], want[i]);

    WithParams bare(op, {{"routes", "20000"}, {"seed", "5"}, {"addresses", addresses}, {"input", "address"}});
    EXPECT_TRUE(op.packed_inputs());
    EXPECT_EQ(op.work_bytes(64), 4u);
    const auto addrs = op.make_inputs(64, 5000, 9);
    ASSERT_EQ(addrs.size(), frames.size());
    for (auto b : {Backend::kRef, Backend::kLib}) {
      auto k = op.make_kernels(b, 64, 1);
      Bytes got;
      for (size_t i = 0; i < addrs.size(); ++i) {
        ASSERT_EQ(addrs[i].size(), 4u);
        uint32_t address, hop;
        std::memcpy(&address, addrs[i].data(), 4);
        ASSERT_EQ(address, load_be32(&frames[i][kEthLen + 16])) << addresses << " #" << i;
        k[0]->process(addrs[i], got);
        ASSERT_EQ(got.size(), 4u);
        std::memcpy(&hop, got.data(), 4);
        ASSERT_EQ(hop, load_be32(want[i].data())) << addresses << " #" << i;
      }
    }
    auto lib = op.make_kernels(Backend::kLib, 64, 2);  // the runner's check, bursts included
    EXPECT_EQ(check_against_ref(op, Backend::kLib, 64, addrs, lib), 512u);
  }
  WithParams bad(op, {{"input", "header"}});
  EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument);
}

// The lib kernel looks an array up a burst at a time, full bursts through a
// constant-count path: every length, a part burst included, gives what
// process() gives unit by unit.
TEST(NetworkLpm, PackedCallsOfEveryLengthMatchOneByOne) {
  Operator& op = find_operator("lpm");
  WithParams bare(op, {{"routes", "20000"}, {"seed", "5"}, {"addresses", "uniform"}, {"input", "address"}});
  const auto addrs = op.make_inputs(64, kMaxPacked + 40, 9);
  Bytes packed, want;
  for (const auto& a : addrs) packed.insert(packed.end(), a.begin(), a.end());
  auto ref = op.make_kernels(Backend::kRef, 64, 1);
  Bytes one;
  for (const auto& a : addrs) {
    ref[0]->process(a, one);
    want.insert(want.end(), one.begin(), one.end());
  }
  auto lib = op.make_kernels(Backend::kLib, 64, 1);
  for (size_t units : {size_t(1), size_t(31), size_t(32), size_t(33), size_t(100), kMaxPacked, addrs.size()}) {
    for (size_t from : {size_t(0), size_t(7)}) {
      if (from + units > addrs.size()) continue;
      Bytes got(3, 0xEE);  // stale contents are replaced
      lib[0]->process_packed(std::span<const uint8_t>(packed).subspan(from * 4, units * 4), 4, got);
      ASSERT_EQ(got.size(), units * 4) << units;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<ptrdiff_t>(from * 4)))
          << units << " units from #" << from;
    }
  }
  // An array that is not 4-byte aligned is looked up a unit at a time, right.
  Bytes shifted(1, 0);
  shifted.insert(shifted.end(), packed.begin(), packed.begin() + 100 * 4);
  Bytes got;
  lib[0]->process_packed(std::span<const uint8_t>(shifted).subspan(1), 4, got);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.begin() + 100 * 4));
}

TEST(NetworkLpm, InputCountIsBoundedByMemory) {
  Operator& op = find_operator("lpm");
  op.reset_params();
  EXPECT_EQ(op.input_count(64), size_t(1) << 20);
  EXPECT_EQ(op.input_count(1024), size_t(64) << 10);
  EXPECT_EQ(op.input_count(65536), 4096u);
  WithParams with(op, {{"inputs", "1000"}});
  EXPECT_EQ(op.input_count(64), 1000u);
}

TEST(NetworkLpm, RouteFileTable) {
  const std::string path = testing::TempDir() + "network_test_routes.txt";
  {
    std::ofstream f(path);
    f << "# prefix next_hop\n10.0.0.0/8 1\n\n10.9.0.0/16 0x2   # hex next hop\n0.0.0.0/0 3\n";
  }
  Operator& op = find_operator("lpm");
  WithParams with(op, {{"table", "file:" + path}});
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    Lookup lookup(std::move(op.make_kernels(b, 64, 1)[0]));
    EXPECT_EQ(lookup(ipv4(10, 9, 1, 1)), 2u);
    EXPECT_EQ(lookup(ipv4(10, 8, 1, 1)), 1u);
    EXPECT_EQ(lookup(ipv4(9, 8, 1, 1)), 3u);
  }
  std::remove(path.c_str());
}

TEST(NetworkLpm, BadTablesAreRefused) {
  Operator& op = find_operator("lpm");
  for (const char* bad : {"list:10.0.0.0/33=1", "list:10.0.0/8=1", "list:10.0.0.0/8=16777216", "list:10.0.0.0/8",
                          "list:300.0.0.0/8=1", "list:10.0.0.0/8=x", "bogus", "file:/nonexistent/routes"}) {
    WithParams with(op, {{"table", bad}});
    EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument) << bad;
  }
  WithParams with(op, {{"addresses", "sometimes"}});
  EXPECT_THROW(op.make_inputs(64, 4, 1), std::invalid_argument);
}

}  // namespace
}  // namespace dpukit::bench
