#include "dcomp.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/statistics.h>

#include "dpukit/core/accounting.h"
#include "dpukit/core/log.h"
#include "dpukit/core/random.h"
#include "keyval.h"

namespace dpukit::kv::bench {

namespace fs = std::filesystem;
using rocksdb::CompactionServiceJobStatus;

// ---------------------------------------------------------------------------
// Wire format between the primary and the worker. Every message is one frame:
// u32 magic, u32 type, u64 body length, body. Bodies are sequences of u64s
// and length-prefixed strings, in the order listed per type.
// ---------------------------------------------------------------------------
namespace wire {

constexpr uint32_t kMagic = 0x504d4344;  // "DCMP"
enum Type : uint32_t {
  kJob = 1,         // u64 job id, str db name, str output dir, str serialized CompactionServiceInput
  kResult = 2,      // u64 ok, str error, str serialized CompactionServiceResult, u64 thread cpu ns,
                    // u64 wall ns, u64 refused deletes
  kStats = 3,       // (empty)
  kStatsReply = 4,  // u64 process cpu ns, u64 jobs, u64 jobs failed, u64 compaction bytes written,
                    // u64 compaction bytes read, u64 refused deletes
  kShutdown = 5,    // (empty); answered by kBye, then the worker exits
  kBye = 6,
};

struct Enc {
  std::string s;
  Enc& u64(uint64_t v) {
    s.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Enc& str(const std::string& v) {
    u64(v.size());
    s += v;
    return *this;
  }
};

struct Dec {
  const std::string& s;
  size_t at = 0;
  bool ok = true;
  uint64_t u64() {
    uint64_t v = 0;
    if (at + 8 > s.size()) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, s.data() + at, 8);
    at += 8;
    return v;
  }
  std::string str() {
    uint64_t n = u64();
    if (!ok || n > s.size() - at) {
      ok = false;
      return {};
    }
    std::string v = s.substr(at, n);
    at += n;
    return v;
  }
};

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);  // a dead peer must be an error, not SIGPIPE
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // EOF: the peer closed or died
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool send_frame(int fd, Type type, const std::string& body) {
  char head[16];
  uint32_t magic = kMagic, t = type;
  uint64_t len = body.size();
  std::memcpy(head, &magic, 4);
  std::memcpy(head + 4, &t, 4);
  std::memcpy(head + 8, &len, 8);
  return write_all(fd, head, sizeof(head)) && write_all(fd, body.data(), body.size());
}

struct Frame {
  Type type;
  std::string body;
};

std::optional<Frame> recv_frame(int fd) {
  char head[16];
  if (!read_all(fd, head, sizeof(head))) return std::nullopt;
  uint32_t magic, t;
  uint64_t len;
  std::memcpy(&magic, head, 4);
  std::memcpy(&t, head + 4, 4);
  std::memcpy(&len, head + 8, 8);
  if (magic != kMagic || len > (1ull << 32)) return std::nullopt;
  Frame f{Type(t), std::string(len, '\0')};
  if (!read_all(fd, f.body.data(), len)) return std::nullopt;
  return f;
}

// "@name" is a name in Linux's abstract socket namespace (no file, no path
// length worries, gone with the process); anything else is a path.
sockaddr_un address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(a.sun_path))
    throw InputError("socket name '" + name + "' is longer than " + std::to_string(sizeof(a.sun_path) - 1) +
                     " bytes");
  std::memcpy(a.sun_path, name.data(), name.size());
  if (name[0] == '@') a.sun_path[0] = '\0';
  len = socklen_t(offsetof(sockaddr_un, sun_path) + name.size() + (name[0] == '@' ? 0 : 1));
  return a;
}

