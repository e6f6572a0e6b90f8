// TLS record crypto on the BlueField's crypto engine (tls/engine_crypto.h):
// the provider gives OpenSSL's own bytes, counts its payload calls as hw
// time, and its time is not dilated; ChaCha20-Poly1305 stays on the cores;
// a proxy at a speed without a BlueField generation refuses the option; and
// the node proxy (its control plane and a worker, in this process) serves
// mTLS with its records on the engine.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/provider.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/bootstrap.h"
#include "control/control_plane.h"
#include "dataplane/loop_dilation.h"
#include "engine_socket.h"
#include "dpukit/core/accounting.h"
#include "tls/engine_crypto.h"
#include "tls_test_pki.h"

namespace dpukit::mesh {
namespace {

using CipherPtr = std::unique_ptr<EVP_CIPHER, decltype(&EVP_CIPHER_free)>;
using CtxPtr = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

CipherPtr fetch(OSSL_LIB_CTX* libctx, const char* name, const char* propq) {
  return CipherPtr(EVP_CIPHER_fetch(libctx, name, propq), EVP_CIPHER_free);
}

// One AEAD record as TLS 1.3 seals it (IV, AAD, payload, tag), with
// `cipher`, into `out` (sized and written by the caller: its page faults are
// not the crypto's).
void seal_into(const EVP_CIPHER* cipher, const std::string& key, const std::string& plain, std::string& out) {
  CtxPtr ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  const unsigned char iv[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const unsigned char aad[5] = {23, 3, 3, 0x40, 0x11};
  ASSERT_EQ(out.size(), plain.size() + 16);
  int n = 0, m = 0;
  // As libssl does: the connection's key once, then each record's nonce.
  EXPECT_EQ(EVP_EncryptInit_ex2(ctx.get(), cipher, reinterpret_cast<const unsigned char*>(key.data()), nullptr, nullptr), 1);
  EXPECT_EQ(EVP_EncryptInit_ex2(ctx.get(), nullptr, nullptr, iv, nullptr), 1);
  EXPECT_EQ(EVP_EncryptUpdate(ctx.get(), nullptr, &n, aad, sizeof aad), 1);
  EXPECT_EQ(EVP_EncryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &n,
                              reinterpret_cast<const unsigned char*>(plain.data()), static_cast<int>(plain.size())),
            1);
  EXPECT_EQ(EVP_EncryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + n, &m), 1);
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, 16, out.data() + plain.size()), 1);
}

std::string seal(const EVP_CIPHER* cipher, const std::string& key, const std::string& plain) {
  std::string out(plain.size() + 16, '\0');
  seal_into(cipher, key, plain, out);
  return out;
}

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  return s;
}

TEST(EngineCrypto, TheEnginesAesGcmIsOpenSslsAndCountsAsHw) {
  OSSL_LIB_CTX* libctx = engine_libctx();
  for (const char* name : {"AES-128-GCM", "AES-256-GCM"}) {
    SCOPED_TRACE(name);
    CipherPtr engine = fetch(libctx, name, kEngineQuery);
    ASSERT_TRUE(engine);
    EXPECT_STREQ(OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(engine.get())), "dpukit-engine");
    CipherPtr cores = fetch(nullptr, name, nullptr);
    const std::string key = pattern(static_cast<size_t>(EVP_CIPHER_get_key_length(cores.get())));
    const std::string plain = pattern(4 << 20);
    std::string sealed(plain.size() + 16, '\1');
    const EngineCryptoTotals before = engine_crypto_totals();
    seal_into(engine.get(), key, plain, sealed);
    const EngineCryptoTotals after = engine_crypto_totals();
    EXPECT_TRUE(sealed == seal(cores.get(), key, plain)) << "the engine's record differs from OpenSSL's";
    EXPECT_EQ(after.calls - before.calls, 1u);  // one record: nonce, AAD, payload and tag, one span
    EXPECT_EQ(after.bytes - before.bytes, plain.size());
    // The record's time counts as hw. How much of the thread's CPU it is,
    // is a timing figure (a preempted call is charged at the unpreempted
    // calls' rate), not asserted here: `dpukit eval --dpu bluefield3 --only
    // mesh.tls` reports the engine pair's hw and dpu CPU per request and
    // per GB, paired against the pair on the cores (docs/mesh.md).
    EXPECT_GT(after.hw_ns - before.hw_ns, 0u);
  }
}

