// Packet parser: extracts the IPv4 5-tuple from one captured frame.
//
// Private to measure (the loader, the datapath and the tool include it).
// Supported link types (the DLT_* values that libpcap's pcap_datalink()
// returns):
//   DLT_EN10MB (1)        Ethernet II, any number of 802.1Q (0x8100),
//                         802.1ad (0x88a8) and old QinQ (0x9100, 0x9200) tags
//   DLT_RAW (12, 14 on OpenBSD; LINKTYPE_RAW 101 in files)
//                         raw IP, version told by the first nibble
//   DLT_IPV4 (228)        raw IPv4
//   DLT_LINUX_SLL (113)   Linux cooked capture v1 (16-byte header)
//   DLT_LINUX_SLL2 (276)  Linux cooked capture v2 (20-byte header)
//
// Only IPv4 carrying TCP (6) or UDP (17) yields a key. The IPv4 header length
// (IHL) and total length are honoured; a non-first fragment carries no ports
// and is reported as kNotTcpUdp; a first fragment (MF set, offset 0) has its
// ports and is kOk. A total length of 0 is taken as "unknown" (TSO/GSO
// segments captured on the sending host) and the captured bytes are used.
//
// parse_frame never reads outside [data, data + caplen) on any input
// (fuzzed: measure/fuzz/parse_fuzz.cc, scripts/fuzz-measure.sh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dpukit/core/flow_key.h"

namespace dpukit::measure {

enum class ParseResult {
  kOk,          // *key holds the 5-tuple
  kNotIpv4,     // ARP, IPv6, LLC, another ethertype or cooked protocol
  kNotTcpUdp,   // IPv4 but not TCP/UDP, or a non-first fragment
  kTruncated,   // the capture ends before the ports
  kMalformed,   // inconsistent headers (IHL < 5, total length < header, version != 4 behind an IPv4 ethertype)
};

const char* parse_result_name(ParseResult r);

// True for the link types listed above.
bool linktype_supported(int linktype);

// `key` may be null (classification only); it is written only on kOk.
ParseResult parse_frame(int linktype, const uint8_t* data, size_t caplen, FlowKey* key);

// Parses an IPv4 packet that starts at `ip` (caplen bytes captured from it).
ParseResult parse_ipv4(const uint8_t* ip, size_t caplen, FlowKey* key);

}  // namespace dpukit::measure
