// The TLS transport socket end to end on loopback: the node proxy (its
// control plane and a worker, in this process) terminates mutual TLS with a
// certificate made here, refuses what Envoy refuses with the same alerts and
// counters, picks filter chains by what the tls_inspector read, and speaks TLS
// to an upstream cluster. The client side is OpenSSL's API.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>

#include "config/bootstrap.h"
#include "control/control_plane.h"
#include "tls_test_pki.h"

namespace dpukit::mesh {
namespace {

using testing::Pki;

// inbound (:P): tls_inspector; an mTLS chain (HTTP, direct response) and a plaintext one (direct response).
// tls_only (:P+1): one mTLS chain behind the inspector: plaintext matches no chain.
// sds (:P+3): its certificate from an SDS file (DIR/sds.yaml), rotated by rewriting the file; require_sni;
// a client certificate is asked for, not required (checked when one comes).
// outbound (:P+2): plaintext, relayed (tcp_proxy) to cluster `inbound` over mTLS (this proxy's own inbound listener).
std::string config(const Pki& pki, int port) {
  const std::string dir = pki.dir().string();
  const std::string tls = R"(
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: true
          common_tls_context:
            alpn_protocols: [h2, http/1.1]
            tls_certificates: [{certificate_chain: {filename: DIR/server.crt}, private_key: {filename: DIR/server.key}}]
            validation_context:
              trusted_ca: {filename: DIR/ca.crt}
              match_typed_subject_alt_names: [{san_type: URI, matcher: {exact: "spiffe://cluster.local/ns/default/sa/frontend"}}]
)";
  const auto hcm = [](const std::string& prefix, const std::string& route) {
    return R"(
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: )" + prefix + R"(
          route_config: {virtual_hosts: [{name: all, domains: ["*"], routes: [{match: {prefix: /}, )" + route + R"(}]}]}
          http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]
)";
  };
  const auto address = [](int p) {
    return "    address: {socket_address: {address: 127.0.0.1, port_value: " + std::to_string(p) + "}}\n";
  };
  const std::string inspector =
      "    listener_filters: [{name: envoy.filters.listener.tls_inspector, typed_config: {\"@type\": "
      "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}}]\n";
  // Silent clients: the inbound listener serves them as plaintext after 0.3 s, the TLS-only one closes them.
  const std::string timeout = "    listener_filters_timeout: 0.3s\n";
  std::string text = "static_resources:\n  listeners:\n  - name: inbound\n" + address(port) + inspector + timeout +
                     "    continue_on_listener_filters_timeout: true\n" +
                     "    filter_chains:\n    - filter_chain_match: {transport_protocol: tls}\n" + tls +
                     hcm("in_tls", "direct_response: {status: 200, body: {inline_string: over-mtls}}") +
                     "    - filter_chain_match: {transport_protocol: raw_buffer}\n" +
                     hcm("in_plain", "direct_response: {status: 200, body: {inline_string: plaintext}}") +
                     "  - name: tls_only\n" + address(port + 1) + inspector + timeout +
                     "    filter_chains:\n    - filter_chain_match: {transport_protocol: tls}\n" + tls +
                     hcm("only", "direct_response: {status: 200, body: {inline_string: only}}") +
                     "  - name: outbound\n" + address(port + 2) + R"(    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: out, cluster: inbound}
)" + R"(
  - name: sds
    address: {socket_address: {address: 127.0.0.1, port_value: )" + std::to_string(port + 3) + R"(}}
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_sni: true
          common_tls_context:
            tls_certificate_sds_secret_configs:
            - name: default
              sds_config: {path_config_source: {path: DIR/sds.yaml}, resource_api_version: V3}
            validation_context:
              trusted_ca: {filename: DIR/ca.crt}
              match_typed_subject_alt_names: [{san_type: URI, matcher: {exact: "spiffe://cluster.local/ns/default/sa/frontend"}}]
)" + hcm("sds", "direct_response: {status: 200, body: {inline_string: sds}}") + R"(
  clusters:
  - name: inbound
    connect_timeout: 2s
    load_assignment: {cluster_name: inbound, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: )" +
                     std::to_string(port) + R"(}}}}]}]}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: backend.local
        common_tls_context:
          tls_certificates: [{certificate_chain: {filename: DIR/client.crt}, private_key: {filename: DIR/client.key}}]
          validation_context:
            trusted_ca: {filename: DIR/ca.crt}
            match_typed_subject_alt_names: [{san_type: URI, matcher: {exact: "spiffe://cluster.local/ns/default/sa/backend"}}]
)";
  // A cluster of the TLS-only listener, health-checked: its checks must speak TLS to pass.
  const size_t upstream = text.find("    transport_socket:", text.find("  clusters:"));
  text += R"(  - name: tls_only
    connect_timeout: 2s
    load_assignment: {cluster_name: tls_only, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: )" +
          std::to_string(port + 1) + R"(}}}}]}]}
    health_checks: [{timeout: 1s, interval: 0.2s, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {path: /}}]
)" + text.substr(upstream);
  for (size_t at; (at = text.find("DIR/")) != std::string::npos;) text.replace(at, 3, dir);
  return text;
}

