#include "engine.h"

#include <fcntl.h>
#include <libaio.h>
#include <liburing.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dpukit/core/accounting.h"
#include "dpukit/core/copy.h"
#include "dpukit/core/dpu_speed.h"
#include "dpukit/core/log.h"
#include "protocol.h"

namespace dpukit::kv {
namespace {

using namespace std::chrono_literals;
using Io = IoEvent::Io;
using Kind = IoEvent::Kind;

constexpr size_t kMaxBatch = 256;                  // requests taken off the queue pair at once
constexpr auto kReceiveTimeout = 100ms;            // how soon the dispatcher notices stop()
constexpr long long kPollTimeoutNs = 100'000'000;  // how soon the polling thread notices it should stop
constexpr uint64_t kWakeTag = 0;                   // user_data of the NOP that wakes the polling thread
constexpr unsigned kSqThreadIdleMs = 10;           // SQPOLL: the SQ thread sleeps after this long idle

void add(std::atomic<uint64_t>& counter, uint64_t v = 1) { counter.fetch_add(v, std::memory_order_relaxed); }

void raise_max(std::atomic<uint64_t>& max, uint64_t v) {
  uint64_t cur = max.load(std::memory_order_relaxed);
  while (v > cur && !max.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
}

// A dpu thread's Dilation (docs/core.md), its added busy time counted in
// EngineStats::dilated_ns as it is paid, so that the statistics show it.
//
// The agent is dpu work end to end, so each engine thread's clock runs for
// the thread's whole life: everything it does between two payments is
// billed to the next, its wake-ups, the channel's receive (the ring and the
// payload copy) and the hand-offs between threads included. Only a wait
// that ends with nothing to do is forgotten (start()). Made on the thread
// it measures.
class DpuThreadClock {
 public:
  DpuThreadClock(double factor, EngineStats& stats) : dilation_(factor), stats_(stats) {}
  void start() { dilation_.start(); }
  void exclude(uint64_t cpu_ns) { dilation_.exclude(cpu_ns); }
  void pay() {
    if (!dilation_.active()) return;
    dilation_.pay();
    report();
  }
  // After a request too small to read the CPU clock for (one read costs
  // about as much as a small write's whole work here): pays once 20 us of
  // wall time have passed.
  void poll() {
    if (!dilation_.active()) return;
    dilation_.poll();
    report();
  }

 private:
  void report() {
    add(stats_.dilated_ns, dilation_.dilated_ns() - reported_);
    reported_ = dilation_.dilated_ns();
  }
  Dilation dilation_;
  EngineStats& stats_;
  uint64_t reported_ = 0;
};

// O_DIRECT's alignment of buffers, offsets and lengths: the largest logical
// block size in use.
constexpr uint64_t kDirectAlign = 4096;
uint64_t align_down(uint64_t v) { return v & ~(kDirectAlign - 1); }

struct AlignedFree {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(kDirectAlign)); }
};

// A write's own copy of its payload, aligned for O_DIRECT.
struct Buffer {
  std::unique_ptr<uint8_t[], AlignedFree> data;
  size_t capacity = 0;
};

// Buffers are reused: a fresh multi-megabyte allocation per write would fault
// in new pages every time. Keeps at most `keep_bytes`, dropping the smallest.
// Its own lock: the DMA thread takes buffers without the engine's.
class BufferPool {
 public:
  explicit BufferPool(uint64_t keep_bytes) : keep_bytes_(keep_bytes) {}
  Buffer take(size_t len) {
    std::lock_guard lock(mu_);
    // The most recently given first (its bytes are likely still in cache),
    // and taken from the end: erasing the first of thousands of kept
    // buffers moved all the others, tens of microseconds a take.
    for (size_t i = free_.size(); i-- > 0;) {
      if (free_[i].capacity < len) continue;
      Buffer b = std::move(free_[i]);
      if (i + 1 != free_.size()) free_[i] = std::move(free_.back());
      free_.pop_back();
      kept_ -= b.capacity;
      return b;
    }
    const size_t cap = (len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    return Buffer{std::unique_ptr<uint8_t[], AlignedFree>(new (std::align_val_t(kDirectAlign)) uint8_t[cap]), cap};
  }
  void give(Buffer b) {
    std::lock_guard lock(mu_);
    kept_ += b.capacity;
    free_.push_back(std::move(b));
    while (kept_ > keep_bytes_) {
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](const Buffer& x, const Buffer& y) { return x.capacity < y.capacity; });
      kept_ -= smallest->capacity;
      free_.erase(smallest);
    }
  }

 private:
  std::mutex mu_;
  uint64_t keep_bytes_, kept_ = 0;
  std::vector<Buffer> free_;
};

// Completions a thread made and has not posted: each engine thread posts its
// own (post_ready), after it paid its dilation for the work behind them, so
// that no reply leaves before its work's time at the dpu's speed.
thread_local std::vector<ChannelCompletion> t_ready;

struct FileCtx;

// A write's bytes taken off the queue pair before the write is sequenced
// into its file: a kWrite's payload, copied by the receiver, or a kWriteFrom's,
// pulled by the DMA thread without waiting for the file's earlier writes or
// the write budget and completed to the host as soon as it is pulled. The
// bytes sit at buf + lead, lead = offset % kDirectAlign: where a direct
// file's write puts them after the file's unwritten tail, which is only
// known once the writes before it are sequenced (begin_write).
struct StagedWrite {
  uint64_t file = 0;  // the file id
  uint64_t offset = 0, len = 0, addr = 0;  // addr: a pull's, in the host process
  uint64_t lead = 0;
  Buffer buf;
  bool done = false;       // filled (pulled, or failed); mu
  bool sequenced = false;  // taken off its file's `pulled`; mu
  int err = 0;             // the pull's errno
  uint64_t received_ns = 0, queued_ns = 0;
};

// A request as the write thread takes it: what it needs of the message,
// which the receiver has taken off the queue pair.
struct Request {
  ChannelRequest r{};
  std::string text;                     // kOpen, kRecycle: the path
  std::shared_ptr<StagedWrite> staged;  // kWrite: the copied payload; kWriteFrom: its pull
};

// A slot release for the releaser thread: a kRecycle's (after its link is
// gone) or an operator's kReleaseSlot (only if the slot is quarantined).
struct SlotReleaseJob {
  uint32_t slot = 0;
  bool only_quarantined = false;
  ChannelCompletion c{};
  std::string what;  // for the log: the recycled path, or the slot
};

// One SQE's worth of work; its address is the SQE's user_data.
struct IoOp {
  IoOp(Io io, FileCtx* file, uint64_t seq = 0, uint64_t offset = 0, uint64_t len = 0)
      : io(io), file(file), seq(seq), offset(offset), len(len) {}
  Io io;
  FileCtx* file;
  uint64_t seq;     // see IoEvent::seq
  uint64_t offset;  // write, range_sync
  uint64_t len;     // write: bytes to write from buf; range_sync: bytes to sync
  uint64_t done = 0;  // write: bytes written so far (a short write resumes there)
  Buffer buf;         // write: the payload, from buf + base
  uint64_t base = 0;  // a pulled write to a buffered file: its bytes sit this far in (see StagedWrite)
  // A write as the host sent it: its offset in the file, its bytes (at buf +
  // fill; before them, a direct file's unwritten tail). data_len is also
  // what the write reserved of the in-flight byte budget.
  uint64_t at = 0, fill = 0, data_len = 0;
};

// The file context (PulseDB §III-B3/B4): one per open file of the queue pair,
// with the in-flight I/O the dependency tracking looks at.
struct FileCtx {
  uint64_t id = 0;
  std::string name;
  int fd = -1;
  uint64_t slot = kNoSlot;
  bool created = false;      // the engine made `name` (a symlink or a normal file)
  int32_t error = 0;         // the first error (-errno); later requests are skipped
  uint64_t bytes_written = 0;
  uint64_t end = 0;          // highest byte written + 1
  uint64_t writes_sent = 0;  // numbers the writes 1, 2, ...
  std::set<uint64_t> writes_in_flight;
  std::deque<std::unique_ptr<IoOp>> deferred_syncs;  // range_syncs waiting for earlier writes
  unsigned syncs_in_flight = 0;
  bool close_requested = false;
  uint64_t final_size = 0;
  bool closing = false;      // fsync + close submitted, or the failed file closed
  unsigned close_cqes = 0;   // of fsync and close
  std::deque<std::shared_ptr<StagedWrite>> pulled;  // kWriteFroms not yet sequenced, in file order
  // A kRecycle of this pool file that came while it was closing: its slot is
  // released (and the recycle completed) once the close is done.
  bool recycle_after_close = false;
  ChannelCompletion recycle{};
  // O_DIRECT (the page cache bypassed: the kernel's work for these writes is
  // done in this process's threads, not in writeback kworkers). Writes go out
  // in aligned blocks; the bytes past the last block boundary wait in `tail`
  // for the next write, or the padded tail write at sync_close.
  bool direct = false;
  uint64_t next_offset = 0;  // where the next write must start (writes come in file order)
  uint64_t tail_start = 0;   // aligned; tail holds [tail_start, next_offset)
  std::array<uint8_t, kDirectAlign> tail{};
};

}  // namespace

