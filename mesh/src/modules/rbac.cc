#include "modules/rbac.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace dpukit::mesh {

namespace {

// The request's path without its query or fragment, as Envoy's url_path matches it.
std::string_view path_only(std::string_view target) {
  size_t end = target.find_first_of("?#");
  return end == std::string_view::npos ? target : target.substr(0, end);
}

bool parse_ip(const std::string& text, unsigned char (&bytes)[16], bool& v4) {
  std::memset(bytes, 0, sizeof bytes);
  if (::inet_pton(AF_INET, text.c_str(), bytes) == 1) {
    v4 = true;
    return true;
  }
  v4 = false;
  return ::inet_pton(AF_INET6, text.c_str(), bytes) == 1;
}

}  // namespace

RbacMatcher::RbacMatcher(const config::RbacMatcher& cfg)
    : kind_(cfg.kind), has_string_(cfg.has_string), prefix_len_(cfg.prefix_len), port_(cfg.port),
      port_end_(cfg.port_end) {
  using K = config::RbacMatcher::Kind;
  for (const auto& c : cfg.children) children_.emplace_back(c);
  if (kind_ == K::kHeader || kind_ == K::kUrlPath || kind_ == K::kRequestedServerName ||
      (kind_ == K::kAuthenticated && has_string_))
    string_ = compile_header_matcher(cfg.header);
  if (!cfg.cidr.empty()) parse_ip(cfg.cidr, prefix_, v4_);
}

bool RbacMatcher::in_cidr(const std::string& ip) const {
  unsigned char bytes[16];
  bool v4 = false;
  if (ip.empty() || !parse_ip(ip, bytes, v4) || v4 != v4_) return false;
  uint32_t bits = prefix_len_;
  for (size_t i = 0; bits > 0; ++i, bits = bits >= 8 ? bits - 8 : 0) {
    const unsigned char mask = bits >= 8 ? 0xff : static_cast<unsigned char>(0xff << (8 - bits));
    if ((bytes[i] & mask) != (prefix_[i] & mask)) return false;
  }
  return true;
}

bool RbacMatcher::matches(const http::RequestHead& head, const DownstreamFacts& conn) const {
  using K = config::RbacMatcher::Kind;
  switch (kind_) {
    case K::kAny: return true;
    case K::kAnd:
      return std::all_of(children_.begin(), children_.end(), [&](const RbacMatcher& m) { return m.matches(head, conn); });
    case K::kOr:
      return std::any_of(children_.begin(), children_.end(), [&](const RbacMatcher& m) { return m.matches(head, conn); });
    case K::kNot: return !children_.at(0).matches(head, conn);
    case K::kHeader: return string_->matches(head);
    case K::kUrlPath: return string_->value_matches(path_only(head.target));
    case K::kDestinationIp: return in_cidr(conn.local_ip);
    case K::kDestinationPort: return conn.local_port == port_;
    case K::kDestinationPortRange: return conn.local_port >= port_ && conn.local_port < port_end_;
    case K::kRequestedServerName: return string_->value_matches(conn.sni);
    case K::kAuthenticated: {
      // Envoy: a TLS connection; the name against the URI SANs, else the DNS SANs, else the subject.
      if (!conn.tls) return false;
      if (!has_string_) return true;
      if (!conn.peer_certificate) return false;
      const auto& sans = !conn.uri_sans.empty() ? conn.uri_sans : conn.dns_sans;
      if (!sans.empty())
        return std::any_of(sans.begin(), sans.end(), [&](const std::string& s) { return string_->value_matches(s); });
      return string_->value_matches(conn.subject);
    }
    case K::kDirectRemoteIp:
    case K::kRemoteIp: return in_cidr(conn.peer_ip);
  }
  return false;
}

RbacRulesEngine::RbacRulesEngine(const config::RbacRules& cfg) : action_(cfg.action) {
  for (const auto& p : cfg.policies) {
    Policy out{p.name, {}, {}};
    for (const auto& m : p.permissions) out.permissions.emplace_back(m);
    for (const auto& m : p.principals) out.principals.emplace_back(m);
    policies_.push_back(std::move(out));
  }
}

bool RbacRulesEngine::allowed(const http::RequestHead& head, const DownstreamFacts& conn, std::string* policy) const {
  bool matched = false;
  for (const Policy& p : policies_) {
    auto hit = [&](const RbacMatcher& m) { return m.matches(head, conn); };
    if (std::any_of(p.permissions.begin(), p.permissions.end(), hit) &&
        std::any_of(p.principals.begin(), p.principals.end(), hit)) {
      matched = true;
      if (policy) *policy = p.name;
      break;
    }
  }
  switch (action_) {
    case config::RbacRules::Action::kAllow: return matched;
    case config::RbacRules::Action::kDeny: return !matched;
    case config::RbacRules::Action::kLog: return true;
  }
  return true;
}

RbacFilter::RbacFilter(const config::Rbac& cfg) {
  if (cfg.rules) rules_.emplace(*cfg.rules);
  if (cfg.shadow_rules) shadow_.emplace(*cfg.shadow_rules);
}

RbacFilter::Verdict RbacFilter::check(const http::RequestHead& head, const DownstreamFacts& conn) const {
  Verdict v;
  if (shadow_) {
    v.shadow_counted = true;
    v.shadow_allowed = shadow_->allowed(head, conn);
  }
  if (rules_) {
    v.counted = true;
    v.allowed = rules_->allowed(head, conn, &v.policy);
  }
  return v;
}

}  // namespace dpukit::mesh
