// The segmentation operators, tcp_seg and ip_frag. Published test vectors
// hardly exist for either: RFC 791 Appendix A (Figures 6-8) gives the header
// fields of one fragmentation, nothing gives a TCP segmentation byte for
// byte. So ref is checked against the rules (RFC 791 for fragments, DPDK
// GSO's header rules for segments), against a small example worked out by
// hand here, and against DPDK's independent implementation (the lib
// backend) on many packets.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "operator.h"
#include "test_vectors.h"
#include "packet.h"

namespace dpukit::bench {
namespace {

Bytes text(std::string_view s) { return Bytes(s.begin(), s.end()); }
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes v;
  for (const Bytes& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

// Sets an operator's parameter for one test and clears it afterwards (the
// operators are process-wide).
class ParamScope {
 public:
  ParamScope(const std::string& op, const std::string& key, const std::string& value) : op_(find_operator(op)) {
    op_.reset_params();
    op_.set_param(key, value);
  }
  ~ParamScope() { op_.reset_params(); }

 private:
  Operator& op_;
};

Bytes run_one(const std::string& op, Backend b, std::span<const uint8_t> in) {
  auto kernels = find_operator(op).make_kernels(b, in.size(), 1);
  Bytes out;
  kernels[0]->process(in, out);
  return out;
}

// The Ethernet frames of an output, each 14 bytes + its IPv4 total length.
std::vector<Bytes> frames_of(const Bytes& out) {
  std::vector<Bytes> v;
  size_t at = 0;
  while (at < out.size()) {
    if (at + kEthLen + kIpv4Len > out.size()) {
      ADD_FAILURE() << "a truncated packet at byte " << at;
      break;
    }
    const size_t len = kEthLen + load_be16(&out[at + kEthLen + 2]);
    if (at + len > out.size()) {
      ADD_FAILURE() << "packet at byte " << at << " claims " << len << " bytes, " << out.size() - at << " remain";
      break;
    }
    v.emplace_back(out.begin() + static_cast<ptrdiff_t>(at), out.begin() + static_cast<ptrdiff_t>(at + len));
    at += len;
  }
  return v;
}

size_t ihl_of(const Bytes& frame) { return (frame[kEthLen] & 0x0F) * 4u; }
std::span<const uint8_t> ip_of(const Bytes& frame) {
  return std::span<const uint8_t>(frame).subspan(kEthLen, load_be16(&frame[kEthLen + 2]));
}
bool ip_checksum_ok(const Bytes& frame) { return inet_checksum(ip_of(frame).first(ihl_of(frame))) == 0; }
// The stored TCP/UDP checksum equals the one computed with the field zeroed.
bool l4_checksum_ok(std::span<const uint8_t> ip) {
  Bytes copy(ip.begin(), ip.end());
  const size_t at = ((copy[0] & 0x0F) * 4u) + (copy[9] == kProtoTcp ? 16 : 6);
  const uint16_t stored = load_be16(&copy[at]);
  store_be16(&copy[at], 0);
  return l4_checksum_ipv4(copy) == stored;
}

// Recomputes the IPv4 header checksum and, for an unfragmented packet, the
// TCP or UDP checksum (for inputs the tests edit).
void fix_checksums(Bytes& frame) {
  uint8_t* ip = &frame[kEthLen];
  const size_t ihl = (ip[0] & 0x0F) * 4u;
  store_be16(&ip[10], 0);
  store_be16(&ip[10], inet_checksum(std::span<const uint8_t>(ip, ihl)));
  if ((load_be16(&ip[6]) & 0x3FFF) != 0) return;
  const size_t at = ihl + (ip[9] == kProtoTcp ? 16 : 6);
  store_be16(&ip[at], 0);
  store_be16(&ip[at], l4_checksum_ipv4(std::span<const uint8_t>(ip, load_be16(&ip[2]))));
}

// Inserts IPv4 options (a multiple of 4 bytes) after the fixed header.
Bytes with_ip_options(Bytes frame, const Bytes& options) {
  frame.insert(frame.begin() + kEthLen + kIpv4Len, options.begin(), options.end());
  uint8_t* ip = &frame[kEthLen];
  ip[0] = static_cast<uint8_t>(0x40 | (kIpv4Len + options.size()) / 4);
  store_be16(&ip[2], static_cast<uint16_t>(load_be16(&ip[2]) + options.size()));
  fix_checksums(frame);
  return frame;
}

// Inserts TCP options (a multiple of 4 bytes) after the fixed TCP header.
Bytes with_tcp_options(Bytes frame, const Bytes& options) {
  const size_t tcp = kEthLen + ihl_of(frame);
  frame.insert(frame.begin() + static_cast<ptrdiff_t>(tcp + kTcpLen), options.begin(), options.end());
  frame[tcp + 12] = static_cast<uint8_t>((kTcpLen + options.size()) / 4 << 4);
  store_be16(&frame[kEthLen + 2], static_cast<uint16_t>(load_be16(&frame[kEthLen + 2]) + options.size()));
  fix_checksums(frame);
  return frame;
}

// ---------------------------------------------------------------- tcp_seg

// Every rule a segmentation of `in` at `mss` must follow (DPDK GSO's header
// rules, see segmentation.cc).
void expect_valid_segments(const Bytes& in, const Bytes& out, size_t mss) {
  const size_t ihl = ihl_of(in);
  const size_t tcp = kEthLen + ihl;
  const size_t thl = (in[tcp + 12] >> 4) * 4u;
  const size_t hdr = tcp + thl;
  const size_t payload = kEthLen + load_be16(&in[kEthLen + 2]) - hdr;
  const size_t want_n = payload <= mss ? 1 : (payload + mss - 1) / mss;
  const std::vector<Bytes> segs = frames_of(out);
  ASSERT_EQ(segs.size(), want_n) << "payload " << payload << ", mss " << mss;
  Bytes joined;
  for (size_t k = 0; k < segs.size(); ++k) {
    SCOPED_TRACE("segment " + std::to_string(k) + " of " + std::to_string(segs.size()));
    const Bytes& s = segs[k];
    const bool last = k + 1 == segs.size();
    const size_t len = last ? payload - k * mss : mss;
    ASSERT_EQ(s.size(), hdr + len);
    EXPECT_TRUE(std::equal(in.begin(), in.begin() + kEthLen, s.begin())) << "Ethernet header";
    // IPv4: all as the input but total length, identification, checksum.
    EXPECT_EQ(s[kEthLen], in[kEthLen]);
    EXPECT_EQ(s[kEthLen + 1], in[kEthLen + 1]);
    EXPECT_EQ(load_be16(&s[kEthLen + 2]), ihl + thl + len);
    EXPECT_EQ(load_be16(&s[kEthLen + 4]), static_cast<uint16_t>(load_be16(&in[kEthLen + 4]) + k));
    EXPECT_TRUE(std::equal(in.begin() + kEthLen + 6, in.begin() + kEthLen + 10, s.begin() + kEthLen + 6));
    EXPECT_TRUE(std::equal(in.begin() + kEthLen + 12, in.begin() + static_cast<ptrdiff_t>(tcp),
                           s.begin() + kEthLen + 12));
    EXPECT_TRUE(ip_checksum_ok(s)) << "IPv4 header checksum";
    // TCP: sequence contiguous, PSH/FIN on the last only, CWR etc. kept.
    EXPECT_TRUE(std::equal(in.begin() + tcp, in.begin() + tcp + 4, s.begin() + tcp)) << "ports";
    EXPECT_EQ(load_be32(&s[tcp + 4]), static_cast<uint32_t>(load_be32(&in[tcp + 4]) + k * mss));
    EXPECT_TRUE(std::equal(in.begin() + tcp + 8, in.begin() + tcp + 13, s.begin() + tcp + 8)) << "ack, offset";
    EXPECT_EQ(s[tcp + 13], last ? in[tcp + 13] : in[tcp + 13] & ~0x09) << "flags";
    EXPECT_TRUE(std::equal(in.begin() + tcp + 14, in.begin() + tcp + 16, s.begin() + tcp + 14)) << "window";
    EXPECT_TRUE(std::equal(in.begin() + tcp + 18, in.begin() + static_cast<ptrdiff_t>(hdr), s.begin() + tcp + 18))
        << "urgent pointer and options";
    EXPECT_TRUE(l4_checksum_ok(ip_of(s))) << "TCP checksum";
    joined.insert(joined.end(), s.begin() + static_cast<ptrdiff_t>(hdr), s.end());
  }
  EXPECT_TRUE(std::equal(joined.begin(), joined.end(), in.begin() + static_cast<ptrdiff_t>(hdr),
                         in.begin() + static_cast<ptrdiff_t>(hdr + payload)))
      << "the segments' payloads do not reassemble to the super-frame's";
}

// Worked by hand: a 64-byte super-frame, 10 payload bytes "0123456789",
// sequence 0xfffffffa (so it wraps), flags CWR|ACK|PSH|FIN (0x99), IPv4 id
// 0x1234 with DF, cut at mss 4 into 4 + 4 + 2 bytes. Per segment:
//   total length 44, 44, 42; id 0x1234, 0x1235, 0x1236;
//   sequence 0xfffffffa, 0xfffffffe, 0x00000002; flags 0x90, 0x90, 0x99
//   (PSH and FIN cleared on all but the last; CWR kept, as DPDK does).
// Segment 1's IPv4 checksum: 4500+002c+1234+4000+4006+0a00+0001+0a00+0002
//   = 0xeb69, complement 0x1496.
// Its TCP checksum: pseudo-header 0a00+0001+0a00+0002+0006+0018, header
//   03e8+07d0+ffff+fffa+0000+0001+5090+ffff+0000+0000, payload 3031+3233:
//   sum 0x3d2c6, folded 0xd2c9, complement 0x2d36.
// The other checksums follow the same way (0x1495/0x252a, 0x1496/0x5753).
const char* const kTcpHandInput =
    "02000000000202000000000108004500003212344000400614900a0000010a00000203e807d0fffffffa000000015099ffff8a810000"
    "30313233343536373839";
const char* const kTcpHandHeaders[] = {
    "02000000000202000000000108004500002c12344000400614960a0000010a00000203e807d0fffffffa000000015090ffff2d360000",
    "02000000000202000000000108004500002c12354000400614950a0000010a00000203e807d0fffffffe000000015090ffff252a0000",
    "02000000000202000000000108004500002a12364000400614960a0000010a00000203e807d000000002000000015099ffff57530000",
};

TEST(SegmentationTcp, HandWorkedExample) {
  const Bytes in = from_hex(kTcpHandInput);
  ASSERT_EQ(in.size(), 64u);
  ASSERT_TRUE(ip_checksum_ok(in));
  ASSERT_TRUE(l4_checksum_ok(ip_of(in)));
  const Bytes want = cat({from_hex(kTcpHandHeaders[0]), text("0123"), from_hex(kTcpHandHeaders[1]), text("4567"),
                          from_hex(kTcpHandHeaders[2]), text("89")});
  ParamScope mss("tcp_seg", "mss", "4");
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    SCOPED_TRACE(backend_name(b));
    const Bytes got = run_one("tcp_seg", b, in);
    EXPECT_EQ(hex(got, 1000), hex(want, 1000));
    expect_valid_segments(in, got, 4);
  }
}

TEST(SegmentationTcp, RefFollowsTheRulesOnRandomSuperFrames) {
  Operator& op = find_operator("tcp_seg");
  for (size_t mss : {1, 7, 128, 536, 1460}) {
    ParamScope p("tcp_seg", "mss", std::to_string(mss));
    auto ref = op.make_kernels(Backend::kRef, 0, 1);
    for (size_t size : {54, 55, 64, 181, 182, 183, 1024, 1514, 9014}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE("mss " + std::to_string(mss) + ", size " + std::to_string(size) + ", seed " +
                     std::to_string(seed));
        const Bytes in = make_ipv4_packet(size, seed, kProtoTcp);
        Bytes out;
        ref[0]->process(in, out);
        expect_valid_segments(in, out, mss);
        if (size - 54 <= mss) {
          EXPECT_EQ(out, in) << "a super-frame that fits is the packet itself";
        }
      }
    }
  }
}

// Every TCP flag kept or cleared as DPDK does, TCP options replicated into
// every segment, a super-frame that is an IP fragment passed through.
TEST(SegmentationTcp, FlagsOptionsAndFragmentsAgreeWithDpdk) {
  ParamScope mss("tcp_seg", "mss", "100");
  Operator& op = find_operator("tcp_seg");
  auto ref = op.make_kernels(Backend::kRef, 1024, 1);
  auto lib = op.make_kernels(Backend::kLib, 1024, 1);
  Bytes flags = make_ipv4_packet(1024, 7, kProtoTcp);
  flags[kEthLen + kIpv4Len + 13] = 0xFF;  // CWR ECE URG ACK PSH RST SYN FIN: only PSH and FIN are the GSO's business
  fix_checksums(flags);
  // NOP, NOP, timestamps (kind 8, length 10): the options Linux sends on every segment.
  Bytes options = with_tcp_options(make_ipv4_packet(700, 8, kProtoTcp), from_hex("0101080a0001e24000000457"));
  Bytes fragment = make_ipv4_packet(600, 9, kProtoTcp);
  store_be16(&fragment[kEthLen + 6], 0x2000);  // MF
  fix_checksums(fragment);
  for (const Bytes* in : {&flags, &options, &fragment}) {
    Bytes want, got;
    ref[0]->process(*in, want);
    lib[0]->process(*in, got);
    EXPECT_EQ(op.mismatch(*in, want, got), "");
    if (in != &fragment) expect_valid_segments(*in, want, 100);
  }
  const std::vector<Bytes> segs = frames_of([&] {
    Bytes o;
    ref[0]->process(flags, o);
    return o;
  }());
  ASSERT_EQ(segs.size(), 10u);
  for (size_t k = 0; k < segs.size(); ++k)
    EXPECT_EQ(segs[k][kEthLen + kIpv4Len + 13], k + 1 < segs.size() ? 0xF6 : 0xFF) << "segment " << k;
  Bytes out;
  ref[0]->process(fragment, out);
  EXPECT_EQ(out, fragment);
}

TEST(SegmentationTcp, LibMatchesRefOnManySuperFrames) {
  Operator& op = find_operator("tcp_seg");
  for (size_t mss : {1, 64, 128, 536, 1460, 9000}) {
    ParamScope p("tcp_seg", "mss", std::to_string(mss));
    for (size_t size : {54, 55, 64, 100, 128, 182, 183, 256, 1024, 1514, 2100, 9014, 65549}) {
      if (mss == 1 && size > 9014) continue;  // 65k one-byte segments add seconds, not coverage
      auto ref = op.make_kernels(Backend::kRef, size, 1);
      auto lib = op.make_kernels(Backend::kLib, size, 2);
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        const Bytes in = make_ipv4_packet(size, seed * 31 + size, kProtoTcp);
        Bytes want, got;
        ref[0]->process(in, want);
        lib[seed % 2]->process(in, got);
        ASSERT_EQ(op.mismatch(in, want, got), "") << "mss " << mss << ", size " << size << ", seed " << seed;
      }
    }
  }
}

