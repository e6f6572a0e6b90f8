#include "trace/parse.h"

#include <cstring>

namespace dpukit::measure {

namespace {

// Link-type numbers, spelled out so that this file does not need pcap.h (the
// fuzz build compiles it on its own). They are the DLT_* values of
// <pcap/dlt.h> on Linux.
constexpr int kDltEn10mb = 1;
constexpr int kDltRaw = 12;
constexpr int kDltRawOpenBsd = 14;
constexpr int kLinktypeRaw = 101;
constexpr int kDltLinuxSll = 113;
constexpr int kDltIpv4 = 228;
constexpr int kDltLinuxSll2 = 276;

constexpr uint16_t kEthIpv4 = 0x0800;
constexpr uint16_t kEthVlan = 0x8100;     // 802.1Q
constexpr uint16_t kEthQinQ = 0x88a8;     // 802.1ad
constexpr uint16_t kEthQinQOld1 = 0x9100;  // pre-standard QinQ
constexpr uint16_t kEthQinQOld2 = 0x9200;

constexpr size_t kEthHeader = 14;
constexpr size_t kVlanTag = 4;
constexpr size_t kSllHeader = 16;
constexpr size_t kSll2Header = 20;
constexpr size_t kIpv4MinHeader = 20;

inline uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

inline bool is_vlan(uint16_t ethertype) {
  return ethertype == kEthVlan || ethertype == kEthQinQ || ethertype == kEthQinQOld1 || ethertype == kEthQinQOld2;
}

// `type_off` is the offset of an ethertype field within the first `caplen`
// bytes; skips VLAN tags (tag = TCI(2) + inner ethertype(2)) and then expects
// IPv4 right after the last ethertype.
ParseResult after_ethertype(const uint8_t* data, size_t caplen, size_t type_off, FlowKey* key) {
  for (;;) {
    if (caplen < type_off + 2) return ParseResult::kTruncated;
    uint16_t type = be16(data + type_off);
    if (is_vlan(type)) {
      type_off += kVlanTag;  // the tag's own ethertype follows its 2-byte TCI
      continue;
    }
    if (type != kEthIpv4) return ParseResult::kNotIpv4;
    size_t ip_off = type_off + 2;
    if (caplen < ip_off) return ParseResult::kTruncated;
    return parse_ipv4(data + ip_off, caplen - ip_off, key);
  }
}

}  // namespace

const char* parse_result_name(ParseResult r) {
  switch (r) {
    case ParseResult::kOk: return "ok";
    case ParseResult::kNotIpv4: return "not IPv4";
    case ParseResult::kNotTcpUdp: return "not TCP/UDP";
    case ParseResult::kTruncated: return "truncated";
    case ParseResult::kMalformed: return "malformed";
  }
  return "?";
}

bool linktype_supported(int linktype) {
  switch (linktype) {
    case kDltEn10mb:
    case kDltRaw:
    case kDltRawOpenBsd:
    case kLinktypeRaw:
    case kDltIpv4:
    case kDltLinuxSll:
    case kDltLinuxSll2:
      return true;
    default:
      return false;
  }
}

ParseResult parse_ipv4(const uint8_t* ip, size_t caplen, FlowKey* key) {
  if (caplen < 1) return ParseResult::kTruncated;
  if ((ip[0] >> 4) != 4) return ParseResult::kMalformed;
  if (caplen < kIpv4MinHeader) return ParseResult::kTruncated;
  size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
  if (ihl < kIpv4MinHeader) return ParseResult::kMalformed;
  size_t total = be16(ip + 2);
  // 0 = unknown (TSO/GSO); otherwise it must at least cover the header.
  if (total != 0 && total < ihl) return ParseResult::kMalformed;
  uint8_t proto = ip[9];
  if (proto != 6 && proto != 17) return ParseResult::kNotTcpUdp;
  uint16_t frag_off = be16(ip + 6) & 0x1fff;
  if (frag_off != 0) return ParseResult::kNotTcpUdp;  // no L4 header in this fragment
  // The ports must lie inside the datagram and inside the capture.
  if (total != 0 && total < ihl + 4) return ParseResult::kMalformed;
  if (caplen < ihl + 4) return ParseResult::kTruncated;
  if (key) {
    // The key's bytes are the header bytes in network order.
    std::memcpy(&key->bytes[0], ip + 12, 8);    // src_ip, dst_ip
    std::memcpy(&key->bytes[8], ip + ihl, 4);   // src_port, dst_port
    key->bytes[12] = proto;
  }
  return ParseResult::kOk;
}

ParseResult parse_frame(int linktype, const uint8_t* data, size_t caplen, FlowKey* key) {
  if (data == nullptr) caplen = 0;
  switch (linktype) {
    case kDltEn10mb:
      if (caplen < kEthHeader) return ParseResult::kTruncated;
      // dst(6) src(6) ethertype(2); a value <= 1500 is an 802.3 length (LLC).
      return after_ethertype(data, caplen, 12, key);
    case kDltRaw:
    case kDltRawOpenBsd:
    case kLinktypeRaw:
      if (caplen < 1) return ParseResult::kTruncated;
      if ((data[0] >> 4) != 4) return (data[0] >> 4) == 6 ? ParseResult::kNotIpv4 : ParseResult::kMalformed;
      return parse_ipv4(data, caplen, key);
    case kDltIpv4:
      return parse_ipv4(data, caplen, key);
    case kDltLinuxSll:
      // pkttype(2) hatype(2) halen(2) addr(8) protocol(2)
      if (caplen < kSllHeader) return ParseResult::kTruncated;
      return after_ethertype(data, caplen, 14, key);
    case kDltLinuxSll2:
      // protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
      if (caplen < kSll2Header) return ParseResult::kTruncated;
      if (is_vlan(be16(data))) {
        // A tag left in the payload: TCI(2) + ethertype(2) right after the header.
        return after_ethertype(data, caplen, kSll2Header + 2, key);
      }
      if (be16(data) != kEthIpv4) return ParseResult::kNotIpv4;
      return parse_ipv4(data + kSll2Header, caplen - kSll2Header, key);
    default:
      return ParseResult::kNotIpv4;
  }
}

}  // namespace dpukit::measure
