// Network operators (Table 4, scenario "network"): IP route lookup (LPM), the
// Internet checksum, the Ethernet CRC-32 and the RSS Toeplitz hash. Their
// inputs are Ethernet/IPv4/TCP packets from make_ipv4_packet.
//
// lpm       one packet: its IPv4 destination is looked up (longest prefix
//           match) in a route table; out = the next hop, 4 bytes big-endian
//           (host order with lpm.input=address),
//           kLpmMiss (ff ff ff ff) when no route covers the address (next
//           hops are 24-bit, as rte_lpm stores them, so the miss value cannot
//           be a next hop). ref: a path-compressed binary trie written here;
//           lib: DPDK rte_lpm (DIR-24-8), one table shared by all threads.
// checksum  the Internet checksum (RFC 1071) over all `size` bytes; out = 2
//           bytes big-endian (the value a header's checksum field holds).
// crc       CRC-32 of IEEE 802.3 over all `size` bytes; out = the 4 bytes of
//           the Ethernet FCS as transmitted: the CRC value least significant
//           byte first ("123456789" gives 26 39 f4 cb, i.e. 0xcbf43926).
// toeplitz  the Microsoft RSS Toeplitz hash of the packet's IPv4/TCP 4-tuple
//           (or the 2-tuple) with the standard 40-byte key; out = the hash,
//           4 bytes big-endian. One hash per packet; Gbps counts the packet.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <rte_errno.h>
#include <rte_ip.h>
#include <rte_lpm.h>
#include <rte_net_crc.h>
#include <rte_thash.h>

#include "dpdk_env.h"
#include "operator.h"
#include "packet.h"

