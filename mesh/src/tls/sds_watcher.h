// Certificate rotation from SDS files (sds_config: {path_config_source: {path}}):
// the control plane's thread looks at every SDS file the running
// configuration names, once a second; when one changes (a node agent writes a
// new file and renames it into place, as Istio's does every 24 h), its secret
// is read and checked as at start, and the TLS contexts that use it get a new
// SSL_CTX: new handshakes take the new certificate, connections already open
// keep theirs. A file that does not read or check is refused with a log line,
// and the certificate in use stays.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "dataplane/snapshot.h"

namespace dpukit::mesh {

class SdsWatcher {
 public:
  using Current = std::function<std::shared_ptr<const Snapshot>()>;
  SdsWatcher(boost::asio::io_context& io, Current current);
  void stop();
  // Looks at the files once (the timer calls it; tests may too). Returns how many contexts took a new secret.
  size_t poll();

 private:
  void arm();

  boost::asio::steady_timer timer_;
  Current current_;
  std::map<std::string, config::SdsFile::Stamp> seen_;  // path -> what it was when last read
  const Snapshot* snapshot_ = nullptr;  // the snapshot `seen_` was taken for
};

}  // namespace dpukit::mesh
