// Envoy's TLS transport socket configuration -> tls_config.h. Files are read
// and their PEM checked with OpenSSL here, so that `dpukit-mesh validate`, a
// start and a reload refuse a bad certificate by its path.
#include "config/tls_config.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "config/checked_yaml.h"
#include "config/xds_config.h"

namespace dpukit::mesh::config {
namespace {

constexpr std::string_view kTlsSocket = "envoy.transport_sockets.tls";
constexpr std::string_view kDownstreamType =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
constexpr std::string_view kUpstreamType =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
constexpr std::string_view kSecretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";
constexpr std::string_view kTlsInspectorType =
    "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";

// OpenSSL's reason for the last failure (and clears the queue).
std::string ssl_reason() {
  unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string read_file(const std::string& path, const At& at) {
  std::ifstream in(path, std::ios::binary);
  if (!in) at.fail("cannot read " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

DataSource parse_data_source(const At& at) {
  const Fields f = at.fields("envoy.config.core.v3.DataSource", {"filename", "inline_string", "inline_bytes",
                                                                  "environment_variable"});
  DataSource d;
  d.where = at.path();
  const std::string_view kind = f.exactly_one_of({"filename", "inline_string", "inline_bytes", "environment_variable"});
  if (kind == "filename") {
    d.filename = f["filename"].nonempty_str();
    d.read_at = file_stamp(d.filename);  // before it is read: a change after this is seen by the watcher
    d.bytes = read_file(d.filename, f["filename"]);
    d.where = f["filename"].path();
  } else if (kind == "inline_string") {
    d.bytes = f["inline_string"].str();
  } else if (kind == "inline_bytes") {  // base64, as proto-JSON writes bytes
    const std::string b64 = f["inline_bytes"].str();
    std::string out(b64.size() / 4 * 3 + 3, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
    if (n < 0) f["inline_bytes"].fail("not base64");
    n -= static_cast<int>(std::count(b64.end() - std::min<size_t>(2, b64.size()), b64.end(), '='));
    out.resize(static_cast<size_t>(n));
    d.bytes = std::move(out);
  } else {
    const std::string name = f["environment_variable"].nonempty_str();
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) f["environment_variable"].fail("environment variable " + name + " is not set");
    d.bytes = v;
  }
  if (d.bytes.empty()) at.fail("empty");
  return d;
}

StringMatch parse_string_matcher(const At& at) {
  const Fields f =
      at.fields("envoy.type.matcher.v3.StringMatcher", {"exact", "prefix", "suffix", "contains", "ignore_case"});
  StringMatch m;
  using K = StringMatch::Kind;
  const std::string_view kind = f.exactly_one_of({"exact", "prefix", "suffix", "contains"});
  m.kind = kind == "exact" ? K::kExact : kind == "prefix" ? K::kPrefix : kind == "suffix" ? K::kSuffix : K::kContains;
  m.value = kind == "exact" ? f[kind].str() : f[kind].nonempty_str();
  m.ignore_case = f["ignore_case"].boolean_or(false);
  return m;
}

SanMatcher parse_san_matcher(const At& at) {
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.SubjectAltNameMatcher", {"san_type", "matcher"});
  SanMatcher m;
  using T = SanMatcher::Type;
  m.san_type = f.required("san_type").choice<T>(
      {{"DNS", T::kDns}, {"URI", T::kUri}, {"EMAIL", T::kEmail}, {"IP_ADDRESS", T::kIpAddress}}, {"OTHER_NAME"});
  m.matcher = parse_string_matcher(f.required("matcher"));
  return m;
}

CertificateValidation parse_validation_context(const At& at) {
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.CertificateValidationContext",
                             {"trusted_ca", "match_typed_subject_alt_names", "allow_expired_certificate"});
  CertificateValidation v;
  if (f.has("trusted_ca")) {
    v.trusted_ca = parse_data_source(f["trusted_ca"]);
    check_trusted_ca(*v.trusted_ca, v.trusted_ca->where);
  }
  if (f.has("match_typed_subject_alt_names"))
    for (const At& item : f["match_typed_subject_alt_names"].items())
      v.match_typed_subject_alt_names.push_back(parse_san_matcher(item));
  v.allow_expired_certificate = f["allow_expired_certificate"].boolean_or(false);
  return v;
}

TlsCertificate parse_tls_certificate(const At& at) {
  const Fields f =
      at.fields("envoy.extensions.transport_sockets.tls.v3.TlsCertificate", {"certificate_chain", "private_key"});
  TlsCertificate c;
  c.certificate_chain = parse_data_source(f.required("certificate_chain"));
  c.private_key = parse_data_source(f.required("private_key"));
  check_certificate(c, at.path());
  return c;
}

SdsSecret parse_sds_secret_config(const At& at) {
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.SdsSecretConfig", {"name", "sds_config"});
  SdsSecret s;
  s.name = f.required("name").nonempty_str();
  const At cs_at = f.required("sds_config");
  const Fields cs = cs_at.fields("envoy.config.core.v3.ConfigSource", {"path_config_source", "path", "ads", "api_config_source",
                                                                       "resource_api_version", "initial_fetch_timeout"});
  const std::string_view kind = cs.exactly_one_of({"path_config_source", "path", "ads", "api_config_source"});
  if (cs.has("resource_api_version")) cs["resource_api_version"].choice<int>({{"V3", 3}}, {"AUTO", "V2"});
  if (cs.has("initial_fetch_timeout")) s.initial_fetch_timeout = cs["initial_fetch_timeout"].duration();
  s.where = cs[kind].path();
  if (kind == "ads") {
    cs["ads"].fields("envoy.config.core.v3.AggregatedConfigSource", {});
    s.source = SdsSecret::Source::kAds;
    return s;
  }
  if (kind == "api_config_source") {
    const GrpcApiSource api = parse_grpc_api_source(cs["api_config_source"], false);
    s.source = SdsSecret::Source::kGrpc;
    s.cluster = api.cluster;
    s.where = api.cluster_where;
    return s;
  }
  if (kind == "path") {
    s.path = cs["path"].nonempty_str();
  } else {
    const Fields pcs = cs["path_config_source"].fields("envoy.config.core.v3.PathConfigSource", {"path"});
    s.path = pcs.required("path").nonempty_str();
    s.where = pcs["path"].path();
  }
  s.read_at = file_stamp(s.path);  // before the caller reads it: a change after this is seen by the watcher
  return s;
}

int parse_version(const At& at) {
  return at.choice<int>({{"TLS_AUTO", 0},
                         {"TLSv1_0", TLS1_VERSION},
                         {"TLSv1_1", TLS1_1_VERSION},
                         {"TLSv1_2", TLS1_2_VERSION},
                         {"TLSv1_3", TLS1_3_VERSION}},
                        {});
}

TlsParams parse_tls_params(const At& at) {
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.TlsParameters",
                             {"tls_minimum_protocol_version", "tls_maximum_protocol_version", "cipher_suites",
                              "ecdh_curves"});
  TlsParams p;
  if (f.has("tls_minimum_protocol_version")) p.min_version = parse_version(f["tls_minimum_protocol_version"]);
  if (f.has("tls_maximum_protocol_version")) p.max_version = parse_version(f["tls_maximum_protocol_version"]);
  if (p.min_version && p.max_version && p.min_version > p.max_version)
    f["tls_minimum_protocol_version"].fail("greater than tls_maximum_protocol_version");
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  if (f.has("cipher_suites")) {
    for (const At& item : f["cipher_suites"].items()) {
      // BoringSSL's equal-preference groups "[A|B]": OpenSSL has none, so A then B.
      std::string s = item.nonempty_str();
      s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '[' || c == ']'; }), s.end());
      std::replace(s.begin(), s.end(), '|', ':');
      // Each name on its own: OpenSSL takes a list that has one it knows, BoringSSL (Envoy) refuses any it does not.
      for (size_t start = 0; start <= s.size();) {
        const size_t end = std::min(s.find(':', start), s.size());
        const std::string one = s.substr(start, end - start);
        if (SSL_CTX_set_cipher_list(ctx.get(), one.c_str()) != 1) {
          ERR_clear_error();
          item.fail("unknown cipher suite '" + one + "'");
        }
        start = end + 1;
      }
      p.cipher_suites.push_back(s);
    }
  }
  if (f.has("ecdh_curves")) {
    for (const At& item : f["ecdh_curves"].items()) {
      const std::string c = item.nonempty_str();
      if (SSL_CTX_set1_groups_list(ctx.get(), c.c_str()) != 1) {
        ERR_clear_error();
        item.fail("unknown curve '" + c + "'");
      }
      p.ecdh_curves.push_back(c);
    }
  }
  return p;
}

