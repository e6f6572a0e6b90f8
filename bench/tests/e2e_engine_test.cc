// App recognition on a BlueField's engines (e2e-server --engine): the
// refusals, and the replies byte for byte the same as without the engines
// (the libraries compute the engines' jobs), with the engines' work billed
// to hw.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <atomic>
#include <map>

#include "e2e/apprecog.h"
#include "e2e/client.h"
#include "e2e/datagram.h"
#include "e2e/engine_offload.h"
#include "e2e/server.h"
#include "e2e/udp.h"
#include "e2e_loopback.h"
#include "tool_run.h"

namespace dpukit::bench::e2e {
namespace {

ServerConfig engine_config(const std::string& engines, const std::string& speed = "bluefield2") {
  ServerConfig c;
  c.program = Program::kAppRecog;
  c.place = "dpu";
  c.dpu_speed = DpuSpeed::parse(speed);
  c.engines = engines;
  c.bind_host = "127.0.0.1";
  c.port = 0;
  c.recv_timeout_us = 5000;
  c.placement = Placement::plan("", "", "");
  return c;
}

std::string refusal(const ServerConfig& c) {
  try {
    Server s(c);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(E2eEngine, ParsesTheEngineChoice) {
  EXPECT_FALSE(parse_engine_choice("").any());
  EXPECT_TRUE(parse_engine_choice("regex").regex);
  EXPECT_FALSE(parse_engine_choice("regex").compress);
  const EngineChoice both = parse_engine_choice("compress,regex");
  EXPECT_TRUE(both.regex && both.compress);
  EXPECT_EQ(both.str(), "regex,compress");
  EXPECT_THROW(parse_engine_choice("rxp,pka"), std::invalid_argument);
  EXPECT_THROW(parse_engine_choice(","), std::invalid_argument);
}

TEST(E2eEngine, RefusedWhereTheCardHasNoSuchEngineOrTheWorkIsNotTheDpus) {
  // No RXP and no deflate compressor on BlueField-3 in core's model: the error names the generation.
  for (const char* e : {"regex", "compress", "regex,compress"}) {
    const std::string why = refusal(engine_config(e, "bluefield3"));
    EXPECT_NE(why.find("bluefield3"), std::string::npos) << e << ": " << why;
    EXPECT_NE(why.find("--engine"), std::string::npos) << why;
  }
  // A speed that names no card.
  EXPECT_NE(refusal(engine_config("regex", "host")).find("BlueField generation"), std::string::npos);
  EXPECT_NE(refusal(engine_config("regex", "0.5")).find("BlueField generation"), std::string::npos);
  ServerConfig c = engine_config("regex");
  c.place = "host";
  EXPECT_NE(refusal(c).find("--place dpu"), std::string::npos);
  c = engine_config("regex");
  c.dpu_work = "all";
  EXPECT_NE(refusal(c).find("--dpu-work recognition"), std::string::npos);
  c = engine_config("regex");
  c.program = Program::kFlowTable;
  EXPECT_NE(refusal(c).find("apprecog"), std::string::npos);
  EXPECT_NE(refusal(engine_config("regex,tcam")).find("not 'tcam'"), std::string::npos);
}

// The tool turns each refusal into exit 2 with its message, before it binds anything.
TEST(E2eEngine, TheToolRefusesWithExit2NamingTheGeneration) {
  auto run_tool = [](const std::string& args, std::string& out) {
    return run_bench_tool("e2e-server --program apprecog --port 0 " + args, out);
  };
  std::string out;
  EXPECT_EQ(run_tool("--place dpu --dpu-speed bluefield3 --engine regex", out), 2);
  EXPECT_NE(out.find("--engine regex: bluefield3 has no regex engine"), std::string::npos) << out;
  EXPECT_EQ(run_tool("--place dpu --dpu-speed bluefield3 --engine compress", out), 2);
  EXPECT_NE(out.find("bluefield3"), std::string::npos) << out;
  EXPECT_EQ(run_tool("--place host --dpu-speed bluefield2 --engine regex", out), 2);
  EXPECT_NE(out.find("--place dpu"), std::string::npos) << out;
  EXPECT_EQ(run_tool("--place dpu --dpu-speed host --engine regex", out), 2);
  EXPECT_NE(out.find("BlueField generation"), std::string::npos) << out;
}

// Every request of a payload pool, one at a time; the replies by sequence number.
std::map<uint64_t, Bytes> replies_to_pool(uint16_t port, size_t size, size_t count) {
  const PayloadPool pool = make_payload_pool(size - kHeaderBytes, count, Mix{}, 11);
  UdpSocket client;
  client.connect(parse_endpoint("127.0.0.1", port));
  client.set_recv_timeout_us(2000000);
  std::map<uint64_t, Bytes> got;
  Bytes buf(kRecvBuffer);
  for (size_t i = 0; i < pool.bodies.size(); ++i) {
    Bytes d(kHeaderBytes);
    d.insert(d.end(), pool.bodies[i].begin(), pool.bodies[i].end());
    encode_header({Program::kAppRecog, Kind::kRequest, Action::kNone, i, 1234567, static_cast<uint16_t>(d.size()),
                   FlowKey{}},
                  d);
    EXPECT_EQ(send(client.fd(), d.data(), d.size(), 0), static_cast<ssize_t>(d.size()));
    const ssize_t n = recv(client.fd(), buf.data(), buf.size(), 0);
    if (n <= 0) {
      ADD_FAILURE() << "no reply to request " << i;
      break;
    }
    Header h;
    EXPECT_EQ(decode_header(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), h), Malformed::kOk);
    EXPECT_EQ(h.action, pool.expected[i]) << "request " << i << ": the action the ref engine gives";
    EXPECT_EQ(check_reply_body(h.action, d, std::span<const uint8_t>(buf.data() + kHeaderBytes,
                                                                      static_cast<size_t>(n) - kHeaderBytes)),
              "")
        << "request " << i;
    got[h.seq] = Bytes(buf.begin(), buf.begin() + n);
  }
  return got;
}

// The classification and every reply byte are the library's, with or
// without the engines: the same requests get the same replies.
TEST(E2eEngine, TheServerRepliesTheSameWithAndWithoutTheEngines) {
  for (size_t size : {64, 1024}) {
    std::map<std::string, std::map<uint64_t, Bytes>> by_mode;
    for (const char* engines : {"", "regex", "compress", "regex,compress"}) {
      LoopbackServer srv(engine_config(engines));
      by_mode[engines] = replies_to_pool(srv.port(), size, 45);
      const nlohmann::json f = srv.finish();
      ASSERT_EQ(f.at("packets_processed"), 45u) << engines;
      if (!*engines) {
        EXPECT_FALSE(f.contains("engine"));
        EXPECT_EQ(srv.cpu.get(Place::kHw), 0u);
        continue;
      }
      const nlohmann::json& e = f.at("engine");
      EXPECT_EQ(e.at("generation"), "bluefield2");
      const std::string mode = engines;
      if (mode.find("regex") != std::string::npos) {
        EXPECT_EQ(e.at("regex").at("jobs"), 45u) << engines;
        EXPECT_EQ(e.at("regex").at("name"), "RXP");
        // Each job takes at least the model's unloaded latency.
        EXPECT_GE(e.at("regex").at("mean_latency_ns").get<double>(), 5000.0);
        EXPECT_GT(e.at("regex").at("hw_cpu_ns").get<uint64_t>(), 0u);
      } else {
        EXPECT_FALSE(e.contains("regex"));
      }
      if (mode.find("compress") != std::string::npos) {
        EXPECT_EQ(e.at("compress").at("jobs"), f.at("actions").at("compress")) << engines;
      }
      // The engines' CPU is hw; the dpu thread still paid for driving them.
      EXPECT_GT(srv.cpu.get(Place::kHw), 0u) << engines;
      EXPECT_GT(srv.cpu.get(Place::kDpu), 0u) << engines;
      EXPECT_EQ(srv.parameters.at("engines").at("generation"), "bluefield2");
    }
    for (const auto& [mode, replies] : by_mode) {
      const auto& want = by_mode.at("");
      ASSERT_EQ(replies.size(), want.size()) << "--engine " << mode << " at " << size << " B";
      for (const auto& [seq, reply] : replies) {
        if (reply == want.at(seq)) continue;
        // A deflate stream is not unique: ISA-L's level 1 once chose other
        // matches for the same 64 B body (its hash table's history), a
        // stream that inflated to the body all the same. Both inflate to
        // the request (check_reply_body in replies_to_pool), so a compress
        // reply must only carry the same action.
        Header a, b;
        if (decode_header(want.at(seq), a) == Malformed::kOk && decode_header(reply, b) == Malformed::kOk &&
            a.action == Action::kCompress && b.action == Action::kCompress)
          continue;
        ADD_FAILURE() << "--engine " << mode << " at " << size << " B, request " << seq << ": "
                      << describe_difference(want.at(seq), reply);
      }
    }
  }
}

// Under a client's load: every reply checked by the client, the dpu thread
// dilated (its own work only), and the RXP's jobs the requests.
TEST(E2eEngine, UnderLoadTheClientsChecksPassAndTheDpuThreadIsDilated) {
  LoopbackServer srv(engine_config("regex,compress"));
  ClientConfig cc = client_of(srv, Program::kAppRecog, 256, 50, 0.25);
  cc.verify_every = 2;
  CpuAccount ccpu;
  const nlohmann::json cf = run_client_to_end(cc, ccpu);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const nlohmann::json sf = srv.finish();
  const auto& r = cf.at("replies");
  EXPECT_GT(cf.at("sent").get<uint64_t>(), 500u);
  EXPECT_EQ(r.at("wrong_action"), 0u) << r.at("first_failure");
  EXPECT_EQ(r.at("verify_failures"), 0u) << r.at("first_failure");
  EXPECT_GT(r.at("verified").get<uint64_t>(), 10u);
  EXPECT_EQ(sf.at("engine").at("regex").at("jobs"), sf.at("packets_processed"));
  EXPECT_EQ(sf.at("engine").at("compress").at("jobs"), sf.at("actions").at("compress"));
  const double work = sf.at("dilation").at("work_cpu_ns").get<double>();
  const double added = sf.at("dilation").at("dilated_cpu_ns").get<double>();
  const double f = sf.at("dpu_speed").at("factor").get<double>();
  EXPECT_GT(work, 0);
  EXPECT_GE(added, 0.99 * (1 / f - 1) * work);
  EXPECT_GE(static_cast<double>(srv.cpu.get(Place::kDpu)), work + added);
}

}  // namespace
}  // namespace dpukit::bench::e2e
