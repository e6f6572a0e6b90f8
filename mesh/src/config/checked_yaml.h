// Reading YAML strictly: a node carries its dotted path, so every error names
// where it is, and a mapping is read only through Fields, which first checks
// every key against the keys the caller implements and Envoy's own field list.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/bootstrap.h"

namespace dpukit::mesh::config {

class Fields;

// proto-JSON's Duration form: "5s", "0.250s" (for /config_dump).
std::string duration_json(Duration d);

// A YAML node (possibly absent) and the path that names it in errors.
class At {
 public:
  At(YAML::Node node, std::string path, int line) : node_(std::move(node)), path_(std::move(path)), line_(line) {}

  const std::string& path() const { return path_; }
  int line() const { return line_; }
  const YAML::Node& node() const { return node_; }  // as written (for a fingerprint of it)
  bool present() const { return node_.IsDefined() && !node_.IsNull(); }
  bool is_map() const { return node_.IsMap(); }
  // A typed_config's "@type" before its fields are checked ("" when there is none).
  std::string type_url() const {
    return node_.IsMap() && node_["@type"].IsScalar() ? node_["@type"].Scalar() : std::string();
  }
  [[noreturn]] void fail(const std::string& reason) const;

  // A scalar. Like Envoy, an unquoted number or boolean is not a string.
  std::string str() const;
  std::string nonempty_str() const;
  // An integer, as a YAML number or a numeric string (proto-JSON allows both).
  uint64_t integer(uint64_t min, uint64_t max) const;
  uint32_t u32(uint32_t min = 0, uint32_t max = std::numeric_limits<uint32_t>::max()) const {
    return static_cast<uint32_t>(integer(min, max));
  }
  bool boolean() const;
  // "5s", "0.25s", "1.000340s" or {seconds, nanos}; sub-millisecond parts round
  // up so that a nonzero duration never becomes 0 (which often means "disabled").
  Duration duration() const;
  std::vector<At> items() const;  // a list
  // A protobuf map<string, message> (e.g. RBAC's policies): its entries, keys
  // unique, in the order written.
  std::vector<std::pair<std::string, At>> mapping() const;
  std::vector<std::string> strings() const;
  // A mapping of the Envoy message `message` of which we implement `known`.
  Fields fields(std::string_view message, std::initializer_list<std::string_view> known) const;
  // A mapping keyed by extension names, of which we implement `known`.
  Fields extension_map(std::initializer_list<std::string_view> known) const;

  // An enum given by name: one of `values`; one of `unsupported` (Envoy's
  // other values) is refused by name.
  template <class E>
  E choice(std::initializer_list<std::pair<std::string_view, E>> values,
           std::initializer_list<std::string_view> unsupported) const {
    const std::string name = str();
    for (const auto& [value_name, value] : values)
      if (name == value_name) return value;
    for (std::string_view other : unsupported)
      if (name == other) fail(name + " is not supported by dpukit-mesh");
    std::string expected;
    for (const auto& value : values) expected += (expected.empty() ? "" : ", ") + std::string(value.first);
    fail("unknown value '" + name + "' (expected one of " + expected + ")");
  }

  // The value, or `fallback` when absent.
  std::string str_or(std::string fallback) const { return present() ? str() : std::move(fallback); }
  uint32_t u32_or(uint32_t fallback, uint32_t min = 0, uint32_t max = std::numeric_limits<uint32_t>::max()) const {
    return present() ? u32(min, max) : fallback;
  }
  bool boolean_or(bool fallback) const { return present() ? boolean() : fallback; }
  Duration duration_or(Duration fallback) const { return present() ? duration() : fallback; }

 private:
  std::string got() const;  // what the node is, for "expected X, got Y"
  Fields checked_map(const std::vector<std::string_view>* envoy_fields,
                     std::initializer_list<std::string_view> known) const;

  YAML::Node node_;
  std::string path_;
  int line_;  // 1-based; 0 when unknown
};

// A mapping whose keys have been checked.
class Fields {
 public:
  struct Entry {
    std::string key;
    YAML::Node value;
    int line;
  };
  Fields(At self, std::vector<Entry> entries) : self_(std::move(self)), entries_(std::move(entries)) {}

  const At& self() const { return self_; }
  bool has(std::string_view key) const { return (*this)[key].present(); }
  At operator[](std::string_view key) const;  // absent: an At that is not present()
  At required(std::string_view key) const;    // absent: "<path>.<key>: missing required field"
  // Which of the alternatives `keys` (a oneof) is given: at most one;
  // std::nullopt when none is given.
  std::optional<std::string_view> one_of(std::initializer_list<std::string_view> keys) const;
  // As one_of, and one of them is required.
  std::string_view exactly_one_of(std::initializer_list<std::string_view> keys) const;

 private:
  At self_;
  std::vector<Entry> entries_;
};

std::string child_path(const std::string& parent, std::string_view key);

}  // namespace dpukit::mesh::config
