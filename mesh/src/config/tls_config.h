// Envoy's TLS transport socket (envoy.transport_sockets.tls) as configured on
// a listener's filter chain (DownstreamTlsContext) and on a cluster
// (UpstreamTlsContext), the filter chain match that picks a chain by what the
// tls_inspector read from the ClientHello, and the secrets those contexts take
// from SDS: a file (sds_config: {path_config_source: {path}}), the ADS stream
// (sds_config: {ads: {}}) or a gRPC SecretDiscoveryService on a cluster
// (sds_config: {api_config_source: {api_type: GRPC, grpc_services: [{envoy_grpc:
// {cluster_name}}]}}), as istio-agent serves it on a Unix socket.
//
// Every file is read and checked when the configuration is parsed (PEM that
// parses, a key that matches its certificate), so a bad one refuses the
// start or the reload with the field's path; what was checked is what the
// data plane then uses (the bytes are kept here).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dpukit::mesh::config {

class At;

// A file as it was just before it was read (modification time in ns, size,
// inode): a watcher takes what differs from it as a new file.
struct FileStamp {
  int64_t mtime_ns = 0, size = 0;
  uint64_t inode = 0;
  bool operator==(const FileStamp&) const = default;
};
FileStamp file_stamp(const std::string& path);  // all zero when the file is not there

// envoy.config.core.v3.DataSource: filename, inline_string, inline_bytes or
// environment_variable; `bytes` holds what it read.
struct DataSource {
  std::string filename;  // empty unless given as a file
  std::string bytes;
  std::string where;  // the config path it was read at (for errors found later, e.g. by the SDS watcher)
  FileStamp read_at;  // a file's, just before it was read
  bool operator==(const DataSource& o) const { return filename == o.filename && bytes == o.bytes; }
};

// envoy.type.matcher.v3.StringMatcher, the forms a SAN matcher uses.
struct StringMatch {
  enum class Kind { kExact, kPrefix, kSuffix, kContains };
  Kind kind = Kind::kExact;
  std::string value;
  bool ignore_case = false;
  bool matches(std::string_view s) const;
  bool operator==(const StringMatch&) const = default;
};

// CertificateValidationContext.match_typed_subject_alt_names[i].
struct SanMatcher {
  enum class Type { kDns, kUri, kEmail, kIpAddress };
  Type san_type = Type::kUri;
  StringMatch matcher;
  bool operator==(const SanMatcher&) const = default;
};

// A Secret's tls_certificate (or common_tls_context.tls_certificates[i]).
struct TlsCertificate {
  DataSource certificate_chain, private_key;
  bool operator==(const TlsCertificate&) const = default;
};

// CertificateValidationContext.
struct CertificateValidation {
  std::optional<DataSource> trusted_ca;
  std::vector<SanMatcher> match_typed_subject_alt_names;
  bool allow_expired_certificate = false;
  bool operator==(const CertificateValidation&) const = default;
};

// SdsSecretConfig: the secret `name` and where it comes from. A file
// (`path`, a DiscoveryResponse-like list of one
// envoy.extensions.transport_sockets.tls.v3.Secret) is read when the
// configuration is parsed; a pushed one (ADS, gRPC) arrives later and is put
// into the TLS context then (tls/sds_secrets.h), as Envoy's SdsApi does.
struct SdsSecret {
  enum class Source { kFile, kAds, kGrpc };
  Source source = Source::kFile;
  std::string name, path;
  std::string cluster;  // kGrpc: the envoy_grpc cluster_name of the SecretDiscoveryService
  std::chrono::milliseconds initial_fetch_timeout{15000};  // Envoy's default; 0 waits forever
  std::string where;  // the config path of the sds_config
  bool pushed() const { return source != Source::kFile; }
  // The stream a pushed secret comes on: "ads" or "grpc:<cluster>".
  std::string stream() const { return source == Source::kAds ? "ads" : "grpc:" + cluster; }
  FileStamp read_at;  // a file source's, just before it was read
};

// TlsParameters; versions as OpenSSL's TLS1_x_VERSION, 0 for "Envoy's default".
struct TlsParams {
  int min_version = 0, max_version = 0;
  std::vector<std::string> cipher_suites;  // OpenSSL/BoringSSL names; TLS 1.3 suites are not configurable, as in Envoy
  std::vector<std::string> ecdh_curves;
};