struct WritePersistEngine::Impl {
  Impl(SstPool* pool, EngineStats& stats, const EngineOptions& options);
  ~Impl() {
    if (aio_ctx) io_destroy(aio_ctx);
    if (aio_wake_fd >= 0) ::close(aio_wake_fd);
    io_uring_queue_exit(&ring);
  }

  void serve(ChannelDpu& qp);

  // The receiver (the thread in serve) takes requests off the queue pair:
  // a kWriteFrom goes to the pull queue at once, every request (a
  // kWriteFrom as its place in the file's order) to the write queue.
  void receive_loop();
  Request take(const ChannelDpu::Message& m, uint64_t received_ns);
  // The write thread: the requests in order, with the waits the writes need.
  void write_loop();
  void dispatch(Request& q);
  void on_hello(const ChannelRequest& r);
  void on_open(Request& q);
  bool open_in_pool(FileCtx& f);
  void open_normal(FileCtx& f);
  void on_write(Request& q);
  void on_range_sync(const ChannelRequest& r);
  void on_sync_close(const ChannelRequest& r);
  void on_recycle(Request& q);
  void on_release_slot(Request& q);
  void on_write_from(Request& q);
  // A write's two halves around filling its buffer (the copy or the pull);
  // mu held, in file order. begin_write returns null if nothing is to be
  // written (the file failed, or the write is out of order).
  std::unique_ptr<IoOp> begin_write(FileCtx& f, uint64_t offset, uint64_t len, std::unique_lock<std::mutex>& lock,
                                    StagedWrite* pulled = nullptr);
  void finish_write(std::unique_ptr<IoOp> op);
  void retire_write(std::unique_ptr<IoOp> op);
  void write_tail(FileCtx& f, std::unique_lock<std::mutex>& lock);
  int open_file(const std::string& path, int flags, FileCtx& f);

  // The pull path (hw: the DMA stage), its own queue and thread: pulls
  // kWriteFrom payloads from the host's memory and completes them before
  // their writes are sequenced and submitted.
  void dma_loop();
  int pull(StagedWrite& p) const;  // 0 or an errno
  ChannelCompletion pull_completion(const StagedWrite& p, int err);  // without mu
  void pulled(StagedWrite& p, int err);
  // Sequences `f`'s pulled writes into its writes, in order; mu held. With
  // `wait` (the dispatcher, before any later request of the file) it waits
  // for a pull still running and for the write budget; without (the DMA
  // thread, right after a pull) it stops where it would wait.
  void settle(FileCtx& f, std::unique_lock<std::mutex>& lock, bool wait);
  void settle_all(std::unique_lock<std::mutex>& lock);  // every file's pulls that are done
  bool fits(unsigned ios, uint64_t bytes) const;
  void stop_dma();

  // File contexts and dependency tracking; mu held.
  FileCtx& file(uint64_t id);
  void fail(FileCtx& f, int32_t err, const std::string& what);
  void advance(FileCtx& f);
  void start_close(FileCtx& f);
  void finish_file(FileCtx& f);

  // io_uring submission; mu held.
  void reserve(std::unique_lock<std::mutex>& lock, unsigned ios, uint64_t bytes);
  void unreserve(unsigned ios, uint64_t bytes);
  io_uring_sqe* next_sqe();
  void queue(io_uring_sqe* sqe, IoOp* op);
  void submit_write(IoOp* op);
  void submit_range_sync(std::unique_ptr<IoOp> op);
  void flush();
  void trace(Kind kind, const IoOp& op, int32_t res);

  // The polling thread.
  void poll_loop();
  void harvest();
  void harvest_aio(const io_event* events, int n);
  void on_cqe(IoOp* op, int32_t res);
  void write_done(IoOp* op, int32_t res);
  void sync_done(std::unique_ptr<IoOp> op, int32_t res);
  void close_done(std::unique_ptr<IoOp> op, int32_t res);

  // Completions and the end of a queue pair.
  void queue_completion(const ChannelCompletion& c);  // this thread's, posted by its post_ready
  void post_ready();
  void post(const std::vector<ChannelCompletion>& out);
  void drain() noexcept;
  void wake_poller();
  void abandon(FileCtx& f);
  void release_slot(uint32_t slot);

  // The releaser: pool slot releases (a release writes the slot's tail out:
  // tens of milliseconds for a large slot) on a thread of their own, in
  // order, so that the write thread's requests for other files never wait
  // for one. Each completes its request. Started with a pool only.
  void release_loop();
  void queue_release(SlotReleaseJob job);
  void run_release(SlotReleaseJob& job);
  void stop_releaser();
  std::mutex rel_mu;
  std::condition_variable rel_cv;
  std::deque<SlotReleaseJob> releases;
  bool rel_stop = false;
  std::thread releaser;

  SstPool* pool;
  EngineStats& stats;
  const EngineOptions options;
  io_uring ring{};
  // CQ entries. SQEs in flight plus deferred ones never exceed it, so the CQ
  // never overflows.
  unsigned io_capacity = 0;
  bool sqpoll = false;    // IoEngine::kIoUringSqpoll
  // IoEngine::kPwrite and kLibaio: the SQEs are prepared here, not in the
  // ring; flush() does each as a system call, in order (pwrite), or hands
  // them to AIO (libaio); mu.
  bool sync_calls = false;
  std::deque<io_uring_sqe> aside_sqes;
  void run_sync_calls();
  // IoEngine::kLibaio: the AIO context the polling thread reaps, /dev/null
  // (an iocb written to it wakes the polling thread), the close linked to
  // each fsync in flight (by the fsync's user_data; done when it completes),
  // whether this file system refused IOCB_CMD_FSYNC; mu.
  bool aio = false;
  io_context_t aio_ctx = nullptr;
  int aio_wake_fd = -1;
  std::unordered_map<uint64_t, io_uring_sqe> aio_linked;
  bool aio_no_fsync = false;
  void submit_aio();
  void aio_syscall(const io_uring_sqe& sqe);
  void aio_complete(uint64_t user_data, int32_t res);
  uint64_t prepared = 0;  // SQEs prepared since the last flush; mu

  std::mutex mu;  // guards everything below and the SQ
  std::condition_variable room;
  std::unordered_map<uint64_t, std::unique_ptr<FileCtx>> files;
  unsigned reserved_ios = 0;    // SQEs in flight or deferred
  uint64_t inflight_bytes = 0;  // write bytes admitted and not yet written
  BufferPool buffers;
  // The files that failed (their ids; fail() adds, finish_file removes):
  // the DMA thread's replies read it without mu.
  std::mutex failed_mu;
  std::set<uint64_t> failed_files;

  ChannelDpu* qp = nullptr;
  std::mutex post_mu;  // the completion ring has one producer at a time
  // stop_serving: stop() (the agent's shutdown, for good); stop_receiving:
  // this serve()'s write thread failed.
  std::atomic<bool> host_gone{false}, stop_serving{false}, stop_receiving{false}, stop_polling{false};
  std::thread poller;

  // The write queue, from the receiver to the write thread.
  std::mutex wq_mu;
  std::condition_variable wq_cv;
  std::deque<Request> write_queue;
  bool receiving_done = false;
  std::exception_ptr write_error;  // what the write thread threw; serve rethrows it
  std::thread writer;
  uint64_t copy_staged = 0;  // kWrite payload bytes copied and not yet sequenced; mu
  bool write_failed = false;  // mu
  pid_t host_pid = 0;  // whose memory kWriteFrom addresses point into
  std::mutex dma_mu;
  std::condition_variable dma_cv;
  std::deque<std::shared_ptr<StagedWrite>> pulls;  // the pull queue, in arrival order
  bool dma_stop = false;
  std::atomic<bool> dma_stopping{false};
  // Pulled (or being pulled) and not yet sequenced: only the DMA thread adds
  // (without mu while there is room), settle subtracts (mu).
  std::atomic<uint64_t> staged_bytes{0};
  std::thread dma;
};

