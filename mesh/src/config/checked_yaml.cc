#include "config/checked_yaml.h"

#include <algorithm>
#include <charconv>
#include <regex>
#include <stdexcept>

#include "config/envoy_fields.h"

namespace dpukit::mesh::config {
namespace {

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

// yaml-cpp tags a quoted scalar "!" and a plain one "?"; Envoy (like YAML's
// core schema) reads a plain `true` or `12` as a boolean or a number.
bool plain(const YAML::Node& node) { return node.Tag() != "!"; }

bool looks_boolean(const YAML::Node& node) {
  bool value;
  return plain(node) && YAML::convert<bool>::decode(node, value);
}

bool looks_numeric(const YAML::Node& node) {
  double value;
  return plain(node) && YAML::convert<double>::decode(node, value);
}

bool contains(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// stat_prefix for statPrefix: Envoy also takes proto-JSON's lowerCamelCase
// names; we take only the snake_case ones and say which is meant.
std::string snake_case(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c >= 'A' && c <= 'Z') {
      out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

void At::fail(const std::string& reason) const {
  if (line_ > 0) throw ConfigError(path_, line_, reason);
  throw ConfigError(path_, reason);
}

std::string At::got() const {
  switch (node_.Type()) {
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node_.Scalar() + "'";
    default: return "nothing";
  }
}

std::string At::str() const {
  if (!node_.IsScalar()) fail("expected a string, got " + got());
  if (looks_boolean(node_) || looks_numeric(node_)) fail("expected a string, got " + got() + " (quote it)");
  return node_.Scalar();
}

std::string At::nonempty_str() const {
  std::string value = str();
  if (value.empty()) fail("must not be empty");
  return value;
}

uint64_t At::integer(uint64_t min, uint64_t max) const {
  if (!node_.IsScalar() || looks_boolean(node_)) fail("expected an integer, got " + got());
  const std::string& text = node_.Scalar();
  if (!text.empty() && text[0] == '-') fail("expected a non-negative integer, got " + got());
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error == std::errc::invalid_argument || end != text.data() + text.size())
    fail("expected an integer, got " + got());
  if (error == std::errc::result_out_of_range || value < min || value > max)
    fail("must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + text);
  return value;
}

bool At::boolean() const {
  bool value = false;
  if (!node_.IsScalar() || !plain(node_) || !YAML::convert<bool>::decode(node_, value))
    fail("expected true or false, got " + got());
  return value;
}

std::string duration_json(Duration d) {
  const auto ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03llds", static_cast<long long>(ms / 1000), static_cast<long long>(ms % 1000));
  return buf;
}

Duration At::duration() const {
  // Envoy's limit for google.protobuf.Duration: 10,000 years.
  constexpr uint64_t kMaxSeconds = 315'576'000'000;
  uint64_t seconds = 0, nanos = 0;
  if (node_.IsMap()) {
    const Fields f = fields("google.protobuf.Duration", {"seconds", "nanos"});
    if (!f.has("seconds") && !f.has("nanos")) fail("expected seconds and/or nanos");
    seconds = f["seconds"].present() ? f["seconds"].integer(0, kMaxSeconds) : 0;
    nanos = f["nanos"].present() ? f["nanos"].integer(0, 999'999'999) : 0;
  } else {
    static const std::regex kForm(R"(([0-9]+)(\.([0-9]{1,9}))?s)");
    std::smatch m;
    const std::string text = node_.IsScalar() ? node_.Scalar() : "";
    if (!node_.IsScalar() || !std::regex_match(text, m, kForm)) {
      if (!text.empty() && text[0] == '-') fail("a duration must not be negative, got " + got());
      fail("expected a duration such as \"5s\" or \"0.25s\", got " + got());
    }
    if (m[1].length() > 12 || std::stoull(m[1]) > kMaxSeconds) fail("duration is out of range: " + text);
    seconds = std::stoull(m[1]);
    if (m[3].matched) nanos = std::stoull(m[3].str() + std::string(9 - m[3].length(), '0'));
  }
  return Duration(seconds * 1000 + (nanos + 999'999) / 1'000'000);
}

std::vector<At> At::items() const {
  if (!node_.IsSequence()) fail("expected a list, got " + got());
  std::vector<At> out;
  for (std::size_t i = 0; i < node_.size(); ++i)
    out.emplace_back(node_[i], path_ + "[" + std::to_string(i) + "]", line_of(node_[i], line_));
  return out;
}

std::vector<std::pair<std::string, At>> At::mapping() const {
  if (!node_.IsMap()) fail("expected a mapping, got " + got());
  std::vector<std::pair<std::string, At>> out;
  for (const auto& kv : node_) {
    const int line = line_of(kv.first, line_);
    const At key(kv.first, path_, line);
    if (!kv.first.IsScalar()) key.fail("expected a key, got " + key.got());
    const std::string name = kv.first.Scalar();
    At at(kv.second, child_path(path_, name), line);
    for (const auto& seen : out)
      if (seen.first == name) at.fail("duplicate key (first on line " + std::to_string(seen.second.line()) + ")");
    out.emplace_back(name, std::move(at));
  }
  return out;
}

std::vector<std::string> At::strings() const {
  std::vector<std::string> out;
  for (const At& item : items()) out.push_back(item.str());
  return out;
}

Fields At::fields(std::string_view message, std::initializer_list<std::string_view> known) const {
  const std::vector<std::string_view>* envoy = envoy_fields(message);
  if (envoy == nullptr) throw std::logic_error("no Envoy field list for " + std::string(message));
  for (std::string_view key : known)
    if (!contains(*envoy, key)) throw std::logic_error(std::string(key) + " is not a field of " + std::string(message));
  return checked_map(envoy, known);
}

Fields At::extension_map(std::initializer_list<std::string_view> known) const { return checked_map(nullptr, known); }

// envoy_fields == nullptr: any key may name an Envoy extension, so every key
// we do not implement is "not supported" rather than "unknown".
Fields At::checked_map(const std::vector<std::string_view>* envoy_fields,
                       std::initializer_list<std::string_view> known) const {
  if (!node_.IsMap()) fail("expected a mapping, got " + got());
  std::vector<Fields::Entry> entries;
  for (const auto& kv : node_) {
    const int line = line_of(kv.first, line_);
    const At key(kv.first, path_, line);
    if (!kv.first.IsScalar()) key.fail("expected a field name, got " + key.got());
    const std::string name = kv.first.Scalar();
    const At at(kv.second, child_path(path_, name), line);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      if (envoy_fields == nullptr || contains(*envoy_fields, name)) at.fail(name + " is not supported by dpukit-mesh");
      const std::string snake = snake_case(name);
      if (snake != name && contains(*envoy_fields, snake)) at.fail("unknown field (write " + snake + ")");
      at.fail("unknown field");
    }
    for (const Fields::Entry& seen : entries)
      if (seen.key == name) at.fail("duplicate field (first on line " + std::to_string(seen.line) + ")");
    entries.push_back({name, kv.second, line});
  }
  return Fields(*this, std::move(entries));
}

At Fields::operator[](std::string_view key) const {
  for (const Entry& entry : entries_)
    if (entry.key == key) return At(entry.value, child_path(self_.path(), key), entry.line);
  return At(YAML::Node(YAML::NodeType::Undefined), child_path(self_.path(), key), self_.line());
}

At Fields::required(std::string_view key) const {
  At at = (*this)[key];
  if (!at.present()) at.fail("missing required field");
  return at;
}

std::optional<std::string_view> Fields::one_of(std::initializer_list<std::string_view> keys) const {
  std::optional<std::string_view> given;
  for (std::string_view key : keys) {
    if (!has(key)) continue;
    if (given) self_.fail(std::string(*given) + " and " + std::string(key) + " both given (only one is allowed)");
    given = key;
  }
  return given;
}

std::string_view Fields::exactly_one_of(std::initializer_list<std::string_view> keys) const {
  if (auto given = one_of(keys)) return *given;
  std::string names;
  for (std::string_view key : keys) names += (names.empty() ? "" : ", ") + std::string(key);
  self_.fail("one of " + names + " is required");
}

}  // namespace dpukit::mesh::config
