#include "server.h"

#include <pthread.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sched.h>

#include <deque>

#include "apprecog.h"
#include "engine_offload.h"
#include "flow_count.h"
#include "handoff.h"

namespace dpukit::bench::e2e {

// What the receiving thread saw; written by that thread only, read after it ends.
struct RxStats {
  uint64_t datagrams = 0, bytes = 0;  // everything received
  uint64_t good = 0, good_bytes = 0;  // well-formed requests of this program
  std::array<uint64_t, kMalformedKinds> bad{};
  uint64_t unexpected = 0;  // well-formed, but not a request of this program
  uint64_t truncated = 0;   // longer than the receive buffer (also counted as bad length)
  uint64_t first_ns = 0, last_ns = 0;

  void on_batch(uint64_t now) {
    if (!first_ns) first_ns = now;
    last_ns = now;
  }
  // True when `d` is a request of `program`; counts it either way.
  bool check(std::span<const uint8_t> d, bool trunc, Program program, Header& h) {
    ++datagrams;
    bytes += d.size();
    truncated += trunc;
    const Malformed m = decode_header(d, h);
    if (m != Malformed::kOk) {
      ++bad[static_cast<size_t>(m)];
      return false;
    }
    if (h.kind != Kind::kRequest || h.program != program) {
      ++unexpected;
      return false;
    }
    ++good;
    good_bytes += d.size();
    return true;
  }
};

struct Server::Impl::Shared {
  explicit Shared(const std::atomic<bool>& flag) : stop(flag) {}
  const std::atomic<bool>& stop;
  uint64_t deadline_ns = 0;
  RxStats rx;
  std::mutex mu;
  std::vector<std::string> pin_warnings;
  uint64_t dilation_work_ns = 0, dilation_added_ns = 0;  // summed over the dpu place's threads

  // A thread's dilation when it runs on `place` at `speed`: active on the
  // dpu place only (the host place and the NIC never slow down).
  static Dilation dilation_for(Place place, const DpuSpeed& speed) {
    return Dilation(place == Place::kDpu ? speed.factor : 1.0);
  }
  void add_dilation(const Dilation& d) {
    std::lock_guard lock(mu);
    dilation_work_ns += d.work_ns();
    dilation_added_ns += d.dilated_ns();
  }

  bool should_stop(uint64_t now) const {
    return stop.load(std::memory_order_relaxed) || (deadline_ns && now >= deadline_ns);
  }
  // Once told to stop, a receiver still takes what is already queued in the
  // socket (for at most kDrainNs), so that every datagram that reached the
  // server is counted. Returns true when the loop should end.
  static constexpr uint64_t kDrainNs = 100'000'000;
  uint64_t drain_until = 0;
  bool done(unsigned received, uint64_t now) {
    if (drain_until) return received == 0 || now >= drain_until;
    if (should_stop(now)) drain_until = now + kDrainNs;
    return false;
  }
  bool draining() const { return drain_until != 0; }
  void pin(const CpuSet& cpus, const char* name) {
    pthread_setname_np(pthread_self(), name);
    const std::string w = pin_current_thread(cpus);
    if (!w.empty()) {
      std::lock_guard lock(mu);
      pin_warnings.push_back(std::string(name) + ": " + w);
    }
  }
};

namespace {

// Receive buffers owned by one thread.
struct OwnBuffers {
  std::vector<uint8_t> data;
  std::vector<sockaddr_in> from;
  RecvBatch batch;
  OwnBuffers(unsigned n) : data(size_t{n} * kRecvBuffer), from(n), batch(n) {
    for (unsigned i = 0; i < n; ++i) batch.set_buffer(i, data.data() + size_t{i} * kRecvBuffer, kRecvBuffer, &from[i]);
  }
  std::span<const uint8_t> datagram(unsigned i) const {
    return {data.data() + size_t{i} * kRecvBuffer, batch.length(i)};
  }
};

// A receiving thread's loop over its own buffers until the run is done:
// `before(now)` as each batch arrives, `each(i, datagram, header, now)` for
// every datagram that passes the checks of `program`, `after()` after each
// batch.
template <class Shared, class Before, class Each, class After>
void receive_loop(int fd, Shared& s, OwnBuffers& b, unsigned batch, Program program, Before before, Each each,
                  After after) {
  Header h;
  for (;;) {
    const unsigned n = b.batch.receive(fd, batch, !s.draining());
    const uint64_t now = now_ns();
    before(now);
    if (n) s.rx.on_batch(now);
    for (unsigned i = 0; i < n; ++i) {
      const auto d = b.datagram(i);
      if (s.rx.check(d, b.batch.truncated(i), program, h)) each(i, d, h, now);
    }
    after();
    if (s.done(n, now)) break;
  }
}

// Replies staged for one sendmmsg.
class ReplySender {
 public:
  ReplySender(int fd, unsigned batch) : fd_(fd), bufs_(batch), to_(batch), iov_(batch), msgs_(batch) {}
  Bytes& next(const sockaddr_in& to) {
    if (n_ == bufs_.size()) flush();
    to_[n_] = to;
    return bufs_[n_++];
  }
  void flush() {
    for (size_t i = 0; i < n_; ++i) {
      iov_[i] = {bufs_[i].data(), bufs_[i].size()};
      std::memset(&msgs_[i], 0, sizeof msgs_[i]);
      msgs_[i].msg_hdr.msg_name = &to_[i];
      msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
      msgs_[i].msg_hdr.msg_iov = &iov_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }
    size_t done = 0;
    while (done < n_) {
      const int r = sendmmsg(fd_, msgs_.data() + done, static_cast<unsigned>(n_ - done), 0);
      if (r > 0) {
        for (size_t i = done; i < done + static_cast<size_t>(r); ++i) bytes += bufs_[i].size();
        done += static_cast<size_t>(r);
        sent += static_cast<uint64_t>(r);
      } else if (errno != EINTR) {
        ++errors;  // this reply is lost; the client counts it missing
        ++done;
      }
    }
    n_ = 0;
  }
  uint64_t sent = 0, errors = 0, bytes = 0;