WritePersistEngine::Impl::Impl(SstPool* pool, EngineStats& stats, const EngineOptions& options)
    : pool(pool), stats(stats), options(options), buffers(options.max_inflight_bytes) {
  if (options.ring_entries == 0 || options.max_inflight_bytes == 0)
    throw std::invalid_argument("write-persist engine: ring_entries and max_inflight_bytes must be positive");
  io_uring_params p{};
  if (options.io_engine == IoEngine::kIoUringSqpoll) {
    // The SQ thread inherits the agent's CPUs; it sleeps after this long idle.
    p.flags |= IORING_SETUP_SQPOLL;
    p.sq_thread_idle = kSqThreadIdleMs;
    sqpoll = true;
  }
  sync_calls = options.io_engine == IoEngine::kPwrite;
  aio = options.io_engine == IoEngine::kLibaio;
  if (int r = io_uring_queue_init_params(options.ring_entries, &ring, &p); r < 0)
    throw std::system_error(-r, std::generic_category(),
                            "write-persist engine: io_uring_queue_init with " + std::to_string(options.ring_entries) +
                                " entries");
  // The polling thread waits with a timeout while the dispatcher submits;
  // without EXT_ARG that wait would itself take an SQE behind the lock's back.
  if (!(p.features & IORING_FEAT_EXT_ARG)) {
    io_uring_queue_exit(&ring);
    throw std::runtime_error("write-persist engine: io_uring lacks IORING_FEAT_EXT_ARG (needs Linux 5.11 or later)");
  }
  io_capacity = p.cq_entries;
  if (aio) {
    // Room for every op the reservations admit, and the wake-up.
    if (int r = io_setup(static_cast<int>(io_capacity + 1), &aio_ctx); r < 0) {
      io_uring_queue_exit(&ring);
      throw std::system_error(-r, std::generic_category(),
                              "write-persist engine: io_setup with " + std::to_string(io_capacity + 1) + " events");
    }
    aio_wake_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (aio_wake_fd < 0) {
      int err = errno;
      io_destroy(aio_ctx);
      io_uring_queue_exit(&ring);
      throw std::system_error(err, std::generic_category(), "write-persist engine: opening /dev/null");
    }
  }
}

// ------------------------------------------------------------ the dispatcher

void WritePersistEngine::Impl::serve(ChannelDpu& channel) {
  qp = &channel;
  host_gone = false;
  stop_polling = false;
  // Nothing of an earlier serve() carries over: its write thread's error, a
  // stopped DMA stage's open budget, its failed files.
  write_error = nullptr;
  write_failed = false;
  stop_receiving = false;
  dma_stopping = false;
  copy_staged = 0;
  staged_bytes = 0;
  write_queue.clear();
  pulls.clear();
  {
    std::lock_guard l(failed_mu);
    failed_files.clear();
  }
  add(stats.queue_pairs);
  host_pid = channel.peer_pid() > 0 ? channel.peer_pid() : ::getpid();  // an in-process pair: this process
  dma_stop = false;
  rel_stop = false;
  releases.clear();
  if (pool) releaser = std::thread([this] { release_loop(); });
  poller = std::thread([this] { poll_loop(); });
  dma = std::thread([this] { dma_loop(); });
  receiving_done = false;
  writer = std::thread([this] { write_loop(); });
  auto stop_writer = [&] {
    {
      std::lock_guard l(wq_mu);
      receiving_done = true;
    }
    wq_cv.notify_all();
    writer.join();
  };
  try {
    receive_loop();
  } catch (...) {
    stop_writer();
    drain();
    throw;
  }
  stop_writer();
  drain();
  if (write_error) std::rethrow_exception(write_error);
}

void WritePersistEngine::Impl::receive_loop() {
  std::vector<ChannelDpu::Message> batch;
  DpuThreadClock clock(options.dpu_speed, stats);
  while (!stop_serving.load(std::memory_order_relaxed) && !stop_receiving.load(std::memory_order_relaxed)) {
    // The receive is the dpu's work (the ring, and the payload copy: the
    // "DMA read"): billed with the batch it brings. When the ring was empty
    // it includes the channel's spin before it slept, which a slower core
    // spins longer too.
    size_t n = qp->receive(batch, kMaxBatch, kReceiveTimeout);
    if (n == 0) {
      if (qp->closed()) return;
      clock.start();  // waited for nothing: idle, not work
      continue;
    }
    const uint64_t received_ns = now_ns();
    raise_max(stats.max_batch, n);
    for (const auto& m : batch) {
      Request q = take(m, received_ns);
      clock.poll();  // each request at the dpu's speed (never with a lock held)
      // Each at once: the write thread frees the copy budget the next may wait for.
      {
        std::lock_guard l(wq_mu);
        if (write_error) return;  // the write thread failed: serve rethrows it
        write_queue.push_back(std::move(q));
      }
      wq_cv.notify_one();
    }
    clock.pay();  // the batch's last requests and their hand-off
  }
}

Request WritePersistEngine::Impl::take(const ChannelDpu::Message& m, uint64_t received_ns) {
  Request q;
  q.r = m.request;
  const ChannelRequest& r = m.request;
  switch (static_cast<Op>(r.op)) {
    case Op::kOpen:
    case Op::kRecycle:
    case Op::kReleaseSlot:
      q.text.assign(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      break;
    case Op::kWriteFrom: {
      auto p = std::make_shared<StagedWrite>();
      p->file = r.id;
      p->offset = r.args[0];
      p->addr = r.args[1];
      p->len = r.args[2];
      p->lead = p->offset % kDirectAlign;
      p->received_ns = received_ns;
      p->queued_ns = now_ns();
      add(stats.pull_admit_ns, p->queued_ns - received_ns);
      {
        std::lock_guard l(dma_mu);
        pulls.push_back(p);
      }
      dma_cv.notify_one();
      q.staged = std::move(p);
      break;
    }
    case Op::kWrite: {
      // The payload is only valid until the next receive: copied now (the
      // "DMA read"), into a buffer the write will use. Bounded: past the
      // write budget of copies not yet sequenced the receiver waits.
      auto p = std::make_shared<StagedWrite>();
      p->file = r.id;
      p->offset = r.args[0];
      p->len = m.payload.size();
      p->lead = p->offset % kDirectAlign;
      {
        std::unique_lock lock(mu);
        room.wait(lock, [&] {
          return copy_staged == 0 || copy_staged + p->len <= options.max_inflight_bytes || write_failed;
        });
        copy_staged += p->len;
        p->buf = buffers.take(p->lead + p->len);
      }
      copy_bytes(p->buf.data.get() + p->lead, m.payload.data(), p->len);  // not glibc's rep movsb (see copy.h)
      p->done = true;
      q.staged = std::move(p);
      break;
    }
    default:
      break;
  }
  return q;
}

void WritePersistEngine::Impl::write_loop() {
  pthread_setname_np(pthread_self(), "pulsedb:write");
  DpuThreadClock clock(options.dpu_speed, stats);
  std::deque<Request> work;
  for (;;) {
    {
      std::unique_lock l(wq_mu);
      wq_cv.wait(l, [&] { return !write_queue.empty() || receiving_done; });
      if (write_queue.empty()) return;
      work.swap(write_queue);
    }
    // No start(): the wake-up and the hand-off are billed with the batch.
    try {
      for (auto& q : work) {
        dispatch(q);
        clock.poll();
      }
      work.clear();
      {
        std::lock_guard lock(mu);
        flush();  // one submission for the whole batch
      }
    } catch (...) {
      {
        std::lock_guard l(wq_mu);
        write_error = std::current_exception();
      }
      {
        std::lock_guard lock(mu);
        write_failed = true;
        room.notify_all();
      }
      stop_receiving = true;
      post_ready();  // what it completed before
      return;
    }
    clock.pay();
    post_ready();
  }
}

void WritePersistEngine::Impl::dispatch(Request& q) {
  add(stats.requests);
  switch (static_cast<Op>(q.r.op)) {
    case Op::kHello: return on_hello(q.r);
    case Op::kOpen: return on_open(q);
    case Op::kWrite: return on_write(q);
    case Op::kRangeSync: return on_range_sync(q.r);
    case Op::kSyncClose: return on_sync_close(q.r);
    case Op::kRecycle: return on_recycle(q);
    case Op::kWriteFrom: return on_write_from(q);
    case Op::kReleaseSlot: return on_release_slot(q);
  }
  add(stats.errors);
  log_warn("write-persist: ignored a request with unknown op " + std::to_string(q.r.op) + " (id " +
           std::to_string(q.r.id) + ")");
}

void WritePersistEngine::Impl::on_hello(const ChannelRequest& r) {
  bool ok = r.args[0] >= kMinProtocolVersion && r.args[0] <= kProtocolVersion;
  if (!ok) {
    add(stats.errors);
    log_warn("write-persist: the host speaks protocol version " + std::to_string(r.args[0]) + ", this engine " +
             std::to_string(kProtocolVersion));
  }
  queue_completion({r.id, kProtocolVersion, static_cast<uint32_t>(Op::kHello), ok ? 0 : -EPROTO, 0});
}

// Opening is synchronous on the dispatcher (a claim waits for fdatasync),
// outside the lock so that the polling thread keeps harvesting meanwhile.
void WritePersistEngine::Impl::on_open(Request& q) {
  const ChannelRequest& r = q.r;
  add(stats.files_opened);
  {
    std::lock_guard lock(mu);
    flush();
    if (auto it = files.find(r.id); it != files.end()) {
      fail(*it->second, -EEXIST, "opened again while open (file id " + std::to_string(r.id) + ")");
      return;
    }
  }
  auto f = std::make_unique<FileCtx>();
  f->id = r.id;
  f->name = std::move(q.text);
  bool in_pool = (r.args[0] & kUsePool) && pool && open_in_pool(*f);
  if (!in_pool) open_normal(*f);
  std::lock_guard lock(mu);
  files.emplace(r.id, std::move(f));
}

// The SST file pool path (PulseDB §III-C): claim a slot (its owner record is
// durable first), make the name a symlink to it, write the slot. False when
// the pool is exhausted: the caller makes a normal file instead.
bool WritePersistEngine::Impl::open_in_pool(FileCtx& f) {
  if (f.name.empty() || f.name[0] != '/') {
    fail(f, -EINVAL, "a pool file needs an absolute name");
    return true;
  }
  std::optional<SstPool::Slot> slot;
  try {
    slot = pool->claim(f.name);
  } catch (const std::system_error& e) {
    fail(f, -e.code().value(), std::string("cannot claim a pool slot (") + e.what() + ")");
    return true;
  }
  if (!slot) return false;
  if ((::unlink(f.name.c_str()) != 0 && errno != ENOENT) || ::symlink(slot->path.c_str(), f.name.c_str()) != 0) {
    int err = errno;
    release_slot(slot->index);
    fail(f, -err, "cannot make it a symlink to " + slot->path);
    return true;
  }
  f.slot = slot->index;
  f.created = true;
  add(stats.pool_files);
  f.fd = open_file(slot->path, O_WRONLY | O_CLOEXEC, f);
  if (f.fd < 0) {
    int err = errno;
    fail(f, -err, "cannot open its slot " + slot->path);
  }
  return true;
}

// O_DIRECT where the options ask for it and the filesystem takes it (tmpfs
// and FIFOs do not: then buffered).
int WritePersistEngine::Impl::open_file(const std::string& path, int flags, FileCtx& f) {
  if (options.direct_io) {
    int fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd >= 0 || errno != EINVAL) {
      f.direct = fd >= 0;
      if (f.direct) add(stats.direct_files);
      return fd;
    }
  }
  f.direct = false;
  return ::open(path.c_str(), flags, 0644);
}

