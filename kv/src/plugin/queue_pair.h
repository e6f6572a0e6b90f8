// The host end of one queue pair (PulseDB §III-D): a channel to a
// write-persist engine and a reaper thread that takes its completions. The
// engine is the agent process's (pulsedb) or a thread of this process
// (async-host: the same engine, no agent).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "dpukit/core/channel.h"
#include "engine.h"

namespace dpukit::kv {

class QueuePair;

// Where a queue pair's completions go.
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void on_completion(QueuePair& qp, const ChannelCompletion& c) = 0;
  // The engine is gone (killed, or it dropped the queue pair): nothing more
  // will complete on `qp`.
  virtual void on_broken(QueuePair& qp, const std::string& why) = 0;
};

// A writer holding a reservation of the payload region (its batch of
// appends). Another writer on the same queue pair first makes it commit.
class BatchOwner {
 public:
  virtual ~BatchOwner() = default;
  virtual void commit_batch() = 0;
};

class QueuePair {
 public:
  // Connects to the agent at `socket` and checks the protocol version.
  // Throws ChannelError (nobody there) or std::runtime_error (wrong version).
  static std::unique_ptr<QueuePair> connect(const std::string& socket, const ChannelConfig& cfg, CompletionSink& sink);
  // Starts an engine in a thread of this process (async-host).
  static std::unique_ptr<QueuePair> in_process(const ChannelConfig& cfg, CompletionSink& sink, SstPool* pool,
                                               EngineStats& stats);
  ~QueuePair();  // closes the channel in order and joins the threads

  bool broken() const { return broken_.load(std::memory_order_acquire); }
  const std::string& broken_why() const { return broken_why_; }

  // --- the submitting side; every call below needs the lock ---
  std::unique_lock<std::mutex> lock() { return std::unique_lock(submit_mu_); }
  // Submits one request; throws ChannelError when the engine is gone.
  void submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload, std::initializer_list<uint64_t> args);
  // A reservation of `len` payload bytes for `owner` (another owner's open
  // batch is committed first).
  std::span<uint8_t> reserve(BatchOwner* owner, size_t len);
  void commit(BatchOwner* owner, uint32_t op, uint64_t id, size_t len, std::initializer_list<uint64_t> args);
  // Forgets `owner`'s reservation (the writer gives up its batch).
  void drop_owner(BatchOwner* owner);

 private:
  QueuePair(ChannelHost ch, CompletionSink& sink);
  void hello();
  void start_reaper();
  void reap();
  void mark_broken(const std::string& why);

  ChannelHost ch_;
  CompletionSink& sink_;
  std::mutex submit_mu_;
  BatchOwner* owner_ = nullptr;
  std::atomic<bool> claimed_broken_{false};  // mark_broken runs once
  std::atomic<bool> broken_{false};
  std::string broken_why_;
  std::atomic<bool> stopping_{false};
  std::thread reaper_;
  // async-host: the engine's end and thread
  std::unique_ptr<ChannelDpu> engine_end_;
  std::unique_ptr<WritePersistEngine> engine_;
  std::thread engine_thread_;
};

}  // namespace dpukit::kv
