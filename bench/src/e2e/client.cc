#include "client.h"

#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "dpukit/core/pacing.h"
#include "dpukit/core/random.h"
#include "apprecog.h"
#include "datagram.h"
#include "flow_count.h"
#include "udp.h"

namespace dpukit::bench::e2e {

void check_client_config(const ClientConfig& c) {
  if (c.size < kHeaderBytes || c.size > kMaxDatagram)
    throw std::invalid_argument("--size must be " + std::to_string(kHeaderBytes) + " to " + std::to_string(kMaxDatagram) +
                                " bytes (the datagram, its " + std::to_string(kHeaderBytes) + "-byte header included)");
  if (!(c.interval_us >= 0)) throw std::invalid_argument("--interval must be >= 0");
  if (!(c.duration_s > 0)) throw std::invalid_argument("--duration must be > 0");
  if (c.burst == 0 || c.burst > 1024) throw std::invalid_argument("--burst must be 1 to 1024");
  if (c.gso && (c.burst > kMaxGsoSegments || size_t{c.burst} * c.size > kMaxGsoBytes))
    throw std::invalid_argument("with --gso a burst is one UDP send: at most " + std::to_string(kMaxGsoSegments) +
                                " datagrams and " + std::to_string(kMaxGsoBytes) + " bytes (here " +
                                std::to_string(c.burst) + " x " + std::to_string(c.size) + ")");
  if (c.flows == 0 || c.flows > (size_t{1} << 23)) throw std::invalid_argument("--flows must be 1 to 8388608");
  if (!(c.zipf >= 0)) throw std::invalid_argument("--zipf must be >= 0");
  if (c.pool == 0) throw std::invalid_argument("--pool must be > 0");
  if (!(c.drain_s >= 0)) throw std::invalid_argument("--drain must be >= 0");
  parse_endpoint(c.server_host, c.port);
}

FlowKey client_flow_key(size_t i) {
  const uint32_t src = 0x0A800000u + static_cast<uint32_t>(i);  // 10.128.0.0 + i
  return FlowKey::from_tuple(src, 0x0AC70001u /* 10.199.0.1 */, static_cast<uint16_t>(1024 + i % 64512), 9000, 17);
}

ZipfFlows::ZipfFlows(size_t flows, double s, uint64_t seed) : cdf_(flows), state_(seed) {
  double sum = 0;
  for (size_t k = 0; k < flows; ++k) cdf_[k] = (sum += s == 0 ? 1.0 : std::pow(static_cast<double>(k + 1), -s));
  for (auto& v : cdf_) v /= sum;
  cdf_.back() = 1.0;
}

size_t ZipfFlows::next() {
  const double u = static_cast<double>(mix64(state_ += 0x9e3779b97f4a7c15ull) >> 11) * 0x1.0p-53;
  return static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
}

double percentile_sorted(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

namespace {

struct ReplyStats {
  uint64_t unique = 0, duplicates = 0, bad = 0, unexpected = 0, wrong_action = 0;
  uint64_t verified = 0, verify_failures = 0, bytes = 0;
  std::array<uint64_t, 4> by_action{};
  std::string first_failure;
};

// The payloads: for apprecog a pool with known actions, for flowtable a few text bodies.
PayloadPool client_payloads(const ClientConfig& c, size_t body_bytes) {
  PayloadPool pool;
  if (c.program == Program::kAppRecog) {
    pool = make_payload_pool(body_bytes, c.pool, c.mix, c.seed);
  } else {
    for (size_t i = 0; i < 16; ++i) {
      Bytes b(body_bytes);
      fill_text(b, c.seed * 131 + i);
      pool.bodies.push_back(std::move(b));
      pool.expected.push_back(Action::kNone);
    }
  }
  return pool;
}

// The requests: each burst's datagrams go out by sendmmsg, header + body in
// two iovecs (the body is the pool's, not copied), or by UDP GSO
// (UDP_SEGMENT): a burst of datagrams in one send, as a hardware traffic
// generator would emit them; the receiving side's kernel splits it.
class RequestSender {
 public:
  RequestSender(const ClientConfig& c, const PayloadPool& pool, size_t body_bytes)
      : per_flow(c.flows, 0),
        c_(c),
        pool_(pool),
        body_bytes_(body_bytes),
        keys_(c.flows),
        terms_(c.flows),
        heads_(c.burst),
        iov_(size_t{c.burst} * 2),
        msgs_(c.burst),
        flow_of_(c.burst),
        pool_of_(c.burst),
        gso_ok_(c.gso && c.burst > 1),
        gso_buf_(gso_ok_ ? size_t{c.burst} * c.size : 0) {
    for (size_t i = 0; i < c.flows; ++i) {
      keys_[i] = client_flow_key(i);
      terms_[i] = flow_digest_term(keys_[i]);
    }
  }

  // Sends `n` requests numbered from `seq`, their flows drawn from `zipf`;
  // returns how many went. Sequence numbers stay dense over what was sent:
  // the rest of a burst that failed is numbered again in the next one.
  uint32_t send_burst(int fd, ZipfFlows& zipf, uint64_t seq, uint32_t n) {
    prepare(zipf, seq, n);
    uint32_t done = 0;
    bool gso_failed = false;
    if (gso_ok_ && n > 1) done = send_gso(fd, n, gso_failed);
    while (done < n && !gso_failed) {
      const int r = sendmmsg(fd, msgs_.data() + done, n - done, 0);
      ++send_calls;
      if (r > 0) {
        done += static_cast<uint32_t>(r);
      } else if (errno == EINTR) {
        continue;
      } else {
        // ECONNREFUSED (an ICMP error from an earlier datagram), ENOBUFS...:
        // the rest of this burst is not sent; its sequence numbers go to the next one.
        send_failed();
        break;
      }
    }
    count_sent(done);
    return done;
  }

  uint64_t sent_bytes = 0, send_calls = 0, send_errors = 0, digest = 0, gso_sends = 0;
  std::array<uint64_t, 4> sent_by_action{};
  std::vector<uint64_t> per_flow;
  std::string send_error_text, gso_refused;

 private:
  // The burst's send slots: each datagram's flow and body, and its header
  // stamped with one send time.
  void prepare(ZipfFlows& zipf, uint64_t seq, uint32_t n) {
    for (uint32_t j = 0; j < n; ++j) {
      const uint64_t s = seq + j;
      const size_t f = zipf.next();
      const size_t p = s % pool_.bodies.size();
      flow_of_[j] = static_cast<uint32_t>(f);
      pool_of_[j] = p;
      iov_[2 * j] = {heads_[j].data(), kHeaderBytes};
      iov_[2 * j + 1] = {const_cast<uint8_t*>(pool_.bodies[p].data()), body_bytes_};
      std::memset(&msgs_[j], 0, sizeof msgs_[j]);
      msgs_[j].msg_hdr.msg_iov = &iov_[2 * j];
      msgs_[j].msg_hdr.msg_iovlen = 2;
    }
    const uint64_t send_ns = now_ns();
    for (uint32_t j = 0; j < n; ++j)
      encode_header({c_.program, Kind::kRequest, Action::kNone, seq + j, send_ns, static_cast<uint16_t>(c_.size),
                     keys_[flow_of_[j]]},
                    heads_[j]);
  }

  // One buffer of n datagrams back to back; the kernel cuts it every c.size
  // bytes. Returns n once sent, 0 when the burst is to go by sendmmsg (GSO
  // refused on this path, from now on, or a signal) or is lost (`failed`).
  uint32_t send_gso(int fd, uint32_t n, bool& failed) {
    for (uint32_t j = 0; j < n; ++j) {
      std::memcpy(gso_buf_.data() + size_t{j} * c_.size, heads_[j].data(), kHeaderBytes);
      std::memcpy(gso_buf_.data() + size_t{j} * c_.size + kHeaderBytes, pool_.bodies[pool_of_[j]].data(), body_bytes_);
    }
    iovec whole{gso_buf_.data(), size_t{n} * c_.size};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
    msghdr mh{};
    mh.msg_iov = &whole;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const uint16_t seg = static_cast<uint16_t>(c_.size);
    std::memcpy(CMSG_DATA(cm), &seg, sizeof seg);
    ++send_calls;
    ++gso_sends;
    if (sendmsg(fd, &mh, 0) >= 0) return n;
    if (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOPROTOOPT) {
      gso_ok_ = false;  // no UDP GSO on this path: datagram by datagram from now on
      gso_refused = std::strerror(errno);
      --gso_sends;
    } else if (errno == EINTR) {
      --gso_sends;  // this burst goes by sendmmsg
    } else {
      send_failed();
      failed = true;
    }
    return 0;
  }

  void send_failed() {
    ++send_errors;
    if (send_error_text.empty()) send_error_text = std::strerror(errno);
  }

  // The flow digest, the flows used and the expected actions count what was sent.
  void count_sent(uint32_t done) {
    for (uint32_t j = 0; j < done; ++j) {
      const size_t f = flow_of_[j];
      digest += terms_[f];
      ++per_flow[f];
      sent_bytes += c_.size;
      ++sent_by_action[static_cast<size_t>(pool_.expected[pool_of_[j]])];
    }
  }

  const ClientConfig& c_;
  const PayloadPool& pool_;
  const size_t body_bytes_;
  std::vector<FlowKey> keys_;
  std::vector<uint64_t> terms_;  // each flow's term of the flow digest
  std::vector<std::array<uint8_t, kHeaderBytes>> heads_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
  std::vector<uint32_t> flow_of_;
  std::vector<size_t> pool_of_;
  bool gso_ok_;
  std::vector<uint8_t> gso_buf_;
};

// The replies (apprecog): each counted once (a bit per sequence number
// sent), its action checked against the one its payload was made for, its
// round-trip time kept, and every verify_every-th reply's body checked
// against its request.
class ReplyReader {
 public:
  static constexpr unsigned kBatch = 64;

  ReplyReader(const ClientConfig& c, const PayloadPool& pool, size_t body_bytes)
      : c_(c),
        pool_(pool),
        body_bytes_(body_bytes),
        buf_(size_t{kBatch} * kRecvBuffer),
        replies_(kBatch),
        request_(c.size) {
    for (unsigned i = 0; i < kBatch; ++i)
      replies_.set_buffer(i, buf_.data() + size_t{i} * kRecvBuffer, kRecvBuffer, nullptr);
    if (c.program == Program::kAppRecog) rtts.reserve(std::min<size_t>(c.max_rtt_samples, 1u << 20));
  }

  // Room in the bitmap for sequence numbers below `seq`.
  void make_room(uint64_t seq) {
    if (seen_.size() * 64 < seq) seen_.resize(seen_.size() + 4096, 0);
  }

  // One batch of replies to requests below `seq` (with `wait`, up to the
  // socket's timeout); returns how many arrived.
  unsigned take(int fd, bool wait, uint64_t seq) {
    const unsigned n = replies_.receive(fd, kBatch, wait);
    const uint64_t now = now_ns();
    for (unsigned i = 0; i < n; ++i)
      check(std::span<const uint8_t>(buf_.data() + size_t{i} * kRecvBuffer, replies_.length(i)), seq, now);
    return n;
  }

  uint64_t refused() const { return replies_.refused(); }

  ReplyStats rs;
  std::vector<uint32_t> rtts;

 private:
  void check(std::span<const uint8_t> d, uint64_t seq, uint64_t now) {
    Header h;
    if (decode_header(d, h) != Malformed::kOk) {
      ++rs.bad;
      return;
    }
    if (h.kind != Kind::kReply || h.program != Program::kAppRecog || h.seq >= seq) {
      ++rs.unexpected;
      return;
    }
    uint64_t& word = seen_[h.seq / 64];
    const uint64_t bit = uint64_t{1} << (h.seq % 64);
    if (word & bit) {
      ++rs.duplicates;
      return;
    }
    word |= bit;
    ++rs.unique;
    rs.bytes += d.size();
    ++rs.by_action[static_cast<size_t>(h.action)];
    if (rtts.size() < c_.max_rtt_samples)
      rtts.push_back(static_cast<uint32_t>(std::min<uint64_t>(now - std::min(now, h.send_ns), UINT32_MAX)));
    const size_t p = h.seq % pool_.bodies.size();
    if (h.action != pool_.expected[p]) {
      ++rs.wrong_action;
      if (rs.first_failure.empty())
        rs.first_failure = "seq " + std::to_string(h.seq) + ": server did " + action_name(h.action) + ", expected " +
                           action_name(pool_.expected[p]);
      return;
    }
    if (c_.verify_every && rs.unique % c_.verify_every == 0) verify(h, p, d);
  }

  void verify(const Header& h, size_t p, std::span<const uint8_t> d) {
    Header q = h;  // the request as it was sent
    q.kind = Kind::kRequest;
    q.action = Action::kNone;
    q.length = static_cast<uint16_t>(c_.size);
    encode_header(q, request_);
    std::memcpy(request_.data() + kHeaderBytes, pool_.bodies[p].data(), body_bytes_);
    const std::string why = check_reply_body(h.action, request_, d.subspan(kHeaderBytes));
    ++rs.verified;
    if (!why.empty()) {
      ++rs.verify_failures;
      if (rs.first_failure.empty()) rs.first_failure = "seq " + std::to_string(h.seq) + ": " + why;
    }
  }

  const ClientConfig& c_;
  const PayloadPool& pool_;
  const size_t body_bytes_;
  std::vector<uint8_t> buf_;
  RecvBatch replies_;
  std::vector<uint64_t> seen_;
  Bytes request_;
};

// apprecog's figures: the replies, the round-trip loss and times.
void reply_figures(nlohmann::json& f, const ClientConfig& c, const RequestSender& sender, ReplyReader& reader,
                   size_t pool_size, uint64_t seq, double send_s) {
  std::vector<uint32_t>& rtts = reader.rtts;
  const ReplyStats& rs = reader.rs;
  const auto& sent_by_action = sender.sent_by_action;
  std::sort(rtts.begin(), rtts.end());
  double mean = 0;
  for (uint32_t v : rtts) mean += v;
  mean = rtts.empty() ? 0 : mean / static_cast<double>(rtts.size());
  f["expected_actions"] = {{"hash", sent_by_action[1]}, {"compress", sent_by_action[2]}, {"echo", sent_by_action[3]}};
  f["replies"] = {{"unique", rs.unique},
                  {"duplicates", rs.duplicates},
                  {"bad", rs.bad},
                  {"unexpected", rs.unexpected},
                  {"wrong_action", rs.wrong_action},
                  {"verified", rs.verified},
                  {"verify_failures", rs.verify_failures},
                  {"first_failure", rs.first_failure},
                  {"bytes", rs.bytes},
                  {"actions", {{"hash", rs.by_action[1]}, {"compress", rs.by_action[2]}, {"echo", rs.by_action[3]}}}};
  // Round-trip loss: requests lost on the way in, at the server, or replies lost on the way back.
  f["loss"] = seq ? 1.0 - static_cast<double>(rs.unique) / static_cast<double>(seq) : 0.0;
  f["reply_pps"] = send_s > 0 ? rs.unique / send_s : 0.0;
  f["rtt_us"] = {{"count", rtts.size()},
                 {"min", rtts.empty() ? 0.0 : rtts.front() / 1e3},
                 {"p50", percentile_sorted(rtts, 0.50) / 1e3},
                 {"p90", percentile_sorted(rtts, 0.90) / 1e3},
                 {"p99", percentile_sorted(rtts, 0.99) / 1e3},
                 {"p999", percentile_sorted(rtts, 0.999) / 1e3},
                 {"max", rtts.empty() ? 0.0 : rtts.back() / 1e3},
                 {"mean", mean / 1e3}};
  f["pool"] = pool_size;
  f["mix"] = {{"hash", c.mix.hash}, {"compress", c.mix.compress}, {"echo", c.mix.echo}};
}

}  // namespace

nlohmann::json run_client(const ClientConfig& c, const std::atomic<bool>& stop, CpuAccount& cpu) {
  check_client_config(c);
  const bool apprecog = c.program == Program::kAppRecog;
  const size_t body_bytes = c.size - kHeaderBytes;
  const PayloadPool pool = client_payloads(c, body_bytes);
  ZipfFlows zipf(c.flows, c.zipf, c.seed ^ 0xF10Bull);
  RequestSender sender(c, pool, body_bytes);

  UdpSocket sock;
  sock.connect(parse_endpoint(c.server_host, c.port));
  sock.set_sndbuf(c.sndbuf);
  sock.set_rcvbuf(c.sndbuf);
  sock.set_recv_timeout_us(10000);
  ReplyReader reader(c, pool, body_bytes);

  // Bursts at the offered rate for the duration, the replies taken between
  // them; then the replies still on their way, for at most the drain time.
  uint64_t seq = 0;
  Pacer pacer(c.interval_us > 0 ? 1e6 / c.interval_us : 0, c.burst);
  PlaceTimer timer(cpu, Place::kHost);
  const uint64_t t0 = now_ns(), end = t0 + static_cast<uint64_t>(c.duration_s * 1e9);
  uint64_t now = t0;
  while (now < end && !stop.load(std::memory_order_relaxed)) {
    const uint32_t n = pacer.try_acquire(c.burst, now);
    if (n > 0) {
      if (apprecog) reader.make_room(seq + n);
      seq += sender.send_burst(sock.fd(), zipf, seq, n);
    }
    if (apprecog) {
      for (int k = 0; k < 4 && reader.take(sock.fd(), false, seq) == ReplyReader::kBatch; ++k) {
      }
    }
    now = now_ns();
  }
  const uint64_t send_end = now_ns();
  if (apprecog) {
    const uint64_t drain_end = send_end + static_cast<uint64_t>(c.drain_s * 1e9);
    while (reader.rs.unique < seq && now_ns() < drain_end && !stop.load(std::memory_order_relaxed))
      reader.take(sock.fd(), true, seq);
  }
  timer.finish();

  const double send_s = (send_end - t0) / 1e9;
  size_t flows_used = 0;
  for (uint64_t v : sender.per_flow) flows_used += v != 0;
  nlohmann::json f = {{"role", "client"},
                      {"program", program_name(c.program)},
                      {"size", c.size},
                      {"body_bytes", body_bytes},
                      {"interval_us", c.interval_us},
                      {"offered_pps", c.interval_us > 0 ? 1e6 / c.interval_us : 0.0},
                      {"send_s", send_s},
                      {"send_start_ns", t0},  // CLOCK_MONOTONIC, comparable with the server's
                      {"send_end_ns", send_end},
                      {"sent", seq},
                      {"sent_bytes", sender.sent_bytes},
                      {"send_calls", sender.send_calls},
                      {"send_errors", sender.send_errors},
                      {"send_error", sender.send_error_text},
                      {"icmp_refused", reader.refused()},
                      {"gso", {{"asked", c.gso}, {"sends", sender.gso_sends}, {"refused", sender.gso_refused}}},
                      {"achieved_pps", send_s > 0 ? seq / send_s : 0.0},
                      {"achieved_gbps", send_s > 0 ? sender.sent_bytes * 8.0 / send_s / 1e9 : 0.0},
                      {"flows", c.flows},
                      {"flows_used", flows_used},
                      {"zipf", c.zipf}};
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(sender.digest));
  f["flow_digest"] = hex;
  if (apprecog) reply_figures(f, c, sender, reader, pool.bodies.size(), seq, send_s);
  return f;
}

}  // namespace dpukit::bench::e2e
