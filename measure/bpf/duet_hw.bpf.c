// Duet's hardware flow table on a real interface (issue 11 §1): an XDP
// program whose hash map `flows` stands for the eSwitch table. A packet of an
// installed (heavy) flow is counted here, in the kernel, and goes no further;
// every other packet is redirected to the AF_XDP socket of its receive queue,
// where a dpu worker updates the sketch (light flows, Algorithm 1 lines 6-24).
//
// User space (measure/src/live/xdp_flow_table.cc) owns the key set: it sets
// `flows`' max_entries to the table's capacity before load, inserts promoted
// flows at the modelled insertion rate, and ages idle entries. This program
// never inserts or deletes; it only counts.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// The 13-byte FlowKey of core/include/dpukit/core/flow_key.h, byte for byte:
// the header fields in network order, so user space uses FlowKey::bytes as
// the map key directly.
struct flow_key {
  __u32 src_ip;
  __u32 dst_ip;
  __u16 src_port;
  __u16 dst_port;
  __u8 proto;
} __attribute__((packed));

// Mirrored by HwFlowEntry in measure/src/live/xdp_flow_table.h.
struct flow_entry {
  __u64 packets;
  __u64 bytes;
  __u64 last_seen_ns;  // bpf_ktime_get_ns(): CLOCK_MONOTONIC, what aging compares against
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);  // replaced by the loader with the table's capacity
  __type(key, struct flow_key);
  __type(value, struct flow_entry);
} flows SEC(".maps");

// Receive queue -> AF_XDP socket; a queue without a socket lets misses pass
// to the kernel stack.
struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);  // replaced by the loader with the interface's rx queue count
  __type(key, __u32);
  __type(value, __u32);
} xsks SEC(".maps");

// Indexes mirrored by XdpFlowTable::DatapathCounters.
enum counter {
  FRAMES = 0,      // every frame the program saw
  HITS = 1,        // frames of an installed flow, counted in `flows`
  REDIRECTED = 2,  // misses handed to the queue's AF_XDP socket
  NOT_A_FLOW = 3,  // not IPv4 TCP/UDP (or a non-first fragment); redirected or passed like any miss
  PASSED = 4,      // misses with no socket on their queue: XDP_PASS
  COUNTERS = 5,
};

#include "percpu_counters.bpf.h"

// What a hit returns. XDP_DROP: the interface is a monitoring port, a heavy
// flow's packet is measured and done. The loader may set XDP_PASS before load
// (read-only data, so the verifier sees a constant).
const volatile __u32 hit_verdict = XDP_DROP;

static __always_inline void count(__u32 which) { count_add(which, 1); }

// 802.1Q, 802.1ad, and the pre-standard QinQ types that measure/src/trace/parse.cc also skips.
static __always_inline int is_vlan(__u16 ethertype_be) {
  return ethertype_be == bpf_htons(0x8100) || ethertype_be == bpf_htons(0x88a8) ||
         ethertype_be == bpf_htons(0x9100) || ethertype_be == bpf_htons(0x9200);
}

struct vlan_tag {
  __be16 tci;
  __be16 ethertype;  // of what follows the tag
};

// The same decisions as parse_frame(DLT_EN10MB) in measure/src/trace/parse.cc,
// so that a flow the dpu side promotes is the flow this program matches.
// Returns 1 and fills `key` for an IPv4 TCP/UDP packet whose ports are present.
static __always_inline int parse_flow(void *data, void *end, struct flow_key *key) {
  struct ethhdr *eth = data;
  if ((void *)(eth + 1) > end) return 0;
  __be16 type = eth->h_proto;
  void *cursor = eth + 1;
#pragma unroll
  for (int i = 0; i < 2; i++) {  // up to two tags (QinQ)
    if (!is_vlan(type)) break;
    struct vlan_tag *tag = cursor;
    if ((void *)(tag + 1) > end) return 0;
    type = tag->ethertype;
    cursor = tag + 1;
  }
  if (type != bpf_htons(ETH_P_IP)) return 0;

  struct iphdr *ip = cursor;
  if ((void *)(ip + 1) > end) return 0;
  if (ip->version != 4 || ip->ihl < 5) return 0;
  __u32 header_len = ip->ihl * 4;
  __u32 total = bpf_ntohs(ip->tot_len);  // 0 = unknown (TSO/GSO), as in parse.cc
  if (total != 0 && total < header_len + 4) return 0;
  if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) return 0;
  if (ip->frag_off & bpf_htons(0x1fff)) return 0;  // a non-first fragment carries no ports

  __u8 *ports = (__u8 *)ip + header_len;  // honours IHL: options sit between
  if ((void *)(ports + 4) > end) return 0;
  key->src_ip = ip->saddr;
  key->dst_ip = ip->daddr;
  __builtin_memcpy(&key->src_port, ports, 2);
  __builtin_memcpy(&key->dst_port, ports + 2, 2);
  key->proto = ip->protocol;
  return 1;
}

// A miss goes to the dpu workers through the AF_XDP socket of its queue
// (the RSS step of Algorithm 1, done by the NIC's own queue selection).
static __always_inline int to_dpu_workers(struct xdp_md *ctx) {
  long verdict = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
  count(verdict == XDP_REDIRECT ? REDIRECTED : PASSED);
  return (int)verdict;
}

SEC("xdp")
int duet_hw(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data;
  void *end = (void *)(long)ctx->data_end;
  count(FRAMES);

  struct flow_key key = {};
  if (!parse_flow(data, end, &key)) {
    count(NOT_A_FLOW);
    return to_dpu_workers(ctx);
  }
  struct flow_entry *entry = bpf_map_lookup_elem(&flows, &key);
  if (!entry) return to_dpu_workers(ctx);

  // Algorithm 1 lines 2-4: a heavy flow is counted in hardware and leaves the
  // pipeline. Several CPUs run this program at once: atomic adds.
  __sync_fetch_and_add(&entry->packets, 1);
  __sync_fetch_and_add(&entry->bytes, (__u64)(end - data));
  entry->last_seen_ns = bpf_ktime_get_ns();  // one aligned 8-byte store; the newest writer wins
  count(HITS);
  return hit_verdict;
}

char LICENSE[] SEC("license") = "GPL";