int connect_to(const std::string& name) {
  socklen_t len;
  sockaddr_un a = address(name, len);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace wire

namespace {

// Top-level "name=value;" fields of a serialized CompactionServiceInput (a
// u32 format version, then RocksDB's option-string format, where nested
// structs are {...} and '\' escapes a character).
std::optional<std::string> serialized_field(const std::string& input, const std::string& name) {
  if (input.size() < 4) return std::nullopt;
  size_t i = 4, n = input.size();
  while (i < n) {
    size_t eq = input.find('=', i);
    if (eq == std::string::npos) return std::nullopt;
    std::string key = input.substr(i, eq - i);
    size_t j = eq + 1, end = j;
    int depth = 0;
    for (; end < n; ++end) {
      char c = input[end];
      if (c == '\\') {
        ++end;
        continue;
      }
      if (c == '{') ++depth;
      if (c == '}') --depth;
      if (c == ';' && depth == 0) break;
    }
    if (key == name) return input.substr(j, end - j);
    i = end + 1;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------

// The worker's file system for one job: everything passes through, except
// that nothing outside the job's output directory may be deleted, renamed
// over, truncated or (re)created. The refusal is an error status; RocksDB
// only logs a failed DeleteFile at the buggy call site.
class JobDirGuardFs : public rocksdb::FileSystemWrapper {
 public:
  JobDirGuardFs(const std::shared_ptr<rocksdb::FileSystem>& base, std::string dir, std::atomic<uint64_t>& refused)
      : rocksdb::FileSystemWrapper(base), dir_(std::move(dir)), refused_(refused) {}
  const char* Name() const override { return "DpukitJobDirGuardFs"; }

  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (!inside(f)) return refuse("delete", f);
    return target()->DeleteFile(f, o, d);
  }
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override {
    if (!inside(s) || !inside(t)) return refuse("rename", s + " -> " + t);
    return target()->RenameFile(s, t, o, d);
  }
  rocksdb::IOStatus LinkFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
    if (!inside(t)) return refuse("link", s + " -> " + t);
    return target()->LinkFile(s, t, o, d);
  }
  rocksdb::IOStatus DeleteDir(const std::string& dir, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (!inside(dir)) return refuse("rmdir", dir);
    return target()->DeleteDir(dir, o, d);
  }
  rocksdb::IOStatus Truncate(const std::string& f, size_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
    if (!inside(f)) return refuse("truncate", f);
    return target()->Truncate(f, size, o, d);
  }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* d) override {
    if (!inside(f)) return refuse("create", f);
    return target()->NewWritableFile(f, fo, r, d);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    if (!inside(f)) return refuse("reopen", f);
    return target()->ReopenWritableFile(f, fo, r, d);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& fo,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    if (!inside(f) || !inside(old)) return refuse("reuse", old + " -> " + f);
    return target()->ReuseWritableFile(f, old, fo, r, d);
  }

 private:
  bool inside(const std::string& path) const {
    return path == dir_ || (path.size() > dir_.size() && path.compare(0, dir_.size(), dir_) == 0 &&
                            path[dir_.size()] == '/' && path.find("/../", dir_.size()) == std::string::npos);
  }
  rocksdb::IOStatus refuse(const char* what, const std::string& path) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    log_warn(std::string("dcomp-worker: refused to ") + what + " " + path + " (outside the job directory " + dir_ +
             ")");
    return rocksdb::IOStatus::IOError("dcomp worker may not " + std::string(what) + " outside " + dir_, path);
  }
  std::string dir_;
  std::atomic<uint64_t>& refused_;
};

struct Worker {
  std::shared_ptr<rocksdb::FileSystem> base_fs;
  std::shared_ptr<rocksdb::TableFactory> table_factory;
  std::shared_ptr<rocksdb::Statistics> stats = rocksdb::CreateDBStatistics();
  uint64_t die_on_job = 0;
  std::atomic<uint64_t> jobs{0}, failed{0}, refused{0};
  std::atomic<int> active{0};
  std::atomic<bool> stopping{false};
  int listen_fd = -1;

  void serve(int fd);
  void run_job(int fd, wire::Frame& f);
};

uint64_t rusage_thread_ns() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return rusage_cpu_ns(ru);
}

uint64_t rusage_self_ns() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return rusage_cpu_ns(ru);
}

void Worker::run_job(int fd, wire::Frame& f) {
  wire::Dec in{f.body};
  uint64_t job_id = in.u64();
  std::string db_name = in.str(), out_dir = in.str(), input = in.str();
  if (!in.ok) {
    log_error("dcomp-worker: malformed job request; dropping the connection");
    return;
  }
  uint64_t n = jobs.fetch_add(1) + 1;
  uint64_t cpu0 = rusage_thread_ns(), t0 = now_ns();
  std::atomic<uint64_t> refused_here{0};
  std::string result, error;
  {
    auto guard = std::make_shared<JobDirGuardFs>(base_fs, out_dir, refused_here);
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(guard);
    rocksdb::CompactionServiceOptionsOverride ov;
    ov.env = env.get();
    ov.table_factory = table_factory;
    ov.statistics = stats;
    // comparator: the default BytewiseComparator, as in the primary.
    rocksdb::Status s =
        rocksdb::DB::OpenAndCompact(rocksdb::OpenAndCompactOptions(), db_name, out_dir, input, &result, ov);
    if (!s.ok()) error = s.ToString();
  }
  uint64_t cpu = rusage_thread_ns() - cpu0, wall = now_ns() - t0;
  refused.fetch_add(refused_here.load());
  if (!error.empty()) {
    failed.fetch_add(1);
    log_warn("dcomp-worker: job " + std::to_string(job_id) + " failed: " + error);
  }
  if (die_on_job != 0 && n == die_on_job) {
    // Fault injection: the outputs are written, the primary is waiting; die
    // the way a crashed or power-cut DPU would, without a word.
    log_warn("dcomp-worker: --die-on-job " + std::to_string(n) + ": killing myself (SIGKILL) before replying");
    ::kill(::getpid(), SIGKILL);
  }
  wire::Enc out;
  out.u64(error.empty()).str(error).str(error.empty() ? result : "").u64(cpu).u64(wall).u64(refused_here.load());
  wire::send_frame(fd, wire::kResult, out.s);
}