namespace dpukit::bench {
namespace {

// Every operator here works on whole packets, like the network stack does.
std::vector<Bytes> make_packets(size_t size, size_t count, uint64_t seed) {
  std::vector<Bytes> v;
  v.reserve(count);
  for (size_t i = 0; i < count; ++i) v.push_back(make_ipv4_packet(size, seed * 1000003 + i));
  return v;
}

// splitmix64: the reproducible stream route tables and addresses are drawn from.
class Rng {
 public:
  explicit Rng(uint64_t seed) : x_(seed) {}
  uint64_t next() {
    uint64_t z = (x_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
  uint32_t u31() { return static_cast<uint32_t>(next() >> 33); }  // what lrand48() returns

 private:
  uint64_t x_;
};

// ---------------------------------------------------------------------------
// LPM
// ---------------------------------------------------------------------------

constexpr uint32_t kLpmMiss = 0xFFFFFFFF;
constexpr uint32_t kMaxNextHop = (1u << 24) - 1;  // rte_lpm keeps 24 bits of next hop
constexpr size_t kDstOffset = kEthLen + 16;       // IPv4 destination address in the frame

uint32_t prefix_mask(unsigned depth) { return depth == 0 ? 0 : ~0u << (32 - depth); }

struct Route {
  uint32_t prefix;  // host order, bits past `depth` zero
  uint8_t depth;    // 0..32; 0 is the default route
  uint32_t next_hop;
};

// A route table as both backends install it: routes in insertion order, each
// (prefix, depth) once. rte_lpm cannot hold depth 0, so a default route is
// kept apart and both backends answer it for an address no route covers.
struct RouteTable {
  std::vector<Route> routes;  // depths 1..32
  std::optional<uint32_t> default_hop;
  uint32_t tbl8_groups = 1;  // the rte_lpm tbl8 groups the table gets
};

// Folds duplicates the way rte_lpm's add does (a second add of the same
// prefix and depth replaces the next hop) while keeping first-add order.
RouteTable make_table(const std::vector<Route>& added) {
  RouteTable t;
  std::unordered_map<uint64_t, size_t> where;
  for (const Route& r0 : added) {
    Route r = r0;
    r.prefix &= prefix_mask(r.depth);
    if (r.depth == 0) {
      t.default_hop = r.next_hop;
      continue;
    }
    uint64_t key = uint64_t(r.prefix) << 8 | r.depth;
    auto [it, fresh] = where.emplace(key, t.routes.size());
    if (fresh)
      t.routes.push_back(r);
    else
      t.routes[it->second].next_hop = r.next_hop;
  }
  return t;
}

// Enough tbl8 groups for every route deeper than /24: one per /24 they fall in.
uint32_t tbl8_groups_needed(const std::vector<Route>& routes) {
  std::unordered_set<uint32_t> slash24;
  for (const Route& r : routes)
    if (r.depth > 24) slash24.insert(r.prefix >> 8);
  return std::max<uint32_t>(1, static_cast<uint32_t>(slash24.size()));
}

// Routes per depth of a real router's table, by address class, as DPDK's
// lpm_perf_autotest generates them (rule_count in app/test/test_lpm_perf.c,
// v22.11; derived from a router dump). [class A, B, C][depth - 1].
constexpr uint32_t kRouterDepthCounts[3][32] = {
    {0,     0,     1,     0,     2,     1,     3,     185,   26,    16,    39,
     144,   233,   528,   866,   3856,  3268,  5662,  17301, 22226, 11147, 16746,
     17120, 77578, 401,   656,   1107,  1121,  2316,  717,   10,    66},
    {0,    0,    0,    0,     1,    1,    1,    3,    3,    30,   25,
     168,  305,  569,  1129,  50800, 1645, 1820, 3506, 3258, 3424, 4971,
     6885, 39771, 424, 170,  433,  92,   366,  377,  2,    200},
    {0,     0,     0,     0,      0,    0,    0,    12,   8,    9,     33,
     69,    237,   1007,  1717,   14663, 8070, 16185, 48261, 36870, 33960, 50638,
     61422, 466549, 1829, 4824, 4927, 5914, 10254, 4905, 1,    716}};

// `n` routes with the depth mix of kRouterDepthCounts, prefixes uniformly
// random in 1.0.0.0 - 223.255.255.255 (unicast), next hops random.
RouteTable random_table(size_t n, uint64_t seed) {
  std::array<uint64_t, 33> cumulative{};
  for (unsigned d = 1; d <= 32; ++d)
    cumulative[d] = cumulative[d - 1] + kRouterDepthCounts[0][d - 1] + kRouterDepthCounts[1][d - 1] +
                    kRouterDepthCounts[2][d - 1];
  Rng rng(seed ^ 0x6C706D7461626C65ull);
  std::vector<Route> routes;
  routes.reserve(n);
  std::unordered_set<uint64_t> seen;
  for (size_t tries = 0; routes.size() < n && tries < 4 * n + 1000; ++tries) {
    uint64_t pick = rng.next() % cumulative[32];
    unsigned depth = static_cast<unsigned>(std::upper_bound(cumulative.begin(), cumulative.end(), pick) -
                                           cumulative.begin());
    uint32_t a = rng.u32();
    a = (a & 0x00FFFFFF) | uint32_t(1 + (a >> 24) % 223) << 24;
    Route r{a & prefix_mask(depth), static_cast<uint8_t>(depth), rng.u32() & kMaxNextHop};
    if (seen.insert(uint64_t(r.prefix) << 8 | r.depth).second) routes.push_back(r);
  }
  RouteTable t = make_table(routes);
  t.tbl8_groups = tbl8_groups_needed(t.routes);
  return t;
}

// The table of DPDK's lpm_perf_autotest (v22.11), generated the way it does:
// per class and depth, kRouterDepthCounts[c][d] prefixes spread evenly over
// the class from a random start; then 0.0.0.0/8, 10.2.23.147/32,
// 192.168.100.10/24, 192.168.25.100/24 and 192.168.129.124/32 swapped in at
// the test's positions; rte_lpm with 2048 tbl8 groups, so a route deeper
// than /24 whose /24 finds no free group fails to add and is not in the
// table (as in the test). The test's next hops are all 0xAA; ours are random
// 24-bit values (lookups cost the same) so that a wrong answer shows.
RouteTable dpdk_perf_table(uint64_t seed, size_t* generated, size_t* dropped) {
  constexpr uint32_t kTestTbl8Groups = 2048;
  constexpr size_t kTestMaxRules = 1200000;  // the test's route array
  Rng rng(seed ^ 0x6470646B70657266ull);
  std::vector<Route> list;
  const uint32_t head[3] = {0x00000000, 0x80000000, 0xC0000000};
  for (unsigned c = 0; c < 3; ++c) {
    const unsigned fixed_bits = c + 1;
    for (unsigned depth = 1; depth <= 32; ++depth) {
      const uint32_t n = kRouterDepthCounts[c][depth - 1];
      if (n == 0) continue;
      const uint32_t range = 1u << (depth - fixed_bits);
      const uint32_t mask = range - 1;
      const uint32_t step = range <= n ? 1 : static_cast<uint32_t>(std::lround(double(range) / n));
      uint32_t start = rng.u31() & mask;
      for (uint32_t k = 0; k < n; ++k) {
        list.push_back({start << (32 - depth) | head[c], static_cast<uint8_t>(depth), 0});
        start = (start + step) & mask;
      }
    }
  }
  auto insert_at_random = [&](uint32_t ip, uint8_t depth) {
    size_t pos = 0;
    for (int tries = 0; tries < 10; ++tries)
      if ((pos = rng.u31()) <= list.size()) break;
    if (pos > list.size() || pos >= kTestMaxRules) pos = list.size() / 2;
    // The test swaps the new route in and appends what it displaced. At
    // pos == size it writes the new route into the free slot and then
    // overwrites it with that slot's old, empty contents (depth 0, which
    // rte_lpm refuses): the route is lost. Replayed as is.
    const Route displaced = pos < list.size() ? list[pos] : Route{0, 0, 0};
    if (pos < list.size()) list[pos] = {ip, depth, 0};
    if (list.size() < kTestMaxRules) list.push_back(displaced);
  };
  insert_at_random(0x00000000, 8);   // 0.0.0.0/8
  insert_at_random(0x0A021793, 32);  // 10.2.23.147/32
  insert_at_random(0xC0A8640A, 24);  // 192.168.100.10/24
  insert_at_random(0xC0A81964, 24);  // 192.168.25.100/24
  insert_at_random(0xC0A8817C, 32);  // 192.168.129.124/32
  *generated = list.size();
  std::vector<Route> added;
  added.reserve(list.size());
  for (Route r : list) {
    if (r.depth == 0) continue;  // rte_lpm_add refuses depth 0
    r.next_hop = rng.u32() & kMaxNextHop;
    added.push_back(r);
  }
  RouteTable t = make_table(added);
  // rte_lpm hands a /24 its tbl8 group at the first deeper route in it and
  // never frees one here (nothing is deleted): replay that to know which
  // routes the test's table holds.
  std::unordered_set<uint32_t> extended;
  std::vector<Route> kept;
  kept.reserve(t.routes.size());
  *dropped = 0;
  for (const Route& r : t.routes) {
    if (r.depth > 24 && !extended.count(r.prefix >> 8)) {
      if (extended.size() == kTestTbl8Groups) {
        ++*dropped;
        continue;
      }
      extended.insert(r.prefix >> 8);
    }
    kept.push_back(r);
  }
  t.routes = std::move(kept);
  t.tbl8_groups = kTestTbl8Groups;
  return t;
}

bool parse_ipv4(const std::string& s, uint32_t* out) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(s.c_str(), "%3u.%3u.%3u.%3u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 || c > 255 ||
      d > 255)
    return false;
  *out = a << 24 | b << 16 | c << 8 | d;
  return true;
}

// "a.b.c.d/len" and a next hop.
Route parse_route(const std::string& prefix, const std::string& hop, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("lpm.table: " + where + ": " + why + " (want a.b.c.d/len and a next hop < 2^24)");
  };
  auto slash = prefix.find('/');
  uint32_t ip = 0;
  if (slash == std::string::npos || !parse_ipv4(prefix.substr(0, slash), &ip)) throw bad("'" + prefix + "'");
  size_t used = 0;
  unsigned long depth = 0, next_hop = 0;
  try {
    depth = std::stoul(prefix.substr(slash + 1), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || slash + 1 + used != prefix.size() || depth > 32) throw bad("bad length in '" + prefix + "'");
  try {
    next_hop = std::stoul(hop, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != hop.size() || next_hop > kMaxNextHop) throw bad("bad next hop '" + hop + "'");
  return {ip & prefix_mask(static_cast<unsigned>(depth)), static_cast<uint8_t>(depth),
          static_cast<uint32_t>(next_hop)};
}

// "list:10.0.0.0/8=1;10.1.0.0/16=2;0.0.0.0/0=3" (',' also separates, but
// dpukit-bench's --param splits on commas).
RouteTable list_table(std::string text) {
  std::replace(text.begin(), text.end(), ',', ';');
  std::vector<Route> routes;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ';');) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("lpm.table: '" + item + "' is not prefix/len=next_hop");
    routes.push_back(parse_route(item.substr(0, eq), item.substr(eq + 1), "list"));
  }
  RouteTable t = make_table(routes);
  t.tbl8_groups = tbl8_groups_needed(t.routes);
  return t;
}

// "file:PATH": one "a.b.c.d/len next_hop" per line; '#' starts a comment.
RouteTable file_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("lpm.table: cannot read route file '" + path + "'");
  std::vector<Route> routes;
  size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string prefix, hop, extra;
    if (!(words >> prefix)) continue;
    if (!(words >> hop) || (words >> extra))
      throw std::invalid_argument("lpm.table: " + path + ":" + std::to_string(line_no) +
                                  ": want 'a.b.c.d/len next_hop'");
    routes.push_back(parse_route(prefix, hop, path + ":" + std::to_string(line_no)));
  }
  RouteTable t = make_table(routes);
  t.tbl8_groups = tbl8_groups_needed(t.routes);
  return t;
}

