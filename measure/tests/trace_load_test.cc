// load_trace: pcap (written here with libpcap and committed), pcapng and .dat
// (committed, made by tests/data/make_captures.py), errors with offsets, and
// robustness against truncated and corrupted files.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dpukit/measure.h"
#include "test_bytes.h"

namespace dpukit::measure {
namespace {

namespace fs = std::filesystem;
using testing::Bytes;

const std::string kData = DPUKIT_MEASURE_TESTDATA;

using testing::put16;
using testing::put32;

// IPv4 + TCP/UDP (or 8 bytes of another protocol), no payload.
Bytes ip_packet(uint8_t proto, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport) {
  Bytes b(20 + (proto == 6 ? 20 : 8), 0);
  b[0] = 0x45;
  put16(b, 2, static_cast<uint32_t>(b.size()));
  b[8] = 64;
  b[9] = proto;
  put32(b, 12, src);
  put32(b, 16, dst);
  put16(b, 20, sport);
  put16(b, 22, dport);
  return b;
}

Bytes ethernet(uint16_t type, const Bytes& payload, int vlans = 0) {
  Bytes b(12, 0x02);
  for (int i = 0; i < vlans; ++i) {
    Bytes tag = {0x81, 0x00, 0x00, static_cast<uint8_t>(10 + i)};
    b.insert(b.end(), tag.begin(), tag.end());
  }
  b.push_back(static_cast<uint8_t>(type >> 8));
  b.push_back(static_cast<uint8_t>(type));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

struct Frame {
  Bytes data;
  uint32_t len;  // original length
  uint64_t ts_ns;
};

void write_pcap(const std::string& path, int dlt, const std::vector<Frame>& frames, bool nano) {
  pcap_t* p = pcap_open_dead_with_tstamp_precision(dlt, 65535,
                                                   nano ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO);
  ASSERT_NE(p, nullptr);
  pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(p);
  for (const Frame& f : frames) {
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(f.ts_ns / 1000000000);
    uint64_t frac = f.ts_ns % 1000000000;
    h.ts.tv_usec = static_cast<suseconds_t>(nano ? frac : frac / 1000);
    h.caplen = static_cast<uint32_t>(f.data.size());
    h.len = f.len;
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data.data());
  }
  pcap_dump_close(d);
  pcap_close(p);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_file(const std::string& path, const Bytes& b, size_t len = SIZE_MAX) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(std::min(len, b.size())));
}

FlowKey key(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, uint8_t proto) {
  return FlowKey::from_tuple(src, dst, sport, dport, proto);
}

class TraceLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dpukit-trace-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Five frames: TCP, VLAN UDP, IPv6 (skipped), double-VLAN TCP, ICMP (skipped).
  std::vector<Frame> sample_frames() const {
    return {
        {ethernet(0x0800, ip_packet(6, 0x0a000001, 0x0a000002, 1000, 80)), 1514, 1700000000123456789ull},
        {ethernet(0x0800, ip_packet(17, 0xc0000201, 0x08080808, 5353, 53), 1), 90, 1700000000223456000ull},
        {ethernet(0x86dd, Bytes(40, 0x60)), 94, 1700000001000000000ull},
        {ethernet(0x0800, ip_packet(6, 0x01020304, 0x05060708, 65535, 1), 2), 66, 1700000001000001000ull},
        {ethernet(0x0800, ip_packet(1, 0x0a000001, 0x0a000009, 0, 0)), 98, 1700000002000000000ull},
    };
  }

  std::string dir_;
};

