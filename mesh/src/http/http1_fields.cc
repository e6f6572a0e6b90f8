// Header names and field lists shared by the parser and the deparser.
#include <algorithm>

#include "http/http1.h"

namespace dpukit::mesh::http {

namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c | 0x20) : c; }

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<std::string_view> HeaderList::get(std::string_view name) const {
  for (const Header& h : fields) {
    if (iequals(h.name, name)) return std::string_view(h.value);
  }
  return std::nullopt;
}

size_t HeaderList::count(std::string_view name) const {
  return static_cast<size_t>(
      std::count_if(fields.begin(), fields.end(), [&](const Header& h) { return iequals(h.name, name); }));
}

void HeaderList::remove(std::string_view name) {
  std::erase_if(fields, [&](const Header& h) { return iequals(h.name, name); });
}

void HeaderList::add(std::string name, std::string value) {
  fields.push_back(Header{std::move(name), std::move(value)});
}

void HeaderList::set(std::string name, std::string value) {
  remove(name);
  add(std::move(name), std::move(value));
}

}  // namespace dpukit::mesh::http