// The ref: a path-compressed binary trie (each node holds the prefix bits it
// stands for, so chains of one-child nodes collapse into one node). A lookup
// walks from the root along the address's bits and keeps the last route met.
class PrefixTrie {
 public:
  explicit PrefixTrie(const RouteTable& t) {
    nodes_.push_back({});  // the root: the empty prefix
    nodes_.reserve(2 * t.routes.size() + 1);
    for (const Route& r : t.routes) insert(r.prefix, r.depth, r.next_hop);
    if (t.default_hop) {
      nodes_[0].has_route = true;
      nodes_[0].next_hop = *t.default_hop;
    }
  }

  uint32_t lookup(uint32_t addr) const {
    uint32_t best = kLpmMiss;
    uint32_t i = 0;
    for (;;) {
      const Node& n = nodes_[i];
      if ((addr ^ n.key) & prefix_mask(n.len)) break;
      if (n.has_route) best = n.next_hop;
      if (n.len == 32) break;
      i = n.child[bit(addr, n.len)];
      if (i == 0) break;
    }
    return best;
  }

 private:
  struct Node {
    uint32_t key = 0;  // the prefix this node stands for, bits past len zero
    uint8_t len = 0;
    bool has_route = false;
    uint32_t next_hop = 0;
    uint32_t child[2] = {0, 0};  // 0 = none (the root is never a child)
  };

  static unsigned bit(uint32_t v, unsigned pos) { return (v >> (31 - pos)) & 1; }  // pos 0 = most significant

