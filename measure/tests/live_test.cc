// Live measurement on a veth pair (issue 11 §1): the XDP hardware flow table
// and the AF_XDP receive side, against the kernel. Frames are sent into one
// end of the pair through an AF_PACKET socket; the table and the receiver sit
// on the other end. Needs root: skipped otherwise, and when the kernel
// refuses bpf() or XDP, saying which. Timing is checked only from below (the
// model's insertion rate and aging timeout); waits that give up are there
// so that a broken datapath fails instead of hanging.
#include <gtest/gtest.h>

#include <bpf/bpf.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dpukit/core/accounting.h"
#include "live/xdp_flow_table.h"
#include "live/xsk_receiver.h"
#include "test_bytes.h"
#include "trace/parse.h"

namespace dpukit::measure {
namespace {

using testing::Bytes;
using testing::put16;
using testing::put32;
using namespace std::chrono_literals;

constexpr int kEn10mb = 1;
constexpr auto kGiveUp = 10s;  // a datapath that loses frames fails after this instead of hanging

// Why the kernel path cannot be tested here, or "" when it can.
std::string live_unavailable() {
  if (::geteuid() != 0) return "not root: XDP and AF_XDP need root (or CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW)";
  int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, nullptr, 4, 8, 1, nullptr);
  if (fd == -EPERM)
    return "the kernel refuses the bpf() system call: EPERM (root, but without CAP_BPF or CAP_SYS_ADMIN)";
  if (fd < 0) return std::string("the kernel refuses the bpf() system call: ") + std::strerror(-fd);
  ::close(fd);
  return "";
}

// Runs a shell command; returns its exit status and puts its output in `out`.
int run(const std::string& command, std::string* out = nullptr) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::string text;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  int status = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A veth pair named after this process, deleted when it goes out of scope
// (deleting one end deletes both), whatever the test did.
class VethPair {
 public:
  explicit VethPair(unsigned queues) {
    static int serial = 0;
    std::string tag = std::to_string(::getpid()) + "n" + std::to_string(serial++);
    a_ = "dk" + tag + "a";
    b_ = "dk" + tag + "b";
    std::string q = " numtxqueues " + std::to_string(queues) + " numrxqueues " + std::to_string(queues);
    if (run("ip link add " + a_ + q + " type veth peer name " + b_ + q, &error_) != 0) return;
    created_ = true;
    // No IPv6 chatter (router solicitations, MLD) on a measured port.
    for (const auto& name : {a_, b_}) std::ofstream("/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6") << "1\n";
    for (const auto& name : {a_, b_})
      if (run("ip link set " + name + " up", &error_) != 0) return;
    error_.clear();
  }
  ~VethPair() {
    if (created_) run("ip link del " + a_);
  }
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  const std::string& a() const { return a_; }  // the sending end
  const std::string& b() const { return b_; }  // the measured end
  const std::string& error() const { return error_; }

 private:
  std::string a_, b_, error_;
  bool created_ = false;
};

struct Flow {
  uint32_t src, dst;
  uint16_t sport, dport;
  uint8_t proto;
  FlowKey key() const { return FlowKey::from_tuple(src, dst, sport, dport, proto); }
};

struct FrameShape {
  std::vector<uint16_t> tags;  // VLAN ethertypes, outermost first
  int ihl_words = 5;
  uint16_t flags_frag = 0;
  int total_override = -1;
  uint8_t proto_override = 0;  // e.g. ICMP with the flow's addresses
  size_t payload = 18;

