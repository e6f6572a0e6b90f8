// Segmentation (§4, network scenario): TCP segmentation as software GSO/TSO
// does it (tcp_seg) and IPv4 fragmentation by RFC 791 (ip_frag).
//
// tcp_seg: one unit of work is one Ethernet/IPv4/TCP super-frame cut into
// segments of at most `mss` payload bytes, each a full Ethernet+IPv4+TCP
// packet with its IPv4 and TCP checksums computed in software (a host
// without checksum offload must do that), the segments concatenated in
// order. The header rules are DPDK GSO's (lib/gso, gso_tcp4.c): headers
// replicated; per segment the IPv4 total length, identification = the
// input's + segment index, header checksum; TCP sequence number advanced by
// the payload before it; PSH and FIN cleared on all but the last segment.
// Where Linux differs, DPDK is followed: Linux's tcp_gso_segment also clears
// CWR on all but the first segment, DPDK leaves CWR as the input had it on
// every segment, and so does ref. A super-frame whose payload fits one
// segment gives that one packet with its checksums recomputed. An input that
// is itself an IP fragment (MF or an offset) passes through unchanged, as
// rte_gso_segment refuses fragments and a TCP checksum over a fragment is
// meaningless.
//
// ip_frag: one unit of work is one Ethernet/IPv4 packet fragmented for an
// IP MTU of `mtu` bytes: every fragment an Ethernet header (the input's) +
// IPv4 header + at most mtu - header bytes of data, a multiple of 8 except
// in the last; the identification copied; offsets in 8-byte units added to
// the input's own offset; MF on all but the last (on all of them when the
// input already had MF); total length and header checksum per fragment;
// options without the copied flag kept in the first fragment only (RFC 791
// §3.1), the rest padded with EOL to a 4-byte boundary. A packet that fits
// (total length <= mtu) is sent unchanged, DF or not; a DF packet that does
// not fit is dropped (empty output), as RFC 791 says. Both backends check
// the fit before fragmenting, as DPDK's examples/ip_fragmentation does:
// rte_ipv4_fragment_packet itself refuses every DF packet (-ENOTSUP), and
// sizes fragments by the MTU rounded down to 8 data bytes even when the
// whole packet fits, so a 256-byte packet at mtu 256 would come out as 232
// + 4 data bytes instead of one piece.
//
// Published test vectors hardly exist for either operation (RFC 791
// Appendix A gives the header fields of one fragmentation example); the
// tests rely on the RFC rules, a hand-worked example and agreement with
// DPDK's independent implementation.
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_gso.h>
#include <rte_ip.h>
#include <rte_ip_frag.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "dpdk_env.h"
#include "operator.h"
#include "packet.h"

