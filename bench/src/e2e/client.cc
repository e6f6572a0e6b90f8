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

}  // namespace

nlohmann::json run_client(const ClientConfig& c, const std::atomic<bool>& stop, CpuAccount& cpu) {
  check_client_config(c);
  const bool apprecog = c.program == Program::kAppRecog;
  const size_t body_bytes = c.size - kHeaderBytes;

  // The payloads: for apprecog a pool with known actions, for flowtable a few text bodies.
  PayloadPool pool;
  if (apprecog) {
    pool = make_payload_pool(body_bytes, c.pool, c.mix, c.seed);
  } else {
    for (size_t i = 0; i < 16; ++i) {
      Bytes b(body_bytes);
      fill_text(b, c.seed * 131 + i);
      pool.bodies.push_back(std::move(b));
      pool.expected.push_back(Action::kNone);
    }
  }
  ZipfFlows zipf(c.flows, c.zipf, c.seed ^ 0xF10Bull);
  std::vector<FlowKey> keys(c.flows);
  std::vector<uint64_t> terms(c.flows);
  for (size_t i = 0; i < c.flows; ++i) {
    keys[i] = client_flow_key(i);
    terms[i] = flow_digest_term(keys[i]);
  }

  UdpSocket sock;
  sock.connect(parse_endpoint(c.server_host, c.port));
  sock.set_sndbuf(c.sndbuf);
  sock.set_rcvbuf(c.sndbuf);
  sock.set_recv_timeout_us(10000);

  // Send slots: header + body in two iovecs (the body is the pool's, not copied).
  const unsigned burst = c.burst;
  std::vector<std::array<uint8_t, kHeaderBytes>> heads(burst);
  std::vector<iovec> iov(size_t{burst} * 2);
  std::vector<mmsghdr> msgs(burst);
  std::vector<uint32_t> flow_of(burst);
  std::vector<size_t> pool_of(burst);

  // Reply slots.
  constexpr unsigned kReplyBatch = 64;
  std::vector<uint8_t> rbuf(size_t{kReplyBatch} * kRecvBuffer);
  RecvBatch replies(kReplyBatch);
  for (unsigned i = 0; i < kReplyBatch; ++i) replies.set_buffer(i, rbuf.data() + size_t{i} * kRecvBuffer, kRecvBuffer, nullptr);

  std::vector<uint64_t> seen;
  std::vector<uint32_t> rtts;
  if (apprecog) rtts.reserve(std::min<size_t>(c.max_rtt_samples, 1u << 20));
  ReplyStats rs;
  Bytes request(c.size);

  uint64_t seq = 0, sent_bytes = 0, send_calls = 0, send_errors = 0, digest = 0;
  std::array<uint64_t, 4> sent_by_action{};
  std::vector<uint64_t> per_flow(c.flows, 0);
  std::string send_error_text;

  auto take_replies = [&](bool wait) -> unsigned {
    const unsigned n = replies.receive(sock.fd(), kReplyBatch, wait);
    const uint64_t now = now_ns();
    for (unsigned i = 0; i < n; ++i) {
      const std::span<const uint8_t> d(rbuf.data() + size_t{i} * kRecvBuffer, replies.length(i));
      Header h;
      if (decode_header(d, h) != Malformed::kOk) {
        ++rs.bad;
        continue;
      }
      if (h.kind != Kind::kReply || h.program != Program::kAppRecog || h.seq >= seq) {
        ++rs.unexpected;
        continue;
      }
      uint64_t& word = seen[h.seq / 64];
      const uint64_t bit = uint64_t{1} << (h.seq % 64);
      if (word & bit) {
        ++rs.duplicates;
        continue;
      }
      word |= bit;
      ++rs.unique;
      rs.bytes += d.size();
      ++rs.by_action[static_cast<size_t>(h.action)];
      if (rtts.size() < c.max_rtt_samples)
        rtts.push_back(static_cast<uint32_t>(std::min<uint64_t>(now - std::min(now, h.send_ns), UINT32_MAX)));
      const size_t p = h.seq % pool.bodies.size();
      if (h.action != pool.expected[p]) {
        ++rs.wrong_action;
        if (rs.first_failure.empty())
          rs.first_failure = "seq " + std::to_string(h.seq) + ": server did " + action_name(h.action) + ", expected " +
                             action_name(pool.expected[p]);
        continue;
      }
      if (c.verify_every && rs.unique % c.verify_every == 0) {
        Header q = h;  // the request as it was sent
        q.kind = Kind::kRequest;
        q.action = Action::kNone;
        q.length = static_cast<uint16_t>(c.size);
        encode_header(q, request);
        std::memcpy(request.data() + kHeaderBytes, pool.bodies[p].data(), body_bytes);
        const std::string why = check_reply_body(h.action, request, d.subspan(kHeaderBytes));
        ++rs.verified;
        if (!why.empty()) {
          ++rs.verify_failures;
          if (rs.first_failure.empty()) rs.first_failure = "seq " + std::to_string(h.seq) + ": " + why;
        }
      }
    }
    return n;
  };

  // UDP GSO (UDP_SEGMENT): a burst of datagrams in one send, as a hardware
  // traffic generator would emit them; the receiving side's kernel splits it.
  bool gso_ok = c.gso && burst > 1;
  bool gso_failed = false;
  uint64_t gso_sends = 0;
  std::string gso_refused;
  std::vector<uint8_t> gso_buf(gso_ok ? size_t{burst} * c.size : 0);

  Pacer pacer(c.interval_us > 0 ? 1e6 / c.interval_us : 0, burst);
  PlaceTimer timer(cpu, Place::kHost);
  const uint64_t t0 = now_ns(), end = t0 + static_cast<uint64_t>(c.duration_s * 1e9);
  uint64_t now = t0;
  while (now < end && !stop.load(std::memory_order_relaxed)) {
    const uint32_t n = pacer.try_acquire(burst, now);
    if (n > 0) {
      if (apprecog && seen.size() * 64 < seq + n) seen.resize(seen.size() + 4096, 0);
      for (uint32_t j = 0; j < n; ++j) {
        const uint64_t s = seq + j;
        const size_t f = zipf.next();
        const size_t p = s % pool.bodies.size();
        flow_of[j] = static_cast<uint32_t>(f);
        pool_of[j] = p;
        iov[2 * j] = {heads[j].data(), kHeaderBytes};
        iov[2 * j + 1] = {const_cast<uint8_t*>(pool.bodies[p].data()), body_bytes};
        std::memset(&msgs[j], 0, sizeof msgs[j]);
        msgs[j].msg_hdr.msg_iov = &iov[2 * j];
        msgs[j].msg_hdr.msg_iovlen = 2;
      }
      const uint64_t send_ns = now_ns();
      for (uint32_t j = 0; j < n; ++j)
        encode_header({c.program, Kind::kRequest, Action::kNone, seq + j, send_ns, static_cast<uint16_t>(c.size),
                       keys[flow_of[j]]},
                      heads[j]);
      uint32_t done = 0;
      if (gso_ok && n > 1) {
        // One buffer of n datagrams back to back; the kernel cuts it every c.size bytes.
        for (uint32_t j = 0; j < n; ++j) {
          std::memcpy(gso_buf.data() + size_t{j} * c.size, heads[j].data(), kHeaderBytes);
          std::memcpy(gso_buf.data() + size_t{j} * c.size + kHeaderBytes, pool.bodies[pool_of[j]].data(), body_bytes);
        }
        iovec whole{gso_buf.data(), size_t{n} * c.size};
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
        const uint16_t seg = static_cast<uint16_t>(c.size);
        std::memcpy(CMSG_DATA(cm), &seg, sizeof seg);
        ++send_calls;
        ++gso_sends;
        if (sendmsg(sock.fd(), &mh, 0) >= 0) {
          done = n;
        } else if (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOPROTOOPT) {
          gso_ok = false;  // no UDP GSO on this path: datagram by datagram from now on
          gso_refused = std::strerror(errno);
          --gso_sends;
        } else if (errno == EINTR) {
          --gso_sends;  // this burst goes by sendmmsg below
        } else {
          ++send_errors;
          if (send_error_text.empty()) send_error_text = std::strerror(errno);
          gso_failed = true;
        }
      }
      while (done < n && !gso_failed) {
        const int r = sendmmsg(sock.fd(), msgs.data() + done, n - done, 0);
        ++send_calls;
        if (r > 0) {
          done += static_cast<uint32_t>(r);
        } else if (errno == EINTR) {
          continue;
        } else {
          // ECONNREFUSED (an ICMP error from an earlier datagram), ENOBUFS...:
          // the rest of this burst is not sent; its sequence numbers go to the next one.
          ++send_errors;
          if (send_error_text.empty()) send_error_text = std::strerror(errno);
          break;
        }
      }
      gso_failed = false;
      // Sequence numbers stay dense over what was sent.
      for (uint32_t j = 0; j < done; ++j) {
        const size_t f = flow_of[j];
        digest += terms[f];
        ++per_flow[f];
        sent_bytes += c.size;
        ++sent_by_action[static_cast<size_t>(pool.expected[pool_of[j]])];
      }
      seq += done;
    }
    if (apprecog) {
      for (int k = 0; k < 4 && take_replies(false) == kReplyBatch; ++k) {
      }
    }
    now = now_ns();
  }
  const uint64_t send_end = now_ns();
  if (apprecog) {
    const uint64_t drain_end = send_end + static_cast<uint64_t>(c.drain_s * 1e9);
    while (rs.unique < seq && now_ns() < drain_end && !stop.load(std::memory_order_relaxed)) take_replies(true);
  }
  timer.finish();

  const double send_s = (send_end - t0) / 1e9;
  size_t flows_used = 0;
  for (uint64_t v : per_flow) flows_used += v != 0;
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
                      {"sent_bytes", sent_bytes},
                      {"send_calls", send_calls},
                      {"send_errors", send_errors},
                      {"send_error", send_error_text},
                      {"icmp_refused", replies.refused()},
                      {"gso", {{"asked", c.gso}, {"sends", gso_sends}, {"refused", gso_refused}}},
                      {"achieved_pps", send_s > 0 ? seq / send_s : 0.0},
                      {"achieved_gbps", send_s > 0 ? sent_bytes * 8.0 / send_s / 1e9 : 0.0},
                      {"flows", c.flows},
                      {"flows_used", flows_used},
                      {"zipf", c.zipf}};
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(digest));
  f["flow_digest"] = hex;
  if (apprecog) {
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
    f["pool"] = pool.bodies.size();
    f["mix"] = {{"hash", c.mix.hash}, {"compress", c.mix.compress}, {"echo", c.mix.echo}};
  }
  return f;
}

}  // namespace dpukit::bench::e2e