  FrameShape& tag(uint16_t ethertype) { return tags.push_back(ethertype), *this; }
  FrameShape& ihl(int words) { return ihl_words = words, *this; }
  FrameShape& frag(uint16_t v) { return flags_frag = v, *this; }
  FrameShape& total(int v) { return total_override = v, *this; }
  FrameShape& proto(uint8_t v) { return proto_override = v, *this; }
};

// Ethernet (+ tags) + IPv4 + TCP/UDP header + payload, as a sender would put it on the wire.
Bytes frame(const Flow& f, const FrameShape& s = FrameShape()) {
  Bytes b = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01};  // dst, src: locally administered
  uint16_t tci = 7;
  for (uint16_t t : s.tags) {
    b.insert(b.end(), {uint8_t(t >> 8), uint8_t(t), 0, uint8_t(tci++)});
  }
  b.insert(b.end(), {0x08, 0x00});
  size_t ip = b.size();
  size_t hl = size_t(s.ihl_words) * 4;
  uint8_t proto = s.proto_override ? s.proto_override : f.proto;
  size_t l4 = proto == 6 ? 20 : 8;
  b.resize(ip + hl + l4 + s.payload, 0);
  b[ip] = uint8_t(0x40 | s.ihl_words);
  put16(b, ip + 2, s.total_override >= 0 ? uint32_t(s.total_override) : uint32_t(hl + l4 + s.payload));
  put16(b, ip + 6, s.flags_frag);
  b[ip + 8] = 64;
  b[ip + 9] = proto;
  put32(b, ip + 12, f.src);
  put32(b, ip + 16, f.dst);
  for (size_t i = ip + 20; i < ip + hl; ++i) b[i] = 0x01;  // NOP options
  put16(b, ip + hl, f.sport);
  put16(b, ip + hl + 2, f.dport);
  if (proto == 6) b[ip + hl + 12] = 0x50;  // TCP data offset
  return b;
}

class Sender {
 public:
  explicit Sender(const std::string& interface) {
    fd_ = ::socket(AF_PACKET, SOCK_RAW, 0);  // protocol 0: sends only
    addr_.sll_family = AF_PACKET;
    addr_.sll_ifindex = static_cast<int>(::if_nametoindex(interface.c_str()));
  }
  ~Sender() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0 && addr_.sll_ifindex != 0; }
  void send(const Bytes& f, int times = 1) {
    for (int i = 0; i < times; ++i) {
      ssize_t n = ::sendto(fd_, f.data(), f.size(), 0, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_);
      ASSERT_EQ(n, static_cast<ssize_t>(f.size())) << "sendto: " << std::strerror(errno);
    }
  }

 private:
  int fd_ = -1;
  sockaddr_ll addr_{};
};

// What the kernel stack receives on an interface after XDP: an AF_PACKET
// socket for every protocol sees what XDP passed, nothing it dropped or
// redirected.
class Tap {
 public:
  explicit Tap(const std::string& interface) {
    fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(::if_nametoindex(interface.c_str()));
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~Tap() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Copies of `f` seen so far.
  size_t seen(const Bytes& f) {
    uint8_t buf[2048];
    for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, 0)) > 0;) seen_.emplace_back(buf, buf + n);
    size_t count = 0;
    for (const auto& s : seen_) count += s == f;
    return count;
  }

 private:
  int fd_ = -1;
  std::vector<Bytes> seen_;
};