 private:
  int fd_;
  std::vector<Bytes> bufs_;
  std::vector<sockaddr_in> to_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
  size_t n_ = 0;
};

struct ActionCounts {
  std::array<uint64_t, 4> n{};
  void add(Action a) { ++n[static_cast<size_t>(a)]; }
  nlohmann::json json() const {
    return {{"hash", n[1]}, {"compress", n[2]}, {"echo", n[3]}};
  }
};

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Place place_of(const std::string& s) { return s == "dpu" ? Place::kDpu : Place::kHost; }

}  // namespace

Server::Impl::Impl(ServerConfig config) : config_(std::move(config)) {
  if (config_.place != "host" && config_.place != "dpu")
    throw std::invalid_argument("--place must be host or dpu, not '" + config_.place + "'");
  if (config_.table != "sw" && config_.table != "hw")
    throw std::invalid_argument("--table must be sw or hw, not '" + config_.table + "'");
  if (config_.dpu_work != "recognition" && config_.dpu_work != "all")
    throw std::invalid_argument("--dpu-work must be recognition or all, not '" + config_.dpu_work + "'");
  if (config_.batch == 0 || config_.batch > 1024) throw std::invalid_argument("--batch must be 1 to 1024");
  if (config_.ring_slots < 2 || (config_.ring_slots & (config_.ring_slots - 1)) || config_.ring_slots < config_.batch)
    throw std::invalid_argument("--ring-slots must be a power of two, at least 2 and at least --batch");
  const EngineChoice engines = parse_engine_choice(config_.engines);
  if (engines.any()) {
    if (config_.program != Program::kAppRecog)
      throw std::invalid_argument("--engine is for --program apprecog (its matching and compress action)");
    if (config_.place != "dpu")
      throw std::invalid_argument("--engine needs --place dpu: the card's engines are driven by a dpu thread");
    if (config_.dpu_work != "recognition")
      throw std::invalid_argument("--engine runs with --dpu-work recognition (the dpu thread drives the engines, "
                                  "the host acts and replies)");
  }
  // Made here, before any timing: building the Hyperscan database is set-up, not per-packet work.
  if (engines.any()) engines_ = std::make_unique<EngineOffload>(engines, config_.dpu_speed, config_.placement.hw);
  if (config_.program == Program::kAppRecog) {
    const bool split = config_.place == "dpu" && config_.dpu_work == "recognition";
    for (int i = 0; i < (split ? 2 : 1); ++i) recognizers_.push_back(std::make_unique<AppRecognizer>());
  }
  socket_.bind(parse_endpoint(config_.bind_host, config_.port));
  rcvbuf_ = socket_.set_rcvbuf(config_.rcvbuf);
  socket_.set_sndbuf(config_.rcvbuf);
  socket_.set_recv_timeout_us(config_.recv_timeout_us);
}

Server::Impl::~Impl() = default;

nlohmann::json Server::Impl::parameters() const {
  nlohmann::json p = {{"role", "server"},
                      {"program", program_name(config_.program)},
                      {"place", config_.place},
                      {"listen", endpoint_str(local())},
                      {"batch", config_.batch},
                      {"rcvbuf_asked", config_.rcvbuf},
                      {"rcvbuf", rcvbuf_},
                      {"duration_s", config_.duration_s},
                      {"ring_slots", config_.ring_slots},
                      {"dpu_speed", config_.dpu_speed.to_json()}};
  if (config_.program == Program::kFlowTable) {
    p["table"] = config_.table;
    p["expected_flows"] = config_.expected_flows;
    if (config_.table == "hw")
      p["hw_table"] = {{"capacity", config_.hw.capacity},
                       {"insert_rate", config_.hw.insert_rate},
                       {"insert_latency_ns", config_.hw.insert_latency_ns},
                       {"insert_queue", config_.hw.insert_queue}};
  } else {
    p["dpu_work"] = config_.place == "dpu" ? config_.dpu_work : "none";
    p["operators"] = {{"match", "rxp_match/lib (Hyperscan)"},
                      {"hash", "sha256/lib (OpenSSL EVP)"},
                      {"compress", "compress/lib (ISA-L igzip)"}};
    p["engines"] = engines_ ? engines_->parameters() : nlohmann::json(nullptr);
    if (engines_ && engines_->regex())
      p["operators"]["match"] = "rxp_match on " + engines_->generation() + "'s " +
                                engines_->regex()->engine->spec().name + " (model), its jobs rxp_match/lib (Hyperscan) on hw";
    if (engines_ && engines_->compress())
      p["operators"]["compress"] = "compress on " + engines_->generation() + "'s " +
                                   engines_->compress()->engine->spec().name +
                                   " (model), its jobs compress/lib (ISA-L igzip) on hw";
  }
  return p;
}

nlohmann::json Server::Impl::run(const std::atomic<bool>& stop, CpuAccount& cpu) {
  Shared s{stop};
  const uint64_t started = now_ns();
  if (config_.duration_s > 0) s.deadline_ns = started + static_cast<uint64_t>(config_.duration_s * 1e9);
  const UdpKernelCounters k0 = read_udp_counters();
  const CpuAccount before = cpu;

  nlohmann::json f;
  if (config_.program == Program::kFlowTable) {
    f = config_.table == "hw" ? run_flowtable_hw(s, cpu) : run_flowtable_sw(s, cpu);
  } else if (config_.place == "dpu" && config_.dpu_work == "recognition") {
    f = run_apprecog_split(s, cpu);
  } else {
    f = run_apprecog_single(s, cpu, place_of(config_.place));
  }

  const UdpKernelCounters k1 = read_udp_counters();
  const RxStats& rx = s.rx;
  f["program"] = program_name(config_.program);
  f["place"] = config_.place;
  f["datagrams_received"] = rx.datagrams;
  f["bytes_received"] = rx.bytes;
  f["packets_processed"] = rx.good;
  uint64_t bad_total = rx.unexpected;
  nlohmann::json bad = {{"unexpected", rx.unexpected}, {"truncated", rx.truncated}};
  for (size_t m = 1; m < kMalformedKinds; ++m) {
    bad[malformed_name(static_cast<Malformed>(m))] = rx.bad[m];
    bad_total += rx.bad[m];
  }
  f["bad"] = bad;
  f["bad_total"] = bad_total;
  const uint64_t active = rx.last_ns > rx.first_ns ? rx.last_ns - rx.first_ns : 0;
  f["active_s"] = active / 1e9;
  // CLOCK_MONOTONIC, shared by every process of the machine: the orchestrator
  // joins this window with the client's sending window.
  f["active_first_ns"] = rx.first_ns;
  f["active_last_ns"] = rx.last_ns;
  f["throughput_pps"] = active ? rx.good / (active / 1e9) : 0.0;
  f["throughput_gbps"] = active ? rx.good_bytes * 8.0 / active : 0.0;  // UDP payload bits
  nlohmann::json used, util;
  for (Place p : {Place::kHost, Place::kDpu, Place::kHw}) {
    const uint64_t ns = cpu.get(p) - before.get(p);
    used[place_name(p)] = ns;
    util[place_name(p)] = active ? static_cast<double>(ns) / static_cast<double>(active) : 0.0;
  }
  f["cpu_ns"] = used;
  // CPU time of each place over the active window (1.0 = one CPU busy throughout).
  // A thread starved by the kernel's receive work under overload sees its
  // window shrink; the orchestrator divides by the load window instead.
  f["utilization"] = util;
  f["wall_s"] = (now_ns() - started) / 1e9;
  if (k0.available && k1.available)
    f["kernel_udp"] = {{"in_datagrams", k1.in_datagrams - k0.in_datagrams},
                       {"rcvbuf_errors", k1.rcvbuf_errors - k0.rcvbuf_errors},
                       {"in_errors", k1.in_errors - k0.in_errors},
                       {"sndbuf_errors", k1.sndbuf_errors - k0.sndbuf_errors},
                       {"note", "this network namespace's UDP counters over the run (other UDP traffic in the "
                                "namespace counts too)"}};
  f["pin_warnings"] = s.pin_warnings;
  // The dpu place's threads: the CPU time of their batches and the busy time
  // dilation added after them ((1/F - 1) x the former); both are in cpu_ns.dpu.
  f["dpu_speed"] = config_.dpu_speed.to_json();
  f["dilation"] = {{"work_cpu_ns", s.dilation_work_ns}, {"dilated_cpu_ns", s.dilation_added_ns}};
  return f;
}

nlohmann::json Server::Impl::run_flowtable_sw(Shared& s, CpuAccount& cpu) {
  SoftFlowTable table(config_.expected_flows);
  const Place place = place_of(config_.place);
  std::thread t([&] {
    s.pin(place == Place::kDpu ? config_.placement.dpu : config_.placement.host, "e2e-flowtable");
    OwnBuffers b(config_.batch);
    PlaceTimer timer(cpu, place);
    Dilation dilation = Shared::dilation_for(place, config_.dpu_speed);
    receive_loop(
        socket_.fd(), s, b, config_.batch, Program::kFlowTable, [](uint64_t) {},
        [&](unsigned, std::span<const uint8_t> d, const Header& h, uint64_t) {
          table.add(h.key, static_cast<uint32_t>(d.size()));
        },
        [&] { dilation.pay(); });
    s.add_dilation(dilation);
  });
  t.join();
  const MissPath::Totals tot = software_totals(table);
  return {{"table", "sw"},
          {"flows", tot.flows},
          {"counted_sw", tot.sw_packets},
          {"counted_hw", 0},
          {"sum_of_flow_counts", tot.packets},
          {"counts_exact", tot.packets == s.rx.good},
          {"flow_digest", hex64(tot.digest)},
          {"sw_table", {{"kind", "open addressing, linear probing, at most half full"},
                        {"slots", table.slots()}, {"memory_bytes", table.memory_bytes()}}}};
}

nlohmann::json Server::Impl::run_flowtable_hw(Shared& s, CpuAccount& cpu) {
  struct Miss {
    FlowKey key;
    uint16_t bytes;
  };
  EmulatedFlowTable table(config_.hw);
  Handoff<Miss> misses(config_.ring_slots);
  MissPath path(table, config_.expected_flows);
  uint64_t hw_hits = 0, nic_waits = 0;
  const Place place = place_of(config_.place);

  std::thread nic([&] {
    s.pin(config_.placement.hw, "e2e-nic");
    OwnBuffers b(config_.batch);
    std::vector<Miss> staged;
    staged.reserve(config_.batch);
    PlaceTimer timer(cpu, Place::kHw);
    receive_loop(
        socket_.fd(), s, b, config_.batch, Program::kFlowTable,
        // insertions that fell due take effect before these packets are looked up
        [&](uint64_t now) { table.service(now); },
        [&](unsigned, std::span<const uint8_t> d, const Header& h, uint64_t now) {
          if (table.match(h.key, static_cast<uint32_t>(d.size()), now)) {
            ++hw_hits;
          } else {
            staged.push_back({h.key, static_cast<uint16_t>(d.size())});
          }
        },
        [&] {
          if (!staged.empty()) {
            nic_waits += misses.push_all(staged.data(), staged.size());
            staged.clear();
          }
        });
    misses.close();
  });
  std::thread sw([&] {
    s.pin(place == Place::kDpu ? config_.placement.dpu : config_.placement.host, "e2e-misspath");
    std::vector<Miss> got(256);
    PlaceTimer timer(cpu, place);
    Dilation dilation = Shared::dilation_for(place, config_.dpu_speed);
    while (misses.wait()) {
      const size_t k = misses.pop(got.data(), got.size());
      for (size_t i = 0; i < k; ++i) path.on_miss(got[i].key, got[i].bytes);
      path.poll_events();
      dilation.pay();  // before the next group: the misses wait behind a slower core
    }
    path.poll_events();
    dilation.pay();
    s.add_dilation(dilation);
  });
  nic.join();
  sw.join();

  const MissPath::Totals tot = path.totals();
  const FlowTableStats st = table.stats();
  const MissPath::Stats& ms = path.stats();
  return {{"table", "hw"},
          {"flows", tot.flows},
          {"counted_sw", tot.sw_packets},
          {"counted_hw", tot.hw_packets},
          {"hw_hits_seen_by_nic", hw_hits},
          {"sum_of_flow_counts", tot.packets},
          {"counts_exact", tot.packets == s.rx.good && tot.hw_packets == hw_hits && tot.sw_packets == ms.sw_packets},
          {"flow_digest", hex64(tot.digest)},
          {"hw_table", {{"capacity", st.capacity},
                        {"entries", st.entries},
                        {"insert_requests", st.insert_requests},
                        {"inserted", st.inserted},
                        {"refused_table_full", st.refused_table_full},
                        {"refused_queue_full", st.refused_queue_full},
                        {"pending", st.pending},
                        {"lookups", st.lookups},
                        {"hits", st.hits},
                        {"insert_rate", config_.hw.insert_rate}}},
          {"miss_path", {{"requested", ms.requested},
                         {"installed_events", ms.installed},
                         {"refused_events", ms.refused},
                         {"miss_after_install", ms.miss_after_install},
                         {"handoff_sleeps", misses.sleeps()},
                         {"nic_waits_on_full_handoff", nic_waits}}}};
}

nlohmann::json Server::Impl::run_apprecog_single(Shared& s, CpuAccount& cpu, Place place) {
  ActionCounts actions;
  ReplySender replies(socket_.fd(), config_.batch);
  std::thread t([&] {
    s.pin(place == Place::kDpu ? config_.placement.dpu : config_.placement.host, "e2e-apprecog");
    AppRecognizer& rec = *recognizers_.at(0);
    OwnBuffers b(config_.batch);
    PlaceTimer timer(cpu, place);
    Dilation dilation = Shared::dilation_for(place, config_.dpu_speed);
    receive_loop(
        socket_.fd(), s, b, config_.batch, Program::kAppRecog, [](uint64_t) {},
        [&](unsigned i, std::span<const uint8_t> d, const Header& h, uint64_t) {
          const Action a = rec.recognize(d.subspan(kHeaderBytes));
          actions.add(a);
          rec.reply(h, a, d, replies.next(b.from[i]));
        },
        [&] {
          dilation.pay();  // before the replies go out: the batch's service time is the slower core's
          replies.flush();
        });
    s.add_dilation(dilation);
  });
  t.join();
  return {{"dpu_work", place == Place::kDpu ? "all" : "none"},
          {"actions", actions.json()},
          {"replies_sent", replies.sent},
          {"reply_send_errors", replies.errors},
          {"reply_bytes", replies.bytes}};
}

// run_apprecog_split's buffers: a descriptor ring dpu -> host and a
// free-buffer ring host -> dpu over one pool of receive buffers: the dpu
// thread receives straight into the pool and the host thread reads the
// packet where it lies (shared memory).
struct Server::Impl::SplitRing {
  struct Work {
    uint32_t buf;
    uint16_t len;
    uint8_t action;
    uint8_t deflated;  // the reply's body is the deflate engine's stream in deflated[buf]
  };

