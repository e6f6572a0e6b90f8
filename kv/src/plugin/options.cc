// ParseOffloadUri: the URI names the mode and the engine; tunables come from
// the URI's "?key:value&..." part, else the environment, else the defaults.
// (Not "key=value": RocksDB's option parser reads a string with '=' in it as
// an options map before a factory ever sees it.)
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>

#include "dpukit/core/cli.h"
#include "dpukit/kv.h"

namespace dpukit::kv {
namespace {

struct Tunable {
  const char* key;
  const char* env;
};
constexpr Tunable kTunables[] = {
    {"write_threshold", "DPUKIT_KV_WRITE_THRESHOLD"}, {"sync_interval", "DPUKIT_KV_SYNC_INTERVAL"},
    {"queue", "DPUKIT_KV_QUEUE"},                     {"completion_queue", "DPUKIT_KV_COMPLETION_QUEUE"},
    {"slots", "DPUKIT_KV_SLOTS"},                     {"slot_size", "DPUKIT_KV_SLOT_SIZE"},
    {"offload", "DPUKIT_KV_OFFLOAD"},                 {"stats", "DPUKIT_KV_STATS"},
    {"payload", "DPUKIT_KV_PAYLOAD"},
};

std::map<std::string, std::string> parse_query(const std::string& uri, const std::string& query) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    pos = amp == std::string::npos ? query.size() + 1 : amp + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0)
      throw std::invalid_argument("kv: '" + item + "' in '" + uri + "' is not key:value");
    std::string key = item.substr(0, colon);
    bool known = false;
    for (const auto& t : kTunables) known |= key == t.key;
    if (!known) throw std::invalid_argument("kv: unknown setting '" + key + "' in '" + uri + "'");
    out[key] = item.substr(colon + 1);
  }
  return out;
}

uint64_t size_of(const std::string& key, const std::string& v) {
  try {
    return parse_bytes(v);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("kv: " + key + ": " + e.what());
  }
}

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

}  // namespace

OffloadOptions ParseOffloadUri(const std::string& uri) {
  OffloadOptions o;
  std::string rest;
  auto starts = [&](const std::string& scheme) {
    if (uri.rfind(scheme, 0) != 0) return false;
    rest = uri.substr(scheme.size());
    return true;
  };
  if (starts("pulsedb-filepool://")) {
    o.mode = OffloadMode::kFilePool;
  } else if (starts("pulsedb-async://")) {
    o.mode = OffloadMode::kAsyncHost;
  } else if (starts("pulsedb://")) {
    o.mode = OffloadMode::kPulseDb;
  } else if (uri == "pulsedb") {
    o.mode = OffloadMode::kPulseDb;
  } else {
    throw std::invalid_argument("kv: '" + uri +
                                "' is not pulsedb://SOCKET, pulsedb-async://[POOLDIR] or pulsedb-filepool://POOLDIR");
  }
  size_t q = rest.find('?');
  std::string where = rest.substr(0, q);
  auto query = parse_query(uri, q == std::string::npos ? "" : rest.substr(q + 1));
  auto get = [&](const Tunable& t) -> std::optional<std::string> {
    if (auto it = query.find(t.key); it != query.end()) return it->second;
    if (const char* e = std::getenv(t.env); e && *e) return std::string(e);
    return std::nullopt;
  };
  for (const auto& t : kTunables) {
    auto v = get(t);
    if (!v) continue;
    std::string key = t.key;
    if (key == "write_threshold") o.write_threshold = size_of(key, *v);
    else if (key == "sync_interval") o.sync_interval = size_of(key, *v);
    else if (key == "queue") o.request_queue = size_of(key, *v);
    else if (key == "completion_queue") o.completion_queue = size_of(key, *v);
    else if (key == "slots") o.pool_slots = size_of(key, *v);
    else if (key == "slot_size") o.slot_bytes = size_of(key, *v);
    else if (key == "stats") o.stats_file = *v;
    else if (key == "offload") {
      if (*v == "compaction") o.offload_flush = false;
      else if (*v == "compaction+flush") o.offload_flush = true;
      else throw std::invalid_argument("kv: offload: '" + *v + "' is not compaction or compaction+flush");
    } else if (key == "payload") {
      if (*v == "pull") o.payload = PayloadPath::kPull;
      else if (*v == "copy") o.payload = PayloadPath::kCopy;
      else throw std::invalid_argument("kv: payload: '" + *v + "' is not pull or copy");
    }
  }
  switch (o.mode) {
    case OffloadMode::kPulseDb:
      o.agent = where;
      if (o.agent.empty()) {
        const char* e = std::getenv("DPUKIT_AGENT");
        if (!e || !*e) throw std::invalid_argument("kv: '" + uri + "' names no agent socket and DPUKIT_AGENT is not set");
        o.agent = e;
      }
      break;
    case OffloadMode::kAsyncHost:
      o.pool = where;
      break;
    case OffloadMode::kFilePool:
      o.pool = where;
      if (o.pool.empty()) throw std::invalid_argument("kv: '" + uri + "' names no pool directory");
      break;
  }
  if (o.write_threshold == 0 || o.sync_interval == 0)
    throw std::invalid_argument("kv: write_threshold and sync_interval must be positive");
  if (!pow2(o.request_queue) || !pow2(o.completion_queue))
    throw std::invalid_argument("kv: queue and completion_queue must be powers of two");
  if (o.write_threshold >= (1ull << 32))
    throw std::invalid_argument("kv: write_threshold must be below 4 GiB (a request's payload length is 32 bits)");
  if (o.write_threshold > o.request_queue / 2)
    throw std::invalid_argument("kv: write_threshold (" + std::to_string(o.write_threshold) +
                                ") must be at most half the request queue (" + std::to_string(o.request_queue) + ")");
  if (o.completion_queue < 64 * 32) throw std::invalid_argument("kv: completion_queue must hold 64 completions");
  return o;
}

}  // namespace dpukit::kv
