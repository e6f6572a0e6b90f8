// Registration with RocksDB's ObjectRegistry, so an unmodified application
// (db_bench --fs_uri=pulsedb://SOCKET) gets the plugin by loading the
// library: a static initializer adds the factories to the default library.
#include <rocksdb/utilities/object_registry.h>

#include "dpukit/kv.h"
#include "offload_fs.h"

namespace dpukit::kv {
namespace {

rocksdb::FileSystem* make(const std::string& uri, std::unique_ptr<rocksdb::FileSystem>* guard, std::string* errmsg) {
  try {
    guard->reset(new OffloadFileSystem(rocksdb::FileSystem::Default(), ParseOffloadUri(uri)));
    return guard->get();
  } catch (const std::exception& e) {
    *errmsg = e.what();
    return nullptr;
  }
}

struct Registrar {
  Registrar() {
    auto lib = rocksdb::ObjectLibrary::Default();
    for (const char* scheme : {"pulsedb", "pulsedb-async", "pulsedb-filepool"})
      lib->AddFactory<rocksdb::FileSystem>(rocksdb::ObjectLibrary::PatternEntry(scheme, true).AddSeparator("://", false),
                                           make);
  }
} registrar;

// Records, for this thread, what the next table file is for, and where a
// flush or compaction begins (its files' errors are that job's alone).
class OffloadListener final : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "PulseDbOffloadListener"; }
  void OnFlushBegin(rocksdb::DB*, const rocksdb::FlushJobInfo&) override { OffloadFileSystem::note_job_begin(); }
  void OnCompactionBegin(rocksdb::DB*, const rocksdb::CompactionJobInfo&) override {
    OffloadFileSystem::note_job_begin();
  }
  void OnTableFileCreationStarted(const rocksdb::TableFileCreationBriefInfo& info) override {
    OffloadFileSystem::note_purpose(info.file_path, info.reason == rocksdb::TableFileCreationReason::kCompaction
                                                        ? OffloadFileSystem::Purpose::kCompaction
                                                        : info.reason == rocksdb::TableFileCreationReason::kFlush
                                                              ? OffloadFileSystem::Purpose::kFlush
                                                              : OffloadFileSystem::Purpose::kUnknown);
  }
};

}  // namespace

std::shared_ptr<rocksdb::EventListener> NewOffloadListener() { return std::make_shared<OffloadListener>(); }

std::shared_ptr<rocksdb::FileSystem> NewOffloadFileSystem(std::shared_ptr<rocksdb::FileSystem> base,
                                                          const OffloadOptions& options) {
  return std::make_shared<OffloadFileSystem>(std::move(base), options);
}

}  // namespace dpukit::kv
