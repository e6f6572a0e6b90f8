#include "modules/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "modules/rbac.h"

namespace dpukit::mesh {

namespace {

using Op = config::FormatPiece::Op;

constexpr size_t kFlushBytes = 64 * 1024;              // Envoy's min_flush_size
constexpr size_t kMaxBufferedBytes = 16 * 1024 * 1024;  // past this a file that does not take its lines drops new ones

struct FlagName {
  uint32_t bit;
  const char* short_name;
  const char* long_name;
};
constexpr std::array<FlagName, 14> kFlagNames{{
    {response_flag::kNoHealthyUpstream, "UH", "NoHealthyUpstream"},
    {response_flag::kUpstreamRequestTimeout, "UT", "UpstreamRequestTimeout"},
    {response_flag::kLocalReset, "LR", "LocalReset"},
    {response_flag::kUpstreamRemoteReset, "UR", "UpstreamRemoteReset"},
    {response_flag::kUpstreamConnectionFailure, "UF", "UpstreamConnectionFailure"},
    {response_flag::kUpstreamConnectionTermination, "UC", "UpstreamConnectionTermination"},
    {response_flag::kUpstreamOverflow, "UO", "UpstreamOverflow"},
    {response_flag::kNoRouteFound, "NR", "NoRouteFound"},
    {response_flag::kRateLimited, "RL", "RateLimited"},
    {response_flag::kDownstreamConnectionTermination, "DC", "DownstreamConnectionTermination"},
    {response_flag::kUpstreamRetryLimitExceeded, "URX", "UpstreamRetryLimitExceeded"},
    {response_flag::kStreamIdleTimeout, "SI", "StreamIdleTimeout"},
    {response_flag::kDownstreamProtocolError, "DPE", "DownstreamProtocolError"},
    {response_flag::kUpstreamProtocolError, "UPE", "UpstreamProtocolError"},
}};

}  // namespace

std::string response_flags_text(uint32_t flags, bool long_names) {
  std::string out;
  for (const FlagName& f : kFlagNames) {
    if (!(flags & f.bit)) continue;
    if (!out.empty()) out += ',';
    out += long_names ? f.long_name : f.short_name;
  }
  return out.empty() ? "-" : out;
}

// ---- the files and their flusher ----

class AccessLogFile {
 public:
  AccessLogFile(std::string path, int fd, bool reopenable) : path_(std::move(path)), fd_(fd), reopenable_(reopenable) {}
  // Runs on the flusher's thread (AccessLogFiles::retire), or at exit.
  ~AccessLogFile() {
    flush();
    if (reopenable_ && fd_ >= 0) ::close(fd_);
  }
  const std::string& path() const { return path_; }

  // True when the buffer now holds enough to be written at once.
  bool append(std::string_view line, std::atomic<uint64_t>& dropped) {
    std::lock_guard<std::mutex> lock(buffer_mu_);
    if (buffer_.size() + line.size() > kMaxBufferedBytes) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    buffer_.append(line);
    return buffer_.size() >= kFlushBytes;
  }

  // Writes out what is buffered (the flusher's thread, or at exit). False: a write failed.
  bool flush() {
    std::lock_guard<std::mutex> write_lock(write_mu_);
    std::string out;
    {
      std::lock_guard<std::mutex> lock(buffer_mu_);
      out.swap(buffer_);
    }
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::write(fd_, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // A full disk or a closed pipe: these lines are lost (the proxy goes on serving), and it is said once per failure.
        log_warn("mesh access log " + path_ + ": write failed (" + std::strerror(errno) + "): " +
                 std::to_string(out.size() - done) + " bytes of lines dropped");
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Opens the path again (logrotate renamed the old file); false when it cannot.
  bool reopen() {
    if (!reopenable_) return true;
    flush();
    int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      log_error("mesh access log " + path_ + ": cannot reopen (" + std::strerror(errno) + "): still writing the old file");
      return false;
    }
    std::lock_guard<std::mutex> write_lock(write_mu_);
    ::close(fd_);
    fd_ = fd;
    return true;
  }

 private:
  std::string path_;
  int fd_;
  bool reopenable_;
  std::mutex buffer_mu_, write_mu_;
  std::string buffer_;
};

namespace {

// Every access log file of the process (one per path, shared by listeners and
// workers, kept across configurations), and the thread that writes them out.
class AccessLogFiles {
 public:
  ~AccessLogFiles() { stop(); }