CommonTlsContext parse_common_tls_context(const At& at) {
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.CommonTlsContext",
                             {"tls_params", "tls_certificates", "tls_certificate_sds_secret_configs",
                              "validation_context", "validation_context_sds_secret_config",
                              "combined_validation_context", "alpn_protocols"});
  CommonTlsContext c;
  if (f.has("tls_params")) c.tls_params = parse_tls_params(f["tls_params"]);
  if (f.has("tls_certificates") && f.has("tls_certificate_sds_secret_configs"))
    f.self().fail("tls_certificates and tls_certificate_sds_secret_configs both given (only one is allowed)");
  if (f.has("tls_certificates")) {
    const auto items = f["tls_certificates"].items();
    // Envoy picks among several by SNI and key type; a node proxy has one identity.
    if (items.size() > 1) f["tls_certificates"].fail("at most one certificate is supported by dpukit-mesh");
    for (const At& item : items) c.tls_certificates.push_back(parse_tls_certificate(item));
  }
  if (f.has("tls_certificate_sds_secret_configs")) {
    const auto items = f["tls_certificate_sds_secret_configs"].items();
    if (items.size() != 1) f["tls_certificate_sds_secret_configs"].fail("exactly one secret is supported by dpukit-mesh");
    c.tls_certificate_sds = parse_sds_secret_config(items[0]);
    if (!c.tls_certificate_sds->pushed()) c.tls_certificates.push_back(load_sds_certificate(*c.tls_certificate_sds));
  }
  const auto kind =
      f.one_of({"validation_context", "validation_context_sds_secret_config", "combined_validation_context"});
  c.has_validation = kind.has_value();
  if (kind == "validation_context") {
    c.validation = parse_validation_context(f["validation_context"]);
  } else if (kind == "validation_context_sds_secret_config") {
    c.validation_sds = parse_sds_secret_config(f["validation_context_sds_secret_config"]);
  } else if (kind == "combined_validation_context") {
    const Fields cv =
        f["combined_validation_context"].fields("envoy.extensions.transport_sockets.tls.v3.CommonTlsContext.CombinedCertificateValidationContext",
                                                {"default_validation_context", "validation_context_sds_secret_config"});
    c.validation = parse_validation_context(cv.required("default_validation_context"));
    c.validation_sds = parse_sds_secret_config(cv.required("validation_context_sds_secret_config"));
  }
  if (c.validation_sds && !c.validation_sds->pushed()) take_validation(c.validation, load_sds_validation(*c.validation_sds));
  if (f.has("alpn_protocols")) c.alpn_protocols = f["alpn_protocols"].strings();
  for (const std::string& p : c.alpn_protocols)
    if (p.empty() || p.size() > 255) f["alpn_protocols"].fail("an ALPN protocol is 1 to 255 bytes");
  return c;
}

