// The packet parser on hand-built frames.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "trace/parse.h"
#include "test_bytes.h"

namespace dpukit::measure {
namespace {

using testing::Bytes;

constexpr int kEn10mb = 1, kRaw = 12, kLinktypeRaw = 101, kSll = 113, kIpv4 = 228, kSll2 = 276;

using testing::put16;
using testing::put32;

struct Ip {
  uint8_t proto = 6;
  uint32_t src = 0x0a000001, dst = 0xc0a80102;
  uint16_t sport = 40000, dport = 443;
  int ihl_words = 5;
  uint16_t flags_frag = 0;  // flags(3) | offset(13)
  int payload = 6;
  int total_override = -1;  // IPv4 total length field, when set
  int version = 4;
};

// An IPv4 packet: header (with option bytes 0xA5 when IHL > 5), an L4 header
// (TCP 20, UDP 8, other 8 bytes) and `payload` bytes.
Bytes ipv4(const Ip& p) {
  size_t hl = static_cast<size_t>(p.ihl_words) * 4;
  size_t l4 = p.proto == 6 ? 20 : 8;
  Bytes b(hl + l4 + static_cast<size_t>(p.payload), 0);
  b[0] = static_cast<uint8_t>((p.version << 4) | p.ihl_words);
  put16(b, 2, p.total_override >= 0 ? static_cast<uint32_t>(p.total_override) : static_cast<uint32_t>(b.size()));
  put16(b, 6, p.flags_frag);
  b[8] = 64;
  b[9] = p.proto;
  put32(b, 12, p.src);
  put32(b, 16, p.dst);
  for (size_t i = 20; i < hl; ++i) b[i] = 0xa5;
  put16(b, hl, p.sport);
  put16(b, hl + 2, p.dport);
  return b;
}

// Ethernet: dst, src, then the ethertypes of `tags` (each followed by a TCI)
// and finally `type`.
Bytes eth(uint16_t type, const Bytes& payload, std::initializer_list<uint16_t> tags = {}) {
  Bytes b(12, 0);
  for (int i = 0; i < 12; ++i) b[i] = static_cast<uint8_t>(0x10 + i);
  uint16_t tci = 100;
  for (uint16_t t : tags) {
    b.push_back(static_cast<uint8_t>(t >> 8));
    b.push_back(static_cast<uint8_t>(t));
    b.push_back(static_cast<uint8_t>(tci >> 8));
    b.push_back(static_cast<uint8_t>(tci++));
  }
  b.push_back(static_cast<uint8_t>(type >> 8));
  b.push_back(static_cast<uint8_t>(type));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes sll(uint16_t proto, const Bytes& payload) {
  Bytes b(16, 0);
  put16(b, 0, 0);      // packet to us
  put16(b, 2, 1);      // ARPHRD_ETHER
  put16(b, 4, 6);      // address length
  for (int i = 0; i < 6; ++i) b[6 + i] = static_cast<uint8_t>(0x20 + i);
  put16(b, 14, proto);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes sll2(uint16_t proto, const Bytes& payload) {
  Bytes b(20, 0);
  put16(b, 0, proto);
  put32(b, 4, 3);      // ifindex
  put16(b, 8, 1);      // ARPHRD_ETHER
  b[10] = 4;           // outgoing
  b[11] = 6;
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// Parses a copy in a buffer of exactly `len` bytes (so a sanitizer sees any
// read past the end).
ParseResult parse(int linktype, const Bytes& frame, FlowKey* key, size_t len = SIZE_MAX) {
  if (len > frame.size()) len = frame.size();
  std::unique_ptr<uint8_t[]> copy(new uint8_t[len == 0 ? 1 : len]);
  if (len) std::memcpy(copy.get(), frame.data(), len);
  return parse_frame(linktype, copy.get(), len, key);
}

FlowKey expect_ok(int linktype, const Bytes& frame) {
  FlowKey k;
  k.bytes.fill(0xee);
  EXPECT_EQ(parse(linktype, frame, &k), ParseResult::kOk);
  return k;
}

const FlowKey kDefault = FlowKey::from_tuple(0x0a000001, 0xc0a80102, 40000, 443, 6);

TEST(Parser, EthernetTcpAndUdp) {
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4({}))), kDefault);
  Ip u;
  u.proto = 17;
  u.src = 0x08080808;
  u.dst = 0x01020304;
  u.sport = 53;
  u.dport = 5353;
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(u))), FlowKey::from_tuple(0x08080808, 0x01020304, 53, 5353, 17));
}

