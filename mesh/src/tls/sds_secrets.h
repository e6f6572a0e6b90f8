// The secrets of SDS, on the control plane's thread.
//
// Files (sds_config: {path_config_source: {path}}): every SDS file the
// running configuration names, and every certificate, key and CA file those
// secrets name, is looked at once a second; when one changes (a node agent
// writes a new file and renames it into place, as Istio's does every 24 h, or
// rewrites a certificate in place), its secret is read and checked as at
// start. A file that does not read or check is refused with a log line, and
// the certificate in use stays.
//
// Pushes (sds_config: {ads: {}} or a gRPC SecretDiscoveryService,
// xds/sds_client.h): what a stream delivers is kept by stream and name, put
// into every running context that names it, and into every configuration
// built later. A secret that OpenSSL refuses refuses the whole push (the
// stream NACKs it) and nothing changes.
//
// Either way the TLS contexts that use a new secret get a new SSL_CTX: new
// handshakes take the new certificate, connections already open keep theirs.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
#include <boost/asio.hpp>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataplane/snapshot.h"

namespace dpukit::mesh {

class TlsContext;

class SdsSecrets {
 public:
  using Current = std::function<std::shared_ptr<const Snapshot>()>;
  SdsSecrets(boost::asio::io_context& io, Current current);
  void stop();
  // Looks at the files once (the timer calls it; tests may too). Returns how many contexts took a new secret.
  size_t poll();

  // The secrets a push of `stream` ("ads", "grpc:<cluster>") delivered, by
  // name; a state-of-the-world response names only what it carries, so the
  // others stay. "" when every running context that names one took it, else
  // why not (then none changed).
  std::string push(const std::string& stream, const std::map<std::string, config::Secret>& secrets);
  // A configuration about to be built takes the pushed secrets it names;
  // returns those not yet received ("grpc:sds-grpc/default").
  std::vector<std::string> fill(config::Bootstrap& b) const;
  // Every pushed secret `b` names has arrived.
  bool complete(const config::Bootstrap& b) const;

 private:
  void arm();
  // Looks at the SDS files of `c` and the files their secrets name (those not looked at yet).
  void watch(const TlsContext& c);
  const config::Secret* find(const config::SdsSecret& sds) const;

  boost::asio::steady_timer timer_;
  Current current_;
  std::map<std::string, config::FileStamp> seen_;  // path -> what it was when last read
  std::map<std::string, std::set<std::string>> sds_of_;   // a certificate/key/CA file -> the SDS files naming it
  const Snapshot* snapshot_ = nullptr;                    // the snapshot `seen_` was taken for
  std::map<std::string, std::map<std::string, config::Secret>> pushed_;  // by stream, by name
};

}  // namespace dpukit::mesh