void WritePersistEngine::Impl::open_normal(FileCtx& f) {
  f.fd = open_file(f.name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, f);
  if (f.fd < 0) {
    int err = errno;
    return fail(f, -err, "cannot create it");
  }
  f.created = true;
  add(stats.normal_files);
}

void WritePersistEngine::Impl::on_write(Request& q) {
  StagedWrite& p = *q.staged;
  std::unique_lock lock(mu);
  copy_staged -= p.len;
  room.notify_all();
  FileCtx& f = file(q.r.id);
  settle(f, lock, true);
  auto op = begin_write(f, p.offset, p.len, lock, &p);
  if (!op) return buffers.give(std::move(p.buf));
  finish_write(std::move(op));
}

std::unique_ptr<IoOp> WritePersistEngine::Impl::begin_write(FileCtx& f, uint64_t offset, uint64_t len,
                                                            std::unique_lock<std::mutex>& lock, StagedWrite* staged) {
  if (f.error || f.fd < 0 || len == 0) return nullptr;
  if (f.direct) {
    if (offset != f.next_offset) {
      fail(f, -EINVAL, "a write at " + std::to_string(offset) + ", not in file order (the next is due at " +
                           std::to_string(f.next_offset) + ")");
      return nullptr;
    }
  }
  reserve(lock, 1, len);
  if (f.error) {  // an earlier write of the file failed while this one waited for room
    unreserve(1, len);
    return nullptr;
  }
  const uint64_t fill = f.direct ? f.next_offset - f.tail_start : 0;
  auto op = std::make_unique<IoOp>(Io::kWrite, &f, ++f.writes_sent, f.direct ? f.tail_start : offset, 0);
  op->at = offset;
  op->fill = fill;
  op->data_len = len;
  if (staged) {
    // In file order a direct file's tail is exactly the staged bytes' lead.
    op->buf = std::move(staged->buf);
    op->base = f.direct ? 0 : staged->lead;
  } else {
    op->buf = buffers.take(fill + len);
  }
  std::memcpy(op->buf.data.get(), f.tail.data(), fill);
  f.next_offset = offset + len;
  f.writes_in_flight.insert(op->seq);  // the range_syncs and the sync_close behind it wait for it
  return op;
}

// The buffer is filled: a direct file writes its whole blocks and keeps the
// rest as its tail.
void WritePersistEngine::Impl::finish_write(std::unique_ptr<IoOp> op) {
  FileCtx& f = *op->file;
  if (f.error) return retire_write(std::move(op));  // an earlier write of the file failed meanwhile
  add(stats.writes);
  op->len = op->fill + op->data_len;
  if (f.direct) {
    const uint64_t whole = align_down(op->len);
    std::memcpy(f.tail.data(), op->buf.data.get() + whole, op->len - whole);
    f.tail_start = op->offset + whole;
    op->len = whole;
  }
  if (op->len == 0) {  // all of it in the tail
    f.bytes_written += op->data_len;
    add(stats.write_bytes, op->data_len);
    return retire_write(std::move(op));
  }
  submit_write(op.release());
}

void WritePersistEngine::Impl::retire_write(std::unique_ptr<IoOp> op) {
  FileCtx& f = *op->file;
  f.writes_in_flight.erase(op->seq);
  buffers.give(std::move(op->buf));
  unreserve(1, op->data_len);
  advance(f);
}

// A direct file's last partial block, zero-padded (start_close truncates the
// file to its final size).
void WritePersistEngine::Impl::write_tail(FileCtx& f, std::unique_lock<std::mutex>& lock) {
  const uint64_t n = f.next_offset - f.tail_start;
  if (!f.direct || n == 0 || f.error || f.fd < 0) return;
  reserve(lock, 1, 0);
  if (f.error) return unreserve(1, 0);
  auto op = std::make_unique<IoOp>(Io::kWrite, &f, ++f.writes_sent, f.tail_start, kDirectAlign);
  op->buf = buffers.take(kDirectAlign);
  std::memcpy(op->buf.data.get(), f.tail.data(), n);
  std::memset(op->buf.data.get() + n, 0, kDirectAlign - n);
  f.tail_start += kDirectAlign;
  f.next_offset = f.tail_start;
  f.writes_in_flight.insert(op->seq);
  submit_write(op.release());
}

// The pull path: the receiver has queued the pull already (it never waits
// behind this queue pair's writes: their budget, their submission); here
// it takes its place in the file's order, and its write is sequenced once
// it is pulled (settle: now, or by the DMA thread, or before the file's
// next request).
void WritePersistEngine::Impl::on_write_from(Request& q) {
  std::unique_lock lock(mu);
  FileCtx& f = file(q.r.id);
  settle(f, lock, true);  // the file's earlier pulls (the plugin waits for each anyway)
  f.pulled.push_back(q.staged);
  settle(f, lock, false);
}

void WritePersistEngine::Impl::on_range_sync(const ChannelRequest& r) {
  std::unique_lock lock(mu);
  add(stats.range_syncs);
  FileCtx& f = file(r.id);
  settle(f, lock, true);  // the range covers the pulled writes before it
  if (f.error) return;
  reserve(lock, 1, 0);
  f.deferred_syncs.push_back(std::make_unique<IoOp>(Io::kRangeSync, &f, f.writes_sent, r.args[0], r.args[1]));
  advance(f);
}

void WritePersistEngine::Impl::on_sync_close(const ChannelRequest& r) {
  std::unique_lock lock(mu);
  add(stats.sync_closes);
  FileCtx& f = file(r.id);
  if (f.close_requested) {
    add(stats.errors);
    log_warn("write-persist: " + f.name + ": a second sync_close, ignored");
    return;
  }
  settle(f, lock, true);  // every write of the file is sequenced: the tail is known then
  write_tail(f, lock);
  reserve(lock, 2, 0);  // fsync and close
  f.close_requested = true;
  f.final_size = r.args[0];
  advance(f);
}