// CommonTlsContext.
struct CommonTlsContext {
  TlsParams tls_params;
  std::vector<TlsCertificate> tls_certificates;
  std::optional<SdsSecret> tls_certificate_sds;  // tls_certificate_sds_secret_configs[0] (at most one)
  CertificateValidation validation;            // validation_context, or combined's default_validation_context
  std::optional<SdsSecret> validation_sds;       // validation_context_sds_secret_config (plain or combined)
  bool has_validation = false;                 // a validation context (inline or SDS) is configured
  std::vector<std::string> alpn_protocols;
  // Not Envoy's: dpukit.transport_sockets.crypto_engine wraps this context
  // with record_crypto: ENGINE (the records' AEAD on the BlueField's crypto
  // engine, tls/engine_crypto.h). `record_crypto_where` is its config path,
  // for the refusal when the proxy's dpu speed has no such engine.
  bool record_crypto_engine = false;
  std::string record_crypto_where;
};

struct DownstreamTlsContext {
  CommonTlsContext common;
  bool require_client_certificate = false;
  bool require_sni = false;
  bool disable_stateless_session_resumption = false;  // tickets are on by default, as in Envoy
};

struct UpstreamTlsContext {
  CommonTlsContext common;
  std::string sni;
};

// FilterChainMatch: the fields a node proxy matches on (the others are refused by name).
struct FilterChainMatch {
  std::vector<std::string> server_names;           // exact or "*.suffix"
  std::string transport_protocol;                  // "", "tls" or "raw_buffer"
  std::vector<std::string> application_protocols;  // ALPN offered by the client
};

// transport_socket: {name: envoy.transport_sockets.tls, typed_config: DownstreamTlsContext}, or
// dpukit.transport_sockets.crypto_engine wrapping it (as Envoy's tap socket wraps another):
//   {name: dpukit.transport_sockets.crypto_engine, typed_config: {"@type": kCryptoEngineType,
//    record_crypto: ENGINE | CORES, transport_socket: {name: envoy.transport_sockets.tls, ...}}}
DownstreamTlsContext parse_downstream_transport_socket(const At& at);
// A cluster's transport_socket: the same with an UpstreamTlsContext.
UpstreamTlsContext parse_upstream_transport_socket(const At& at);
inline constexpr std::string_view kCryptoEngineSocket = "dpukit.transport_sockets.crypto_engine";
inline constexpr std::string_view kCryptoEngineType = "type.googleapis.com/dpukit.mesh.v1.CryptoEngineTransportSocket";
FilterChainMatch parse_filter_chain_match(const At& at);
// listener_filters: only envoy.filters.listener.tls_inspector; true when it is there.
bool parse_listener_filters(const At& at);

// Reads an SDS file: the certificate (and key) or the validation context of
// secret `sds.name`. Throws ConfigError naming `sds.where` and the file's own
// path inside it. Used at parse time and by the watcher on each change.
TlsCertificate load_sds_certificate(const SdsSecret& sds);
CertificateValidation load_sds_validation(const SdsSecret& sds);

// An envoy.extensions.transport_sockets.tls.v3.Secret as SDS pushes it: a
// certificate with its key, or a validation context, checked as a file's is.
struct Secret {
  std::string name;
  std::optional<TlsCertificate> tls_certificate;
  std::optional<CertificateValidation> validation_context;
  bool operator==(const Secret&) const = default;
};
// Parses and checks one (proto-JSON, "@type" included); throws ConfigError at `at`.
Secret parse_secret(const At& at);
// A validation secret put into a context's: its trusted CA, and its SAN
// matchers unless the context has its own (combined_validation_context).
void take_validation(CertificateValidation& context, const CertificateValidation& secret);
// Puts the pushed secrets `find` has into `c` (a certificate, a trusted CA);
// those it does not have are returned ("<stream>/<name>"), and leave `c` without them.
using FindSecret = std::function<const Secret*(const SdsSecret&)>;
std::vector<std::string> take_pushed_secrets(CommonTlsContext& c, const FindSecret& find);

// Checks PEM: a certificate chain that parses and a key that matches it; a CA
// bundle with at least one certificate. Throw ConfigError at `where`.
void check_certificate(const TlsCertificate& cert, const std::string& where);
void check_trusted_ca(const DataSource& ca, const std::string& where);

// /config_dump: Envoy's field names; a private key is never shown, as in Envoy ("[redacted]").
nlohmann::json to_json(const DownstreamTlsContext& c);
nlohmann::json to_json(const UpstreamTlsContext& c);
nlohmann::json to_json(const FilterChainMatch& m);

}  // namespace dpukit::mesh::config