  // The dpu thread's side of the pool: the free buffers it holds (the host
  // gives them back by the free ring), a receive batch over them, and the
  // requests it has yet to hand to the host.
  struct DpuBuffers {
    DpuBuffers(SplitRing& r, unsigned batch_slots) : ring(r), batch(batch_slots), back(r.n), slot_buf(batch_slots) {
      for (uint32_t i = 0; i < ring.n; ++i) stash.push_back(static_cast<uint32_t>(ring.n - 1 - i));
    }
    void take_back() {
      const size_t k = ring.free_bufs.pop(back.data(), back.size());
      stash.insert(stash.end(), back.begin(), back.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // Receives into up to a batch of the free buffers (with `wait`,
    // blocking for the first datagram) and sets `now`; `each(buf, datagram)`
    // for every request that passes the checks, whose buffer is then the
    // caller's; the other buffers stay free. Returns the datagrams received.
    template <class Each>
    unsigned receive(int fd, Shared& s, bool wait, uint64_t& now, Each each) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(batch.slots(), stash.size()));
      for (unsigned i = 0; i < want; ++i) {
        slot_buf[i] = stash.back();
        stash.pop_back();
        batch.set_buffer(i, ring.buffer(slot_buf[i]), kRecvBuffer, &ring.from[slot_buf[i]]);
      }
      const unsigned n = batch.receive(fd, want, wait);
      now = now_ns();
      if (n) s.rx.on_batch(now);
      for (unsigned i = 0; i < n; ++i) {
        const uint32_t bi = slot_buf[i];
        const std::span<const uint8_t> d(ring.buffer(bi), batch.length(i));
        if (!s.rx.check(d, batch.truncated(i), Program::kAppRecog, ring.headers[bi])) {
          stash.push_back(bi);
          continue;
        }
        each(bi, d);
      }
      for (unsigned i = n; i < want; ++i) stash.push_back(slot_buf[i]);  // unused slots
      return n;
    }
    void hand_to_host() {
      if (!staged.empty()) {
        ring.work.push_all(staged.data(), staged.size());
        staged.clear();
      }
    }

