// The worker's file system for one job: everything passes through, except
// that nothing outside the job's output directory may be deleted, renamed
// over, linked over, truncated or (re)created. It guards RocksDB 7.8.3's bug
// where an empty subcompaction output deletes TableFileName(cf_paths, n) — a
// path in the PRIMARY's directory, possibly a live SST (compaction_job.cc).
// A refusal is an error status; RocksDB only logs a failed DeleteFile at the
// buggy call site.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <rocksdb/file_system.h>

namespace dpukit::kv::dcomp {

class JobDirGuardFs : public rocksdb::FileSystemWrapper {
 public:
  // `refused` counts the refusals.
  JobDirGuardFs(const std::shared_ptr<rocksdb::FileSystem>& base, std::string dir, std::atomic<uint64_t>& refused);
  const char* Name() const override { return "DpukitJobDirGuardFs"; }

  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus RenameFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus LinkFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus DeleteDir(const std::string& dir, const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus Truncate(const std::string& f, size_t size, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& fo,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override;

  bool inside(const std::string& path) const;

  // Called after each file this file system opened for writing is closed
  // (an output SST done), on the thread that closed it.
  void on_file_closed(std::function<void()> f) { on_closed_ = std::move(f); }

 private:
  rocksdb::IOStatus wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* r);
  rocksdb::IOStatus refuse(const char* what, const std::string& path);
  std::string dir_;
  std::atomic<uint64_t>& refused_;
  std::function<void()> on_closed_;
};

}  // namespace dpukit::kv::dcomp