  uint32_t add_node(uint32_t key, unsigned len) {
    Node n;
    n.key = key & prefix_mask(len);
    n.len = static_cast<uint8_t>(len);
    nodes_.push_back(n);
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  void set_route(uint32_t i, uint32_t next_hop) {
    nodes_[i].has_route = true;
    nodes_[i].next_hop = next_hop;
  }

  // Invariant: node i's prefix is a prefix of (p, depth) and shorter than it.
  void insert(uint32_t p, unsigned depth, uint32_t next_hop) {
    uint32_t i = 0;
    for (;;) {
      if (nodes_[i].len == depth) return set_route(i, next_hop);
      const unsigned b = bit(p, nodes_[i].len);
      const uint32_t c = nodes_[i].child[b];
      if (c == 0) {
        uint32_t leaf = add_node(p, depth);
        set_route(leaf, next_hop);
        nodes_[i].child[b] = leaf;
        return;
      }
      const Node child = nodes_[c];
      const uint32_t diff = child.key ^ p;
      const unsigned common =
          std::min({diff == 0 ? 32u : static_cast<unsigned>(std::countl_zero(diff)), unsigned(child.len), depth});
      if (common == child.len) {
        i = c;
        continue;
      }
      // The new prefix leaves the child's path at bit `common`: a node for
      // the shared part takes the child's place.
      uint32_t fork = add_node(p, common);
      nodes_[i].child[b] = fork;
      nodes_[fork].child[bit(child.key, common)] = c;
      if (common == depth) return set_route(fork, next_hop);
      uint32_t leaf = add_node(p, depth);
      set_route(leaf, next_hop);
      nodes_[fork].child[bit(p, common)] = leaf;
      return;
    }
  }

  std::vector<Node> nodes_;
};

// The lib: one rte_lpm holding the table, read by every thread.
class DpdkLpm {
 public:
  explicit DpdkLpm(const RouteTable& t) : default_hop_(t.default_hop.value_or(kLpmMiss)) {
    require_dpdk();
    static std::atomic<unsigned> serial{0};
    const std::string name = "dpukit_lpm_" + std::to_string(serial++);
    rte_lpm_config config{};
    config.max_rules = std::max<uint32_t>(1, static_cast<uint32_t>(t.routes.size()));
    config.number_tbl8s = t.tbl8_groups;
    lpm_ = rte_lpm_create(name.c_str(), SOCKET_ID_ANY, &config);
    if (lpm_ == nullptr)
      throw Unavailable(std::string("rte_lpm_create (") + std::to_string(t.routes.size()) + " routes, " +
                        std::to_string(t.tbl8_groups) + " tbl8 groups): " + rte_strerror(rte_errno) +
                        " (EAL memory is -m 512 without hugepages; the table's tbl24 alone is 64 MiB)");
    for (const Route& r : t.routes) {
      int rc = rte_lpm_add(lpm_, r.prefix, r.depth, r.next_hop);
      if (rc != 0) {
        rte_lpm_free(lpm_);
        // The table is sized for every route (tbl8 groups counted), so this
        // is a DPDK that allocates differently: say so rather than time a
        // table that differs from the ref's.
        char buf[160];
        std::snprintf(buf, sizeof buf, "rte_lpm_add(%u.%u.%u.%u/%u) failed: %s; this rte_lpm cannot hold the table",
                      r.prefix >> 24, (r.prefix >> 16) & 255, (r.prefix >> 8) & 255, r.prefix & 255, r.depth,
                      std::strerror(-rc));
        throw Unavailable(buf);
      }
    }
  }
  ~DpdkLpm() { rte_lpm_free(lpm_); }
  DpdkLpm(const DpdkLpm&) = delete;
  DpdkLpm& operator=(const DpdkLpm&) = delete;

  const rte_lpm* table() const { return lpm_; }
  uint32_t default_hop() const { return default_hop_; }

 private:
  rte_lpm* lpm_ = nullptr;
  uint32_t default_hop_;  // what a miss in rte_lpm answers (the default route, or kLpmMiss)
};

[[noreturn]] void throw_too_short(size_t size) {
  throw std::invalid_argument("lpm: a " + std::to_string(size) + "-byte input holds no IPv4 destination");
}

// Where an input holds the address to look up, and how the answer is
// written:
// - a packet (input=packet): the IPv4 destination, network byte order, at
//   the header's offset; the next hop out big-endian;
// - an address (input=address): the input is the address alone, host byte
//   order, as an application's array of addresses holds it (and
//   rte_lpm_lookup_bulk and lpm_perf_autotest take it); the next hop out in
//   host byte order, so that rte_lpm writes it where it belongs.
struct LpmInput {
  bool address = false;
  size_t offset() const { return address ? 0 : kDstOffset; }
  uint32_t destination(std::span<const uint8_t> in) const {
    if (in.size() < offset() + 4) [[unlikely]]
      throw_too_short(in.size());
    if (!address) return load_be32(&in[offset()]);
    uint32_t a;
    std::memcpy(&a, in.data(), 4);
    return a;
  }
  void put_hop(Bytes& out, uint32_t hop) const {
    out.resize(4);
    if (!address) return store_be32(out.data(), hop);
    std::memcpy(out.data(), &hop, 4);
  }
};

class RefLpmKernel final : public Kernel {
 public:
  RefLpmKernel(std::shared_ptr<const PrefixTrie> trie, LpmInput input) : trie_(std::move(trie)), input_(input) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    input_.put_hop(out, trie_->lookup(input_.destination(in)));
  }

 private:
  std::shared_ptr<const PrefixTrie> trie_;
  LpmInput input_;
};

// What rte_lpm_lookup_bulk answered, as the operator's next hop: the hop on
// a hit, `miss` otherwise; without a branch, which would mispredict on
// random misses.
inline uint32_t bulk_next_hop(uint32_t result, uint32_t miss) {
  static_assert(RTE_LPM_LOOKUP_SUCCESS == 0x01000000);
  const uint32_t hit = 0u - ((result >> 24) & 1u);  // all ones on a hit
  return (result & 0x00FFFFFF & hit) | (miss & ~hit);
}

