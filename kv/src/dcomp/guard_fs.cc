#include "guard_fs.h"

#include "dpukit/core/log.h"

namespace dpukit::kv::dcomp {

namespace {

class ClosedFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  ClosedFile(std::unique_ptr<rocksdb::FSWritableFile> f, std::function<void()> closed)
      : FSWritableFileOwnerWrapper(std::move(f)), closed_(std::move(closed)) {}
  rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    rocksdb::IOStatus s = target()->Close(o, d);
    closed_();
    return s;
  }

 private:
  std::function<void()> closed_;
};

}  // namespace

JobDirGuardFs::JobDirGuardFs(const std::shared_ptr<rocksdb::FileSystem>& base, std::string dir,
                             std::atomic<uint64_t>& refused)
    : rocksdb::FileSystemWrapper(base), dir_(std::move(dir)), refused_(refused) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

bool JobDirGuardFs::inside(const std::string& path) const {
  return path == dir_ || (path.size() > dir_.size() && path.compare(0, dir_.size(), dir_) == 0 &&
                          path[dir_.size()] == '/' && path.find("/../", dir_.size()) == std::string::npos &&
                          !path.ends_with("/.."));
}

rocksdb::IOStatus JobDirGuardFs::refuse(const char* what, const std::string& path) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  log_warn(std::string("dcomp-worker: refused to ") + what + " " + path + " (outside the job directory " + dir_ + ")");
  return rocksdb::IOStatus::IOError("dcomp worker may not " + std::string(what) + " outside " + dir_, path);
}

rocksdb::IOStatus JobDirGuardFs::wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* r) {
  if (s.ok() && on_closed_ && *r) *r = std::make_unique<ClosedFile>(std::move(*r), on_closed_);
  return s;
}

rocksdb::IOStatus JobDirGuardFs::DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                                            rocksdb::IODebugContext* d) {
  if (!inside(f)) return refuse("delete", f);
  return target()->DeleteFile(f, o, d);
}

rocksdb::IOStatus JobDirGuardFs::RenameFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                                            rocksdb::IODebugContext* d) {
  if (!inside(s) || !inside(t)) return refuse("rename", s + " -> " + t);
  return target()->RenameFile(s, t, o, d);
}

rocksdb::IOStatus JobDirGuardFs::LinkFile(const std::string& s, const std::string& t, const rocksdb::IOOptions& o,
                                          rocksdb::IODebugContext* d) {
  if (!inside(t)) return refuse("link", s + " -> " + t);
  return target()->LinkFile(s, t, o, d);
}

rocksdb::IOStatus JobDirGuardFs::DeleteDir(const std::string& dir, const rocksdb::IOOptions& o,
                                           rocksdb::IODebugContext* d) {
  if (!inside(dir)) return refuse("rmdir", dir);
  return target()->DeleteDir(dir, o, d);
}

rocksdb::IOStatus JobDirGuardFs::Truncate(const std::string& f, size_t size, const rocksdb::IOOptions& o,
                                          rocksdb::IODebugContext* d) {
  if (!inside(f)) return refuse("truncate", f);
  return target()->Truncate(f, size, o, d);
}

rocksdb::IOStatus JobDirGuardFs::NewWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                                 std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                 rocksdb::IODebugContext* d) {
  if (!inside(f)) return refuse("create", f);
  return wrap(target()->NewWritableFile(f, fo, r, d), r);
}

rocksdb::IOStatus JobDirGuardFs::ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& fo,
                                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                    rocksdb::IODebugContext* d) {
  if (!inside(f)) return refuse("reopen", f);
  return wrap(target()->ReopenWritableFile(f, fo, r, d), r);
}

rocksdb::IOStatus JobDirGuardFs::ReuseWritableFile(const std::string& f, const std::string& old,
                                                   const rocksdb::FileOptions& fo,
                                                   std::unique_ptr<rocksdb::FSWritableFile>* r,
                                                   rocksdb::IODebugContext* d) {
  if (!inside(f) || !inside(old)) return refuse("reuse", old + " -> " + f);
  return wrap(target()->ReuseWritableFile(f, old, fo, r, d), r);
}

}  // namespace dpukit::kv::dcomp
