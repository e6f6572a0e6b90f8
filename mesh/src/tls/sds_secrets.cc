#include "tls/sds_secrets.h"

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

// Where a secret comes from, for the log: the file, or the stream.
std::string origin(const config::SdsSecret& sds) { return sds.pushed() ? sds.stream() : sds.path; }

// The certificate, key and CA files a context's file secrets name, as they
// were read: a rewrite of one in place is a new secret too.
std::vector<const config::DataSource*> named_files(const config::CommonTlsContext& c, bool certificate) {
  std::vector<const config::DataSource*> out;
  const auto add = [&](const config::DataSource& d) {
    if (!d.filename.empty()) out.push_back(&d);
  };
  if (certificate) {
    for (const auto& t : c.tls_certificates) {
      add(t.certificate_chain);
      add(t.private_key);
    }
  } else if (c.validation.trusted_ca) {
    add(*c.validation.trusted_ca);
  }
  return out;
}

}  // namespace

SdsSecrets::SdsSecrets(boost::asio::io_context& io, Current current) : timer_(io), current_(std::move(current)) {
  arm();
}

void SdsSecrets::stop() { timer_.cancel(); }

void SdsSecrets::arm() {
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    poll();
    arm();
  });
}

size_t SdsSecrets::poll() {
  const std::shared_ptr<const Snapshot> snapshot = current_();
  if (!snapshot) return 0;
  // A new configuration: its files as they were when the parser read them.
  if (snapshot.get() != snapshot_) {
    snapshot_ = snapshot.get();
    seen_.clear();
    sds_of_.clear();
    for (TlsContext* c : contexts(*snapshot)) watch(*c);
  }
  std::set<std::string> changed;  // SDS files to read again
  for (auto& [path, seen] : seen_) {
    const auto now = config::file_stamp(path);
    if (now == seen) continue;
    seen = now;
    changed.insert(path);
    if (auto it = sds_of_.find(path); it != sds_of_.end()) changed.insert(it->second.begin(), it->second.end());
  }
  if (changed.empty()) return 0;
  size_t updated = 0;
  for (TlsContext* c : contexts(*snapshot)) {
    const auto rotate = [&](const std::optional<config::SdsSecret>& sds, auto&& load_and_install) {
      if (!sds || sds->pushed() || !changed.count(sds->path)) return;
      try {
        load_and_install(*sds);
        watch(*c);  // the files the new secret names
        ++updated;
        log_info("mesh: SDS secret '" + sds->name + "' from " + sds->path + " installed; new handshakes use it");
      } catch (const std::exception& e) {
        log_error("mesh: SDS secret '" + sds->name + "' from " + sds->path +
                  " refused, keeping the one in use: " + e.what());
      }
    };
    rotate(c->certificate_sds(), [&](const config::SdsSecret& sds) { c->update_certificate(config::load_sds_certificate(sds)); });
    rotate(c->validation_sds(), [&](const config::SdsSecret& sds) { c->update_validation(config::load_sds_validation(sds)); });
  }
  return updated;
}

void SdsSecrets::watch(const TlsContext& c) {
  const config::CommonTlsContext cfg = c.config();
  for (const auto& [sds, certificate] : {std::pair{&c.certificate_sds(), true}, {&c.validation_sds(), false}}) {
    if (!*sds || (*sds)->pushed()) continue;
    seen_.emplace((*sds)->path, (*sds)->read_at);
    for (const config::DataSource* file : named_files(cfg, certificate)) {
      seen_.emplace(file->filename, file->read_at);
      sds_of_[file->filename].insert((*sds)->path);
    }
  }
}

const config::Secret* SdsSecrets::find(const config::SdsSecret& sds) const {
  auto stream = pushed_.find(sds.stream());
  if (stream == pushed_.end()) return nullptr;
  auto it = stream->second.find(sds.name);
  return it == stream->second.end() ? nullptr : &it->second;
}

std::string SdsSecrets::push(const std::string& stream, const std::map<std::string, config::Secret>& secrets) {
  std::map<std::string, config::Secret>& held = pushed_[stream];
  std::set<std::string> changed;
  for (const auto& [name, secret] : secrets)
    if (auto it = held.find(name); it == held.end() || !(it->second == secret)) changed.insert(name);
  if (changed.empty()) return "";
  const std::shared_ptr<const Snapshot> snapshot = current_();
  // What each running context needs of a secret is checked before any takes one.
  std::vector<std::pair<TlsContext*, bool>> takers;  // context, certificate (else validation)
  for (TlsContext* c : snapshot ? contexts(*snapshot) : std::vector<TlsContext*>()) {
    for (const auto& [sds, certificate] : {std::pair{&c->certificate_sds(), true}, {&c->validation_sds(), false}}) {
      if (!*sds || !(*sds)->pushed() || (*sds)->stream() != stream || !changed.count((*sds)->name)) continue;
      const config::Secret& s = secrets.at((*sds)->name);
      if (certificate && !s.tls_certificate)
        return "secret '" + s.name + "' has no tls_certificate, and " + (*sds)->where + " takes it as a certificate";
      if (!certificate && !s.validation_context)
        return "secret '" + s.name + "' has no validation_context, and " + (*sds)->where + " takes it as one";
      takers.emplace_back(c, certificate);
    }
  }
  std::string error;
  for (const auto& [c, certificate] : takers) {
    const config::SdsSecret& sds = certificate ? *c->certificate_sds() : *c->validation_sds();
    const config::Secret& s = secrets.at(sds.name);
    try {
      if (certificate) c->update_certificate(*s.tls_certificate);
      else c->update_validation(*s.validation_context);
    } catch (const std::exception& e) {
      error = "secret '" + s.name + "': " + e.what();
      log_error("mesh: SDS secret '" + s.name + "' from " + origin(sds) + " refused, keeping the one in use: " + e.what());
      changed.erase(s.name);
    }
  }
  for (const std::string& name : changed) {
    held[name] = secrets.at(name);
    log_info("mesh: SDS secret '" + name + "' from " + stream + " installed; new handshakes use it");
  }
  return error;
}

std::vector<std::string> SdsSecrets::fill(config::Bootstrap& b) const {
  std::vector<std::string> missing;
  config::for_each_tls(b, [&](config::CommonTlsContext& c) {
    for (std::string& m : config::take_pushed_secrets(c, [this](const config::SdsSecret& s) { return find(s); }))
      missing.push_back(std::move(m));
  });
  return missing;
}

bool SdsSecrets::complete(const config::Bootstrap& b) const {
  for (const auto& [stream, names] : config::pushed_secret_names(b)) {
    auto it = pushed_.find(stream);
    for (const std::string& name : names)
      if (it == pushed_.end() || !it->second.contains(name)) return false;
  }
  return true;
}

}  // namespace dpukit::mesh
