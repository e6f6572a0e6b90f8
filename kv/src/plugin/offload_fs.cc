#include "offload_fs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "dpukit/core/copy.h"
#include "dpukit/core/log.h"
#include "dpukit/core/process.h"
#include "dpukit/core/results.h"
#include "protocol.h"

namespace dpukit::kv {

using rocksdb::FileOptions;
using rocksdb::FSDirectory;
using rocksdb::FSRandomAccessFile;
using rocksdb::FSSequentialFile;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

namespace {

bool is_table_file(const std::string& fname) {
  return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".sst") == 0;
}

std::string parent_dir(const std::string& path) {
  return std::filesystem::path(path).lexically_normal().parent_path().string();
}

std::string normal_dir(const std::string& dir) {
  std::string d = std::filesystem::path(dir).lexically_normal().string();
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// An engine failure as RocksDB should see it: retryable, so that a failed
// compaction is rescheduled instead of stopping the DB.
IOStatus engine_error(const std::string& what) {
  IOStatus s = IOStatus::IOError("pulsedb: " + what);
  s.SetRetryable(true);
  return s;
}

IOStatus errno_status(const std::string& context, int err) {
  if (err == ENOENT) return IOStatus::PathNotFound(context, std::strerror(err));
  if (err == ENOSPC) return IOStatus::NoSpace(context, std::strerror(err));
  return engine_error(context + ": " + std::strerror(err));
}

// "cannot ACTION PATH: it is still open for writing ..." for a file whose
// writer has posted no sync_close yet.
IOStatus still_open(const std::string& action, const std::string& path) {
  return IOStatus::IOError("pulsedb: cannot " + action + " " + path,
                           "it is still open for writing (its writer was not closed, so nothing completes it)");
}

// After the engine fails a file for lack of space, new files take the normal
// path this long: longer than the second RocksDB pauses before it retries a
// failed compaction, so that the retry can succeed; then the engine is tried
// again.
constexpr auto kNoSpaceBackoff = std::chrono::seconds(30);

// What the FileSystem can tell about the calling thread's RocksDB jobs (a
// flush or compaction: the files it writes, then its directory fsync).
struct ThreadJobs {
  uint64_t token;                    // unique for the life of the process (std::thread ids are reused)
  uint64_t job = 0;                  // advanced at every job boundary the FileSystem sees
  bool runs_jobs = false;            // the listener saw a flush or compaction begin on this thread
  std::vector<std::string> fsynced;  // directories this thread has fsynced (the last few)
};
std::atomic<uint64_t> next_thread_token{1};

ThreadJobs& this_thread_jobs() {
  thread_local ThreadJobs t{next_thread_token.fetch_add(1, std::memory_order_relaxed), 0, false, {}};
  return t;
}

// A symlink into an SST file pool (whose slots are named slot-NNNNNN).
bool is_pool_link(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  std::error_code ec;
  auto target = std::filesystem::read_symlink(path, ec);
  return !ec && target.filename().string().rfind("slot-", 0) == 0;
}

// What the listener said about this thread's next table files (a few at most).
thread_local std::unordered_map<std::string, OffloadFileSystem::Purpose> t_purposes;

}  // namespace

void OffloadFileSystem::note_purpose(const std::string& fname, Purpose p) {
  if (t_purposes.size() > 64) t_purposes.clear();  // names never opened
  t_purposes[normal_dir(fname)] = p;
}

void OffloadFileSystem::note_job_begin() {
  ThreadJobs& t = this_thread_jobs();
  ++t.job;  // files of an earlier job that failed before its fsync are not this one's
  t.runs_jobs = true;
}

bool OffloadFileSystem::thread_fsyncs(const std::string& dir) {
  const ThreadJobs& t = this_thread_jobs();
  return t.runs_jobs || std::find(t.fsynced.begin(), t.fsynced.end(), dir) != t.fsynced.end();
}

OffloadFileSystem::Purpose OffloadFileSystem::purpose_of(const std::string& fname) {
  auto it = t_purposes.find(normal_dir(fname));
  if (it == t_purposes.end()) return Purpose::kUnknown;
  Purpose p = it->second;
  t_purposes.erase(it);
  return p;
}

// ------------------------------------------------------------ writable file

// An SST file whose path (normal, pool, or offloaded) is chosen before its
// first write, from what RocksDB has said about it by then.
class OffloadWritableFile final : public FSWritableFile, public BatchOwner {
 public:
  OffloadWritableFile(OffloadFileSystem& fs, std::string fname, const FileOptions& opts)
      : FSWritableFile(opts), fs_(fs), fname_(std::move(fname)), opts_(opts) {}
  ~OffloadWritableFile() override {
    if (state_ != State::kOffloaded) return;
    if (!host_closed_) post_sync_close();  // RocksDB dropped it unclosed
    release_batch();
  }

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = decide(dbg); !s.ok()) return s;
    if (local_) return local_->Append(data, o, dbg);
    return append_offloaded(data);
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t offset, const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = decide(dbg); !s.ok()) return s;
    if (local_) return local_->PositionedAppend(data, offset, o, dbg);
    return IOStatus::NotSupported("pulsedb: offloaded files take Append only");
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* dbg) override {
    if (local_) return local_->Truncate(size, o, dbg);
    if (state_ == State::kOffloaded && size != size_) return IOStatus::NotSupported("pulsedb: truncating an offloaded file");
    return IOStatus::OK();
  }
  IOStatus Close(const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = decide(dbg); !s.ok()) return s;
    if (local_) return local_->Close(o, dbg);
    return post_sync_close();
  }
  IOStatus Flush(const IOOptions& o, IODebugContext* dbg) override {
    // Offloaded: appends stay in the batch until the write threshold.
    return local_ ? local_->Flush(o, dbg) : IOStatus::OK();
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = decide(dbg); !s.ok()) return s;
    return local_ ? local_->Sync(o, dbg) : post_sync_close();
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    if (IOStatus s = decide(dbg); !s.ok()) return s;
    return local_ ? local_->Fsync(o, dbg) : post_sync_close();
  }
  IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const IOOptions& o, IODebugContext* dbg) override {
    // Offloaded files post their own range_syncs, one per sync interval.
    return local_ ? local_->RangeSync(offset, nbytes, o, dbg) : IOStatus::OK();
  }
  void PrepareWrite(size_t offset, size_t len, const IOOptions& o, IODebugContext* dbg) override {
    if (!decide(dbg).ok()) return;
    if (local_) local_->PrepareWrite(offset, len, o, dbg);  // a pool slot is preallocated already
  }
  IOStatus Allocate(uint64_t offset, uint64_t len, const IOOptions& o, IODebugContext* dbg) override {
    return local_ ? local_->Allocate(offset, len, o, dbg) : IOStatus::OK();
  }
  IOStatus InvalidateCache(size_t offset, size_t length) override {
    return local_ ? local_->InvalidateCache(offset, length) : IOStatus::OK();
  }
  uint64_t GetFileSize(const IOOptions& o, IODebugContext* dbg) override {
    return local_ ? local_->GetFileSize(o, dbg) : size_;
  }
  bool use_direct_io() const override { return false; }  // direct writes never reach this class
  bool IsSyncThreadSafe() const override { return false; }
  size_t GetRequiredBufferAlignment() const override {
    return local_ ? local_->GetRequiredBufferAlignment() : rocksdb::kDefaultPageSize;
  }
  size_t GetUniqueId(char* id, size_t max) const override { return local_ ? local_->GetUniqueId(id, max) : 0; }
  void SetIOPriority(rocksdb::Env::IOPriority p) override {
    FSWritableFile::SetIOPriority(p);
    if (local_) local_->SetIOPriority(p);
  }
  void SetWriteLifeTimeHint(rocksdb::Env::WriteLifeTimeHint h) override {
    FSWritableFile::SetWriteLifeTimeHint(h);
    if (local_) local_->SetWriteLifeTimeHint(h);
  }
  void SetPreallocationBlockSize(size_t size) override {
    FSWritableFile::SetPreallocationBlockSize(size);
    if (local_) local_->SetPreallocationBlockSize(size);
  }

  // BatchOwner: posts the appends gathered so far as one write request, then
  // the range_syncs that are due. Called with the queue pair's lock held.
  void commit_batch() override {
    if (batch_.empty()) return;
    size_t len = batch_used_;
    batch_ = {};
    batch_used_ = 0;
    if (len == 0) {
      qp_->drop_owner(this);
      return;
    }
    qp_->commit(this, static_cast<uint32_t>(Op::kWrite), file_->id, len, {sent_});
    sent(len);
  }

 private:
  enum class State { kUndecided, kLocal, kOffloaded };

  // PulseDB offloads what compaction writes. RocksDB tells by the listener's
  // reason if the application installed it; otherwise by the preallocation
  // block size it sets on compaction outputs only, or the IO_LOW priority.
  bool wanted() {
    auto p = OffloadFileSystem::purpose_of(fname_);
    size_t block = 0, last = 0;
    GetPreallocationStatus(&block, &last);
    bool compaction = p == OffloadFileSystem::Purpose::kCompaction ||
                      (p == OffloadFileSystem::Purpose::kUnknown &&
                       (block > 0 || GetIOPriority() == rocksdb::Env::IO_LOW));
    bool flush = p == OffloadFileSystem::Purpose::kFlush ||
                 (p == OffloadFileSystem::Purpose::kUnknown && !compaction);
    return compaction || (flush && fs_.options().offload_flush);
  }

  IOStatus decide(IODebugContext* dbg) {
    if (state_ != State::kUndecided) return IOStatus::OK();
    if (!wanted()) return open_local(dbg, false);
    if (fs_.options().mode == OffloadMode::kFilePool) return open_pool_slot(dbg);
    QueuePair* qp = fs_.queue_pair_for_this_thread();
    if (!qp) return open_local(dbg, true);  // no engine now: the normal path
    try {
      auto l = qp->lock();
      // Absolute: the agent is another process, with a working directory of its own.
      const std::string name = std::filesystem::absolute(fname_).lexically_normal().string();
      qp->submit(static_cast<uint32_t>(Op::kOpen), next_file_id(),
                 std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()), {kUsePool});
    } catch (const ChannelError&) {
      return open_local(dbg, true);  // nothing was written yet: the normal path loses nothing
    }
    qp_ = qp;
    file_ = fs_.begin_file(fname_, qp, pending_id_);
    state_ = State::kOffloaded;
    fs_.stats().files_offloaded.fetch_add(1, std::memory_order_relaxed);
    return IOStatus::OK();
  }

  uint64_t next_file_id() { return pending_id_ = fs_.new_file_id(); }

  // `len` more bytes are in write requests: the range_syncs now due follow
  // them. The queue pair's lock held.
  void sent(uint64_t len) {
    sent_ += len;
    fs_.stats().write_requests.fetch_add(1, std::memory_order_relaxed);
    fs_.stats().bytes_offloaded.fetch_add(len, std::memory_order_relaxed);
    const uint64_t interval = fs_.options().sync_interval;
    while (sent_ - synced_ >= interval) {
      qp_->submit(static_cast<uint32_t>(Op::kRangeSync), file_->id, {}, {synced_, interval});
      synced_ += interval;
      fs_.stats().range_syncs.fetch_add(1, std::memory_order_relaxed);
    }
  }

  IOStatus open_local(IODebugContext* dbg, bool fallback) {
    IOStatus s = fs_.target()->NewWritableFile(fname_, opts_, &local_, dbg);
    if (!s.ok()) return s;
    replay_hints();
    state_ = State::kLocal;
    (fallback ? fs_.stats().files_fallback : fs_.stats().files_local).fetch_add(1, std::memory_order_relaxed);
    return s;
  }

  // filepool: the file lives in a pool slot, written by this thread as usual.
  IOStatus open_pool_slot(IODebugContext* dbg) {
    std::optional<SstPool::Slot> slot;
    try {
      slot = fs_.pool()->claim(fname_);
    } catch (const std::exception& e) {
      // The pool cannot record an owner (an I/O error): nothing is written
      // yet, so the normal path loses nothing. No exception may reach RocksDB.
      log_warn(std::string("kv: ") + fname_ + " takes the normal path: " + e.what());
      return open_local(dbg, true);
    }
    if (!slot) return open_local(dbg, true);  // pool exhausted: counted by the pool
    if (::unlink(fname_.c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      release_slot(slot->index);
      return errno_status("pulsedb: replacing " + fname_, err);
    }
    if (::symlink(slot->path.c_str(), fname_.c_str()) != 0) {
      int err = errno;
      release_slot(slot->index);
      return errno_status("pulsedb: linking " + fname_ + " to " + slot->path, err);
    }
    // Reopen, not create: creating would truncate away the preallocation.
    IOStatus s = fs_.target()->ReopenWritableFile(fname_, opts_, &local_, dbg);
    if (!s.ok()) return s;
    replay_hints();
    state_ = State::kLocal;
    fs_.stats().files_pool.fetch_add(1, std::memory_order_relaxed);
    return s;
  }

  void release_slot(uint32_t slot) {
    try {
      fs_.pool()->release(slot);
    } catch (const std::exception& e) {
      log_warn(std::string("kv: ") + e.what());  // the slot is freed when the pool is next opened
    }
  }

  void replay_hints() {
    size_t block = 0, last = 0;
    GetPreallocationStatus(&block, &last);
    local_->SetIOPriority(GetIOPriority());
    local_->SetWriteLifeTimeHint(GetWriteLifeTimeHint());
    if (block) local_->SetPreallocationBlockSize(block);
  }

  // The engine is gone: the writer returns the error itself.
  IOStatus fail(const ChannelError& e) {
    error_ = engine_error(e.what());
    fs_.file_failed(*file_, error_);
    fs_.file_reported(*file_);
    release_batch();
    return error_;
  }

  // A failed file gives its reservation back: the queue pair must not keep
  // it as the batch owner once this object is gone.
  void release_batch() {
    if (batch_.empty()) return;
    auto l = qp_->lock();
    qp_->drop_owner(this);
    batch_ = {};
    batch_used_ = 0;
  }

  // Copies into the queue pair's payload region (RocksDB reuses its buffer
  // as soon as this returns) and posts a write per write threshold.
  // The engine reported this file failed (or went away): its writer stops here.
  bool failed_meanwhile() {
    if (error_.ok() && file_->failed.load(std::memory_order_acquire)) error_ = fs_.file_status(*file_);
    return !error_.ok();
  }

  IOStatus append_offloaded(const Slice& data) {
    if (failed_meanwhile()) {
      release_batch();
      return error_;
    }
    if (host_closed_) return IOStatus::InvalidArgument("pulsedb: append to " + fname_ + " after sync_close");
    if (data.size() >= OffloadFileSystem::kMinPull && fs_.pulls()) {
      int32_t refused = 0;
      IOStatus s = append_pulled(data, &refused);
      if (!s.ok() || refused == 0) return s;
      // Refused: nothing of it was written; it goes through the ring below.
    }
    try {
      auto l = qp_->lock();
      size_t done = 0;
      while (done < data.size()) {
        if (batch_.empty()) batch_ = qp_->reserve(this, fs_.options().write_threshold);
        size_t n = std::min(data.size() - done, batch_.size() - batch_used_);
        copy_bytes_streaming(batch_.data() + batch_used_, data.data() + done, n);  // see copy.h
        batch_used_ += n;
        done += n;
        size_ += n;
        if (batch_used_ == batch_.size()) commit_batch();
      }
    } catch (const ChannelError& e) {
      return fail(e);
    }
    file_->size.store(size_, std::memory_order_release);  // what the FS-level GetFileSize answers
    return IOStatus::OK();
  }

  // The DMA path: a descriptor of RocksDB's buffer, then the wait until the
  // engine has pulled it. `refused` gets the pull's -errno if the engine
  // could not read this process's memory.
  IOStatus append_pulled(const Slice& data, int32_t* refused) {
    const uint64_t t0 = now_ns();
    uint64_t offset = 0;
    try {
      auto l = qp_->lock();
      commit_batch();  // appends copied before this one go first
      offset = sent_;
      fs_.pull_posted(*file_, offset);
      qp_->submit(static_cast<uint32_t>(Op::kWriteFrom), file_->id, {},
                  {offset, reinterpret_cast<uint64_t>(data.data()), data.size()});
    } catch (const ChannelError& e) {
      return fail(e);
    }
    IOStatus s = fs_.wait_pulled(*file_, refused);
    fs_.stats().pull_wait_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    if (!s.ok()) {
      error_ = s;
      fs_.file_reported(*file_);
      return s;
    }
    if (*refused) return IOStatus::OK();
    fs_.stats().pulls.fetch_add(1, std::memory_order_relaxed);
    fs_.stats().pull_bytes.fetch_add(data.size(), std::memory_order_relaxed);
    try {
      auto l = qp_->lock();
      sent(data.size());
    } catch (const ChannelError& e) {
      return fail(e);
    }
    size_ += data.size();
    file_->size.store(size_, std::memory_order_release);
    return IOStatus::OK();
  }

  // Sync, Fsync and Close: the rest of the batch, then sync_close. No waiting
  // on a thread that fsyncs the file's directory next (a compaction's or
  // flush's thread): that fsync waits and reports the error. Any other thread
  // (RocksDB's subcompaction threads, which exit before their compaction's
  // fsync) waits here and gets the error itself, so that it fails its
  // subcompaction before the compaction installs the file.
  IOStatus post_sync_close() {
    if (host_closed_) return error_;  // OK unless the file failed
    host_closed_ = true;
    if (failed_meanwhile()) {
      release_batch();
      fs_.file_host_closed(*file_, size_);
      fs_.file_reported(*file_);
      return error_;
    }
    try {
      auto l = qp_->lock();
      commit_batch();
      qp_->submit(static_cast<uint32_t>(Op::kSyncClose), file_->id, {}, {size_});
    } catch (const ChannelError& e) {
      fs_.file_host_closed(*file_, size_);
      return fail(e);
    }
    fs_.stats().sync_closes.fetch_add(1, std::memory_order_relaxed);
    fs_.file_host_closed(*file_, size_);
    if (!OffloadFileSystem::thread_fsyncs(file_->dir)) {
      fs_.wait_closed(*file_);
      if (IOStatus s = fs_.file_status(*file_); !s.ok()) {
        error_ = s;
        fs_.file_reported(*file_);
      }
    }
    return error_;
  }

  OffloadFileSystem& fs_;
  const std::string fname_;
  const FileOptions opts_;
  State state_ = State::kUndecided;
  std::unique_ptr<FSWritableFile> local_;
  // offloaded
  QueuePair* qp_ = nullptr;
  std::shared_ptr<InFlightFile> file_;
  uint64_t pending_id_ = 0;
  std::span<uint8_t> batch_;  // reservation in the payload region
  size_t batch_used_ = 0;
  uint64_t size_ = 0;    // appended
  uint64_t sent_ = 0;    // in write requests
  uint64_t synced_ = 0;  // covered by range_syncs
  bool host_closed_ = false;
  IOStatus error_;
};

