#include "tls/tls_context.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/error.hpp>
#include <cstring>
#include <stdexcept>

#include "tls/engine_crypto.h"

namespace dpukit::mesh {

namespace {

// Envoy 1.40's defaults (TlsParameters, non-FIPS); OpenSSL has no
// equal-preference groups, so each group's first cipher comes first.
constexpr const char* kDefaultCiphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384";
constexpr const char* kDefaultCurves = "X25519:P-256";

// Why a handshake's verification failed, kept on the SSL for the counters.
enum class VerifyFailure : intptr_t { kNone = 0, kError, kSan };

// What the verify callback needs, owned with the SSL_CTX it was built for.
struct CtxData {
  std::vector<config::SanMatcher> sans;
  bool allow_expired = false;
  std::vector<unsigned char> alpn;  // a server's protocols, wire format
  std::shared_ptr<void> sessions;   // a client's TlsContext::Sessions
  int tickets = 0;                  // a server's TLS 1.3 tickets after a full handshake, sent with its first write
};

// OpenSSL's (and BoringSSL's) number of TLS 1.3 tickets after a full handshake; one after a resumption.
constexpr int kTls13Tickets = 2;

// require_sni: a ClientHello without a server name is refused, with the alert Envoy sends (handshake_failure).
int require_sni(SSL* ssl, int* alert, void*) {
  const unsigned char* ext = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len) == 1 && len > 0) return SSL_CLIENT_HELLO_SUCCESS;
  *alert = SSL_AD_HANDSHAKE_FAILURE;
  return SSL_CLIENT_HELLO_ERROR;
}

// The CtxData goes with the SSL_CTX itself, when OpenSSL frees it: a
// handshake begun before an SDS rotation holds the old SSL_CTX and still runs
// its callbacks (verification, ALPN) on it after the TlsContext let it go.
void free_ctx_data(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<CtxData*>(ptr); }
int ctx_index() {
  static const int idx = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_ctx_data);
  return idx;
}
int ssl_index() {
  static const int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return idx;
}
const CtxData& data_of(const SSL* ssl) {
  return *static_cast<const CtxData*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index()));
}

