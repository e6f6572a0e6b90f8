// DPUBench's end-to-end programs (§5): the datagram format, the flow
// counting of the software and the emulated-hardware flow table, the
// application recognition's classification and replies, and the server and
// client over loopback UDP.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <set>

#include "e2e/apprecog.h"
#include "e2e/client.h"
#include "e2e/datagram.h"
#include "e2e/flow_count.h"
#include "e2e/server.h"
#include "e2e/udp.h"
#include "e2e_loopback.h"
#include "regex_ref.h"

namespace dpukit::bench::e2e {
namespace {

Bytes request_bytes(Program program, uint64_t seq, const FlowKey& key, size_t size, uint64_t seed = 7) {
  Bytes d(size);
  fill_text(std::span<uint8_t>(d).subspan(kHeaderBytes), seed);
  encode_header({program, Kind::kRequest, Action::kNone, seq, 1234567, static_cast<uint16_t>(size), key}, d);
  return d;
}

// ------------------------------------------------------------ datagram

TEST(E2eDatagram, RoundTripsEveryField) {
  Header h;
  h.program = Program::kAppRecog;
  h.kind = Kind::kReply;
  h.action = Action::kCompress;
  h.seq = 0x0102030405060708ull;
  h.send_ns = 0xF1E2D3C4B5A69788ull;
  h.length = 77;
  h.key = FlowKey::from_tuple(0x0A000001, 0x0A000002, 1234, 9000, 17);
  Bytes d(77, 0xEE);
  encode_header(h, d);
  // The layout is fixed: magic "DPE2", little-endian integers, key bytes as in the packet.
  EXPECT_EQ(std::string(d.begin(), d.begin() + 4), "DPE2");
  EXPECT_EQ(d[5], 2);
  EXPECT_EQ(d[8], 0x08);
  EXPECT_EQ(d[15], 0x01);
  EXPECT_EQ(d[24], 77);
  EXPECT_EQ(d[25], 0);
  EXPECT_EQ(d[26], 10);  // src ip 10.0.0.1, network order
  EXPECT_EQ(d[kHeaderBytes], 0xEE);  // the body is untouched
  Header got;
  ASSERT_EQ(decode_header(d, got), Malformed::kOk);
  EXPECT_EQ(got.program, h.program);
  EXPECT_EQ(got.kind, h.kind);
  EXPECT_EQ(got.action, h.action);
  EXPECT_EQ(got.seq, h.seq);
  EXPECT_EQ(got.send_ns, h.send_ns);
  EXPECT_EQ(got.length, 77);
  EXPECT_EQ(got.key, h.key);
}

TEST(E2eDatagram, RefusesMalformedDatagrams) {
  const FlowKey key = client_flow_key(3);
  Bytes good = request_bytes(Program::kFlowTable, 1, key, 100);
  Header h;
  ASSERT_EQ(decode_header(good, h), Malformed::kOk);

  EXPECT_EQ(decode_header(std::span(good).first(kHeaderBytes - 1), h), Malformed::kShort);
  EXPECT_EQ(decode_header({}, h), Malformed::kShort);
  Bytes bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(decode_header(bad, h), Malformed::kMagic);
  bad = good;
  bad[4] = 9;
  EXPECT_EQ(decode_header(bad, h), Malformed::kVersion);
  // Truncated: the length field says 100, 60 bytes arrived.
  EXPECT_EQ(decode_header(std::span(good).first(60), h), Malformed::kLength);
  bad = good;
  bad[6] = 3;  // no such kind
  EXPECT_EQ(decode_header(bad, h), Malformed::kField);
  bad = good;
  bad[7] = static_cast<uint8_t>(Action::kEcho);  // a request never names an action
  EXPECT_EQ(decode_header(bad, h), Malformed::kField);
  bad = good;
  bad[39] = 1;
  EXPECT_EQ(decode_header(bad, h), Malformed::kField);
}

// ------------------------------------------------------------ flow counting

TEST(E2eFlowCount, SoftwareTableCountsEveryFlowExactly) {
  SoftFlowTable table(4);  // tiny on purpose: it has to grow several times
  std::map<size_t, uint64_t> truth;
  ZipfFlows zipf(700, 1.1, 5);
  uint64_t digest = 0;
  for (int i = 0; i < 20000; ++i) {
    const size_t f = zipf.next();
    ++truth[f];
    digest += flow_digest_term(client_flow_key(f));
    table.add(client_flow_key(f), 64);
  }
  EXPECT_EQ(table.flows(), truth.size());
  EXPECT_LE(table.flows() * 2, table.slots());
  for (const auto& [f, n] : truth) {
    const auto* e = table.find(client_flow_key(f));
    ASSERT_NE(e, nullptr) << "flow " << f;
    EXPECT_EQ(e->counters.packets, n) << "flow " << f;
    EXPECT_EQ(e->counters.bytes, n * 64);
  }
  EXPECT_EQ(table.find(client_flow_key(100000)), nullptr);
  const MissPath::Totals t = software_totals(table);
  EXPECT_EQ(t.packets, 20000u);
  EXPECT_EQ(t.digest, digest);
}

// The NIC stage and the miss path driven by a model clock: one packet per
// microsecond, so the outcome does not depend on scheduling.
struct HwRun {
  std::map<size_t, uint64_t> truth;
  MissPath::Totals totals;
  FlowTableStats stats;
  uint64_t nic_hits = 0;
  std::vector<std::pair<uint64_t, uint64_t>> inserted_at;  // (model ns, inserted so far)
};

HwRun run_hw_model(size_t flows, size_t capacity, double insert_rate, uint64_t latency_ns, size_t packets,
                   std::function<void(EmulatedFlowTable&, MissPath&)> check = nullptr) {
  uint64_t now = 0;
  EmulatedFlowTable::Config cfg;
  cfg.capacity = capacity;
  cfg.insert_rate = insert_rate;
  cfg.insert_latency_ns = latency_ns;
  cfg.clock = [&now] { return now; };
  EmulatedFlowTable table(cfg);
  MissPath path(table, flows);
  ZipfFlows zipf(flows, 0.0, 11);  // uniform: every flow keeps missing until it is installed
  HwRun r;
  for (size_t i = 0; i < packets; ++i) {
    now = i * 1000;
    table.service(now);
    const size_t f = zipf.next();
    ++r.truth[f];
    if (table.match(client_flow_key(f), 100, now)) {
      ++r.nic_hits;
    } else {
      path.on_miss(client_flow_key(f), 100);
    }
    if (i % 16 == 15) path.poll_events();
    if (i % 1000 == 999) r.inserted_at.emplace_back(now, table.stats().inserted);
  }
  path.poll_events();
  if (check) check(table, path);
  r.totals = path.totals();
  r.stats = table.stats();
  return r;
}

TEST(E2eFlowCount, HardwareTableSplitsCountsKeepsTotalsAndItsInsertionRate) {
  const double rate = 20000;  // rules/s: 50 us apart
  const uint64_t latency = 20000;
  const size_t flows = 400, packets = 40000;
  HwRun r = run_hw_model(flows, 65536, rate, latency, packets, [&](EmulatedFlowTable&, MissPath& path) {
    for (size_t f = 0; f < flows; ++f) {
      const auto* e = path.software().find(client_flow_key(f));
      ASSERT_NE(e, nullptr);
      EXPECT_GE(e->counters.packets, 1u) << "a flow's first packet always misses";
    }
  });
  EXPECT_EQ(r.totals.packets, packets);
  EXPECT_EQ(r.totals.flows, flows);
  EXPECT_EQ(r.totals.hw_packets, r.nic_hits);
  EXPECT_GT(r.totals.hw_packets, packets / 2) << "most packets should hit once the flows are in";
  EXPECT_GE(r.totals.sw_packets, flows);
  EXPECT_EQ(r.stats.insert_requests, flows) << "one insertion request per flow";
  EXPECT_EQ(r.stats.inserted, flows);
  // The rate limit: by model time t at most 1 + t * rate rules can be in (the first one at latency).
  for (const auto& [t, n] : r.inserted_at) {
    EXPECT_LE(static_cast<double>(n), 1 + static_cast<double>(t) * 1e-9 * rate) << "at " << t << " ns";
  }
  // ... and the limit binds: 400 rules at 20k/s take 20 ms, so at 10 ms about half are in.
  const auto at_10ms = std::find_if(r.inserted_at.begin(), r.inserted_at.end(),
                                    [](const auto& p) { return p.first >= 10'000'000; });
  ASSERT_NE(at_10ms, r.inserted_at.end());
  EXPECT_LT(at_10ms->second, flows * 3 / 4);
  EXPECT_GT(at_10ms->second, flows / 4);
}

TEST(E2eFlowCount, FlowsRefusedByAFullTableStayInSoftware) {
  HwRun r = run_hw_model(300, 100, 1e6, 1000, 30000);
  EXPECT_EQ(r.totals.packets, 30000u);
  EXPECT_EQ(r.stats.inserted, 100u);
  EXPECT_EQ(r.stats.refused_table_full, 200u);
  // 200 of 300 uniform flows never leave software: about 2/3 of the packets.
  EXPECT_GT(r.totals.sw_packets, 30000u * 6 / 10);
  uint64_t total = 0;
  for (const auto& [f, n] : r.truth) total += n;
  EXPECT_EQ(total, r.totals.packets);
}

TEST(E2eFlowCount, PerFlowTotalsMatchTheTruthWithTheHardwareTable) {
  std::map<size_t, uint64_t> sw_part, hw_part;
  HwRun r = run_hw_model(250, 65536, 50000, 20000, 25000, [&](EmulatedFlowTable& table, MissPath& path) {
    for (size_t f = 0; f < 250; ++f) {
      const auto* e = path.software().find(client_flow_key(f));
      sw_part[f] = e ? e->counters.packets : 0;
      hw_part[f] = table.query(client_flow_key(f)).value_or(FlowCounters{}).packets;
    }
  });
  for (const auto& [f, n] : r.truth) EXPECT_EQ(sw_part[f] + hw_part[f], n) << "flow " << f;
}

// ------------------------------------------------------------ application recognition

TEST(E2eAppRecog, ClassificationFollowsTheGroups) {
  const Classifier c;
  const size_t bytes = (regex_ref::rxp_rules().size() + 7) / 8;
  auto bitmap = [&](std::initializer_list<size_t> rules) {
    Bytes b(bytes, 0);
    for (size_t i : rules) b[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    return b;
  };
  auto index = [](const std::string& name) {
    const auto& rules = regex_ref::rxp_rules();
    for (size_t i = 0; i < rules.size(); ++i)
      if (rules[i].name == name) return i;
    ADD_FAILURE() << name;
    return size_t{0};
  };
  EXPECT_EQ(c.classify(bitmap({})), Action::kEcho);
  EXPECT_EQ(c.classify(bitmap({index("sqli_union")})), Action::kHash);
  EXPECT_EQ(c.classify(bitmap({index("credit_card")})), Action::kCompress);
  EXPECT_EQ(c.classify(bitmap({index("credit_card"), index("log4shell")})), Action::kHash) << "threat wins";
  // Rules in neither group (the text filler matches some of them) leave the action alone.
  EXPECT_EQ(c.classify(bitmap({index("session_token"), index("commit_at_end")})), Action::kEcho);
  EXPECT_EQ(c.classify(bitmap({index("session_token"), index("ssn")})), Action::kCompress);
}

TEST(E2eAppRecog, PlantedPayloadsComeInTheAskedProportionsAndHyperscanAgrees) {
  AppRecognizer rec;
  for (size_t size : {64, 256, 1024}) {
    const size_t body = size - kHeaderBytes;
    const PayloadPool pool = make_payload_pool(body, 60, Mix{1, 1, 1}, 3);
    ASSERT_EQ(pool.bodies.size(), 60u);
    size_t n[4] = {};
    for (size_t i = 0; i < pool.bodies.size(); ++i) {
      ASSERT_EQ(pool.bodies[i].size(), body);
      ++n[static_cast<size_t>(pool.expected[i])];
      // The server's recognition (Hyperscan) says what the client's (ref engine) expects.
      EXPECT_EQ(rec.recognize(pool.bodies[i]), pool.expected[i]) << "size " << size << " payload " << i;
    }
    EXPECT_EQ(n[1], 20u);
    EXPECT_EQ(n[2], 20u);
    EXPECT_EQ(n[3], 20u);
  }
  const PayloadPool skewed = make_payload_pool(216, 10, Mix{0, 1, 4}, 9);
  EXPECT_EQ(std::count(skewed.expected.begin(), skewed.expected.end(), Action::kCompress), 2);
  EXPECT_EQ(std::count(skewed.expected.begin(), skewed.expected.end(), Action::kEcho), 8);
}

TEST(E2eAppRecog, RefusesWhatCannotBeMade) {
  EXPECT_THROW(make_payload_pool(4, 10, Mix{1, 0, 0}, 1), std::invalid_argument);
  EXPECT_NO_THROW(make_payload_pool(0, 4, Mix{0, 0, 1}, 1));  // an empty payload is an echo
  EXPECT_THROW(parse_mix("1,1"), std::invalid_argument);
  EXPECT_THROW(parse_mix("1,-1,1"), std::invalid_argument);
  EXPECT_THROW(parse_mix("0,0,0"), std::invalid_argument);
  EXPECT_DOUBLE_EQ(parse_mix("2,0,1.5").echo, 1.5);
}

TEST(E2eAppRecog, RepliesAreRightAndAWrongOneIsCaught) {
  AppRecognizer rec;
  const PayloadPool pool = make_payload_pool(600, 3, Mix{1, 1, 1}, 21);
  for (size_t i = 0; i < 3; ++i) {
    Bytes req(kHeaderBytes + 600);
    std::copy(pool.bodies[i].begin(), pool.bodies[i].end(), req.begin() + kHeaderBytes);
    Header h{Program::kAppRecog, Kind::kRequest, Action::kNone, 40 + i, 99, static_cast<uint16_t>(req.size()),
             client_flow_key(i)};
    encode_header(h, req);
    const Action a = rec.recognize(std::span(req).subspan(kHeaderBytes));
    ASSERT_EQ(a, pool.expected[i]);
    Bytes reply;
    rec.reply(h, a, req, reply);
    Header rh;
    ASSERT_EQ(decode_header(reply, rh), Malformed::kOk);
    EXPECT_EQ(rh.kind, Kind::kReply);
    EXPECT_EQ(rh.action, a);
    EXPECT_EQ(rh.seq, h.seq);
    EXPECT_EQ(rh.send_ns, 99u);
    EXPECT_EQ(rh.key, h.key);
    const auto body = std::span<const uint8_t>(reply).subspan(kHeaderBytes);
    const size_t want_max = a == Action::kHash ? 32 : a == Action::kCompress ? 599 : 600;
    EXPECT_LE(body.size(), want_max) << action_name(a) << ": a hash is 32 bytes, text compresses, an echo is whole";
    if (a != Action::kCompress) {
      EXPECT_EQ(body.size(), want_max);
    }
    EXPECT_EQ(check_reply_body(a, req, body), "") << action_name(a);
    Bytes wrong(body.begin(), body.end());
    wrong[wrong.size() / 2] ^= 0x20;
    EXPECT_NE(check_reply_body(a, req, wrong), "") << action_name(a) << ": a flipped byte must be caught";
  }
}

// ------------------------------------------------------------ over loopback

void send_raw(const UdpSocket& s, const Bytes& d) {
  ASSERT_EQ(send(s.fd(), d.data(), d.size(), 0), static_cast<ssize_t>(d.size()));
}

void check_malformed_are_counted(ServerConfig c) {
  LoopbackServer srv(c);
  UdpSocket client;
  client.connect(parse_endpoint("127.0.0.1", srv.port()));
  client.set_recv_timeout_us(200000);
  const Program program = c.program;
  const Program other = program == Program::kFlowTable ? Program::kAppRecog : Program::kFlowTable;
  for (int i = 0; i < 10; ++i) send_raw(client, request_bytes(program, i, client_flow_key(i % 3), 128));
  send_raw(client, Bytes(10, 0x41));                                   // short
  Bytes bad_magic = request_bytes(program, 90, client_flow_key(0), 64);
  bad_magic[1] ^= 0xFF;
  send_raw(client, bad_magic);                                         // magic
  Bytes truncated = request_bytes(program, 91, client_flow_key(0), 200);
  truncated.resize(100);
  send_raw(client, truncated);                                         // length
  send_raw(client, request_bytes(other, 92, client_flow_key(0), 64));  // the other program's request
  send_raw(client, Bytes{});                                           // empty datagram
  for (int i = 10; i < 12; ++i) send_raw(client, request_bytes(program, i, client_flow_key(i % 3), 128));
  // Loopback delivers within send(); give the server a moment to read.
  uint64_t replies = 0;
  if (program == Program::kAppRecog) {
    Bytes buf(kRecvBuffer);
    while (replies < 12 && recv(client.fd(), buf.data(), buf.size(), 0) > 0) ++replies;
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const nlohmann::json f = srv.finish();
  EXPECT_EQ(f.at("datagrams_received"), 17u);
  EXPECT_EQ(f.at("packets_processed"), 12u);
  EXPECT_EQ(f.at("bad_total"), 5u);
  EXPECT_EQ(f.at("bad").at("short"), 2u);
  EXPECT_EQ(f.at("bad").at("magic"), 1u);
  EXPECT_EQ(f.at("bad").at("length"), 1u);
  EXPECT_EQ(f.at("bad").at("unexpected"), 1u);
  if (program == Program::kFlowTable) {
    EXPECT_EQ(f.at("sum_of_flow_counts"), 12u);
    EXPECT_EQ(f.at("flows"), 3u);
    EXPECT_TRUE(f.at("counts_exact").get<bool>());
  } else {
    EXPECT_EQ(replies, 12u);
    EXPECT_EQ(f.at("replies_sent"), 12u);
  }
}

TEST(E2eServer, MalformedDatagramsAreCountedAndDoNotStopTheFlowTableServer) {
  ServerConfig c;
  c.program = Program::kFlowTable;
  check_malformed_are_counted(c);
  c.table = "hw";
  check_malformed_are_counted(c);
}

TEST(E2eServer, MalformedDatagramsAreCountedAndDoNotStopTheAppRecogServer) {
  ServerConfig c;
  c.program = Program::kAppRecog;
  check_malformed_are_counted(c);
  c.place = "dpu";  // the split: recognition on dpu, actions on host
  check_malformed_are_counted(c);
}

TEST(E2eServer, RefusesABadConfiguration) {
  ServerConfig c;
  c.place = "gpu";
  EXPECT_THROW(Server{c}, std::invalid_argument);
  c = {};
  c.table = "tcam";
  EXPECT_THROW(Server{c}, std::invalid_argument);
  c = {};
  c.ring_slots = 1000;
  EXPECT_THROW(Server{c}, std::invalid_argument);
}

nlohmann::json client_against(LoopbackServer& srv, Program program, size_t size, double interval_us, double seconds) {
  ClientConfig cc = client_of(srv, program, size, interval_us, seconds);
  cc.flows = 64;
  cc.verify_every = 4;
  CpuAccount cpu;
  nlohmann::json f = run_client_to_end(cc, cpu);
  EXPECT_GT(cpu.get(Place::kHost), 0u);
  return f;
}

TEST(E2eServer, SaysWhereItListens) {
  ServerConfig c;
  c.bind_host = "127.0.0.1";
  c.port = 0;
  Server server(c);
  const std::string port = std::to_string(ntohs(server.local().sin_port));
  EXPECT_NE(port, "0") << "the kernel's pick";
  EXPECT_EQ(server.endpoint(), "127.0.0.1:" + port);
  EXPECT_EQ(server.parameters().at("listen"), server.endpoint());
}

TEST(E2eClient, RefusesAServerThatIsNotAnIpv4Address) {
  ClientConfig cc;
  EXPECT_NO_THROW(check_client_config(cc));
  cc.server_host = "10.199.0";
  try {
    check_client_config(cc);
    ADD_FAILURE() << "took " << cc.server_host;
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "'10.199.0' is not an IPv4 address");
  }
}

TEST(E2eClientServer, FlowTableCountsMatchWhatTheClientSent) {
  for (const char* table : {"sw", "hw"}) {
    ServerConfig c;
    c.program = Program::kFlowTable;
    c.table = table;
    LoopbackServer srv(c);
    const nlohmann::json cf = client_against(srv, Program::kFlowTable, 128, 20, 0.25);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const nlohmann::json sf = srv.finish();
    const uint64_t sent = cf.at("sent"), got = sf.at("packets_processed");
    EXPECT_GT(sent, 1000u);
    EXPECT_LE(got, sent);
    EXPECT_TRUE(sf.at("counts_exact").get<bool>()) << table;
    if (got == sent) {
      EXPECT_EQ(sf.at("flow_digest"), cf.at("flow_digest")) << table << ": per-flow counts differ";
    }
    if (std::string(table) == "hw") {
      EXPECT_GT(sf.at("counted_hw").get<uint64_t>(), 0u);
    }
    EXPECT_GT(srv.cpu.get(std::string(table) == "hw" ? Place::kHw : Place::kHost), 0u);
  }
}

TEST(E2eClientServer, GsoBurstsArriveAsWellFormedDatagrams) {
  ServerConfig c;
  c.program = Program::kFlowTable;
  LoopbackServer srv(c);
  // Interval 0: as fast as possible, every send a full burst.
  ClientConfig cc = client_of(srv, Program::kFlowTable, 200, 0, 0.05);
  cc.burst = 32;
  cc.gso = true;
  cc.flows = 64;
  CpuAccount cpu;
  const nlohmann::json cf = run_client_to_end(cc, cpu);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const nlohmann::json sf = srv.finish();
  EXPECT_GT(cf.at("gso").at("sends").get<uint64_t>(), 0u) << cf.at("gso").at("refused");
  EXPECT_EQ(cf.at("send_errors"), 0u);
  const uint64_t sent = cf.at("sent"), got = sf.at("packets_processed");
  EXPECT_GT(got, 0u);
  EXPECT_LE(got, sent);
  EXPECT_EQ(sf.at("bad_total"), 0u) << "every segment the kernel cut must be one whole datagram";
  EXPECT_EQ(sf.at("datagrams_received"), got);
  EXPECT_TRUE(sf.at("counts_exact").get<bool>());
  cc.burst = 400;  // 400 x 200 bytes cannot be one UDP send
  EXPECT_THROW(check_client_config(cc), std::invalid_argument);
}

TEST(E2eClientServer, AppRecogRepliesAreCheckedAndTimed) {
  for (const char* place : {"host", "dpu"}) {
    ServerConfig c;
    c.program = Program::kAppRecog;
    c.place = place;
    LoopbackServer srv(c);
    const nlohmann::json cf = client_against(srv, Program::kAppRecog, 256, 50, 0.25);
    const nlohmann::json sf = srv.finish();
    const auto& r = cf.at("replies");
    const uint64_t sent = cf.at("sent"), unique = r.at("unique");
    EXPECT_GT(sent, 500u);
    EXPECT_LE(unique, sent);
    EXPECT_GT(unique, sent / 2) << place;
    EXPECT_EQ(r.at("wrong_action"), 0u) << r.at("first_failure");
    EXPECT_EQ(r.at("verify_failures"), 0u) << r.at("first_failure");
    EXPECT_GT(r.at("verified").get<uint64_t>(), 10u);
    EXPECT_EQ(r.at("bad"), 0u);
    const double loss = cf.at("loss");
    EXPECT_GE(loss, 0.0);
    EXPECT_LE(loss, 1.0);
    const auto& rtt = cf.at("rtt_us");
    EXPECT_LE(rtt.at("min").get<double>(), rtt.at("p50").get<double>());
    EXPECT_LE(rtt.at("p50").get<double>(), rtt.at("p99").get<double>());
    EXPECT_LE(rtt.at("p99").get<double>(), rtt.at("max").get<double>());
    // Every action occurred, in the pool's thirds (the pool repeats every 60 requests).
    for (const char* a : {"hash", "compress", "echo"}) {
      const double share = cf.at("expected_actions").at(a).get<double>() / static_cast<double>(sent);
      EXPECT_NEAR(share, 1.0 / 3, 0.02) << a;
      EXPECT_EQ(sf.at("actions").at(a), r.at("actions").at(a)) << "server and client disagree on " << a;
    }
    if (std::string(place) == "dpu") {
      EXPECT_GT(srv.cpu.get(Place::kDpu), 0u);
      EXPECT_GT(srv.cpu.get(Place::kHost), 0u);
    } else {
      EXPECT_EQ(srv.cpu.get(Place::kDpu), 0u);
    }
  }
}

// Every server thread on the dpu place is dilated to the dpu's speed (its
// batches' CPU time is followed by (1/F - 1) x as much busy time, accounted
// to the dpu place); the host place and the NIC thread never are.
TEST(E2eServer, TheDpuPlaceIsDilatedAndTheHostPlaceIsNot) {
  struct Case {
    Program program;
    const char* table;
    const char* place;
    const char* dpu_work;
    bool dilated;
  };
  const Case cases[] = {
      {Program::kFlowTable, "sw", "dpu", "recognition", true},   // the whole table on the dpu
      {Program::kFlowTable, "hw", "dpu", "recognition", true},   // the miss path on the dpu, the NIC at full speed
      {Program::kAppRecog, "sw", "dpu", "recognition", true},    // matching on the dpu, actions on the host
      {Program::kAppRecog, "sw", "dpu", "all", true},            // everything on the dpu
      {Program::kFlowTable, "sw", "host", "recognition", false},
      {Program::kFlowTable, "hw", "host", "recognition", false},
      {Program::kAppRecog, "sw", "host", "recognition", false},
  };
  for (const Case& k : cases) {
    const std::string what = std::string(program_name(k.program)) + " " + k.table + " " + k.place + " " + k.dpu_work;
    ServerConfig c;
    c.program = k.program;
    if (k.program == Program::kFlowTable) c.table = k.table;
    c.place = k.place;
    c.dpu_work = k.dpu_work;
    c.dpu_speed = DpuSpeed::parse("0.5");
    LoopbackServer srv(c);
    const nlohmann::json cf = client_against(srv, k.program, 256, 50, 0.15);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const nlohmann::json sf = srv.finish();
    EXPECT_GT(sf.at("packets_processed").get<uint64_t>(), 100u) << what;
    EXPECT_EQ(sf.at("dpu_speed").at("factor"), 0.5) << what;
    const double work = sf.at("dilation").at("work_cpu_ns").get<double>();
    const double added = sf.at("dilation").at("dilated_cpu_ns").get<double>();
    if (!k.dilated) {
      EXPECT_EQ(work, 0) << what;
      EXPECT_EQ(added, 0) << what;
      continue;
    }
    EXPECT_GT(work, 0) << what;
    EXPECT_GE(added, 0.99 * work) << what;  // (1/F - 1) x the work, paid in full
    EXPECT_GE(static_cast<double>(srv.cpu.get(Place::kDpu)), work + added) << what << ": the dpu account includes it";
  }
}

TEST(E2eClient, ZipfSkewsAndPercentilesRank) {
  ZipfFlows z(100, 1.1, 1), u(100, 0.0, 1);
  std::vector<int> zc(100), uc(100);
  for (int i = 0; i < 100000; ++i) {
    ++zc[z.next()];
    ++uc[u.next()];
  }
  EXPECT_GT(zc[0], 10 * zc[99]);
  EXPECT_GT(uc[99], 700);
  EXPECT_LT(uc[0], 1300);
  std::vector<uint32_t> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(percentile_sorted(v, 0.5), 5);
  EXPECT_EQ(percentile_sorted(v, 0.9), 9);
  EXPECT_EQ(percentile_sorted(v, 0.999), 10);
  EXPECT_EQ(percentile_sorted(v, 0.0), 1);
  std::set<FlowKey, bool (*)(const FlowKey&, const FlowKey&)> keys(
      [](const FlowKey& a, const FlowKey& b) { return a.bytes < b.bytes; });
  for (size_t i = 0; i < 70000; ++i) keys.insert(client_flow_key(i));
  EXPECT_EQ(keys.size(), 70000u);
}

}  // namespace
}  // namespace dpukit::bench::e2e