// Where a crypto_engine socket wrapping the TLS socket puts its choice.
struct RecordCrypto {
  bool engine = false;
  std::string where;
};

// transport_socket: {name, typed_config}, the typed_config of `type`; or
// dpukit.transport_sockets.crypto_engine wrapping that one (its choice in `rc`).
Fields tls_typed_config(const At& at, std::string_view message, std::string_view type,
                        std::initializer_list<std::string_view> known, RecordCrypto* rc) {
  const Fields ts = at.fields("envoy.config.core.v3.TransportSocket", {"name", "typed_config"});
  const At name = ts.required("name");
  if (name.str() == kCryptoEngineSocket && rc != nullptr) {
    const Fields w = ts.required("typed_config")
                         .fields("dpukit.mesh.v1.CryptoEngineTransportSocket", {"@type", "record_crypto", "transport_socket"});
    const At type_at = w.required("@type");
    if (type_at.str() != kCryptoEngineType)
      type_at.fail("expected " + std::string(kCryptoEngineType) + ", got '" + type_at.str() + "'");
    const At choice = w.required("record_crypto");
    rc->engine = choice.choice<bool>({{"ENGINE", true}, {"CORES", false}}, {});
    rc->where = choice.path();
    return tls_typed_config(w.required("transport_socket"), message, type, known, nullptr);
  }
  if (name.str() != kTlsSocket)
    name.fail(name.str() + " is not supported by dpukit-mesh (only " + std::string(kTlsSocket) +
              (rc != nullptr ? ")" : " inside " + std::string(kCryptoEngineSocket) + ")"));
  const Fields f = ts.required("typed_config").fields(message, known);
  const At type_at = f.required("@type");
  if (type_at.str() != type) type_at.fail("expected " + std::string(type) + ", got '" + type_at.str() + "'");
  return f;
}