std::string openssl_reason() {
  unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

[[noreturn]] void refuse(const std::string& what) { throw std::runtime_error(what + ": " + openssl_reason()); }

std::vector<unsigned char> alpn_wire(const std::vector<std::string>& protocols) {
  std::vector<unsigned char> out;
  for (const auto& p : protocols) {
    out.push_back(static_cast<unsigned char>(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

bool san_matches(X509* cert, const std::vector<config::SanMatcher>& matchers) {
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return false;
  bool ok = false;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && !ok; ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    using T = config::SanMatcher::Type;
    T type;
    std::string value;
    if (n->type == GEN_DNS || n->type == GEN_URI || n->type == GEN_EMAIL) {
      type = n->type == GEN_DNS ? T::kDns : n->type == GEN_URI ? T::kUri : T::kEmail;
      const ASN1_IA5STRING* s = n->d.ia5;
      value.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)), static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (n->type == GEN_IPADD) {
      type = T::kIpAddress;
      const int len = ASN1_STRING_length(n->d.ip);
      char text[INET6_ADDRSTRLEN] = {};
      if (len == 4 || len == 16) inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(n->d.ip), text, sizeof text);
      value = text;
    } else {
      continue;
    }
    for (const auto& m : matchers) {
      if (m.san_type != type) continue;
      // A DNS SAN "*.example.com" matches the exact matcher of a name under it, as in Envoy.
      if (m.matcher.matches(value) ||
          (type == T::kDns && value.starts_with("*.") && m.matcher.kind == config::StringMatch::Kind::kExact &&
           m.matcher.value.find('.') != std::string::npos &&
           m.matcher.value.substr(m.matcher.value.find('.')) == value.substr(1))) {
        ok = true;
        break;
      }
    }
  }
  GENERAL_NAMES_free(names);
  return ok;
}

int verify_callback(int ok, X509_STORE_CTX* store) {
  SSL* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  const CtxData& data = data_of(ssl);
  const int err = X509_STORE_CTX_get_error(store);
  if (!ok) {
    if (data.allow_expired && (err == X509_V_ERR_CERT_HAS_EXPIRED || err == X509_V_ERR_CERT_NOT_YET_VALID)) return 1;
    SSL_set_ex_data(ssl, ssl_index(), reinterpret_cast<void*>(VerifyFailure::kError));
    return 0;
  }
  if (X509_STORE_CTX_get_error_depth(store) == 0 && !data.sans.empty() &&
      !san_matches(X509_STORE_CTX_get_current_cert(store), data.sans)) {
    // An error OpenSSL answers with certificate_unknown, the alert Envoy sends for a SAN it does not accept.
    X509_STORE_CTX_set_error(store, X509_V_ERR_PERMITTED_VIOLATION);
    SSL_set_ex_data(ssl, ssl_index(), reinterpret_cast<void*>(VerifyFailure::kSan));
    return 0;
  }
  return 1;
}

int alpn_select(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned inlen,
                void*) {
  const CtxData& data = data_of(ssl);
  if (data.alpn.empty()) return SSL_TLSEXT_ERR_NOACK;
  unsigned char* selected = nullptr;
  // The server's order first, as Envoy; no common protocol: no ALPN, the handshake goes on.
  if (SSL_select_next_proto(&selected, outlen, data.alpn.data(), static_cast<unsigned>(data.alpn.size()), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// Envoy's (BoringSSL's) names for the key exchange group and the signature algorithm.
std::string group_name(SSL* ssl) {
  switch (SSL_get_negotiated_group(ssl)) {
    case NID_X25519: return "X25519";
    case NID_X448: return "X448";
    case NID_X9_62_prime256v1: return "P-256";
    case NID_secp384r1: return "P-384";
    case NID_secp521r1: return "P-521";
    default: return "";
  }
}

std::string sigalg_name(SSL* ssl, bool server) {
  int type = NID_undef, hash = NID_undef;
  if (server ? !SSL_get_signature_type_nid(ssl, &type) : !SSL_get_peer_signature_type_nid(ssl, &type)) return "";
  if (server ? !SSL_get_signature_nid(ssl, &hash) : !SSL_get_peer_signature_nid(ssl, &hash)) return "";
  const char* h = hash == NID_sha256 ? "sha256" : hash == NID_sha384 ? "sha384" : hash == NID_sha512 ? "sha512" : nullptr;
  if (type == NID_ED25519) return "ed25519";
  if (h == nullptr) return "";
  if (type == EVP_PKEY_RSA_PSS) return std::string("rsa_pss_rsae_") + h;
  if (type == EVP_PKEY_RSA) return std::string("rsa_pkcs1_") + h;
  if (type == EVP_PKEY_EC) {
    const char* curve = hash == NID_sha256 ? "secp256r1" : hash == NID_sha384 ? "secp384r1" : "secp521r1";
    return std::string("ecdsa_") + curve + "_" + h;
  }
  return "";
}

}  // namespace

struct TlsContext::Sessions {
  std::mutex mu;
  SSL_SESSION* last = nullptr;  // the newest session a server gave this cluster
  ~Sessions() { SSL_SESSION_free(last); }
};

namespace {
// A client's new session (a TLS 1.3 ticket arrives after the handshake): the cluster's next connection resumes it.
int new_session(SSL* ssl, SSL_SESSION* session) {
  const CtxData& data = data_of(ssl);
  if (!data.sessions) return 0;
  auto* s = static_cast<TlsContext::Sessions*>(data.sessions.get());
  std::lock_guard lock(s->mu);
  SSL_SESSION_free(s->last);
  s->last = session;
  return 1;  // the reference is ours now
}
}  // namespace

std::shared_ptr<TlsContext> TlsContext::server(const config::DownstreamTlsContext& cfg, std::vector<TlsStats*> stats,
                                               TlsNamedCounters& named) {
  std::shared_ptr<TlsContext> c(new TlsContext(true, cfg.common, std::move(stats), named));
  c->require_client_certificate_ = cfg.require_client_certificate;
  c->disable_tickets_ = cfg.disable_stateless_session_resumption;
  c->require_sni_ = cfg.require_sni;
  c->install(c->build(c->cfg_));
  return c;
}

std::shared_ptr<TlsContext> TlsContext::client(const config::UpstreamTlsContext& cfg, std::vector<TlsStats*> stats,
                                               TlsNamedCounters& named) {
  std::shared_ptr<TlsContext> c(new TlsContext(false, cfg.common, std::move(stats), named));
  c->sni_ = cfg.sni;
  c->alpn_ = cfg.common.alpn_protocols;
  c->sessions_ = std::make_shared<Sessions>();
  c->install(c->build(c->cfg_));
  return c;
}

std::shared_ptr<SSL_CTX> TlsContext::build(const config::CommonTlsContext& cfg) const {
  // Record crypto on the engine: the context is made in the engine's library
  // context, whose provider the property query prefers for the engine's
  // ciphers (tls/engine_crypto.h); everything else is the default provider's.
  OSSL_LIB_CTX* libctx = nullptr;
  const char* propq = nullptr;
  if (cfg.record_crypto_engine) {
    try {
      record_crypto_engine(record_crypto_speed());
      libctx = engine_libctx();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(cfg.record_crypto_where + ": " + e.what());
    }
    propq = kEngineQuery;
  }
  SSL_CTX* raw = SSL_CTX_new_ex(libctx, propq, server_ ? TLS_server_method() : TLS_client_method());
  if (raw == nullptr) refuse("SSL_CTX_new");
  std::shared_ptr<SSL_CTX> ctx(raw, SSL_CTX_free);
  auto* data = new CtxData;
  if (SSL_CTX_set_ex_data(raw, ctx_index(), data) != 1) {
    delete data;
    refuse("SSL_CTX_set_ex_data");
  }
  // A peer gets the configured certificate_chain, as from Envoy: without
  // this OpenSSL builds the chain from the trust store on every handshake
  // (an X509_verify_cert of our own certificate) and sends the root too,
  // which the peer then parses for nothing.
  SSL_CTX_set_mode(raw, SSL_MODE_NO_AUTO_CHAIN);
  const config::TlsParams& p = cfg.tls_params;
  // Envoy's defaults: at least TLS 1.2; at most 1.3 for a server, 1.2 for a client.
  SSL_CTX_set_min_proto_version(raw, p.min_version ? p.min_version : TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(raw, p.max_version ? p.max_version : server_ ? TLS1_3_VERSION : TLS1_2_VERSION);
  if (p.min_version && p.min_version < TLS1_2_VERSION) SSL_CTX_set_security_level(raw, 0);  // TLS 1.0/1.1 asked for
  std::string ciphers;
  for (const auto& s : p.cipher_suites) ciphers += (ciphers.empty() ? "" : ":") + s;
  if (SSL_CTX_set_cipher_list(raw, ciphers.empty() ? kDefaultCiphers : ciphers.c_str()) != 1) refuse("cipher_suites");
  std::string curves;
  for (const auto& s : p.ecdh_curves) curves += (curves.empty() ? "" : ":") + s;
  if (SSL_CTX_set1_groups_list(raw, curves.empty() ? kDefaultCurves : curves.c_str()) != 1) refuse("ecdh_curves");

  if (!cfg.tls_certificates.empty()) {
    const config::TlsCertificate& cert = cfg.tls_certificates[0];
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(cert.certificate_chain.bytes.data(), static_cast<int>(cert.certificate_chain.bytes.size())),
        BIO_free);
    X509* leaf = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (leaf == nullptr || SSL_CTX_use_certificate(raw, leaf) != 1) refuse("certificate_chain");
    X509_free(leaf);
    while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
      if (SSL_CTX_add0_chain_cert(raw, x) != 1) refuse("certificate_chain");
    ERR_clear_error();
    std::unique_ptr<BIO, decltype(&BIO_free)> kbio(
        BIO_new_mem_buf(cert.private_key.bytes.data(), static_cast<int>(cert.private_key.bytes.size())), BIO_free);
    EVP_PKEY* key = PEM_read_bio_PrivateKey_ex(kbio.get(), nullptr, nullptr, nullptr, libctx, propq);
    if (key == nullptr || SSL_CTX_use_PrivateKey(raw, key) != 1) refuse("private_key");
    EVP_PKEY_free(key);
    if (SSL_CTX_check_private_key(raw) != 1) refuse("private_key");
  }

  const config::CertificateValidation& v = cfg.validation;
  data->sans = v.match_typed_subject_alt_names;
  data->allow_expired = v.allow_expired_certificate;
  if (v.trusted_ca) {
    X509_STORE* store = SSL_CTX_get_cert_store(raw);
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(v.trusted_ca->bytes.data(), static_cast<int>(v.trusted_ca->bytes.size())), BIO_free);
    STACK_OF(X509_NAME)* names = server_ ? sk_X509_NAME_new_null() : nullptr;
    while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, x);
      if (names) sk_X509_NAME_push(names, X509_NAME_dup(X509_get_subject_name(x)));
      X509_free(x);
    }
    ERR_clear_error();
    // Envoy sets X509_V_FLAG_PARTIAL_CHAIN: an intermediate in trusted_ca is a trust anchor.
    X509_STORE_set_flags(store, X509_V_FLAG_PARTIAL_CHAIN);
    if (names) SSL_CTX_set_client_CA_list(raw, names);
    int mode = SSL_VERIFY_PEER;
    if (server_ && require_client_certificate_) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(raw, mode, verify_callback);
  } else {
    SSL_CTX_set_verify(raw, SSL_VERIFY_NONE, nullptr);
  }

  if (server_) {
    data->alpn = alpn_wire(cfg.alpn_protocols);
    SSL_CTX_set_alpn_select_cb(raw, alpn_select, nullptr);
    // Resumption (tickets, on by default as in Envoy) needs a session context
    // when client certificates are checked: one per configuration.
    unsigned char id[SSL_MAX_SID_CTX_LENGTH];
    unsigned len = 0;
    const std::string seed = (cfg.tls_certificates.empty() ? "" : cfg.tls_certificates[0].certificate_chain.bytes) +
                             (v.trusted_ca ? v.trusted_ca->bytes : "");
    EVP_Digest(seed.data(), seed.size(), id, &len, EVP_sha256(), nullptr);
    SSL_CTX_set_session_id_context(raw, id, std::min<unsigned>(len, SSL_MAX_SID_CTX_LENGTH));
    if (disable_tickets_) SSL_CTX_set_options(raw, SSL_OP_NO_TICKET);
    // TLS 1.3 tickets go out with the connection's first write, as Envoy's
    // (BoringSSL holds them until then). Made then too, they cost nothing
    // on a connection that never answers; in OpenSSL 3.0 each one re-parses
    // the peer's certificate (i2d/d2i of the session).
    SSL_CTX_set_num_tickets(raw, 0);
    data->tickets = kTls13Tickets;
    if (require_sni_) SSL_CTX_set_client_hello_cb(raw, require_sni, nullptr);
  } else {
    data->sessions = sessions_;
    SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(raw, new_session);
  }
  return ctx;
}

void TlsContext::install(std::shared_ptr<SSL_CTX> ctx, std::optional<config::CommonTlsContext> cfg) {
  std::lock_guard lock(mu_);
  if (cfg) cfg_ = std::move(*cfg);
  // A pushed secret not yet here: no certificate, or no CA to verify with.
  const bool certificate = !(sds_certificate_ && sds_certificate_->pushed()) || !cfg_.tls_certificates.empty();
  const bool validation = !(sds_validation_ && sds_validation_->pushed()) || cfg_.validation.trusted_ca.has_value();
  ready_.store(certificate && validation, std::memory_order_release);
  if (ctx_ && server_) {
    // The ticket keys carry over: a ticket from before a rotation still resumes.
    unsigned char keys[80];
    if (SSL_CTX_get_tlsext_ticket_keys(ctx_.get(), keys, sizeof keys) == 1)
      SSL_CTX_set_tlsext_ticket_keys(ctx.get(), keys, sizeof keys);
  }
  ctx_ = std::move(ctx);
}

std::shared_ptr<SSL_CTX> TlsContext::current() const {
  std::lock_guard lock(mu_);
  return ctx_;
}

void TlsContext::update_certificate(const config::TlsCertificate& cert) {
  config::CommonTlsContext cfg = config();
  cfg.tls_certificates.assign(1, cert);
  std::shared_ptr<SSL_CTX> ctx = build(cfg);  // before cfg moves on
  install(std::move(ctx), std::move(cfg));
  stats_[0]->ssl_context_update_by_sds.inc();
}

void TlsContext::update_validation(const config::CertificateValidation& validation) {
  config::CommonTlsContext cfg = config();
  cfg.validation.trusted_ca = validation.trusted_ca;
  if (!validation.match_typed_subject_alt_names.empty())
    cfg.validation.match_typed_subject_alt_names = validation.match_typed_subject_alt_names;
  std::shared_ptr<SSL_CTX> ctx = build(cfg);  // before cfg moves on
  install(std::move(ctx), std::move(cfg));
  stats_[0]->ssl_context_update_by_sds.inc();
}

config::CommonTlsContext TlsContext::config() const {
  std::lock_guard lock(mu_);
  return cfg_;
}

SSL* TlsContext::new_ssl(std::string_view alpn_default) const {
  std::shared_ptr<SSL_CTX> ctx = current();
  SSL* ssl = SSL_new(ctx.get());  // holds its own reference to the SSL_CTX
  if (ssl == nullptr) refuse("SSL_new");
  if (server_) {
    SSL_set_accept_state(ssl);
    return ssl;
  }
  SSL_set_connect_state(ssl);
  if (!sni_.empty()) SSL_set_tlsext_host_name(ssl, sni_.c_str());
  std::vector<unsigned char> alpn = alpn_wire(alpn_);
  if (alpn.empty() && !alpn_default.empty()) alpn = alpn_wire({std::string(alpn_default)});
  if (!alpn.empty()) SSL_set_alpn_protos(ssl, alpn.data(), static_cast<unsigned>(alpn.size()));
  std::lock_guard lock(sessions_->mu);
  if (sessions_->last) SSL_set_session(ssl, sessions_->last);
  return ssl;
}

void send_deferred_tickets(SSL* ssl) {
  if (!SSL_is_server(ssl) || SSL_version(ssl) != TLS1_3_VERSION || !SSL_is_init_finished(ssl)) return;
  // An SSL_CTX not made by a TlsContext sends its tickets itself.
  const auto* data = static_cast<const CtxData*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index()));
  if (data == nullptr || data->tickets == 0) return;
  const int n = SSL_session_reused(ssl) ? 1 : data->tickets;
  for (int i = 0; i < n; ++i)
    if (SSL_new_session_ticket(ssl) != 1) break;
}