// A kernel made for small frames grows its mbuf pools for a larger one.
TEST(SegmentationTcp, LibKernelGrowsForLargerFrames) {
  Operator& op = find_operator("tcp_seg");
  auto ref = op.make_kernels(Backend::kRef, 64, 1);
  auto lib = op.make_kernels(Backend::kLib, 64, 1);
  for (size_t size : {64, 4000, 64, 30000}) {
    const Bytes in = make_ipv4_packet(size, size, kProtoTcp);
    Bytes want, got;
    ref[0]->process(in, want);
    lib[0]->process(in, got);
    EXPECT_EQ(op.mismatch(in, want, got), "") << size;
  }
}

TEST(SegmentationTcp, WrongOutputIsCaught) {
  Operator& op = find_operator("tcp_seg");
  const Bytes in = make_ipv4_packet(1024, 3, kProtoTcp);
  const Bytes want = run_one("tcp_seg", Backend::kRef, in);
  Bytes got = run_one("tcp_seg", Backend::kLib, in);
  ASSERT_EQ(op.mismatch(in, want, got), "");
  got[want.size() / 2] ^= 0x01;
  const std::string why = op.mismatch(in, want, got);
  EXPECT_NE(why, "");
  EXPECT_NE(why.find("packet #"), std::string::npos) << why;
  got[want.size() / 2] ^= 0x01;
  got.pop_back();
  EXPECT_NE(op.mismatch(in, want, got), "");
  // A segment with a stale checksum (what GSO leaves without offload).
  got = want;
  got[kEthLen + kIpv4Len + 16] ^= 0xFF;
  EXPECT_NE(op.mismatch(in, want, got), "");
}

