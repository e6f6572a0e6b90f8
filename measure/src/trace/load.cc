// load_trace: pcap and pcapng through libpcap, the 13-byte ElasticSketch
// ".dat" records by hand.
//
// How the format is told apart (content first, then the name):
//   1. pcap:   magic a1b2c3d4 / a1b23c4d / a1b2cd34 in either byte order;
//      pcapng: the section header block type 0a0d0d0a.
//      Such a file goes to libpcap, which reports a corrupt header precisely.
//      A ".dat" file whose first source address happens to spell a magic
//      (10.13.13.10 is pcapng's) is only taken as pcap/pcapng if the next
//      bytes agree too (pcap version 2.x, pcapng byte-order magic 1a2b3c4d).
//   2. otherwise, a name ending in ".dat" (any case): 13-byte records
//      src_ip(4) dst_ip(4) src_port(2) dst_port(2) proto(1), stored in
//      network order, copied to the key as they are. The size must be a
//      non-zero multiple of 13; otherwise the error names the offset of the
//      incomplete last record. No timestamps and no lengths: ts_ns = 0 and
//      wire_len = 0.
//   3. anything else (including an empty file) is an error at offset 0.
//
// Error offsets: a missing, empty or unrecognised file and a corrupt file
// header are reported at 0; a record (pcap) or block (pcapng) that cannot be
// read, truncated or corrupt, at the byte where it starts, i.e. just after
// the last packet that was read (for pcapng: the last packet block; blocks
// without packets that libpcap skips in between are not counted).
#include <pcap/pcap.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dpukit/core/huge_pages.h"
#include "dpukit/measure.h"
#include "trace/parse.h"