// The first of four consecutive loopback ports that are free now (the proxy binds them next).
int free_ports() {
  for (int base = 21000 + static_cast<int>(::getpid() % 997) * 20; base < 60000; base += 4) {
    bool free = true;
    for (int p = base; p < base + 4 && free; ++p) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(p));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
    }
    if (free) return base;
  }
  return 0;
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};  // a bound on every wait: a hung proxy fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One HTTP/1.1 request over a blocking socket or an SSL; the whole answer (the proxy closes after it).
std::string http_get(int fd, SSL* ssl) {
  const std::string req = "GET / HTTP/1.1\r\nHost: backend.local\r\nConnection: close\r\n\r\n";
  if (ssl ? SSL_write(ssl, req.data(), static_cast<int>(req.size())) <= 0
          : ::send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size()))
    return "";
  std::string out;
  char buf[4096];
  for (;;) {
    const int n = ssl ? SSL_read(ssl, buf, sizeof buf) : static_cast<int>(::recv(fd, buf, sizeof buf, 0));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class MeshTls : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_.leaf("server", "DNS:backend.local,URI:spiffe://cluster.local/ns/default/sa/backend");
    pki_.leaf("client", "URI:spiffe://cluster.local/ns/default/sa/frontend");
    pki_.leaf("expired", "URI:spiffe://cluster.local/ns/default/sa/frontend", -30, -1);
    pki_.leaf("stranger", "URI:spiffe://cluster.local/ns/default/sa/frontend", 0, 30, true);
    pki_.leaf("server2", "DNS:backend.local,URI:spiffe://cluster.local/ns/default/sa/backend");
    write_sds("server");
    port_ = free_ports();
    ASSERT_NE(port_, 0);
    cp_ = std::make_unique<ControlPlane>(ProxyOptions{}, std::vector<int>{}, 1);
    cp_->start(config::parse_bootstrap(config(pki_, port_)));
    thread_ = std::thread([this] { cp_->run(); });
  }
  void TearDown() override {
    if (!thread_.joinable()) return;
    cp_->stop();
    thread_.join();
  }

  // The SDS file of the sds listener: the secret `default` with <cert>.crt and <key>.key.
  void write_sds(const std::string& cert, const std::string& key = "") {
    Pki::write(pki_.dir() / "sds.yaml",
               "resources:\n- \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n"
               "  name: default\n  tls_certificate:\n    certificate_chain: {filename: " + pki_.path(cert + ".crt") +
                   "}\n    private_key: {filename: " + pki_.path((key.empty() ? cert : key) + ".key") + "}\n");
  }
  // The common name of the certificate the server showed.
  static std::string peer_cn(SSL* ssl) {
    X509* peer = SSL_get0_peer_certificate(ssl);
    char cn[256] = {};
    if (peer) X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
    return cn;
  }

  // A client handshake to `port`; `cert` "" for none. The SSL (nullptr when the handshake failed) and
  // the OpenSSL reason of the failure (the alert the proxy sent).
  struct Client {
    int fd = -1;
    SSL* ssl = nullptr;
    int reason = 0;
    ~Client() {
      if (ssl) SSL_free(ssl);
      if (fd >= 0) ::close(fd);
    }
  };
  std::unique_ptr<Client> handshake(int port, const std::string& cert, int max_version = TLS1_3_VERSION,
                                    const std::string& alpn = "") {
    auto c = std::make_unique<Client>();
    SSL_CTX* ctx = client_ctx(cert, max_version);
    c->fd = connect_to(port);
    SSL* ssl = SSL_new(ctx);
    SSL_CTX_free(ctx);
    SSL_set_fd(ssl, c->fd);
    if (send_sni_) SSL_set_tlsext_host_name(ssl, "backend.local");
    if (!alpn.empty()) {
      std::string wire = std::string(1, static_cast<char>(alpn.size())) + alpn;
      SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()), static_cast<unsigned>(wire.size()));
    }
    ERR_clear_error();
    const int r = SSL_connect(ssl);
    if (r != 1) {
      c->reason = ERR_GET_REASON(ERR_peek_error());
      ERR_clear_error();
      SSL_free(ssl);
      return c;
    }
    c->ssl = ssl;
    return c;
  }

  // A client context trusting the test CA, presenting `cert` ("" for none).
  SSL_CTX* client_ctx(const std::string& cert, int max_version = TLS1_3_VERSION) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx, pki_.path("ca.crt").c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_max_proto_version(ctx, max_version);
    if (max_version < TLS1_2_VERSION) {
      SSL_CTX_set_security_level(ctx, 0);
      SSL_CTX_set_min_proto_version(ctx, max_version);
    }
    if (!cert.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx, pki_.path(cert + ".crt").c_str());
      SSL_CTX_use_PrivateKey_file(ctx, pki_.path(cert + ".key").c_str(), SSL_FILETYPE_PEM);
    }
    return ctx;
  }

  // The alert that refused a handshake. TLS 1.3: the server judges the
  // client's certificate after the client's side of the handshake is done, so
  // its alert comes with the first read.
  int refusal(int port, const std::string& cert, int max_version = TLS1_3_VERSION) {
    auto c = handshake(port, cert, max_version);
    if (!c->ssl) return c->reason;
    ERR_clear_error();
    const std::string answer = http_get(c->fd, c->ssl);
    return answer.empty() ? ERR_GET_REASON(ERR_peek_error()) : 0;
  }

  // A counter once it reaches `want` (the proxy counts after its alert is out), within a bounded wait.
  uint64_t eventually(const std::function<uint64_t()>& read, uint64_t want) {
    uint64_t v = read();
    for (int i = 0; i < 500 && v < want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      v = read();
    }
    return v;
  }

  uint64_t metric(const std::string& name, const std::string& labels) {
    const std::string text = cp_->stats().prometheus(cp_->host_views());
    const std::string line = name + "{" + labels + "} ";
    const size_t at = text.find(line);
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + line.size()));
  }
  uint64_t ssl(const std::string& stat, int port) {
    return metric("envoy_listener_ssl_" + stat, "envoy_listener_address=\"127.0.0.1_" + std::to_string(port) + "\"");
  }

  Pki pki_;
  bool send_sni_ = true;
  int port_ = 0;
  std::unique_ptr<ControlPlane> cp_;
  std::thread thread_;
};

