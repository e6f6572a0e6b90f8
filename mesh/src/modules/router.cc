#include "modules/router.h"

#include <algorithm>

namespace dpukit::mesh {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::regex compile(const std::string& re) { return std::regex(re, std::regex::ECMAScript | std::regex::optimize); }

// The values a header matcher sees: each field of that name, or for the
// pseudo-headers Envoy lets a route match on, the request line's part.
void header_values(const http::RequestHead& head, std::string_view name, std::vector<std::string_view>& out) {
  out.clear();
  if (!name.empty() && name.front() == ':') {
    if (name == ":method") out.push_back(head.method);
    else if (name == ":path") out.push_back(head.target);
    else if (name == ":authority") out.push_back(head.host);
    else if (name == ":scheme") out.push_back("http");
    return;
  }
  for (const auto& h : head.headers.fields)
    if (http::iequals(h.name, name)) out.push_back(h.value);
}

}  // namespace

CompiledHeaderMatcher compile_header_matcher(const config::HeaderMatcher& m) {
  CompiledHeaderMatcher c{m, std::nullopt, lower(m.value)};
  if (m.kind == config::HeaderMatcher::Kind::kSafeRegex) c.regex = compile(m.value);
  return c;
}

bool CompiledHeaderMatcher::value_matches(std::string_view value) const {
  using K = config::HeaderMatcher::Kind;
  if (cfg.kind == K::kSafeRegex) return std::regex_match(value.begin(), value.end(), *regex);
  std::string lowered;
  if (cfg.ignore_case) {
    lowered = lower(value);
    value = lowered;
  }
  const std::string& want = cfg.ignore_case ? lower_value : cfg.value;
  switch (cfg.kind) {
    case K::kExact: return value == want;
    case K::kPrefix: return starts_with(value, want);
    case K::kSuffix: return ends_with(value, want);
    case K::kContains: return value.find(want) != std::string_view::npos;
    case K::kPresent:
    case K::kSafeRegex: break;
  }
  return false;
}

bool CompiledHeaderMatcher::matches(const http::RequestHead& head) const {
  using K = config::HeaderMatcher::Kind;
  thread_local std::vector<std::string_view> values;
  header_values(head, cfg.name, values);
  // present_match: the header's presence (inverted by invert_match).
  if (cfg.kind == K::kPresent) return (!values.empty() == cfg.present) != cfg.invert;
  // Envoy: an absent header never matches a string matcher, inverted or not.
  if (values.empty()) return false;
  // Envoy (1.40): a repeated header matches when any one of its values does
  // (the values are not joined); invert_match inverts that.
  bool m = std::any_of(values.begin(), values.end(), [&](std::string_view v) { return value_matches(v); });
  return m != cfg.invert;
}

bool CompiledHeaderMatcher::matches(const http::HeaderList& headers) const {
  http::RequestHead head;
  head.headers = headers;
  return matches(head);
}

namespace {
// The first value of query parameter `name` in `target` ("" for "?flag"), as written (not decoded).
std::optional<std::string_view> first_query_value(std::string_view target, std::string_view name) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  if (size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}
}  // namespace

bool CompiledRoute::matches(const http::RequestHead& head) const {
  using K = config::RouteMatch::Kind;
  const auto& m = cfg->match;
  switch (m.kind) {
    case K::kPrefix: {
      // Envoy (1.40): the prefix is matched against the path without the
      // query (a prefix with '?' in it never matches), and an absolute-form
      // target matches by its path.
      if (m.case_sensitive) {
        if (!starts_with(head.path, match_value)) return false;
      } else if (head.path.size() < match_value.size() ||
                 lower(std::string_view(head.path).substr(0, match_value.size())) != match_value) {
        return false;
      }
      break;
    }
    case K::kPath:
      if (!(m.case_sensitive ? head.path == match_value : lower(head.path) == match_value)) return false;
      break;
    case K::kSafeRegex:
      if (!std::regex_match(head.path, *path_regex)) return false;
      break;
  }
  for (const auto& h : headers)
    if (!h.matches(head)) return false;
  for (const auto& q : query_parameters) {
    auto value = first_query_value(head.target, q.cfg.name);
    if (!value) return false;  // an absent parameter matches nothing, present_match included
    if (q.cfg.kind != config::HeaderMatcher::Kind::kPresent && !q.value_matches(*value)) return false;
  }
  return true;
}

ClusterRuntime* CompiledRoute::pick_cluster(uint64_t random) const {
  if (clusters.empty() || total_weight == 0) return nullptr;  // a direct_response route
  if (clusters.size() == 1) return clusters[0].first;
  uint64_t r = random % total_weight;
  for (const auto& [c, cumulative] : clusters)
    if (r < cumulative) return c;
  return clusters.back().first;
}