TEST_F(TraceLoad, PcapRoundTripMicroAndNano) {
  for (bool nano : {false, true}) {
    std::string p = path(nano ? "n.pcap" : "u.pcap");
    write_pcap(p, DLT_EN10MB, sample_frames(), nano);
    Trace t = load_trace(p);
    EXPECT_EQ(t.format, "pcap");
    EXPECT_EQ(t.path, p);
    ASSERT_EQ(t.packets.size(), 3u);
    EXPECT_EQ(t.skipped, 2u);
    EXPECT_EQ(t.packets[0].key, key(0x0a000001, 0x0a000002, 1000, 80, 6));
    EXPECT_EQ(t.packets[1].key, key(0xc0000201, 0x08080808, 5353, 53, 17));
    EXPECT_EQ(t.packets[2].key, key(0x01020304, 0x05060708, 65535, 1, 6));
    EXPECT_EQ(t.packets[0].wire_len, 1514u);
    EXPECT_EQ(t.packets[1].wire_len, 90u);
    EXPECT_EQ(t.packets[2].wire_len, 66u);
    EXPECT_EQ(t.packets[0].ts_ns, nano ? 1700000000123456789ull : 1700000000123456000ull);
    EXPECT_EQ(t.packets[1].ts_ns, 1700000000223456000ull);
    EXPECT_EQ(t.packets[2].ts_ns, 1700000001000001000ull);
  }
}

TEST_F(TraceLoad, RawIpAndCookedLinkTypes) {
  Bytes ip = ip_packet(17, 0x0b000001, 0x0b000002, 7, 9);
  FlowKey want = key(0x0b000001, 0x0b000002, 7, 9, 17);
  Bytes v6(40, 0);
  v6[0] = 0x60;
  // DLT_RAW goes to the file as LINKTYPE_RAW (101) and comes back as DLT_RAW.
  write_pcap(path("raw.pcap"), DLT_RAW, {{ip, 200, 5}, {v6, 40, 6}}, false);
  Trace raw = load_trace(path("raw.pcap"));
  ASSERT_EQ(raw.packets.size(), 1u);
  EXPECT_EQ(raw.packets[0].key, want);
  EXPECT_EQ(raw.skipped, 1u);

  write_pcap(path("ipv4.pcap"), DLT_IPV4, {{ip, 200, 5}}, false);
  ASSERT_EQ(load_trace(path("ipv4.pcap")).packets.size(), 1u);

  Bytes sll(16, 0);
  sll[15] = 0x00;
  sll[14] = 0x08;
  sll.insert(sll.end(), ip.begin(), ip.end());
  write_pcap(path("sll.pcap"), DLT_LINUX_SLL, {{sll, 216, 5}}, false);
  Trace s = load_trace(path("sll.pcap"));
  ASSERT_EQ(s.packets.size(), 1u);
  EXPECT_EQ(s.packets[0].key, want);

  Bytes sll2(20, 0);
  sll2[0] = 0x08;
  sll2.insert(sll2.end(), ip.begin(), ip.end());
  write_pcap(path("sll2.pcap"), DLT_LINUX_SLL2, {{sll2, 220, 5}}, false);
  Trace s2 = load_trace(path("sll2.pcap"));
  ASSERT_EQ(s2.packets.size(), 1u);
  EXPECT_EQ(s2.packets[0].key, want);
}

TEST_F(TraceLoad, UnsupportedLinkTypeIsAnError) {
  write_pcap(path("wifi.pcap"), DLT_IEEE802_11, {{Bytes(30, 0), 30, 1}}, false);
  try {
    load_trace(path("wifi.pcap"));
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.offset(), 0u);
    EXPECT_NE(std::string(e.what()).find("unsupported link type 105"), std::string::npos) << e.what();
  }
}

TEST(TraceCommitted, Pcapng) {
  Trace t = load_trace(kData + "/mixed.pcapng");
  EXPECT_EQ(t.format, "pcapng");
  ASSERT_EQ(t.packets.size(), 3u);
  EXPECT_EQ(t.skipped, 2u);  // IPv6, ICMP; NRB and ISB are not frames
  const uint64_t t0 = 1700000000ull * 1000000000ull + 123;
  EXPECT_EQ(t.packets[0].key, key(0x0a010101, 0x0a020202, 1111, 80, 6));
  EXPECT_EQ(t.packets[0].wire_len, 1514u);
  EXPECT_EQ(t.packets[0].ts_ns, t0);
  EXPECT_EQ(t.packets[1].key, key(0xc0a80001, 0xc0a80002, 53, 5353, 17));  // behind a VLAN tag
  EXPECT_EQ(t.packets[1].wire_len, 100u);
  EXPECT_EQ(t.packets[1].ts_ns, t0 + 1000);
  EXPECT_EQ(t.packets[2].key, key(0xac100001, 0xac100002, 22, 50000, 6));  // simple packet block
  EXPECT_EQ(t.packets[2].wire_len, 60u);
  EXPECT_EQ(t.packets[2].ts_ns, 0u);
}