// The one Secret of an SDS file, named `sds.name` (Envoy's SdsApi checks both).
Fields load_secret(const SdsSecret& sds, bool certificate, YAML::Node& root) {
  const At where(YAML::Node(), sds.where, 0);
  std::ifstream in(sds.path);
  if (!in) where.fail("cannot read " + sds.path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    where.fail(sds.path + " (line " + std::to_string(e.mark.line + 1) + "): YAML syntax error: " + e.msg);
  }
  const At file(root, sds.where + "(" + sds.path + ")", 0);
  const Fields dr = file.fields("envoy.service.discovery.v3.DiscoveryResponse", {"resources", "version_info", "type_url"});
  if (dr.has("type_url") && dr["type_url"].str() != kSecretType)
    dr["type_url"].fail("expected " + std::string(kSecretType));
  if (dr.has("version_info")) dr["version_info"].str();
  const auto resources = dr.required("resources").items();
  if (resources.size() != 1)
    dr["resources"].fail("expected exactly one secret, got " + std::to_string(resources.size()));
  const Fields s = certificate
                       ? resources[0].fields("envoy.extensions.transport_sockets.tls.v3.Secret", {"@type", "name", "tls_certificate"})
                       : resources[0].fields("envoy.extensions.transport_sockets.tls.v3.Secret", {"@type", "name", "validation_context"});
  const At type_at = s.required("@type");
  if (type_at.str() != kSecretType) type_at.fail("expected " + std::string(kSecretType) + ", got '" + type_at.str() + "'");
  if (s.required("name").str() != sds.name)
    s["name"].fail("unexpected secret '" + s["name"].str() + "' (expecting " + sds.name + ")");
  return s;
}

bool pem_certs(const std::string& pem, std::vector<X509*>* out) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  size_t n = 0;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    ++n;
    if (out) out->push_back(x);
    else X509_free(x);
  }
  const unsigned long e = ERR_peek_last_error();
  // The end of the data is how the loop stops; anything else is a fault.
  if (e && ERR_GET_REASON(e) == PEM_R_NO_START_LINE && n > 0) ERR_clear_error();
  return n > 0 && ERR_peek_error() == 0;
}

}  // namespace

FileStamp file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, static_cast<int64_t>(st.st_size),
          static_cast<uint64_t>(st.st_ino)};
}

