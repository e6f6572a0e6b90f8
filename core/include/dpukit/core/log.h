// Leveled logging to stderr. DPUKIT_LOG=debug|info|warn|error sets the level (default info).
#pragma once

#include <string>

namespace dpukit {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
void log(LogLevel level, const std::string& message);
inline void log_debug(const std::string& m) { log(LogLevel::kDebug, m); }
inline void log_info(const std::string& m) { log(LogLevel::kInfo, m); }
inline void log_warn(const std::string& m) { log(LogLevel::kWarn, m); }
inline void log_error(const std::string& m) { log(LogLevel::kError, m); }

}  // namespace dpukit