// rte_lpm_lookup_bulk from ips into hops, each result then made the next hop
// in place. A lookup of a random address misses every cache, and the CPU
// overlaps only the lookups its instruction window holds, so every
// instruction around them costs throughput. Hence the test's loop and no
// more: the addresses read where they lie, the hops written where they go,
// and a full burst inlined with its constant count, as lpm_perf_autotest and
// l3fwd call it (the inline function's loops then have fixed bounds).
[[gnu::always_inline]] inline void lpm_bulk_n(const rte_lpm* table, uint32_t miss, const uint32_t* ips, uint32_t* hops,
                                              size_t n) {
  rte_lpm_lookup_bulk(table, ips, hops, static_cast<unsigned>(n));
  for (size_t i = 0; i < n; ++i) hops[i] = bulk_next_hop(hops[i], miss);
}
inline void lpm_bulk(const rte_lpm* table, uint32_t miss, const uint32_t* ips, uint32_t* hops, size_t n) {
  if (n == kMaxBurst)
    lpm_bulk_n(table, miss, ips, hops, kMaxBurst);
  else
    lpm_bulk_n(table, miss, ips, hops, n);
}

class LibLpmKernel final : public Kernel {
 public:
  LibLpmKernel(std::shared_ptr<const DpdkLpm> lpm, LpmInput input)
      : lpm_(std::move(lpm)), table_(lpm_->table()), default_hop_(lpm_->default_hop()), input_(input) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const uint32_t fallback = default_hop_;
    uint32_t hop = 0;
    const int rc = rte_lpm_lookup(table_, input_.destination(in), &hop);
    // Hit or miss is known only when the (likely cache-missing) table read
    // returns: a branch on it that mispredicts flushes every lookup the CPU
    // has started behind this one, so both values are at hand for a select.
    hop = rc == 0 ? hop : fallback;
    input_.put_hop(out, hop);
  }
  // A burst as DPDK applications look routes up (l3fwd): the addresses
  // gathered, then rte_lpm_lookup_bulk, whose lookups overlap in memory.
  void process_burst(std::span<const std::span<const uint8_t>> in, std::span<Bytes> out) override {
    uint32_t ips[kMaxBurst], hops[kMaxBurst];
    const size_t n = in.size();
    for (size_t i = 0; i < n; ++i) ips[i] = input_.destination(in[i]);
    lpm_bulk(table_, default_hop_, ips, hops, n);
    for (size_t i = 0; i < n; ++i) input_.put_hop(out[i], hops[i]);
  }
  // An array of addresses (input=address), as lpm_perf_autotest looks them
  // up: rte_lpm_lookup_bulk straight from the array into the output.
  void process_packed(std::span<const uint8_t> in, size_t unit, Bytes& out) override {
    // The array is read as uint32_t: one that is not 4-byte aligned (no
    // caller here passes one) goes a unit at a time instead.
    if (unit != 4 || !input_.address || reinterpret_cast<uintptr_t>(in.data()) % alignof(uint32_t) != 0)
      return Kernel::process_packed(in, unit, out);
    const size_t n = in.size() / 4;
    out.resize(n * 4);  // a byte vector from the allocator: aligned for uint32_t
    // The bytes are addresses and next hops in host order (LpmInput).
    const auto* ips = reinterpret_cast<const uint32_t*>(in.data());
    auto* hops = reinterpret_cast<uint32_t*>(out.data());
    for (size_t at = 0; at < n; at += kMaxBurst) lpm_bulk(table_, default_hop_, ips + at, hops + at, std::min(kMaxBurst, n - at));
  }

 private:
  std::shared_ptr<const DpdkLpm> lpm_;  // keeps the table alive
  const rte_lpm* table_;
  uint32_t default_hop_;
  LpmInput input_;
};