TEST(SegmentationTcp, BadInputsAndParametersAndDev) {
  Operator& op = find_operator("tcp_seg");
  EXPECT_THROW(op.make_kernels(Backend::kDev, 64, 1), Unavailable);
  {
    ParamScope p("tcp_seg", "mss", "0");
    EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument);
  }
  auto ref = op.make_kernels(Backend::kRef, 64, 1);
  Bytes out;
  EXPECT_THROW(ref[0]->process(make_ipv4_packet(64, 1, kProtoUdp), out), std::invalid_argument);
  Bytes short_frame = make_ipv4_packet(64, 1, kProtoTcp);
  short_frame.resize(60);  // the IPv4 total length now exceeds the frame
  EXPECT_THROW(ref[0]->process(short_frame, out), std::invalid_argument);
}

// ---------------------------------------------------------------- ip_frag

// Every RFC 791 rule a fragmentation of `in` (DF clear, unfragmented) for
// `mtu` must follow; also that the fragments reassemble and the UDP checksum
// of the reassembled datagram verifies.
void expect_valid_fragments(const Bytes& in, const Bytes& out, size_t mtu) {
  const size_t ihl = ihl_of(in);
  const size_t total = load_be16(&in[kEthLen + 2]);
  if (total <= mtu) {
    EXPECT_EQ(out, Bytes(in.begin(), in.begin() + static_cast<ptrdiff_t>(kEthLen + total)))
        << "a packet that fits is sent unchanged";
    return;
  }
  const size_t unit = (mtu - ihl) / 8 * 8;
  const std::vector<Bytes> frags = frames_of(out);
  ASSERT_EQ(frags.size(), (total - ihl + unit - 1) / unit);
  Bytes data;
  for (size_t k = 0; k < frags.size(); ++k) {
    SCOPED_TRACE("fragment " + std::to_string(k) + " of " + std::to_string(frags.size()));
    const Bytes& f = frags[k];
    const bool last = k + 1 == frags.size();
    const size_t fihl = ihl_of(f);
    const size_t ftotal = load_be16(&f[kEthLen + 2]);
    const size_t len = ftotal - fihl;
    EXPECT_TRUE(std::equal(in.begin(), in.begin() + kEthLen, f.begin())) << "Ethernet header";
    EXPECT_LE(ftotal, mtu);
    if (!last) {
      EXPECT_EQ(len % 8, 0u) << "data of a non-last fragment is a multiple of 8";
      EXPECT_EQ(len, unit) << "each non-last fragment is as large as the MTU allows";
    }
    const uint16_t field = load_be16(&f[kEthLen + 6]);
    EXPECT_EQ((field & 0x1FFF) * 8u, data.size()) << "offset in 8-byte units";
    EXPECT_EQ((field & 0x2000) != 0, !last) << "MF";
    EXPECT_EQ(field & 0xC000, 0) << "DF and reserved";
    EXPECT_EQ(load_be16(&f[kEthLen + 4]), load_be16(&in[kEthLen + 4])) << "identification";
    EXPECT_EQ(f[kEthLen + 1], in[kEthLen + 1]);
    EXPECT_TRUE(std::equal(in.begin() + kEthLen + 8, in.begin() + kEthLen + 10, f.begin() + kEthLen + 8))
        << "TTL, protocol";
    EXPECT_TRUE(std::equal(in.begin() + kEthLen + 12, in.begin() + kEthLen + 20, f.begin() + kEthLen + 12))
        << "addresses";
    EXPECT_TRUE(ip_checksum_ok(f)) << "header checksum";
    data.insert(data.end(), f.begin() + static_cast<ptrdiff_t>(kEthLen + fihl), f.end());
  }
  ASSERT_EQ(data.size(), total - ihl);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), in.begin() + static_cast<ptrdiff_t>(kEthLen + ihl)))
      << "the fragments' data do not reassemble to the datagram's";
  Bytes datagram(in.begin() + kEthLen, in.begin() + static_cast<ptrdiff_t>(kEthLen + ihl));
  datagram.insert(datagram.end(), data.begin(), data.end());
  if (datagram[9] == kProtoUdp || datagram[9] == kProtoTcp) {
    EXPECT_TRUE(l4_checksum_ok(datagram));
  }
}

