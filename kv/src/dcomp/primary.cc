// The DComp primary: the compaction service RocksDB calls, its listener, and
// the worker process behind them (started, restarted, stopped).
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <rocksdb/listener.h>

#include "dpukit/kv_dcomp.h"
#include "dpukit/core/log.h"
#include "dpukit/core/message_socket.h"
#include "dpukit/core/process.h"
#include "dpukit/core/random.h"
#include "service_input.h"
#include "wire.h"

namespace dpukit::kv {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using rocksdb::CompactionServiceJobStatus;

struct DcompState {
  struct Pending {
    MessageSocket sock;
    std::string dir;
    uint64_t t0;
    int in_level, out_level;
    unsigned worker;  // which worker process (1 = the first started)
  };
  struct Job {
    uint64_t id;
    int in_level, out_level;
    unsigned worker;
    bool ok;
    std::string fell_back, error;  // why it ran on the host after all
    uint64_t cpu_ns, wall_ns, round_trip_ns, refused, dilated_ns;
  };
  struct LevelCount {
    uint64_t host = 0, worker = 0;
  };
  enum class Worker { kStarting, kUp, kRestarting, kDown };

  DcompConfig cfg;
  std::string socket;

  std::mutex mu;
  std::condition_variable cv;

  // The worker process; only the supervisor thread starts and reaps one.
  ChildProcess worker;
  Worker state = Worker::kStarting;
  unsigned started = 0;   // worker processes started
  unsigned restarts = 0;  // restarts tried
  bool stopping = false;
  std::string start_error;
  std::vector<std::string> exits;  // how each worker that ended ended
  bool crashed = false;            // a worker died or hung under a job
  uint64_t ended_cpu_ns = 0;       // CPU time of the workers that ended
  std::thread supervisor;

  // The jobs.
  std::map<int, std::pair<int, int>> levels;     // RocksDB compaction job id -> (start level, output level)
  std::map<uint64_t, Pending> pending;           // CompactionServiceJobInfo::job_id -> the job in the worker
  std::map<int, std::vector<std::string>> dirs;  // compaction job id -> its output directories
  unsigned busy = 0;
  uint64_t eligible = 0;  // (sub)compactions from first_level down, for the share
  uint64_t sent = 0;  // jobs sent to a worker (numbers the job directories and the injected faults)
  uint64_t offloaded = 0, succeeded = 0, failed = 0;
  std::map<std::string, uint64_t> kept_on_host;  // StartV2 kept it local: reason -> subcompactions
  std::map<std::string, uint64_t> fell_back;     // sent, then run on the host: reason -> subcompactions
  std::map<std::string, LevelCount> by_levels;   // "L1->L2" -> where they were sent
  std::vector<Job> jobs;

  static std::string level_tag(int in, int out) {
    auto l = [](int v) { return v < 0 ? std::string("L?") : "L" + std::to_string(v); };
    return l(in) + "->" + l(out);
  }

  // ------------------------------------------------------------- the worker

  // Starts a worker and waits until it accepts a connection.
  ChildProcess start_worker() {
    std::vector<std::string> argv = cfg.worker_command;
    argv.insert(argv.end(), {"--listen", socket});
    SpawnOptions o;
    o.cpus = cfg.worker_cpus;
    o.log = cfg.worker_log;
    o.append_log = started > 0;  // keep what the worker before it said
    o.die_with_parent = true;    // the supervisor thread lives as long as any worker
    ChildProcess c = ChildProcess::spawn(argv, o);
    for (int i = 0; i < 2000; ++i) {
      try {
        MessageSocket::connect(socket);
        return c;
      } catch (const ChannelError&) {
      }
      if (!c.running()) throw std::runtime_error("the dcomp worker did not start: it " + c.exit_text());
      std::this_thread::sleep_for(10ms);
    }
    throw std::runtime_error("the dcomp worker did not listen on " + socket + " within 20 s");
  }