bool StringMatch::matches(std::string_view s) const {
  std::string a(s), b(value);
  if (ignore_case) {
    for (char& c : a) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  switch (kind) {
    case Kind::kExact: return a == b;
    case Kind::kPrefix: return a.starts_with(b);
    case Kind::kSuffix: return a.ends_with(b);
    case Kind::kContains: return a.find(b) != std::string::npos;
  }
  return false;
}

void check_certificate(const TlsCertificate& cert, const std::string& where) {
  const At at(YAML::Node(), cert.certificate_chain.where.empty() ? where : cert.certificate_chain.where, 0);
  std::vector<X509*> chain;
  if (!pem_certs(cert.certificate_chain.bytes, &chain)) {
    for (X509* x : chain) X509_free(x);
    at.fail("not a PEM certificate chain: " + ssl_reason());
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(cert.private_key.bytes.data(), static_cast<int>(cert.private_key.bytes.size())), BIO_free);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  const At key_at(YAML::Node(), cert.private_key.where.empty() ? where : cert.private_key.where, 0);
  if (key == nullptr) {
    for (X509* x : chain) X509_free(x);
    key_at.fail("not a PEM private key: " + ssl_reason());
  }
  const bool match = X509_check_private_key(chain[0], key) == 1;
  EVP_PKEY_free(key);
  for (X509* x : chain) X509_free(x);
  ERR_clear_error();
  if (!match) key_at.fail("the private key does not match the certificate " + (cert.certificate_chain.filename.empty() ? std::string("chain") : cert.certificate_chain.filename));
}

void check_trusted_ca(const DataSource& ca, const std::string& where) {
  if (!pem_certs(ca.bytes, nullptr)) At(YAML::Node(), where, 0).fail("no PEM CA certificate: " + ssl_reason());
}

TlsCertificate load_sds_certificate(const SdsSecret& sds) {
  YAML::Node root;
  const Fields s = load_secret(sds, true, root);
  return parse_tls_certificate(s.required("tls_certificate"));
}

CertificateValidation load_sds_validation(const SdsSecret& sds) {
  YAML::Node root;
  const Fields s = load_secret(sds, false, root);
  return parse_validation_context(s.required("validation_context"));
}

Secret parse_secret(const At& at) {
  // Envoy's other kinds (session_ticket_keys, generic_secret) are refused by name.
  const Fields f = at.fields("envoy.extensions.transport_sockets.tls.v3.Secret",
                             {"@type", "name", "tls_certificate", "validation_context"});
  if (f.has("@type") && f["@type"].str() != kSecretType)
    f["@type"].fail("expected " + std::string(kSecretType) + ", got '" + f["@type"].str() + "'");
  Secret s;
  s.name = f.required("name").nonempty_str();
  const std::string_view kind = f.exactly_one_of({"tls_certificate", "validation_context"});
  if (kind == "tls_certificate") s.tls_certificate = parse_tls_certificate(f[kind]);
  else s.validation_context = parse_validation_context(f[kind]);
  return s;
}

void take_validation(CertificateValidation& context, const CertificateValidation& secret) {
  context.trusted_ca = secret.trusted_ca;
  if (context.match_typed_subject_alt_names.empty())
    context.match_typed_subject_alt_names = secret.match_typed_subject_alt_names;
}

std::vector<std::string> take_pushed_secrets(CommonTlsContext& c, const FindSecret& find) {
  std::vector<std::string> missing;
  if (c.tls_certificate_sds && c.tls_certificate_sds->pushed()) {
    const Secret* s = find(*c.tls_certificate_sds);
    c.tls_certificates.clear();
    if (s && s->tls_certificate) c.tls_certificates.push_back(*s->tls_certificate);
    else missing.push_back(c.tls_certificate_sds->stream() + "/" + c.tls_certificate_sds->name);
  }
  if (c.validation_sds && c.validation_sds->pushed()) {
    const Secret* s = find(*c.validation_sds);
    if (s && s->validation_context) take_validation(c.validation, *s->validation_context);
    else missing.push_back(c.validation_sds->stream() + "/" + c.validation_sds->name);
  }
  return missing;
}

DownstreamTlsContext parse_downstream_transport_socket(const At& at) {
  RecordCrypto rc;
  const Fields f = tls_typed_config(at, "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext", kDownstreamType,
                                    {"@type", "common_tls_context", "require_client_certificate", "require_sni",
                                     "disable_stateless_session_resumption"}, &rc);
  DownstreamTlsContext d;
  d.common = parse_common_tls_context(f.required("common_tls_context"));
  d.common.record_crypto_engine = rc.engine;
  d.common.record_crypto_where = rc.where;
  if (d.common.tls_certificates.empty() && !d.common.tls_certificate_sds) f["common_tls_context"].fail("a server needs a certificate (tls_certificates or tls_certificate_sds_secret_configs)");
  d.require_client_certificate = f["require_client_certificate"].boolean_or(false);
  if (d.require_client_certificate && !d.common.validation.trusted_ca && !d.common.validation_sds)
    f["require_client_certificate"].fail("needs a validation context with trusted_ca");
  d.require_sni = f["require_sni"].boolean_or(false);
  d.disable_stateless_session_resumption = f["disable_stateless_session_resumption"].boolean_or(false);
  return d;
}

UpstreamTlsContext parse_upstream_transport_socket(const At& at) {
  RecordCrypto rc;
  const Fields f = tls_typed_config(at, "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", kUpstreamType,
                                    {"@type", "common_tls_context", "sni"}, &rc);
  UpstreamTlsContext u;
  if (f.has("common_tls_context")) u.common = parse_common_tls_context(f["common_tls_context"]);
  u.common.record_crypto_engine = rc.engine;
  u.common.record_crypto_where = rc.where;
  u.sni = f["sni"].str_or("");
  if (u.sni.size() > 255) f["sni"].fail("longer than 255 bytes");
  return u;
}

FilterChainMatch parse_filter_chain_match(const At& at) {
  const Fields f = at.fields("envoy.config.listener.v3.FilterChainMatch",
                             {"server_names", "transport_protocol", "application_protocols"});
  FilterChainMatch m;
  if (f.has("server_names")) m.server_names = f["server_names"].strings();
  for (std::string& n : m.server_names)
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  m.transport_protocol = f["transport_protocol"].str_or("");
  if (!m.transport_protocol.empty() && m.transport_protocol != "tls" && m.transport_protocol != "raw_buffer")
    f["transport_protocol"].fail("unknown transport protocol '" + m.transport_protocol + "' (expected tls or raw_buffer)");
  if (f.has("application_protocols")) m.application_protocols = f["application_protocols"].strings();
  return m;
}

bool parse_listener_filters(const At& at) {
  bool inspector = false;
  for (const At& item : at.items()) {
    const Fields f = item.fields("envoy.config.listener.v3.ListenerFilter", {"name", "typed_config"});
    const At name = f.required("name");
    if (name.str() != "envoy.filters.listener.tls_inspector")
      name.fail(name.str() + " is not supported by dpukit-mesh");
    if (inspector) name.fail("duplicate listener filter");
    inspector = true;
    if (f.has("typed_config")) {
      const Fields t = f["typed_config"].fields("envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector", {"@type"});
      const At type_at = t.required("@type");
      if (type_at.str() != kTlsInspectorType)
        type_at.fail("expected " + std::string(kTlsInspectorType) + ", got '" + type_at.str() + "'");
    }
  }
  return inspector;
}

namespace {
using json = nlohmann::json;

json data_source(const DataSource& d, bool secret) {
  if (secret) return {{"inline_string", "[redacted]"}};
  if (!d.filename.empty()) return {{"filename", d.filename}};
  return {{"inline_string", d.bytes}};
}

json common(const CommonTlsContext& c) {
  json j = json::object();
  static const char* const kVersions[] = {"TLSv1_0", "TLSv1_1", "TLSv1_2", "TLSv1_3"};
  const auto version = [](int v) { return v == 0 ? "TLS_AUTO" : kVersions[v - TLS1_VERSION]; };
  json params = json::object();
  if (c.tls_params.min_version) params["tls_minimum_protocol_version"] = version(c.tls_params.min_version);
  if (c.tls_params.max_version) params["tls_maximum_protocol_version"] = version(c.tls_params.max_version);
  if (!c.tls_params.cipher_suites.empty()) params["cipher_suites"] = c.tls_params.cipher_suites;
  if (!c.tls_params.ecdh_curves.empty()) params["ecdh_curves"] = c.tls_params.ecdh_curves;
  if (!params.empty()) j["tls_params"] = params;
  const auto sds = [](const SdsSecret& s) {
    json source;
    switch (s.source) {
      case SdsSecret::Source::kFile: source = {{"path_config_source", {{"path", s.path}}}}; break;
      case SdsSecret::Source::kAds: source = {{"ads", json::object()}, {"resource_api_version", "V3"}}; break;
      case SdsSecret::Source::kGrpc:
        source = {{"api_config_source",
                   {{"api_type", "GRPC"},
                    {"transport_api_version", "V3"},
                    {"grpc_services", {{{"envoy_grpc", {{"cluster_name", s.cluster}}}}}}}},
                  {"resource_api_version", "V3"}};
        break;
    }
    if (s.pushed()) source["initial_fetch_timeout"] = duration_json(s.initial_fetch_timeout);
    return json{{"name", s.name}, {"sds_config", source}};
  };
  if (c.tls_certificate_sds) {
    j["tls_certificate_sds_secret_configs"] = json::array({sds(*c.tls_certificate_sds)});
  } else {
    json certs = json::array();
    for (const auto& t : c.tls_certificates)
      certs.push_back({{"certificate_chain", data_source(t.certificate_chain, false)},
                       {"private_key", data_source(t.private_key, t.private_key.filename.empty())}});
    if (!certs.empty()) j["tls_certificates"] = certs;
  }
  json v = json::object();
  if (c.validation.trusted_ca && !c.validation_sds) v["trusted_ca"] = data_source(*c.validation.trusted_ca, false);
  static const char* const kSan[] = {"DNS", "URI", "EMAIL", "IP_ADDRESS"};
  static const char* const kKind[] = {"exact", "prefix", "suffix", "contains"};
  for (const auto& m : c.validation.match_typed_subject_alt_names) {
    json matcher = {{kKind[static_cast<int>(m.matcher.kind)], m.matcher.value}};
    if (m.matcher.ignore_case) matcher["ignore_case"] = true;
    v["match_typed_subject_alt_names"].push_back({{"san_type", kSan[static_cast<int>(m.san_type)]}, {"matcher", matcher}});
  }
  if (c.validation.allow_expired_certificate) v["allow_expired_certificate"] = true;
  if (c.validation_sds)
    j["combined_validation_context"] = {{"default_validation_context", v},
                                        {"validation_context_sds_secret_config", sds(*c.validation_sds)}};
  else if (c.has_validation)
    j["validation_context"] = v;
  if (!c.alpn_protocols.empty()) j["alpn_protocols"] = c.alpn_protocols;
  return j;
}
}  // namespace

// The TLS socket, inside the crypto_engine socket when one wrapped it.
static json transport_socket(const CommonTlsContext& c, json typed_config) {
  json tls = {{"name", kTlsSocket}, {"typed_config", std::move(typed_config)}};
  if (c.record_crypto_where.empty()) return tls;
  return {{"name", kCryptoEngineSocket},
          {"typed_config", {{"@type", kCryptoEngineType},
                            {"record_crypto", c.record_crypto_engine ? "ENGINE" : "CORES"},
                            {"transport_socket", std::move(tls)}}}};
}

json to_json(const DownstreamTlsContext& c) {
  json j = {{"@type", kDownstreamType}, {"common_tls_context", common(c.common)}};
  if (c.require_client_certificate) j["require_client_certificate"] = true;
  if (c.require_sni) j["require_sni"] = true;
  if (c.disable_stateless_session_resumption) j["disable_stateless_session_resumption"] = true;
  return transport_socket(c.common, std::move(j));
}

json to_json(const UpstreamTlsContext& c) {
  json j = {{"@type", kUpstreamType}, {"common_tls_context", common(c.common)}};
  if (!c.sni.empty()) j["sni"] = c.sni;
  return transport_socket(c.common, std::move(j));
}

json to_json(const FilterChainMatch& m) {
  json j = json::object();
  if (!m.server_names.empty()) j["server_names"] = m.server_names;
  if (!m.transport_protocol.empty()) j["transport_protocol"] = m.transport_protocol;
  if (!m.application_protocols.empty()) j["application_protocols"] = m.application_protocols;
  return j;
}

}  // namespace dpukit::mesh::config
