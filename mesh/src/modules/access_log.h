// Access logs (envoy.access_loggers.file, .stdout and .stderr): a line per
// request (the connection manager) or per connection (tcp_proxy), in Envoy's
// format language (config/access_log_format.h), as text or JSON.
//
// Off the request path, as Envoy's: the worker formats its line and appends
// it to the file's buffer; a flusher thread writes the buffers out every
// flush interval (Envoy's --file-flush-interval-msec, 10 s by default) or
// as soon as one holds 64 KiB. reopen_access_logs() (SIGUSR1, or POST
// /reopen_logs) reopens every file by its path, for logrotate.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/access_log_format.h"
#include "config/bootstrap.h"
#include "http/http1.h"

namespace dpukit::mesh {

struct DownstreamFacts;  // modules/rbac.h

// Envoy's response flags, in the order %RESPONSE_FLAGS% lists them.
namespace response_flag {
inline constexpr uint32_t kNoHealthyUpstream = 1u << 1;            // UH
inline constexpr uint32_t kUpstreamRequestTimeout = 1u << 2;       // UT
inline constexpr uint32_t kLocalReset = 1u << 3;                   // LR
inline constexpr uint32_t kUpstreamRemoteReset = 1u << 4;          // UR
inline constexpr uint32_t kUpstreamConnectionFailure = 1u << 5;    // UF
inline constexpr uint32_t kUpstreamConnectionTermination = 1u << 6;  // UC
inline constexpr uint32_t kUpstreamOverflow = 1u << 7;             // UO
inline constexpr uint32_t kNoRouteFound = 1u << 8;                 // NR
inline constexpr uint32_t kRateLimited = 1u << 11;                 // RL
inline constexpr uint32_t kDownstreamConnectionTermination = 1u << 14;  // DC
inline constexpr uint32_t kUpstreamRetryLimitExceeded = 1u << 15;  // URX
inline constexpr uint32_t kStreamIdleTimeout = 1u << 16;           // SI
inline constexpr uint32_t kDownstreamProtocolError = 1u << 18;     // DPE
inline constexpr uint32_t kUpstreamProtocolError = 1u << 23;       // UPE
}  // namespace response_flag

// "UF,URX" (Envoy's short names, in its order) or "-"; `long_names`: "UpstreamConnectionFailure,...".
std::string response_flags_text(uint32_t flags, bool long_names = false);

// What a line can name: the part of Envoy's StreamInfo its operators read.
struct StreamInfo {
  std::chrono::system_clock::time_point start_time = std::chrono::system_clock::now();
  int64_t start_ns = 0;                          // monotonic, with start_time
  const http::RequestHead* request = nullptr;    // as routed; nullptr: none was parsed (or a TCP connection)
  const http::HeaderList* response_headers = nullptr;
  const http::HeaderList* response_trailers = nullptr;
  std::string_view protocol;                     // "HTTP/1.1", "HTTP/1.0", "HTTP/2"; "" for TCP
  unsigned response_code = 0;
  uint32_t response_flags = 0;
  std::string response_code_details;             // "via_upstream", "route_not_found", ...
  std::string connection_termination_details;
  uint64_t bytes_received = 0, bytes_sent = 0;   // body bytes (HTTP) or connection bytes (TCP)
  std::string_view upstream_cluster;
  std::string upstream_host;                     // "ip:port" of the chosen host
  std::string upstream_local_address;
  std::string upstream_transport_failure_reason;
  uint32_t attempt_count = 0;
  std::string_view route_name;
  const DownstreamFacts* downstream = nullptr;
};

class AccessLogFile;

// One access_log entry: its format and its file.
class AccessLogger {
 public:
  // Opens the file (a file it cannot open is a std::runtime_error naming it).
  explicit AccessLogger(const config::AccessLog& cfg);
  ~AccessLogger();
  // Formats `info` on this thread and hands the line to the file's buffer.
  void log(const StreamInfo& info, int64_t end_ns) const;
  // The line alone.
  std::string format(const StreamInfo& info, int64_t end_ns) const;
  // Whether the format names the connection's local address, TLS facts or peer certificate.
  bool reads_identity() const { return reads_identity_; }
  // The response headers and trailers its %RESP(...)% / %TRAILER(...)% name (lowercase): all a stream keeps of them.
  const std::vector<std::string>& response_headers() const { return response_headers_; }

 private:
  void format_json(const nlohmann::json& tmpl, const StreamInfo& info, int64_t end_ns, nlohmann::json& out) const;

  std::vector<config::FormatPiece> text_;
  std::optional<nlohmann::json> json_;  // the template; its leaves compiled in json_pieces_
  std::vector<std::vector<config::FormatPiece>> json_pieces_;
  bool omit_empty_ = false, reads_identity_ = false;
  std::vector<std::string> response_headers_;
  std::shared_ptr<AccessLogFile> file_;
};

// Every open access log file written out now (at exit), and the flush interval.
void flush_access_logs();
void set_access_log_flush_interval(std::chrono::milliseconds interval);
// Reopens every file by its path (logrotate moved it): a file that cannot
// be reopened keeps being written where it was, and the failure is logged.
void reopen_access_logs();

// Lines dropped because a file's buffer was full (a disk that does not take them), and failed writes.
struct AccessLogCounters {
  uint64_t write_completed = 0, write_failed = 0, dropped_lines = 0, reopen_failed = 0, flushed_by_timer = 0;
};
AccessLogCounters access_log_counters();

}  // namespace dpukit::mesh
