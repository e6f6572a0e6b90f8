// Header names and field lists shared by the parser and the deparser.
#include <algorithm>

#include <boost/beast/http/status.hpp>

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

std::vector<std::string_view> HeaderList::connection_tokens() const {
  std::vector<std::string_view> tokens;
  for (const Header& h : fields) {
    if (!iequals(h.name, "connection")) continue;
    std::string_view list = h.value;
    for (size_t at = 0; at <= list.size();) {
      size_t comma = std::min(list.find(',', at), list.size());
      std::string_view token = list.substr(at, comma - at);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
      if (!token.empty()) tokens.push_back(token);
      at = comma + 1;
    }
  }
  return tokens;
}

void HeaderList::remove_connection_named() {
  std::vector<std::string> named;
  for (std::string_view t : connection_tokens())
    if (!iequals(t, "connection")) named.emplace_back(t);  // views die with the fields they point into
  for (const auto& n : named) remove(n);
}

std::string_view reason_phrase(unsigned status) {
  auto phrase = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  return {phrase.data(), phrase.size()};
}

void HeaderList::add(std::string name, std::string value) {
  fields.push_back(Header{std::move(name), std::move(value)});
}

void HeaderList::set(std::string name, std::string value) {
  remove(name);
  add(std::move(name), std::move(value));
}

}  // namespace dpukit::mesh::http
