// The DComp worker: one thread per connection, DB::OpenAndCompact per job.
// At a dpu speed F < 1 the job's thread is time-dilated (core Dilation):
// after each output file it closes, and at the end of the job, it stays busy
// for (1/F - 1) x the CPU time since the last payment. Paying per output file
// rather than once per job keeps the job's reads and writes paced as on a
// slower core: a job of several 64 MB outputs runs for seconds, and paying
// all its debt at the end would put its I/O on the shared disk at the host's
// pace, followed by a long idle spin.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/statistics.h>

#include "dpukit/kv_dcomp.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/log.h"
#include "dpukit/core/message_socket.h"
#include "guard_fs.h"
#include "wire.h"

namespace dpukit::kv {

namespace {

using namespace dcomp;

struct Worker {
  WorkerOptions options;
  std::shared_ptr<rocksdb::Statistics> stats = rocksdb::CreateDBStatistics();
  std::atomic<uint64_t> jobs{0}, failed{0}, refused{0};
  std::atomic<int> active{0};
  std::unique_ptr<MessageListener> listener;

  void serve(MessageSocket sock);
  JobResult run(const Job& job);
};

JobResult Worker::run(const Job& job) {
  jobs.fetch_add(1);
  uint64_t cpu0 = thread_cpu_ns(), t0 = now_ns();
  std::atomic<uint64_t> refused_here{0};
  JobResult r;
  Dilation dilation(options.dpu_speed);  // this thread's: OpenAndCompact runs the job on the calling thread
  {
    auto guard = std::make_shared<JobDirGuardFs>(options.fs, job.output_dir, refused_here);
    if (dilation.active())
      guard->on_file_closed([&dilation, self = std::this_thread::get_id()] {
        if (std::this_thread::get_id() == self) dilation.pay();  // another thread's CPU is not this clock's
      });
    std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(guard);
    rocksdb::CompactionServiceOptionsOverride ov;
    ov.env = env.get();
    ov.table_factory = options.table_factory;
    ov.statistics = stats;
    // comparator: the default BytewiseComparator, as in the primary.
    rocksdb::Status s = rocksdb::DB::OpenAndCompact(rocksdb::OpenAndCompactOptions(), job.db_name, job.output_dir,
                                                    job.input, &r.result, ov);
    r.ok = s.ok();
    if (!s.ok()) {
      r.error = s.ToString();
      r.result.clear();
    }
  }
  dilation.pay();  // the rest of the job, before the answer goes out
  r.dilated_ns = dilation.dilated_ns();
  r.cpu_ns = thread_cpu_ns() - cpu0;
  r.wall_ns = now_ns() - t0;
  r.refused = refused_here.load();
  refused.fetch_add(r.refused);
  if (!r.ok) {
    failed.fetch_add(1);
    log_warn("dcomp-worker: job " + std::to_string(job.id) + " failed: " + r.error);
  }
  return r;
}

void Worker::serve(MessageSocket sock) {
  pthread_setname_np(pthread_self(), "dcomp-job");
  try {
    while (auto m = sock.receive()) {
      if (m->type == kJob) {
        std::optional<Job> job = decode_job(m->body);
        if (!job) {
          log_error("dcomp-worker: malformed job request; dropping the connection");
          break;
        }
        JobResult r = run(*job);
        // The outputs are written and the primary is waiting: fail now the
        // way a crashed or power-cut DPU would (without a word), or a hung one.
        if (job->fault == Fault::kDie) {
          log_warn("dcomp-worker: fault injection: killing myself (SIGKILL) before replying");
          ::kill(::getpid(), SIGKILL);
        }
        if (job->fault == Fault::kHang) {
          log_warn("dcomp-worker: fault injection: never replying");
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        }
        sock.send(kResult, encode(r));
      } else if (m->type == kStats) {
        WorkerStats s;
        s.cpu_ns = process_cpu_ns();
        s.jobs = jobs.load();
        s.jobs_failed = failed.load();
        s.compact_write_bytes = stats->getTickerCount(rocksdb::COMPACT_WRITE_BYTES);
        s.compact_read_bytes = stats->getTickerCount(rocksdb::COMPACT_READ_BYTES);
        s.refused = refused.load();
        sock.send(kStatsReply, encode(s));
      } else if (m->type == kShutdown) {
        sock.send(kBye);
        listener->shutdown();
        break;
      } else {
        log_warn("dcomp-worker: unknown message type " + std::to_string(m->type));
        break;
      }
    }
  } catch (const ChannelError& e) {
    // The primary went away (or dropped a job it gave up on): only this connection ends.
    log_debug(std::string("dcomp-worker: connection ended: ") + e.what());
  }
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  // Shared with the connection threads, which are detached: they may outlive this call.
  auto w = std::make_shared<Worker>();
  w->options = options;
  w->listener = std::make_unique<MessageListener>(options.listen);
  log_debug("dcomp-worker: listening on " + options.listen);
  while (std::optional<MessageSocket> sock = w->listener->accept()) {
    w->active.fetch_add(1);
    std::thread([w, s = std::move(*sock)]() mutable {
      w->serve(std::move(s));
      w->active.fetch_sub(1);
    }).detach();
  }
  // The shutdown message comes after the primary closed its DB, so no job is
  // running; give the connection threads a moment to finish their replies.
  for (int i = 0; i < 1000 && w->active.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return 0;
}

}  // namespace dpukit::kv