namespace dpukit::bench {
namespace {

constexpr uint8_t kTcpFin = 0x01, kTcpPsh = 0x08;
constexpr uint16_t kIpDf = 0x4000, kIpMf = 0x2000, kIpOffsetMask = 0x1FFF;
constexpr size_t kMaxIpHeader = 60, kMaxTcpHeader = 60;
// RFC 791: every module forwards 68 octets unfragmented (a 60-byte header
// plus the 8-byte minimum fragment); DPDK refuses smaller MTUs too.
constexpr uint64_t kMinMtu = 68, kMaxMtu = 65535;
// gso_size (header + MSS) is a 16-bit field; the header may be 134 bytes.
constexpr uint64_t kMaxMss = 65535 - (kEthLen + kMaxIpHeader + kMaxTcpHeader);

const char* const kNoDevice =
    "no DPDK device class for segmentation; on a DPU TSO and fragmentation are NIC offloads set per port through "
    "ethdev, not callable per buffer";

// The fields both operators read from an Ethernet/IPv4 frame.
struct Ipv4Frame {
  size_t ihl = 0;        // IPv4 header bytes
  size_t ip_total = 0;   // IPv4 total length (the frame may carry Ethernet padding beyond it)
  uint16_t frag = 0;     // flags and fragment offset
  size_t frame() const { return kEthLen + ip_total; }
};

Ipv4Frame parse_ipv4_frame(std::span<const uint8_t> in, const std::string& op) {
  if (in.size() < kEthLen + kIpv4Len || load_be16(&in[12]) != 0x0800 || (in[kEthLen] >> 4) != 4)
    throw std::invalid_argument(op + ": the input is not an Ethernet II frame carrying IPv4");
  Ipv4Frame f;
  const uint8_t* ip = &in[kEthLen];
  f.ihl = (ip[0] & 0x0F) * 4u;
  f.ip_total = load_be16(&ip[2]);
  f.frag = load_be16(&ip[6]);
  if (f.ihl < kIpv4Len || f.ip_total < f.ihl || f.frame() > in.size())
    throw std::invalid_argument(op + ": IPv4 header length " + std::to_string(f.ihl) + " or total length " +
                                std::to_string(f.ip_total) + " does not fit the " + std::to_string(in.size()) +
                                "-byte frame");
  return f;
}

bool is_fragment(uint16_t frag) { return (frag & (kIpMf | kIpOffsetMask)) != 0; }

struct TcpFrame : Ipv4Frame {
  size_t thl = 0;  // TCP header bytes
  size_t headers() const { return kEthLen + ihl + thl; }
};

TcpFrame parse_tcp_frame(std::span<const uint8_t> in) {
  TcpFrame f;
  static_cast<Ipv4Frame&>(f) = parse_ipv4_frame(in, "tcp_seg");
  if (in[kEthLen + 9] != kProtoTcp) throw std::invalid_argument("tcp_seg: the IPv4 packet does not carry TCP");
  if (f.ip_total < f.ihl + kTcpLen) throw std::invalid_argument("tcp_seg: the IPv4 packet is too short for TCP");
  f.thl = (in[kEthLen + f.ihl + 12] >> 4) * 4u;
  if (f.thl < kTcpLen || f.ihl + f.thl > f.ip_total)
    throw std::invalid_argument("tcp_seg: TCP data offset " + std::to_string(f.thl) + " does not fit the packet");
  return f;
}

size_t pieces(size_t data, size_t unit) { return data <= unit ? 1 : (data + unit - 1) / unit; }

// ---------------------------------------------------------------- ref

class RefTcpSeg final : public Kernel {
 public:
  explicit RefTcpSeg(size_t mss) : mss_(mss) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const TcpFrame f = parse_tcp_frame(in);
    if (is_fragment(f.frag)) {
      out.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(f.frame()));
      return;
    }
    const size_t hdr = f.headers();
    const size_t payload = f.frame() - hdr;
    const size_t n = pieces(payload, mss_);
    out.resize(n * hdr + payload);
    const uint16_t id0 = load_be16(&in[kEthLen + 4]);
    const uint32_t seq0 = load_be32(&in[kEthLen + f.ihl + 4]);
    uint8_t* seg = out.data();
    size_t done = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t len = std::min(mss_, payload - done);
      std::copy(in.begin(), in.begin() + static_cast<ptrdiff_t>(hdr), seg);
      std::copy(in.begin() + static_cast<ptrdiff_t>(hdr + done), in.begin() + static_cast<ptrdiff_t>(hdr + done + len),
                seg + hdr);
      uint8_t* ip = seg + kEthLen;
      uint8_t* tcp = ip + f.ihl;
      store_be16(&ip[2], static_cast<uint16_t>(f.ihl + f.thl + len));
      store_be16(&ip[4], static_cast<uint16_t>(id0 + i));  // wraps mod 2^16 like the field
      store_be16(&ip[10], 0);
      store_be16(&ip[10], inet_checksum(std::span<const uint8_t>(ip, f.ihl)));
      store_be32(&tcp[4], static_cast<uint32_t>(seq0 + done));  // wraps mod 2^32 like sequence space
      if (i + 1 < n) tcp[13] &= static_cast<uint8_t>(~(kTcpPsh | kTcpFin));
      store_be16(&tcp[16], 0);
      store_be16(&tcp[16], l4_checksum_ipv4(std::span<const uint8_t>(ip, f.ihl + f.thl + len)));
      seg += hdr + len;
      done += len;
    }
  }

 private:
  size_t mss_;
};