// Parameters:
//   table      random (default): `routes` prefixes with a real router's
//                depth mix (kRouterDepthCounts), random unicast prefixes;
//              dpdk-perf: the table of DPDK's lpm_perf_autotest (about 1.08
//                million routes; `routes` is ignored). Installing it in
//                rte_lpm takes minutes, as in that test (rte_lpm's add scans
//                every rule of the same depth);
//              list:10.0.0.0/8=1;0.0.0.0/0=2;... : these routes;
//              file:PATH : one "a.b.c.d/len next_hop" per line.
//              A /0 route is the default route.
//   routes     how many routes `random` draws.
//   seed       for the random and dpdk-perf tables and uniform addresses.
//   addresses  packet (default): each packet's destination as
//                make_ipv4_packet draws it (first octet 10-209);
//              uniform: rewritten to a uniformly random 32-bit address (the
//                checksums updated), as lpm_perf_autotest's rte_rand().
//   inputs     distinct packets a thread cycles through; 0 (default) = as
//              many as 64 MiB of packets hold, 4096 to 1048576 (many
//              addresses, so that the table is not all in cache).
//   input      packet (default): the operator's work per packet, the
//                destination read from the frame;
//              address: each input is the 4-byte destination alone, in
//                host byte order, the inputs packed in one array (what
//                lpm_perf_autotest looks up, from its compact array), the
//                next hops out in host order too; Gbps then counts 4 bytes
//                a lookup.
//
// Beside DPDK's own figure (`./dpukit eval --only bench.lpm`): the test's
// table (lpm.table=dpdk-perf), uniformly random addresses
// (lpm.addresses=uniform) and, for the same work, lpm.input=address. Reading
// each address from a packet in memory costs the operator more than the
// lookup itself (bench/bench/lpm_layout_bench.cc measures it apart).
class Lpm final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"lpm", "network",
                                "look up a packet's IPv4 destination in the route table (longest prefix match); "
                                "out: next hop, 4 bytes big-endian (host order with input=address), ffffffff = no route",
                                2,  // 2: input=address reads host-order addresses, 4096 a call
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::map<std::string, std::string> default_params() const override {
    return {{"table", "random"}, {"routes", "100000"}, {"seed", "1"},
            {"addresses", "packet"}, {"inputs", "0"}, {"input", "packet"}};
  }

  size_t work_bytes(size_t size) const override { return address_input() ? 4 : size; }
  bool packed_inputs() const override { return address_input(); }

  size_t input_count(size_t size) const override {
    if (uint64_t n = param_u64("inputs")) {
      // Asked for: refused rather than cut when it cannot fit.
      if (n > kInputBudget / std::max<size_t>(size, 1))
        throw std::invalid_argument("lpm.inputs=" + std::to_string(n) + " at size " + std::to_string(size) +
                                    " is more than the " + bytes_text(kInputBudget) + " of inputs a point may hold");
      return n;
    }
    constexpr size_t kBudget = size_t(64) << 20;
    return std::clamp<size_t>(kBudget / std::max<size_t>(size, 1), 4096, size_t(1) << 20);
  }

  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    std::vector<Bytes> v = make_packets(size, count, seed);
    const std::string mode = param("addresses");
    if (mode != "packet" && mode != "uniform")
      throw std::invalid_argument("lpm.addresses: '" + mode + "' is not packet or uniform");
    const bool uniform = mode == "uniform";
    Rng rng(seed ^ param_u64("seed") << 20 ^ 0x61646472ull);
    if (address_input()) {
      for (Bytes& p : v) {
        const uint32_t a = uniform ? rng.u32() : load_be32(&p[kDstOffset]);
        p.assign(4, 0);
        std::memcpy(p.data(), &a, 4);  // host order (LpmInput)
      }
      return v;
    }
    if (!uniform) return v;
    for (Bytes& p : v) {
      uint8_t* ip = p.data() + kEthLen;
      store_be32(ip + 16, rng.u32());
      store_be16(ip + 10, 0);
      store_be16(ip + 10, inet_checksum(std::span<const uint8_t>(ip, kIpv4Len)));
      uint8_t* tcp = ip + kIpv4Len;
      store_be16(tcp + 16, 0);
      store_be16(tcp + 16, l4_checksum_ipv4(std::span<const uint8_t>(ip, p.size() - kEthLen)));
    }
    return v;
  }

  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<RefLpmKernel>(threads, tables().trie(), LpmInput{address_input()});
      case Backend::kLib: return kernels_of<LibLpmKernel>(threads, tables().dpdk(), LpmInput{address_input()});
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("no DPDK device class for LPM; on a DPU the eSwitch does route lookup through rte_flow");
  }

 private:
  bool address_input() const {
    const std::string v = param("input");
    if (v != "packet" && v != "address")
      throw std::invalid_argument("lpm.input: '" + v + "' is neither packet nor address");
    return v == "address";
  }

  // The last table built, with its trie and rte_lpm made on first use, so a
  // sweep over sizes and backends builds each once.
  struct Tables {
    std::string spec;
    std::shared_ptr<const RouteTable> routes;
    std::shared_ptr<const PrefixTrie> ref;
    std::shared_ptr<const DpdkLpm> lib;
  };
  class Handle {
   public:
    Handle(const Lpm& op) : op_(op), lock_(op.mu_) {}
    std::shared_ptr<const PrefixTrie> trie() {
      if (!op_.cache_.ref) op_.cache_.ref = std::make_shared<const PrefixTrie>(*op_.cache_.routes);
      return op_.cache_.ref;
    }
    std::shared_ptr<const DpdkLpm> dpdk() {
      if (!op_.cache_.lib) {
        const auto t0 = std::chrono::steady_clock::now();
        op_.cache_.lib = std::make_shared<const DpdkLpm>(*op_.cache_.routes);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (secs > 5)  // rte_lpm_add scans the rules of its depth: a big table takes minutes
          std::fprintf(stderr, "lpm: rte_lpm built (%zu routes) in %.0f s\n", op_.cache_.routes->routes.size(), secs);
      }
      return op_.cache_.lib;
    }

   private:
    const Lpm& op_;
    std::lock_guard<std::mutex> lock_;
  };

  Handle tables() const {
    const std::string table = param("table");
    std::string spec = table;
    if (table == "random") spec += "|" + std::to_string(param_u64("routes")) + "|" + std::to_string(param_u64("seed"));
    if (table == "dpdk-perf") spec += "|" + std::to_string(param_u64("seed"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cache_.spec != spec) {
        cache_ = {};
        cache_.routes = std::make_shared<const RouteTable>(build(table));
        cache_.spec = spec;
      }
    }
    return Handle(*this);
  }

  RouteTable build(const std::string& table) const {
    if (table == "random") return random_table(param_u64("routes"), param_u64("seed"));
    if (table == "dpdk-perf") {
      size_t generated = 0, dropped = 0;
      RouteTable t = dpdk_perf_table(param_u64("seed"), &generated, &dropped);
      std::fprintf(stderr,
                   "lpm: dpdk-perf table: %zu routes generated, %zu installed (%zu deeper than /24 left out: "
                   "their /24 found none of the %u tbl8 groups free, as in lpm_perf_autotest)\n",
                   generated, t.routes.size(), dropped, t.tbl8_groups);
      return t;
    }
    if (table.rfind("list:", 0) == 0) return list_table(table.substr(5));
    if (table.rfind("file:", 0) == 0) return file_table(table.substr(5));
    throw std::invalid_argument("lpm.table: '" + table + "' is not random, dpdk-perf, list:... or file:...");
  }

  mutable std::mutex mu_;
  mutable Tables cache_;
};

