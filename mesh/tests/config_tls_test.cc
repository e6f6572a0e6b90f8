// The TLS transport socket's configuration as Envoy writes it: what is read,
// and every refusal named by its path (missing file, bad PEM, a key that is
// not the certificate's, a bad version, unknown fields, SDS files).
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <string>

#include "config/bootstrap.h"
#include "config/checked_yaml.h"
#include "config_refusal.h"
#include "tls_test_pki.h"

namespace dpukit::mesh::config {
namespace {

using testing::Pki;

// A listener with an mTLS chain and a plaintext chain (Istio's PERMISSIVE
// inbound), and a cluster with an UpstreamTlsContext. $DIR is the PKI's directory.
const std::string kConfig = R"(
static_resources:
  listeners:
  - name: inbound
    address: {socket_address: {address: 127.0.0.1, port_value: 15006}}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}
    filter_chains:
    - name: mtls
      filter_chain_match: {transport_protocol: tls, server_names: [backend.local, "*.svc"], application_protocols: [h2]}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: true
          common_tls_context:
            tls_params: {tls_minimum_protocol_version: TLSv1_2, tls_maximum_protocol_version: TLSv1_3, cipher_suites: ["[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]"]}
            alpn_protocols: [h2, http/1.1]
            tls_certificates: [{certificate_chain: {filename: $DIR/server.crt}, private_key: {filename: $DIR/server.key}}]
            validation_context:
              trusted_ca: {filename: $DIR/ca.crt}
              match_typed_subject_alt_names:
              - {san_type: URI, matcher: {exact: "spiffe://cluster.local/ns/default/sa/frontend"}}
              - {san_type: URI, matcher: {prefix: "spiffe://cluster.local/ns/prod/"}}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: in, cluster: backend}
    - name: plaintext
      filter_chain_match: {transport_protocol: raw_buffer}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: in_plain, cluster: backend}
  clusters:
  - name: backend
    load_assignment: {cluster_name: backend, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 8080}}}}]}]}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: outbound_.8080_._.backend.default.svc.cluster.local
        common_tls_context:
          tls_certificates: [{certificate_chain: {filename: $DIR/client.crt}, private_key: {filename: $DIR/client.key}}]
          validation_context: {trusted_ca: {filename: $DIR/ca.crt}}
)";

constexpr const char* kDownstream =
    "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.common_tls_context";
constexpr const char* kUpstream = "static_resources.clusters[0].transport_socket.typed_config";

class ConfigTls : public ::testing::Test {
 protected:
  ConfigTls() {
    pki_.leaf("server", "DNS:backend.local,URI:spiffe://cluster.local/ns/default/sa/backend");
    pki_.leaf("client", "URI:spiffe://cluster.local/ns/default/sa/frontend");
  }
  // kConfig with $DIR set and `from` replaced by `to` (which must be there).
  std::string with_dir(std::string text) const {
    for (size_t at; (at = text.find("$DIR")) != std::string::npos;) text.replace(at, 4, pki_.dir().string());
    return text;
  }
  std::string config(std::string from = "", std::string to = "") const {
    return replaced_once(with_dir(kConfig), with_dir(from), with_dir(to));
  }
  static void expect_refused(const std::string& text, const std::string& path, const std::string& reason) {
    expect_config_refused(text, path, reason);
  }
  Pki pki_;
};

