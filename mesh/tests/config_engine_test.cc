// dpukit.transport_sockets.crypto_engine: a transport socket that wraps
// Envoy's TLS socket (as Envoy's tap socket wraps `transport_socket`) and puts
// its records' crypto on the BlueField's crypto engine. What is read, its
// /config_dump form, and every refusal by its path.
#include <gtest/gtest.h>

#include <string>

#include "config/bootstrap.h"
#include "config_refusal.h"
#include "engine_socket.h"
#include "tls_test_pki.h"

namespace dpukit::mesh::config {
namespace {

using testing::Pki;

// The cluster's socket: its UpstreamTlsContext wrapped, the records on the cores.
const std::string kClusterSocket =
    "    transport_socket:\n" + testing::engine_socket(6, "CORES", "UpstreamTlsContext", "sni: backend.local");

const std::string kConfig = R"(
static_resources:
  listeners:
  - name: inbound
    address: {socket_address: {address: 127.0.0.1, port_value: 15006}}
    filter_chains:
    - transport_socket:
)" + testing::engine_socket(8, "ENGINE", "DownstreamTlsContext", R"(common_tls_context:
  tls_certificates: [{certificate_chain: {filename: $DIR/server.crt}, private_key: {filename: $DIR/server.key}}])") + R"(      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: in, cluster: backend}
  clusters:
  - name: backend
    load_assignment: {cluster_name: backend, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}}]}]}
)" + kClusterSocket;

constexpr const char* kListener = "static_resources.listeners[0].filter_chains[0].transport_socket";
constexpr const char* kCluster = "static_resources.clusters[0].transport_socket";

class ConfigEngine : public ::testing::Test {
 protected:
  ConfigEngine() { pki_.leaf("server", "DNS:backend.local"); }
  std::string config(const std::string& from = "", const std::string& to = "") const {
    std::string text = kConfig;
    for (size_t at; (at = text.find("$DIR")) != std::string::npos;) text.replace(at, 4, pki_.dir().string());
    return replaced_once(text, from, to);
  }
  static void expect_refused(const std::string& text, const std::string& path, const std::string& reason) {
    expect_config_refused(text, path, reason);
  }
  Pki pki_;
};

TEST_F(ConfigEngine, ReadsTheWrappedTlsContextAndTheChoice) {
  const Bootstrap b = parse_bootstrap(config());
  const auto& down = b.listeners.at(0).filter_chains.at(0).tls;
  ASSERT_TRUE(down);
  EXPECT_TRUE(down->common.record_crypto_engine);
  EXPECT_EQ(down->common.record_crypto_where, std::string(kListener) + ".typed_config.record_crypto");
  ASSERT_EQ(down->common.tls_certificates.size(), 1u);
  const auto& up = b.clusters.at(0).tls;
  ASSERT_TRUE(up);
  EXPECT_FALSE(up->common.record_crypto_engine);
  EXPECT_EQ(up->sni, "backend.local");
  // The plain TLS socket has no engine.
  const Bootstrap plain = parse_bootstrap(config(kClusterSocket, R"(    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: backend.local
)"));
  EXPECT_FALSE(plain.clusters.at(0).tls->common.record_crypto_engine);
  EXPECT_TRUE(plain.clusters.at(0).tls->common.record_crypto_where.empty());
}

TEST_F(ConfigEngine, ConfigDumpShowsTheWrapperAndReadsBack) {
  const auto j = to_json(parse_bootstrap(config()));
  const auto& ts = j["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"];
  EXPECT_EQ(ts["name"], "dpukit.transport_sockets.crypto_engine");
  EXPECT_EQ(ts["typed_config"]["record_crypto"], "ENGINE");
  EXPECT_EQ(ts["typed_config"]["transport_socket"]["name"], "envoy.transport_sockets.tls");
  EXPECT_EQ(j["static_resources"]["clusters"][0]["transport_socket"]["typed_config"]["record_crypto"], "CORES");
  EXPECT_EQ(to_json(parse_bootstrap(j.dump())), j);
}

TEST_F(ConfigEngine, RefusalsByPath) {
  const std::string tc = std::string(kListener) + ".typed_config";
  expect_refused(config("          record_crypto: ENGINE\n", "          record_crypto: ENGINE\n          recrod: 1\n"),
                 tc + ".recrod", "unknown field");
  expect_refused(config("record_crypto: ENGINE", "record_crypto: FPGA"), tc + ".record_crypto",
                 "unknown value 'FPGA' (expected one of ENGINE, CORES)");
  expect_refused(config("          record_crypto: ENGINE\n", ""), tc + ".record_crypto", "missing required field");
  expect_refused(config("\"@type\": type.googleapis.com/dpukit.mesh.v1.CryptoEngineTransportSocket\n          record_crypto: ENGINE",
                        "\"@type\": type.googleapis.com/dpukit.mesh.v1.Other\n          record_crypto: ENGINE"),
                 tc + ".@type", "expected type.googleapis.com/dpukit.mesh.v1.CryptoEngineTransportSocket");
  // It wraps the TLS socket, nothing else (nor itself).
  expect_refused(config("          transport_socket:\n            name: envoy.transport_sockets.tls",
                        "          transport_socket:\n            name: dpukit.transport_sockets.crypto_engine"),
                 tc + ".transport_socket.name", "inside dpukit.transport_sockets.crypto_engine");
  expect_refused(config("          transport_socket:\n            name: envoy.transport_sockets.tls",
                        "          transport_socket:\n            name: envoy.transport_sockets.raw_buffer"),
                 tc + ".transport_socket.name", "envoy.transport_sockets.raw_buffer is not supported by dpukit-mesh");
  // The wrapped context is checked as it is without the wrapper.
  expect_refused(config("              common_tls_context:\n", "              common_tls_contxt:\n"),
                 tc + ".transport_socket.typed_config.common_tls_contxt", "unknown field");
  expect_refused(config("            sni: backend.local\n", "            sni: backend.local\n            snii: x\n"),
                 std::string(kCluster) + ".typed_config.transport_socket.typed_config.snii", "unknown field");
}

// mesh/examples/dpukit-only/mtls-node-engine.yaml: mtls-node.yaml with both
// of its mTLS sockets wrapped (not in mesh/examples/, whose files Envoy validates).
TEST(ConfigEngineExample, BothMtlsSocketsHaveTheirRecordsOnTheEngine) {
  const Bootstrap b = load_bootstrap(std::string(MESH_EXAMPLES_DIR) + "/dpukit-only/mtls-node-engine.yaml");
  int engine = 0;
  for (const auto& l : b.listeners)
    for (const auto& c : l.filter_chains) engine += c.tls && c.tls->common.record_crypto_engine;
  for (const auto& c : b.clusters) engine += c.tls && c.tls->common.record_crypto_engine;
  EXPECT_EQ(engine, 2);
}

}  // namespace
}  // namespace dpukit::mesh::config