// The link goes here, in the queue pair's order; the slot's release goes to
// the releaser, or, for a file of this queue pair still closing, waits for
// its close (finish_file): its writes and fsync must be done before the slot
// is written out and can be claimed again.
void WritePersistEngine::Impl::on_recycle(Request& q) {
  add(stats.recycles);
  std::string path = std::move(q.text);
  ChannelCompletion c{q.r.id, 0, static_cast<uint32_t>(Op::kRecycle), 0, kNoSlot};
  std::optional<uint32_t> slot;
  if (pool) slot = pool->slot_of(path);
  std::string problem;
  {
    std::lock_guard lock(mu);
    flush();
    FileCtx* open = nullptr;
    for (auto& [id, f] : files)
      if (slot && f->slot == *slot) open = f.get();
    if (open && !open->close_requested) {
      c.status = -EBUSY;
      problem = "it is still open for writing on this queue pair (no sync_close yet); nothing was removed";
    } else if (::unlink(path.c_str()) != 0) {
      const int err = errno;
      c.status = -err;
      problem = std::strerror(err);
    } else if (slot && open) {
      open->recycle_after_close = true;
      open->recycle = c;
      return;
    }
  }
  if (c.status) {
    add(stats.errors);
    log_warn("write-persist: cannot recycle " + path + ": " + problem);
  }
  if (!slot || c.status) return queue_completion(c);
  queue_release({*slot, false, c, path});
}

// An operator's release through the running agent: only of this engine's
// own pool (the directory the operator named must be it), and only of a
// slot that is quarantined when the releaser gets to it.
void WritePersistEngine::Impl::on_release_slot(Request& q) {
  ChannelCompletion c{q.r.id, 0, static_cast<uint32_t>(Op::kReleaseSlot), 0, q.r.args[0]};
  std::error_code ec;
  const std::string named = q.text.empty() ? std::string() : std::filesystem::canonical(q.text, ec).string();
  if (!pool || ec || named != pool->dir()) {
    c.status = -ENXIO;
    add(stats.errors);
    log_warn("write-persist: refused to release slot " + std::to_string(q.r.args[0]) + " of the pool " + q.text +
             ": " + (pool ? "this agent's pool is " + pool->dir() : std::string("this agent has no pool")));
    return queue_completion(c);
  }
  if (q.r.args[0] > UINT32_MAX) {
    c.status = -EPERM;
    return queue_completion(c);
  }
  queue_release({static_cast<uint32_t>(q.r.args[0]), true, c, "slot " + std::to_string(q.r.args[0])});
}

// ------------------------------------------- file contexts and dependencies

// A request for a file the host never opened gets a failed context, so that
// the file's sync_close reports it.
FileCtx& WritePersistEngine::Impl::file(uint64_t id) {
  if (auto it = files.find(id); it != files.end()) return *it->second;
  auto f = std::make_unique<FileCtx>();
  f->id = id;
  f->name = "file id " + std::to_string(id);
  fail(*f, -EBADF, "a request for a file that was never opened");
  return *files.emplace(id, std::move(f)).first->second;
}

void WritePersistEngine::Impl::fail(FileCtx& f, int32_t err, const std::string& what) {
  if (f.error == 0) {
    f.error = err;
    std::lock_guard l(failed_mu);
    failed_files.insert(f.id);
  }
  add(stats.errors);
  log_warn("write-persist: " + f.name + ": " + what + ": " + std::strerror(-err));
}

// The user-space dependency tracker: submits each deferred range_sync once
// every write sent before it has completed (writes complete in any order),
// and the sync_close once nothing of the file is in flight or deferred.
void WritePersistEngine::Impl::advance(FileCtx& f) {
  if (f.error) {
    unreserve(static_cast<unsigned>(f.deferred_syncs.size()), 0);
    f.deferred_syncs.clear();
  }
  auto done_through = [&](uint64_t seq) { return f.writes_in_flight.empty() || *f.writes_in_flight.begin() > seq; };
  while (!f.deferred_syncs.empty() && done_through(f.deferred_syncs.front()->seq)) {
    submit_range_sync(std::move(f.deferred_syncs.front()));
    f.deferred_syncs.pop_front();
  }
  if (f.close_requested && !f.closing && f.writes_in_flight.empty() && f.deferred_syncs.empty() &&
      f.syncs_in_flight == 0)
    start_close(f);
}

// fsync linked to close, in one submission (IOSQE_IO_LINK only chains
// adjacent SQEs of one batch). A failed file is only closed.
void WritePersistEngine::Impl::start_close(FileCtx& f) {
  f.closing = true;
  // RocksDB's final size is what stat must report (its consistency check
  // compares them); the writes alone leave `end`, and a pool slot is written
  // out to the slot's size (pool.h).
  if (f.error == 0 && (f.final_size != f.end || f.slot != kNoSlot) &&
      ::ftruncate(f.fd, static_cast<off_t>(f.final_size)) != 0) {
    int err = errno;
    fail(f, -err, "cannot set its final size " + std::to_string(f.final_size));
  }
  if (f.error || f.fd < 0) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    unreserve(2, 0);
    return finish_file(f);
  }
  if (io_uring_sq_space_left(&ring) < 2) flush();
  auto fsync_op = std::make_unique<IoOp>(Io::kFsync, &f);
  auto close_op = std::make_unique<IoOp>(Io::kClose, &f);
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_fsync(sqe, f.fd, 0);
  sqe->flags |= IOSQE_IO_LINK;
  queue(sqe, fsync_op.release());
  sqe = next_sqe();
  io_uring_prep_close(sqe, f.fd);
  queue(sqe, close_op.release());
}

void WritePersistEngine::Impl::finish_file(FileCtx& f) {
  queue_completion(
      {f.id, static_cast<int64_t>(f.bytes_written), static_cast<uint32_t>(Op::kSyncClose), f.error, f.slot});
  if (f.recycle_after_close) queue_release({static_cast<uint32_t>(f.slot), false, f.recycle, f.name});
  if (f.error) {
    std::lock_guard l(failed_mu);
    failed_files.erase(f.id);
  }
  files.erase(f.id);
}

// --------------------------------------------------------- io_uring submission

// Admits `ios` SQEs and `bytes` write bytes, waiting while too much is in
// flight (the bounded pipeline stage: the host feels it as back-pressure).
bool WritePersistEngine::Impl::fits(unsigned ios, uint64_t bytes) const {
  return reserved_ios + ios <= io_capacity &&
         (inflight_bytes == 0 || inflight_bytes + bytes <= options.max_inflight_bytes);
}

void WritePersistEngine::Impl::reserve(std::unique_lock<std::mutex>& lock, unsigned ios, uint64_t bytes) {
  if (!fits(ios, bytes)) {
    flush();  // what we wait for must be in the kernel
    room.wait(lock, [&] { return fits(ios, bytes); });
  }
  reserved_ios += ios;
  inflight_bytes += bytes;
}

void WritePersistEngine::Impl::unreserve(unsigned ios, uint64_t bytes) {
  reserved_ios -= ios;
  inflight_bytes -= bytes;
  room.notify_all();
}

io_uring_sqe* WritePersistEngine::Impl::next_sqe() {
  if (sync_calls || aio) return &aside_sqes.emplace_back();  // zeroed; a deque keeps earlier ones in place
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) {
    flush();
    if (sqpoll) io_uring_sqring_wait(&ring);  // until the SQ thread has taken some
    sqe = io_uring_get_sqe(&ring);
    if (!sqe) throw std::logic_error("write-persist: no SQE free after a submit");
  }
  return sqe;
}

// A prepared SQE takes `op` along; the next flush() submits it.
void WritePersistEngine::Impl::queue(io_uring_sqe* sqe, IoOp* op) {
  ++prepared;
  io_uring_sqe_set_data(sqe, op);
  trace(Kind::kSubmit, *op, 0);
}

void WritePersistEngine::Impl::submit_write(IoOp* op) {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_write(sqe, op->file->fd, op->buf.data.get() + op->base + op->done,
                      static_cast<unsigned>(op->len - op->done),
                      op->offset + op->done);
  queue(sqe, op);
}

void WritePersistEngine::Impl::submit_range_sync(std::unique_ptr<IoOp> op) {
  FileCtx& f = *op->file;
  ++f.syncs_in_flight;
  // The SQE's length is 32 bits; 0 means "to the end of the file", a superset.
  unsigned len = op->len > UINT32_MAX ? 0 : static_cast<unsigned>(op->len);
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_sync_file_range(sqe, f.fd, len, op->offset, SYNC_FILE_RANGE_WRITE);
  queue(sqe, op.release());
}