TEST(Parser, VlanTags) {
  Ip p;
  p.sport = 1;
  p.dport = 2;
  FlowKey want = FlowKey::from_tuple(p.src, p.dst, 1, 2, 6);
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p), {0x8100})), want);
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p), {0x88a8, 0x8100})), want);
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p), {0x9100, 0x8100, 0x8100})), want);
  // IPv6 behind a tag is still not IPv4.
  EXPECT_EQ(parse(kEn10mb, eth(0x86dd, Bytes(40, 0x60), {0x8100}), nullptr), ParseResult::kNotIpv4);
}

TEST(Parser, RawIpAndIpv4LinkTypes) {
  Ip p;
  p.proto = 17;
  p.sport = 123;
  FlowKey want = FlowKey::from_tuple(p.src, p.dst, 123, 443, 17);
  for (int lt : {kRaw, 14, kLinktypeRaw, kIpv4}) EXPECT_EQ(expect_ok(lt, ipv4(p)), want) << lt;
  Bytes v6(48, 0);
  v6[0] = 0x60;
  EXPECT_EQ(parse(kRaw, v6, nullptr), ParseResult::kNotIpv4);
  EXPECT_EQ(parse(kIpv4, v6, nullptr), ParseResult::kMalformed);  // DLT_IPV4 promises IPv4
  Bytes junk(40, 0x10);
  EXPECT_EQ(parse(kRaw, junk, nullptr), ParseResult::kMalformed);
}

TEST(Parser, LinuxCooked) {
  Ip p;
  p.dport = 8080;
  FlowKey want = FlowKey::from_tuple(p.src, p.dst, p.sport, 8080, 6);
  EXPECT_EQ(expect_ok(kSll, sll(0x0800, ipv4(p))), want);
  EXPECT_EQ(expect_ok(kSll2, sll2(0x0800, ipv4(p))), want);
  // A VLAN tag left in the cooked payload: TCI + ethertype, then IPv4.
  Bytes tagged = {0x00, 0x05, 0x08, 0x00};
  Bytes ip = ipv4(p);
  tagged.insert(tagged.end(), ip.begin(), ip.end());
  EXPECT_EQ(expect_ok(kSll, sll(0x8100, tagged)), want);
  EXPECT_EQ(expect_ok(kSll2, sll2(0x8100, tagged)), want);
  EXPECT_EQ(parse(kSll, sll(0x86dd, Bytes(40, 0x60)), nullptr), ParseResult::kNotIpv4);
  EXPECT_EQ(parse(kSll2, sll2(0x0806, Bytes(28, 0)), nullptr), ParseResult::kNotIpv4);
}

TEST(Parser, NonIpv4Skipped) {
  EXPECT_EQ(parse(kEn10mb, eth(0x86dd, Bytes(60, 0x60)), nullptr), ParseResult::kNotIpv4);  // IPv6
  EXPECT_EQ(parse(kEn10mb, eth(0x0806, Bytes(28, 0)), nullptr), ParseResult::kNotIpv4);     // ARP
  EXPECT_EQ(parse(kEn10mb, eth(0x0026, Bytes(38, 0x42)), nullptr), ParseResult::kNotIpv4);  // 802.3 length + LLC
  EXPECT_EQ(parse(105, eth(0x0800, ipv4({})), nullptr), ParseResult::kNotIpv4);             // 802.11: unsupported
  EXPECT_FALSE(linktype_supported(105));
  EXPECT_TRUE(linktype_supported(kEn10mb));
  EXPECT_TRUE(linktype_supported(kSll2));
}

TEST(Parser, NonTcpUdpSkipped) {
  for (uint8_t proto : {1, 47, 50, 132}) {  // ICMP, GRE, ESP, SCTP
    Ip p;
    p.proto = proto;
    EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(p)), nullptr), ParseResult::kNotTcpUdp) << int(proto);
  }
}

