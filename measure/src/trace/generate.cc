// generate_trace: synthetic pcap files (Ethernet + IPv4 + TCP/UDP). Each
// packet picks its flow from the preset's flow-size law; a flow's 5-tuple
// is a keyed bijection of its rank; same options and seed, byte-identical
// file. The presets, headers and timestamps: docs/measure.md, "The
// synthetic traces (generate_trace)".
#include <pcap/pcap.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpukit/core/random.h"
#include "dpukit/measure.h"

namespace dpukit::measure {

namespace {

using Rng = SplitMix64;

// A keyed bijection on 48-bit values: add, then xor-shifts and odd multiplies
// modulo 2^48 (each step is invertible).
uint64_t bij48(uint64_t x, uint64_t key) {
  constexpr uint64_t kMask = (uint64_t{1} << 48) - 1;
  x = (x + key) & kMask;
  x ^= x >> 23;
  x = (x * 0x9e3779b97f4bull) & kMask;
  x ^= x >> 25;
  x = (x * 0xc2b2ae3d27d5ull) & kMask;
  x ^= x >> 24;
  return x;
}

// Samples ranks 0..n-1 with P(r) ~ (r+1)^-s by binary search in the CDF.
class ZipfTable {
 public:
  ZipfTable(uint64_t n, double s) : cdf_(n) {
    double acc = 0;
    for (uint64_t r = 0; r < n; ++r) {
      acc += std::pow(static_cast<double>(r + 1), -s);
      cdf_[r] = acc;
    }
    total_ = acc;
  }
  uint64_t sample(Rng& rng) const {
    double u = rng.uniform() * total_;
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    if (it == cdf_.end()) --it;
    return static_cast<uint64_t>(it - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
  double total_ = 0;
};

enum class Preset { kBackbone, kDatacenter, kZipf, kChurn };

struct Flow {
  uint32_t src_ip, dst_ip;
  uint16_t sport, dport;
  uint8_t proto;
};

uint16_t pick_port(uint64_t h, const uint16_t* popular, const uint8_t* percent, int n) {
  uint32_t roll = static_cast<uint32_t>(h % 100);
  uint32_t acc = 0;
  for (int i = 0; i < n; ++i) {
    acc += percent[i];
    if (roll < acc) return popular[i];
  }
  return static_cast<uint16_t>(1024 + (h >> 8) % (65536 - 1024));
}

// Public-looking first octets for the backbone's addresses (no 0, 10, 127,
// 172, 192, multicast or reserved).
uint8_t public_octet(uint64_t h) {
  static constexpr uint8_t kOctets[] = {4,   8,   12,  17,  23,  31,  38,  45,  52,  61,  66,  74,  81,  93,
                                        104, 108, 128, 131, 138, 142, 151, 157, 163, 176, 185, 193, 199, 203,
                                        208, 212, 216, 221};
  return kOctets[h % sizeof kOctets];
}

Flow make_flow(Preset preset, uint64_t rank, uint64_t seed) {
  uint64_t x = bij48(rank, mix64(seed ^ 0x5eed));
  uint64_t h = mix64(rank * 0x9e3779b97f4a7c15ull ^ mix64(seed + 17));
  uint64_t h2 = mix64(h);
  Flow f;
  uint32_t lo_src = static_cast<uint32_t>(x & 0xffffff), lo_dst = static_cast<uint32_t>((x >> 24) & 0xffffff);
  if (preset == Preset::kDatacenter) {
    f.src_ip = (10u << 24) | lo_src;
    f.dst_ip = (10u << 24) | lo_dst;
    f.proto = (h % 100) < 95 ? 6 : 17;
    static constexpr uint16_t kPorts[] = {11211, 6379, 3306, 9092, 443};
    static constexpr uint8_t kPct[] = {20, 20, 15, 15, 10};
    f.dport = pick_port(h2, kPorts, kPct, 5);
  } else {
    f.src_ip = (uint32_t{public_octet(h >> 40)} << 24) | lo_src;
    f.dst_ip = (uint32_t{public_octet(h >> 48)} << 24) | lo_dst;
    f.proto = (h % 100) < 85 ? 6 : 17;
    if (f.proto == 6) {
      static constexpr uint16_t kPorts[] = {443, 80};
      static constexpr uint8_t kPct[] = {50, 20};
      f.dport = pick_port(h2, kPorts, kPct, 2);
    } else {
      static constexpr uint16_t kPorts[] = {53, 443, 123};
      static constexpr uint8_t kPct[] = {40, 30, 5};
      f.dport = pick_port(h2, kPorts, kPct, 3);
    }
  }
  f.sport = static_cast<uint16_t>(32768 + (h2 >> 32) % 28232);  // Linux's ephemeral range
  return f;
}

uint32_t frame_size(Preset preset, bool heavy, Rng& rng) {
  uint32_t roll = static_cast<uint32_t>(rng.below(100));
  if (preset == Preset::kDatacenter) {
    if (heavy) return roll < 90 ? 1514 : 66;
    return roll < 60 ? rng.range(64, 512) : 1514;
  }
  if (roll < 40) return rng.range(64, 80);
  if (roll < 50) return rng.range(570, 600);
  if (roll < 65) return rng.range(81, 1499);
  return 1514;
}

void put16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, v >> 16);
  put16(p + 2, v);
}

constexpr uint32_t kSnap = 64;

// Fills `buf` (kSnap bytes, zeroed past the headers) for one packet; returns
// the captured length.
uint32_t build_frame(uint8_t* buf, const Flow& f, uint32_t frame_len, uint16_t ip_id, uint64_t rank) {
  std::memset(buf, 0, kSnap);
  // Ethernet: locally administered unicast MACs (02:...) from the addresses.
  buf[0] = 0x02;
  put32(buf + 1, f.dst_ip);
  buf[5] = 0x01;
  buf[6] = 0x02;
  put32(buf + 7, f.src_ip);
  buf[11] = 0x02;
  put16(buf + 12, 0x0800);
  uint8_t* ip = buf + 14;
  uint32_t total = frame_len - 14;
  ip[0] = 0x45;
  put16(ip + 2, total);
  put16(ip + 4, ip_id);
  put16(ip + 6, f.proto == 6 ? 0x4000 : 0);  // DF on TCP
  ip[8] = 64;
  ip[9] = f.proto;
  put32(ip + 12, f.src_ip);
  put32(ip + 16, f.dst_ip);
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t{ip[i]} << 8) | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  put16(ip + 10, ~sum & 0xffff);
  uint8_t* l4 = ip + 20;
  put16(l4, f.sport);
  put16(l4 + 2, f.dport);
  if (f.proto == 6) {
    put32(l4 + 4, static_cast<uint32_t>(mix64(rank) + ip_id * 1448u));  // seq
    put32(l4 + 8, static_cast<uint32_t>(mix64(rank + 1)));                // ack
    l4[12] = 0x50;                                                        // data offset 5
    l4[13] = frame_len > 80 ? 0x18 : 0x10;                                // PSH|ACK or ACK
    put16(l4 + 14, 65535);                                                // window
  } else {
    put16(l4 + 4, total - 20);
  }
  return frame_len < kSnap ? frame_len : kSnap;
}

Preset parse_preset(const std::string& name) {
  if (name == "backbone") return Preset::kBackbone;
  if (name == "datacenter") return Preset::kDatacenter;
  if (name == "zipf") return Preset::kZipf;
  if (name == "churn") return Preset::kChurn;
  throw std::invalid_argument("unknown trace preset '" + name + "' (backbone, datacenter, zipf, churn)");
}

// The churn preset's flow of every packet, relative to first_flow: heavy
// ranks 0..heavy-1 each exactly their share, mice drawn uniformly, then
// shuffled (Fisher-Yates), so that the heavy counts are exact and no flow
// bunches at one end of the wave.
std::vector<uint32_t> churn_ranks(uint64_t flows, uint64_t packets, double heavy_share, Rng& rng) {
  const uint64_t heavy_flows = std::max<uint64_t>(1, flows / 10);
  const uint64_t heavy_packets = heavy_flows >= flows
                                     ? packets
                                     : static_cast<uint64_t>(std::llround(heavy_share * static_cast<double>(packets)));
  std::vector<uint32_t> ranks;
  ranks.reserve(packets);
  for (uint64_t r = 0; r < heavy_flows; ++r) {
    uint64_t n = heavy_packets / heavy_flows + (r < heavy_packets % heavy_flows ? 1 : 0);
    ranks.insert(ranks.end(), n, static_cast<uint32_t>(r));
  }
  while (ranks.size() < packets) ranks.push_back(static_cast<uint32_t>(heavy_flows + rng.below(flows - heavy_flows)));
  for (uint64_t i = packets; i > 1; --i) std::swap(ranks[i - 1], ranks[rng.below(i)]);
  return ranks;
}

struct DumperCloser {
  void operator()(pcap_dumper_t* d) const { pcap_dump_close(d); }
};
struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};

}  // namespace