// RFC 791 Appendix A, Figures 6-8: a datagram of total length 472 (452 data
// octets), identification 111, TTL 123, protocol 6, split after 256 data
// octets into fragments of total length 276 (MF, offset 0) and 216 (offset
// 32). The RFC's fragments show TTL 119 because they crossed gateways on the
// way; fragmenting alone keeps the TTL. The RFC gives neither addresses nor
// data; an MTU of 280 (any of 276..283) makes its split.
TEST(SegmentationIpFrag, Rfc791AppendixAExample) {
  Bytes in = make_ipv4_packet(kEthLen + 472, 791, kProtoUdp);
  store_be16(&in[kEthLen + 4], 111);
  in[kEthLen + 8] = 123;
  in[kEthLen + 9] = 6;
  fix_checksums(in);
  ParamScope mtu("ip_frag", "mtu", "280");
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    SCOPED_TRACE(backend_name(b));
    const std::vector<Bytes> f = frames_of(run_one("ip_frag", b, in));
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(load_be16(&f[0][kEthLen + 2]), 276);
    EXPECT_EQ(load_be16(&f[0][kEthLen + 4]), 111);
    EXPECT_EQ(load_be16(&f[0][kEthLen + 6]), 0x2000);  // MF, offset 0
    EXPECT_EQ(load_be16(&f[1][kEthLen + 2]), 216);
    EXPECT_EQ(load_be16(&f[1][kEthLen + 4]), 111);
    EXPECT_EQ(load_be16(&f[1][kEthLen + 6]), 32);  // offset 32, MF clear
    for (const Bytes& x : f) {
      EXPECT_EQ(x[kEthLen + 8], 123);
      EXPECT_EQ(x[kEthLen + 9], 6);
      EXPECT_TRUE(ip_checksum_ok(x));
    }
  }
}