// The IPv4 header later fragments carry (RFC 791 §3.1): the fixed 20 bytes
// and only the options whose copied flag is set, padded with EOL to a
// multiple of 4. Option walking stops at EOL or at a malformed length, as
// DPDK's does.
size_t reduced_header(const uint8_t* ip, size_t ihl, uint8_t* dst) {
  std::copy(ip, ip + kIpv4Len, dst);
  size_t kept = 0;
  size_t i = kIpv4Len;
  while (i < ihl) {
    const uint8_t type = ip[i];
    if (type == 0) break;  // end of option list
    if (type == 1) {       // no-operation: one octet, never copied
      ++i;
      continue;
    }
    if (i + 1 >= ihl) break;
    const size_t len = ip[i + 1];
    if (len < 2 || len > ihl - i) break;
    if (type & 0x80) {
      std::copy(ip + i, ip + i + len, dst + kIpv4Len + kept);
      kept += len;
    }
    i += len;
  }
  const size_t padded = (kept + 3) / 4 * 4;
  std::fill(dst + kIpv4Len + kept, dst + kIpv4Len + padded, uint8_t{0});
  dst[0] = static_cast<uint8_t>(0x40 | (kIpv4Len + padded) / 4);
  return kIpv4Len + padded;
}

class RefIpFrag final : public Kernel {
 public:
  explicit RefIpFrag(size_t mtu) : mtu_(mtu) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const Ipv4Frame f = parse_ipv4_frame(in, "ip_frag");
    if (f.ip_total <= mtu_) {
      out.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(f.frame()));
      return;
    }
    if (f.frag & kIpDf) {  // RFC 791: a DF datagram that does not fit is discarded
      out.clear();
      return;
    }
    const uint8_t* ip = &in[kEthLen];
    const size_t unit = (mtu_ - f.ihl) / 8 * 8;  // data per fragment, sized by the original header
    const size_t data = f.ip_total - f.ihl;
    const size_t n = pieces(data, unit);
    const size_t offset0 = f.frag & kIpOffsetMask;
    if (offset0 + (n - 1) * unit / 8 > kIpOffsetMask)
      throw std::invalid_argument("ip_frag: the fragment offsets would exceed 13 bits");
    const uint16_t kept_flags = static_cast<uint16_t>(f.frag & ~(kIpOffsetMask | kIpMf));  // the reserved bit
    // Only the first fragment of a datagram carries the uncopied options; a
    // later fragment of one already has just the copied ones.
    uint8_t later[kMaxIpHeader];
    size_t later_len = f.ihl;
    if (offset0 == 0 && f.ihl > kIpv4Len)
      later_len = reduced_header(ip, f.ihl, later);
    else
      std::copy(ip, ip + f.ihl, later);
    out.resize(n * kEthLen + f.ihl + (n - 1) * later_len + data);
    uint8_t* o = out.data();
    size_t done = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* hdr = i == 0 ? ip : later;
      const size_t hl = i == 0 ? f.ihl : later_len;
      const size_t len = std::min(unit, data - done);
      std::copy(in.begin(), in.begin() + kEthLen, o);
      std::copy(hdr, hdr + hl, o + kEthLen);
      std::copy(ip + f.ihl + done, ip + f.ihl + done + len, o + kEthLen + hl);
      uint8_t* oip = o + kEthLen;
      const bool more = i + 1 < n || (f.frag & kIpMf);
      store_be16(&oip[2], static_cast<uint16_t>(hl + len));
      store_be16(&oip[6], static_cast<uint16_t>(kept_flags | (more ? kIpMf : 0) | (offset0 + done / 8)));
      store_be16(&oip[10], 0);
      store_be16(&oip[10], inet_checksum(std::span<const uint8_t>(oip, hl)));
      o += kEthLen + hl + len;
      done += len;
    }
  }

 private:
  size_t mtu_;
};

// ---------------------------------------------------------------- lib (DPDK)

// One kernel's mbuf pools: `input` holds the frame as a NIC or the stack
// would hand it over (chained 2 KiB mbufs, so any frame up to 64 KiB fits),
// `direct` the per-output headers the library writes, `indirect` the
// payload references. No per-lcore caches (our threads are not lcores).
// Sized for the largest input seen so far; regrown (all mbufs are back in
// the pools between calls) when a larger one arrives.
class MbufPools {
 public:
  MbufPools() = default;
  MbufPools(const MbufPools&) = delete;
  MbufPools& operator=(const MbufPools&) = delete;
  ~MbufPools() { release(); }