TEST_F(ConfigTls, ReadsDownstreamUpstreamAndFilterChainMatch) {
  const Bootstrap b = parse_bootstrap(config());
  const Listener& l = b.listeners.at(0);
  EXPECT_TRUE(l.tls_inspector);
  ASSERT_EQ(l.filter_chains.size(), 2u);
  const FilterChain& mtls = l.filter_chains[0];
  EXPECT_EQ(mtls.name, "mtls");
  EXPECT_EQ(mtls.match.transport_protocol, "tls");
  EXPECT_EQ(mtls.match.server_names, (std::vector<std::string>{"backend.local", "*.svc"}));
  EXPECT_EQ(mtls.match.application_protocols, std::vector<std::string>{"h2"});
  ASSERT_TRUE(mtls.tls);
  EXPECT_TRUE(mtls.tls->require_client_certificate);
  const CommonTlsContext& c = mtls.tls->common;
  EXPECT_EQ(c.tls_params.min_version, TLS1_2_VERSION);
  EXPECT_EQ(c.tls_params.max_version, TLS1_3_VERSION);
  // BoringSSL's equal-preference group becomes OpenSSL's list.
  EXPECT_EQ(c.tls_params.cipher_suites, std::vector<std::string>{"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305"});
  EXPECT_EQ(c.alpn_protocols, (std::vector<std::string>{"h2", "http/1.1"}));
  ASSERT_EQ(c.tls_certificates.size(), 1u);
  EXPECT_EQ(c.tls_certificates[0].certificate_chain.bytes, Pki::read(pki_.path("server.crt")));
  ASSERT_EQ(c.validation.match_typed_subject_alt_names.size(), 2u);
  const SanMatcher& prefix = c.validation.match_typed_subject_alt_names[1];
  EXPECT_EQ(prefix.san_type, SanMatcher::Type::kUri);
  EXPECT_TRUE(prefix.matcher.matches("spiffe://cluster.local/ns/prod/sa/x"));
  EXPECT_FALSE(prefix.matcher.matches("spiffe://cluster.local/ns/default/sa/x"));
  EXPECT_EQ(l.listener_filters_timeout, std::chrono::milliseconds(15000));  // Envoy's default
  EXPECT_FALSE(l.continue_on_listener_filters_timeout);
  EXPECT_EQ(mtls.transport_socket_connect_timeout, std::chrono::milliseconds(15000));
  const Bootstrap timeouts = parse_bootstrap(config("    filter_chains:\n    - name: mtls\n",
                                                    "    listener_filters_timeout: 0.5s\n    continue_on_listener_filters_timeout: true\n"
                                                    "    filter_chains:\n    - name: mtls\n      transport_socket_connect_timeout: 2s\n"));
  EXPECT_EQ(timeouts.listeners[0].listener_filters_timeout, std::chrono::milliseconds(500));
  EXPECT_TRUE(timeouts.listeners[0].continue_on_listener_filters_timeout);
  EXPECT_EQ(timeouts.listeners[0].filter_chains[0].transport_socket_connect_timeout, std::chrono::milliseconds(2000));
  EXPECT_FALSE(l.filter_chains[1].tls);
  EXPECT_EQ(l.filter_chains[1].match.transport_protocol, "raw_buffer");
  const Cluster& cl = b.clusters.at(0);
  ASSERT_TRUE(cl.tls);
  EXPECT_EQ(cl.tls->sni, "outbound_.8080_._.backend.default.svc.cluster.local");
  EXPECT_TRUE(cl.tls->common.validation.trusted_ca);
  // /config_dump: Envoy's names, the key shown by its file name only.
  const auto j = to_json(b);
  const auto& ts = j["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"];
  EXPECT_EQ(ts["name"], "envoy.transport_sockets.tls");
  EXPECT_EQ(ts["typed_config"]["common_tls_context"]["tls_certificates"][0]["private_key"]["filename"],
            pki_.path("server.key"));
  EXPECT_EQ(to_json(parse_bootstrap(j.dump())), j);
}