// Polls `done` until it holds or kGiveUp passes; true if it held.
bool eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + kGiveUp;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class LiveTest : public ::testing::Test {
 protected:
  static constexpr unsigned kQueues = 2;  // the receiver opens a socket per queue

  void SetUp() override {
    std::string why = live_unavailable();
    if (!why.empty()) GTEST_SKIP() << why;
    veth_ = std::make_unique<VethPair>(kQueues);
    if (!veth_->error().empty()) GTEST_SKIP() << "cannot create a veth pair: " << veth_->error();
    sender_ = std::make_unique<Sender>(veth_->a());
    ASSERT_TRUE(sender_->ok()) << "AF_PACKET socket on " << veth_->a() << ": " << std::strerror(errno);
  }

  // Attaches the table and the receiver to the measured end. The kernel may
  // refuse XDP or AF_XDP: then the test is skipped, saying which refusal.
  void open(const EmulatedFlowTable::Config& config, XdpMode mode = XdpMode::kGeneric, bool pass_hits = false) {
    XdpFlowTable::Options o;
    o.table = config;
    o.bpf_object = DUET_HW_BPF_OBJECT;
    o.interface = veth_->b();
    o.mode = mode;
    o.pass_hits = pass_hits;
    o.account = &account_;
    try {
      table_ = std::make_unique<XdpFlowTable>(o);
      receiver_ = std::make_unique<XskReceiver>(*table_);
    } catch (const LiveError& e) {
      if (e.kind() == LiveError::Kind::kPermission || e.kind() == LiveError::Kind::kXdpRefused)
        GTEST_SKIP() << to_string(e.kind()) << ": " << e.what();
      throw;
    }
  }

  static EmulatedFlowTable::Config fast_table(size_t capacity) {
    EmulatedFlowTable::Config c;
    c.capacity = capacity;
    c.insert_rate = 1e6;
    c.insert_latency_ns = 0;
    c.idle_timeout_ns = 0;
    return c;
  }

  void receive_once(int timeout_ms) {
    receiver_->poll(
        [&](const uint8_t* f, uint32_t len, unsigned queue) {
          received_.push_back({Bytes(f, f + len), queue});
        },
        timeout_ms);
  }
  // Receives until `done` holds (true) or kGiveUp passes (false).
  bool receive_until(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + kGiveUp;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      receive_once(10);
    }
    return true;
  }
  size_t received(const Bytes& f) const {
    size_t n = 0;
    for (const auto& r : received_) n += r.frame == f;
    return n;
  }
  // Frames that parse, as the dpu workers parse them, to `key`.
  size_t received_key(const FlowKey& key) const {
    size_t n = 0;
    for (const auto& r : received_) {
      FlowKey k;
      n += parse_frame(kEn10mb, r.frame.data(), r.frame.size(), &k) == ParseResult::kOk && k == key;
    }
    return n;
  }

  // Waits for the next event of `key` and returns it (a kNone-reason kRemoved when none came).
  FlowEvent next_event(const FlowKey& key) {
    auto deadline = std::chrono::steady_clock::now() + kGiveUp;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto it = events_.begin(); it != events_.end(); ++it) {
        if (it->key == key) {
          FlowEvent e = *it;
          events_.erase(it);
          return e;
        }
      }
      table_->wait_events(10ms);
      table_->poll_events(events_, 1000);
    }
    ADD_FAILURE() << "no flow-table event for " << key.str() << " within " << kGiveUp.count() << " s";
    FlowEvent none{};
    none.kind = FlowEvent::Kind::kRemoved;
    none.key = key;
    return none;
  }

  // Waits until the table counts `packets` for `key`; returns its counters.
  FlowCounters counted(const FlowKey& key, uint64_t packets) {
    std::optional<FlowCounters> c;
    bool ok = eventually([&] {
      c = table_->query(key);
      return c && c->packets >= packets;
    });
    EXPECT_TRUE(ok) << key.str() << ": " << (c ? std::to_string(c->packets) + " packets counted" : "not in the table")
                    << ", waiting for " << packets;
    return c.value_or(FlowCounters{});
  }

  // What the kernel granted, for the log: copy or zero-copy, need_wakeup, how RSS spread the frames.
  void print_receiver(const char* what) const {
    std::string per_queue;
    for (const auto& q : receiver_->stats().queues)
      per_queue += " q" + std::to_string(q.queue) + "=" + std::to_string(q.frames);
    std::printf("%s on veth: AF_XDP %s mode, need_wakeup %s, frames per queue:%s\n", what,
                receiver_->zero_copy() ? "zero-copy" : "copy", receiver_->need_wakeup() ? "on" : "off",
                per_queue.c_str());
  }

  struct Received {
    Bytes frame;
    unsigned queue;
  };
  // Declared in teardown order reversed: the receiver goes before the table, the table before the veth pair.
  std::unique_ptr<VethPair> veth_;
  std::unique_ptr<Sender> sender_;
  CpuAccount account_;
  std::unique_ptr<XdpFlowTable> table_;
  std::unique_ptr<XskReceiver> receiver_;
  std::vector<Received> received_;
  std::vector<FlowEvent> events_;
};