  void reserve(size_t frame_bytes, size_t outputs) {
    if (frame_bytes <= frame_cap_ && outputs <= outputs_cap_) return;
    release();
    frame_cap_ = std::max(frame_bytes, frame_cap_);
    outputs_cap_ = std::max(outputs, outputs_cap_);
    const size_t input_mbufs = input_mbufs_for(frame_cap_);
    input_ = create("i", input_mbufs + 1, RTE_MBUF_DEFAULT_BUF_SIZE);
    direct_ = create("d", outputs_cap_ + 1, RTE_PKTMBUF_HEADROOM + 192);  // headers: 14 + 60 + 60 at most
    // An output's payload spans one more input mbuf per boundary it crosses.
    indirect_ = create("x", outputs_cap_ + input_mbufs + 1, 0);
  }
  rte_mempool* input() const { return input_; }
  rte_mempool* direct() const { return direct_; }
  rte_mempool* indirect() const { return indirect_; }

  // The frame copied into a chain of input mbufs.
  rte_mbuf* copy_in(const uint8_t* p, size_t n) const {
    rte_mbuf *head = nullptr, *tail = nullptr;
    size_t done = 0;
    do {
      rte_mbuf* m = rte_pktmbuf_alloc(input_);
      if (m == nullptr) {
        if (head) rte_pktmbuf_free(head);
        throw std::runtime_error("input mbuf pool exhausted");
      }
      const size_t len = std::min<size_t>(rte_pktmbuf_tailroom(m), n - done);
      std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), p + done, len);
      m->data_len = static_cast<uint16_t>(len);
      if (head == nullptr) {
        head = m;
      } else {
        tail->next = m;
        ++head->nb_segs;
      }
      tail = m;
      done += len;
    } while (done < n);
    head->pkt_len = static_cast<uint32_t>(n);
    return head;
  }

 private:
  static size_t input_mbufs_for(size_t frame) {
    const size_t room = RTE_MBUF_DEFAULT_BUF_SIZE - RTE_PKTMBUF_HEADROOM;
    return std::max<size_t>(1, (frame + room - 1) / room);
  }
  static rte_mempool* create(const char* role, size_t n, uint16_t data_room) {
    static std::atomic<unsigned> serial{0};
    const std::string name = std::string("seg") + role + std::to_string(serial++);
    rte_mempool* mp = rte_pktmbuf_pool_create(name.c_str(), static_cast<unsigned>(n), 0, 0, data_room, SOCKET_ID_ANY);
    if (mp == nullptr)
      throw Unavailable("rte_pktmbuf_pool_create(" + std::to_string(n) + " mbufs): " + rte_strerror(rte_errno));
    return mp;
  }
  void release() {
    for (rte_mempool** mp : {&input_, &direct_, &indirect_}) {
      rte_mempool_free(*mp);
      *mp = nullptr;
    }
  }

  size_t frame_cap_ = 0, outputs_cap_ = 0;
  rte_mempool *input_ = nullptr, *direct_ = nullptr, *indirect_ = nullptr;
};

void append_chain(const rte_mbuf* m, Bytes& out) {
  for (; m != nullptr; m = m->next) {
    const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
    out.insert(out.end(), p, p + m->data_len);
  }
}