TEST(TraceCommitted, BigEndianMicrosecondPcap) {
  Trace t = load_trace(kData + "/bigendian_usec.pcap");
  EXPECT_EQ(t.format, "pcap");
  ASSERT_EQ(t.packets.size(), 2u);
  EXPECT_EQ(t.skipped, 1u);  // ARP
  EXPECT_EQ(t.packets[0].key, key(0x08080404, 0x01010101, 443, 60000, 6));
  EXPECT_EQ(t.packets[0].ts_ns, 1600000000250000000ull);
  EXPECT_EQ(t.packets[0].wire_len, 1514u);
  EXPECT_EQ(t.packets[1].key, key(0x09090909, 0x01000001, 853, 40000, 17));
  EXPECT_EQ(t.packets[1].ts_ns, 1600000001999999000ull);
  EXPECT_EQ(t.packets[1].wire_len, 400u);
}

TEST(TraceCommitted, CookedNanosecondPcap) {
  Trace t = load_trace(kData + "/cooked.pcap");
  ASSERT_EQ(t.packets.size(), 2u);
  EXPECT_EQ(t.skipped, 1u);
  EXPECT_EQ(t.packets[0].key, key(0x0a000005, 0x0a000006, 5000, 6000, 17));
  EXPECT_EQ(t.packets[0].ts_ns, 1650000000000000005ull);
  EXPECT_EQ(t.packets[1].key, key(0x0a000006, 0x0a000005, 6000, 5000, 6));
  EXPECT_EQ(t.packets[1].ts_ns, 1650000000999999999ull);
  EXPECT_EQ(t.packets[1].wire_len, 1200u);
}

// The first record's source address, 10.13.13.10, is pcapng's magic number.
TEST(TraceCommitted, DatRecordsAsStored) {
  Trace t = load_trace(kData + "/tuples.dat");
  EXPECT_EQ(t.format, "dat");
  ASSERT_EQ(t.packets.size(), 3u);
  EXPECT_EQ(t.packets[0].key, key(0x0a0d0d0a, 0x0a000001, 1234, 80, 6));
  EXPECT_EQ(t.packets[1].key, key(0xc0000201, 0xc6336402, 53, 33333, 17));
  EXPECT_EQ(t.packets[2].key, t.packets[0].key);
  EXPECT_EQ(t.packets[0].wire_len, 0u);
  EXPECT_EQ(t.packets[0].ts_ns, 0u);
  EXPECT_EQ(ground_truth(t.packets).at(t.packets[0].key), 2u);
}

TEST_F(TraceLoad, DatWrittenHere) {
  Bytes b;
  for (uint8_t i = 0; i < 200; ++i) {
    for (int j = 0; j < 13; ++j) b.push_back(static_cast<uint8_t>(i * 13 + j));
  }
  write_file(path("x.DAT"), b);  // the extension in any case
  Trace t = load_trace(path("x.DAT"));
  ASSERT_EQ(t.packets.size(), 200u);
  for (size_t i = 0; i < 200; ++i) {
    for (int j = 0; j < 13; ++j) ASSERT_EQ(t.packets[i].key.bytes[j], b[i * 13 + j]);
  }
  EXPECT_EQ(t.skipped, 0u);
}

uint64_t error_offset(const std::string& p, std::string* what = nullptr) {
  try {
    load_trace(p);
  } catch (const TraceError& e) {
    EXPECT_EQ(e.path(), p);
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
    if (what) *what = e.what();
    return e.offset();
  }
  ADD_FAILURE() << p << ": expected a TraceError";
  return UINT64_MAX;
}

