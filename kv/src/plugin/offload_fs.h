// The host side of PulseDB: a RocksDB FileSystemWrapper that routes the SST
// files compaction writes to a write-persist engine and keeps RocksDB's own
// barriers intact (see docs/kv.md, "Consistency"):
//   - Append (payload=pull, pulsedb) posts a descriptor of RocksDB's buffer
//     and waits until the engine's DMA stage has pulled it (RocksDB reuses
//     the buffer once Append returns); short appends, and every append if the
//     kernel refuses the pull, are copied into the queue pair's payload
//     region instead and return at once, batched up to write_threshold per
//     write request; a range_sync is posted per sync_interval; Sync/Fsync/Close post sync_close
//     without waiting on a thread that fsyncs the file's directory (a
//     compaction's or flush's), and wait for it on any other (a subcompaction
//     thread, which never does); GetFileSize (the writer's and the FS's)
//     answers the logical size at once.
//   - The directory fsync compaction issues before installing its outputs
//     waits for every outstanding sync_close in that directory and returns
//     the first error among the files this job of the calling thread wrote;
//     opening an offloaded file for reading waits for its sync_close and
//     returns its error. A file whose writer is still open is not waited for.
//   - Deleting a pool file recycles its slot.
//   - An engine out of space (ENOSPC, EDQUOT) sends new files to the normal
//     path for a while, so that RocksDB's retry of the failed compaction works.
#pragma once

#include <rocksdb/file_system.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dpukit/kv.h"
#include "engine.h"
#include "pool.h"
#include "queue_pair.h"

namespace dpukit::kv {

// Host-side counters (relaxed atomics), written as JSON at shutdown if asked.
struct PluginStats {
  std::atomic<uint64_t> files_offloaded{0}, files_pool{0}, files_local{0}, files_fallback{0};
  std::atomic<uint64_t> bytes_offloaded{0}, write_requests{0}, range_syncs{0}, sync_closes{0};
  std::atomic<uint64_t> dir_fsync_waits{0}, dir_fsync_wait_ns{0}, read_waits{0}, recycles{0};
  std::atomic<uint64_t> file_errors{0}, queue_pairs{0}, broken_queue_pairs{0};
  std::atomic<uint64_t> pulls{0}, pull_bytes{0}, pull_wait_ns{0}, pull_refusals{0};
};

// One offloaded file from its kOpen to its kSyncClose completion.
struct InFlightFile {
  uint64_t id = 0;
  std::string path, dir;
  QueuePair* qp = nullptr;
  std::atomic<uint64_t> size{0};  // logical size: appended so far; final once host_closed
  bool host_closed = false;  // sync_close posted
  bool done = false;         // sync_close completed (or failed)
  rocksdb::IOStatus status;  // the file's first error
  // The writing thread (a per-thread token: std::thread ids are reused) and
  // its job then: only that job's directory fsync gets the file's error ...
  uint64_t writer_thread = 0, writer_job = 0;
  bool reported = false;     // ... once (or the writer got it itself)
  std::atomic<bool> failed{false};  // status is an error (the writer reads it without the lock)
  // The writer's one kWriteFrom in flight (it waits for its completion).
  bool pull_pending = false;
  uint64_t pull_offset = 0;
  int32_t pull_status = 0;
};

class OffloadFileSystem final : public rocksdb::FileSystemWrapper, public CompletionSink {
 public:
  OffloadFileSystem(std::shared_ptr<rocksdb::FileSystem> base, OffloadOptions options);
  ~OffloadFileSystem() override;

