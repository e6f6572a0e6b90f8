#include "tls/sds_watcher.h"

#include <set>

#include "dpukit/core/log.h"
#include "tls/tls_context.h"

namespace dpukit::mesh {

namespace {

// Every TLS context of a snapshot: the filter chains' and the clusters'.
std::vector<TlsContext*> contexts(const Snapshot& s) {
  std::vector<TlsContext*> out;
  const auto add = [&](const ListenerRuntime& l) {
    if (l.tls) out.push_back(l.tls.get());
  };
  for (const auto& l : s.listeners) {
    add(l);
    for (const auto& c : l.chains) add(*c);
  }
  for (const auto& [name, c] : s.clusters)
    if (c->tls) out.push_back(c->tls.get());
  return out;
}

}  // namespace

SdsWatcher::SdsWatcher(boost::asio::io_context& io, Current current) : timer_(io), current_(std::move(current)) {
  arm();
}

void SdsWatcher::stop() { timer_.cancel(); }

void SdsWatcher::arm() {
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    poll();
    arm();
  });
}

size_t SdsWatcher::poll() {
  const std::shared_ptr<const Snapshot> snapshot = current_();
  if (!snapshot) return 0;
  // A new configuration: its files as they were when the parser read them.
  if (snapshot.get() != snapshot_) {
    snapshot_ = snapshot.get();
    seen_.clear();
    for (TlsContext* c : contexts(*snapshot)) {
      if (c->certificate_sds()) seen_[c->certificate_sds()->path] = c->certificate_sds()->read_at;
      if (c->validation_sds()) seen_[c->validation_sds()->path] = c->validation_sds()->read_at;
    }
  }
  std::set<std::string> changed;
  for (auto& [path, seen] : seen_) {
    const auto now = config::file_stamp(path);
    if (now == seen) continue;
    seen = now;
    changed.insert(path);
  }
  if (changed.empty()) return 0;
  size_t updated = 0;
  for (TlsContext* c : contexts(*snapshot)) {
    const auto rotate = [&](const std::optional<config::SdsFile>& sds, auto&& load_and_install) {
      if (!sds || !changed.count(sds->path)) return;
      try {
        load_and_install(*sds);
        ++updated;
        log_info("mesh: SDS secret '" + sds->name + "' from " + sds->path + " installed; new handshakes use it");
      } catch (const std::exception& e) {
        log_error("mesh: SDS secret '" + sds->name + "' from " + sds->path +
                  " refused, keeping the one in use: " + e.what());
      }
    };
    rotate(c->certificate_sds(), [&](const config::SdsFile& sds) { c->update_certificate(config::load_sds_certificate(sds)); });
    rotate(c->validation_sds(), [&](const config::SdsFile& sds) { c->update_validation(config::load_sds_validation(sds)); });
  }
  return updated;
}

}  // namespace dpukit::mesh
