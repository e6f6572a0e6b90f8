// What the configuration tests share: a bootstrap with one piece of text
// replaced, and the check that a bootstrap is refused at a path.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "config/bootstrap.h"

namespace dpukit::mesh::config {

// `text` with the first `from` replaced by `to` (a test failure when `from`
// is not in it); `text` itself when `from` is empty.
inline std::string replaced_once(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// The refusal of `text`: its path, and that its message holds `reason`.
inline void expect_config_refused(const std::string& text, const std::string& path, const std::string& reason) {
  try {
    parse_bootstrap(text);
    ADD_FAILURE() << "accepted; expected " << path << ": " << reason;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), path) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

}  // namespace dpukit::mesh::config