TEST_F(MeshTls, MutualTlsServesAndCounts) {
  auto c = handshake(port_, "client");
  ASSERT_TRUE(c->ssl) << ERR_reason_error_string(static_cast<unsigned long>(c->reason));
  EXPECT_NE(http_get(c->fd, c->ssl).find("over-mtls"), std::string::npos);
  EXPECT_EQ(eventually([&] { return ssl("handshake", port_); }, 1), 1u);
  // Envoy's plain /stats names the same counters with dots.
  const std::string text = cp_->stats().text(cp_->host_views());
  const std::string scope = "listener.127.0.0.1_" + std::to_string(port_) + ".ssl.";
  EXPECT_NE(text.find(scope + "handshake: 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find(scope + "versions.TLSv1.3: 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find(scope + "fail_verify_san: 0\n"), std::string::npos) << text;
  EXPECT_EQ(metric("envoy_listener_ssl_versions",
                   "envoy_ssl_version=\"TLSv1.3\",envoy_listener_address=\"127.0.0.1_" + std::to_string(port_) + "\""),
            1u);
  // ALPN h2: the HTTP/2 codec takes the connection (its SETTINGS frame comes first).
  auto h2 = handshake(port_, "client", TLS1_3_VERSION, "h2");
  ASSERT_TRUE(h2->ssl);
  const unsigned char* alpn = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(h2->ssl, &alpn, &len);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(alpn), len), "h2");
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  ASSERT_GT(SSL_write(h2->ssl, preface.data(), static_cast<int>(preface.size())), 0);
  unsigned char frame[9];
  ASSERT_EQ(SSL_read(h2->ssl, frame, sizeof frame), 9);
  EXPECT_EQ(frame[3], 0x4);  // SETTINGS
}

