// The "envoy + sockmap" baseline of the FlatProxy paper (§V, "sockmap"), as
// Istio-on-eBPF and Merbridge do it: TCP connections between two processes on
// loopback skip the TCP/IP stack. The loader (mesh/src/sockmap/) attaches
// `sockmap_track` to one cgroup v2 and `sockmap_redirect` to `sockets`.
//
// - sockmap_track (sock_ops): when a TCP socket of a process in the cgroup is
//   established (either side), both of its addresses on 127.0.0.0/8, it goes
//   into `sockets` under its own 4-tuple. The kernel removes it when it closes.
// - sockmap_redirect (sk_msg, runs on every sendmsg of a socket in `sockets`):
//   looks up the peer socket by the reversed 4-tuple and puts the bytes
//   straight on the peer's receive queue (BPF_F_INGRESS). When the peer is not
//   in the map (it belongs to a process outside the cgroup), the bytes take
//   the ordinary TCP path.
#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define AF_INET 2
#define SOCKETS_MAX 65536

// A socket's own view of its connection. Addresses in network order, ports in
// host order (the two context structs give ports in different orders).
struct socket_tuple {
  __u32 local_ip4;
  __u32 remote_ip4;
  __u32 local_port;
  __u32 remote_port;
};

struct {
  __uint(type, BPF_MAP_TYPE_SOCKHASH);
  __uint(max_entries, SOCKETS_MAX);
  __type(key, struct socket_tuple);
  __type(value, __u64);
} sockets SEC(".maps");

// Counters the loader sums over the CPUs; a test reads them to prove that the
// redirect happened (or, outside the cgroup, that it did not). The indexes
// are mirrored in mesh/src/sockmap/sockmap.h.
enum counter {
  SOCKETS_ADDED = 0,       // established loopback sockets put into `sockets`
  SOCKET_ADD_FAILED = 1,   // bpf_sock_hash_update refused one (map full, ...)
  MSGS_REDIRECTED = 2,     // sendmsg calls handed to the peer socket
  BYTES_REDIRECTED = 3,
  MSGS_PASSED = 4,         // sendmsg calls that took the TCP path (peer not in the map)
  COUNTERS = 5,
};

#include "percpu_counters.bpf.h"

static __always_inline int on_loopback(__u32 ip4_network_order) {
  return (bpf_ntohl(ip4_network_order) >> 24) == 127;
}

SEC("sockops")
int sockmap_track(struct bpf_sock_ops *skops) {
  if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
    return 1;
  if (skops->family != AF_INET || !on_loopback(skops->local_ip4) || !on_loopback(skops->remote_ip4)) return 1;
  struct socket_tuple key = {
      .local_ip4 = skops->local_ip4,
      .remote_ip4 = skops->remote_ip4,
      .local_port = skops->local_port,                 // host order already
      .remote_port = bpf_ntohl(skops->remote_port),    // network order in the upper half
  };
  if (bpf_sock_hash_update(skops, &sockets, &key, BPF_ANY) == 0)
    count_add(SOCKETS_ADDED, 1);
  else
    count_add(SOCKET_ADD_FAILED, 1);
  return 1;
}

SEC("sk_msg")
int sockmap_redirect(struct sk_msg_md *msg) {
  if (msg->family != AF_INET) return SK_PASS;
  struct socket_tuple peer = {
      .local_ip4 = msg->remote_ip4,
      .remote_ip4 = msg->local_ip4,
      .local_port = bpf_ntohl(msg->remote_port),
      .remote_port = msg->local_port,
  };
  __u32 size = msg->size;
  // SK_PASS from the helper: the redirect is set up. Otherwise (no peer in the
  // map) nothing is set and returning SK_PASS sends the bytes through TCP.
  if (bpf_msg_redirect_hash(msg, &sockets, &peer, BPF_F_INGRESS) == SK_PASS) {
    count_add(MSGS_REDIRECTED, 1);
    count_add(BYTES_REDIRECTED, size);
  } else {
    count_add(MSGS_PASSED, 1);
  }
  return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
