// The access log's format language and lines: Envoy's operators read into
// pieces, a request's facts rendered as text and as typed JSON, and the file
// written out by the flusher, reopened by its path (logrotate), and written
// out by the flusher too when the last configuration naming it goes.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "config/access_log_format.h"
#include "modules/access_log.h"
#include "modules/rbac.h"

namespace dpukit::mesh {
namespace {

using config::FormatPiece;
using Op = FormatPiece::Op;
using namespace std::chrono_literals;

TEST(AccessLogFormat, ReadsOperatorsParametersAndLengths) {
  const auto p = config::compile_format("a %% %REQ(X-Original?:PATH):5% [%START_TIME(%s.%3f)%] %RESPONSE_CODE%\n");
  ASSERT_EQ(p.size(), 7u);
  EXPECT_EQ(p[0].text, "a % ");
  EXPECT_EQ(p[1].op, Op::kReq);
  EXPECT_EQ(p[1].text, "x-original");
  EXPECT_EQ(p[1].alt, ":path");
  EXPECT_EQ(p[1].max_length, 5u);
  EXPECT_EQ(p[3].op, Op::kStartTime);
  EXPECT_EQ(p[3].text, "%s.%3f");
  EXPECT_EQ(p[5].op, Op::kResponseCode);
  EXPECT_TRUE(p[5].numeric());
  EXPECT_EQ(p[6].text, "\n");
}

TEST(AccessLogFormat, RefusesWhatEnvoyRefusesAndWhatIsNotFilled) {
  const auto reason = [](const char* f) {
    try {
      config::compile_format(f);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(reason("%FOO%"), "Not supported field in StreamInfo: FOO");
  EXPECT_EQ(reason("%REQ()%"), "REQ requires parameters");
  EXPECT_EQ(reason("%REQ(a?b?c)%"), "More than 1 alternative header specified in token: a?b?c");
  EXPECT_EQ(reason("%RESPONSE_CODE(x)%"), "RESPONSE_CODE does not take any parameters or length");
  EXPECT_EQ(reason("%GRPC_STATUS%"), "%GRPC_STATUS% is not supported by dpukit-mesh");
  EXPECT_EQ(reason("50 % off"), "Incorrect configuration: 50 % off. Couldn't find valid command at position 3");
  EXPECT_EQ(reason("%START_TIME"), "Incorrect configuration: %START_TIME. Couldn't find valid command at position 0");
}

// A request as a router stream would record it.
struct Request {
  http::RequestHead head;
  http::HeaderList response;
  DownstreamFacts conn;
  StreamInfo info;
  Request() {
    head.method = "GET";
    head.target = "/api/items?q=1";
    head.host = "backend.local";
    head.headers.add("user-agent", "curl/8");
    head.headers.add("x-request-id", "rid-1");
    response.add("x-envoy-upstream-service-time", "3");
    conn.peer_ip = "10.0.0.7";
    conn.peer_port = 41000;
    conn.local_ip = "10.0.0.1";
    conn.local_port = 15006;
    conn.uri_sans = {"spiffe://cluster.local/ns/default/sa/frontend"};
    info.start_time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1796668085728));
    info.start_ns = 1'000'000'000;
    info.request = &head;
    info.response_headers = &response;
    info.downstream = &conn;
    info.protocol = "HTTP/1.1";
    info.response_code = 200;
    info.response_code_details = "via_upstream";
    info.bytes_received = 5;
    info.bytes_sent = 120;
    info.upstream_cluster = "backend";
    info.upstream_host = "10.0.0.9:8080";
  }
};

config::AccessLog stderr_log(std::string text) {
  config::AccessLog l;
  l.sink = config::AccessLog::Sink::kStderr;
  l.text_format = std::move(text);
  return l;
}

TEST(AccessLogLine, EnvoysDefaultLine) {
  Request r;
  AccessLogger log(stderr_log(std::string(config::kDefaultAccessLogFormat)));
  EXPECT_EQ(log.format(r.info, 1'042'000'000),
            "[2026-12-07T18:28:05.728Z] \"GET /api/items?q=1 HTTP/1.1\" 200 - 5 120 42 3 \"-\" \"curl/8\" \"rid-1\" "
            "\"backend.local\" \"10.0.0.9:8080\"\n");
}

TEST(AccessLogLine, FlagsInEnvoysOrderAddressesAndIdentity) {
  Request r;
  r.info.response_flags = response_flag::kUpstreamRetryLimitExceeded | response_flag::kUpstreamConnectionFailure;
  AccessLogger log(stderr_log(
      "%RESPONSE_FLAGS% %RESPONSE_FLAGS_LONG% %DOWNSTREAM_REMOTE_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT% "
      "%DOWNSTREAM_LOCAL_PORT% %DOWNSTREAM_PEER_URI_SAN% %REQUESTED_SERVER_NAME% %REQ(USER-AGENT):4% %RESP(X-MISSING)% "
      "%REQ(HOST)% %START_TIME(%s.%3f)%"));
  EXPECT_TRUE(log.reads_identity());
  EXPECT_EQ(log.format(r.info, 0),
            "UF,URX UpstreamConnectionFailure,UpstreamRetryLimitExceeded 10.0.0.7:41000 10.0.0.1 15006 "
            "spiffe://cluster.local/ns/default/sa/frontend - curl - backend.local 1796668085.728");
  AccessLogger plain(stderr_log("%DOWNSTREAM_REMOTE_ADDRESS%"));
  EXPECT_FALSE(plain.reads_identity());  // a connection need not parse its peer's certificate for it
}

TEST(AccessLogLine, JsonIsTypedSortedAndOmitsWhatIsEmptyWhenAsked) {
  Request r;
  config::AccessLog l;
  l.sink = config::AccessLog::Sink::kStderr;
  l.json_format = nlohmann::json{{"code", "%RESPONSE_CODE%"},
                                 {"b", {{"san", "%DOWNSTREAM_PEER_URI_SAN%"}, {"sni", "%REQUESTED_SERVER_NAME%"}}},
                                 {"mixed", "code=%RESPONSE_CODE% sni=%REQUESTED_SERVER_NAME%"},
                                 {"tfr", "%UPSTREAM_TRANSPORT_FAILURE_REASON%"}};
  EXPECT_EQ(AccessLogger(l).format(r.info, 0),
            R"({"b":{"san":"spiffe://cluster.local/ns/default/sa/frontend","sni":null},"code":200,)"
            R"("mixed":"code=200 sni=-","tfr":null})"
            "\n");
  l.omit_empty_values = true;
  EXPECT_EQ(AccessLogger(l).format(r.info, 0),
            R"({"b":{"san":"spiffe://cluster.local/ns/default/sa/frontend"},"code":200,"mixed":"code=200 sni="})"
            "\n");
}

TEST(AccessLogLine, ATcpConnectionHasNoProtocolAndCodeZero) {
  Request r;
  r.info.protocol = "";
  r.info.request = nullptr;
  r.info.response_headers = nullptr;
  AccessLogger log(stderr_log("\"%REQ(:METHOD)% %PROTOCOL%\" %RESPONSE_CODE% %BYTES_RECEIVED% %BYTES_SENT%"));
  EXPECT_EQ(log.format(r.info, 0), "\"- -\" 0 5 120");
}

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(AccessLogFile, WrittenOutByTheFlusherAndReopenedByItsPath) {
  const auto dir = std::filesystem::temp_directory_path() / ("dpukit-access-log-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "access.log";
  set_access_log_flush_interval(20ms);
  {
    config::AccessLog cfg;
    cfg.path = path.string();
    cfg.text_format = "%RESPONSE_CODE%\n";
    AccessLogger log(cfg);
    Request r;
    log.log(r.info, 0);
    for (int i = 0; i < 200 && read(path).empty(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(read(path), "200\n");  // written without a flush call: the timer's
    // logrotate: the file is moved away, then the logs are reopened.
    std::filesystem::rename(path, dir / "access.log.1");
    reopen_access_logs();
    r.info.response_code = 404;
    log.log(r.info, 0);
    flush_access_logs();
    EXPECT_EQ(read(dir / "access.log.1"), "200\n");
    EXPECT_EQ(read(path), "404\n");
  }
  set_access_log_flush_interval(10000ms);
  std::filesystem::remove_all(dir);
}

// Whether the thread `tid` of this process is inside write(2) (its /proc syscall line starts with the number).
bool writing(pid_t tid) {
  return read("/proc/self/task/" + std::to_string(tid) + "/syscall").rfind(std::to_string(SYS_write) + " ", 0) == 0;
}

TEST(AccessLogFile, TheLastLoggerDroppedOnAWorkerLeavesTheWritingToTheFlusher) {
  // A FIFO the test holds the reading end of and fills: whoever writes the
  // buffered line out blocks until the test reads. The last configuration
  // that names a file may be let go of on a data-plane worker, which must not
  // be the one that waits: it used to flush in the file's destructor.
  const auto dir = std::filesystem::temp_directory_path() / ("dpukit-access-fifo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "access.fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  set_access_log_flush_interval(10000ms);  // not due during the test: only the drop makes the line go out
  config::AccessLog cfg;
  cfg.path = path.string();
  cfg.text_format = "%RESPONSE_CODE%\n";
  auto log = std::make_unique<AccessLogger>(cfg);
  const int filler = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(filler, 0);
  size_t filled = 0;
  for (size_t chunk : {size_t{4096}, size_t{1}}) {  // whole pages, then bytes, until the pipe takes no more
    const std::string bytes(chunk, 'f');
    while (::write(filler, bytes.data(), chunk) == static_cast<ssize_t>(chunk)) filled += chunk;
  }
  Request r;
  log->log(r.info, 0);

  std::atomic<pid_t> worker_tid{0};
  std::atomic<bool> dropped{false};
  std::thread worker([&] {
    worker_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    log.reset();
    dropped = true;
  });
  // Either the drop returns, or the worker is seen blocked writing to the full FIFO.
  bool worker_wrote = false;
  while (!dropped && !worker_wrote) {
    const pid_t tid = worker_tid;
    worker_wrote = tid != 0 && writing(tid);
    std::this_thread::yield();
  }
  EXPECT_FALSE(worker_wrote) << "the thread that let go of the last logger wrote the file";
  // Drained, the FIFO takes the line: from the flusher (or, wrongly, the worker).
  std::string got;
  char buf[65536];
  while (got.size() < filled + 4) {
    pollfd p{reader, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, -1), 0);
    ssize_t n = ::read(reader, buf, sizeof buf);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  worker.join();
  EXPECT_EQ(got.substr(filled), "200\n");
  ::close(filler);
  ::close(reader);
  std::filesystem::remove_all(dir);
}

TEST(AccessLogFile, AnUnwritablePathIsRefusedByName) {
  config::AccessLog cfg;
  cfg.path = "/nonexistent-dir/access.log";
  try {
    AccessLogger log(cfg);
    FAIL() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/access.log: cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpukit::mesh