// Worked by hand: UDP 0x1111 -> 0x2222, 192.168.1.1 -> 192.168.1.2, id
// 0xabcd, TTL 64, payload bytes 0..111: 120 data bytes (8 UDP header + 112),
// total length 140. MTU 68: 48 data bytes per fragment (68 - 20 = 48, a
// multiple of 8), so fragments of 48, 48, 24 at offsets 0, 6, 12 (x8 bytes),
// MF on the first two, total lengths 68, 68, 44.
// First fragment's checksum: 4500+0044+abcd+2000+4011+c0a8+0101+c0a8+0102
//   = 0x2d475, folded 0xd477, complement 0x2b88; the others 0x2b82, 0x4b94.
// The UDP checksum 0x342b (computed over the whole datagram) travels in the
// first fragment.
TEST(SegmentationIpFrag, HandWorkedExample) {
  Bytes payload(112);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  const Bytes in = cat({from_hex("02000000000202000000000108004500008cabcd000040114b40c0a80101c0a80102"
                                 "111122220078342b"),
                        payload});
  ASSERT_EQ(in.size(), 154u);
  ASSERT_TRUE(ip_checksum_ok(in));
  ASSERT_TRUE(l4_checksum_ok(ip_of(in)));
  const Bytes data(in.begin() + 34, in.end());
  const Bytes want = cat({from_hex("020000000002020000000001080045000044abcd200040112b88c0a80101c0a80102"),
                          Bytes(data.begin(), data.begin() + 48),
                          from_hex("020000000002020000000001080045000044abcd200640112b82c0a80101c0a80102"),
                          Bytes(data.begin() + 48, data.begin() + 96),
                          from_hex("02000000000202000000000108004500002cabcd000c40114b94c0a80101c0a80102"),
                          Bytes(data.begin() + 96, data.end())});
  ParamScope mtu("ip_frag", "mtu", "68");
  for (Backend b : {Backend::kRef, Backend::kLib}) {
    SCOPED_TRACE(backend_name(b));
    const Bytes got = run_one("ip_frag", b, in);
    EXPECT_EQ(hex(got, 1000), hex(want, 1000));
    expect_valid_fragments(in, got, 68);
  }
}