TEST_F(MeshTls, RefusalsSendTheirAlertAndCount) {
  const auto count = [&](const std::string& stat, uint64_t want) {
    return eventually([&] { return ssl(stat, port_); }, want);
  };
  EXPECT_EQ(refusal(port_, ""), SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED);
  EXPECT_EQ(count("fail_verify_no_cert", 1), 1u);
  EXPECT_EQ(refusal(port_, "stranger"), SSL_R_TLSV1_ALERT_UNKNOWN_CA);  // not signed by the trusted CA
  EXPECT_EQ(count("fail_verify_error", 1), 1u);
  EXPECT_EQ(refusal(port_, "expired"), SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED);
  EXPECT_EQ(count("fail_verify_error", 2), 2u);
  EXPECT_EQ(refusal(port_, "server"), SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN);  // trusted, but its SAN is not matched
  EXPECT_EQ(count("fail_verify_san", 1), 1u);
  EXPECT_EQ(refusal(port_, "client", TLS1_VERSION), SSL_R_TLSV1_ALERT_PROTOCOL_VERSION);  // below the minimum, TLS 1.2
  EXPECT_EQ(count("connection_error", 5), 5u);
  EXPECT_EQ(ssl("handshake", port_), 0u);
}

TEST_F(MeshTls, InspectorPicksTheChain) {
  // Plaintext on the inbound listener: its raw_buffer chain answers.
  int fd = connect_to(port_);
  EXPECT_NE(http_get(fd, nullptr).find("plaintext"), std::string::npos);
  ::close(fd);
  // Plaintext to a TLS-only listener: no chain matches, the connection closes, counted as Envoy does.
  fd = connect_to(port_ + 1);
  EXPECT_EQ(http_get(fd, nullptr), "");
  ::close(fd);
  EXPECT_EQ(metric("envoy_listener_no_filter_chain_match", "envoy_listener_address=\"127.0.0.1_" + std::to_string(port_ + 1) + "\""), 1u);
  auto c = handshake(port_ + 1, "client");
  ASSERT_TRUE(c->ssl);
  EXPECT_NE(http_get(c->fd, c->ssl).find("only"), std::string::npos);
}

TEST_F(MeshTls, InspectorTimeout) {
  // A client that says nothing (a server-first protocol): after listener_filters_timeout the
  // inbound listener goes on with its plaintext chain (continue_on_listener_filters_timeout)...
  int fd = connect_to(port_);
  const auto plain_connections = [&] {
    return metric("envoy_http_downstream_cx_total", "envoy_http_conn_manager_prefix=\"in_plain\"");
  };
  EXPECT_EQ(eventually(plain_connections, 1), 1u);
  EXPECT_NE(http_get(fd, nullptr).find("plaintext"), std::string::npos);
  ::close(fd);
  // ... and the TLS-only listener closes the connection (recv sees the end, not its 10 s bound).
  fd = connect_to(port_ + 1);
  char b;
  EXPECT_EQ(::recv(fd, &b, 1, 0), 0);
  ::close(fd);
}

TEST_F(MeshTls, UpstreamMutualTlsWithSessionResumption) {
  // Plaintext in, mTLS to the cluster (this proxy's inbound listener, which checks the client's SAN).
  for (int i = 0; i < 3; ++i) {
    int fd = connect_to(port_ + 2);
    EXPECT_NE(http_get(fd, nullptr).find("over-mtls"), std::string::npos) << i;
    ::close(fd);
  }
  EXPECT_EQ(metric("envoy_cluster_ssl_handshake", "envoy_cluster_name=\"inbound\""), 3u);
  EXPECT_EQ(eventually([&] { return ssl("handshake", port_); }, 3), 3u);
  // The cluster keeps its last session: the later connections resume it (TLS 1.2, Envoy's upstream default).
  EXPECT_GE(metric("envoy_cluster_ssl_session_reused", "envoy_cluster_name=\"inbound\""), 1u);
  EXPECT_GE(ssl("session_reused", port_), 1u);
}

TEST_F(MeshTls, HealthChecksUseTheClusterTls) {
  // The TLS-only listener sees the checker's handshakes, and the host stays healthy.
  EXPECT_GE(eventually([&] { return ssl("handshake", port_ + 1); }, 2), 2u);
  EXPECT_EQ(metric("envoy_cluster_membership_healthy", "envoy_cluster_name=\"tls_only\""), 1u);
  EXPECT_EQ(metric("envoy_listener_no_filter_chain_match", "envoy_listener_address=\"127.0.0.1_" + std::to_string(port_ + 1) + "\""), 0u);
}