TEST_F(TraceLoad, DatSizeMustBeAMultipleOf13) {
  write_file(path("short.dat"), Bytes(31, 1));
  std::string what;
  EXPECT_EQ(error_offset(path("short.dat"), &what), 26u);
  EXPECT_NE(what.find("at byte 26"), std::string::npos) << what;
  write_file(path("tiny.dat"), Bytes(5, 1));
  EXPECT_EQ(error_offset(path("tiny.dat")), 0u);
}

TEST_F(TraceLoad, MissingEmptyAndUnknownFiles) {
  std::string what;
  EXPECT_EQ(error_offset(path("nope.pcap"), &what), 0u);
  EXPECT_NE(what.find("at byte 0"), std::string::npos);
  write_file(path("empty.pcap"), {});
  EXPECT_EQ(error_offset(path("empty.pcap"), &what), 0u);
  EXPECT_NE(what.find("empty"), std::string::npos) << what;
  write_file(path("empty.dat"), {});
  EXPECT_EQ(error_offset(path("empty.dat")), 0u);
  std::string text = "hello, this is not a capture\n";
  write_file(path("text.pcap"), Bytes(text.begin(), text.end()));
  EXPECT_EQ(error_offset(path("text.pcap"), &what), 0u);
  EXPECT_NE(what.find("not a pcap"), std::string::npos) << what;
  // 13-byte records without the .dat name are not guessed at.
  write_file(path("records.bin"), Bytes(26, 7));
  EXPECT_EQ(error_offset(path("records.bin")), 0u);
  EXPECT_EQ(error_offset(dir_), 0u);  // a directory
}

TEST_F(TraceLoad, CorruptPcapHeader) {
  write_pcap(path("ok.pcap"), DLT_EN10MB, sample_frames(), false);
  Bytes b = read_file(path("ok.pcap"));
  b[4] = 9;  // version major 9
  write_file(path("bad.pcap"), b);
  std::string what;
  EXPECT_EQ(error_offset(path("bad.pcap"), &what), 0u);
  EXPECT_NE(what.find("header"), std::string::npos) << what;
}

TEST_F(TraceLoad, CorruptRecordLengthNamesTheRecord) {
  std::vector<Frame> frames = sample_frames();
  write_pcap(path("ok.pcap"), DLT_EN10MB, frames, false);
  Bytes b = read_file(path("ok.pcap"));
  size_t rec2 = 24 + 16 + frames[0].data.size() + 16 + frames[1].data.size();
  // caplen of the third record (host order: libpcap wrote this machine's order)
  uint32_t huge = 0x10000000;
  std::memcpy(&b[rec2 + 8], &huge, 4);
  write_file(path("bad.pcap"), b);
  EXPECT_EQ(error_offset(path("bad.pcap")), rec2);
}

// Every truncation of a pcap: at a record boundary a shorter trace, inside a
// record an error at that record's first byte, inside the file header an
// error at 0.
TEST_F(TraceLoad, TruncatedPcapAtEveryLength) {
  std::vector<Frame> frames = sample_frames();
  write_pcap(path("ok.pcap"), DLT_EN10MB, frames, true);
  Bytes b = read_file(path("ok.pcap"));
  std::vector<size_t> starts = {24};
  for (const Frame& f : frames) starts.push_back(starts.back() + 16 + f.data.size());
  ASSERT_EQ(starts.back(), b.size());
  const std::vector<size_t> kept_before = {0, 1, 2, 2, 3, 3};  // packets kept in records [0, i)
  for (size_t len = 0; len <= b.size(); ++len) {
    std::string p = path("cut.pcap");
    write_file(p, b, len);
    if (len < 24) {
      EXPECT_EQ(error_offset(p), 0u) << len;
      continue;
    }
    size_t rec = 0;
    while (rec + 1 < starts.size() && starts[rec + 1] <= len) ++rec;
    if (starts[rec] == len) {
      Trace t = load_trace(p);
      EXPECT_EQ(t.packets.size(), kept_before[rec]) << len;
      EXPECT_EQ(t.packets.size() + t.skipped, rec) << len;
    } else {
      std::string what;
      EXPECT_EQ(error_offset(p, &what), starts[rec]) << len;
      EXPECT_NE(what.find("truncated"), std::string::npos) << what;
    }
  }
}