TEST_F(ConfigTls, RefusesBadFilesByPath) {
  const std::string certs = std::string(kDownstream) + ".tls_certificates[0]";
  expect_refused(config("$DIR/server.crt", "$DIR/absent.crt"), certs + ".certificate_chain.filename", "cannot read");
  Pki::write(pki_.dir() / "garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
  expect_refused(config("$DIR/server.crt", "$DIR/garbage.pem"), certs + ".certificate_chain.filename",
                 "not a PEM certificate chain");
  expect_refused(config("$DIR/server.key", "$DIR/server.crt"), certs + ".private_key.filename", "not a PEM private key");
  // The client's key with the server's certificate.
  expect_refused(config("$DIR/server.key", "$DIR/client.key"), certs + ".private_key.filename",
                 "the private key does not match the certificate");
  expect_refused(config("trusted_ca: {filename: $DIR/ca.crt}\n              match",
                        "trusted_ca: {filename: $DIR/server.key}\n              match"),
                 std::string(kDownstream) + ".validation_context.trusted_ca.filename", "no PEM CA certificate");
}

TEST_F(ConfigTls, RefusesBadParametersByPath) {
  expect_refused(config("tls_minimum_protocol_version: TLSv1_2", "tls_minimum_protocol_version: TLSv1_4"),
                 std::string(kDownstream) + ".tls_params.tls_minimum_protocol_version", "unknown value 'TLSv1_4'");
  expect_refused(config("tls_maximum_protocol_version: TLSv1_3", "tls_maximum_protocol_version: TLSv1_1"),
                 std::string(kDownstream) + ".tls_params.tls_minimum_protocol_version", "greater than");
  expect_refused(config("ECDHE-ECDSA-CHACHA20-POLY1305]", "NO-SUCH-CIPHER]"),
                 std::string(kDownstream) + ".tls_params.cipher_suites[0]", "unknown cipher suite");
  expect_refused(config("alpn_protocols: [h2", "alpn_protocol: [h2"), std::string(kDownstream) + ".alpn_protocol",
                 "unknown field");
  expect_refused(config("san_type: URI, matcher: {exact", "san_type: URL, matcher: {exact"),
                 std::string(kDownstream) + ".validation_context.match_typed_subject_alt_names[0].san_type",
                 "unknown value 'URL'");
  expect_refused(config("require_client_certificate: true", "require_client_certificate: true\n          ocsp_staple_policy: STRICT_STAPLING"),
                 "static_resources.listeners[0].filter_chains[0].transport_socket.typed_config.ocsp_staple_policy",
                 "ocsp_staple_policy is not supported by dpukit-mesh");
  expect_refused(config("sni: outbound_", "sin: outbound_"), std::string(kUpstream) + ".sin", "unknown field");
  expect_refused(config("transport_protocol: raw_buffer", "transport_protocol: quic"),
                 "static_resources.listeners[0].filter_chains[1].filter_chain_match.transport_protocol",
                 "unknown transport protocol 'quic'");
  expect_refused(config("transport_protocol: raw_buffer", "transport_protocol: tls, server_names: [backend.local, \"*.svc\"], application_protocols: [h2]"),
                 "static_resources.listeners[0].filter_chains[1]", "the same filter_chain_match as filter_chains[0]");
  expect_refused(config("name: envoy.filters.listener.tls_inspector", "name: envoy.filters.listener.http_inspector"),
                 "static_resources.listeners[0].listener_filters[0].name",
                 "envoy.filters.listener.http_inspector is not supported by dpukit-mesh");
}

TEST_F(ConfigTls, SdsFromFiles) {
  const std::string sds = pki_.path("sds-cert.yaml");
  const auto secret = [&](const std::string& name, const std::string& cert) {
    Pki::write(sds, "resources:\n- \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n"
                    "  name: " + name + "\n  tls_certificate:\n    certificate_chain: {filename: " + pki_.path(cert + ".crt") +
                    "}\n    private_key: {filename: " + pki_.path("server.key") + "}\n");
  };
  Pki::write(pki_.path("sds-ca.json"),
             R"({"resources": [{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
                 "name": "ROOTCA", "validation_context": {"trusted_ca": {"filename": ")" + pki_.path("ca.crt") + R"("}}}]})");
  const std::string with_sds = config(
      "tls_certificates: [{certificate_chain: {filename: $DIR/server.crt}, private_key: {filename: $DIR/server.key}}]\n"
      "            validation_context:\n              trusted_ca: {filename: $DIR/ca.crt}\n",
      "tls_certificate_sds_secret_configs:\n            - name: default\n              sds_config: {path_config_source: {path: " + sds +
          "}, resource_api_version: V3}\n"
          "            combined_validation_context:\n              validation_context_sds_secret_config:\n"
          "                name: ROOTCA\n                sds_config: {path_config_source: {path: " + pki_.path("sds-ca.json") +
          "}}\n            validation_context_:\n");
  // The SAN matchers stay under the combined context's default_validation_context.
  const std::string moved = [&] {
    std::string t = with_sds;
    const size_t at = t.find("            validation_context_:\n");
    t.erase(at, std::string("            validation_context_:\n").size());
    const size_t sans = t.find("              match_typed_subject_alt_names:");
    std::string block = t.substr(sans, t.find("      filters:", sans) - sans);
    t.erase(sans, block.size());
    for (size_t p = 0; (p = block.find("\n", p)) != std::string::npos && p + 1 < block.size(); p += 3) block.insert(p + 1, "  ");
    t.insert(t.find("              validation_context_sds_secret_config:"), "              default_validation_context:\n  " + block);
    return t;
  }();
  secret("default", "server");
  const Bootstrap b = parse_bootstrap(moved);
  const CommonTlsContext& c = b.listeners[0].filter_chains[0].tls->common;
  ASSERT_TRUE(c.tls_certificate_sds);
  EXPECT_EQ(c.tls_certificate_sds->path, sds);
  EXPECT_EQ(c.tls_certificates.at(0).certificate_chain.bytes, Pki::read(pki_.path("server.crt")));
  ASSERT_TRUE(c.validation.trusted_ca);
  EXPECT_EQ(c.validation.match_typed_subject_alt_names.size(), 2u);  // the default context's, kept
  const std::string where = std::string(kDownstream) + ".tls_certificate_sds_secret_configs[0].sds_config.path_config_source.path";
  // Envoy's SdsApi: the one resource must be the secret asked for.
  secret("other", "server");
  expect_refused(moved, where + "(" + sds + ").resources[0].name", "unexpected secret 'other' (expecting default)");
  // A certificate that is not the key's is refused inside the file, by its path there.
  secret("default", "client");
  expect_refused(moved, where + "(" + sds + ").resources[0].tls_certificate.private_key.filename",
                 "the private key does not match");
  std::filesystem::remove(sds);
  expect_refused(moved, where, "cannot read " + sds);
}