  std::shared_ptr<AccessLogFile> open(const config::AccessLog& cfg) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = cfg.sink == config::AccessLog::Sink::kFile ? cfg.path
                            : cfg.sink == config::AccessLog::Sink::kStdout ? std::string("<stdout>")
                                                                           : std::string("<stderr>");
    if (auto it = files_.find(key); it != files_.end())
      if (auto f = it->second.lock()) return f;
    AccessLogFile* made;
    if (cfg.sink == config::AccessLog::Sink::kFile) {
      int fd = ::open(cfg.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) throw std::runtime_error("access log " + cfg.path + ": cannot open: " + std::strerror(errno));
      made = new AccessLogFile(cfg.path, fd, true);
    } else {
      made = new AccessLogFile(key, cfg.sink == config::AccessLog::Sink::kStdout ? 1 : 2, false);
    }
    std::shared_ptr<AccessLogFile> f(made, [this](AccessLogFile* gone) { retire(gone); });
    files_[key] = f;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    return f;
  }

  void append(AccessLogFile& f, std::string_view line) {
    if (f.append(line, dropped_)) {
      std::lock_guard<std::mutex> lock(mu_);
      urgent_ = true;
      cv_.notify_one();
    }
  }

  void flush_all(bool by_timer = false) {
    std::vector<std::unique_ptr<AccessLogFile>> retired;
    {
      std::lock_guard<std::mutex> lock(mu_);
      retired.swap(retired_);
    }
    // Their lines are older than any a successor of the same path holds: written out first.
    for (const auto& f : retired) (f->flush() ? write_completed_ : write_failed_).fetch_add(1, std::memory_order_relaxed);
    retired.clear();
    for (const auto& f : live()) (f->flush() ? write_completed_ : write_failed_).fetch_add(1, std::memory_order_relaxed);
    if (by_timer) flushed_by_timer_.fetch_add(1, std::memory_order_relaxed);
  }

  void reopen_all() {
    for (const auto& f : live())
      if (!f->reopen()) reopen_failed_.fetch_add(1, std::memory_order_relaxed);
  }

  void set_interval(std::chrono::milliseconds interval) {
    std::lock_guard<std::mutex> lock(mu_);
    interval_ = interval;
    retimed_ = true;
    cv_.notify_one();
  }

  // No configuration names `f` any more. The last one may be let go of on a
  // worker, which must not wait for a disk: the flusher writes out what `f`
  // holds and closes it.
  void retire(AccessLogFile* f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (thread_.joinable() && !stopping_) {
        retired_.emplace_back(f);
        urgent_ = true;
        cv_.notify_one();
        return;
      }
    }
    delete f;  // at exit: the flusher has stopped
  }

  AccessLogCounters counters() const {
    return {write_completed_.load(), write_failed_.load(), dropped_.load(), reopen_failed_.load(),
            flushed_by_timer_.load()};
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    flush_all();
  }

