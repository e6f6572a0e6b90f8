#include "export/ipfix.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "dpukit/core/log.h"

namespace dpukit::measure {

namespace {

// IANA "IPFIX Information Elements": (element id, length in bytes), in record order.
struct FieldSpec {
  uint16_t element_id;
  uint16_t length;
};
constexpr FieldSpec kFields[IpfixExporter::kFieldCount] = {
    {8, 4},    // sourceIPv4Address
    {12, 4},   // destinationIPv4Address
    {7, 2},    // sourceTransportPort
    {11, 2},   // destinationTransportPort
    {4, 1},    // protocolIdentifier
    {2, 8},    // packetDeltaCount
    {1, 8},    // octetDeltaCount
    {152, 8},  // flowStartMilliseconds
    {153, 8},  // flowEndMilliseconds
};
static_assert([] {
  size_t sum = 0;
  for (const auto& f : kFields) sum += f.length;
  return sum == IpfixExporter::kRecordBytes;
}());

void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
void put64(std::vector<uint8_t>& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}
void patch16(std::vector<uint8_t>& out, size_t at, uint16_t v) {
  out[at] = static_cast<uint8_t>(v >> 8);
  out[at + 1] = static_cast<uint8_t>(v);
}

// "host:port" or "[v6]:port" -> a UDP socket connected to it, so that the
// kernel reports a collector that refuses (ICMP port unreachable) as
// ECONNREFUSED on a later send.
UniqueFd connect_collector(const std::string& collector) {
  auto invalid = [&](const std::string& why) {
    return std::invalid_argument("IPFIX collector '" + collector + "': " + why);
  };
  size_t colon = collector.rfind(':');
  if (colon == std::string::npos) throw invalid("expected host:port (e.g. 127.0.0.1:4739)");
  std::string host = collector.substr(0, colon);
  std::string port_text = collector.substr(colon + 1);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535)
    throw invalid("the port '" + port_text + "' is not a number from 1 to 65535");
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find_first_of(":[]") != std::string::npos) {
    throw invalid("an IPv6 address goes in brackets: [::1]:4739");
  }
  if (host.empty()) throw invalid("no host before the port");

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0 || !found) throw invalid("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  UniqueFd fd(::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  int err = fd ? 0 : errno;
  if (fd && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) != 0) err = errno;
  ::freeaddrinfo(found);
  if (err != 0) throw std::runtime_error("IPFIX collector '" + collector + "': " + std::strerror(err));
  return fd;
}

}  // namespace

namespace {
IpfixOptions options_with(uint32_t observation_domain, size_t mtu) {
  IpfixOptions options;
  options.observation_domain = observation_domain;
  options.mtu = mtu;
  return options;
}
}  // namespace

IpfixExporter::IpfixExporter(const std::string& collector, uint32_t observation_domain, size_t mtu)
    : IpfixExporter(collector, options_with(observation_domain, mtu)) {}

IpfixExporter::IpfixExporter(const std::string& collector, const IpfixOptions& options)
    : options_(options), collector_(collector) {
  if (options_.mtu < kMinMtu || options_.mtu > kMaxMtu)
    throw std::invalid_argument("IPFIX MTU " + std::to_string(options_.mtu) + " is outside " +
                                std::to_string(kMinMtu) + ".." + std::to_string(kMaxMtu) +
                                " (the header, the template and one record must fit one UDP datagram)");
  if (options_.template_id < 256)
    throw std::invalid_argument("IPFIX template id " + std::to_string(options_.template_id) +
                                " is below 256 (0-255 are set ids)");
  socket_ = connect_collector(collector);
  message_.reserve(options_.mtu);
}

size_t IpfixExporter::records_per_message(bool with_template) const {
  size_t overhead = kHeaderBytes + kSetHeaderBytes + (with_template ? kTemplateSetBytes : 0);
  return (options_.mtu - overhead) / kRecordBytes;
}

bool IpfixExporter::template_due() const {
  if (!template_sent_) return true;
  if (options_.template_refresh_messages != 0 && messages_since_template_ >= options_.template_refresh_messages)
    return true;
  return std::chrono::steady_clock::now() - template_time_ >= options_.template_refresh_interval;
}

void IpfixExporter::send(std::span<const FlowRecord> records) {
  while (!records.empty()) {
    bool with_template = template_due();
    size_t n = std::min(records.size(), records_per_message(with_template));
    send_message(records.first(n), with_template);
    records = records.subspan(n);
  }
}

void IpfixExporter::send_template() { send_message({}, true); }

void IpfixExporter::send_message(std::span<const FlowRecord> records, bool with_template) {
  auto& m = message_;
  m.clear();
  uint32_t export_time = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  put16(m, kVersion);
  put16(m, 0);  // length, patched below
  put32(m, export_time);
  put32(m, sequence_);  // data records sent before this message
  put32(m, options_.observation_domain);

  if (with_template) {
    put16(m, kTemplateSetId);
    put16(m, static_cast<uint16_t>(kTemplateSetBytes));
    put16(m, options_.template_id);
    put16(m, static_cast<uint16_t>(kFieldCount));
    for (const auto& f : kFields) {
      put16(m, f.element_id);  // enterprise bit clear: IANA's elements
      put16(m, f.length);
    }
  }
  if (!records.empty()) {
    put16(m, options_.template_id);
    put16(m, static_cast<uint16_t>(kSetHeaderBytes + records.size() * kRecordBytes));
    for (const auto& r : records) {
      // The key's bytes are already in network order: addresses, then ports, then protocol.
      m.insert(m.end(), r.key.bytes.begin(), r.key.bytes.end());
      put64(m, r.packets);
      put64(m, r.bytes);
      put64(m, r.start_ms);
      put64(m, r.end_ms);
    }
  }
  patch16(m, 2, static_cast<uint16_t>(m.size()));

  if (!send_datagram()) {
    stats_.records_unsent += records.size();
    return;  // a template that did not go out is still due
  }
  stats_.messages++;
  stats_.records += records.size();
  stats_.bytes += m.size();
  sequence_ += static_cast<uint32_t>(records.size());  // modulo 2^32, as RFC 7011 §3.1 says
  if (with_template) {
    stats_.template_sends++;
    template_sent_ = true;
    template_time_ = std::chrono::steady_clock::now();
    messages_since_template_ = 0;
  } else {
    messages_since_template_++;
  }
}

bool IpfixExporter::send_datagram() {
  bool retried = false;
  for (;;) {
    ssize_t n = ::send(socket_.get(), message_.data(), message_.size(), 0);
    if (n == static_cast<ssize_t>(message_.size())) return true;
    int err = n < 0 ? errno : EMSGSIZE;
    if (err == EINTR) continue;
    stats_.send_errors++;
    if (!warned_) {
      log_warn("IPFIX collector " + collector_ + ": " + std::strerror(err) +
               " (further send errors are only counted)");
      warned_ = true;
    }
    // ECONNREFUSED reports an earlier datagram that the collector's host
    // refused; the kernel gives the error instead of sending this one, so
    // try it once more: a collector that is back loses nothing more.
    if (err == ECONNREFUSED && !retried) {
      retried = true;
      continue;
    }
    return false;
  }
}

}  // namespace dpukit::measure
