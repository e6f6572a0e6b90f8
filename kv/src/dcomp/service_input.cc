#include "service_input.h"

#include <charconv>

namespace dpukit::kv::dcomp {

std::optional<std::string> serialized_field(const std::string& input, const std::string& name) {
  if (input.size() < 4) return std::nullopt;
  size_t i = 4, n = input.size();
  while (i < n) {
    size_t eq = input.find('=', i);
    if (eq == std::string::npos) return std::nullopt;
    std::string key = input.substr(i, eq - i);
    size_t j = eq + 1, end = j;
    int depth = 0;
    for (; end < n; ++end) {
      char c = input[end];
      if (c == '\\') {
        ++end;
        continue;
      }
      if (c == '{') ++depth;
      if (c == '}') --depth;
      if (c == ';' && depth == 0) break;
    }
    if (key == name) return input.substr(j, std::min(end, n) - j);
    i = end + 1;
  }
  return std::nullopt;
}

std::optional<int> output_level(const std::string& input) {
  std::optional<std::string> v = serialized_field(input, "output_level");
  if (!v) return std::nullopt;
  int level = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), level);
  if (ec != std::errc() || end != v->data() + v->size()) return std::nullopt;
  return level;
}

}  // namespace dpukit::kv::dcomp