// ---------------------------------------------------------------------------
// Checksum
// ---------------------------------------------------------------------------

// RFC 1071 with 32-bit big-endian words into a 64-bit sum (§2(C): the sum of
// wider words folds to the same 16-bit one's complement sum).
uint16_t internet_checksum(std::span<const uint8_t> d) {
  uint64_t sum = 0;
  size_t i = 0;
  const size_t n = d.size();
  for (; i + 8 <= n; i += 8) sum += uint64_t(load_be32(&d[i])) + load_be32(&d[i + 4]);
  for (; i + 2 <= n; i += 2) sum += load_be16(&d[i]);
  if (i < n) sum += uint32_t(d[i]) << 8;  // odd length: the last byte is padded with a zero
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

class RefChecksumKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    out.resize(2);
    store_be16(out.data(), internet_checksum(in));
  }
};

// rte_raw_cksum returns the folded one's complement sum of the data read as
// host-order 16-bit words; its complement, stored in host order, is the
// checksum's bytes. Its accumulator is 32 bits, which overflows past about
// 128 KiB, so longer inputs go in 64 KiB pieces (even offsets keep the
// words aligned) whose sums are added and folded.
class LibChecksumKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    constexpr size_t kPiece = 65536;
    uint32_t sum = 0;
    for (size_t off = 0; off < in.size(); off += kPiece)
      sum += rte_raw_cksum(in.data() + off, std::min(kPiece, in.size() - off));
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    const uint16_t checksum = static_cast<uint16_t>(~sum);
    out.resize(2);
    std::memcpy(out.data(), &checksum, 2);
  }
};

class Checksum final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"checksum", "network",
                                "Internet checksum (RFC 1071) of a whole packet; out: 2 bytes big-endian", 1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    return make_packets(size, count, seed);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<RefChecksumKernel>(threads);
      case Backend::kLib: return kernels_of<LibChecksumKernel>(threads);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("no DPDK device class computes checksums; NICs and DPUs offload them per packet in ethdev");
  }
};

// ---------------------------------------------------------------------------
// CRC-32 (IEEE 802.3)
// ---------------------------------------------------------------------------

// Slicing-by-8 tables of the reflected polynomial 0xEDB88320 (0x04C11DB7
// bit-reversed): table[k][b] is the CRC of byte b followed by k zero bytes.
struct Crc32Tables {
  uint32_t t[8][256];
  constexpr Crc32Tables() : t{} {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
};
constexpr Crc32Tables kCrc32{};

// Init and xorout 0xFFFFFFFF, input and output reflected (CRC-32/ISO-HDLC).
uint32_t crc32_ethernet(std::span<const uint8_t> d) {
  uint32_t c = 0xFFFFFFFF;
  size_t i = 0;
  const auto& t = kCrc32.t;
  for (; i + 8 <= d.size(); i += 8) {
    const uint32_t lo = c ^ (uint32_t(d[i]) | uint32_t(d[i + 1]) << 8 | uint32_t(d[i + 2]) << 16 |
                             uint32_t(d[i + 3]) << 24);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][d[i + 4]] ^
        t[2][d[i + 5]] ^ t[1][d[i + 6]] ^ t[0][d[i + 7]];
  }
  for (; i < d.size(); ++i) c = (c >> 8) ^ t[0][(c ^ d[i]) & 0xFF];
  return ~c;
}

void store_fcs(Bytes& out, uint32_t crc) {
  out.resize(4);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(crc >> (8 * i));  // least significant byte first
}

class RefCrcKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override { store_fcs(out, crc32_ethernet(in)); }
};

class LibCrcKernel final : public Kernel {
 public:
  void process(std::span<const uint8_t> in, Bytes& out) override {
    store_fcs(out, rte_net_crc_calc(in.data(), static_cast<uint32_t>(in.size()), RTE_NET_CRC32_ETH));
  }
};

class Crc final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"crc", "network",
                                "CRC-32 of IEEE 802.3 over a whole packet; out: the 4 FCS bytes as sent "
                                "(least significant first)",
                                1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    return make_packets(size, count, seed);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    switch (b) {
      case Backend::kRef: return kernels_of<RefCrcKernel>(threads);
      case Backend::kLib: {
        require_dpdk();  // the SIMD choice reads EAL's maximum SIMD width
        // The widest path DPDK allows here: on x86 it steps down from
        // AVX512/VPCLMULQDQ to SSE4.2/PCLMULQDQ to scalar by CPU flags and
        // EAL's maximum SIMD width (256 bits by default, so PCLMULQDQ); on
        // Arm, NEON/PMULL, else scalar.
        static std::once_flag once;
        std::call_once(once, [] {
#if defined(RTE_ARCH_X86)
          rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
#elif defined(RTE_ARCH_ARM64)
          rte_net_crc_set_alg(RTE_NET_CRC_NEON);
#else
          rte_net_crc_set_alg(RTE_NET_CRC_SCALAR);
#endif
        });
        return kernels_of<LibCrcKernel>(threads);
      }
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("no DPDK device class computes the Ethernet FCS; the NIC's MAC adds and checks it");
  }
};