  void retire(ChildProcess& c) {
    exits.push_back(c.exit_text());
    ended_cpu_ns += c.cpu_ns();
    c = ChildProcess();
  }

  // Runs on its own thread: starts the first worker, and another whenever
  // one died or hung, until stopped.
  void supervise() {
    std::unique_lock lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stopping || state == Worker::kStarting || state == Worker::kRestarting; });
      if (stopping) return;
      if (worker.pid() > 0) {  // the worker that failed: make sure it is gone, and learn how it ended
        ChildProcess old = std::move(worker);
        lk.unlock();
        old.kill();
        old.wait();
        lk.lock();
        retire(old);
      }
      if (state == Worker::kRestarting) {
        if (restarts >= cfg.max_restarts) {
          state = Worker::kDown;
          log_warn("dcomp: the worker failed " + std::to_string(restarts + 1) +
                   " time(s); every later compaction runs on the host");
          cv.notify_all();
          continue;
        }
        ++restarts;
      }
      lk.unlock();
      ChildProcess child;
      std::string error;
      try {
        child = start_worker();
      } catch (const std::exception& e) {
        error = e.what();
      }
      lk.lock();
      if (!error.empty()) {
        if (started == 0) {  // the constructor reports it
          state = Worker::kDown;
          start_error = error;
          cv.notify_all();
        } else {
          exits.push_back("did not start: " + error);  // and again, while restarts are left
          log_warn("dcomp: " + error);
        }
        continue;
      }
      worker = std::move(child);
      ++started;
      if (state != Worker::kDown) state = Worker::kUp;  // kDown: finish() came first and stops it
      if (started > 1) log_warn("dcomp: worker " + std::to_string(started) + " started");
      cv.notify_all();
    }
  }

  // Under mu: worker `n` died or hung. Kills it (a hung one stops here) and
  // has the supervisor start another; nothing if it is being replaced already.
  void worker_failed(unsigned n, const std::string& why) {
    if (n != started || state != Worker::kUp) return;
    crashed = true;
    state = Worker::kRestarting;
    worker.kill();
    log_warn("dcomp: the worker " + why + "; starting another");
    cv.notify_all();
  }

  void stop_supervisor() {
    {
      std::lock_guard lk(mu);
      stopping = true;
    }
    cv.notify_all();
    if (supervisor.joinable()) supervisor.join();
  }

  // --------------------------------------------------------------- the jobs

  // Whether the n-th eligible compaction is one of the share that goes: n
  // goes when floor(n x share) steps up, so any run of them has its share.
  bool share_takes(uint64_t n) const {
    if (cfg.share >= 1.0) return true;
    return uint64_t(double(n) * cfg.share) > uint64_t(double(n - 1) * cfg.share);
  }

  CompactionServiceJobStatus start(const rocksdb::CompactionServiceJobInfo& info, const std::string& input) {
    int job = int(info.job_id >> 32);  // CompactionJob::GetCompactionId: job id << 32 | subcompaction id
    std::optional<int> out_parsed = dcomp::output_level(input);
    std::unique_lock lk(mu);
    auto it = levels.find(job);
    int in_level = it == levels.end() ? -1 : it->second.first;
    int out_level = out_parsed ? *out_parsed : -1;
    std::string tag = level_tag(in_level, out_level), local;
    if (it == levels.end() || !out_parsed || it->second.second != *out_parsed)
      local = "unknown_levels";  // no OnCompactionBegin (shutting down) or an input we cannot read: stay safe
    else if (out_level == 0)
      local = "output_l0";
    else if (in_level < cfg.first_level)
      local = in_level == 0 ? "input_l0" : "above_first_level";
    else if (!share_takes(++eligible))
      local = "share";
    else if (state == Worker::kDown)
      local = "worker_down";
    else if (state != Worker::kUp)
      local = "worker_restarting";
    else if (busy >= cfg.slots)
      local = "slots_full";
    if (!local.empty()) {
      ++kept_on_host[local];
      ++by_levels[tag].host;
      return CompactionServiceJobStatus::kUseLocal;
    }
    ++busy;
    uint64_t n = ++sent;
    unsigned worker_n = started;
    std::string dir = cfg.dir + "/job-" + std::to_string(job) + "-" + std::to_string(info.job_id & 0xffffffff) + "-" +
                      std::to_string(n);
    dcomp::Job request{info.job_id, info.db_name, dir, input, dcomp::Fault::kNone};
    if (n == cfg.die_on_job) request.fault = dcomp::Fault::kDie;
    if (n == cfg.hang_on_job) request.fault = dcomp::Fault::kHang;
    lk.unlock();

    std::error_code ec;
    fs::create_directories(dir, ec);
    MessageSocket sock;
    std::string why = ec ? "cannot create " + dir + ": " + ec.message() : "";
    if (!ec) {
      try {
        sock = MessageSocket::connect(socket);
        sock.send(dcomp::kJob, dcomp::encode(request));
      } catch (const ChannelError& e) {
        why = e.what();
      }
    }
    lk.lock();
    if (!why.empty()) {
      // Nothing was started: the host does this one itself.
      --busy;
      if (!ec) worker_failed(worker_n, "is unreachable (" + why + ")");
      ++kept_on_host[ec ? "job_dir_error" : "worker_unreachable"];
      ++by_levels[tag].host;
      lk.unlock();
      log_warn("dcomp: " + why + "; compaction " + tag + " runs on the host");
      fs::remove_all(dir, ec);
      return CompactionServiceJobStatus::kUseLocal;
    }
    pending[info.job_id] = Pending{std::move(sock), dir, now_ns(), in_level, out_level, worker_n};
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
      if (it == pending.end()) return CompactionServiceJobStatus::kUseLocal;  // StartV2 never sent it
      p = std::move(it->second);
      pending.erase(it);
    }
    Job j{info.job_id, p.in_level, p.out_level, p.worker, false, "", "", 0, 0, 0, 0, 0};
    std::string payload, lost;  // lost: "timed_out" or "worker_lost"
    try {
      std::optional<Message> m = p.sock.receive(cfg.job_timeout.count() > 0 ? cfg.job_timeout : -1ms);
      if (!m) {
        lost = "timed_out";
        j.error = "no answer within " + std::to_string(cfg.job_timeout.count()) + " ms";
      } else if (auto r = m->type == dcomp::kResult ? dcomp::decode_result(m->body) : std::nullopt) {
        j.ok = r->ok;
        j.error = r->error;
        payload = std::move(r->result);
        j.cpu_ns = r->cpu_ns;
        j.wall_ns = r->wall_ns;
        j.refused = r->refused;
        j.dilated_ns = r->dilated_ns;
      } else {
        j.error = "malformed reply from the worker";
      }
    } catch (const ChannelError& e) {
      lost = "worker_lost";
      j.error = e.what();
    }
    p.sock = MessageSocket();  // a worker that is still computing sees the job dropped
    j.round_trip_ns = now_ns() - p.t0;
    if (!j.ok) j.fell_back = lost.empty() ? "failed" : lost;

    std::unique_lock lk(mu);
    --busy;
    if (lost == "timed_out") worker_failed(p.worker, "did not answer a job in time");
    if (lost == "worker_lost") worker_failed(p.worker, "is gone (" + j.error + ")");
    jobs.push_back(j);
    if (!j.ok) {
      ++failed;
      ++fell_back[j.fell_back];
      lk.unlock();
      log_warn("dcomp: compaction " + level_tag(p.in_level, p.out_level) + " failed in the worker (" + j.fell_back +
               ": " + j.error + "); it runs on the host");
      std::error_code ec;
      fs::remove_all(p.dir, ec);  // RocksDB reads nothing from it
      // RocksDB runs this (sub)compaction itself, from its inputs, which it kept.
      return CompactionServiceJobStatus::kUseLocal;
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
};