// ------------------------------------------------------------ directory

// Compaction fsyncs the output directory before it installs its outputs:
// that is where the offloaded files' sync_closes are waited for.
class OffloadDirectory final : public FSDirectory {
 public:
  OffloadDirectory(OffloadFileSystem& fs, std::string dir, std::unique_ptr<FSDirectory> target)
      : fs_(fs), dir_(normal_dir(dir)), target_(std::move(target)) {}
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override {
    IOStatus waited = fs_.wait_directory(dir_);
    IOStatus s = target_->Fsync(o, dbg);
    return waited.ok() ? s : waited;
  }
  IOStatus FsyncWithDirOptions(const IOOptions& o, IODebugContext* dbg,
                               const rocksdb::DirFsyncOptions& d) override {
    IOStatus waited = fs_.wait_directory(dir_);
    IOStatus s = target_->FsyncWithDirOptions(o, dbg, d);
    return waited.ok() ? s : waited;
  }
  IOStatus Close(const IOOptions& o, IODebugContext* dbg) override { return target_->Close(o, dbg); }
  size_t GetUniqueId(char* id, size_t max) const override { return target_->GetUniqueId(id, max); }

 private:
  OffloadFileSystem& fs_;
  std::string dir_;
  std::unique_ptr<FSDirectory> target_;
};