  static const char* kClassName() { return "PulseDbFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewSequentialFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetFileSize(const std::string& fname, const rocksdb::IOOptions& opts, uint64_t* size,
                                rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus FileExists(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus GetChildren(const std::string& dir, const rocksdb::IOOptions& opts,
                                std::vector<std::string>* result, rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& dst, const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& opts,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override;

  // --- for the writable file and the directory ---
  const OffloadOptions& options() const { return options_; }
  PluginStats& stats() { return stats_; }
  // This thread's queue pair, connecting (again) if needed; null if the
  // engine cannot be reached now (the file then takes the normal path).
  QueuePair* queue_pair_for_this_thread();
  uint64_t new_file_id();
  std::shared_ptr<InFlightFile> begin_file(const std::string& path, QueuePair* qp, uint64_t id);
  void file_host_closed(InFlightFile& f, uint64_t size);
  void file_failed(InFlightFile& f, const rocksdb::IOStatus& s);
  rocksdb::IOStatus file_status(InFlightFile& f);
  // The writer learned its file's error itself: no directory fsync reports it again.
  void file_reported(InFlightFile& f);
  // Appends of at least this many bytes are pulled (when pulling is on and
  // the kernel allows it); shorter ones are copied, cheaper than a round trip.
  static constexpr size_t kMinPull = 64 << 10;
  bool pulls() const { return pull_ok_.load(std::memory_order_relaxed); }
  // Marks `f`'s kWriteFrom at `offset` as posted (before it is submitted).
  void pull_posted(InFlightFile& f, uint64_t offset);
  // Waits for it: 0 once pulled, -errno if the engine could not pull it
  // (then pulling stops for this process, said once in the log, and the
  // caller copies), or the file's error if it failed meanwhile (engine gone).
  rocksdb::IOStatus wait_pulled(InFlightFile& f, int32_t* pull_status);
  // Waits until the file's sync_close completed. False at once if its writer
  // is still open: no sync_close has been posted, so nothing would end the wait.
  bool wait_closed(InFlightFile& f);
  // Waits for every posted sync_close in `dir`; the first error among the
  // files the calling thread wrote in its current job (a compaction's thread
  // fsyncs its output directory; another compaction's failure is reported to
  // that one, an earlier failed job's to none, and a flush's fsync of the same
  // directory gets none). Ends the calling thread's job.
  rocksdb::IOStatus wait_directory(const std::string& dir);
  // True if the calling thread will fsync `dir` after writing a file there
  // (it did before, or the listener said it runs flushes or compactions): the
  // file's sync_close need not be waited for at its Sync or Close.
  static bool thread_fsyncs(const std::string& dir);
  // The listener: a flush or compaction begins on the calling thread.
  static void note_job_begin();
  SstPool* pool() { return pool_.get(); }
  // True if the listener named `fname` a compaction (or flush) output.
  enum class Purpose { kUnknown, kCompaction, kFlush };
  static void note_purpose(const std::string& fname, Purpose p);
  static Purpose purpose_of(const std::string& fname);

  // CompletionSink
  void on_completion(QueuePair& qp, const ChannelCompletion& c) override;
  void on_broken(QueuePair& qp, const std::string& why) override;

 private:
  std::shared_ptr<InFlightFile> find_path(const std::string& path);
  rocksdb::IOStatus wait_if_in_flight(const std::string& path, const char* what);
  rocksdb::IOStatus recycle(const std::string& path);
  std::unique_ptr<QueuePair> open_queue_pair();
  ChannelConfig channel_config() const;
  void write_stats() const;

  OffloadOptions options_;
  PluginStats stats_;
  EngineStats engine_stats_;         // async-host: the in-process engine's
  std::unique_ptr<SstPool> pool_;    // async-host and filepool: this process's pool

  std::mutex qp_mu_;
  std::vector<std::unique_ptr<QueuePair>> qps_;             // every queue pair ever opened (alive until shutdown)
  std::unordered_map<std::thread::id, QueuePair*> by_thread_;
  QueuePair* control_ = nullptr;                            // recycle requests from any thread
  std::mutex control_mu_;
  std::chrono::steady_clock::time_point next_connect_{};    // after a failure, retry no sooner
  std::atomic<uint64_t> no_space_until_ns_{0};              // the engine ran out of space: normal path until then
  std::atomic<bool> pull_ok_;                               // payload=pull and no pull refused yet

  std::mutex files_mu_;
  std::condition_variable files_cv_;
  std::unordered_map<uint64_t, std::shared_ptr<InFlightFile>> files_;  // by id
  std::unordered_map<std::string, uint64_t> by_path_;
  std::atomic<uint64_t> next_id_{1};
  struct PendingRecycle {
    QueuePair* qp = nullptr;  // the queue pair it was sent on: only its loss fails it
    bool done = false;
    ChannelCompletion c{};
  };
  std::map<uint64_t, PendingRecycle> control_results_;  // by request id
};

}  // namespace dpukit::kv