RouteTable::RouteTable(const config::RouteConfiguration& rc,
                       const std::function<ClusterRuntime*(const std::string&)>& cluster)
    : cfg_(&rc) {
  vhosts_.reserve(rc.virtual_hosts.size());
  for (const auto& vh : rc.virtual_hosts) {
    CompiledVirtualHost cv;
    cv.cfg = &vh;
    for (const auto& r : vh.routes) {
      CompiledRoute cr;
      cr.cfg = &r;
      if (r.match.kind == config::RouteMatch::Kind::kSafeRegex) cr.path_regex = compile(r.match.value);
      cr.match_value = r.match.case_sensitive ? r.match.value : lower(r.match.value);
      for (const auto& hm : r.match.headers) cr.headers.push_back(compile_header_matcher(hm));
      for (const auto& qm : r.match.query_parameters) cr.query_parameters.push_back(compile_header_matcher(qm));
      if (r.route) {
        if (!r.route->cluster.empty()) {
          cr.clusters.emplace_back(cluster(r.route->cluster), 1);
          cr.total_weight = 1;
        }
        for (const auto& w : r.route->weighted) {
          cr.total_weight += w.weight;
          cr.clusters.emplace_back(cluster(w.name), cr.total_weight);
        }
      }
      cv.routes.push_back(std::move(cr));
    }
    vhosts_.push_back(std::move(cv));
  }
  // Envoy: the first virtual host that claims a domain keeps it (duplicates are a config error there).
  for (const auto& cv : vhosts_) {
    for (const auto& d0 : cv.cfg->domains) {
      std::string d = lower(d0);
      if (d == "*") {
        if (!any_) any_ = &cv;
      } else if (starts_with(d, "*")) {
        suffix_.emplace_back(d.substr(1), &cv);
      } else if (ends_with(d, "*")) {
        prefix_.emplace_back(d.substr(0, d.size() - 1), &cv);
      } else {
        exact_.emplace(d, &cv);
      }
    }
  }
  auto longest_first = [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); };
  std::stable_sort(suffix_.begin(), suffix_.end(), longest_first);
  std::stable_sort(prefix_.begin(), prefix_.end(), longest_first);
}

const CompiledVirtualHost* RouteTable::find_vhost(std::string_view host_in) const {
  std::string host = lower(host_in);
  if (auto it = exact_.find(host); it != exact_.end()) return it->second;
  // A wildcard must match at least one character of the host.
  for (const auto& [suffix, vh] : suffix_)
    if (host.size() > suffix.size() && ends_with(host, suffix)) return vh;
  for (const auto& [prefix, vh] : prefix_)
    if (host.size() > prefix.size() && starts_with(host, prefix)) return vh;
  return any_;
}

RouteTable::Match RouteTable::match(const http::RequestHead& head) const {
  const CompiledVirtualHost* vh = find_vhost(head.host);
  if (!vh) return {nullptr, nullptr};
  for (const auto& r : vh->routes)
    if (r.matches(head)) return {vh, &r};
  return {vh, nullptr};
}

// Envoy's HeaderParser::evaluateHeaders: an entry with an empty value is
// dropped (keep_empty_value is not supported, so it is always false); every
// entry's condition is decided on the headers as they were before this list
// (two entries for one absent header with ADD_IF_ABSENT both add); the
// overwrites are applied first, in order, then the appends, in order.
void apply_header_adds(const std::vector<config::HeaderValueOption>& adds, http::HeaderList& headers) {
  using A = config::HeaderValueOption::Action;
  std::vector<const config::HeaderValueOption*> overwrite, append;
  for (const auto& a : adds) {
    if (a.value.empty()) continue;
    switch (a.action) {
      case A::kAppendIfExistsOrAdd: append.push_back(&a); break;
      case A::kAddIfAbsent:
        if (!headers.get(a.key)) append.push_back(&a);
        break;
      case A::kOverwriteIfExists:
        if (headers.get(a.key)) overwrite.push_back(&a);
        break;
      case A::kOverwriteIfExistsOrAdd: overwrite.push_back(&a); break;
    }
  }
  for (const auto* a : overwrite) headers.set(a->key, a->value);
  for (const auto* a : append) headers.add(a->key, a->value);
}

void apply_header_rules_request(const config::HeaderRules& rules, http::HeaderList& headers) {
  for (const auto& name : rules.request_headers_to_remove) headers.remove(name);
  apply_header_adds(rules.request_headers_to_add, headers);
}

void apply_header_rules_response(const config::HeaderRules& rules, http::HeaderList& headers) {
  for (const auto& name : rules.response_headers_to_remove) headers.remove(name);
  apply_header_adds(rules.response_headers_to_add, headers);
}

}  // namespace dpukit::mesh