// DPDK's checksum helpers return the sum in memory order: store as is.
void store_raw16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// rte_gso_segment with incremental IP ids (what an unmodified stack sends),
// then the checksums GSO leaves to offload, computed with rte_ipv4_cksum and
// rte_ipv4_udptcp_cksum. The copy of the input into an mbuf per call is part
// of this backend's work: it is how a frame reaches DPDK. The segments (a
// header mbuf + indirect payload mbufs each) are written out contiguously,
// the copy a NIC's DMA would make, and the checksums computed there.
class LibTcpSeg final : public Kernel {
 public:
  LibTcpSeg(size_t mss, size_t size) : mss_(mss) {
    ctx_.direct_pool = nullptr;
    ctx_.indirect_pool = nullptr;
    ctx_.flag = 0;  // not RTE_GSO_FLAG_IPID_FIXED: ids increment per segment
    ctx_.gso_types = RTE_ETH_TX_OFFLOAD_TCP_TSO;
    ctx_.gso_size = 0;
    if (size >= kEthLen + kIpv4Len + kTcpLen) reserve(size, pieces(size - (kEthLen + kIpv4Len + kTcpLen), mss));
  }
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const TcpFrame f = parse_tcp_frame(in);
    if (is_fragment(f.frag)) {  // rte_gso_segment returns 0 for fragments: nothing to do
      out.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(f.frame()));
      return;
    }
    const size_t hdr = f.headers();
    reserve(f.frame(), pieces(f.frame() - hdr, mss_));
    rte_mbuf* pkt = pools_.copy_in(in.data(), f.frame());
    pkt->l2_len = kEthLen;
    pkt->l3_len = f.ihl;
    pkt->l4_len = f.thl;
    pkt->ol_flags = RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_TCP_SEG;
    ctx_.gso_size = static_cast<uint16_t>(hdr + mss_);
    const int n = rte_gso_segment(pkt, &ctx_, segs_.data(), static_cast<uint16_t>(segs_.size()));
    if (n < 0) {
      rte_pktmbuf_free(pkt);
      throw std::runtime_error(std::string("rte_gso_segment: ") + rte_strerror(-n));
    }
    out.clear();
    if (n == 0) {
      append_chain(pkt, out);  // fits one segment: the frame itself (checksums below)
    } else {
      for (int i = 0; i < n; ++i) {
        append_chain(segs_[i], out);
        rte_pktmbuf_free(segs_[i]);
      }
    }
    rte_pktmbuf_free(pkt);
    for (size_t at = 0; at < out.size();) {
      auto* ip = reinterpret_cast<rte_ipv4_hdr*>(&out[at + kEthLen]);
      uint8_t* tcp = &out[at + kEthLen + f.ihl];
      ip->hdr_checksum = 0;
      store_raw16(&out[at + kEthLen + 10], rte_ipv4_cksum(ip));
      store_raw16(&tcp[16], 0);
      store_raw16(&tcp[16], rte_ipv4_udptcp_cksum(ip, tcp));
      at += kEthLen + rte_be_to_cpu_16(ip->total_length);
    }
  }

 private:
  void reserve(size_t frame, size_t outputs) {
    pools_.reserve(frame, outputs);
    ctx_.direct_pool = pools_.direct();
    ctx_.indirect_pool = pools_.indirect();
    if (segs_.size() < outputs) segs_.resize(std::min<size_t>(outputs, 65535));
  }

  size_t mss_;
  MbufPools pools_;
  rte_gso_ctx ctx_;
  std::vector<rte_mbuf*> segs_;
};

// rte_ipv4_fragment_packet on the IP packet (the library wants it without
// its Ethernet header), the header checksum it leaves zero computed with
// rte_ipv4_cksum, the Ethernet header prepended in each fragment's headroom
// (as DPDK's ip_fragmentation example does), then the fragments written out.
// A packet that fits is sent as it is without calling DPDK (see the top).
class LibIpFrag final : public Kernel {
 public:
  LibIpFrag(size_t mtu, size_t size) : mtu_(mtu) {
    if (size > kEthLen) reserve(size - kEthLen, pieces(size - kEthLen, (mtu - kIpv4Len) / 8 * 8));
  }
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const Ipv4Frame f = parse_ipv4_frame(in, "ip_frag");
    if (f.ip_total <= mtu_) {
      out.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(f.frame()));
      return;
    }
    if (f.frag & kIpDf) {  // DPDK would refuse it (-ENOTSUP); RFC 791: discard
      out.clear();
      return;
    }
    reserve(f.ip_total, pieces(f.ip_total - f.ihl, (mtu_ - f.ihl) / 8 * 8));
    rte_mbuf* pkt = pools_.copy_in(&in[kEthLen], f.ip_total);
    const int32_t n = rte_ipv4_fragment_packet(pkt, frags_.data(), static_cast<uint16_t>(frags_.size()),
                                               static_cast<uint16_t>(mtu_), pools_.direct(), pools_.indirect());
    rte_pktmbuf_free(pkt);  // the fragments hold their own references to its data
    if (n < 0) throw std::runtime_error(std::string("rte_ipv4_fragment_packet: ") + rte_strerror(-n));
    out.clear();
    for (int32_t i = 0; i < n; ++i) {
      rte_mbuf* m = frags_[i];
      auto* ip = rte_pktmbuf_mtod(m, rte_ipv4_hdr*);
      ip->hdr_checksum = rte_ipv4_cksum(ip);
      char* eth = rte_pktmbuf_prepend(m, kEthLen);
      if (eth == nullptr) throw std::runtime_error("no headroom for the Ethernet header");
      std::memcpy(eth, in.data(), kEthLen);
      append_chain(m, out);
      rte_pktmbuf_free(m);
    }
  }

 private:
  void reserve(size_t ip_bytes, size_t outputs) {
    pools_.reserve(ip_bytes, outputs);
    if (frags_.size() < outputs) frags_.resize(std::min<size_t>(outputs, 65535));
  }

  size_t mtu_;
  MbufPools pools_;
  std::vector<rte_mbuf*> frags_;
};