 private:
  std::vector<std::shared_ptr<AccessLogFile>> live() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<AccessLogFile>> out;
    for (auto it = files_.begin(); it != files_.end();) {
      if (auto f = it->second.lock()) {
        out.push_back(std::move(f));
        ++it;
      } else {
        it = files_.erase(it);  // no configuration names it any more
      }
    }
    return out;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    auto last = std::chrono::steady_clock::now();
    while (!stopping_) {
      // Until the interval after the last write-out (a new interval counts at once), or a full buffer.
      const bool woken = cv_.wait_until(lock, last + interval_, [this] { return stopping_ || urgent_ || retimed_; });
      if (stopping_) break;
      if (std::exchange(retimed_, false) && !urgent_) continue;
      urgent_ = false;
      last = std::chrono::steady_clock::now();
      lock.unlock();
      flush_all(!woken);
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::weak_ptr<AccessLogFile>> files_;
  std::vector<std::unique_ptr<AccessLogFile>> retired_;  // for the flusher to write out and close
  std::chrono::milliseconds interval_{10000};  // Envoy's --file-flush-interval-msec default
  bool urgent_ = false, stopping_ = false, retimed_ = false;
  std::atomic<uint64_t> write_completed_{0}, write_failed_{0}, dropped_{0}, reopen_failed_{0}, flushed_by_timer_{0};
  std::thread thread_;
};

AccessLogFiles& files() {
  static AccessLogFiles instance;
  return instance;
}

// ---- the operators' values ----

// An operator's value: absent ("-" in text, null in JSON), a number, or text.
struct Value {
  bool present = false, number = false;
  uint64_t n = 0;
  std::string s;
  static Value none() { return {}; }
  static Value num(uint64_t v) { return {true, true, v, {}}; }
  static Value text(std::string v) { return {true, false, 0, std::move(v)}; }
  static Value text_or_none(std::string_view v) { return v.empty() ? none() : text(std::string(v)); }
  std::string str() const { return number ? std::to_string(n) : s; }
};

std::string with_port(const std::string& ip, uint32_t port) {
  if (ip.empty()) return "";
  return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

std::optional<std::string_view> request_header(const http::RequestHead& r, const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name[0] == ':') {
    if (name == ":method") return std::string_view(r.method);
    if (name == ":path") return std::string_view(r.target);
    if (name == ":authority") return r.host.empty() ? std::nullopt : std::optional<std::string_view>(r.host);
    if (name == ":scheme") return std::string_view("http");
    return std::nullopt;
  }
  return r.headers.get(name);
}

Value header_value(const config::FormatPiece& p, const StreamInfo& info) {
  std::optional<std::string_view> v;
  auto lookup = [&](const std::string& name) -> std::optional<std::string_view> {
    if (p.op == Op::kReq) return info.request ? request_header(*info.request, name) : std::nullopt;
    const http::HeaderList* list = p.op == Op::kResp ? info.response_headers : info.response_trailers;
    return list ? list->get(name) : std::nullopt;
  };
  v = lookup(p.text);
  if (!v && !p.alt.empty()) v = lookup(p.alt);
  if (!v) return Value::none();
  std::string_view s = *v;
  if (p.max_length && s.size() > *p.max_length) s = s.substr(0, *p.max_length);
  return Value::text(std::string(s));
}

// START_TIME: Envoy's default (ISO 8601, milliseconds, UTC), or a strftime
// format with %s (seconds since the epoch) and %Nf (N digits of the second's fraction).
std::string start_time_text(const std::string& fmt, std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto since = t.time_since_epoch();
  const int64_t secs = duration_cast<seconds>(since).count();
  const int64_t nanos = duration_cast<nanoseconds>(since).count() - secs * 1000000000;
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  char buf[128];
  if (fmt.empty()) {
    // Lines of one second share its text: formatted once per thread and second.
    thread_local int64_t cached_secs = -1;
    thread_local char cached[32];
    if (secs != cached_secs) {
      ::gmtime_r(&tt, &tm);
      std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
      cached_secs = secs;
    }
    std::snprintf(buf, sizeof buf, "%s.%03dZ", cached, static_cast<int>(nanos / 1000000));
    return buf;
  }
  ::gmtime_r(&tt, &tm);
  std::string expanded;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      expanded += fmt[i];
      continue;
    }
    char c = fmt[i + 1];
    if (c == 's') {
      expanded += std::to_string(secs);
      ++i;
    } else if (c == 'f' || (c >= '1' && c <= '9' && i + 2 < fmt.size() && fmt[i + 2] == 'f')) {
      int digits = c == 'f' ? 9 : c - '0';
      char frac[16];
      std::snprintf(frac, sizeof frac, "%09lld", static_cast<long long>(nanos));
      expanded.append(frac, static_cast<size_t>(digits));
      i += c == 'f' ? 1 : 2;
    } else {
      expanded += fmt[i];
      expanded += c;
      ++i;
    }
  }
  size_t n = std::strftime(buf, sizeof buf, expanded.c_str(), &tm);
  return n ? std::string(buf, n) : expanded;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

Value evaluate(const config::FormatPiece& p, const StreamInfo& info, int64_t end_ns) {
  const DownstreamFacts* d = info.downstream;
  switch (p.op) {
    case Op::kText: return Value::text(p.text);
    case Op::kStartTime: return Value::text(start_time_text(p.text, info.start_time));
    case Op::kReq:
    case Op::kResp:
    case Op::kTrailer: return header_value(p, info);
    case Op::kProtocol: return Value::text_or_none(info.protocol);
    case Op::kResponseCode: return info.protocol.empty() ? Value::num(0) : Value::num(info.response_code);
    case Op::kResponseCodeDetails: return Value::text_or_none(info.response_code_details);
    case Op::kConnectionTerminationDetails: return Value::text_or_none(info.connection_termination_details);
    case Op::kResponseFlags: return Value::text(response_flags_text(info.response_flags));
    case Op::kResponseFlagsLong: return Value::text(response_flags_text(info.response_flags, true));
    case Op::kBytesReceived: return Value::num(info.bytes_received);
    case Op::kBytesSent: return Value::num(info.bytes_sent);
    case Op::kDuration: return Value::num(static_cast<uint64_t>(std::max<int64_t>(0, end_ns - info.start_ns) / 1000000));
    case Op::kUpstreamHost: return Value::text_or_none(info.upstream_host);
    case Op::kUpstreamCluster:
    case Op::kUpstreamClusterRaw: return Value::text_or_none(info.upstream_cluster);
    case Op::kUpstreamLocalAddress: return Value::text_or_none(info.upstream_local_address);
    case Op::kUpstreamTransportFailureReason: return Value::text_or_none(info.upstream_transport_failure_reason);
    case Op::kUpstreamRequestAttemptCount: return Value::num(info.attempt_count);
    case Op::kDownstreamRemoteAddress:
    case Op::kDownstreamDirectRemoteAddress: return d ? Value::text_or_none(with_port(d->peer_ip, d->peer_port)) : Value::none();
    case Op::kDownstreamRemoteAddressWithoutPort:
    case Op::kDownstreamDirectRemoteAddressWithoutPort: return d ? Value::text_or_none(d->peer_ip) : Value::none();
    case Op::kDownstreamRemotePort: return d && !d->peer_ip.empty() ? Value::num(d->peer_port) : Value::none();
    case Op::kDownstreamLocalAddress: return d ? Value::text_or_none(with_port(d->local_ip, d->local_port)) : Value::none();
    case Op::kDownstreamLocalAddressWithoutPort: return d ? Value::text_or_none(d->local_ip) : Value::none();
    case Op::kDownstreamLocalPort: return d && !d->local_ip.empty() ? Value::num(d->local_port) : Value::none();
    case Op::kDownstreamPeerUriSan: return d ? Value::text_or_none(join(d->uri_sans)) : Value::none();
    case Op::kDownstreamPeerSubject: return d ? Value::text_or_none(d->subject) : Value::none();
    case Op::kDownstreamTlsVersion: return d ? Value::text_or_none(d->tls_version) : Value::none();
    case Op::kRequestedServerName: return d ? Value::text_or_none(d->sni) : Value::none();
    case Op::kRouteName: return Value::text_or_none(info.route_name);
  }
  return Value::none();
}

bool names_identity(const std::vector<config::FormatPiece>& pieces) {
  for (const auto& p : pieces) {
    switch (p.op) {
      case Op::kDownstreamLocalAddress:
      case Op::kDownstreamLocalAddressWithoutPort:
      case Op::kDownstreamLocalPort:
      case Op::kDownstreamPeerUriSan:
      case Op::kDownstreamPeerSubject:
      case Op::kDownstreamTlsVersion:
      case Op::kRequestedServerName: return true;
      default: break;
    }
  }
  return false;
}

void collect_leaves(const nlohmann::json& node, std::vector<std::vector<config::FormatPiece>>& out) {
  for (const auto& [key, value] : node.items()) {
    if (value.is_object()) collect_leaves(value, out);
    else out.push_back(config::compile_format(value.get<std::string>()));
  }
}

}  // namespace

