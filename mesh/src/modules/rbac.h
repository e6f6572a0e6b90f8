// The RBAC filter module (envoy.filters.http.rbac): Istio's
// AuthorizationPolicy, as Envoy evaluates it. A policy matches a request when
// one of its permissions (what is asked: path, method and other headers, the
// destination address and port, the SNI) and one of its principals (who asks:
// the peer's certificate identity, its address, headers) match. ALLOW lets a
// request through when some policy matches, DENY when none does, LOG always.
// Shadow rules are evaluated and counted only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/bootstrap.h"
#include "http/http1.h"
#include "modules/router.h"

namespace dpukit::mesh {

// What the downstream connection says about who is asking and where to, read
// once when it opens (dataplane/l7_chain.h fills it).
struct DownstreamFacts {
  std::string peer_ip;   // "" for a Unix socket
  uint32_t peer_port = 0;
  std::string local_ip;  // the address the client reached
  uint32_t local_port = 0;
  bool tls = false;
  std::string sni;                                // TLS server name as a tls_inspector read it, "" without
  std::vector<std::string> uri_sans, dns_sans;    // the peer certificate's
  std::string subject;                            // its subject, RFC 2253 ("" without a certificate)
  bool peer_certificate = false;
  std::string tls_version;  // "TLSv1.3" ("" without TLS)
  bool identity = false;  // the fields above past peer_ip were read (downstream_facts)
};

class RbacMatcher {
 public:
  explicit RbacMatcher(const config::RbacMatcher& cfg);
  bool matches(const http::RequestHead& head, const DownstreamFacts& conn) const;

 private:
  bool in_cidr(const std::string& ip) const;

  config::RbacMatcher::Kind kind_;
  std::vector<RbacMatcher> children_;
  std::optional<CompiledHeaderMatcher> string_;  // header, url_path, SNI, principal_name
  bool has_string_ = false;
  unsigned char prefix_[16] = {};
  bool v4_ = false;
  uint32_t prefix_len_ = 0, port_ = 0, port_end_ = 0;
};

class RbacRulesEngine {
 public:
  explicit RbacRulesEngine(const config::RbacRules& cfg);
  // Whether the rules let the request through; `policy`: the one that matched, if any.
  bool allowed(const http::RequestHead& head, const DownstreamFacts& conn, std::string* policy = nullptr) const;

 private:
  struct Policy {
    std::string name;
    std::vector<RbacMatcher> permissions, principals;
  };
  config::RbacRules::Action action_;
  std::vector<Policy> policies_;
};

class RbacFilter {
 public:
  explicit RbacFilter(const config::Rbac& cfg);
  struct Verdict {
    bool allowed = true;
    bool counted = false, shadow_counted = false;  // rules, shadow rules present
    bool shadow_allowed = true;
    std::string policy;  // the enforced rules' policy that matched ("" when none did)
  };
  Verdict check(const http::RequestHead& head, const DownstreamFacts& conn) const;

 private:
  std::optional<RbacRulesEngine> rules_, shadow_;
};

}  // namespace dpukit::mesh
