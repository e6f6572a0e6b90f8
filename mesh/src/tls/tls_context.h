// A TLS context as Envoy's transport socket factory holds it: the SSL_CTX
// built from a DownstreamTlsContext (a filter chain's) or an
// UpstreamTlsContext (a cluster's), its verification (trusted CA, SAN
// matchers), and Envoy's ssl.* counters. The SSL_CTX is replaced whole when
// an SDS secret changes (a file, or a push over ADS or gRPC): new handshakes
// take the new one, and connections made before keep theirs (OpenSSL counts
// the references). Until a pushed secret first arrives the context is not
// ready: Envoy's NotReadySslSocket, which closes the connection and counts
// {downstream,upstream}_context_secrets_not_ready.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
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

  // SDS: where the certificate and the validation context come from, if from SDS.
  const std::optional<config::SdsSecret>& certificate_sds() const { return sds_certificate_; }
  const std::optional<config::SdsSecret>& validation_sds() const { return sds_validation_; }
  // Every secret it takes by push has arrived. When not, count_not_ready()
  // and close the connection without a handshake.
  bool secrets_ready() const { return ready_.load(std::memory_order_acquire); }
  void count_not_ready(unsigned worker) const { stats_[worker]->context_secrets_not_ready.inc(); }
  // A new SSL_CTX with this certificate (or trusted CA): throws, keeping the
  // current one, when OpenSSL refuses it. The session ticket keys carry over,
  // so tickets issued before still resume.
  void update_certificate(const config::TlsCertificate& cert);
  void update_validation(const config::CertificateValidation& validation);
  // What it runs with now (the secrets in it included).
  config::CommonTlsContext config() const;

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
  std::shared_ptr<SSL_CTX> current() const;

  bool server_;
  std::optional<config::SdsSecret> sds_certificate_, sds_validation_;
  std::atomic<bool> ready_{true};
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