void generate_trace(const GenOptions& o, const std::string& out_path) {
  const Preset preset = parse_preset(o.preset);
  if (!(o.skew >= 0) || !std::isfinite(o.skew)) throw std::invalid_argument("skew must be a finite number >= 0");
  if (o.flows == 0 && o.packets > 0) throw std::invalid_argument("flows must be >= 1");
  constexpr uint64_t kMaxFlows = uint64_t{1} << 26;  // the CDF table: 8 bytes per flow
  if (o.flows > kMaxFlows) throw std::invalid_argument("flows must be <= " + std::to_string(kMaxFlows));
  if (o.first_flow > (uint64_t{1} << 48) - o.flows)  // the bijection's domain: 48 bits
    throw std::invalid_argument("first_flow + flows must be <= 2^48");
  if (!(o.heavy_share >= 0 && o.heavy_share <= 1)) throw std::invalid_argument("heavy_share must be in [0, 1]");
  constexpr uint64_t kMaxChurnPackets = uint64_t{1} << 28;  // churn keeps 4 bytes per packet to shuffle
  if (preset == Preset::kChurn && o.packets > kMaxChurnPackets)
    throw std::invalid_argument("churn: packets must be <= " + std::to_string(kMaxChurnPackets));

  // Flow-size laws.
  const double skew = o.skew > 0 ? o.skew : (preset == Preset::kBackbone ? 1.1 : 1.0);
  uint64_t heavy_flows = 0, heavy_packets = 0;
  std::unique_ptr<ZipfTable> table;
  if (preset == Preset::kDatacenter) {
    heavy_flows = std::max<uint64_t>(1, (o.flows + 99) / 100);
    if (heavy_flows >= o.flows) {
      heavy_flows = o.flows;
      heavy_packets = o.packets;
    } else {
      heavy_packets = static_cast<uint64_t>(std::llround(0.8 * static_cast<double>(o.packets)));
    }
    if (heavy_flows > 0) table = std::make_unique<ZipfTable>(heavy_flows, skew);
  } else if (o.flows > 0 && preset != Preset::kChurn) {
    table = std::make_unique<ZipfTable>(o.flows, skew);
  }
  const double mean_gap_ns = preset == Preset::kDatacenter ? 500.0 : 1000.0;

  pcap_t* dead_raw = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, kSnap, PCAP_TSTAMP_PRECISION_NANO);
  if (!dead_raw) throw std::runtime_error("pcap_open_dead failed");
  std::unique_ptr<pcap_t, PcapCloser> dead(dead_raw);
  FILE* file = std::fopen(out_path.c_str(), "wb");
  if (!file) throw std::runtime_error(out_path + ": cannot create: " + std::strerror(errno));
  std::vector<char> iobuf(1 << 20);
  std::setvbuf(file, iobuf.data(), _IOFBF, iobuf.size());
  pcap_dumper_t* dumper_raw = pcap_dump_fopen(dead.get(), file);
  if (!dumper_raw) {
    std::string err = pcap_geterr(dead.get());
    std::fclose(file);
    throw std::runtime_error(out_path + ": " + err);
  }
  std::unique_ptr<pcap_dumper_t, DumperCloser> dumper(dumper_raw);  // closes `file`; declared after iobuf

  // A wave past the first draws its own order (traces from 0 stay as they were).
  Rng rng(mix64(o.seed) ^ 0x7472616365ull ^ (o.first_flow ? mix64(o.first_flow) : 0));
  std::vector<uint32_t> churn;
  if (preset == Preset::kChurn && o.packets > 0) churn = churn_ranks(o.flows, o.packets, o.heavy_share, rng);
  uint64_t ts = 1700000000ull * 1000000000ull;
  uint8_t buf[kSnap];
  uint64_t heavy_left = heavy_packets;
  for (uint64_t i = 0; i < o.packets; ++i) {
    uint64_t rank;
    bool heavy = false;
    if (preset == Preset::kDatacenter) {
      // Exactly heavy_packets of the packets go to the heavy flows, in random
      // positions: heavy with probability (heavy left) / (packets left).
      uint64_t left = o.packets - i;
      heavy = rng.below(left) < heavy_left;
      if (heavy) {
        --heavy_left;
        rank = table->sample(rng);
      } else {
        rank = heavy_flows + rng.below(o.flows - heavy_flows);
      }
    } else if (preset == Preset::kChurn) {
      rank = churn[i];
    } else {
      rank = table->sample(rng);
    }
    rank += o.first_flow;
    Flow f = make_flow(preset, rank, o.seed);
    uint32_t len = frame_size(preset, heavy, rng);
    uint32_t cap = build_frame(buf, f, len, static_cast<uint16_t>(i), rank);
    // Exponential gaps, at least 1 ns so that timestamps strictly increase.
    double gap = -std::log1p(-rng.uniform()) * mean_gap_ns;
    ts += 1 + static_cast<uint64_t>(gap);
    struct pcap_pkthdr h;
    h.ts.tv_sec = static_cast<time_t>(ts / 1000000000ull);
    h.ts.tv_usec = static_cast<suseconds_t>(ts % 1000000000ull);  // nanoseconds in a nano-precision dump
    h.caplen = cap;
    h.len = len;
    pcap_dump(reinterpret_cast<u_char*>(dumper.get()), &h, buf);
  }
  if (pcap_dump_flush(dumper.get()) != 0 || std::ferror(file)) {
    throw std::runtime_error(out_path + ": write error: " + std::strerror(errno));
  }
}

}  // namespace dpukit::measure
