// The operator registry and the helpers every operator family shares.
#include <algorithm>
#include <cstdio>
#include <mutex>

#include "operator.h"

namespace dpukit::bench {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kRef: return "ref";
    case Backend::kLib: return "lib";
    case Backend::kDev: return "dev";
    case Backend::kEngine: return "engine";
  }
  return "?";
}

Backend parse_backend(const std::string& name) {
  if (name == "ref") return Backend::kRef;
  if (name == "lib") return Backend::kLib;
  if (name == "dev") return Backend::kDev;
  if (name == "engine") return Backend::kEngine;
  throw std::invalid_argument("unknown backend '" + name + "' (ref, lib, dev or engine)");
}

Registry& registry() {
  static Registry r;
  static std::once_flag once;
  std::call_once(once, [] {
    register_network_ops(r);
    register_segmentation_ops(r);
    register_storage_ops(r);
    register_security_ops(r);
    register_pubkey_ops(r);
    register_regex_ops(r);
    register_copy_ops(r);
    register_programs(r);
  });
  return r;
}

Operator& find_operator(const std::string& name) {
  for (const auto& op : registry())
    if (op->info().name == name) return *op;
  std::string known;
  for (const auto& op : registry()) known += (known.empty() ? "" : ", ") + op->info().name;
  throw std::invalid_argument("unknown operator '" + name + "' (known: " + known + ")");
}

std::vector<OperatorInfo> list_operators() {
  std::vector<OperatorInfo> v;
  for (const auto& op : registry()) v.push_back(op->info());
  return v;
}

std::map<std::string, std::string> operator_params(const std::string& op) {
  return find_operator(op).default_params();
}

void Kernel::process_packed(std::span<const uint8_t> in, size_t unit, Bytes& out) {
  out.clear();
  Bytes one;
  for (size_t at = 0; at + unit <= in.size(); at += unit) {
    process(in.subspan(at, unit), one);
    out.insert(out.end(), one.begin(), one.end());
  }
}

std::string bytes_text(uint64_t bytes) {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.4g", static_cast<double>(bytes) / (1 << 20));
  return std::to_string(bytes) + " bytes (" + mib + " MiB)";
}

void check_input_size(size_t size) {
  if (size == 0 || size > kMaxInputSize)
    throw std::invalid_argument("size " + std::to_string(size) + " is not 1 byte to " + bytes_text(kMaxInputSize));
}

size_t Operator::inputs_within_budget(size_t size) const {
  check_input_size(size);
  return std::min(std::max<size_t>(input_count(size), 1), kInputBudget / size);
}

std::vector<Bytes> Operator::make_inputs(size_t size, size_t count, uint64_t seed) const {
  std::vector<Bytes> v(count, Bytes(size));
  for (size_t i = 0; i < count; ++i) fill_random(v[i], seed * 1000003 + i);
  return v;
}

std::vector<uint8_t> timed_inputs(const std::string& op_name, size_t size, uint64_t seed) {
  const Operator& op = find_operator(op_name);
  std::vector<uint8_t> all;
  for (const Bytes& in : op.make_inputs(size, op.inputs_within_budget(size), seed)) all.insert(all.end(), in.begin(), in.end());
  return all;
}

void Operator::set_param(const std::string& key, const std::string& value) {
  auto known = default_params();
  if (!known.count(key)) {
    std::string list;
    for (const auto& [k, v] : known) list += (list.empty() ? "" : ", ") + k;
    throw std::invalid_argument("operator " + info().name + " has no parameter '" + key + "'" +
                                (list.empty() ? "" : " (it has: " + list + ")"));
  }
  params_[key] = value;
}

std::string Operator::param(const std::string& key) const {
  if (auto it = params_.find(key); it != params_.end()) return it->second;
  auto known = default_params();
  if (auto it = known.find(key); it != known.end()) return it->second;
  throw std::invalid_argument("operator " + info().name + " has no parameter '" + key + "'");
}

uint64_t Operator::param_u64(const std::string& key) const {
  std::string v = param(key);
  size_t used = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(v, &used, 0);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || v[0] == '-')
    throw std::invalid_argument(info().name + "." + key + ": '" + v + "' is not a number");
  return n;
}

nlohmann::json Operator::parameters() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : default_params()) j[k] = param(k);
  return j;
}

std::string Operator::mismatch(std::span<const uint8_t>, const Bytes& ref_out, const Bytes& got) const {
  return ref_out == got ? "" : describe_difference(ref_out, got);
}

std::string hex(std::span<const uint8_t> bytes, size_t max) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes.size() && i < max; ++i) {
    s += d[bytes[i] >> 4];
    s += d[bytes[i] & 15];
  }
  if (bytes.size() > max) s += "...";
  return s;
}

std::string describe_difference(const Bytes& want, const Bytes& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  char buf[160];
  std::snprintf(buf, sizeof buf, "output differs at byte %zu (ref %zu bytes, got %zu bytes): ref ", i, want.size(),
                got.size());
  std::string s = buf;
  auto from = [&](const Bytes& b) { return std::span<const uint8_t>(b).subspan(std::min(i, b.size())); };
  return s + hex(from(want), 16) + " got " + hex(from(got), 16);
}

void fill_random(std::span<uint8_t> out, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < out.size(); i += 8) {
    x += 0x9E3779B97F4A7C15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (size_t j = 0; j < 8 && i + j < out.size(); ++j) out[i + j] = static_cast<uint8_t>(z >> (8 * j));
  }
}

void fill_text(std::span<uint8_t> out, uint64_t seed) {
  // A fixed vocabulary of protocol-ish and English words; word k is drawn
  // with probability ~ 1/(k+1) (Zipf), so the text compresses like logs do.
  static const char* const kWords[] = {
      "the",     "GET",     "HTTP/1.1", "Host:",   "of",     "and",   "to",      "200",      "OK",       "in",
      "Content-Type:", "application/json", "user", "id",   "value",  "error", "request", "response", "time",
      "server",  "client",  "session",  "token",   "key",    "data",  "packet",  "flow",     "port",     "address",
      "cache",   "storage", "block",    "offset",  "length", "write", "read",    "sync",     "commit",   "table",
      "select",  "from",    "where",    "insert",  "update", "delete", "login",  "admin",    "password", "query"};
  constexpr size_t kN = sizeof kWords / sizeof kWords[0];
  static const std::vector<double> cdf = [] {
    std::vector<double> c(kN);
    double sum = 0;
    for (size_t k = 0; k < kN; ++k) c[k] = (sum += 1.0 / static_cast<double>(k + 1));
    for (auto& v : c) v /= sum;
    return c;
  }();
  uint64_t x = seed ^ 0x5DEECE66Dull;
  size_t i = 0;
  while (i < out.size()) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
    size_t k = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    const char* w = kWords[std::min(k, kN - 1)];
    for (const char* p = w; *p && i < out.size(); ++p) out[i++] = static_cast<uint8_t>(*p);
    if (i < out.size()) out[i++] = (x >> 60) == 0 ? '\n' : ' ';
  }
}

}  // namespace dpukit::bench