    SplitRing& ring;
    RecvBatch batch;
    std::vector<uint32_t> stash, back, slot_buf;
    std::vector<Work> staged;
  };

  SplitRing(size_t slots, bool engines, int fd, unsigned batch)
      : n(slots),
        pool(slots * kRecvBuffer),
        from(slots),
        headers(slots),
        work(slots),
        free_bufs(slots),
        replies(fd, batch),
        bitmaps(engines ? slots : 0),
        deflated(engines ? slots : 0) {}
  uint8_t* buffer(uint32_t bi) { return pool.data() + size_t{bi} * kRecvBuffer; }

  const size_t n;
  std::vector<uint8_t> pool;
  std::vector<sockaddr_in> from;
  std::vector<Header> headers;
  Handoff<Work> work;
  Handoff<uint32_t> free_bufs;
  ActionCounts actions;
  ReplySender replies;
  uint64_t dpu_waits_for_buffers = 0, host_waits = 0;
  // --engine: per buffer, the RXP's bitmap and the deflate engine's stream.
  std::vector<Bytes> bitmaps, deflated;
  nlohmann::json engine_figures;
};

// run_apprecog_split's dpu thread with the engines: it builds and posts one
// job per request (a task of its context's pool), polls the completions,
// classifies the RXP's bitmaps and hands the requests to the host.
struct Server::Impl::EngineDpu {
  using Work = SplitRing::Work;