namespace {

class Service : public rocksdb::CompactionService {
 public:
  explicit Service(std::shared_ptr<DcompState> st) : st_(std::move(st)) {}
  const char* Name() const override { return "DpukitDcompService"; }
  // Exceptions must not reach RocksDB; the host takes the job instead.
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
      return CompactionServiceJobStatus::kUseLocal;
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

 private:
  std::shared_ptr<DcompState> st_;
};

void remove_job_dirs(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("job-", 0) == 0) fs::remove_all(e.path(), ec);
}

}  // namespace

DcompOffload::DcompOffload(const DcompConfig& cfg) : state_(std::make_shared<DcompState>()) {
  if (cfg.worker_command.empty()) throw std::invalid_argument("dcomp: no worker command");
  if (cfg.first_level < 0) throw std::invalid_argument("dcomp: first_level must be >= 0");
  if (!(cfg.share >= 0.0 && cfg.share <= 1.0)) throw std::invalid_argument("dcomp: share must be in [0, 1]");
  DcompState& st = *state_;
  st.cfg = cfg;
  // The job directories are ours: clear what a killed earlier run left.
  std::error_code ec;
  fs::create_directories(cfg.dir, ec);
  if (ec) throw std::runtime_error("cannot create the dcomp job directory " + cfg.dir + ": " + ec.message());
  remove_job_dirs(cfg.dir);
  st.cfg.dir = fs::absolute(cfg.dir).lexically_normal().string();

  SplitMix64 rng(now_ns() ^ uint64_t(::getpid()));
  st.socket = "@dpukit-dcomp-" + std::to_string(::getpid()) + "-" + std::to_string(rng.next() & 0xffffff);
  st.supervisor = std::thread([s = state_.get()] { s->supervise(); });
  if (wait_for_worker(std::chrono::milliseconds::max()) == 0) {
    std::string error = st.start_error;
    st.stop_supervisor();
    throw std::runtime_error(error);
  }
}