void WritePersistEngine::Impl::flush() {
  if (sync_calls) return run_sync_calls();
  if (aio) return submit_aio();
  if (sqpoll) {
    // The kernel's SQ thread takes them: one call publishes the tail and
    // wakes the thread if it sleeps (no system call otherwise).
    if (prepared == 0) return;
    int r;
    while ((r = io_uring_submit(&ring)) < 0) {
      if (r == -EAGAIN || r == -EBUSY) std::this_thread::sleep_for(1ms);
      else if (r != -EINTR) throw std::system_error(-r, std::generic_category(), "write-persist: io_uring_submit");
    }
    add(stats.submit_calls);
    add(stats.sqes_submitted, prepared);
    raise_max(stats.max_inflight_ios, stats.inflight_ios.fetch_add(prepared, std::memory_order_relaxed) + prepared);
    prepared = 0;
    return;
  }
  prepared = 0;
  while (io_uring_sq_ready(&ring) > 0) {
    int r = io_uring_submit(&ring);
    if (r > 0) {
      add(stats.submit_calls);
      add(stats.sqes_submitted, static_cast<uint64_t>(r));
      raise_max(stats.max_inflight_ios, stats.inflight_ios.fetch_add(r, std::memory_order_relaxed) + r);
    } else if (r == 0 || r == -EAGAIN || r == -EBUSY) {
      std::this_thread::sleep_for(1ms);  // the kernel is short of memory for a moment
    } else if (r != -EINTR) {
      throw std::system_error(-r, std::generic_category(), "write-persist: io_uring_submit");
    }
  }
}

// The pwrite engine: each prepared SQE as the system call it stands for, its
// result handled as its CQE would be (which may prepare more: done in turn).
// Linked fsync + close run one after the other, the close also after a
// failed fsync, as Linux 6.x runs a linked close.
void WritePersistEngine::Impl::run_sync_calls() {
  while (!aside_sqes.empty()) {
    const io_uring_sqe sqe = aside_sqes.front();
    aside_sqes.pop_front();
    prepared = 0;
    add(stats.submit_calls);
    add(stats.sqes_submitted);
    int32_t res = 0;
    ssize_t r = 0;
    switch (sqe.opcode) {
      case IORING_OP_WRITE:
        r = ::pwrite(sqe.fd, reinterpret_cast<const void*>(sqe.addr), sqe.len, static_cast<off_t>(sqe.off));
        break;
      case IORING_OP_SYNC_FILE_RANGE:
        r = ::sync_file_range(sqe.fd, static_cast<off_t>(sqe.off), sqe.len, sqe.sync_range_flags);
        break;
      case IORING_OP_FSYNC: r = ::fsync(sqe.fd); break;
      case IORING_OP_CLOSE: r = ::close(sqe.fd); break;
      default: break;  // the poller's wake-up NOP
    }
    res = r < 0 ? -errno : static_cast<int32_t>(r);
    add(stats.cqes_completed);
    if (sqe.user_data != kWakeTag) on_cqe(reinterpret_cast<IoOp*>(sqe.user_data), res);
  }
}

// The libaio engine: the prepared writes and fsyncs of a flush as iocbs in
// one io_submit (the polling thread reaps them with io_getevents and handles
// each as a CQE); what AIO has no command for is a system call here, its
// result handled at once: sync_file_range (submitted only once the writes
// it covers completed, so those in this batch are later ones), and the close
// linked to an fsync (when the fsync completes: aio_complete). An fsync the
// file system refuses (EINVAL) is a system call, and every later one.
void WritePersistEngine::Impl::submit_aio() {
  prepared = 0;
  while (!aside_sqes.empty()) {
    std::vector<iocb> cbs;
    cbs.reserve(aside_sqes.size());
    while (!aside_sqes.empty()) {
      const io_uring_sqe sqe = aside_sqes.front();
      aside_sqes.pop_front();
      if (sqe.opcode == IORING_OP_FSYNC && (sqe.flags & IOSQE_IO_LINK) && !aside_sqes.empty() &&
          aside_sqes.front().opcode == IORING_OP_CLOSE) {
        aio_linked.emplace(sqe.user_data, aside_sqes.front());
        aside_sqes.pop_front();
      }
      if (sqe.opcode == IORING_OP_WRITE) {
        io_prep_pwrite(&cbs.emplace_back(), sqe.fd, reinterpret_cast<void*>(sqe.addr), sqe.len,
                       static_cast<long long>(sqe.off));
      } else if (sqe.opcode == IORING_OP_FSYNC && !aio_no_fsync) {
        io_prep_fsync(&cbs.emplace_back(), sqe.fd);
      } else {
        aio_syscall(sqe);  // may prepare more: the outer loop takes them
        continue;
      }
      cbs.back().data = reinterpret_cast<void*>(sqe.user_data);
    }
    std::vector<iocb*> ptrs;
    for (iocb& cb : cbs) ptrs.push_back(&cb);
    size_t at = 0;
    while (at < ptrs.size()) {
      int r = io_submit(aio_ctx, static_cast<long>(ptrs.size() - at), ptrs.data() + at);
      if (r > 0) {
        add(stats.submit_calls);
        add(stats.sqes_submitted, static_cast<uint64_t>(r));
        raise_max(stats.max_inflight_ios, stats.inflight_ios.fetch_add(r, std::memory_order_relaxed) + r);
        at += static_cast<size_t>(r);
      } else if (r == 0 || r == -EAGAIN) {
        std::this_thread::sleep_for(1ms);  // the polling thread's io_getevents frees room
      } else if (r != -EINTR) {
        // The iocb at `at` was refused: its CQE carries the error, or an
        // fsync this file system does not take through AIO is done here.
        iocb& cb = *ptrs[at++];
        const uint64_t tag = reinterpret_cast<uint64_t>(cb.data);
        if (cb.aio_lio_opcode == IO_CMD_FSYNC && r == -EINVAL) {
          if (!aio_no_fsync)
            log_info("write-persist: libaio: the file system refuses IOCB_CMD_FSYNC: fsync is a system call");
          aio_no_fsync = true;
          add(stats.aio_fsync_refused);
          io_uring_sqe sqe{};
          sqe.opcode = IORING_OP_FSYNC;
          sqe.fd = static_cast<int32_t>(cb.aio_fildes);
          sqe.user_data = tag;
          aio_syscall(sqe);
        } else {
          add(stats.sqes_submitted);
          add(stats.cqes_completed);
          aio_complete(tag, r);
        }
      }
    }
  }
}

// An op AIO has no command for, done now as its system call.
void WritePersistEngine::Impl::aio_syscall(const io_uring_sqe& sqe) {
  add(stats.aio_sync_calls);
  add(stats.sqes_submitted);
  add(stats.cqes_completed);
  ssize_t r = 0;
  switch (sqe.opcode) {
    case IORING_OP_SYNC_FILE_RANGE:
      r = ::sync_file_range(sqe.fd, static_cast<off_t>(sqe.off), sqe.len, sqe.sync_range_flags);
      break;
    case IORING_OP_FSYNC: r = ::fsync(sqe.fd); break;
    case IORING_OP_CLOSE: r = ::close(sqe.fd); break;
    default: throw std::logic_error("write-persist: libaio: no system call for SQE opcode " +
                                    std::to_string(sqe.opcode));
  }
  aio_complete(sqe.user_data, r < 0 ? -errno : static_cast<int32_t>(r));
}

// An op's completion as its CQE, then the close linked behind an fsync
// (also after a failed fsync, as Linux 6.x runs a linked close).
void WritePersistEngine::Impl::aio_complete(uint64_t user_data, int32_t res) {
  on_cqe(reinterpret_cast<IoOp*>(user_data), res);
  if (auto it = aio_linked.find(user_data); it != aio_linked.end()) {
    const io_uring_sqe close_sqe = it->second;
    aio_linked.erase(it);
    aio_syscall(close_sqe);
  }
}

void WritePersistEngine::Impl::trace(Kind kind, const IoOp& op, int32_t res) {
  if (options.trace) options.trace(IoEvent{kind, op.io, op.file->id, op.seq, res});
}

// ----------------------------------------------------------- the polling thread