TEST_F(MeshTls, SdsRotationKeepsOpenConnections) {
  const int port = port_ + 3;
  auto before = handshake(port, "");
  ASSERT_TRUE(before->ssl);
  EXPECT_EQ(peer_cn(before->ssl), "server");
  const std::string keep_alive = "GET / HTTP/1.1\r\nHost: backend.local\r\n\r\n";
  char buf[512];
  ASSERT_GT(SSL_write(before->ssl, keep_alive.data(), static_cast<int>(keep_alive.size())), 0);
  ASSERT_GT(SSL_read(before->ssl, buf, sizeof buf), 0);
  const auto updates = [&] {
    return metric("envoy_listener_server_ssl_socket_factory_ssl_context_update_by_sds",
                  "envoy_listener_address=\"127.0.0.1_" + std::to_string(port) + "\"");
  };
  // The node agent writes a new certificate: new handshakes get it (the watcher looks once a second).
  write_sds("server2");
  ASSERT_EQ(eventually(updates, 1), 1u);
  auto after = handshake(port, "");
  ASSERT_TRUE(after->ssl) << ERR_reason_error_string(static_cast<unsigned long>(ERR_PACK(ERR_LIB_SSL, 0, after->reason)));
  EXPECT_EQ(peer_cn(after->ssl), "server2");
  // The connection from before is still up, on its old certificate.
  ASSERT_GT(SSL_write(before->ssl, keep_alive.data(), static_cast<int>(keep_alive.size())), 0);
  const int n = SSL_read(before->ssl, buf, sizeof buf);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buf, static_cast<size_t>(n)).find(" 200 "), std::string::npos);
  // require_sni: a client that names no server is refused.
  send_sni_ = false;
  EXPECT_EQ(handshake(port, "")->reason, SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE);
  send_sni_ = true;
  // A key that is not the certificate's is refused (logged); the certificate in use stays.
  write_sds("server", "server2");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two looks by the watcher; no count may come
  EXPECT_EQ(updates(), 1u);
  auto still = handshake(port, "");
  ASSERT_TRUE(still->ssl);
  EXPECT_EQ(peer_cn(still->ssl), "server2");
}

// A rotation while a handshake is under way (the client's last flight not
// sent yet): the handshake ends on the SSL_CTX it began with, its client
// certificate checked by that context, and the connection is served. (The
// old context's verification data used to be freed with the rotation: the
// proxy crashed in its verify callback, a CI failure of test_mesh_tls.py.)
TEST_F(MeshTls, SdsRotationDuringAHandshake) {
  const int port = port_ + 3;
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  SSL_CTX* ctx = client_ctx("client");
  SSL* ssl = SSL_new(ctx);
  SSL_CTX_free(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_set_tlsext_host_name(ssl, "backend.local");
  SSL_set_connect_state(ssl);
  const auto send_out = [&] {
    char* data = nullptr;
    const long n = BIO_get_mem_data(out, &data);
    const bool sent = n <= 0 || ::send(fd, data, static_cast<size_t>(n), MSG_NOSIGNAL) == n;
    (void)BIO_reset(out);
    return sent;
  };
  const auto receive = [&] {
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) BIO_write(in, buf, static_cast<int>(n));
    return n > 0;
  };
  // ClientHello out, the server's flight in; TLS 1.3: the client is done and
  // its Certificate, CertificateVerify and Finished wait in `out`.
  for (int r; (r = SSL_do_handshake(ssl)) != 1;) {
    ASSERT_EQ(SSL_get_error(ssl, r), SSL_ERROR_WANT_READ);
    ASSERT_TRUE(send_out());
    ASSERT_TRUE(receive()) << "the proxy closed during the handshake";
  }
  EXPECT_EQ(peer_cn(ssl), "server");
  const auto updates = [&] {
    return metric("envoy_listener_server_ssl_socket_factory_ssl_context_update_by_sds",
                  "envoy_listener_address=\"127.0.0.1_" + std::to_string(port) + "\"");
  };
  write_sds("server2");
  ASSERT_EQ(eventually(updates, 1), 1u);
  // The proxy now checks the client's certificate, on the context the handshake began with.
  const std::string req = "GET / HTTP/1.1\r\nHost: backend.local\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(SSL_write(ssl, req.data(), static_cast<int>(req.size())), static_cast<int>(req.size()));
  ASSERT_TRUE(send_out());
  std::string answer;
  char buf[4096];
  for (;;) {
    const int n = SSL_read(ssl, buf, sizeof buf);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (SSL_get_error(ssl, n) != SSL_ERROR_WANT_READ || !receive()) break;
  }
  SSL_free(ssl);
  ::close(fd);
  EXPECT_NE(answer.find(" 200 "), std::string::npos) << answer;
  EXPECT_NE(answer.find("sds"), std::string::npos) << answer;
  // New handshakes take the new certificate.
  auto after = handshake(port, "client");
  ASSERT_TRUE(after->ssl);
  EXPECT_EQ(peer_cn(after->ssl), "server2");
  EXPECT_NE(http_get(after->fd, after->ssl).find(" 200 "), std::string::npos);
}

}  // namespace
}  // namespace dpukit::mesh
