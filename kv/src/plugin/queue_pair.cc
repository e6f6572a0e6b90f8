#include "queue_pair.h"

#include <pthread.h>

#include <cerrno>
#include <stdexcept>

#include "dpukit/core/log.h"
#include "protocol.h"

namespace dpukit::kv {

QueuePair::QueuePair(ChannelHost ch, CompletionSink& sink) : ch_(std::move(ch)), sink_(sink) {}

std::unique_ptr<QueuePair> QueuePair::connect(const std::string& socket, const ChannelConfig& cfg,
                                              CompletionSink& sink) {
  std::unique_ptr<QueuePair> qp(new QueuePair(ChannelHost::connect(socket, cfg), sink));
  qp->hello();
  qp->start_reaper();
  return qp;
}

std::unique_ptr<QueuePair> QueuePair::in_process(const ChannelConfig& cfg, CompletionSink& sink, SstPool* pool,
                                                 EngineStats& stats) {
  auto [host, dpu] = make_channel_pair(cfg);
  std::unique_ptr<QueuePair> qp(new QueuePair(std::move(host), sink));
  qp->engine_end_ = std::make_unique<ChannelDpu>(std::move(dpu));
  qp->engine_ = std::make_unique<WritePersistEngine>(pool, stats);
  qp->engine_thread_ = std::thread([p = qp.get()] {
    // Named so that the benchmarks count it as host compaction CPU (its
    // harvester thread inherits the name).
    pthread_setname_np(pthread_self(), "pulsedb:engine");
    try {
      p->engine_->serve(*p->engine_end_);
    } catch (const std::exception& e) {
      log_warn(std::string("kv: in-process write-persist engine stopped: ") + e.what());
    }
  });
  qp->hello();
  qp->start_reaper();
  return qp;
}

void QueuePair::start_reaper() {
  reaper_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "pulsedb:reaper");  // host-side offload work, counted with compaction's
    reap();
  });
}

void QueuePair::hello() {
  ch_.submit(static_cast<uint32_t>(Op::kHello), 0, {}, {kProtocolVersion});
  ChannelCompletion c{};
  if (ch_.wait_completions(&c, 1, std::chrono::seconds(10)) != 1)
    throw std::runtime_error("kv: the write-persist engine did not answer the hello");
  if (c.op != static_cast<uint32_t>(Op::kHello) || c.status != 0)
    throw std::runtime_error("kv: the write-persist engine speaks protocol version " + std::to_string(c.result) +
                             ", this plugin " + std::to_string(kProtocolVersion));
}

QueuePair::~QueuePair() {
  stopping_ = true;  // before the close: the engine's orderly close that answers it is no loss
  {
    auto l = lock();
    try {
      if (owner_) owner_->commit_batch();
    } catch (const ChannelError&) {  // the engine is gone: nothing to commit to
    }
    owner_ = nullptr;
    if (ch_.has_reservation()) ch_.cancel_reservation();
    try {
      ch_.close();
    } catch (...) {
    }
  }
  if (reaper_.joinable()) reaper_.join();
  if (engine_thread_.joinable()) engine_thread_.join();
}

void QueuePair::mark_broken(const std::string& why) {
  if (claimed_broken_.exchange(true)) return;
  broken_why_ = why;  // written before broken_ is published: readers see broken() first
  broken_.store(true, std::memory_order_release);
  sink_.on_broken(*this, why);
}

// Takes completions until the channel is closed in order or the engine is gone.
void QueuePair::reap() {
  ChannelCompletion c[64];
  for (;;) {
    size_t n;
    try {
      n = ch_.wait_completions(c, 64, std::chrono::milliseconds(50));
    } catch (const ChannelError& e) {
      if (e.kind() == ChannelError::Kind::kPeerClosed && stopping_) return;
      mark_broken(e.what());
      return;
    }
    for (size_t i = 0; i < n; ++i) sink_.on_completion(*this, c[i]);
    if (n == 0 && stopping_) {
      // Closed by us: whatever the engine still owed has been answered or
      // will not be (the engine drains before it sees the close).
      try {
        while ((n = ch_.wait_completions(c, 64, std::chrono::milliseconds(200))) > 0)
          for (size_t i = 0; i < n; ++i) sink_.on_completion(*this, c[i]);
      } catch (const ChannelError&) {
      }
      return;
    }
  }
}

void QueuePair::submit(uint32_t op, uint64_t id, std::span<const uint8_t> payload,
                       std::initializer_list<uint64_t> args) {
  if (owner_) {
    BatchOwner* o = owner_;
    owner_ = nullptr;
    o->commit_batch();
  }
  ch_.submit(op, id, payload, args);
}

std::span<uint8_t> QueuePair::reserve(BatchOwner* owner, size_t len) {
  if (owner_ && owner_ != owner) {
    BatchOwner* o = owner_;
    owner_ = nullptr;
    o->commit_batch();
  }
  auto room = ch_.reserve(len);
  owner_ = owner;
  return room;
}

void QueuePair::commit(BatchOwner* owner, uint32_t op, uint64_t id, size_t len, std::initializer_list<uint64_t> args) {
  if (owner_ == owner) owner_ = nullptr;
  ch_.commit(op, id, len, args);
}

void QueuePair::drop_owner(BatchOwner* owner) {
  if (owner_ != owner) return;
  owner_ = nullptr;
  if (ch_.has_reservation()) ch_.cancel_reservation();
}

}  // namespace dpukit::kv