  EngineDpu(Impl& impl, Shared& shared, SplitRing& r, CpuAccount& account)
      : server(impl),
        s(shared),
        ring(r),
        cpu(account),
        rec(*impl.recognizers_.at(0)),
        rx(impl.engines_->regex()),
        cx(impl.engines_->compress()),
        rx0(rx ? rx->engine->stats() : Engine::Stats{}),
        cx0(cx ? cx->engine->stats() : Engine::Stats{}),
        bufs(r, impl.config_.batch),
        lens(r.n),
        dilation(Shared::dilation_for(Place::kDpu, impl.config_.dpu_speed)) {
    // One DOCA context per engine, its task pool the engine's queue depth; on the real clock.
    if (rx) rq = std::make_unique<EngineQueue>(*rx->engine, 0, EngineQueue::Clock::kReal);
    if (cx) cq = std::make_unique<EngineQueue>(*cx->engine, 0, EngineQueue::Clock::kReal);
    bufs.staged.reserve(r.n);
  }

  void run() {
    // This thread's CPU is billed by hand: the executor wake-ups it does for
    // the emulator go to hw (below), the rest to dpu.
    cpu0 = thread_cpu_ns();
    bool rx_over = false;
    for (;;) {
      bufs.take_back();
      unsigned n = 0;
      if (!rx_over) {
        if (bufs.stash.empty() && !pending()) {  // every buffer is with the host: wait for some to come back
          ++ring.dpu_waits_for_buffers;
          ring.free_bufs.wait();
          continue;
        }
        if (!bufs.stash.empty()) {
          n = receive_requests();
          if (s.done(n, received_ns)) rx_over = true;
        }
      }
      // The receive took the slower core's time before the jobs can be posted
      // (paid before them, so that the executors are not held behind it).
      if (n) dilation.pay();
      if (rq) post(*rq, rx, to_match, ring.bitmaps);
      reap();
      if (cq) post(*cq, cx, to_compress, ring.deflated);
      dilation.pay();  // before the requests go to the host: this loop's work took the slower core's time
      bufs.hand_to_host();
      if (!pending()) {
        if (rx_over) break;
        continue;
      }
      if (n == 0) wait_next();
    }
    s.add_dilation(dilation);
    ring.work.close();
    const uint64_t total = thread_cpu_ns() - cpu0;
    cpu.add(Place::kDpu, total - std::min(total, wake_ns));
    cpu.add(Place::kHw, std::min(total, wake_ns));
    rq.reset();  // every job was reaped: nothing is computing
    cq.reset();
    ring.engine_figures = engine_figures();
  }