// ------------------------------------------------------------ file system

OffloadFileSystem::OffloadFileSystem(std::shared_ptr<rocksdb::FileSystem> base, OffloadOptions options)
    : FileSystemWrapper(std::move(base)),
      options_(std::move(options)),
      pull_ok_(options_.mode == OffloadMode::kPulseDb && options_.payload == PayloadPath::kPull) {
  if (!options_.pool.empty()) {
    SstPool::Options po;
    po.dir = options_.pool;
    po.slots = options_.pool_slots;
    po.slot_bytes = options_.slot_bytes;
    // filepool's RocksDB reopens the slot for appending: it needs it empty.
    po.write_out = options_.mode != OffloadMode::kFilePool;
    pool_ = std::make_unique<SstPool>(po);
  }
}

OffloadFileSystem::~OffloadFileSystem() {
  {
    std::lock_guard l(qp_mu_);
    by_thread_.clear();
    control_ = nullptr;
  }
  qps_.clear();  // closes every queue pair in order; async-host engines drain and stop
  write_stats();
}

ChannelConfig OffloadFileSystem::channel_config() const {
  ChannelConfig c;
  c.payload_bytes = options_.request_queue;
  c.completion_slots = options_.completion_queue / sizeof(ChannelCompletion);
  c.request_slots = 4096;
  return c;
}

