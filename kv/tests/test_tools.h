// Helpers the kv tests share: where dpukit-kvbench is, and a file's text.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dpukit/core/process.h"

namespace dpukit::kv::test_tools {

// $DPUKIT_KVBENCH, else the one the build names, else dpukit-kvbench beside
// this test binary.
inline std::string kvbench() {
  if (const char* env = std::getenv("DPUKIT_KVBENCH")) return env;
#ifdef DPUKIT_KVBENCH_TOOL
  return DPUKIT_KVBENCH_TOOL;
#else
  return (own_executable().parent_path() / "dpukit-kvbench").string();
#endif
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dpukit::kv::test_tools
