#include "export/ipfix.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "dpukit/core/process.h"

namespace dpukit::measure {
namespace {

namespace fs = std::filesystem;

// ---- a UDP socket of the test's own, and a reader of raw IPFIX ----

class UdpSocket {
 public:
  // Bound to 127.0.0.1:port (0: a free port). Waits at most `timeout` for a datagram.
  explicit UdpSocket(uint16_t port = 0, std::chrono::seconds timeout = std::chrono::seconds(10)) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    int big = 4 << 20;  // room for every datagram a test sends before reading them
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("bind 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~UdpSocket() { ::close(fd_); }
  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The next datagram; nullopt after the time-out (a guard against a hang).
  std::optional<std::vector<uint8_t>> receive() {
    std::vector<uint8_t> buf(65536);
    ssize_t n;
    do n = ::recv(fd_, buf.data(), buf.size(), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return std::nullopt;
    buf.resize(static_cast<size_t>(n));
    return buf;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A UDP port nobody listens on right now.
uint16_t free_udp_port() { return UdpSocket().port(); }

uint64_t be(const std::vector<uint8_t>& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | b.at(at + i);
  return v;
}

struct Set {
  uint16_t id;
  std::vector<uint8_t> body;  // without the set header
};
struct Message {
  uint16_t version, length;
  uint32_t export_time, sequence, domain;
  std::vector<Set> sets;
};

Message parse_message(const std::vector<uint8_t>& d) {
  Message m{};
  if (d.size() < 16) {
    ADD_FAILURE() << "datagram of " << d.size() << " bytes is shorter than the IPFIX header";
    return m;
  }
  m.version = static_cast<uint16_t>(be(d, 0, 2));
  m.length = static_cast<uint16_t>(be(d, 2, 2));
  m.export_time = static_cast<uint32_t>(be(d, 4, 4));
  m.sequence = static_cast<uint32_t>(be(d, 8, 4));
  m.domain = static_cast<uint32_t>(be(d, 12, 4));
  EXPECT_EQ(m.length, d.size()) << "message length field";
  size_t at = 16;
  while (at < d.size()) {
    if (at + 4 > d.size()) {
      ADD_FAILURE() << "a set header runs past the message";
      break;
    }
    uint16_t id = static_cast<uint16_t>(be(d, at, 2));
    uint16_t len = static_cast<uint16_t>(be(d, at + 2, 2));
    if (len < 4 || at + len > d.size()) {
      ADD_FAILURE() << "set " << id << " of length " << len << " does not fit the message";
      break;
    }
    m.sets.push_back(Set{id, std::vector<uint8_t>(d.begin() + at + 4, d.begin() + at + len)});
    at += len;
  }
  return m;
}

// The template record every template set must hold: id 256, these IANA elements.
void expect_template(const Set& set, uint16_t template_id = 256) {
  const std::vector<std::pair<uint16_t, uint16_t>> fields = {{8, 4}, {12, 4}, {7, 2},   {11, 2},  {4, 1},
                                                             {2, 8}, {1, 8},  {152, 8}, {153, 8}};
  ASSERT_EQ(set.id, 2);
  ASSERT_EQ(set.body.size(), 4 + 4 * fields.size());
  EXPECT_EQ(be(set.body, 0, 2), template_id);
  EXPECT_EQ(be(set.body, 2, 2), fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(be(set.body, 4 + 4 * i, 2), fields[i].first) << "field " << i;
    EXPECT_EQ(be(set.body, 6 + 4 * i, 2), fields[i].second) << "field " << i;
  }
}

std::vector<FlowRecord> decode_records(const Set& set) {
  std::vector<FlowRecord> out;
  EXPECT_EQ(set.body.size() % 45, 0u) << "data set of " << set.body.size() << " bytes";
  for (size_t at = 0; at + 45 <= set.body.size(); at += 45) {
    FlowRecord r;
    std::copy(set.body.begin() + at, set.body.begin() + at + 13, r.key.bytes.begin());
    r.packets = be(set.body, at + 13, 8);
    r.bytes = be(set.body, at + 21, 8);
    r.start_ms = be(set.body, at + 29, 8);
    r.end_ms = be(set.body, at + 37, 8);
    out.push_back(r);
  }
  return out;
}

// Distinct values in every field; counts past 2^32 so that 8-byte fields are needed.
std::vector<FlowRecord> make_records(size_t n, uint32_t seed) {
  std::vector<FlowRecord> out;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t k = seed * 100000 + i;
    FlowRecord r;
    r.key = FlowKey::from_tuple(0x0a000000u + k, 0xc0a80000u + 3 * k + 1, static_cast<uint16_t>(1024 + 7 * i),
                                static_cast<uint16_t>(1 + 13 * i), i % 3 == 0 ? 17 : (i % 3 == 1 ? 6 : 132));
    r.packets = (uint64_t(1) << 33) + 1000003ull * k;
    r.bytes = r.packets * 64 + i;
    r.start_ms = 1'700'000'000'000ull + 1000ull * i + i % 1000;
    r.end_ms = r.start_ms + 5000 + 11 * i;
    out.push_back(r);
  }
  return out;
}

void expect_same(const FlowRecord& got, const FlowRecord& want, size_t index) {
  EXPECT_EQ(got.key, want.key) << "record " << index << ": " << got.key.str() << " vs " << want.key.str();
  EXPECT_EQ(got.packets, want.packets) << "record " << index;
  EXPECT_EQ(got.bytes, want.bytes) << "record " << index;
  EXPECT_EQ(got.start_ms, want.start_ms) << "record " << index;
  EXPECT_EQ(got.end_ms, want.end_ms) << "record " << index;
}

// ---- the wire format, read from a socket of the test's own ----

TEST(IpfixExporter, SplitsRecordsIntoMessagesUnderTheMtuWithTheTemplateFirst) {
  UdpSocket collector;
  IpfixExporter exporter(collector.address(), /*observation_domain=*/77, /*mtu=*/1400);
  auto records = make_records(100, 1);
  uint32_t before = static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  exporter.send(records);

  // 1400 bytes: (1400-16-44-4)/45 = 29 records with the template, (1400-16-4)/45 = 30 without.
  EXPECT_EQ(exporter.records_per_message(true), 29u);
  EXPECT_EQ(exporter.records_per_message(false), 30u);
  const std::vector<size_t> expected_counts = {29, 30, 30, 11};
  std::vector<FlowRecord> received;
  uint64_t bytes = 0;
  for (size_t i = 0; i < expected_counts.size(); ++i) {
    auto d = collector.receive();
    ASSERT_TRUE(d) << "message " << i << " did not arrive";
    EXPECT_LE(d->size(), 1400u);
    bytes += d->size();
    Message m = parse_message(*d);
    EXPECT_EQ(m.version, 10);
    EXPECT_EQ(m.domain, 77u);
    EXPECT_GE(m.export_time, before);
    EXPECT_EQ(m.sequence, received.size()) << "sequence number = data records sent before this message";
    size_t first_data = 0;
    if (i == 0) {
      ASSERT_EQ(m.sets.size(), 2u);
      expect_template(m.sets[0]);
      first_data = 1;
    }
    ASSERT_EQ(m.sets.size(), first_data + 1) << "message " << i;
    EXPECT_EQ(m.sets[first_data].id, 256);
    auto got = decode_records(m.sets[first_data]);
    EXPECT_EQ(got.size(), expected_counts[i]) << "message " << i;
    received.insert(received.end(), got.begin(), got.end());
  }
  ASSERT_EQ(received.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) expect_same(received[i], records[i], i);

  const IpfixStats& s = exporter.stats();
  EXPECT_EQ(s.messages, 4u);
  EXPECT_EQ(s.records, 100u);
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_EQ(s.template_sends, 1u);
  EXPECT_EQ(s.send_errors, 0u);
  EXPECT_EQ(s.records_unsent, 0u);
  EXPECT_EQ(exporter.sequence_number(), 100u);
}

TEST(IpfixExporter, ResendsTheTemplateAfterTheConfiguredNumberOfMessages) {
  UdpSocket collector;
  IpfixOptions options;
  options.mtu = 300;  // 5 records with the template, 6 without
  options.template_refresh_messages = 3;
  options.template_refresh_interval = std::chrono::hours(1);
  IpfixExporter exporter(collector.address(), options);
  auto records = make_records(50, 2);
  exporter.send(std::span(records).first(20));  // two calls: the count carries over
  exporter.send(std::span(records).subspan(20));

  // The template, then 3 messages without it, then the template again:
  // messages 0, 4 and 8. The first call's 20 records end in a short message.
  const std::vector<bool> with_template = {true, false, false, false, true, false, false, false, true, false};
  const std::vector<size_t> counts = {5, 6, 6, 3, 5, 6, 6, 6, 5, 2};
  size_t seen = 0;
  for (size_t i = 0; i < with_template.size(); ++i) {
    auto d = collector.receive();
    ASSERT_TRUE(d) << "message " << i << " did not arrive";
    EXPECT_LE(d->size(), 300u);
    Message m = parse_message(*d);
    EXPECT_EQ(m.sequence, seen) << "message " << i;
    ASSERT_EQ(m.sets.size(), with_template[i] ? 2u : 1u) << "message " << i;
    if (with_template[i]) expect_template(m.sets[0]);
    auto got = decode_records(m.sets.back());
    ASSERT_EQ(got.size(), counts[i]) << "message " << i;
    for (size_t j = 0; j < got.size(); ++j) expect_same(got[j], records[seen + j], seen + j);
    seen += got.size();
  }
  EXPECT_EQ(seen, records.size());
  EXPECT_EQ(exporter.stats().template_sends, 3u);
  EXPECT_EQ(exporter.stats().messages, 10u);
}

TEST(IpfixExporter, ResendsTheTemplateOnceTheIntervalHasPassedAndOnRequest) {
  UdpSocket collector;
  IpfixOptions options;
  options.template_refresh_messages = 0;               // time only
  options.template_refresh_interval = std::chrono::milliseconds(0);  // has always passed
  options.observation_domain = 5;
  options.template_id = 300;
  IpfixExporter exporter(collector.address(), options);
  auto records = make_records(3, 3);
  exporter.send(std::span(records).first(1));
  exporter.send(std::span(records).subspan(1));
  exporter.send_template();
  for (int i = 0; i < 2; ++i) {
    auto d = collector.receive();
    ASSERT_TRUE(d);
    Message m = parse_message(*d);
    ASSERT_EQ(m.sets.size(), 2u) << "message " << i;
    expect_template(m.sets[0], 300);
    EXPECT_EQ(m.sets[1].id, 300);
    EXPECT_EQ(m.sequence, i == 0 ? 0u : 1u);
  }
  // A template-only message: the sequence number counts data records only.
  auto d = collector.receive();
  ASSERT_TRUE(d);
  Message m = parse_message(*d);
  EXPECT_EQ(m.domain, 5u);
  EXPECT_EQ(m.sequence, 3u);
  ASSERT_EQ(m.sets.size(), 1u);
  expect_template(m.sets[0], 300);
  EXPECT_EQ(d->size(), 16u + 44u);
  EXPECT_EQ(exporter.stats().template_sends, 3u);
  EXPECT_EQ(exporter.stats().records, 3u);
}

TEST(IpfixExporter, DoesNotResendTheTemplateBeforeItIsDue) {
  UdpSocket collector;
  IpfixExporter exporter(collector.address());  // defaults: 100 messages or 30 s
  auto records = make_records(5, 4);
  for (const auto& r : records) exporter.send(std::span(&r, 1));
  for (int i = 0; i < 5; ++i) {
    auto d = collector.receive();
    ASSERT_TRUE(d);
    EXPECT_EQ(parse_message(*d).sets.size(), i == 0 ? 2u : 1u) << "message " << i;
  }
  EXPECT_EQ(exporter.stats().template_sends, 1u);
}

TEST(IpfixExporter, ACollectorThatIsNotListeningIsCountedNotThrown) {
  uint16_t port = free_udp_port();
  IpfixExporter exporter("127.0.0.1:" + std::to_string(port));
  auto records = make_records(300, 5);  // 10 messages: each refusal surfaces on a later send
  EXPECT_NO_THROW(exporter.send(records));
  const IpfixStats s = exporter.stats();
  EXPECT_GE(s.send_errors, 1u);
  EXPECT_EQ(s.records + s.records_unsent, records.size());

  // The collector comes up on that port: the next send reaches it, template
  // and all once asked for, although a refusal of an earlier datagram was
  // still pending on the socket.
  UdpSocket collector(port);
  exporter.send_template();
  exporter.send(std::span(records).first(2));
  for (int i = 0; i < 2; ++i) {
    auto d = collector.receive();
    ASSERT_TRUE(d) << "message " << i << " after the collector came up";
    Message m = parse_message(*d);
    if (i == 0) {
      ASSERT_EQ(m.sets.size(), 1u);
      expect_template(m.sets[0]);
    } else {
      ASSERT_EQ(m.sets.size(), 1u);
      auto got = decode_records(m.sets[0]);
      ASSERT_EQ(got.size(), 2u);
      expect_same(got[0], records[0], 0);
      expect_same(got[1], records[1], 1);
    }
  }
}

TEST(IpfixExporter, RejectsBadCollectorsAndOptions) {
  for (std::string bad : {"", "127.0.0.1", "127.0.0.1:", ":4739", "127.0.0.1:0", "127.0.0.1:65536",
                          "127.0.0.1:47x9", "::1:4739", "[::1:4739"}) {
    try {
      IpfixExporter e(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
  // A bracketed IPv6 address is well-formed (whether this machine can reach ::1 is another matter).
  try {
    IpfixExporter e("[::1]:4739");
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::runtime_error&) {
  }
  EXPECT_THROW(IpfixExporter("127.0.0.1:4739", 1, IpfixExporter::kMinMtu - 1), std::invalid_argument);
  EXPECT_NO_THROW(IpfixExporter("127.0.0.1:4739", 1, IpfixExporter::kMinMtu));
  EXPECT_THROW(IpfixExporter("127.0.0.1:4739", 1, 70000), std::invalid_argument);
  IpfixOptions options;
  options.template_id = 255;
  EXPECT_THROW(IpfixExporter("127.0.0.1:4739", options), std::invalid_argument);
}

// ---- against a standard collector: nfdump's nfcapd ----

std::optional<fs::path> find_program(const std::string& name) {
  const char* path = ::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// True once some socket is bound to UDP `port` (nfcapd, here).
bool udp_port_bound(uint16_t port) {
  for (const char* table : {"/proc/net/udp", "/proc/net/udp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local;
      fields >> slot >> local;  // "0100007F:9A83": address and port in hex
      size_t colon = local.find(':');
      if (colon != std::string::npos && std::stoul(local.substr(colon + 1), nullptr, 16) == port) return true;
    }
  }
  return false;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(' ');
  size_t e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// nfdump's %ts/%te, printed in UTC ("2023-11-14 22:13:20.123"), as ms since the epoch.
// (Not %ter: nfdump 1.7.1 prints its milliseconds modulo 100, fixed upstream later.)
uint64_t nfdump_ms(const std::string& text) {
  std::tm tm{};
  unsigned ms = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d.%3u%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms, &used) != 7 ||
      static_cast<size_t>(used) != text.size())
    throw std::runtime_error("not a time as nfdump prints it: " + text);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<uint64_t>(::timegm(&tm)) * 1000 + ms;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dpukit-ipfix-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(IpfixExporter, NfcapdReadsBackEveryRecord) {
  auto nfcapd = find_program("nfcapd");
  auto nfdump = find_program("nfdump");
  if (!nfcapd || !nfdump)
    GTEST_SKIP() << "nfdump's nfcapd and nfdump are not installed (Debian package nfdump; scripts/apt-packages.txt)";

  TempDir dir;
  fs::path flows = dir.path() / "flows";
  fs::create_directory(flows);
  // nfcapd repeats every datagram it takes to this socket (-R), in the same
  // loop and before it decodes the next one: once the last message comes
  // back, every earlier one has been read and is written out on SIGTERM.
  UdpSocket repeats(0, std::chrono::seconds(30));
  uint16_t port = free_udp_port();
  SpawnOptions collector_options;
  collector_options.log = (dir.path() / "nfcapd.log").string();
  ChildProcess collector = ChildProcess::spawn(
      {nfcapd->string(), "-w", flows.string(), "-b", "127.0.0.1", "-p", std::to_string(port), "-R",
       "127.0.0.1/" + std::to_string(repeats.port())},
      collector_options);
  // Wait (a guard, not a measurement) for nfcapd to bind its port.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!udp_port_bound(port)) {
    ASSERT_TRUE(collector.running()) << "nfcapd " << collector.exit_text() << ":\n"
                                     << read_file(dir.path() / "nfcapd.log");
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "nfcapd did not bind UDP port " << port;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  IpfixExporter exporter("127.0.0.1:" + std::to_string(port), /*observation_domain=*/7, /*mtu=*/1400);
  auto records = make_records(250, 6);
  exporter.send(std::span(records).first(130));  // more than fit one message, over two calls
  exporter.send(std::span(records).subspan(130));
  exporter.send_template();  // the last message: its repeat says nfcapd has read all before it
  const IpfixStats s = exporter.stats();
  ASSERT_EQ(s.send_errors, 0u);
  ASSERT_EQ(s.records, records.size());
  ASSERT_GE(s.messages, 10u);
  for (uint64_t i = 0; i < s.messages; ++i)
    ASSERT_TRUE(repeats.receive()) << "nfcapd repeated " << i << " of " << s.messages << " messages";

  collector.kill(SIGTERM);  // nfcapd writes out its file and exits
  ASSERT_TRUE(collector.wait_for(std::chrono::seconds(30))) << "nfcapd did not exit on SIGTERM";
  std::string log = read_file(dir.path() / "nfcapd.log");
  ASSERT_TRUE(collector.succeeded()) << "nfcapd " << collector.exit_text() << ":\n" << log;
  // nfcapd's own count, and its check of the sequence numbers, per file it wrote.
  static const std::regex file_stats("Flows: ([0-9]+), .*Sequence Errors: ([0-9]+),");
  uint64_t flows_logged = 0, sequence_errors = 0, files = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), file_stats); it != std::sregex_iterator(); ++it) {
    flows_logged += std::stoull((*it)[1]);
    sequence_errors += std::stoull((*it)[2]);
    ++files;
  }
  EXPECT_GE(files, 1u) << log;
  EXPECT_EQ(flows_logged, records.size()) << log;
  EXPECT_EQ(sequence_errors, 0u) << log;

  // Every file nfcapd wrote (two when the run crossed its 5-minute rotation).
  fs::path out = dir.path() / "nfdump.out";
  SpawnOptions reader_options;
  reader_options.log = out.string();
  reader_options.env["TZ"] = "UTC";  // %ts and %te print local time
  ChildProcess reader = ChildProcess::spawn(
      {nfdump->string(), "-R", flows.string(), "-N", "-q", "-o", "fmt:%sa,%da,%sp,%dp,%pr,%pkt,%byt,%ts,%te"},
      reader_options);
  ASSERT_TRUE(reader.wait_for(std::chrono::seconds(60)));
  std::string text = read_file(out);
  ASSERT_TRUE(reader.succeeded()) << "nfdump " << reader.exit_text() << ":\n" << text;

  using Key = std::tuple<std::string, std::string, uint16_t, uint16_t, uint8_t>;
  std::map<Key, const FlowRecord*> expected;
  auto ip = [](uint32_t a) {
    in_addr addr{htonl(a)};
    char buf[INET_ADDRSTRLEN];
    return std::string(::inet_ntop(AF_INET, &addr, buf, sizeof buf));
  };
  for (const auto& r : records)
    expected[{ip(r.key.src_ip()), ip(r.key.dst_ip()), r.key.src_port(), r.key.dst_port(), r.key.proto()}] = &r;
  ASSERT_EQ(expected.size(), records.size());

  size_t matched = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (trim(line).empty()) continue;
    std::vector<std::string> f;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) f.push_back(trim(cell));
    if (f.size() != 9) {
      ADD_FAILURE() << "unexpected nfdump line: " << line;
      continue;
    }
    Key key{f[0], f[1], static_cast<uint16_t>(std::stoul(f[2])), static_cast<uint16_t>(std::stoul(f[3])),
            static_cast<uint8_t>(std::stoul(f[4]))};
    auto it = expected.find(key);
    if (it == expected.end()) {
      ADD_FAILURE() << "nfcapd has a flow that was not sent, or twice: " << line;
      continue;
    }
    const FlowRecord& want = *it->second;
    EXPECT_EQ(std::stoull(f[5]), want.packets) << line;
    EXPECT_EQ(std::stoull(f[6]), want.bytes) << line;
    EXPECT_EQ(nfdump_ms(f[7]), want.start_ms) << line;
    EXPECT_EQ(nfdump_ms(f[8]), want.end_ms) << line;
    expected.erase(it);
    ++matched;
  }
  EXPECT_EQ(matched, records.size()) << "nfdump printed:\n" << text;
  EXPECT_TRUE(expected.empty()) << expected.size() << " records never reached nfcapd's file";
}

}  // namespace
}  // namespace dpukit::measure