TEST(SegmentationIpFrag, RefFollowsTheRulesOnRandomPackets) {
  Operator& op = find_operator("ip_frag");
  for (size_t mtu : {68, 69, 100, 256, 576, 1500}) {
    ParamScope p("ip_frag", "mtu", std::to_string(mtu));
    auto ref = op.make_kernels(Backend::kRef, 0, 1);
    for (size_t size : {42, 64, 82, 83, 256, 270, 271, 1024, 1514, 9014}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE("mtu " + std::to_string(mtu) + ", size " + std::to_string(size) + ", seed " +
                     std::to_string(seed));
        const Bytes in = make_ipv4_packet(size, seed, kProtoUdp);
        Bytes out;
        ref[0]->process(in, out);
        expect_valid_fragments(in, out, mtu);
      }
    }
  }
}

// RFC 791 §3.1: options with the copied flag go into every fragment, the
// others into the first only. Router Alert (148, copied) + Record Route (7,
// not copied) + EOL: 12 option bytes, IHL 8 in the first fragment; the later
// ones carry Router Alert alone, IHL 6.
TEST(SegmentationIpFrag, OptionsCopiedPerRfc791AndAgreeWithDpdk) {
  const Bytes in = with_ip_options(make_ipv4_packet(600, 4, kProtoUdp), from_hex("94040000" "07070400000000" "00"));
  ASSERT_EQ(ihl_of(in), 32u);
  ParamScope mtu("ip_frag", "mtu", "200");
  const Bytes want = run_one("ip_frag", Backend::kRef, in);
  const Bytes got = run_one("ip_frag", Backend::kLib, in);
  EXPECT_EQ(find_operator("ip_frag").mismatch(in, want, got), "");
  const std::vector<Bytes> f = frames_of(want);
  ASSERT_EQ(f.size(), 4u);  // (200 - 32) / 8 * 8 = 168 data bytes each: 566 = 168 * 3 + 62
  EXPECT_EQ(ihl_of(f[0]), 32u);
  EXPECT_TRUE(std::equal(in.begin() + 34, in.begin() + 46, f[0].begin() + 34)) << "all options in the first";
  Bytes data(f[0].begin() + 46, f[0].end());
  for (size_t k = 1; k < f.size(); ++k) {
    EXPECT_EQ(ihl_of(f[k]), 24u);
    EXPECT_EQ(hex(std::span<const uint8_t>(f[k]).subspan(34, 4)), "94040000");
    EXPECT_TRUE(ip_checksum_ok(f[k]));
    EXPECT_EQ((load_be16(&f[k][kEthLen + 6]) & 0x1FFF) * 8u, data.size());
    data.insert(data.end(), f[k].begin() + 38, f[k].end());
  }
  EXPECT_TRUE(std::equal(data.begin(), data.end(), in.begin() + 46, in.end()));
}