// ---------------------------------------------------------------------------
// Toeplitz (RSS)
// ---------------------------------------------------------------------------

// The Microsoft RSS verification key (also the 82599 datasheet's).
constexpr std::array<uint8_t, 40> kRssKey = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

struct FlowTuple {
  uint32_t src, dst;       // host order
  uint16_t sport, dport;
};

FlowTuple tuple_of(std::span<const uint8_t> packet) {
  if (packet.size() < kEthLen + kIpv4Len)
    throw std::invalid_argument("toeplitz: a " + std::to_string(packet.size()) + "-byte input holds no IPv4 header");
  const uint8_t* ip = packet.data() + kEthLen;
  const size_t l4 = kEthLen + (ip[0] & 0x0F) * 4u;
  if (packet.size() < l4 + 4)
    throw std::invalid_argument("toeplitz: a " + std::to_string(packet.size()) + "-byte input holds no ports");
  return {load_be32(ip + 12), load_be32(ip + 16), load_be16(&packet[l4]), load_be16(&packet[l4 + 2])};
}

// The hash over `n` bytes: for every set bit i (most significant first) of
// the input, the 32 key bits starting at bit i are xored in.
uint32_t toeplitz_hash(const uint8_t* input, size_t n) {
  uint32_t window = load_be32(kRssKey.data());  // key bits i .. i+31
  size_t next_key_bit = 32;
  uint32_t hash = 0;
  for (size_t byte = 0; byte < n; ++byte) {
    for (int b = 7; b >= 0; --b) {
      if ((input[byte] >> b) & 1) hash ^= window;
      const unsigned k = (kRssKey[next_key_bit / 8] >> (7 - next_key_bit % 8)) & 1;
      window = window << 1 | k;
      ++next_key_bit;
    }
  }
  return hash;
}

class RefToeplitzKernel final : public Kernel {
 public:
  explicit RefToeplitzKernel(bool ports) : ports_(ports) {}
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const FlowTuple t = tuple_of(in);
    uint8_t input[12];  // network order: source address, destination address, source port, destination port
    store_be32(input, t.src);
    store_be32(input + 4, t.dst);
    store_be16(input + 8, t.sport);
    store_be16(input + 10, t.dport);
    out.resize(4);
    store_be32(out.data(), toeplitz_hash(input, ports_ ? 12 : 8));
  }

 private:
  bool ports_;
};

// rte_softrss_be takes the tuple as host-order 32-bit words (the ports as
// source << 16 | destination) and the key converted by rte_convert_rss_key.
class LibToeplitzKernel final : public Kernel {
 public:
  explicit LibToeplitzKernel(bool ports) : words_(ports ? RTE_THASH_V4_L4_LEN : RTE_THASH_V4_L3_LEN) {
    alignas(4) std::array<uint8_t, 40> key = kRssKey;
    rte_convert_rss_key(reinterpret_cast<const uint32_t*>(key.data()), key_.data(), static_cast<int>(key.size()));
  }
  void process(std::span<const uint8_t> in, Bytes& out) override {
    const FlowTuple t = tuple_of(in);
    uint32_t tuple[3] = {t.src, t.dst, uint32_t(t.sport) << 16 | t.dport};
    out.resize(4);
    store_be32(out.data(), rte_softrss_be(tuple, words_, reinterpret_cast<const uint8_t*>(key_.data())));
  }

 private:
  uint32_t words_;
  std::array<uint32_t, 10> key_;
};

class Toeplitz final : public Operator {
 public:
  const OperatorInfo& info() const override {
    static const OperatorInfo i{"toeplitz", "network",
                                "RSS Toeplitz hash (Microsoft key) of a packet's IPv4/TCP 4-tuple; out: 4 bytes "
                                "big-endian; Gbps counts the packet",
                                1,
                                {Backend::kRef, Backend::kLib}};
    return i;
  }
  // tuple: l4 (default) hashes addresses and ports (12 bytes), l3 only the
  // addresses (8 bytes).
  std::map<std::string, std::string> default_params() const override { return {{"tuple", "l4"}}; }
  std::vector<Bytes> make_inputs(size_t size, size_t count, uint64_t seed) const override {
    return make_packets(size, count, seed);
  }
  std::vector<std::unique_ptr<Kernel>> make_kernels(Backend b, size_t, unsigned threads) const override {
    const std::string tuple = param("tuple");
    if (tuple != "l4" && tuple != "l3") throw std::invalid_argument("toeplitz.tuple: '" + tuple + "' is not l4 or l3");
    const bool ports = tuple == "l4";
    switch (b) {
      case Backend::kRef: return kernels_of<RefToeplitzKernel>(threads, ports);
      case Backend::kLib: return kernels_of<LibToeplitzKernel>(threads, ports);
      case Backend::kEngine: break;  // the engine backend: make_engine_kernels
      case Backend::kDev: break;
    }
    throw Unavailable("no DPDK device class computes RSS hashes; the NIC does, on receive");
  }
};

}  // namespace

void register_network_ops(Registry& r) {
  r.push_back(std::make_unique<Lpm>());
  r.push_back(std::make_unique<Checksum>());
  r.push_back(std::make_unique<Crc>());
  r.push_back(std::make_unique<Toeplitz>());
}

}  // namespace dpukit::bench