const Flow kHeavy{0x0a000001, 0x0a000002, 40000, 443, 17};
const Flow kLight{0x0a000003, 0x0a000002, 5353, 53, 6};

// Many light flows, so that RSS spreads them over the queues: kLight from
// 32 source ports, a frame each.
std::vector<Bytes> light_frames() {
  std::vector<Bytes> light;
  for (uint16_t i = 0; i < 32; ++i) {
    Flow f = kLight;
    f.sport = static_cast<uint16_t>(20000 + i);
    light.push_back(frame(f));
  }
  return light;
}

TEST_F(LiveTest, HeavyFlowCountedInKernelLightFlowsReachTheWorkers) {
  open(fast_table(16));
  if (IsSkipped()) return;
  EXPECT_EQ(receiver_->queue_count(), kQueues);
  Tap stack(veth_->b());
  ASSERT_TRUE(stack.ok()) << std::strerror(errno);

  table_->request_insert(kHeavy.key(), {100, 10000}, 7);
  FlowEvent e = next_event(kHeavy.key());
  ASSERT_EQ(e.kind, FlowEvent::Kind::kInserted) << to_string(e.reason);
  EXPECT_EQ(e.cookie, 7u);
  ASSERT_TRUE(table_->query(kHeavy.key()));
  EXPECT_EQ(table_->query(kHeavy.key())->packets, 100u);  // the initial count Duet promotes with
  EXPECT_EQ(table_->query(kHeavy.key())->bytes, 10000u);

  Bytes heavy = frame(kHeavy);
  sender_->send(heavy, 5);
  const std::vector<Bytes> light = light_frames();
  for (const auto& f : light) sender_->send(f, 2);

  FlowCounters c = counted(kHeavy.key(), 105);
  EXPECT_EQ(c.packets, 105u);
  EXPECT_EQ(c.bytes, 10000u + 5 * heavy.size());  // bytes = the frame length
  ASSERT_TRUE(receive_until([&] {
    for (const auto& f : light)
      if (received(f) < 2) return false;
    return true;
  })) << "light-flow frames lost before the receiver";
  receive_once(0);
  for (const auto& f : light) {
    FlowKey k;
    ASSERT_EQ(parse_frame(kEn10mb, f.data(), f.size(), &k), ParseResult::kOk);
    EXPECT_EQ(received_key(k), 2u) << k.str();
  }
  // Hits were counted in the kernel and went no further: not to the workers, not to the kernel stack.
  EXPECT_EQ(received_key(kHeavy.key()), 0u);
  EXPECT_EQ(stack.seen(heavy), 0u);
  EXPECT_EQ(stack.seen(light[0]), 0u);  // misses went to AF_XDP, not the stack

  XdpFlowTable::DatapathCounters d = table_->datapath_counters();
  EXPECT_EQ(d.hits, 5u);
  EXPECT_GE(d.redirected, 64u);
  EXPECT_EQ(d.passed, 0u);  // every queue has a socket
  EXPECT_GE(d.frames, 69u);
  // The program's own CPU time: one run per frame it saw (give or take a
  // frame of the kernel's own that arrives while the two are read; this
  // kernel has BPF_ENABLE_STATS, Linux >= 5.8), and some time for them.
  EXPECT_TRUE(d.run_time_measured);
  if (d.run_time_measured) {
    EXPECT_NEAR(static_cast<double>(d.runs), static_cast<double>(d.frames), 3.0);
    EXPECT_GT(d.run_ns, 0u);
  }
  FlowTableStats st = table_->stats();
  EXPECT_EQ(st.hits, 5u);
  EXPECT_GE(st.lookups, 69u);
  EXPECT_EQ(st.entries, 1u);
  XskReceiver::Stats rs = receiver_->stats();
  EXPECT_GE(rs.total.frames, 64u);
  EXPECT_EQ(rs.total.rx_dropped, 0u);
  EXPECT_EQ(rs.queues.size(), kQueues);
  print_receiver("generic XDP");
}