// Fragmenting a fragment: offsets continue from its own, MF stays on every
// piece of a fragment that had MF; one without MF ends with MF clear.
TEST(SegmentationIpFrag, RefragmentingAFragmentAgreesWithDpdk) {
  ParamScope mtu("ip_frag", "mtu", "300");
  for (uint16_t field : {0x2000 | 100, 100}) {
    Bytes in = make_ipv4_packet(1000, field, kProtoUdp);
    store_be16(&in[kEthLen + 6], field);
    fix_checksums(in);
    const Bytes want = run_one("ip_frag", Backend::kRef, in);
    EXPECT_EQ(find_operator("ip_frag").mismatch(in, want, run_one("ip_frag", Backend::kLib, in)), "");
    const std::vector<Bytes> f = frames_of(want);
    ASSERT_EQ(f.size(), 4u);  // 966 data bytes, 280 each
    for (size_t k = 0; k < f.size(); ++k) {
      const uint16_t got = load_be16(&f[k][kEthLen + 6]);
      EXPECT_EQ(got & 0x1FFF, 100 + k * 35);
      EXPECT_EQ((got & 0x2000) != 0, k + 1 < f.size() || (field & 0x2000)) << k;
    }
  }
}

// A packet that fits is sent unchanged, also when its data exceed the MTU
// rounded down to 8 bytes (256 at mtu 256: rte_ipv4_fragment_packet alone
// would split it into 232 + 4 data bytes).
TEST(SegmentationIpFrag, AFittingPacketIsSentUnchanged) {
  for (size_t mtu : {68, 256, 1500}) {
    ParamScope p("ip_frag", "mtu", std::to_string(mtu));
    for (size_t size : {size_t{42}, mtu + kEthLen - 1, mtu + kEthLen}) {
      const Bytes in = make_ipv4_packet(size, size + mtu, kProtoUdp);
      for (Backend b : {Backend::kRef, Backend::kLib}) EXPECT_EQ(run_one("ip_frag", b, in), in) << mtu << " " << size;
    }
  }
}

// DPDK refuses DF packets (-ENOTSUP) even when they fit; both backends
// send a fitting DF packet whole and drop one that does not (RFC 791).
TEST(SegmentationIpFrag, DontFragmentPackets) {
  ParamScope mtu("ip_frag", "mtu", "256");
  for (size_t size : {200, 270, 271, 1024}) {
    Bytes in = make_ipv4_packet(size, 5, kProtoUdp);
    store_be16(&in[kEthLen + 6], 0x4000);
    fix_checksums(in);
    for (Backend b : {Backend::kRef, Backend::kLib}) {
      const Bytes out = run_one("ip_frag", b, in);
      if (size - kEthLen <= 256)
        EXPECT_EQ(out, in) << size;
      else
        EXPECT_TRUE(out.empty()) << size;
    }
  }
}