void Worker::serve(int fd) {
  pthread_setname_np(pthread_self(), "dcomp-job");
  while (auto f = wire::recv_frame(fd)) {
    if (f->type == wire::kJob) {
      run_job(fd, *f);
    } else if (f->type == wire::kStats) {
      wire::Enc out;
      out.u64(rusage_self_ns())
          .u64(jobs.load())
          .u64(failed.load())
          .u64(stats->getTickerCount(rocksdb::COMPACT_WRITE_BYTES))
          .u64(stats->getTickerCount(rocksdb::COMPACT_READ_BYTES))
          .u64(refused.load());
      wire::send_frame(fd, wire::kStatsReply, out.s);
    } else if (f->type == wire::kShutdown) {
      stopping = true;
      wire::send_frame(fd, wire::kBye, "");
      ::shutdown(listen_fd, SHUT_RDWR);  // wakes the accept loop
      break;
    } else {
      log_warn("dcomp-worker: unknown message type " + std::to_string(f->type));
      break;
    }
  }
  ::close(fd);
  active.fetch_sub(1);
}

}  // namespace

int cmd_dcomp_worker(int argc, char** argv) {
  ArgParser p("dpukit-kvbench dcomp-worker",
              "The DComp worker (the DPU's Arm cores): runs RocksDB compaction jobs sent by a primary with "
              "--mode dcomp, each through DB::OpenAndCompact into the job's own output directory. Normally "
              "started by the primary.");
  p.option("listen", "Unix socket to serve on ('@name' = Linux abstract namespace)", "", true);
  p.option("cpus", "pin the worker to these CPUs, e.g. 1 or 2-3 (the DPU's cores)");
  add_table_flags(p);
  p.option("die-on-job", "fault injection for tests: SIGKILL itself after computing its Nth job, before replying");
  p.parse(argc, argv, 2);
  if (p.has("cpus")) {
    CpuSet cpus;
    try {
      cpus = CpuSet::parse(p.str("cpus"));
    } catch (const std::invalid_argument& e) {
      p.fail(std::string("--cpus: ") + e.what());
    }
    if (auto w = pin_current_thread(cpus); !w.empty()) log_warn("dcomp-worker: " + w);
  }
  DbConfig table;
  table_config(p, table);
  EnvHandle env = make_env(table.fs_uri);
  Worker w;
  w.base_fs = env.env->GetFileSystem();
  w.table_factory = make_table_factory(table);
  w.die_on_job = p.has("die-on-job") ? p.u64("die-on-job") : 0;

  std::string name = p.str("listen");
  socklen_t len;
  sockaddr_un addr = wire::address(name, len);
  if (name[0] != '@') ::unlink(name.c_str());  // a stale socket file from a dead worker
  w.listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (w.listen_fd < 0 || ::bind(w.listen_fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(w.listen_fd, 64) != 0)
    throw std::runtime_error("cannot listen on " + name + ": " + std::strerror(errno));
  log_debug("dcomp-worker: listening on " + name);

  while (!w.stopping) {
    int fd = ::accept4(w.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (w.stopping) break;
      throw std::runtime_error(std::string("accept on ") + name + ": " + std::strerror(errno));
    }
    w.active.fetch_add(1);
    std::thread([&w, fd] { w.serve(fd); }).detach();
  }
  ::close(w.listen_fd);
  if (name[0] != '@') ::unlink(name.c_str());
  // The shutdown message comes after the primary closed its DB, so no job is
  // running; wait for the connection threads to finish their replies.
  for (int i = 0; i < 1000 && w.active.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return 0;
}

// ---------------------------------------------------------------------------
// Primary
// ---------------------------------------------------------------------------

void add_mode_flags(ArgParser& p) {
  p.option("mode", "local (all compaction on the host) or dcomp (L1+ compactions in a worker process)", "local");
  p.option("dcomp-slots",
           "dcomp: compaction jobs the worker runs at once; a job finding all slots busy runs on the host. "
           "RocksDB gets as many extra compaction threads, since one waiting on the worker uses no host CPU. "
           "4 = the paper's best DComp setting: the host keeps 4 compaction slots and the DPU takes the rest "
           "of 8",
           "4");
  p.option("worker-cpus", "dcomp: pin the worker process (the DPU's Arm cores) to these CPUs");
  p.option("dcomp-dir", "dcomp: where job output directories go; must be on the DB's file system (default DB.dcomp)");
  p.option("worker-die-on-job", "dcomp fault injection for tests: the worker SIGKILLs itself on its Nth job");
}

bool dcomp_mode(const ArgParser& p) {
  std::string m = p.str("mode");
  if (m != "local" && m != "dcomp") p.fail("--mode must be local or dcomp, not '" + m + "'");
  return m == "dcomp";
}

DcompConfig dcomp_config(const ArgParser& p, const DbConfig& db) {
  DcompConfig c;
  c.slots = unsigned(p.u64("dcomp-slots"));
  if (c.slots == 0 || c.slots > 64) p.fail("--dcomp-slots must be between 1 and 64");
  c.worker_cpus = p.str("worker-cpus");
  if (!c.worker_cpus.empty()) {
    try {
      CpuSet::parse(c.worker_cpus);
    } catch (const std::invalid_argument& e) {
      p.fail(std::string("--worker-cpus: ") + e.what());
    }
  }
  c.dir = p.has("dcomp-dir") ? p.str("dcomp-dir") : db.db + ".dcomp";
  c.die_on_job = p.has("worker-die-on-job") ? p.u64("worker-die-on-job") : 0;
  return c;
}

struct DcompState {
  struct Pending {
    int fd;
    std::string dir;
    uint64_t t0;
    int in_level, out_level;
  };
  struct Job {
    uint64_t id;
    int in_level, out_level;
    bool ok;
    std::string error;
    uint64_t cpu_ns, wall_ns, round_trip_ns, refused;
  };
  struct LevelCount {
    uint64_t host = 0, worker = 0;
  };

  DcompConfig cfg;
  std::string socket;
  pid_t pid = -1;
  bool reaped = false;
  int wait_status = 0;
  rusage ru{};
  std::atomic<bool> worker_down{false};

  std::mutex mu;
  std::map<int, std::pair<int, int>> levels;      // RocksDB compaction job id -> (start level, output level)
  std::map<uint64_t, Pending> pending;            // CompactionServiceJobInfo::job_id -> the job in the worker
  std::map<int, std::vector<std::string>> dirs;   // compaction job id -> its output directories
  unsigned busy = 0;
  uint64_t seq = 0;
  uint64_t offloaded = 0, succeeded = 0, failed = 0, suppressed = 0;
  std::map<std::string, uint64_t> kept_on_host;   // reason -> subcompactions
  std::map<std::string, LevelCount> by_levels;    // "L1->L2" -> where they ran
  std::vector<Job> jobs;

  // Reaps the worker if it has exited (non-blocking unless `block`).
  void reap(bool block) {
    if (pid <= 0 || reaped) return;
    int status = 0;
    pid_t r;
    do r = ::wait4(pid, &status, block ? 0 : WNOHANG, &ru);
    while (r < 0 && errno == EINTR);
    if (r == pid) {
      reaped = true;
      wait_status = status;
    }
  }
  std::string exit_text() const {
    if (!reaped) return "running";
    if (WIFSIGNALED(wait_status)) return "killed by signal " + std::to_string(WTERMSIG(wait_status));
    return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  }

  static std::string level_tag(int in, int out) {
    auto l = [](int v) { return v < 0 ? std::string("L?") : "L" + std::to_string(v); };
    return l(in) + "->" + l(out);
  }

  CompactionServiceJobStatus start(const rocksdb::CompactionServiceJobInfo& info, const std::string& input) {
    int job = int(info.job_id >> 32);  // CompactionJob::GetCompactionId: job id << 32 | subcompaction id
    std::optional<int> out_parsed;
    if (auto v = serialized_field(input, "output_level")) {
      try {
        out_parsed = std::stoi(*v);
      } catch (const std::exception&) {
      }
    }
    std::unique_lock lk(mu);
    auto it = levels.find(job);
    int in_level = it == levels.end() ? -1 : it->second.first;
    int out_level = out_parsed ? *out_parsed : -1;
    std::string tag = level_tag(in_level, out_level), local;
    if (it == levels.end() || !out_parsed || it->second.second != *out_parsed)
      local = "unknown_levels";  // no OnCompactionBegin (shutting down) or an input we cannot read: stay safe
    else if (out_level == 0)
      local = "output_l0";
    else if (in_level == 0)
      local = "input_l0";
    else if (worker_down)
      local = "worker_down";
    else if (busy >= cfg.slots)
      local = "slots_full";
    if (!local.empty()) {
      ++kept_on_host[local];
      ++by_levels[tag].host;
      return CompactionServiceJobStatus::kUseLocal;
    }
    ++busy;
    std::string dir = cfg.dir + "/job-" + std::to_string(job) + "-" + std::to_string(info.job_id & 0xffffffff) + "-" +
                      std::to_string(++seq);
    lk.unlock();

    std::error_code ec;
    fs::create_directories(dir, ec);
    int fd = ec ? -1 : wire::connect_to(socket);
    bool sent = fd >= 0 && wire::send_frame(fd, wire::kJob,
                                            wire::Enc{}.u64(info.job_id).str(info.db_name).str(dir).str(input).s);
    lk.lock();
    if (!sent) {
      // Nothing was started: the host does this one itself.
      --busy;
      if (fd >= 0) ::close(fd);
      std::string why = ec ? "cannot create " + dir + ": " + ec.message() : "worker unreachable";
      if (!ec) {
        worker_down = true;
        reap(false);
      }
      ++kept_on_host[ec ? "job_dir_error" : "worker_down"];
      ++by_levels[tag].host;
      lk.unlock();
      log_warn("dcomp: " + why + "; compaction " + tag + " runs on the host");
      fs::remove_all(dir, ec);
      return CompactionServiceJobStatus::kUseLocal;
    }
    pending[info.job_id] = Pending{fd, dir, now_ns(), in_level, out_level};
    dirs[job].push_back(dir);
    ++offloaded;
    ++by_levels[tag].worker;
    return CompactionServiceJobStatus::kSuccess;
  }

  CompactionServiceJobStatus wait(const rocksdb::CompactionServiceJobInfo& info, std::string* result) {
    Pending p;
    {
      std::lock_guard lk(mu);
      auto it = pending.find(info.job_id);
      if (it == pending.end()) return CompactionServiceJobStatus::kFailure;  // StartV2 never sent it
      p = it->second;
      pending.erase(it);
    }
    std::optional<wire::Frame> f = wire::recv_frame(p.fd);  // EOF when the worker dies: never hangs on a dead one
    ::close(p.fd);
    uint64_t rtt = now_ns() - p.t0;
    Job j{info.job_id, p.in_level, p.out_level, false, "", 0, 0, rtt, 0};
    std::string payload;
    if (f && f->type == wire::kResult) {
      wire::Dec d{f->body};
      j.ok = d.u64() != 0;
      j.error = d.str();
      payload = d.str();
      j.cpu_ns = d.u64();
      j.wall_ns = d.u64();
      j.refused = d.u64();
      if (!d.ok) {
        j.ok = false;
        j.error = "malformed reply from the worker";
      }
    } else {
      j.error = "lost the worker during the job";
    }
    std::lock_guard lk(mu);
    --busy;
    if (!f) {
      worker_down = true;
      reap(false);
      j.error += " (worker " + exit_text() + ")";
    }
    jobs.push_back(j);
    if (!j.ok) {
      ++failed;
      log_warn("dcomp: compaction " + level_tag(p.in_level, p.out_level) + " failed in the worker: " + j.error +
               (worker_down ? "; later compactions run on the host" : ""));
      std::error_code ec;
      fs::remove_all(p.dir, ec);  // RocksDB reads nothing from it after a failure
      // No result: RocksDB fails the compaction with Status::Incomplete.
      return CompactionServiceJobStatus::kFailure;
    }
    ++succeeded;
    *result = std::move(payload);
    return CompactionServiceJobStatus::kSuccess;
  }

  void begin(int job, int in_level, int out_level) {
    std::lock_guard lk(mu);
    levels[job] = {in_level, out_level};
  }

  // After Install: RocksDB has renamed every output out of the job's
  // directories, so what is left there (the secondary instance's LOG, an empty
  // output the 7.8.3 bug could not delete) goes.
  void completed(int job) {
    std::vector<std::string> gone;
    {
      std::lock_guard lk(mu);
      levels.erase(job);
      if (auto it = dirs.find(job); it != dirs.end()) {
        gone = std::move(it->second);
        dirs.erase(it);
      }
    }
    std::error_code ec;
    for (const auto& d : gone) fs::remove_all(d, ec);
  }

  // A failed offloaded compaction reaches RocksDB as Status::Incomplete
  // ("CompactionService failed ..."). With paranoid_checks (the default) any
  // compaction error is fatal and stops all writes, though the failed job
  // installed nothing and its inputs are intact. Only that error is let go.
  void background_error(rocksdb::BackgroundErrorReason reason, rocksdb::Status* s) {
    if (reason != rocksdb::BackgroundErrorReason::kCompaction || !s->IsIncomplete()) return;
    std::string text = s->ToString();
    if (text.find("CompactionService") == std::string::npos) return;
    {
      std::lock_guard lk(mu);
      ++suppressed;
    }
    log_warn("dcomp: the failed offloaded compaction is dropped (" + text +
             "); RocksDB keeps its inputs and compacts them again");
    *s = rocksdb::Status::OK();
  }
};

namespace {

class Service : public rocksdb::CompactionService {
 public:
  explicit Service(std::shared_ptr<DcompState> st) : st_(std::move(st)) {}
  const char* Name() const override { return "DpukitDcompService"; }
  // Exceptions must not reach RocksDB.
  CompactionServiceJobStatus StartV2(const rocksdb::CompactionServiceJobInfo& info,
                                     const std::string& input) override {
    try {
      return st_->start(info, input);
    } catch (const std::exception& e) {
      log_error(std::string("dcomp: StartV2: ") + e.what());
      return CompactionServiceJobStatus::kUseLocal;
    }
  }
  CompactionServiceJobStatus WaitForCompleteV2(const rocksdb::CompactionServiceJobInfo& info,
                                               std::string* result) override {
    try {
      return st_->wait(info, result);
    } catch (const std::exception& e) {
      log_error(std::string("dcomp: WaitForCompleteV2: ") + e.what());
      return CompactionServiceJobStatus::kFailure;
    }
  }

 private:
  std::shared_ptr<DcompState> st_;
};

class Listener : public rocksdb::EventListener {
 public:
  explicit Listener(std::shared_ptr<DcompState> st) : st_(std::move(st)) {}
  const char* Name() const override { return "DpukitDcompListener"; }
  void OnCompactionBegin(rocksdb::DB*, const rocksdb::CompactionJobInfo& ci) override {
    st_->begin(ci.job_id, ci.base_input_level, ci.output_level);
  }
  void OnCompactionCompleted(rocksdb::DB*, const rocksdb::CompactionJobInfo& ci) override { st_->completed(ci.job_id); }
  void OnBackgroundError(rocksdb::BackgroundErrorReason reason, rocksdb::Status* s) override {
    st_->background_error(reason, s);
  }

 private:
  std::shared_ptr<DcompState> st_;
};

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find my own executable: " + ec.message());
  return p.string();
}

}  // namespace

DcompOffload::DcompOffload(const DbConfig& db, const DcompConfig& cfg) : state_(std::make_shared<DcompState>()) {
  DcompState& st = *state_;
  st.cfg = cfg;
  // The job directories are ours: clear what a killed earlier run left.
  std::error_code ec;
  fs::create_directories(cfg.dir, ec);
  if (ec) throw std::runtime_error("cannot create the dcomp job directory " + cfg.dir + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(cfg.dir, ec))
    if (e.path().filename().string().rfind("job-", 0) == 0) fs::remove_all(e.path(), ec);
  st.cfg.dir = fs::absolute(cfg.dir).lexically_normal().string();

  SplitMix64 rng(now_ns() ^ uint64_t(::getpid()));
  st.socket = "@dpukit-kvbench-" + std::to_string(::getpid()) + "-" + std::to_string(rng.next() & 0xffffff);

  std::vector<std::string> args = {self_exe(), "dcomp-worker", "--listen", st.socket,
                                   "--bloom-bits", std::to_string(db.bloom_bits),
                                   "--cache-size", std::to_string(db.cache_size),
                                   "--block-size", std::to_string(db.block_size)};
  if (!db.fs_uri.empty()) args.insert(args.end(), {"--fs-uri", db.fs_uri});
  if (!cfg.worker_cpus.empty()) args.insert(args.end(), {"--cpus", cfg.worker_cpus});
  if (cfg.die_on_job) args.insert(args.end(), {"--die-on-job", std::to_string(cfg.die_on_job)});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child gets back every CPU this process was started with: the host
  // may already be pinned (--cpus), and the worker pins itself.
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : available_cpus().cpus) CPU_SET(c, &all);
  pid_t parent = ::getpid();

  st.pid = ::fork();
  if (st.pid < 0) throw std::runtime_error(std::string("cannot start the dcomp worker: fork: ") + std::strerror(errno));
  if (st.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the worker never outlives its primary
    if (::getppid() != parent) ::_exit(1);
    ::sched_setaffinity(0, sizeof(all), &all);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Ready when it accepts a connection; give up if it exits first.
  for (int i = 0; i < 2000; ++i) {
    if (int fd = wire::connect_to(st.socket); fd >= 0) {
      ::close(fd);
      return;
    }
    st.reap(false);
    if (st.reaped) throw std::runtime_error("the dcomp worker did not start: it " + st.exit_text());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(st.pid, SIGKILL);
  st.reap(true);
  throw std::runtime_error("the dcomp worker did not listen on " + st.socket + " within 20 s");
}

DcompOffload::~DcompOffload() {
  DcompState& st = *state_;
  if (st.pid > 0 && !st.reaped) {
    ::kill(st.pid, SIGKILL);
    st.reap(true);
  }
  // Only what we made: the job directories, then the parent if it is empty
  // (--dcomp-dir may name a directory that holds other things).
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(st.cfg.dir, ec))
    if (e.path().filename().string().rfind("job-", 0) == 0) fs::remove_all(e.path(), ec);
  fs::remove(st.cfg.dir, ec);
}

void DcompOffload::install(rocksdb::Options& o, const DbConfig& db) {
  o.compaction_service = std::make_shared<Service>(state_);
  o.listeners.push_back(std::make_shared<Listener>(state_));
  o.max_background_flushes = db.flush_threads();
  o.max_background_compactions = db.compaction_threads() + int(state_->cfg.slots);
}

DcompOffload::Summary DcompOffload::finish() {
  DcompState& st = *state_;
  nlohmann::json worker_stats = nullptr;
  if (!st.reaped && !st.worker_down) {
    if (int fd = wire::connect_to(st.socket); fd >= 0) {
      if (wire::send_frame(fd, wire::kStats, "")) {
        if (auto f = wire::recv_frame(fd); f && f->type == wire::kStatsReply) {
          wire::Dec d{f->body};
          uint64_t cpu = d.u64(), jobs = d.u64(), failed = d.u64(), wbytes = d.u64(), rbytes = d.u64(),
                   refused = d.u64();
          if (d.ok)
            worker_stats = {{"cpu_ns_at_end", cpu},        {"jobs", jobs},
                            {"jobs_failed", failed},       {"compact_write_bytes", wbytes},
                            {"compact_read_bytes", rbytes}, {"refused_outside_job_dir", refused}};
        }
      }
      wire::send_frame(fd, wire::kShutdown, "");
      wire::recv_frame(fd);  // kBye, or EOF
      ::close(fd);
    }
  }
  // Give a worker that was asked to stop a moment (one we lost, less), then
  // stop it for good.
  for (int i = 0, n = st.worker_down ? 100 : 500; i < n && !st.reaped; ++i) {
    st.reap(false);
    if (!st.reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!st.reaped) {
    ::kill(st.pid, SIGKILL);
    st.reap(true);
  }

  Summary s;
  std::lock_guard lk(st.mu);
  s.worker_cpu_ns = rusage_cpu_ns(st.ru);
  s.jobs_in_worker = st.succeeded;
  uint64_t job_cpu = 0, job_wall = 0, rtt = 0, refused = 0;
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& j : st.jobs) {
    job_cpu += j.cpu_ns;
    job_wall += j.wall_ns;
    rtt += j.round_trip_ns;
    refused += j.refused;
    nlohmann::json r = {{"job_id", j.id >> 32},     {"subcompaction", j.id & 0xffffffff},
                        {"levels", DcompState::level_tag(j.in_level, j.out_level)},
                        {"ok", j.ok},                {"worker_cpu_ns", j.cpu_ns},
                        {"worker_wall_ns", j.wall_ns}, {"round_trip_ns", j.round_trip_ns},
                        {"refused_outside_job_dir", j.refused}};
    if (!j.ok) r["error"] = j.error;
    jobs.push_back(r);
  }
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [tag, c] : st.by_levels) levels[tag] = {{"host", c.host}, {"worker", c.worker}};
  bool crashed = st.reaped && (WIFSIGNALED(st.wait_status) || WEXITSTATUS(st.wait_status) != 0);
  s.json = {{"slots", st.cfg.slots},
            {"worker_cpus", st.cfg.worker_cpus},
            {"job_dir", st.cfg.dir},
            {"jobs_offloaded", st.offloaded},
            {"jobs_in_worker", st.succeeded},
            {"jobs_failed", st.failed},
            {"kept_on_host", st.kept_on_host},
            {"by_levels", levels},
            {"worker_cpu_ns", s.worker_cpu_ns},
            {"worker_job_cpu_ns", job_cpu},
            {"worker_job_wall_ns", job_wall},
            {"round_trip_ns", rtt},
            {"refused_outside_job_dir", refused},
            {"worker_exit", st.exit_text()},
            {"worker_crashed", crashed || st.worker_down.load()},
            {"suppressed_compaction_errors", st.suppressed},
            {"worker_stats", worker_stats},
            {"jobs", jobs}};
  return s;
}

}  // namespace dpukit::kv::bench