// ---- AccessLogger ----

AccessLogger::AccessLogger(const config::AccessLog& cfg) : omit_empty_(cfg.omit_empty_values) {
  const auto note = [this](const std::vector<config::FormatPiece>& pieces) {
    reads_identity_ = reads_identity_ || names_identity(pieces);
    for (const auto& p : pieces)
      if (p.op == Op::kResp || p.op == Op::kTrailer)
        for (const std::string* name : {&p.text, &p.alt})
          if (!name->empty() && std::find(response_headers_.begin(), response_headers_.end(), *name) ==
                                    response_headers_.end())
            response_headers_.push_back(*name);
  };
  if (cfg.json_format) {
    json_ = *cfg.json_format;
    collect_leaves(*json_, json_pieces_);
    for (const auto& pieces : json_pieces_) note(pieces);
  } else {
    text_ = config::compile_format(cfg.text_format ? *cfg.text_format : config::kDefaultAccessLogFormat);
    note(text_);
  }
  file_ = files().open(cfg);
}

AccessLogger::~AccessLogger() = default;

void AccessLogger::format_json(const nlohmann::json& tmpl, const StreamInfo& info, int64_t end_ns,
                               nlohmann::json& out) const {
  // Leaves are visited in the template's (sorted) order, as collect_leaves compiled them.
  struct Walker {
    const AccessLogger& self;
    const StreamInfo& info;
    int64_t end_ns;
    size_t next = 0;
    void walk(const nlohmann::json& t, nlohmann::json& o) {
      o = nlohmann::json::object();
      for (const auto& [key, value] : t.items()) {
        if (value.is_object()) {
          nlohmann::json child;
          walk(value, child);
          if (!(self.omit_empty_ && child.empty())) o[key] = std::move(child);
          continue;
        }
        const auto& pieces = self.json_pieces_[next++];
        if (pieces.size() == 1 && pieces[0].op != Op::kText) {  // one operator: its value, typed
          Value v = evaluate(pieces[0], info, end_ns);
          if (!v.present) {
            if (!self.omit_empty_) o[key] = nullptr;
          } else if (v.number) {
            o[key] = v.n;
          } else {
            o[key] = std::move(v.s);
          }
          continue;
        }
        std::string s;
        for (const auto& p : pieces) {
          Value v = evaluate(p, info, end_ns);
          s += v.present ? v.str() : (self.omit_empty_ ? "" : "-");
        }
        o[key] = std::move(s);
      }
    }
  } walker{*this, info, end_ns};
  walker.walk(tmpl, out);
}

std::string AccessLogger::format(const StreamInfo& info, int64_t end_ns) const {
  if (json_) {
    nlohmann::json out;
    format_json(*json_, info, end_ns, out);
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string line;
  for (const auto& p : text_) {
    if (p.op == Op::kText) {
      line += p.text;
      continue;
    }
    Value v = evaluate(p, info, end_ns);
    line += v.present ? v.str() : (omit_empty_ ? "" : "-");
  }
  return line;
}

void AccessLogger::log(const StreamInfo& info, int64_t end_ns) const { files().append(*file_, format(info, end_ns)); }

void flush_access_logs() { files().flush_all(); }
void set_access_log_flush_interval(std::chrono::milliseconds interval) { files().set_interval(interval); }
void reopen_access_logs() { files().reopen_all(); }
AccessLogCounters access_log_counters() { return files().counters(); }

}  // namespace dpukit::mesh