TEST(SegmentationIpFrag, LibMatchesRefOnManyPackets) {
  Operator& op = find_operator("ip_frag");
  for (size_t mtu : {68, 69, 100, 256, 576, 1500, 9000}) {
    ParamScope p("ip_frag", "mtu", std::to_string(mtu));
    for (size_t size : {42, 64, 128, 256, 270, 271, 512, 1024, 1514, 2100, 9014, 65549}) {
      auto ref = op.make_kernels(Backend::kRef, size, 1);
      auto lib = op.make_kernels(Backend::kLib, size, 2);
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        const Bytes in = make_ipv4_packet(size, seed * 17 + size, kProtoUdp);
        Bytes want, got;
        ref[0]->process(in, want);
        lib[seed % 2]->process(in, got);
        ASSERT_EQ(op.mismatch(in, want, got), "") << "mtu " << mtu << ", size " << size << ", seed " << seed;
      }
    }
  }
}

TEST(SegmentationIpFrag, WrongOutputIsCaught) {
  Operator& op = find_operator("ip_frag");
  const Bytes in = make_ipv4_packet(1024, 3, kProtoUdp);
  const Bytes want = run_one("ip_frag", Backend::kRef, in);
  Bytes got = run_one("ip_frag", Backend::kLib, in);
  ASSERT_EQ(op.mismatch(in, want, got), "");
  ASSERT_GT(frames_of(want).size(), 1u);
  // Clearing MF on the first fragment (a reassembler would stop there).
  got[kEthLen + 6] &= 0xDF;
  EXPECT_NE(op.mismatch(in, want, got), "");
  got = want;
  got.resize(got.size() - 8);
  EXPECT_NE(op.mismatch(in, want, got), "");
}

TEST(SegmentationIpFrag, BadInputsAndParametersAndDev) {
  Operator& op = find_operator("ip_frag");
  EXPECT_THROW(op.make_kernels(Backend::kDev, 64, 1), Unavailable);
  for (const char* bad : {"67", "65536", "x"}) {
    ParamScope p("ip_frag", "mtu", bad);
    EXPECT_THROW(op.make_kernels(Backend::kRef, 64, 1), std::invalid_argument) << bad;
  }
  auto ref = op.make_kernels(Backend::kRef, 64, 1);
  Bytes out;
  Bytes not_ip = make_ipv4_packet(64, 1, kProtoUdp);
  store_be16(&not_ip[12], 0x86DD);
  EXPECT_THROW(ref[0]->process(not_ip, out), std::invalid_argument);
}

// Ethernet pads short frames to 60 bytes; the padding is not IP payload,
// so neither operator carries it into its output.
TEST(SegmentationOps, EthernetPaddingIsNotPayload) {
  ParamScope mss("tcp_seg", "mss", "4");
  ParamScope mtu("ip_frag", "mtu", "68");
  for (const auto& [op, frame] : {std::pair{"tcp_seg", make_ipv4_packet(56, 2, kProtoTcp)},
                                  std::pair{"ip_frag", make_ipv4_packet(50, 2, kProtoUdp)},
                                  std::pair{"ip_frag", make_ipv4_packet(100, 2, kProtoUdp)}}) {
    Bytes padded = frame;
    padded.resize(std::max<size_t>(frame.size() + 6, 60), 0);
    for (Backend b : {Backend::kRef, Backend::kLib}) {
      SCOPED_TRACE(std::string(op) + " " + backend_name(b) + " " + std::to_string(frame.size()));
      EXPECT_EQ(run_one(op, b, padded), run_one(op, Backend::kRef, frame));
    }
  }
}

TEST(SegmentationOps, RegisteredInOrderOnTheNetworkScenario) {
  std::vector<std::string> names;
  for (const auto& i : list_operators())
    if (i.name == "tcp_seg" || i.name == "ip_frag") {
      names.push_back(i.name);
      EXPECT_EQ(i.scenario, "network");
    }
  EXPECT_EQ(names, (std::vector<std::string>{"tcp_seg", "ip_frag"}));
  EXPECT_EQ(operator_params("tcp_seg").at("mss"), "128");
  EXPECT_EQ(operator_params("ip_frag").at("mtu"), "256");
}

}  // namespace
}  // namespace dpukit::bench
