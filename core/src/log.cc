#include "dpukit/core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dpukit {

namespace {
LogLevel threshold() {
  static const LogLevel level = [] {
    const char* v = std::getenv("DPUKIT_LOG");
    if (!v) return LogLevel::kInfo;
    if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
    if (!std::strcmp(v, "warn")) return LogLevel::kWarn;
    if (!std::strcmp(v, "error")) return LogLevel::kError;
    return LogLevel::kInfo;
  }();
  return level;
}
}  // namespace

void log(LogLevel level, const std::string& message) {
  if (level < threshold()) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fprintf(stderr, "dpukit: %s: %s\n", names[static_cast<int>(level)], message.c_str());
}

}  // namespace dpukit
