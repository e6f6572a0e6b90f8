// A TLS context as Envoy's transport socket factory holds it: the SSL_CTX
// built from a DownstreamTlsContext (a filter chain's) or an
// UpstreamTlsContext (a cluster's), its verification (trusted CA, SAN
// matchers), and Envoy's ssl.* counters. The SSL_CTX is replaced whole when
// an SDS file changes: new handshakes take the new one, and connections made
// before keep theirs (OpenSSL counts the references).
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/error_code.hpp>

#include "config/tls_config.h"
#include "stats.h"

namespace dpukit::mesh {

// Queues a server connection's TLS 1.3 session tickets (its TlsContext
// holds them back from the handshake): call once, before the connection's
// first SSL_write, which sends them ahead of its records.
void send_deferred_tickets(SSL* ssl);

class TlsContext {
 public:
  // Throws std::runtime_error (OpenSSL's reason) when OpenSSL refuses what the parser accepted.
  static std::shared_ptr<TlsContext> server(const config::DownstreamTlsContext& cfg, std::vector<TlsStats*> stats,
                                            TlsNamedCounters& named);
  static std::shared_ptr<TlsContext> client(const config::UpstreamTlsContext& cfg, std::vector<TlsStats*> stats,
                                            TlsNamedCounters& named);

  bool is_server() const { return server_; }
  // A new connection's SSL from the current SSL_CTX. A client's offers the
  // configured ALPN, else `alpn_default` (Envoy's HTTP pools offer h2 or
  // http/1.1 themselves); it carries the SNI and the cluster's last session.
  SSL* new_ssl(std::string_view alpn_default = {}) const;
  // Counts a handshake's outcome in Envoy's ssl.* counters (`ec` from TlsStream::async_handshake).
  void count_handshake(SSL* ssl, unsigned worker, const boost::system::error_code& ec) const;

  // SDS: where the certificate and the validation context come from, if from files.
  const std::optional<config::SdsFile>& certificate_sds() const { return sds_certificate_; }
  const std::optional<config::SdsFile>& validation_sds() const { return sds_validation_; }
  // A new SSL_CTX with this certificate (or trusted CA): throws, keeping the
  // current one, when OpenSSL refuses it. The session ticket keys carry over,
  // so tickets issued before still resume.
  void update_certificate(const config::TlsCertificate& cert);
  void update_validation(const config::CertificateValidation& validation);

 struct Sessions;  // a client's last session (per cluster)

 private:
  TlsContext(bool server, config::CommonTlsContext cfg, std::vector<TlsStats*> stats, TlsNamedCounters& named)
      : server_(server),
        sds_certificate_(cfg.tls_certificate_sds),
        sds_validation_(cfg.validation_sds),
        cfg_(std::move(cfg)),
        stats_(std::move(stats)),
        named_(named) {}
  std::shared_ptr<SSL_CTX> build(const config::CommonTlsContext& cfg) const;
  void install(std::shared_ptr<SSL_CTX> ctx, std::optional<config::CommonTlsContext> cfg = std::nullopt);
  config::CommonTlsContext config() const;
  std::shared_ptr<SSL_CTX> current() const;

  bool server_;
  std::optional<config::SdsFile> sds_certificate_, sds_validation_;
  config::CommonTlsContext cfg_;  // tls_certificates[0] and validation change with SDS
  bool require_client_certificate_ = false, disable_tickets_ = false, require_sni_ = false;
  std::string sni_;
  std::vector<std::string> alpn_;  // a client's offer
  std::vector<TlsStats*> stats_;
  TlsNamedCounters& named_;
  std::shared_ptr<Sessions> sessions_;
  mutable std::mutex mu_;  // ctx_ (swapped by the control plane, read by workers) and cfg_ on update
  std::shared_ptr<SSL_CTX> ctx_;
};

}  // namespace dpukit::mesh