DcompOffload::~DcompOffload() {
  DcompState& st = *state_;
  st.stop_supervisor();
  if (st.worker.pid() > 0) {
    st.worker.kill();
    st.worker.wait();
  }
  // Only what we made: the job directories, then the parent if it is empty
  // (the caller may have named a directory that holds other things).
  remove_job_dirs(st.cfg.dir);
  std::error_code ec;
  fs::remove(st.cfg.dir, ec);
}

void DcompOffload::install(rocksdb::Options& o, int flush_threads, int compaction_threads) {
  o.compaction_service = std::make_shared<Service>(state_);
  o.listeners.push_back(std::make_shared<Listener>(state_));
  o.max_background_flushes = flush_threads;
  o.max_background_compactions = compaction_threads + int(state_->cfg.slots);
}

unsigned DcompOffload::wait_for_worker(std::chrono::milliseconds timeout) {
  DcompState& st = *state_;
  std::unique_lock lk(st.mu);
  auto settled = [&] { return st.state == DcompState::Worker::kUp || st.state == DcompState::Worker::kDown; };
  if (timeout == std::chrono::milliseconds::max()) st.cv.wait(lk, settled);
  else st.cv.wait_for(lk, timeout, settled);
  return st.state == DcompState::Worker::kUp ? st.started : 0;
}