std::unique_ptr<QueuePair> OffloadFileSystem::open_queue_pair() {
  if (options_.mode == OffloadMode::kAsyncHost)
    return QueuePair::in_process(channel_config(), *this, pool_.get(), engine_stats_);
  return QueuePair::connect(options_.agent, channel_config(), *this);
}

QueuePair* OffloadFileSystem::queue_pair_for_this_thread() {
  if (now_ns() < no_space_until_ns_.load(std::memory_order_relaxed)) return nullptr;  // the engine is out of space
  std::lock_guard l(qp_mu_);
  auto me = std::this_thread::get_id();
  if (auto it = by_thread_.find(me); it != by_thread_.end() && !it->second->broken()) return it->second;
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return nullptr;
  try {
    qps_.push_back(open_queue_pair());
  } catch (const std::exception& e) {
    next_connect_ = now + std::chrono::seconds(1);  // an agent that is down is asked again at most once a second
    log_warn(std::string("kv: write-persist engine unavailable, using the normal path: ") + e.what());
    return nullptr;
  }
  stats_.queue_pairs.fetch_add(1, std::memory_order_relaxed);
  return by_thread_[me] = qps_.back().get();
}

uint64_t OffloadFileSystem::new_file_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

std::shared_ptr<InFlightFile> OffloadFileSystem::begin_file(const std::string& path, QueuePair* qp, uint64_t id) {
  auto f = std::make_shared<InFlightFile>();
  f->id = id;
  f->path = path;
  f->dir = parent_dir(path);
  f->qp = qp;
  const ThreadJobs& t = this_thread_jobs();
  f->writer_thread = t.token;
  f->writer_job = t.job;
  std::lock_guard l(files_mu_);
  files_[id] = f;
  by_path_[normal_dir(path)] = id;
  if (qp->broken()) {  // broke between the open and now: on_broken may have missed this file
    f->done = true;
    f->status = engine_error("the write-persist engine is gone: " + qp->broken_why());
    f->failed = true;
  }
  return f;
}