// Secrets pushed by SDS (over gRPC as istio-agent serves them, or over ADS):
// named at parse time, read when they come; their sources refused by path.
TEST_F(ConfigTls, SdsPushedOverGrpcAndAds) {
  const std::string cert_sds =
      "tls_certificate_sds_secret_configs:\n            - name: default\n              sds_config:\n"
      "                api_config_source: {api_type: GRPC, transport_api_version: V3, set_node_on_first_message_only: true,"
      " grpc_services: [{envoy_grpc: {cluster_name: sds-grpc}}]}\n"
      "                initial_fetch_timeout: 0s\n                resource_api_version: V3\n"
      "            validation_context_sds_secret_config: {name: ROOTCA, sds_config: {ads: {}}}\n"
      "            validation_context_:\n";
  std::string text = config(
      "tls_certificates: [{certificate_chain: {filename: $DIR/server.crt}, private_key: {filename: $DIR/server.key}}]\n"
      "            validation_context:\n",
      cert_sds);
  // The SAN matchers of the old validation_context go with it: a plain SDS validation context has none of its own.
  const size_t v = text.find("            validation_context_:\n");
  text.erase(v, text.find("      filters:", v) - v);
  const std::string sds_cluster =
      "  - name: sds-grpc\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n"
      "        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n"
      "        explicit_http_config: {http2_protocol_options: {}}\n"
      "    load_assignment: {cluster_name: sds-grpc, endpoints: [{lb_endpoints: [{endpoint: {address: {pipe: {path: /run/sds.sock}}}}]}]}\n";
  const std::string ads =
      "dynamic_resources:\n  ads_config: {api_type: GRPC, grpc_services: [{envoy_grpc: {cluster_name: sds-grpc}}]}\n"
      "  cds_config: {ads: {}}\nnode: {id: n1}\n";
  const std::string full = replaced_once(text, "  clusters:\n", "  clusters:\n" + sds_cluster) + ads;
  const Bootstrap b = parse_bootstrap(full);
  const CommonTlsContext& c = b.listeners[0].filter_chains[0].tls->common;
  ASSERT_TRUE(c.tls_certificate_sds && c.validation_sds);
  EXPECT_EQ(c.tls_certificate_sds->stream(), "grpc:sds-grpc");
  EXPECT_EQ(c.tls_certificate_sds->initial_fetch_timeout.count(), 0);
  EXPECT_EQ(c.validation_sds->stream(), "ads");
  EXPECT_TRUE(c.tls_certificates.empty());  // it comes later
  const auto names = pushed_secret_names(b);
  EXPECT_EQ(names.at("grpc:sds-grpc"), std::set<std::string>{"default"});
  EXPECT_EQ(names.at("ads"), std::set<std::string>{"ROOTCA"});
  // /config_dump shows the sources as Envoy would.
  const nlohmann::json common = to_json(b)["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"]
                                          ["typed_config"]["common_tls_context"];
  EXPECT_EQ(common["tls_certificate_sds_secret_configs"][0]["sds_config"]["api_config_source"]["grpc_services"][0]
                  ["envoy_grpc"]["cluster_name"],
            "sds-grpc");
  EXPECT_EQ(common["tls_certificate_sds_secret_configs"][0]["sds_config"]["initial_fetch_timeout"], "0s");
  EXPECT_TRUE(common["combined_validation_context"]["validation_context_sds_secret_config"]["sds_config"].contains("ads"));

  const std::string at = std::string(kDownstream) + ".tls_certificate_sds_secret_configs[0].sds_config.api_config_source";
  expect_refused(replaced_once(full, "cluster_name: sds-grpc}}]}\n                initial", "cluster_name: nowhere}}]}\n                initial"),
                 at + ".grpc_services[0].envoy_grpc.cluster_name", "unknown cluster 'nowhere'");
  expect_refused(replaced_once(full, "api_type: GRPC, transport_api_version: V3, set", "api_type: DELTA_GRPC, transport_api_version: V3, set"),
                 at + ".api_type", "DELTA_GRPC is not supported by dpukit-mesh here");
  expect_refused(replaced_once(full, "envoy_grpc: {cluster_name: sds-grpc}}]}\n                initial",
                               "google_grpc: {target_uri: x}}]}\n                initial"),
                 at + ".grpc_services[0].google_grpc", "google_grpc is not supported");
  // A secret from ads needs the ADS stream.
  expect_refused(replaced_once(full, ads, ""),
                 std::string(kDownstream) + ".validation_context_sds_secret_config.sds_config.ads", "no ADS stream");
  // A gRPC cluster that does not speak HTTP/2.
  expect_refused(replaced_once(full, "        explicit_http_config: {http2_protocol_options: {}}\n",
                               "        explicit_http_config: {http_protocol_options: {}}\n"),
                 at + ".grpc_services[0].envoy_grpc.cluster_name", "must speak HTTP/2");
}