// pcapng blocks of mixed.pcapng (see make_captures.py): SHB 0, IDB 48,
// EPB 80, NRB 168, ISB 200, EPB 228, EPB (IPv6) 312, SPB 400, EPB (ICMP) 476,
// end 552. A truncated block is reported where the block after the last
// packet block starts (libpcap skips NRB and ISB without telling).
TEST_F(TraceLoad, TruncatedPcapngAtEveryLength) {
  Bytes b = read_file(kData + "/mixed.pcapng");
  ASSERT_EQ(b.size(), 552u);
  const std::vector<size_t> boundaries = {80, 168, 200, 228, 312, 400, 476, 552};
  const std::vector<size_t> packet_ends = {168, 312, 400, 476, 552};
  for (size_t len = 0; len <= b.size(); ++len) {
    std::string p = path("cut.pcapng");
    write_file(p, b, len);
    bool boundary = std::find(boundaries.begin(), boundaries.end(), len) != boundaries.end();
    size_t frames = 0, last_end = 80;
    for (size_t e : packet_ends) {
      if (e <= len) {
        ++frames;
        last_end = e;
      }
    }
    if (len < 80) {
      EXPECT_EQ(error_offset(p), 0u) << len;
    } else if (boundary) {
      Trace t = load_trace(p);
      EXPECT_EQ(t.packets.size() + t.skipped, frames) << len;
    } else {
      EXPECT_EQ(error_offset(p), last_end) << len;
    }
  }
}

// Corrupted captures: every outcome is a Trace or a TraceError, never a
// crash or another exception.
TEST_F(TraceLoad, MutatedCapturesNeverCrash) {
  write_pcap(path("ok.pcap"), DLT_EN10MB, sample_frames(), false);
  std::vector<std::pair<std::string, Bytes>> seeds = {
      {"m.pcap", read_file(path("ok.pcap"))},
      {"m.pcapng", read_file(kData + "/mixed.pcapng")},
      {"m2.pcap", read_file(kData + "/cooked.pcap")},
  };
  uint64_t state = 12345;
  auto next = [&state] {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  static const uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x08, 0x45, 0x81, 0x0a, 0x06, 0x11};
  size_t traces = 0, errors = 0;
  for (auto& [name, seed] : seeds) {
    ASSERT_FALSE(seed.empty());
    for (int round = 0; round < 800; ++round) {
      Bytes b = seed;
      int edits = 1 + static_cast<int>(next() % 4);
      for (int e = 0; e < edits; ++e) {
        // Half of the edits land in the first 64 bytes, where the headers are.
        size_t span = (next() & 1) ? std::min<size_t>(64, b.size()) : b.size();
        size_t at = next() % span;
        switch (next() % 3) {
          case 0: b[at] ^= static_cast<uint8_t>(1u << (next() % 8)); break;
          case 1: b[at] = kInteresting[next() % sizeof kInteresting]; break;
          default: b[at] = static_cast<uint8_t>(next()); break;
        }
      }
      if (next() % 4 == 0) b.resize(next() % (b.size() + 1));
      std::string p = path(name);
      write_file(p, b);
      try {
        Trace t = load_trace(p);
        ++traces;
        for (const Packet& pkt : t.packets) ASSERT_TRUE(pkt.key.proto() == 6 || pkt.key.proto() == 17);
      } catch (const TraceError&) {
        ++errors;
      } catch (const std::exception& e) {
        FAIL() << name << " round " << round << ": unexpected exception " << e.what();
      }
    }
  }
  // Both outcomes occur, so the mutations do reach past the headers.
  EXPECT_GT(traces, 100u);
  EXPECT_GT(errors, 100u);
}

}  // namespace
}  // namespace dpukit::measure