void OffloadFileSystem::file_host_closed(InFlightFile& f, uint64_t size) {
  std::lock_guard l(files_mu_);
  f.size = size;
  f.host_closed = true;
  files_cv_.notify_all();
}

void OffloadFileSystem::file_failed(InFlightFile& f, const IOStatus& s) {
  std::lock_guard l(files_mu_);
  if (!f.done) {
    f.done = true;
    f.status = s;
    f.failed = true;
  }
  stats_.file_errors.fetch_add(1, std::memory_order_relaxed);
  files_cv_.notify_all();
}

void OffloadFileSystem::on_completion(QueuePair&, const ChannelCompletion& c) {
  std::lock_guard l(files_mu_);
  if (c.op == static_cast<uint32_t>(Op::kSyncClose)) {
    auto it = files_.find(c.id);
    if (it == files_.end()) return;
    InFlightFile& f = *it->second;
    if (!f.done) {
      f.done = true;
      if (c.status != 0) {
        std::string why = std::strerror(-c.status);
        if (c.status == -ENOSPC || c.status == -EDQUOT) {
          // Retrying on the engine would fail the same way: the retry takes the normal path.
          uint64_t until = now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(kNoSpaceBackoff).count();
          if (no_space_until_ns_.exchange(until, std::memory_order_relaxed) < now_ns())
            log_warn("kv: the write-persist engine is out of space (" + why + "): new files take the normal path for " +
                     std::to_string(kNoSpaceBackoff.count()) + " s");
          why += " (the engine is out of space; new files take the normal path for a while)";
        }
        // Retryable whatever the errno: the compaction is redone, the DB goes on.
        f.status = engine_error("write-persist of " + f.path + " failed in the engine: " + why);
        f.failed = true;
        stats_.file_errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
  } else if (c.op == static_cast<uint32_t>(Op::kWriteFrom)) {
    auto it = files_.find(c.id);
    if (it == files_.end()) return;
    InFlightFile& f = *it->second;
    if (f.pull_pending && f.pull_offset == c.arg) {
      f.pull_pending = false;
      f.pull_status = c.status;
    }
  } else if (c.op == static_cast<uint32_t>(Op::kRecycle)) {
    if (auto it = control_results_.find(c.id); it != control_results_.end()) it->second = {it->second.qp, true, c};
  }
  files_cv_.notify_all();
}

void OffloadFileSystem::on_broken(QueuePair& qp, const std::string& why) {
  log_warn("kv: write-persist engine lost: " + why + "; its files fail (retryable), new files take the normal path");
  stats_.broken_queue_pairs.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard l(files_mu_);
  for (auto& [id, f] : files_) {
    if (f->qp != &qp || f->done) continue;
    f->done = true;
    f->status = engine_error("the write-persist engine is gone: " + why);
    f->failed = true;
    stats_.file_errors.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& [id, r] : control_results_)
    if (r.qp == &qp && !r.done) r = {r.qp, true, ChannelCompletion{id, 0, static_cast<uint32_t>(Op::kRecycle), -EPIPE, 0}};
  files_cv_.notify_all();
}

std::shared_ptr<InFlightFile> OffloadFileSystem::find_path(const std::string& path) {
  std::lock_guard l(files_mu_);
  auto it = by_path_.find(normal_dir(path));
  if (it == by_path_.end()) return nullptr;
  return files_.at(it->second);
}

IOStatus OffloadFileSystem::file_status(InFlightFile& f) {
  std::lock_guard l(files_mu_);
  return f.status;
}

void OffloadFileSystem::file_reported(InFlightFile& f) {
  std::lock_guard l(files_mu_);
  f.reported = true;
}

void OffloadFileSystem::pull_posted(InFlightFile& f, uint64_t offset) {
  std::lock_guard l(files_mu_);
  f.pull_pending = true;
  f.pull_offset = offset;
  f.pull_status = 0;
}

IOStatus OffloadFileSystem::wait_pulled(InFlightFile& f, int32_t* pull_status) {
  std::unique_lock l(files_mu_);
  files_cv_.wait(l, [&] { return !f.pull_pending || f.done; });
  if (f.pull_pending) return f.status;  // the engine is gone: the file failed
  *pull_status = f.pull_status;
  if (f.pull_status != 0) {
    stats_.pull_refusals.fetch_add(1, std::memory_order_relaxed);
    if (pull_ok_.exchange(false))
      log_warn(std::string("kv: the write-persist engine cannot read this process's memory (process_vm_readv: ") +
               std::strerror(-f.pull_status) + "); appends are copied through the queue pair's ring from now on");
  }
  return IOStatus::OK();
}

bool OffloadFileSystem::wait_closed(InFlightFile& f) {
  std::unique_lock l(files_mu_);
  if (!f.host_closed && !f.done) return false;
  files_cv_.wait(l, [&] { return f.done; });
  return true;
}

IOStatus OffloadFileSystem::wait_if_in_flight(const std::string& path, const char* what) {
  auto f = find_path(path);
  if (!f) return IOStatus::OK();
  stats_.read_waits.fetch_add(1, std::memory_order_relaxed);
  if (!wait_closed(*f)) return still_open(what, path);
  return file_status(*f);
}

IOStatus OffloadFileSystem::wait_directory(const std::string& dir) {
  uint64_t t0 = now_ns();
  std::unique_lock l(files_mu_);
  IOStatus first;
  files_cv_.wait(l, [&] {
    for (auto& [id, f] : files_)
      if (f->dir == dir && f->host_closed && !f->done) return false;
    return true;
  });
  // A failure fails the compaction that wrote the file (RocksDB deletes its
  // outputs and schedules it again), and no other: not a later job of the
  // same thread (its own job failed before this fsync), whose outputs RocksDB
  // would then drop for nothing. A reader of the file still gets the error.
  ThreadJobs& me = this_thread_jobs();
  for (auto& [id, f] : files_) {
    if (f->dir != dir || !f->host_closed || f->status.ok() || f->reported) continue;
    if (f->writer_thread != me.token || f->writer_job != me.job) continue;
    f->reported = true;
    if (first.ok()) first = f->status;
  }
  // The fsync ends the job; from now on this thread's closes in `dir` need not wait.
  ++me.job;
  if (std::find(me.fsynced.begin(), me.fsynced.end(), dir) == me.fsynced.end()) {
    if (me.fsynced.size() >= 16) me.fsynced.erase(me.fsynced.begin());
    me.fsynced.push_back(dir);
  }
  stats_.dir_fsync_waits.fetch_add(1, std::memory_order_relaxed);
  stats_.dir_fsync_wait_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  return first;
}

IOStatus OffloadFileSystem::NewWritableFile(const std::string& fname, const FileOptions& opts,
                                            std::unique_ptr<FSWritableFile>* result, IODebugContext* dbg) {
  // Only buffered SST writes can be offloaded; everything else as usual.
  if (!is_table_file(fname) || opts.use_direct_writes || opts.use_mmap_writes)
    return target()->NewWritableFile(fname, opts, result, dbg);
  result->reset(new OffloadWritableFile(*this, fname, opts));
  return IOStatus::OK();
}

IOStatus OffloadFileSystem::NewRandomAccessFile(const std::string& fname, const FileOptions& opts,
                                                std::unique_ptr<FSRandomAccessFile>* result, IODebugContext* dbg) {
  if (IOStatus s = wait_if_in_flight(fname, "open for reading"); !s.ok()) return s;
  return target()->NewRandomAccessFile(fname, opts, result, dbg);
}

IOStatus OffloadFileSystem::NewSequentialFile(const std::string& fname, const FileOptions& opts,
                                              std::unique_ptr<FSSequentialFile>* result, IODebugContext* dbg) {
  if (IOStatus s = wait_if_in_flight(fname, "open for reading"); !s.ok()) return s;
  return target()->NewSequentialFile(fname, opts, result, dbg);
}

IOStatus OffloadFileSystem::GetFileSize(const std::string& fname, const IOOptions& opts, uint64_t* size,
                                        IODebugContext* dbg) {
  if (auto f = find_path(fname)) {
    std::lock_guard l(files_mu_);
    if (!f->status.ok()) return f->status;
    // The logical size, at once: while it is written too (the engine may be
    // behind), and right after Close (RocksDB's SstFileManager asks then).
    *size = f->size.load(std::memory_order_acquire);
    return IOStatus::OK();
  }
  return target()->GetFileSize(fname, opts, size, dbg);
}

IOStatus OffloadFileSystem::FileExists(const std::string& fname, const IOOptions& opts, IODebugContext* dbg) {
  if (find_path(fname)) return IOStatus::OK();
  return target()->FileExists(fname, opts, dbg);
}

// RocksDB's scan for obsolete files after a failed job lists the directory
// on that job's thread: the job is over, and so is its chance to fsync.
IOStatus OffloadFileSystem::GetChildren(const std::string& dir, const IOOptions& opts,
                                        std::vector<std::string>* result, IODebugContext* dbg) {
  ++this_thread_jobs().job;
  return target()->GetChildren(dir, opts, result, dbg);
}

IOStatus OffloadFileSystem::DeleteFile(const std::string& fname, const IOOptions& opts, IODebugContext* dbg) {
  if (auto f = find_path(fname)) {
    // Its I/O finishes (or failed) before the name goes. One still being
    // written stays: the engine would go on writing its slot.
    if (!wait_closed(*f)) return still_open("delete", fname);
    std::lock_guard l(files_mu_);
    by_path_.erase(normal_dir(fname));
    files_.erase(f->id);
  }
  if (is_pool_link(fname)) return recycle(fname);
  return target()->DeleteFile(fname, opts, dbg);
}

// A pool file's name goes and its slot is recycled: by the pool's owner, the
// engine's process. If that is not reachable, only the link goes; the agent
// frees the slot when it next opens the pool.
IOStatus OffloadFileSystem::recycle(const std::string& path) {
  stats_.recycles.fetch_add(1, std::memory_order_relaxed);
  if (pool_) {
    auto slot = pool_->slot_of(path);
    if (::unlink(path.c_str()) != 0) return errno_status("pulsedb: deleting " + path, errno);
    if (!slot) return IOStatus::OK();
    try {
      pool_->release(*slot);
    } catch (const std::exception& e) {
      // The name is gone; the slot is freed when the pool is next opened. No
      // exception may reach RocksDB.
      log_warn(std::string("kv: ") + e.what());
    }
    return IOStatus::OK();
  }
  std::lock_guard control(control_mu_);
  uint64_t id = new_file_id();
  try {
    {
      std::lock_guard l(qp_mu_);
      if (!control_ || control_->broken()) {
        qps_.push_back(open_queue_pair());
        control_ = qps_.back().get();
      }
    }
    {
      std::lock_guard l(files_mu_);
      control_results_[id] = {control_, false, {}};
    }
    if (control_->broken()) throw ChannelError(ChannelError::Kind::kPeerGone, "the engine is gone");  // on_broken may have missed it
    const std::string name = std::filesystem::absolute(path).lexically_normal().string();  // for the agent
    auto l = control_->lock();
    control_->submit(static_cast<uint32_t>(Op::kRecycle), id,
                     std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()), {});
  } catch (const std::exception& e) {
    std::lock_guard l(files_mu_);
    control_results_.erase(id);
    if (::unlink(path.c_str()) != 0) return errno_status("pulsedb: deleting " + path, errno);
    return IOStatus::OK();
  }
  // Bounded: an agent that is alive but does not answer must not hang RocksDB's deletions.
  std::unique_lock l(files_mu_);
  bool answered = files_cv_.wait_for(l, std::chrono::seconds(10), [&] { return control_results_[id].done; });
  ChannelCompletion c = answered ? control_results_[id].c
                                 : ChannelCompletion{id, 0, static_cast<uint32_t>(Op::kRecycle), -EPIPE, 0};
  control_results_.erase(id);
  l.unlock();
  if (c.status == -EPIPE) {  // the engine went away meanwhile
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_status("pulsedb: deleting " + path, errno);
    return IOStatus::OK();
  }
  if (c.status != 0) return errno_status("pulsedb: recycling " + path, -c.status);
  return IOStatus::OK();
}

IOStatus OffloadFileSystem::RenameFile(const std::string& src, const std::string& dst, const IOOptions& opts,
                                       IODebugContext* dbg) {
  if (IOStatus s = wait_if_in_flight(src, "rename"); !s.ok()) return s;
  IOStatus s = target()->RenameFile(src, dst, opts, dbg);
  if (s.ok()) {  // a renamed offloaded file is known by its new name
    std::lock_guard l(files_mu_);
    if (auto it = by_path_.find(normal_dir(src)); it != by_path_.end()) {
      uint64_t id = it->second;
      by_path_.erase(it);
      by_path_[normal_dir(dst)] = id;
      files_.at(id)->path = dst;
      files_.at(id)->dir = parent_dir(dst);
    }
  }
  return s;
}

IOStatus OffloadFileSystem::LinkFile(const std::string& src, const std::string& dst, const IOOptions& opts,
                                     IODebugContext* dbg) {
  if (IOStatus s = wait_if_in_flight(src, "link"); !s.ok()) return s;
  // A hard link to a pool symlink would outlive the slot it points at once
  // the original is deleted: refuse, and RocksDB (checkpoints) copies instead.
  if (is_pool_link(src)) return IOStatus::NotSupported("pulsedb: pool files are not hard-linked");
  return target()->LinkFile(src, dst, opts, dbg);
}

IOStatus OffloadFileSystem::NewDirectory(const std::string& name, const IOOptions& opts,
                                         std::unique_ptr<FSDirectory>* result, IODebugContext* dbg) {
  std::unique_ptr<FSDirectory> dir;
  IOStatus s = target()->NewDirectory(name, opts, &dir, dbg);
  if (!s.ok()) return s;
  result->reset(new OffloadDirectory(*this, name, std::move(dir)));
  return s;
}

void OffloadFileSystem::write_stats() const {
  if (options_.stats_file.empty()) return;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  nlohmann::json j = {
      {"mode", options_.mode == OffloadMode::kPulseDb     ? "pulsedb"
               : options_.mode == OffloadMode::kAsyncHost ? "async-host"
                                                          : "filepool"},
      {"files_offloaded", v(stats_.files_offloaded)},
      {"files_pool", v(stats_.files_pool)},
      {"files_local", v(stats_.files_local)},
      {"files_fallback", v(stats_.files_fallback)},
      {"bytes_offloaded", v(stats_.bytes_offloaded)},
      {"write_requests", v(stats_.write_requests)},
      {"range_syncs", v(stats_.range_syncs)},
      {"sync_closes", v(stats_.sync_closes)},
      {"dir_fsync_waits", v(stats_.dir_fsync_waits)},
      {"dir_fsync_wait_ms", v(stats_.dir_fsync_wait_ns) / 1e6},
      {"read_waits", v(stats_.read_waits)},
      {"recycles", v(stats_.recycles)},
      {"file_errors", v(stats_.file_errors)},
      {"queue_pairs", v(stats_.queue_pairs)},
      {"broken_queue_pairs", v(stats_.broken_queue_pairs)},
      {"payload", options_.mode != OffloadMode::kPulseDb         ? "copy"
                  : options_.payload == PayloadPath::kCopy        ? "copy"
                  : pull_ok_.load(std::memory_order_relaxed)      ? "pull"
                                                                  : "pull refused: copy"},
      {"pulls", v(stats_.pulls)},
      {"pull_bytes", v(stats_.pull_bytes)},
      {"pull_wait_ms", v(stats_.pull_wait_ns) / 1e6},
      {"pull_refusals", v(stats_.pull_refusals)},
  };
  if (options_.mode == OffloadMode::kAsyncHost) {
    j["engine"] = {{"writes", v(engine_stats_.writes)},
                   {"write_bytes", v(engine_stats_.write_bytes)},
                   {"sqes_submitted", v(engine_stats_.sqes_submitted)},
                   {"cqes_completed", v(engine_stats_.cqes_completed)}};
  }
  if (pool_) {
    auto p = pool_->stats();
    j["pool"] = {{"slots", p.slots}, {"free", p.free}, {"claims", p.claims}, {"exhausted", p.exhausted},
                 {"released", p.released}, {"reclaimed", p.reclaimed}, {"quarantined", p.quarantined},
                 {"returned", p.returned}};
  }
  // A dpukit.result/1 of the host process it is loaded into; its CPU is the
  // tool's to measure (dpukit-kv samples the plugin's threads by name).
  std::string program = "?";
  try {
    program = own_executable().filename().string();
  } catch (const std::exception&) {
  }
  Result r("libdpukit_kv", {program});
  r.parameters()["uri_mode"] = j["mode"];
  r.figures() = std::move(j);
  try {
    r.write(options_.stats_file);
  } catch (const std::exception& e) {
    log_warn(std::string("kv: cannot write the plugin stats: ") + e.what());
  }
}

}  // namespace dpukit::kv