namespace dpukit::measure {

namespace {

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
uint32_t swap32(uint32_t v) { return (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24); }

enum class Kind { kPcap, kPcapng, kNone };

// `head` holds the first `n` bytes of the file. `strict` asks for more than the
// four magic bytes.
Kind sniff(const uint8_t* head, size_t n, bool strict) {
  if (n < 4) return Kind::kNone;
  uint32_t m = le32(head);
  for (uint32_t magic : {0xa1b2c3d4u, 0xa1b23c4du, 0xa1b2cd34u}) {
    if (m == magic || m == swap32(magic)) {
      if (!strict) return Kind::kPcap;
      // version major 2 (u16 right after the magic), in the file's byte order
      if (n >= 6 && ((m == magic && head[4] == 2 && head[5] == 0) || (m != magic && head[4] == 0 && head[5] == 2)))
        return Kind::kPcap;
      return Kind::kNone;
    }
  }
  if (m == 0x0a0d0d0au) {
    if (!strict) return Kind::kPcapng;
    if (n >= 12) {
      uint32_t bom = le32(head + 8);
      if (bom == 0x1a2b3c4du || bom == 0x4d3c2b1au) return Kind::kPcapng;
    }
  }
  return Kind::kNone;
}

bool ends_with_dat(const std::string& path) {
  if (path.size() < 4) return false;
  std::string tail = path.substr(path.size() - 4);
  for (char& c : tail) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return tail == ".dat";
}

std::string describe_magic(const uint8_t* head, size_t n) {
  char buf[64];
  if (n == 0) return "empty file";
  std::string s = "not a pcap, pcapng or .dat file (first bytes";
  for (size_t i = 0; i < n && i < 4; ++i) {
    std::snprintf(buf, sizeof buf, " %02x", head[i]);
    s += buf;
  }
  return s + ")";
}

void load_dat(const std::string& path, FILE* f, uint64_t size, Trace& t) {
  constexpr uint64_t kRec = 13;
  if (size % kRec != 0) {
    throw TraceError(path, size / kRec * kRec,
                     "incomplete 13-byte .dat record (" + std::to_string(size % kRec) + " bytes left over)");
  }
  t.format = "dat";
  t.packets.reserve(size / kRec);
  std::vector<uint8_t> buf(kRec * 65536);
  uint64_t off = 0;
  while (off < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
    size_t got = std::fread(buf.data(), 1, want, f);
    if (got != want) {
      // The file shrank under us or the read failed.
      uint64_t at = (off + got) / kRec * kRec;
      throw TraceError(path, at, std::ferror(f) ? std::string("read error: ") + std::strerror(errno)
                                                : std::string("file ended early (incomplete 13-byte record)"));
    }
    for (size_t i = 0; i < want; i += kRec) {
      Packet p;
      std::memcpy(p.key.bytes.data(), buf.data() + i, kRec);
      t.packets.push_back(p);
    }
    off += want;
  }
}

void load_pcap(const std::string& path, FilePtr& f, Kind kind, uint64_t size, Trace& t) {
  char errbuf[PCAP_ERRBUF_SIZE] = {0};
  // Nanosecond precision: libpcap scales microsecond files up.
  pcap_t* p = pcap_fopen_offline_with_tstamp_precision(f.get(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (p == nullptr) {
    // pcap_fopen_* leaves the FILE to the caller on failure.
    throw TraceError(path, 0, std::string("cannot read the capture header: ") + errbuf);
  }
  // From here on pcap_close() closes the FILE.
  f.release();
  struct PcapCloser {
    void operator()(pcap_t* q) const { pcap_close(q); }
  };
  std::unique_ptr<pcap_t, PcapCloser> guard(p);

  t.format = kind == Kind::kPcapng ? "pcapng" : "pcap";
  int linktype = pcap_datalink(p);
  if (!linktype_supported(linktype)) {
    const char* name = pcap_datalink_val_to_name(linktype);
    throw TraceError(path, 0,
                     "unsupported link type " + std::to_string(linktype) + " (" + (name ? name : "unknown") +
                         "); supported: EN10MB (Ethernet, VLAN), RAW, IPV4, LINUX_SLL, LINUX_SLL2");
  }
  // A guess at the count (records of 64 captured bytes, as generate_trace
  // writes) saves most regrowth; capped so that a capture with full payloads
  // does not reserve far more than it needs.
  if (size > 0) t.packets.reserve(static_cast<size_t>(std::min<uint64_t>(size / 80 + 16, uint64_t{1} << 22)));

  FILE* stream = pcap_file(p);
  long long record_start = stream ? static_cast<long long>(ftello(stream)) : 0;
  for (;;) {
    struct pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    int rc = pcap_next_ex(p, &hdr, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // end of file
    if (rc != 1) {
      uint64_t at = record_start > 0 ? static_cast<uint64_t>(record_start) : 0;
      throw TraceError(path, at, std::string(kind == Kind::kPcapng ? "bad pcapng block: " : "bad pcap record: ") +
                                     pcap_geterr(p));
    }
    if (stream) record_start = static_cast<long long>(ftello(stream));
    Packet pkt;
    // libpcap hands over exactly caplen bytes.
    if (parse_frame(linktype, data, hdr->caplen, &pkt.key) != ParseResult::kOk) {
      ++t.skipped;
      continue;
    }
    pkt.wire_len = hdr->len;
    // With PCAP_TSTAMP_PRECISION_NANO, tv_usec holds nanoseconds.
    pkt.ts_ns = static_cast<uint64_t>(hdr->ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(hdr->ts.tv_usec);
    t.packets.push_back(pkt);
  }
}

}  // namespace

Trace load_trace(const std::string& path) {
  Trace t;
  t.path = path;
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw TraceError(path, 0, std::string("cannot open: ") + std::strerror(errno));
  uint64_t size = 0;
  if (fseeko(f.get(), 0, SEEK_END) == 0) {
    off_t end = ftello(f.get());
    if (end > 0) size = static_cast<uint64_t>(end);
  }
  if (fseeko(f.get(), 0, SEEK_SET) != 0) throw TraceError(path, 0, "not a seekable file");

  uint8_t head[16] = {0};
  size_t n = std::fread(head, 1, sizeof head, f.get());
  if (std::ferror(f.get())) throw TraceError(path, 0, std::string("read error: ") + std::strerror(errno));
  if (n == 0) throw TraceError(path, 0, "empty file");
  std::rewind(f.get());

  const bool dat_name = ends_with_dat(path);
  Kind kind = sniff(head, n, /*strict=*/dat_name);
  if (kind != Kind::kNone) load_pcap(path, f, kind, size, t);
  else if (dat_name) load_dat(path, f.get(), size, t);
  else throw TraceError(path, 0, describe_magic(head, n));
  // The workers read packets from here, as a DPDK worker reads its mbufs, which are in huge pages.
  t.huge_page_bytes = back_with_huge_pages(t.packets.data(), t.packets.size() * sizeof(Packet));
  return t;
}

}  // namespace dpukit::measure
