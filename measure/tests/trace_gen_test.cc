// generate_trace: exact packet counts, flow bounds, the presets' shapes,
// well-formed headers and determinism.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "dpukit/measure.h"

namespace dpukit::measure {
namespace {

namespace fs = std::filesystem;

class Gen : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "dpukit-gen-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  Trace make(const std::string& preset, uint64_t flows, uint64_t packets, uint64_t seed = 1, double skew = 0,
             const std::string& name = "g.pcap") {
    GenOptions o;
    o.preset = preset;
    o.flows = flows;
    o.packets = packets;
    o.seed = seed;
    o.skew = skew;
    generate_trace(o, path(name));
    return load_trace(path(name));
  }

  std::string dir_;
};

// Flow sizes, largest first.
std::vector<uint64_t> sizes(const Trace& t) {
  std::vector<uint64_t> s;
  for (const auto& [k, v] : ground_truth(t.packets)) s.push_back(v);
  std::sort(s.begin(), s.end(), std::greater<>());
  return s;
}

double top_share(const std::vector<uint64_t>& s, double fraction) {
  size_t top = std::max<size_t>(1, static_cast<size_t>(static_cast<double>(s.size()) * fraction + 0.5));
  uint64_t sum = 0, all = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    all += s[i];
    if (i < top) sum += s[i];
  }
  return static_cast<double>(sum) / static_cast<double>(all);
}

TEST_F(Gen, ExactCountsFlowBoundAndSaneFrames) {
  for (const char* preset : {"backbone", "datacenter", "zipf"}) {
    Trace t = make(preset, 3000, 40000);
    EXPECT_EQ(t.format, "pcap");
    ASSERT_EQ(t.packets.size(), 40000u) << preset;
    EXPECT_EQ(t.skipped, 0u) << preset;
    auto s = sizes(t);
    EXPECT_LE(s.size(), 3000u) << preset;
    EXPECT_GT(s.size(), 1000u) << preset;
    size_t tcp = 0;
    for (size_t i = 0; i < t.packets.size(); ++i) {
      const Packet& p = t.packets[i];
      ASSERT_TRUE(p.wire_len >= 64 && p.wire_len <= 1514) << p.wire_len;
      ASSERT_TRUE(p.key.proto() == 6 || p.key.proto() == 17);
      tcp += p.key.proto() == 6;
      if (i > 0) {
        ASSERT_GT(p.ts_ns, t.packets[i - 1].ts_ns) << preset << " packet " << i;
      }
    }
    EXPECT_GT(tcp, t.packets.size() / 2) << preset;
    EXPECT_LT(tcp, t.packets.size()) << preset;
  }
  // Odd sizes: a single flow, more flows than packets, no packets.
  EXPECT_EQ(sizes(make("datacenter", 1, 17)).size(), 1u);
  Trace few = make("backbone", 1000000, 10);
  EXPECT_EQ(few.packets.size(), 10u);
  EXPECT_EQ(make("zipf", 5, 0).packets.size(), 0u);
}

TEST_F(Gen, DatacenterHeavyFlowsCarryMostPackets) {
  auto s = sizes(make("datacenter", 10000, 200000));
  double share = top_share(s, 0.01);
  EXPECT_GE(share, 0.75);
  EXPECT_LE(share, 0.85);
  // The rest are mice.
  EXPECT_LE(s[s.size() / 2], 10u);
}

TEST_F(Gen, BackboneIsHeavyTailedWithMostlyMice) {
  Trace t = make("backbone", 10000, 200000);
  auto s = sizes(t);
  size_t mice = static_cast<size_t>(std::count_if(s.begin(), s.end(), [](uint64_t v) { return v <= 3; }));
  EXPECT_GT(mice * 2, s.size()) << mice << " of " << s.size();
  EXPECT_GT(s[0], t.packets.size() / 100);  // an elephant above 1% of all packets
  EXPECT_GT(top_share(s, 0.01), 0.5);
}

TEST_F(Gen, ZipfFollowsTheSkew) {
  // With exponent s over n ranks the top flow gets 1 / H(n, s) of the packets.
  auto h = [](int n, double s) {
    double sum = 0;
    for (int r = 1; r <= n; ++r) sum += std::pow(r, -s);
    return sum;
  };
  for (double skew : {0.6, 1.0, 1.5}) {
    Trace t = make("zipf", 1000, 100000, 3, skew);
    auto s = sizes(t);
    double expect = 1.0 / h(1000, skew);
    double got = static_cast<double>(s[0]) / 100000.0;
    EXPECT_NEAR(got, expect, 0.1 * expect + 0.002) << skew;
  }
}

TEST_F(Gen, DeterministicBySeed) {
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  make("backbone", 500, 5000, 7, 0, "a.pcap");
  make("backbone", 500, 5000, 7, 0, "b.pcap");
  make("backbone", 500, 5000, 8, 0, "c.pcap");
  make("datacenter", 500, 5000, 7, 0, "d.pcap");
  EXPECT_EQ(bytes(path("a.pcap")), bytes(path("b.pcap")));
  EXPECT_NE(bytes(path("a.pcap")), bytes(path("c.pcap")));
  EXPECT_NE(bytes(path("a.pcap")), bytes(path("d.pcap")));
  EXPECT_EQ(bytes(path("a.pcap")).size(), 24 + 5000 * (16 + 64));
}

// The headers as written: lengths, checksum, capture size.
TEST_F(Gen, HeadersAreWellFormed) {
  GenOptions o;
  o.preset = "backbone";
  o.flows = 200;
  o.packets = 2000;
  generate_trace(o, path("h.pcap"));
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path("h.pcap").c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  ASSERT_NE(p, nullptr) << err;
  EXPECT_EQ(pcap_datalink(p), DLT_EN10MB);
  pcap_pkthdr* h;
  const u_char* d;
  int n = 0;
  while (pcap_next_ex(p, &h, &d) == 1) {
    ++n;
    ASSERT_EQ(h->caplen, std::min<uint32_t>(h->len, 64));
    ASSERT_EQ(d[12], 0x08);
    ASSERT_EQ(d[13], 0x00);
    const u_char* ip = d + 14;
    ASSERT_EQ(ip[0], 0x45);
    uint32_t total = (ip[2] << 8) | ip[3];
    ASSERT_EQ(total, h->len - 14);
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += (ip[i] << 8) | ip[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    ASSERT_EQ(sum, 0xffffu) << "IPv4 checksum";
    if (ip[9] == 17) {
      ASSERT_EQ(static_cast<uint32_t>((ip[24] << 8) | ip[25]), total - 20);
    } else {
      ASSERT_EQ(ip[9], 6);
      ASSERT_EQ(ip[32] >> 4, 5);  // TCP data offset
    }
  }
  pcap_close(p);
  EXPECT_EQ(n, 2000);
}

TEST_F(Gen, RejectsBadOptions) {
  GenOptions o;
  o.packets = 10;
  o.flows = 10;
  o.preset = "campus";
  EXPECT_THROW(generate_trace(o, path("x.pcap")), std::invalid_argument);
  o.preset = "zipf";
  o.skew = -1;
  EXPECT_THROW(generate_trace(o, path("x.pcap")), std::invalid_argument);
  o.skew = 0;
  o.flows = 0;
  EXPECT_THROW(generate_trace(o, path("x.pcap")), std::invalid_argument);
  o.flows = 10;
  EXPECT_THROW(generate_trace(o, path("no/such/dir/x.pcap")), std::runtime_error);
}

}  // namespace
}  // namespace dpukit::measure