void WritePersistEngine::Impl::poll_loop() {
  DpuThreadClock clock(options.dpu_speed, stats);
  std::vector<io_event> events(aio ? io_capacity + 1 : 0);
  while (!stop_polling.load(std::memory_order_relaxed)) {
    int r;  // libaio: events reaped; io_uring: 0 once a CQE is there
    if (aio) {
      timespec ts{0, kPollTimeoutNs};
      r = io_getevents(aio_ctx, 1, static_cast<long>(events.size()), events.data(), &ts);
      if (r == 0) r = -ETIME;
    } else {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{0, kPollTimeoutNs};
      r = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
    }
    if (r < 0) {
      if (r != -ETIME && r != -EINTR) {
        log_error(std::string("write-persist: waiting for ") + (aio ? "libaio" : "io_uring") +
                  " completions: " + std::strerror(-r));
        std::this_thread::sleep_for(10ms);
      }
      clock.start();  // woke with nothing to do: idle, not work
      continue;
    }
    try {
      if (aio) harvest_aio(events.data(), r);
      else harvest();
    } catch (const std::exception& e) {
      log_error(std::string("write-persist: ") + e.what());
    }
    clock.pay();
    post_ready();
  }
}

void WritePersistEngine::Impl::harvest() {
  std::lock_guard lock(mu);
  io_uring_cqe* cqe;
  while (io_uring_peek_cqe(&ring, &cqe) == 0) {
    uint64_t tag = cqe->user_data;
    int32_t res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    add(stats.cqes_completed);
    stats.inflight_ios.fetch_sub(1, std::memory_order_relaxed);
    if (tag != kWakeTag) on_cqe(reinterpret_cast<IoOp*>(tag), res);
  }
  flush();  // range_syncs and sync_closes that became ready
}

// libaio's events, in the order io_getevents returned them.
void WritePersistEngine::Impl::harvest_aio(const io_event* events, int n) {
  std::lock_guard lock(mu);
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = reinterpret_cast<uint64_t>(events[i].data);
    if (tag == kWakeTag) continue;
    add(stats.cqes_completed);
    stats.inflight_ios.fetch_sub(1, std::memory_order_relaxed);
    aio_complete(tag, static_cast<int32_t>(static_cast<long>(events[i].res)));
  }
  flush();  // range_syncs and sync_closes that became ready
}

void WritePersistEngine::Impl::on_cqe(IoOp* op, int32_t res) {
  trace(Kind::kComplete, *op, res);
  switch (op->io) {
    case Io::kWrite: return write_done(op, res);
    case Io::kRangeSync: return sync_done(std::unique_ptr<IoOp>(op), res);
    case Io::kFsync:
    case Io::kClose: return close_done(std::unique_ptr<IoOp>(op), res);
  }
}

void WritePersistEngine::Impl::write_done(IoOp* op, int32_t res) {
  FileCtx& f = *op->file;
  if (res > 0) {
    op->done += static_cast<uint64_t>(res);
    if (op->done < op->len) return submit_write(op);  // a short write: the rest goes again
    f.end = std::max(f.end, op->offset + op->len);
    f.bytes_written += op->data_len;  // the host's bytes (a direct file's tail bytes count with their write)
    add(stats.write_bytes, op->data_len);
  }
  std::unique_ptr<IoOp> own(op);
  if (res <= 0) {
    uint64_t left = op->len - op->done, at = op->offset + op->done;
    std::string what = "write of " + std::to_string(left) + " bytes at offset " + std::to_string(at);
    // A pool file only needs new space beyond its preallocated slot.
    if (res == -ENOSPC && f.slot != kNoSlot && at + left > pool->slot_bytes())
      what += " (past its slot of " + std::to_string(pool->slot_bytes()) +
              " bytes: the slots are smaller than the files, and the pool's filesystem is full)";
    fail(f, res < 0 ? res : -EIO, what);
  }
  retire_write(std::move(own));
}

void WritePersistEngine::Impl::sync_done(std::unique_ptr<IoOp> op, int32_t res) {
  FileCtx& f = *op->file;
  --f.syncs_in_flight;
  unreserve(1, 0);
  if (res < 0)
    fail(f, res, "range_sync of " + std::to_string(op->len) + " bytes at offset " + std::to_string(op->offset));
  advance(f);
}

// The sync_close completes when both CQEs of its fsync + close are in.
void WritePersistEngine::Impl::close_done(std::unique_ptr<IoOp> op, int32_t res) {
  FileCtx& f = *op->file;
  unreserve(1, 0);
  if (op->io == Io::kFsync) {
    if (res < 0) fail(f, res, "fsync");
  } else {
    // A failed fsync cancels the linked close on kernels that fail links for
    // it (Linux 6.x runs the close anyway): then close the file here.
    if (res == -ECANCELED) ::close(f.fd);
    else if (res < 0) fail(f, res, "close");
    f.fd = -1;
  }
  if (++f.close_cqes == 2) finish_file(f);
}

// ------------------------------------------------------------ the DMA stage

// The pull stands for the DPU's DMA engine reading host memory: its CPU time
// is the hw share of the process's (EngineStats::pull_cpu_ns), at full speed.
// What the thread does around it (the completion, sequencing the write) is
// the dpu CPU's, dilated. A pull is completed before its write is submitted,
// and the thread waits for nothing of the writes but a budget of bytes
// pulled and not yet sequenced (max_inflight_bytes).
void WritePersistEngine::Impl::dma_loop() {
  pthread_setname_np(pthread_self(), "pulsedb:dma");
  DpuThreadClock clock(options.dpu_speed, stats);
  for (;;) {
    std::shared_ptr<StagedWrite> p;
    {
      std::unique_lock l(dma_mu);
      dma_cv.wait(l, [&] { return !pulls.empty() || dma_stop; });
      if (pulls.empty()) break;
      p = std::move(pulls.front());
      pulls.pop_front();
    }
    add(stats.pull_queue_ns, now_ns() - p->queued_ns);
    const auto budget_has_room = [&] {
      const uint64_t staged = staged_bytes.load();
      return staged == 0 || staged + p->len <= options.max_inflight_bytes || dma_stopping;
    };
    // Without mu while there is room: a pull and its reply never wait for
    // the write thread's or the polling thread's work under it (a flush).
    if (!budget_has_room()) {
      std::unique_lock lock(mu);
      while (!budget_has_room()) {
        // Finished pulls hold this budget until their writes are sequenced,
        // which the write thread does only at the file's next request: with
        // nobody else to do it, sequence here what the write budget now
        // takes (its completions wake `room` too), or the host's next pull
        // waits forever.
        try {
          settle_all(lock);
          flush();
        } catch (const std::exception& e) {
          log_error(std::string("write-persist: ") + e.what());
        }
        if (!budget_has_room()) room.wait(lock);
      }
    }
    staged_bytes += p->len;
    p->buf = buffers.take(p->lead + p->len);
    const uint64_t cpu0 = thread_cpu_ns();
    const int err = pull(*p);
    const uint64_t copy_ns = thread_cpu_ns() - cpu0;
    add(stats.pull_cpu_ns, copy_ns);
    clock.exclude(copy_ns);
    const ChannelCompletion reply = pull_completion(*p, err);
    clock.pay();
    post({reply});  // the host's buffer is free
    add(stats.pull_reply_ns, now_ns() - p->received_ns);
    try {
      std::unique_lock lock(mu);
      pulled(*p, err);
      // Its write, unless that would wait, if the write thread has given it
      // its place in the file's order.
      if (auto it = files.find(p->file); !p->sequenced && it != files.end() && !it->second->pulled.empty() &&
                                         it->second->pulled.front() == p)
        settle(*it->second, lock, false);
      flush();
    } catch (const std::exception& e) {
      log_error(std::string("write-persist: ") + e.what());
    }
    clock.pay();
    post_ready();
  }
}

