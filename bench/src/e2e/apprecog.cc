#include "apprecog.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "dpukit/core/random.h"
#include "../regex_ref.h"

namespace dpukit::bench::e2e {
namespace {

using regex_ref::Rule;

// The groups, by rule name (regex_ref.cc). Rules that the text filler
// (fill_text's vocabulary: "select ... from", "200 OK ... application/json",
// "login ... error", "admin ... password", "session token", "flow", "commit")
// can match by itself are kept out of both groups, so that an unplanted
// payload is an echo.
const char* const kThreatRules[] = {
    "http_get_script", "http_post_upload", "dir_traversal",  "etc_passwd",        "sqli_union",
    "sqli_tautology",  "sqli_drop",        "sqli_sleep",     "xss_script_tag",    "xss_js_uri",
    "xss_event_handler", "xss_encoded",    "cmd_exe",        "bin_sh",            "wget_curl_url",
    "nc_exec",         "chmod_root",       "rm_rf",          "shellshock",        "log4shell",
    "php_eval",        "pct_traversal",    "remote_include", "query_quote",       "overlong_utf8",
    "nop_sled",        "escaped_shellcode", "overflow_run",  "pe_header"};
const char* const kDataRules[] = {"basic_auth",     "password_param", "credentials_url", "ssn",
                                  "credit_card",    "email",          "aws_access_key",  "private_key",
                                  "jwt",            "session_cookie", "sha256_hex",      "mac_address"};

size_t rule_index(const std::string& name) {
  const auto& rules = regex_ref::rxp_rules();
  for (size_t i = 0; i < rules.size(); ++i)
    if (rules[i].name == name) return i;
  throw std::logic_error("apprecog: rule '" + name + "' is not in the rxp_match rule set");
}

bool any_of_mask(std::span<const uint8_t> bitmap, const std::vector<uint8_t>& mask) {
  const size_t n = std::min(bitmap.size(), mask.size());
  for (size_t i = 0; i < n; ++i)
    if (bitmap[i] & mask[i]) return true;
  return false;
}

std::unique_ptr<Kernel> one_kernel(const char* op, Backend backend, size_t size) {
  auto kernels = find_operator(op).make_kernels(backend, size, 1);
  return std::move(kernels.at(0));
}

// A sample framed as rxp_match's inputs frame it (spaces keep \b at its
// edges), written at its rule's place; false when it does not fit.
bool plant(Bytes& body, const Rule& rule, uint64_t h) {
  const std::string framed = rule.place == Rule::Place::kStart ? rule.sample + " "
                             : rule.place == Rule::Place::kEnd ? " " + rule.sample
                                                               : " " + rule.sample + " ";
  if (framed.size() > body.size()) return false;
  const size_t at = rule.place == Rule::Place::kStart ? 0
                    : rule.place == Rule::Place::kEnd ? body.size() - framed.size()
                                                      : h % (body.size() - framed.size() + 1);
  std::memcpy(body.data() + at, framed.data(), framed.size());
  return true;
}

}  // namespace

Classifier::Classifier() {
  const size_t n = regex_ref::rxp_rules().size();
  threat_mask_.assign((n + 7) / 8, 0);
  data_mask_.assign((n + 7) / 8, 0);
  for (const char* name : kThreatRules) {
    const size_t i = rule_index(name);
    threat_.push_back(i);
    threat_mask_[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  for (const char* name : kDataRules) {
    const size_t i = rule_index(name);
    if (threat_mask_[i / 8] & (1u << (i % 8))) throw std::logic_error("apprecog: rule in both groups: " + std::string(name));
    data_.push_back(i);
    data_mask_[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
}

Action Classifier::classify(std::span<const uint8_t> bitmap) const {
  if (any_of_mask(bitmap, threat_mask_)) return Action::kHash;
  if (any_of_mask(bitmap, data_mask_)) return Action::kCompress;
  return Action::kEcho;
}

const std::vector<size_t>& Classifier::group(Action a) const {
  if (a == Action::kHash) return threat_;
  if (a == Action::kCompress) return data_;
  return none_;
}

AppRecognizer::AppRecognizer()
    : match_(one_kernel("rxp_match", Backend::kLib, kMaxDatagram)),
      hash_(one_kernel("sha256", Backend::kLib, kMaxDatagram)),
      compress_(one_kernel("compress", Backend::kLib, kMaxDatagram)) {
  bitmap_.reserve(64);
  result_.reserve(kMaxDatagram + 64);
}

Action AppRecognizer::recognize(std::span<const uint8_t> body) {
  match_->process(body, bitmap_);
  return classifier_.classify(bitmap_);
}

size_t AppRecognizer::reply(const Header& h, Action action, std::span<const uint8_t> request, Bytes& out) {
  const auto body = request.subspan(kHeaderBytes);
  switch (action) {
    case Action::kHash: hash_->process(request, result_); break;  // the whole packet, as the paper hashes it
    case Action::kCompress: compress_->process(body, result_); break;
    case Action::kEcho: result_.assign(body.begin(), body.end()); break;
    case Action::kNone: throw std::invalid_argument("apprecog: no action to reply with");
  }
  return write_reply(h, action, result_, out);
}

size_t write_reply(const Header& h, Action action, std::span<const uint8_t> result, Bytes& out) {
  if (action == Action::kNone) throw std::invalid_argument("apprecog: no action to reply with");
  Header r = h;
  r.kind = Kind::kReply;
  r.action = action;
  r.length = static_cast<uint16_t>(kHeaderBytes + result.size());
  out.resize(kHeaderBytes + result.size());
  encode_header(r, out);
  if (!result.empty()) std::memcpy(out.data() + kHeaderBytes, result.data(), result.size());
  return out.size();
}

Mix parse_mix(const std::string& text) {
  std::vector<double> v;
  std::stringstream in(text);
  for (std::string w; std::getline(in, w, ',');) {
    size_t used = 0;
    double x = -1;
    try {
      x = std::stod(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != w.size() || !(x >= 0) || !std::isfinite(x))
      throw std::invalid_argument("mix: '" + w + "' is not a share >= 0");
    v.push_back(x);
  }
  if (v.size() != 3) throw std::invalid_argument("mix: want three shares hash,compress,echo, not '" + text + "'");
  if (v[0] + v[1] + v[2] <= 0) throw std::invalid_argument("mix: the shares add up to 0");
  return Mix{v[0], v[1], v[2]};
}

Action reference_action(std::span<const uint8_t> body) {
  static const regex_ref::RuleSet rules = [] {
    std::vector<regex_ref::Pattern> patterns;
    for (const auto& r : regex_ref::rxp_rules()) patterns.push_back(r.pattern);
    return regex_ref::RuleSet(std::move(patterns));
  }();
  static const Classifier classifier;
  thread_local regex_ref::Matcher matcher(rules);
  thread_local Bytes bitmap;
  bitmap.assign(rules.bitmap_bytes(), 0);
  matcher.match(body, bitmap);
  return classifier.classify(bitmap);
}

PayloadPool make_payload_pool(size_t body_bytes, size_t count, const Mix& mix, uint64_t seed) {
  if (count == 0) throw std::invalid_argument("payload pool: count must be > 0");
  const double total = mix.hash + mix.compress + mix.echo;
  // Whole payloads per action, largest remainders first, so that the shares are as asked.
  const double share[3] = {mix.hash / total, mix.compress / total, mix.echo / total};
  size_t want[3], assigned = 0;
  double rest[3];
  for (int a = 0; a < 3; ++a) {
    want[a] = static_cast<size_t>(std::floor(share[a] * static_cast<double>(count)));
    rest[a] = share[a] * static_cast<double>(count) - static_cast<double>(want[a]);
    assigned += want[a];
  }
  while (assigned < count) {
    const int a = static_cast<int>(std::max_element(rest, rest + 3) - rest);
    ++want[a];
    rest[a] = -1;
    ++assigned;
  }
  std::vector<Action> order;
  for (int a = 0; a < 3; ++a) order.insert(order.end(), want[a], static_cast<Action>(a + 1));
  SplitMix64 rng(seed ^ 0xA99E5C06ull);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);

  const Classifier classifier;
  const auto& rules = regex_ref::rxp_rules();
  // The rules of each group whose framed sample fits this payload size.
  std::vector<size_t> fits[2];
  for (int g = 0; g < 2; ++g) {
    for (size_t i : classifier.group(g == 0 ? Action::kHash : Action::kCompress))
      if (rules[i].sample.size() + (rules[i].place == Rule::Place::kAnywhere ? 2 : 1) <= body_bytes)
        fits[g].push_back(i);
    if (want[g] > 0 && fits[g].empty())
      throw std::invalid_argument("apprecog: a payload of " + std::to_string(body_bytes) +
                                  " bytes cannot hold a sample of any " + (g == 0 ? "threat" : "data") +
                                  " rule (the datagram must be larger, or that action's share 0)");
  }

  PayloadPool pool;
  pool.bodies.reserve(count);
  size_t next[2] = {0, 0};
  for (size_t i = 0; i < count; ++i) {
    const Action target = order[i];
    Bytes body(body_bytes);
    bool made = false;
    for (unsigned attempt = 0; attempt < 256 && !made; ++attempt) {
      const uint64_t s = mix64(seed * 0x9E3779B97F4A7C15ull + i * 1021 + attempt);
      fill_text(body, s);
      if (target != Action::kEcho) {
        const int g = target == Action::kHash ? 0 : 1;
        // The group's rules in rotation, so that all of them get planted.
        plant(body, rules[fits[g][next[g]++ % fits[g].size()]], mix64(s));
      }
      made = reference_action(body) == target;
    }
    if (!made)
      throw std::runtime_error(std::string("apprecog: could not make a ") + action_name(target) + " payload of " +
                               std::to_string(body_bytes) + " bytes in 256 attempts");
    pool.bodies.push_back(std::move(body));
    pool.expected.push_back(target);
  }
  return pool;
}

std::string check_reply_body(Action action, std::span<const uint8_t> request, std::span<const uint8_t> reply_body) {
  const auto payload = request.subspan(kHeaderBytes);
  switch (action) {
    case Action::kHash: {
      thread_local std::unique_ptr<Kernel> sha = one_kernel("sha256", Backend::kRef, 0);
      Bytes want;
      sha->process(request, want);
      if (want.size() == reply_body.size() && std::equal(want.begin(), want.end(), reply_body.begin())) return "";
      return "hash reply is not the SHA-256 of the request: " + describe_difference(want, Bytes(reply_body.begin(), reply_body.end()));
    }
    case Action::kCompress: {
      const std::string why = find_operator("compress").mismatch(payload, {}, Bytes(reply_body.begin(), reply_body.end()));
      return why.empty() ? "" : "compress reply: " + why;
    }
    case Action::kEcho:
      if (payload.size() == reply_body.size() && std::equal(payload.begin(), payload.end(), reply_body.begin())) return "";
      return "echo reply differs from the payload: " +
             describe_difference(Bytes(payload.begin(), payload.end()), Bytes(reply_body.begin(), reply_body.end()));
    case Action::kNone: break;
  }
  return "reply names no action";
}

}  // namespace dpukit::bench::e2e