// A Secret as SDS pushes it: checked as a file's is, other kinds refused by name.
TEST_F(ConfigTls, SecretsAsPushed) {
  const auto parse = [](const std::string& yaml) { return parse_secret(At(YAML::Load(yaml), "resources[0]", 0)); };
  const std::string cert = Pki::read(pki_.path("server.crt")), key = Pki::read(pki_.path("server.key"));
  const auto block = [](const std::string& pem) {
    std::string out = "|\n";
    for (size_t p = 0, n; p < pem.size(); p = n + 1) {
      n = pem.find('\n', p);
      if (n == std::string::npos) n = pem.size();
      out += "      " + pem.substr(p, n - p) + "\n";
    }
    return out;
  };
  const std::string good = "\"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\nname: default\n"
                           "tls_certificate:\n  certificate_chain:\n    inline_string: " + block(cert) +
                           "  private_key:\n    inline_string: " + block(key);
  const Secret s = parse(good);
  EXPECT_EQ(s.name, "default");
  ASSERT_TRUE(s.tls_certificate);
  EXPECT_EQ(s.tls_certificate->certificate_chain.bytes, cert);
  EXPECT_FALSE(s.validation_context);
  const std::string other_key = Pki::read(pki_.path("client.key"));
  try {
    parse(replaced_once(good, block(key), block(other_key)));
    ADD_FAILURE() << "a key that is not the certificate's was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the private key does not match"), std::string::npos) << e.what();
  }
  try {
    parse("name: keys\nsession_ticket_keys: {keys: []}\n");
    ADD_FAILURE() << "session_ticket_keys was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "resources[0].session_ticket_keys") << e.what();
  }
}

}  // namespace
}  // namespace dpukit::mesh::config