void TlsContext::count_handshake(SSL* ssl, unsigned worker, const boost::system::error_code& ec) const {
  TlsStats& s = *stats_[worker];
  if (ec) {
    // A peer that went away mid-handshake is not a TLS failure (Envoy counts only those).
    if (ec.category() != boost::asio::error::get_ssl_category()) return;
    s.connection_error.inc();
    const auto why = static_cast<VerifyFailure>(reinterpret_cast<intptr_t>(SSL_get_ex_data(ssl, ssl_index())));
    if (why == VerifyFailure::kSan) s.fail_verify_san.inc();
    else if (why == VerifyFailure::kError) s.fail_verify_error.inc();
    else if (ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE)
      s.fail_verify_no_cert.inc();
    return;
  }
  s.handshake.inc();
  if (SSL_session_reused(ssl)) s.session_reused.inc();
  X509* peer = SSL_get0_peer_certificate(ssl);
  if (peer == nullptr) s.no_certificate.inc();
  named_.inc("versions", SSL_get_version(ssl));
  named_.inc("ciphers", SSL_CIPHER_get_name(SSL_get_current_cipher(ssl)));
  if (std::string g = group_name(ssl); !g.empty()) named_.inc("curves", g);
  if (std::string a = sigalg_name(ssl, server_); !a.empty()) named_.inc("sigalgs", a);
}

}  // namespace dpukit::mesh
