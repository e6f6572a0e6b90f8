// Reading a small text file whole (/proc, cgroup files): private to core.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace dpukit {

// The file's text into `out`; false (out untouched) if it cannot be opened.
inline bool read_text_file(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

}  // namespace dpukit