// The program and parse_frame(DLT_EN10MB) must agree on what is a flow and
// which: otherwise the dpu side would promote flows the table never matches.
TEST_F(LiveTest, ProgramParsesLikeTheWorkers) {
  open(fast_table(16));
  if (IsSkipped()) return;
  table_->request_insert(kHeavy.key(), {}, 1);
  ASSERT_EQ(next_event(kHeavy.key()).kind, FlowEvent::Kind::kInserted);

  // The heavy flow in other encapsulations: each a hit.
  std::vector<Bytes> hits = {
      frame(kHeavy, FrameShape().tag(0x8100)),
      frame(kHeavy, FrameShape().tag(0x88a8).tag(0x8100)),
      frame(kHeavy, FrameShape().ihl(7)),       // options between the header and the ports
      frame(kHeavy, FrameShape().frag(0x2000)), // first fragment (MF, offset 0): ports present
      frame(kHeavy, FrameShape().total(0)), // total length 0: unknown (TSO), as parse.cc takes it
  };
  // The heavy flow's addresses and ports but not a flow: each reaches the workers.
  std::vector<std::pair<Bytes, ParseResult>> misses = {
      {frame(kHeavy, FrameShape().frag(0x0010)), ParseResult::kNotTcpUdp},  // non-first fragment: no ports
      {frame(kHeavy, FrameShape().proto(1)), ParseResult::kNotTcpUdp}, // ICMP
      {frame(kHeavy, FrameShape().total(22)), ParseResult::kMalformed},  // total length ends before the ports
  };
  uint64_t bytes = 0;
  for (const auto& f : hits) {
    FlowKey k;
    ASSERT_EQ(parse_frame(kEn10mb, f.data(), f.size(), &k), ParseResult::kOk);
    ASSERT_EQ(k, kHeavy.key());
    sender_->send(f);
    bytes += f.size();
  }
  for (const auto& [f, why] : misses) {
    ASSERT_EQ(parse_frame(kEn10mb, f.data(), f.size(), nullptr), why);
    sender_->send(f);
  }

  FlowCounters c = counted(kHeavy.key(), hits.size());
  EXPECT_EQ(c.packets, hits.size());
  EXPECT_EQ(c.bytes, bytes);
  ASSERT_TRUE(receive_until([&] {
    for (const auto& m : misses)
      if (received(m.first) < 1) return false;
    return true;
  })) << "not-a-flow frames lost before the receiver";
  receive_once(0);
  EXPECT_EQ(received_key(kHeavy.key()), 0u);
  EXPECT_GE(table_->datapath_counters().not_a_flow, misses.size());
}

// Configured to pass hits on (not a monitoring port): counted, then on to the kernel stack.
TEST_F(LiveTest, HitsPassOnWhenConfigured) {
  open(fast_table(4), XdpMode::kGeneric, /*pass_hits=*/true);
  if (IsSkipped()) return;
  Tap stack(veth_->b());
  ASSERT_TRUE(stack.ok()) << std::strerror(errno);
  table_->request_insert(kHeavy.key(), {}, 1);
  ASSERT_EQ(next_event(kHeavy.key()).kind, FlowEvent::Kind::kInserted);
  Bytes heavy = frame(kHeavy);
  sender_->send(heavy, 3);
  EXPECT_EQ(counted(kHeavy.key(), 3).packets, 3u);
  EXPECT_TRUE(eventually([&] { return stack.seen(heavy) == 3; })) << "the stack saw " << stack.seen(heavy);
  receive_once(0);
  EXPECT_EQ(received_key(kHeavy.key()), 0u);
}