TEST(EngineCrypto, ChaCha20Poly1305StaysOnTheCores) {
  CipherPtr chacha = fetch(engine_libctx(), "ChaCha20-Poly1305", kEngineQuery);
  ASSERT_TRUE(chacha);
  EXPECT_STREQ(OSSL_PROVIDER_get0_name(EVP_CIPHER_get0_provider(chacha.get())), "default");
  const EngineCryptoTotals before = engine_crypto_totals();
  seal(chacha.get(), pattern(32), pattern(1 << 20));
  EXPECT_EQ(engine_crypto_totals().calls, before.calls);
}

// The loop's dilation at F = 0.5: a record sealed on the engine adds
// (almost) nothing to the work it dilates; the same record on the cores adds
// its whole CPU time.
TEST(EngineCrypto, TheLoopsDilationExcludesTheEnginesTime) {
  CipherPtr engine = fetch(engine_libctx(), "AES-128-GCM", kEngineQuery);
  CipherPtr cores = fetch(nullptr, "AES-128-GCM", nullptr);
  const std::string key = pattern(16), plain = pattern(8 << 20);
  std::string out(plain.size() + 16, '\1');  // written before: its page faults are not the work measured
  const auto dilated_work = [&](const EVP_CIPHER* c) {
    DilationCounters counters;
    LoopDilation loop(DpuSpeed{"half", 0.5}, counters);
    LoopDilation::Current current(loop);
    loop.pay();  // from here on
    const uint64_t w0 = counters.work_ns.load();
    seal_into(c, key, plain, out);
    loop.pay();
    return counters.work_ns.load() - w0;
  };
  dilated_work(cores.get());  // warm both up
  dilated_work(engine.get());
  const uint64_t on_cores = dilated_work(cores.get()), on_engine = dilated_work(engine.get());
  EXPECT_GT(on_cores, 500'000u) << "8 MiB of AES-GCM should take well over 0.5 ms";
  EXPECT_LT(on_engine, on_cores / 5) << "on the engine " << on_engine << " ns dilated, on the cores " << on_cores;
}

TEST(EngineCrypto, OnlyABlueFieldGenerationHasTheEngine) {
  for (const char* speed : {"host", "0.5"}) {
    try {
      record_crypto_engine(DpuSpeed::parse(speed));
      ADD_FAILURE() << speed << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("--dpu-speed bluefield2 or bluefield3"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + speed + "'"), std::string::npos) << e.what();
    }
  }
  for (const char* speed : {"bluefield2", "bluefield3"}) {
    const EngineSpec& spec = record_crypto_engine(DpuSpeed::parse(speed));
    EXPECT_EQ(spec.generation, speed);
    EXPECT_EQ(spec.kind, EngineKind::kBulkCrypto);
  }
}

// -- the node proxy with record_crypto: ENGINE --------------------------------------------

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// An mTLS listener whose chain answers with a `body_kib` KiB direct response;
// its TLS socket wrapped by the crypto_engine socket (`record_crypto`).
std::string engine_config(const testing::Pki& pki, int port, const std::string& record_crypto, size_t body_kib) {
  std::string text = R"(static_resources:
  listeners:
  - name: inbound
    address: {socket_address: {address: 127.0.0.1, port_value: PORT}}
    filter_chains:
    - transport_socket:
)" + testing::engine_socket(8, record_crypto, "DownstreamTlsContext", R"(require_client_certificate: true
common_tls_context:
  tls_certificates: [{certificate_chain: {filename: DIR/server.crt}, private_key: {filename: DIR/server.key}}]
  validation_context: {trusted_ca: {filename: DIR/ca.crt}})") + R"(      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: in
          route_config: {virtual_hosts: [{name: all, domains: ["*"], routes: [{match: {prefix: /}, direct_response: {status: 200, body: {inline_string: "BODY"}}}]}]}
          http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]
)";
  const auto put = [&](const std::string& what, const std::string& with) {
    for (size_t at; (at = text.find(what)) != std::string::npos;) text.replace(at, what.size(), with);
  };
  put("PORT", std::to_string(port));
  put("DIR", pki.dir().string());
  put("BODY", std::string(body_kib << 10, 'x'));
  return text;
}

class MeshEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_.leaf("server", "DNS:backend.local");
    pki_.leaf("client", "URI:spiffe://cluster.local/ns/default/sa/frontend");
  }
  void TearDown() override {
    if (thread_.joinable()) {
      cp_->stop();
      thread_.join();
    }
    set_record_crypto_speed(DpuSpeed{});
  }
  void start(const std::string& speed, const std::string& record_crypto, size_t body_kib) {
    ProxyOptions o;
    o.dpu_speed = DpuSpeed::parse(speed);
    set_record_crypto_speed(o.dpu_speed);  // what run_proxy does
    port_ = free_port();
    cp_ = std::make_unique<ControlPlane>(o, std::vector<int>{}, 1);
    cp_->start(config::parse_bootstrap(engine_config(pki_, port_, record_crypto, body_kib)));
    thread_ = std::thread([this] { cp_->run(); });
  }
  // One GET over mTLS, the client offering only `suites` (TLS 1.3); the whole answer and the cipher.
  std::pair<std::string, std::string> get(const char* suites) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_ciphersuites(ctx, suites);
    SSL_CTX_load_verify_locations(ctx, pki_.path("ca.crt").c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_use_certificate_chain_file(ctx, pki_.path("client.crt").c_str());
    SSL_CTX_use_PrivateKey_file(ctx, pki_.path("client.key").c_str(), SSL_FILETYPE_PEM);
    const int fd = connect_to(port_);
    SSL* ssl = SSL_new(ctx);
    SSL_CTX_free(ctx);
    SSL_set_fd(ssl, fd);
    std::string out, cipher;
    if (SSL_connect(ssl) == 1) {
      cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(ssl));
      const std::string req = "GET / HTTP/1.1\r\nHost: backend.local\r\nConnection: close\r\n\r\n";
      SSL_write(ssl, req.data(), static_cast<int>(req.size()));
      char buf[16384];
      for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    }
    ERR_clear_error();
    SSL_free(ssl);
    ::close(fd);
    return {out, cipher};
  }

  testing::Pki pki_;
  int port_ = 0;
  std::unique_ptr<ControlPlane> cp_;
  std::thread thread_;
};

TEST_F(MeshEngine, TheProxysRecordsGoToTheEngine) {
  start("bluefield3", "ENGINE", 256);
  const EngineCryptoTotals before = engine_crypto_totals();
  const auto [answer, cipher] = get("TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(cipher, "TLS_AES_128_GCM_SHA256");
  ASSERT_NE(answer.find("200 OK"), std::string::npos) << answer.substr(0, 200);
  EXPECT_EQ(answer.substr(answer.find("\r\n\r\n") + 4), std::string(256 << 10, 'x'));
  const EngineCryptoTotals after = engine_crypto_totals();
  // The server sealed the 256 KiB body (16 KiB records) and opened the request: both on the engine.
  EXPECT_GE(after.bytes - before.bytes, (256u << 10) + 40);
  EXPECT_GE(after.calls - before.calls, 17u);
  EXPECT_GT(after.hw_ns, before.hw_ns);
}

TEST_F(MeshEngine, AChaCha20ConnectionStaysOnTheCores) {
  start("bluefield3", "ENGINE", 64);
  const EngineCryptoTotals before = engine_crypto_totals();
  const auto [answer, cipher] = get("TLS_CHACHA20_POLY1305_SHA256");
  EXPECT_EQ(cipher, "TLS_CHACHA20_POLY1305_SHA256");
  EXPECT_EQ(answer.substr(answer.find("\r\n\r\n") + 4), std::string(64 << 10, 'x'));
  EXPECT_EQ(engine_crypto_totals().calls, before.calls);
}

TEST_F(MeshEngine, RecordCryptoOnTheCoresLeavesTheEngineIdle) {
  start("bluefield3", "CORES", 64);
  const EngineCryptoTotals before = engine_crypto_totals();
  const auto [answer, cipher] = get("TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(answer.substr(answer.find("\r\n\r\n") + 4), std::string(64 << 10, 'x'));
  EXPECT_EQ(engine_crypto_totals().calls, before.calls);
}

TEST_F(MeshEngine, AProxyAtHostSpeedRefusesTheEngine) {
  ProxyOptions o;  // host speed
  set_record_crypto_speed(o.dpu_speed);
  ControlPlane cp(o, std::vector<int>{}, 1);
  try {
    cp.start(config::parse_bootstrap(engine_config(pki_, free_port(), "ENGINE", 1)));
    ADD_FAILURE() << "started at host speed with record_crypto: ENGINE";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("record_crypto"), std::string::npos) << what;
    EXPECT_NE(what.find("not 'host'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dpukit::mesh