TEST(Parser, Fragments) {
  Ip first;
  first.flags_frag = 0x2000;  // MF, offset 0: carries the ports
  first.proto = 17;
  first.sport = 7;
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(first))), FlowKey::from_tuple(first.src, first.dst, 7, 443, 17));
  Ip middle = first;
  middle.flags_frag = 0x2000 | 185;  // MF, offset 1480
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(middle)), nullptr), ParseResult::kNotTcpUdp);
  Ip last = first;
  last.flags_frag = 370;  // no MF, offset 2960
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(last)), nullptr), ParseResult::kNotTcpUdp);
  Ip df;
  df.flags_frag = 0x4000;  // DF only: not a fragment
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(df)), nullptr), ParseResult::kOk);
}

TEST(Parser, IpOptionsMoveThePorts) {
  for (int words = 6; words <= 15; ++words) {
    Ip p;
    p.ihl_words = words;
    p.sport = static_cast<uint16_t>(1000 + words);
    p.dport = static_cast<uint16_t>(2000 + words);
    EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p))), FlowKey::from_tuple(p.src, p.dst, p.sport, p.dport, 6))
        << words;
  }
}

TEST(Parser, MalformedHeaders) {
  Ip p;
  p.ihl_words = 4;
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(p)), nullptr), ParseResult::kMalformed);  // IHL < 5
  p = {};
  p.ihl_words = 8;
  p.total_override = 24;  // shorter than the 32-byte header
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(p)), nullptr), ParseResult::kMalformed);
  p = {};
  p.total_override = 22;  // header fits, ports do not
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(p)), nullptr), ParseResult::kMalformed);
  p = {};
  p.version = 6;  // behind an IPv4 ethertype
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4(p)), nullptr), ParseResult::kMalformed);
  p = {};
  p.total_override = 0;  // TSO: unknown length, take what was captured
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p))), kDefault);
  p = {};
  p.total_override = 24;  // exactly the ports; the capture holds more (Ethernet padding)
  EXPECT_EQ(expect_ok(kEn10mb, eth(0x0800, ipv4(p))), kDefault);
}

TEST(Parser, NullKeyAndKeyUntouchedOnFailure) {
  EXPECT_EQ(parse(kEn10mb, eth(0x0800, ipv4({})), nullptr), ParseResult::kOk);
  FlowKey k;
  k.bytes.fill(0x77);
  FlowKey before = k;
  EXPECT_EQ(parse(kEn10mb, eth(0x86dd, Bytes(40, 0)), &k), ParseResult::kNotIpv4);
  EXPECT_EQ(k, before);
  EXPECT_EQ(parse_frame(kEn10mb, nullptr, 100, &k), ParseResult::kTruncated);
  EXPECT_STREQ(parse_result_name(ParseResult::kTruncated), "truncated");
}

// Every prefix of a frame: truncated until the destination port is complete,
// then the full key.
TEST(Parser, TruncatedAtEveryByte) {
  struct Case {
    const char* name;
    int linktype;
    Bytes frame;
    size_t ports_end;  // bytes needed for the key
  };
  Ip opt;
  opt.ihl_words = 7;
  Ip udp;
  udp.proto = 17;
  std::vector<Case> cases = {
      {"eth", kEn10mb, eth(0x0800, ipv4({})), 14 + 24},
      {"eth-udp", kEn10mb, eth(0x0800, ipv4(udp)), 14 + 24},
      {"vlan", kEn10mb, eth(0x0800, ipv4({}), {0x8100}), 18 + 24},
      {"qinq", kEn10mb, eth(0x0800, ipv4({}), {0x88a8, 0x8100}), 22 + 24},
      {"options", kEn10mb, eth(0x0800, ipv4(opt)), 14 + 28 + 4},
      {"raw", kRaw, ipv4({}), 24},
      {"ipv4", kIpv4, ipv4({}), 24},
      {"sll", kSll, sll(0x0800, ipv4({})), 16 + 24},
      {"sll2", kSll2, sll2(0x0800, ipv4({})), 20 + 24},
  };
  for (const Case& c : cases) {
    FlowKey full = expect_ok(c.linktype, c.frame);
    for (size_t len = 0; len <= c.frame.size(); ++len) {
      FlowKey k;
      ParseResult r = parse(c.linktype, c.frame, &k, len);
      if (len < c.ports_end) {
        EXPECT_EQ(r, ParseResult::kTruncated) << c.name << " len " << len;
      } else {
        EXPECT_EQ(r, ParseResult::kOk) << c.name << " len " << len;
        EXPECT_EQ(k, full) << c.name << " len " << len;
      }
    }
  }
}

}  // namespace
}  // namespace dpukit::measure