TEST_F(LiveTest, FullTableExistingEntriesAndRemoval) {
  open(fast_table(2));
  if (IsSkipped()) return;
  Flow a = kHeavy, b = kHeavy, c = kHeavy;
  b.sport = 40001;
  c.sport = 40002;
  table_->request_insert(a.key(), {1, 100}, 1);
  table_->request_insert(b.key(), {2, 200}, 2);
  table_->request_insert(c.key(), {3, 300}, 3);
  table_->request_insert(a.key(), {4, 400}, 4);
  EXPECT_EQ(next_event(a.key()).kind, FlowEvent::Kind::kInserted);
  EXPECT_EQ(next_event(b.key()).kind, FlowEvent::Kind::kInserted);
  FlowEvent full = next_event(c.key());
  EXPECT_EQ(full.kind, FlowEvent::Kind::kRefused);
  EXPECT_EQ(full.reason, FlowEvent::Reason::kTableFull);
  EXPECT_EQ(full.cookie, 3u);
  FlowEvent exists = next_event(a.key());
  EXPECT_EQ(exists.kind, FlowEvent::Kind::kRefused);
  EXPECT_EQ(exists.reason, FlowEvent::Reason::kExists);
  EXPECT_FALSE(table_->query(c.key()));
  ASSERT_TRUE(table_->query(a.key()));
  EXPECT_EQ(table_->query(a.key())->packets, 1u);  // the refused duplicate changed nothing

  FlowTableStats st = table_->stats();
  EXPECT_EQ(st.capacity, 2u);
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.insert_requests, 4u);
  EXPECT_EQ(st.inserted, 2u);
  EXPECT_EQ(st.refused_table_full, 1u);
  EXPECT_EQ(st.refused_exists, 1u);

  // Removal gives the final counters and makes room.
  Bytes fa = frame(a);
  sender_->send(fa, 3);
  counted(a.key(), 4);
  table_->request_remove(a.key(), 9);
  FlowEvent removed = next_event(a.key());
  EXPECT_EQ(removed.kind, FlowEvent::Kind::kRemoved);
  EXPECT_EQ(removed.reason, FlowEvent::Reason::kNone);
  EXPECT_EQ(removed.counters.packets, 4u);
  EXPECT_EQ(removed.counters.bytes, 100u + 3 * fa.size());
  EXPECT_FALSE(table_->query(a.key()));
  table_->request_remove(a.key(), 10);
  FlowEvent absent = next_event(a.key());
  EXPECT_EQ(absent.kind, FlowEvent::Kind::kRemoved);
  EXPECT_EQ(absent.reason, FlowEvent::Reason::kNotFound);
  table_->request_insert(c.key(), {3, 300}, 11);
  EXPECT_EQ(next_event(c.key()).kind, FlowEvent::Kind::kInserted);
  EXPECT_EQ(table_->stats().entries, 2u);
  EXPECT_EQ(table_->stats().removed, 1u);
}

TEST_F(LiveTest, FullInsertionQueueRefusesAtOnce) {
  EmulatedFlowTable::Config config = fast_table(8);
  config.insert_queue = 2;
  config.insert_latency_ns = 3600ull * 1000000000;  // nothing is applied during the test
  open(config);
  if (IsSkipped()) return;
  Flow f = kHeavy;
  for (uint16_t i = 0; i < 3; ++i) {
    f.sport = static_cast<uint16_t>(1000 + i);
    table_->request_insert(f.key(), {}, i);
  }
  // The third is refused by the request itself, not by the service thread.
  std::vector<FlowEvent> events;
  table_->poll_events(events, 10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, FlowEvent::Kind::kRefused);
  EXPECT_EQ(events[0].reason, FlowEvent::Reason::kQueueFull);
  EXPECT_EQ(events[0].key, f.key());
  FlowTableStats st = table_->stats();
  EXPECT_EQ(st.pending, 2u);
  EXPECT_EQ(st.refused_queue_full, 1u);
  EXPECT_EQ(st.entries, 0u);
}