DcompOffload::Summary DcompOffload::finish() {
  DcompState& st = *state_;
  // Taken from the supervisor, which then starts no other; it keeps running
  // until this one is reaped, since the worker dies with the thread that started it.
  ChildProcess worker;
  {
    std::lock_guard lk(st.mu);
    if (st.state == DcompState::Worker::kUp) worker = std::move(st.worker);
    st.state = DcompState::Worker::kDown;
  }
  std::optional<dcomp::WorkerStats> stats;
  if (worker.pid() > 0) {
    try {
      MessageSocket s = MessageSocket::connect(st.socket);
      s.send(dcomp::kStats);
      if (auto m = s.receive(10s); m && m->type == dcomp::kStatsReply) stats = dcomp::decode_stats(m->body);
      s.send(dcomp::kShutdown);
      s.receive(10s);  // kBye
    } catch (const ChannelError& e) {
      log_warn(std::string("dcomp: stopping the worker: ") + e.what());
    }
    if (!worker.wait_for(5s)) {
      worker.kill();
      worker.wait();
    }
  }
  st.stop_supervisor();
  // Only this thread is left to touch the state's worker.
  if (st.worker.pid() > 0) {
    st.worker.kill();
    st.worker.wait();
    st.retire(st.worker);
  }
  if (worker.pid() > 0) st.retire(worker);

  Summary s;
  std::lock_guard lk(st.mu);
  s.worker_cpu_ns = st.ended_cpu_ns;
  s.jobs_in_worker = st.succeeded;
  uint64_t job_cpu = 0, job_wall = 0, rtt = 0, refused = 0, dilated = 0;
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& j : st.jobs) {
    job_cpu += j.cpu_ns;
    job_wall += j.wall_ns;
    rtt += j.round_trip_ns;
    refused += j.refused;
    dilated += j.dilated_ns;
    nlohmann::json r = {{"job_id", j.id >> 32},     {"subcompaction", j.id & 0xffffffff},
                        {"levels", DcompState::level_tag(j.in_level, j.out_level)},
                        {"worker", j.worker},        {"ok", j.ok},
                        {"worker_cpu_ns", j.cpu_ns}, {"worker_dilated_ns", j.dilated_ns},
                        {"worker_wall_ns", j.wall_ns},
                        {"round_trip_ns", j.round_trip_ns}, {"refused_outside_job_dir", j.refused}};
    if (!j.ok) {
      r["fell_back"] = j.fell_back;
      r["error"] = j.error;
    }
    jobs.push_back(r);
  }
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [tag, c] : st.by_levels) levels[tag] = {{"host", c.host}, {"worker", c.worker}};
  bool crashed = st.crashed;
  for (const auto& e : st.exits) crashed = crashed || e != "exited with status 0";
  nlohmann::json worker_stats = nullptr;
  if (stats)
    worker_stats = {{"cpu_ns_at_end", stats->cpu_ns},
                    {"jobs", stats->jobs},
                    {"jobs_failed", stats->jobs_failed},
                    {"compact_write_bytes", stats->compact_write_bytes},
                    {"compact_read_bytes", stats->compact_read_bytes},
                    {"refused_outside_job_dir", stats->refused}};
  s.json = {{"slots", st.cfg.slots},
            {"first_level", st.cfg.first_level},
            {"share", st.cfg.share},
            {"worker_cpus", st.cfg.worker_cpus.str()},
            {"job_dir", st.cfg.dir},
            {"job_timeout_ms", st.cfg.job_timeout.count()},
            {"jobs_offloaded", st.offloaded},
            {"jobs_in_worker", st.succeeded},
            {"jobs_failed", st.failed},
            {"fell_back", st.fell_back},
            {"kept_on_host", st.kept_on_host},
            {"by_levels", levels},
            {"worker_cpu_ns", s.worker_cpu_ns},
            {"worker_job_cpu_ns", job_cpu},
            {"worker_job_dilated_ns", dilated},
            {"worker_job_wall_ns", job_wall},
            {"round_trip_ns", rtt},
            {"refused_outside_job_dir", refused},
            {"workers_started", st.started},
            {"worker_restarts", st.restarts},
            {"worker_exits", st.exits},
            {"worker_exit", st.exits.empty() ? std::string("running") : st.exits.back()},
            {"worker_crashed", crashed},
            {"worker_stats", worker_stats},
            {"jobs", jobs}};
  return s;
}

}  // namespace dpukit::kv
