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
#include <unordered_map>
#include <unordered_set>
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

// A soak's wave: a tenth of the flows heavy with equal counts (their truth is
// known), mice for the rest, packets shuffled across the whole wave.
TEST_F(Gen, ChurnHeavyFlowsHaveEqualCountsAndSpanTheWave) {
  GenOptions o;
  o.preset = "churn";
  o.flows = 1000;
  o.packets = 50001;
  o.heavy_share = 0.9;
  generate_trace(o, path("w.pcap"));
  Trace t = load_trace(path("w.pcap"));
  ASSERT_EQ(t.packets.size(), 50001u);
  GroundTruth truth = ground_truth(t.packets);
  auto s = sizes(t);
  // 45,001 heavy packets over 100 flows: one flow with 451, 99 with 450.
  ASSERT_GT(s.size(), 100u);
  EXPECT_EQ(s[0], 451u);
  for (size_t i = 1; i < 100; ++i) EXPECT_EQ(s[i], 450u) << i;
  EXPECT_LT(s[100], 40u);  // the largest mouse (about 5.6 packets on average)
  uint64_t heavy = 0;
  for (size_t i = 0; i < 100; ++i) heavy += s[i];
  EXPECT_EQ(heavy, 45001u);
  // Shuffled: every heavy flow has packets in the first and in the last tenth.
  std::unordered_map<FlowKey, std::pair<size_t, size_t>, FlowKeyHash> span;
  for (size_t i = 0; i < t.packets.size(); ++i) {
    auto [it, fresh] = span.try_emplace(t.packets[i].key, i, i);
    it->second.second = i;
  }
  for (const auto& [k, n] : truth) {
    if (n < 450) continue;
    EXPECT_LT(span[k].first, t.packets.size() / 10) << k.str();
    EXPECT_GT(span[k].second, t.packets.size() * 9 / 10) << k.str();
  }
  // heavy_share moves the split; a single flow takes every packet.
  o.heavy_share = 0.5;
  generate_trace(o, path("h.pcap"));
  EXPECT_EQ(sizes(load_trace(path("h.pcap")))[99], 250u);
  EXPECT_EQ(sizes(make("churn", 1, 33)), std::vector<uint64_t>{33});
}

// Waves numbered apart share no flow, and the first wave is the trace as
// written before first_flow existed (same options, same bytes).
TEST_F(Gen, FirstFlowGivesEachWaveNewFlows) {
  auto keys = [](const Trace& t) {
    std::unordered_set<FlowKey, FlowKeyHash> k;
    for (const auto& p : t.packets) k.insert(p.key);
    return k;
  };
  GenOptions o;
  o.preset = "churn";
  o.flows = 2000;
  o.packets = 20000;
  std::vector<std::unordered_set<FlowKey, FlowKeyHash>> waves;
  for (uint64_t w = 0; w < 4; ++w) {
    o.first_flow = w * o.flows;
    generate_trace(o, path("w" + std::to_string(w) + ".pcap"));
    waves.push_back(keys(load_trace(path("w" + std::to_string(w) + ".pcap"))));
    ASSERT_GT(waves.back().size(), 1000u);
  }
  for (size_t a = 0; a < waves.size(); ++a)
    for (size_t b = a + 1; b < waves.size(); ++b)
      for (const FlowKey& k : waves[a]) ASSERT_EQ(waves[b].count(k), 0u) << a << " and " << b << ": " << k.str();
  // Overlapping ranges share flows (the offset is a rank, not a new key space).
  o.first_flow = o.flows / 2;
  generate_trace(o, path("half.pcap"));
  auto half = keys(load_trace(path("half.pcap")));
  size_t shared = 0;
  for (const FlowKey& k : half) shared += waves[0].count(k) + waves[1].count(k);
  EXPECT_GT(shared, half.size() / 2);
  // Any preset: backbone with an offset brings new flows too.
  Trace b0 = make("backbone", 500, 5000, 7, 0, "b0.pcap");
  GenOptions ob;
  ob.flows = 500;
  ob.packets = 5000;
  ob.seed = 7;
  ob.first_flow = 500;
  generate_trace(ob, path("b1.pcap"));
  auto k0 = keys(b0), k1 = keys(load_trace(path("b1.pcap")));
  for (const FlowKey& k : k1) ASSERT_EQ(k0.count(k), 0u) << k.str();
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
  o.heavy_share = 1.5;
  EXPECT_THROW(generate_trace(o, path("x.pcap")), std::invalid_argument);
  o.heavy_share = 0.9;
  o.first_flow = (uint64_t{1} << 48) - 9;  // the last flow past the bijection's domain
  EXPECT_THROW(generate_trace(o, path("x.pcap")), std::invalid_argument);
  o.first_flow = (uint64_t{1} << 48) - 10;
  EXPECT_NO_THROW(generate_trace(o, path("x.pcap")));
  o.first_flow = 0;
  EXPECT_THROW(generate_trace(o, path("no/such/dir/x.pcap")), std::runtime_error);
}

}  // namespace
}  // namespace dpukit::measure