// N requests at rate R: request k cannot take effect before k/R after the
// first was made. Checked from below only, on the kernel's map itself.
TEST_F(LiveTest, InsertionRateIsHonoured) {
  constexpr double kRate = 20;  // rules/s
  constexpr int kN = 5;
  constexpr uint64_t kLatency = 2000000;
  EmulatedFlowTable::Config config = fast_table(16);
  config.insert_rate = kRate;
  config.insert_latency_ns = kLatency;
  open(config);
  if (IsSkipped()) return;
  std::vector<FlowKey> keys;
  uint64_t t0 = now_ns();
  for (int k = 0; k < kN; ++k) {
    Flow f = kHeavy;
    f.sport = static_cast<uint16_t>(3000 + k);
    keys.push_back(f.key());
    table_->request_insert(keys.back(), {uint64_t(k), 0}, uint64_t(k));
  }
  // When each entry first shows in the kernel's map, seen from here.
  std::vector<uint64_t> seen(kN, 0);
  ASSERT_TRUE(eventually([&] {
    bool all = true;
    for (int k = 0; k < kN; ++k) {
      if (!seen[k] && table_->query(keys[k])) seen[k] = now_ns();
      all = all && seen[k];
    }
    return all;
  })) << "not every insertion was applied";
  const uint64_t gap = uint64_t(1e9 / kRate);
  for (int k = 0; k < kN; ++k) {
    EXPECT_GE(seen[k] - t0, k * gap + kLatency) << "entry " << k << " in the map too early";
    FlowEvent e = next_event(keys[k]);
    EXPECT_EQ(e.kind, FlowEvent::Kind::kInserted);
    EXPECT_GE(e.done_ns - t0, k * gap + kLatency) << "entry " << k << " applied too early";
    EXPECT_EQ(table_->query(keys[k])->packets, uint64_t(k));
  }
}

// Duet's Case 5: an idle heavy flow leaves the table with its final counters,
// and its next packet is a miss again.
TEST_F(LiveTest, AgingRemovesAnIdleEntryWithItsFinalCounters) {
  constexpr uint64_t kIdle = 300000000;  // 300 ms
  EmulatedFlowTable::Config config = fast_table(16);
  config.idle_timeout_ns = kIdle;
  open(config);
  if (IsSkipped()) return;
  table_->request_insert(kHeavy.key(), {10, 1000}, 42);
  ASSERT_EQ(next_event(kHeavy.key()).kind, FlowEvent::Kind::kInserted);
  Bytes f = frame(kHeavy);
  sender_->send(f, 3);
  uint64_t before_last_hit = now_ns();
  sender_->send(f);
  counted(kHeavy.key(), 14);

  FlowEvent aged = next_event(kHeavy.key());
  ASSERT_EQ(aged.kind, FlowEvent::Kind::kAged);
  EXPECT_EQ(aged.cookie, 42u);
  EXPECT_EQ(aged.counters.packets, 14u);
  EXPECT_EQ(aged.counters.bytes, 1000u + 4 * f.size());
  EXPECT_GE(aged.done_ns - before_last_hit, kIdle) << "aged before it was idle for the timeout";
  EXPECT_FALSE(table_->query(kHeavy.key()));
  FlowTableStats st = table_->stats();
  EXPECT_EQ(st.aged, 1u);
  EXPECT_EQ(st.entries, 0u);

  sender_->send(f);
  EXPECT_TRUE(receive_until([&] { return received(f) == 1; })) << "after aging the flow's packet is a miss";
  EXPECT_EQ(table_->datapath_counters().hits, 4u);
}

// Native (driver) mode where the driver has it: veth does.
TEST_F(LiveTest, NativeModeOnVeth) {
  open(fast_table(4), XdpMode::kNative);
  if (IsSkipped()) return;
  table_->request_insert(kHeavy.key(), {}, 1);
  ASSERT_EQ(next_event(kHeavy.key()).kind, FlowEvent::Kind::kInserted);
  Bytes heavy = frame(kHeavy);
  sender_->send(heavy, 3);
  const std::vector<Bytes> light = light_frames();
  for (const auto& f : light) sender_->send(f);
  EXPECT_EQ(counted(kHeavy.key(), 3).packets, 3u);
  EXPECT_TRUE(receive_until([&] {
    for (const auto& f : light)
      if (received(f) < 1) return false;
    return true;
  }));
  receive_once(0);
  EXPECT_EQ(received_key(kHeavy.key()), 0u);
  print_receiver("native XDP");
}