int WritePersistEngine::Impl::pull(StagedWrite& p) const {
  uint64_t done = 0;
  while (done < p.len) {
    iovec local{p.buf.data.get() + p.lead + done, p.len - done};
    iovec remote{reinterpret_cast<void*>(p.addr + done), p.len - done};
    ssize_t n = ::process_vm_readv(host_pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EFAULT;
    done += static_cast<uint64_t>(n);  // a partial read stops at a page it could not read: the rest again
  }
  return 0;
}

// A pull's reply, without mu. A failed pull writes nothing and does not
// fail the file: the host sends the bytes again through the ring. A file
// that failed already writes nothing (its sync_close says why); one the
// write thread has not opened yet is not known to have failed.
ChannelCompletion WritePersistEngine::Impl::pull_completion(const StagedWrite& p, int err) {
  bool file_failed;
  {
    std::lock_guard l(failed_mu);
    file_failed = failed_files.count(p.file) > 0;
  }
  const bool write = err == 0 && !file_failed;
  if (err) {
    add(stats.pull_failures);
    log_warn("write-persist: file id " + std::to_string(p.file) + ": cannot pull " + std::to_string(p.len) +
             " bytes from host process " + std::to_string(host_pid) + ": " + std::strerror(err));
  } else if (write) {
    add(stats.pulls);
    add(stats.pull_bytes, p.len);
  }
  return {p.file, write ? static_cast<int64_t>(p.len) : 0, static_cast<uint32_t>(Op::kWriteFrom), -err, p.offset};
}

// The pull is done (its reply posted): its write may be sequenced; mu held.
void WritePersistEngine::Impl::pulled(StagedWrite& p, int err) {
  p.done = true;
  p.err = err;
  room.notify_all();  // the write thread may wait for this pull
}

void WritePersistEngine::Impl::settle(FileCtx& f, std::unique_lock<std::mutex>& lock, bool wait) {
  while (!f.pulled.empty()) {
    std::shared_ptr<StagedWrite> p = f.pulled.front();
    if (!p->done) {
      if (!wait) return;
      // The DMA thread may wait for pulled bytes to be sequenced, which may
      // wait for the write budget: sequence what can be, each time room
      // frees. Meanwhile the DMA thread may sequence this one: look again.
      settle_all(lock);
      if (!p->done) room.wait(lock);
      continue;
    }
    const bool write = p->err == 0 && f.error == 0 && f.fd >= 0;
    if (!wait && write && !fits(1, p->len)) return;
    f.pulled.pop_front();
    p->sequenced = true;  // from here `f` may finish and go
    staged_bytes -= p->len;
    room.notify_all();
    std::unique_ptr<IoOp> op;
    if (write) op = begin_write(f, p->offset, p->len, lock, p.get());
    if (op) {
      finish_write(std::move(op));
    } else if (p->buf.data) {
      buffers.give(std::move(p->buf));
    }
  }
}

void WritePersistEngine::Impl::settle_all(std::unique_lock<std::mutex>& lock) {
  std::vector<uint64_t> ids;  // settling may finish a file, and erase it
  for (auto& [id, f] : files)
    if (!f->pulled.empty() && f->pulled.front()->done) ids.push_back(id);
  for (uint64_t id : ids)
    if (auto it = files.find(id); it != files.end()) settle(*it->second, lock, false);
}

// After the last request: every pull queued is done (or failed) first.
void WritePersistEngine::Impl::stop_dma() {
  {
    std::lock_guard l(dma_mu);
    dma_stop = true;
  }
  {
    std::lock_guard lock(mu);
    dma_stopping = true;  // nothing will sequence the pulled writes now: the budget no longer holds a pull
    room.notify_all();
  }
  dma_cv.notify_all();
  if (dma.joinable()) dma.join();
}

// --------------------------------------------- completions and the end of a queue pair

void WritePersistEngine::Impl::queue_completion(const ChannelCompletion& c) { t_ready.push_back(c); }

// This thread's completions (t_ready); call it after paying for their work.
void WritePersistEngine::Impl::post_ready() {
  std::vector<ChannelCompletion> out;
  out.swap(t_ready);
  post(out);
}

void WritePersistEngine::Impl::post(const std::vector<ChannelCompletion>& out) {
  if (out.empty() || host_gone) return;
  std::lock_guard lock(post_mu);
  try {
    qp->complete(out);
  } catch (const ChannelError& e) {
    host_gone = true;  // the dispatcher learns it from receive and winds down
    log_warn(std::string("write-persist: cannot post completions: ") + e.what());
  }
}

// Waits for every SQE in flight or deferred, stops the polling thread, then
// closes and recycles the files whose sync_close never came.
void WritePersistEngine::Impl::drain() noexcept {
  stop_dma();  // its pulls hold reservations: done before the wait below
  try {
    std::unique_lock lock(mu);
    flush();
    room.wait(lock, [&] { return reserved_ios == 0; });
  } catch (const std::exception& e) {
    log_error(std::string("write-persist: while draining: ") + e.what());
  }
  stop_polling = true;
  wake_poller();
  poller.join();
  stop_releaser();  // after the last close: a recycle may wait for one
  post_ready();
  decltype(files) left;
  {
    std::lock_guard lock(mu);
    left.swap(files);
  }
  for (auto& [id, f] : left) abandon(*f);
}

void WritePersistEngine::Impl::wake_poller() {
  if (aio) {  // a write to /dev/null completes at once
    static const char byte = 0;
    iocb cb;
    io_prep_pwrite(&cb, aio_wake_fd, const_cast<char*>(&byte), 1, 0);
    cb.data = nullptr;  // kWakeTag
    iocb* p = &cb;
    io_submit(aio_ctx, 1, &p);  // if refused, the poller's timeout covers it
    return;
  }
  std::lock_guard lock(mu);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (!sqe) return;  // the SQ is never full here; the poller's timeout covers it anyway
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data64(sqe, kWakeTag);
  ++prepared;
  try {
    flush();
  } catch (const std::exception&) {
  }
}

void WritePersistEngine::Impl::abandon(FileCtx& f) {
  if (f.fd >= 0) ::close(f.fd);
  f.fd = -1;
  if (!f.created) return;
  log_info("write-persist: " + f.name + ": no sync_close came, removing it");
  if (f.slot == kNoSlot) {
    ::unlink(f.name.c_str());
    return;
  }
  if (pool->slot_of(f.name) == f.slot) ::unlink(f.name.c_str());  // only if it is still our symlink
  release_slot(static_cast<uint32_t>(f.slot));
}

void WritePersistEngine::Impl::queue_release(SlotReleaseJob job) {
  {
    std::lock_guard l(rel_mu);
    releases.push_back(std::move(job));
  }
  rel_cv.notify_one();
}

void WritePersistEngine::Impl::release_loop() {
  pthread_setname_np(pthread_self(), "pulsedb:release");
  DpuThreadClock clock(options.dpu_speed, stats);
  for (;;) {
    SlotReleaseJob job;
    {
      std::unique_lock l(rel_mu);
      rel_cv.wait(l, [&] { return !releases.empty() || rel_stop; });
      if (releases.empty()) return;
      job = std::move(releases.front());
      releases.pop_front();
    }
    run_release(job);
    clock.pay();  // its work at the dpu's speed before its completion leaves
    post({job.c});
  }
}

void WritePersistEngine::Impl::run_release(SlotReleaseJob& job) {
  std::string problem;
  try {
    if (!job.only_quarantined) {
      pool->release(job.slot);
      job.c.result = 1;
      job.c.arg = job.slot;
    } else if (auto held = pool->release_quarantined(job.slot)) {
      job.c.result = static_cast<int64_t>(held->bytes);
    } else {
      job.c.status = -EPERM;
      log_warn("write-persist: refused to release " + job.what + " of " + pool->dir() +
               ": it is not quarantined (free, in use, or no such slot)");
      return;
    }
  } catch (const std::system_error& e) {
    job.c.status = -e.code().value();
    problem = e.what();
  } catch (const std::exception& e) {
    job.c.status = -EINVAL;
    problem = e.what();
  }
  if (job.c.status) {
    add(stats.errors);
    log_warn("write-persist: cannot release " + job.what + ": " + problem);
  }
}

// Every release queued is done (and completed) first.
void WritePersistEngine::Impl::stop_releaser() {
  {
    std::lock_guard l(rel_mu);
    rel_stop = true;
  }
  rel_cv.notify_all();
  if (releaser.joinable()) releaser.join();
}

void WritePersistEngine::Impl::release_slot(uint32_t slot) {
  try {
    pool->release(slot);
  } catch (const std::exception& e) {
    add(stats.errors);
    log_warn(std::string("write-persist: ") + e.what());
  }
}

// -------------------------------------------------------------------- facade

const char* io_engine_name(IoEngine e) {
  switch (e) {
    case IoEngine::kIoUringSqpoll: return "io_uring-sqpoll";
    case IoEngine::kPwrite: return "pwrite";
    case IoEngine::kLibaio: return "libaio";
    case IoEngine::kIoUring: break;
  }
  return "io_uring";
}

IoEngine parse_io_engine(const std::string& name) {
  for (IoEngine e : {IoEngine::kIoUring, IoEngine::kIoUringSqpoll, IoEngine::kLibaio, IoEngine::kPwrite})
    if (name == io_engine_name(e)) return e;
  throw std::invalid_argument("I/O engine '" + name + "': io_uring, io_uring-sqpoll, libaio or pwrite");
}

WritePersistEngine::WritePersistEngine(SstPool* pool, EngineStats& stats, const EngineOptions& options)
    : impl_(nullptr), pool_(pool), stats_(stats), options_(options) {
  impl_ = new Impl(pool_, stats_, options_);
}

WritePersistEngine::~WritePersistEngine() { delete impl_; }

void WritePersistEngine::serve(ChannelDpu& qp) { impl_->serve(qp); }

void WritePersistEngine::stop() { impl_->stop_serving = true; }

}  // namespace dpukit::kv