 private:
  // The requests of one receive: to the RXP, or recognized here without it.
  unsigned receive_requests() {
    // Blocks only when no job is in flight: completions are polled for.
    return bufs.receive(server.socket_.fd(), s, !s.draining() && !pending(), received_ns,
                        [&](uint32_t bi, std::span<const uint8_t> d) {
                          lens[bi] = static_cast<uint16_t>(d.size());
                          if (rq)
                            to_match.push_back(bi);
                          else
                            classified(bi, rec.recognize(d.subspan(kHeaderBytes)));
                        });
  }
  std::span<const uint8_t> payload(uint32_t bi) {
    return std::span<const uint8_t>(ring.buffer(bi) + kHeaderBytes, lens[bi] - kHeaderBytes);
  }
  void classified(uint32_t bi, Action a) {
    if (a == Action::kCompress && cq)
      to_compress.push_back(bi);
    else
      bufs.staged.push_back({bi, lens[bi], static_cast<uint8_t>(a), 0});
  }
  // Posts the waiting requests while the pool has tasks. A real clock's
  // submit that finds the executors asleep wakes one (a futex wake the
  // emulator needs; a driver's doorbell is one store to the device): only
  // the first submit of a round can, so it is timed, and when it woke one
  // its CPU is billed to hw and not dilated.
  void post(EngineQueue& q, EngineShared* sh, std::deque<uint32_t>& waiting, std::vector<Bytes>& outs) {
    bool first = true;
    while (!waiting.empty() && q.in_flight() < q.depth()) {
      const uint32_t bi = waiting.front();
      EngineJob j;
      const std::span<const uint8_t> in = payload(bi);
      j.bytes = in.size();
      j.user = bi;
      Bytes* out = &outs[bi];
      j.body = [sh, in, out] { sh->run_body(in, *out); };
      if (first) {
        first = false;
        const uint64_t w0 = sh->engine->stats().wakeups;
        const uint64_t c0 = thread_cpu_ns();
        q.submit(std::move(j), now_ns());
        const uint64_t took = thread_cpu_ns() - c0;
        if (sh->engine->stats().wakeups != w0) {
          wake_ns += took;
          ++wakes;
          dilation.exclude(took);
        } else {
          dilation.exclude(std::min(took, read_ns));
        }
      } else {
        q.submit(std::move(j), now_ns());
      }
      waiting.pop_front();
    }
  }
  // The completions of engine `at` (0 regex, 1 compress), each request to `then`.
  template <class Then>
  void reap(EngineQueue& q, int at, uint64_t now, Then then) {
    done.clear();
    q.progress(now, done);
    for (const EngineCompletion& c : done) {
      if (c.error) std::rethrow_exception(c.error);
      ++jobs[at];
      latency_ns[at] += c.completed_ns - c.submitted_ns;
      then(static_cast<uint32_t>(c.user));
    }
  }
  void reap() {
    const uint64_t now = now_ns();
    if (rq) reap(*rq, 0, now, [&](uint32_t bi) { classified(bi, classifier.classify(ring.bitmaps[bi])); });
    if (cq)
      reap(*cq, 1, now, [&](uint32_t bi) {
        bufs.staged.push_back({bi, lens[bi], static_cast<uint8_t>(Action::kCompress), 1});
      });
  }
  bool pending() const {
    return (rq && rq->in_flight()) || (cq && cq->in_flight()) || !to_match.empty() || !to_compress.empty();
  }
  // Nothing arrived and jobs are in flight: block until the first to
  // complete has been computed (the executor may need this CPU), then
  // yield until its modelled completion. Waiting is no work of the dpu's:
  // not dilated (its CPU stays in the dpu's account, as a polling driver's).
  void wait_next() {
    EngineQueue* q = nullptr;
    for (EngineQueue* c : {rq.get(), cq.get()})
      if (c && c->in_flight() && (!q || *c->next_completion_ns() < *q->next_completion_ns())) q = c;
    if (!q) return;
    const uint64_t c0 = thread_cpu_ns();
    const uint64_t at = *q->next_completion_ns();
    q->wait_computed();
    while (now_ns() < at) sched_yield();
    const uint64_t took = thread_cpu_ns() - c0;
    wait_ns += took;
    ++waits;
    dilation.exclude(took);
  }
  static uint64_t clock_read_ns(const Dilation::Overhead& oh) { return oh.pay_ns - std::min(oh.pay_ns, oh.poll_ns); }
  // The engines' work over the run; their executors' CPU goes to hw.
  nlohmann::json engine_figures() {
    nlohmann::json e = {{"generation", server.engines_->generation()},
                        {"dpu_submit_wakeups", wakes},
                        {"dpu_wake_cpu_ns", wake_ns},
                        {"dpu_waits", waits},
                        {"dpu_wait_cpu_ns", wait_ns}};
    int i = 0;
    for (const auto& [name, sh, s0] : {std::tuple{"regex", rx, rx0}, std::tuple{"compress", cx, cx0}}) {
      const int at = i++;
      if (!sh) continue;
      const Engine::Stats s1 = sh->engine->stats();
      const uint64_t hw = s1.hw_cpu_ns - s0.hw_cpu_ns;
      cpu.add(Place::kHw, hw);
      e[name] = {{"name", sh->engine->spec().name},
                 {"jobs", jobs[at]},
                 {"bytes", s1.bytes - s0.bytes},
                 {"busy_ns", s1.busy_ns - s0.busy_ns},
                 {"hw_cpu_ns", hw},
                 {"late_jobs", s1.late_jobs - s0.late_jobs},
                 {"executor_wakeups", s1.wakeups - s0.wakeups},
                 {"mean_latency_ns", jobs[at] ? static_cast<double>(latency_ns[at]) / static_cast<double>(jobs[at]) : 0.0}};
    }
    return e;
  }

