// IPFIX export (RFC 7011) over UDP: flow records go to a collector that an
// operator already runs (nfdump's nfcapd, pmacct, GoFlow2), which does the
// network-wide part (docs/architecture.md §6).
//
// Each message: the 16-byte header (version 10, length, export time, sequence
// number, observation domain), then at times the template set (set id 2) and
// a data set (set id = the template id) of fixed-length records with IANA's
// information elements:
//
//   sourceIPv4Address (8)         4 bytes   destinationIPv4Address (12)    4
//   sourceTransportPort (7)       2         destinationTransportPort (11)  2
//   protocolIdentifier (4)        1         packetDeltaCount (2)           8
//   octetDeltaCount (1)           8         flowStartMilliseconds (152)    8
//   flowEndMilliseconds (153)     8         -> 45 bytes a record
//
// UDP loses and reorders datagrams and a collector may start after the
// exporter, so the template goes out in the first message and again once
// `template_refresh_messages` messages have gone out without it or
// `template_refresh_interval` has passed since it last went, whichever comes
// first (RFC 7011 §8.4 asks for periodic retransmission over UDP): by default
// after 100 messages or 30 s. It rides at the front of a data message, so a
// collector never sees those records before their template.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dpukit/core/flow_key.h"
#include "dpukit/core/shm.h"  // UniqueFd

namespace dpukit::measure {

// One flow's counts over [start_ms, end_ms] (milliseconds since the Unix
// epoch): exported as deltas, what the flow did in that interval.
struct FlowRecord {
  FlowKey key;
  uint64_t packets = 0;
  uint64_t bytes = 0;
  uint64_t start_ms = 0;
  uint64_t end_ms = 0;
};

struct IpfixStats {
  uint64_t messages = 0;        // datagrams the kernel took
  uint64_t records = 0;         // data records in those
  uint64_t bytes = 0;           // IPFIX bytes in those (UDP payload)
  uint64_t template_sends = 0;  // messages that carried the template
  // Failed sends. A collector that is not listening shows up here: the
  // kernel answers a send with ECONNREFUSED for an earlier datagram that the
  // collector's host refused (ICMP port unreachable), so over UDP this counts
  // refusals as they are reported, not the very datagrams lost.
  uint64_t send_errors = 0;
  uint64_t records_unsent = 0;  // data records in messages that could not be sent
};

struct IpfixOptions {
  uint32_t observation_domain = 1;
  // Largest IPFIX message (the UDP payload): 1400 leaves room for the IP and
  // UDP headers, and a tunnel's, within a 1500-byte Ethernet MTU.
  size_t mtu = 1400;
  uint16_t template_id = 256;
  uint64_t template_refresh_messages = 100;  // messages without the template before it is resent; 0: never by count
  std::chrono::milliseconds template_refresh_interval = std::chrono::seconds(30);
};

// Not thread-safe: one thread sends.
class IpfixExporter {
 public:
  static constexpr uint16_t kVersion = 10;
  static constexpr uint16_t kTemplateSetId = 2;
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kSetHeaderBytes = 4;
  static constexpr size_t kRecordBytes = 45;
  static constexpr size_t kFieldCount = 9;
  static constexpr size_t kTemplateSetBytes = kSetHeaderBytes + 4 + kFieldCount * 4;  // 44
  // The smallest MTU that holds the header, the template and one record.
  static constexpr size_t kMinMtu = kHeaderBytes + kTemplateSetBytes + kSetHeaderBytes + kRecordBytes;
  static constexpr size_t kMaxMtu = 65507;  // the largest UDP payload over IPv4

  // `collector` is "host:port" or "[ipv6]:port". Throws std::invalid_argument
  // with the reason when it is malformed or does not resolve, or when the
  // options are out of range (mtu below kMinMtu or above kMaxMtu, template id
  // below 256); std::runtime_error when no socket can be made. Sends nothing
  // yet: the template goes with the first message.
  IpfixExporter(const std::string& collector, uint32_t observation_domain = 1, size_t mtu = 1400);
  IpfixExporter(const std::string& collector, const IpfixOptions& options);

  // Sends the records, as many messages as the MTU needs. Never throws for a
  // collector that is down or refuses: that is counted in stats() and the
  // records are dropped, as a router's exporter would.
  void send(std::span<const FlowRecord> records);
  // Sends a message holding only the template now (at start, or to have a
  // restarted collector learn it without waiting for the refresh).
  void send_template();

  const IpfixStats& stats() const { return stats_; }
  uint32_t sequence_number() const { return sequence_; }  // data records sent so far, modulo 2^32
  // How many records one message holds under the MTU, with or without the template in front.
  size_t records_per_message(bool with_template) const;

 private:
  bool template_due() const;
  // Builds and sends one message of `records` (may be empty), with the
  // template in front when `with_template`.
  void send_message(std::span<const FlowRecord> records, bool with_template);
  bool send_datagram();

  IpfixOptions options_;
  std::string collector_;
  UniqueFd socket_;
  std::vector<uint8_t> message_;
  IpfixStats stats_;
  uint32_t sequence_ = 0;
  uint64_t messages_since_template_ = 0;
  bool template_sent_ = false;
  bool warned_ = false;  // the first send error is logged, the rest only counted
  std::chrono::steady_clock::time_point template_time_;
};

}  // namespace dpukit::measure