// ---------------------------------------------------------------- operators

// Which segment or fragment of `ref_out` the first differing byte is in.
std::string framed_difference(const Bytes& want, const Bytes& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t index = 0, at = 0;
  while (at + kEthLen + 4 <= want.size()) {
    const size_t len = kEthLen + load_be16(&want[at + kEthLen + 2]);
    if (i < at + len) break;
    at += len;
    ++index;
  }
  return "packet #" + std::to_string(index) + " (byte " + std::to_string(i - std::min(i, at)) + " of it): " +
         describe_difference(want, got);
}

class TcpSeg final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"tcp_seg", "network",
                                "cut one Ethernet/IPv4/TCP super-frame into MSS-sized segments with software checksums",
                                1, {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v;
    for (size_t i = 0; i < count; ++i) v.push_back(make_ipv4_packet(size, seed * 1000003 + i, kProtoTcp));
    return v;
  }
  // 128, not a real 1460: the default sweep (64..1024-byte frames, 10..970
  // payload bytes) then covers the one-segment case (64, 128) and 2, 4 and 8
  // segments; with 1460 it would never segment.
  std::map<std::string, std::string> default_params() const override { return {{"mss", "128"}}; }
  std::string mismatch(std::span<const uint8_t>, const Bytes& ref_out, const Bytes& got) const override {
    return ref_out == got ? "" : framed_difference(ref_out, got);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    const uint64_t mss = param_u64("mss");
    if (mss < 1 || mss > kMaxMss)
      throw std::invalid_argument("tcp_seg.mss must be 1 to " + std::to_string(kMaxMss) + " bytes");
    switch (b) {
      case Backend::kRef: return kernels_of<RefTcpSeg>(threads, static_cast<size_t>(mss));
      case Backend::kLib:
        require_dpdk();
        return kernels_of<LibTcpSeg>(threads, static_cast<size_t>(mss), size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
};

class IpFrag final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"ip_frag", "network",
                                "fragment one Ethernet/IPv4/UDP packet for an IP MTU (RFC 791)", 1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v;
    for (size_t i = 0; i < count; ++i) v.push_back(make_ipv4_packet(size, seed * 1000003 + i, kProtoUdp));
    return v;
  }
  // 256: the default sweep's 64, 128 and 256-byte frames (50..242 IP bytes)
  // fit and go out unchanged (a copy), 512 and 1024 give 3 and 5 fragments.
  std::map<std::string, std::string> default_params() const override { return {{"mtu", "256"}}; }
  std::string mismatch(std::span<const uint8_t>, const Bytes& ref_out, const Bytes& got) const override {
    return ref_out == got ? "" : framed_difference(ref_out, got);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t size, unsigned threads) const override {
    const uint64_t mtu = param_u64("mtu");
    if (mtu < kMinMtu || mtu > kMaxMtu)
      throw std::invalid_argument("ip_frag.mtu must be " + std::to_string(kMinMtu) + " to " + std::to_string(kMaxMtu) +
                                  " bytes (RFC 791's minimum leaves a 60-byte header 8 data bytes)");
    switch (b) {
      case Backend::kRef: return kernels_of<RefIpFrag>(threads, static_cast<size_t>(mtu));
      case Backend::kLib:
        require_dpdk();
        return kernels_of<LibIpFrag>(threads, static_cast<size_t>(mtu), size);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable(kNoDevice);
  }
};

}  // namespace

void register_segmentation_ops(Registry& r) {
  r.push_back(std::make_unique<TcpSeg>());
  r.push_back(std::make_unique<IpFrag>());
}

}  // namespace dpukit::bench