namespace dpukit::kv::bench {

int cmd_dcomp_selfcheck(int argc, char** argv) {
  ArgParser p("dpukit-kvbench dcomp-selfcheck",
              "Reproduce RocksDB 7.8.3's empty-output bug against the dcomp worker and check that its guard stops "
              "it: a DeleteRange that covers all of L2 makes the offloaded L1->L2 compaction's only output empty, "
              "and the worker's RocksDB then deletes TableFileName(cf_paths, n) - a path in the primary's "
              "directory. Exit 0 when no live file of the primary was lost, 1 otherwise. Clears --db first.");
  p.option("db", "a scratch directory for the database", "", true);
  p.parse(argc, argv, 2);
  DbConfig c;
  c.db = p.str("db");
  c.write_buffer_size = 1 << 20;
  c.target_file_size = 256 << 10;
  c.max_bytes_for_level_base = 1 << 20;
  c.cache_size = 8 << 20;
  EnvHandle env = make_env("");
  rocksdb::Options o = make_options(c, env.env);
  o.disable_auto_compactions = true;  // only the two compactions below
  if (fs::exists(fs::path(c.db) / "CURRENT")) check(rocksdb::DestroyDB(c.db, o), "cannot clear " + c.db);
  DcompConfig dc;
  dc.dir = c.db + ".dcomp";
  DcompOffload offload(c, dc);
  offload.install(o, c);
  std::unique_ptr<rocksdb::DB> db = open_db(o, c.db);
  std::string value;
  for (uint64_t r = 0; r < 2000; ++r) {
    make_value(r, Gen::insert(Phase::kFill), 1, 128, value);
    check(db->Put({}, key_of(r), value), "put");
  }
  check(db->Flush({}), "flush");
  rocksdb::CompactRangeOptions to_l2;
  to_l2.change_level = true;
  to_l2.target_level = 2;
  check(db->CompactRange(to_l2, nullptr, nullptr), "moving the data to L2");
  // Every key is hex, so ["0", "g") covers them all; L0 -> L1 moves the lone
  // range tombstone down, then L1 -> L2 (in the worker) drops it with the data.
  check(db->DeleteRange({}, db->DefaultColumnFamily(), "0", "g"), "delete range");
  check(db->Flush({}), "flush");
  check(db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr), "compacting");
  // Something the primary writes after the job: it must survive too.
  make_value(7, Gen::insert(Phase::kFill), 1, 128, value);
  check(db->Put({}, key_of(7), value), "put");
  check(db->Flush({}), "flush");
  std::vector<rocksdb::LiveFileMetaData> live;
  db->GetLiveFilesMetaData(&live);
  size_t lost = 0;
  for (const auto& f : live)
    if (!fs::exists(f.db_path + f.name)) {
      std::fprintf(stderr, "dcomp-selfcheck: live file %s%s is gone\n", f.db_path.c_str(), f.name.c_str());
      ++lost;
    }
  std::string got;
  rocksdb::Status s = db->Get({}, key_of(7), &got);
  check(db->Close(), "closing " + c.db);
  db.reset();
  DcompOffload::Summary sum = offload.finish();
  uint64_t refused = sum.json["refused_outside_job_dir"].get<uint64_t>();
  std::printf("dcomp-selfcheck: %llu job(s) in the worker; the worker tried %llu time(s) to change files outside its "
              "job directory and was refused; %zu live file(s) of the primary lost; read after: %s\n",
              (unsigned long long)sum.jobs_in_worker, (unsigned long long)refused, lost, s.ToString().c_str());
  if (sum.jobs_in_worker == 0) std::printf("dcomp-selfcheck: note: no job was offloaded, so nothing was checked\n");
  else if (refused == 0) std::printf("dcomp-selfcheck: note: the bug did not trigger (a fixed RocksDB?)\n");
  return lost == 0 && s.ok() ? 0 : 1;
}

}  // namespace dpukit::kv::bench