  Impl& server;
  Shared& s;
  SplitRing& ring;
  CpuAccount& cpu;
  AppRecognizer& rec;
  const Classifier classifier;
  EngineShared* const rx;
  EngineShared* const cx;
  const Engine::Stats rx0, cx0;
  std::unique_ptr<EngineQueue> rq, cq;
  SplitRing::DpuBuffers bufs;
  std::vector<uint16_t> lens;
  std::deque<uint32_t> to_match, to_compress;  // requests waiting for a free task
  std::vector<EngineCompletion> done;
  uint64_t cpu0 = 0, received_ns = 0;
  Dilation dilation;
  // One read of the thread's CPU clock (a system call here), the emulator's
  // cost around a timed submit: not dilated.
  const uint64_t read_ns = clock_read_ns(Dilation::overhead());
  uint64_t wake_ns = 0, wakes = 0, wait_ns = 0, waits = 0;
  uint64_t jobs[2] = {0, 0}, latency_ns[2] = {0, 0};
};

// run_apprecog_split's dpu thread without the engines: it recognizes each
// request and hands it to the host.
void Server::Impl::split_dpu_recognize(Shared& s, CpuAccount& cpu, SplitRing& ring) {
  s.pin(config_.placement.dpu, "e2e-dpu-recog");
  AppRecognizer& rec = *recognizers_.at(0);
  SplitRing::DpuBuffers bufs(ring, config_.batch);
  bufs.staged.reserve(config_.batch);
  PlaceTimer timer(cpu, Place::kDpu);
  Dilation dilation = Shared::dilation_for(Place::kDpu, config_.dpu_speed);
  for (;;) {
    bufs.take_back();
    if (bufs.stash.empty()) {  // every buffer is with the host: wait for some to come back
      ++ring.dpu_waits_for_buffers;
      ring.free_bufs.wait();
      continue;
    }
    uint64_t now = 0;
    const unsigned n = bufs.receive(socket_.fd(), s, !s.draining(), now, [&](uint32_t bi, std::span<const uint8_t> d) {
      const Action a = rec.recognize(d.subspan(kHeaderBytes));
      bufs.staged.push_back({bi, static_cast<uint16_t>(d.size()), static_cast<uint8_t>(a), 0});
    });
    dilation.pay();  // before the batch is handed to the host: its recognition took the slower core's time
    bufs.hand_to_host();
    if (s.done(n, now)) break;
  }
  s.add_dilation(dilation);
  ring.work.close();
}

// run_apprecog_split's host thread: it acts on each request the dpu
// recognized, replies, and gives the buffers back.
void Server::Impl::split_host_act(Shared& s, CpuAccount& cpu, SplitRing& ring) {
  s.pin(config_.placement.host, "e2e-host-act");
  AppRecognizer& rec = *recognizers_.at(1);
  std::vector<SplitRing::Work> got(config_.batch);
  std::vector<uint32_t> done;
  done.reserve(config_.batch);
  PlaceTimer timer(cpu, Place::kHost);
  while (ring.work.wait()) {
    const size_t k = ring.work.pop(got.data(), got.size());
    for (size_t i = 0; i < k; ++i) {
      const SplitRing::Work& w = got[i];
      const std::span<const uint8_t> d(ring.buffer(w.buf), w.len);
      const Action a = static_cast<Action>(w.action);
      ring.actions.add(a);
      if (w.deflated)
        write_reply(ring.headers[w.buf], a, ring.deflated[w.buf], ring.replies.next(ring.from[w.buf]));
      else
        rec.reply(ring.headers[w.buf], a, d, ring.replies.next(ring.from[w.buf]));
      done.push_back(w.buf);
    }
    ring.replies.flush();  // the replies are copies: the request buffers can go back now
    ring.host_waits += ring.free_bufs.push_all(done.data(), done.size());
    done.clear();
  }
}

nlohmann::json Server::Impl::run_apprecog_split(Shared& s, CpuAccount& cpu) {
  SplitRing ring(config_.ring_slots, engines_ != nullptr, socket_.fd(), config_.batch);
  std::thread dpu([&] {
    if (engines_) {
      s.pin(config_.placement.dpu, "e2e-dpu-engine");
      EngineDpu(*this, s, ring, cpu).run();
      return;
    }
    split_dpu_recognize(s, cpu, ring);
  });
  std::thread host([&] { split_host_act(s, cpu, ring); });
  dpu.join();
  host.join();
  nlohmann::json out = {{"dpu_work", "recognition"},
          {"actions", ring.actions.json()},
          {"replies_sent", ring.replies.sent},
          {"reply_send_errors", ring.replies.errors},
          {"reply_bytes", ring.replies.bytes},
          {"handoff", {{"slots", ring.n},
                       {"host_sleeps", ring.work.sleeps()},
                       {"dpu_waits_for_buffers", ring.dpu_waits_for_buffers},
                       {"dpu_sleeps_for_buffers", ring.free_bufs.sleeps()},
                       {"host_waits_on_full_free_ring", ring.host_waits}}}};
  // The engines' work: jobs, the model's busy time, the executors' CPU (hw)
  // and the jobs computed after their modelled completion (late_jobs: the
  // emulator's CPU, not the engine, set the pace).
  if (engines_) out["engine"] = ring.engine_figures;
  return out;
}

Server::Server(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Server::~Server() = default;
sockaddr_in Server::local() const { return impl_->local(); }
std::string Server::endpoint() const { return endpoint_str(impl_->local()); }
size_t Server::rcvbuf() const { return impl_->rcvbuf_; }
nlohmann::json Server::run(const std::atomic<bool>& stop, CpuAccount& cpu) { return impl_->run(stop, cpu); }
nlohmann::json Server::parameters() const { return impl_->parameters(); }

}  // namespace dpukit::bench::e2e