TEST_F(LiveTest, ServiceThreadTimeIsHwTime) {
  EmulatedFlowTable::Config config = fast_table(4096);
  config.idle_timeout_ns = 4000000;  // scans every 1 ms
  open(config);
  if (IsSkipped()) return;
  Flow f = kHeavy;
  for (uint16_t i = 0; i < 2000; ++i) {
    f.sport = i;
    table_->request_insert(f.key(), {}, i);
  }
  ASSERT_TRUE(eventually([&] { return table_->stats().inserted == 2000; }));
  receiver_.reset();
  table_.reset();  // the service thread reports its time when it ends
  EXPECT_GT(account_.get(Place::kHw), 0u);
  EXPECT_EQ(account_.get(Place::kDpu), 0u);
  EXPECT_EQ(account_.get(Place::kHost), 0u);
}

// ------------------------------------------------------------ errors, no privileges needed

TEST(LiveErrors, MissingObjectFile) {
  XdpFlowTable::Options o;
  o.bpf_object = ::testing::TempDir() + "no-such-duet_hw.bpf.o";
  o.interface = "lo";
  try {
    XdpFlowTable table(o);
    FAIL() << "opened a table without its BPF object";
  } catch (const LiveError& e) {
    EXPECT_EQ(e.kind(), LiveError::Kind::kObjectMissing) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-such-duet_hw.bpf.o not found"), std::string::npos) << e.what();
  }
}

TEST(LiveErrors, MissingInterface) {
  for (std::string name : {"dkl-no-such-if", "../lo", ""}) {
    XdpFlowTable::Options o;
    o.bpf_object = DUET_HW_BPF_OBJECT;
    o.interface = name;
    try {
      XdpFlowTable table(o);
      ADD_FAILURE() << "opened a table on interface '" << name << "'";
    } catch (const LiveError& e) {
      EXPECT_EQ(e.kind(), LiveError::Kind::kNoInterface) << e.what();
      EXPECT_NE(std::string(e.what()).find("no such interface '" + name + "'"), std::string::npos) << e.what();
    }
  }
}

// Without root the error says so, before anything is attached. Run as root,
// the check runs in a child that drops to an unprivileged user.
TEST(LiveErrors, NotRoot) {
  std::filesystem::path object = DUET_HW_BPF_OBJECT;
  auto check = [&] {
    XdpFlowTable::Options o;
    o.bpf_object = object;
    o.interface = "lo";
    try {
      XdpFlowTable table(o);
      return std::string("opened a table without privileges");
    } catch (const LiveError& e) {
      if (e.kind() != LiveError::Kind::kPermission) return std::string("wrong kind: ") + e.what();
      if (std::string(e.what()).find("not root") == std::string::npos)
        return std::string("no 'not root' in: ") + e.what();
      return std::string();
    }
  };
  if (::geteuid() != 0) {
    EXPECT_EQ(check(), "");
    return;
  }
  // The child must be able to read the object as nobody: give it a copy in the temporary directory.
  object = ::testing::TempDir() + "dk-notroot-" + std::to_string(::getpid()) + ".bpf.o";
  std::filesystem::copy_file(DUET_HW_BPF_OBJECT, object, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(object, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                           std::filesystem::perms::others_read);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string result = ::setgid(65534) == 0 && ::setuid(65534) == 0 ? check() : "cannot drop to nobody";
    (void)!::write(pipe_fds[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string result;
  char buf[512];
  while (ssize_t n = ::read(pipe_fds[0], buf, sizeof buf)) {
    if (n < 0) break;
    result.append(buf, size_t(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove(object);
  EXPECT_EQ(result, "");
}

}  // namespace
}  // namespace dpukit::measure
