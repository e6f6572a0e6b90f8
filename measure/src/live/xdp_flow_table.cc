#include "live/xdp_flow_table.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dpukit/core/bpf_counters.h"
#include "dpukit/core/log.h"
#include "dpukit/core/process.h"

namespace dpukit::measure {
namespace fs = std::filesystem;

namespace {

using Kind = LiveError::Kind;

constexpr const char* kProgram = "duet_hw";
constexpr size_t kKeySize = sizeof(FlowKey::bytes);
constexpr uint32_t kCounterCount = 5;  // enum counter in duet_hw.bpf.c

std::string errno_text(int err) { return std::strerror(err); }

// EPERM from bpf() or from attaching: say whether privileges or capabilities are missing.
[[noreturn]] void permission_denied(const std::string& call) {
  if (::geteuid() != 0)
    throw LiveError(Kind::kPermission,
                    call + ": EPERM: not root (live measurement needs root, or CAP_BPF and CAP_NET_ADMIN)");
  throw LiveError(Kind::kPermission,
                  call + ": EPERM although running as root: CAP_BPF or CAP_NET_ADMIN (or CAP_SYS_ADMIN, which "
                         "covers both) is missing: a restricted container, or kernel lockdown");
}

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (!live_verbose() || level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

// Sets a `const volatile` global of the program's read-only data before load;
// its offset comes from the object's BTF, so the program may add others.
void set_rodata_u32(bpf_object* object, const char* name, uint32_t value) {
  bpf_map* rodata = bpf_object__find_map_by_name(object, ".rodata");
  const btf* types = bpf_object__btf(object);
  int sec_id = types ? btf__find_by_name_kind(types, ".rodata", BTF_KIND_DATASEC) : -1;
  size_t size = 0;
  const void* initial = rodata ? bpf_map__initial_value(rodata, &size) : nullptr;
  if (initial == nullptr || sec_id < 0)
    throw LiveError(Kind::kSystem, std::string("BPF object has no .rodata with BTF (needed to set ") + name + ")");
  const btf_type* sec = btf__type_by_id(types, static_cast<uint32_t>(sec_id));
  const btf_var_secinfo* vars = btf_var_secinfos(sec);
  for (uint16_t i = 0; i < btf_vlen(sec); ++i) {
    const btf_type* var = btf__type_by_id(types, vars[i].type);
    if (std::strcmp(btf__name_by_offset(types, var->name_off), name) != 0) continue;
    if (vars[i].size != sizeof value || vars[i].offset + sizeof value > size)
      throw LiveError(Kind::kSystem, std::string("BPF object: ") + name + " is not a 32-bit variable");
    std::vector<char> data(static_cast<const char*>(initial), static_cast<const char*>(initial) + size);
    std::memcpy(data.data() + vars[i].offset, &value, sizeof value);
    if (int err = bpf_map__set_initial_value(rodata, data.data(), size); err != 0)
      throw LiveError(Kind::kSystem, std::string("bpf_map__set_initial_value(.rodata): ") + errno_text(-err));
    return;
  }
  throw LiveError(Kind::kSystem, std::string("BPF object has no variable ") + name);
}

bool valid_interface_name(const std::string& name) {
  return !name.empty() && name.size() < IFNAMSIZ && name != "." && name != ".." &&
         name.find('/') == std::string::npos;
}

}  // namespace

bool live_verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("DPUKIT_LIVE_VERBOSE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return verbose;
}

const char* to_string(LiveError::Kind k) {
  switch (k) {
    case Kind::kPermission: return "permission";
    case Kind::kNoInterface: return "no such interface";
    case Kind::kXdpRefused: return "XDP refused";
    case Kind::kObjectMissing: return "BPF object missing";
    case Kind::kSystem: return "system";
  }
  return "?";
}

const char* to_string(XdpMode m) { return m == XdpMode::kNative ? "native" : "generic"; }

unsigned rx_queue_count(const std::string& interface) {
  if (!valid_interface_name(interface))
    throw LiveError(Kind::kNoInterface, "no such interface '" + interface + "' (not a valid interface name)");
  fs::path queues = fs::path("/sys/class/net") / interface / "queues";
  std::error_code ec;
  fs::directory_iterator it(queues, ec);
  if (ec) {
    if (!fs::exists(fs::path("/sys/class/net") / interface))
      throw LiveError(Kind::kNoInterface, "no such interface '" + interface + "'");
    throw LiveError(Kind::kSystem, "cannot list " + queues.string() + ": " + ec.message());
  }
  unsigned n = 0;
  for (const auto& entry : it)
    if (entry.path().filename().string().rfind("rx-", 0) == 0) ++n;
  return n;
}

fs::path default_duet_hw_object() {
  try {
    return own_executable().parent_path().parent_path() / "lib" / "duet_hw.bpf.o";
  } catch (const std::runtime_error&) {
    return "duet_hw.bpf.o";
  }
}

// ------------------------------------------------------------ set-up

XdpFlowTable::XdpFlowTable(const Options& options)
    : options_(options),
      rules_(options.table.insert_rate, options.table.insert_latency_ns, options.table.insert_queue) {
  const auto& tc = options_.table;
  if (tc.capacity == 0) throw std::invalid_argument("xdp flow table: capacity must be > 0");
  if (tc.capacity > UINT32_MAX) throw std::invalid_argument("xdp flow table: capacity must fit a BPF map (< 2^32)");
  if (tc.clock)
    throw std::invalid_argument(
        "xdp flow table: Config::clock must be empty (the kernel stamps hits with CLOCK_MONOTONIC)");
  if (options_.bpf_object.empty()) options_.bpf_object = default_duet_hw_object();

  std::error_code ec;
  if (!fs::is_regular_file(options_.bpf_object, ec))
    throw LiveError(Kind::kObjectMissing,
                    "BPF object " + options_.bpf_object.string() + " not found (build the target duet_hw_bpf)");
  rx_queues_ = rx_queue_count(options_.interface);  // kNoInterface when it does not exist
  ifindex_ = static_cast<int>(::if_nametoindex(options_.interface.c_str()));
  if (ifindex_ == 0) throw LiveError(Kind::kNoInterface, "no such interface '" + options_.interface + "'");

  libbpf_set_print(libbpf_print);
  object_ = bpf_object__open_file(options_.bpf_object.c_str(), nullptr);
  if (object_ == nullptr)
    throw LiveError(Kind::kSystem,
                    "bpf_object__open_file(" + options_.bpf_object.string() + "): " + errno_text(errno));
  try {
    bpf_program* program = bpf_object__find_program_by_name(object_, kProgram);
    bpf_map* flows = bpf_object__find_map_by_name(object_, "flows");
    bpf_map* xsks = bpf_object__find_map_by_name(object_, "xsks");
    bpf_map* counters = bpf_object__find_map_by_name(object_, "counters");
    if (!program || !flows || !xsks || !counters)
      throw LiveError(Kind::kSystem,
                      options_.bpf_object.string() + " lacks duet_hw, flows, xsks or counters (not duet_hw.bpf.o?)");
    // The map is the table: its size is the hardware's capacity.
    if (int err = bpf_map__set_max_entries(flows, static_cast<uint32_t>(tc.capacity)); err != 0)
      throw LiveError(Kind::kSystem, "bpf_map__set_max_entries(flows): " + errno_text(-err));
    if (int err = bpf_map__set_max_entries(xsks, std::max(rx_queues_, 1u)); err != 0)
      throw LiveError(Kind::kSystem, "bpf_map__set_max_entries(xsks): " + errno_text(-err));
    set_rodata_u32(object_, "hit_verdict", options_.pass_hits ? XDP_PASS : XDP_DROP);

    if (int err = bpf_object__load(object_); err != 0) {
      std::string call = "bpf_object__load(" + options_.bpf_object.string() + ")";
      if (-err == EPERM) permission_denied(call);
      if (-err == ENOSYS) throw LiveError(Kind::kXdpRefused, call + ": the kernel has no bpf() system call");
      throw LiveError(Kind::kSystem,
                      call + ": " + errno_text(-err) + " (the verifier's log: run with DPUKIT_LIVE_VERBOSE=1)");
    }
    flows_fd_ = bpf_map__fd(flows);
    xsks_fd_ = bpf_map__fd(xsks);
    counters_fd_ = bpf_map__fd(counters);

    // Before the program sees a frame, so its run time counts from the first.
    // Refused (a kernel before 5.8, or no CAP_SYS_ADMIN), the report says so.
    prog_fd_ = bpf_program__fd(program);
    run_time_fd_ = bpf_enable_stats(BPF_STATS_RUN_TIME);
    if (run_time_fd_ < 0) {
      log_warn("xdp flow table: the XDP program's CPU time is not measured: bpf_enable_stats: " +
               errno_text(-run_time_fd_));
      run_time_fd_ = -1;
    }

    // A link, not a netlink attachment: the kernel detaches the program when
    // the link's last fd closes, also when this process dies.
    bpf_link_create_opts link_opts{};
    link_opts.sz = sizeof link_opts;
    link_opts.flags = options_.mode == XdpMode::kNative ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    link_fd_ = bpf_link_create(prog_fd_, ifindex_, BPF_XDP, &link_opts);
    if (link_fd_ < 0) {
      int err = -link_fd_;
      link_fd_ = -1;
      std::string call = std::string("attaching XDP in ") + to_string(options_.mode) + " mode to " + options_.interface;
      if (err == EPERM) permission_denied(call);
      std::string why = errno_text(err);
      if (err == EOPNOTSUPP && options_.mode == XdpMode::kNative)
        why += " (the driver offers no native XDP here: no support, or a feature in its way such as LRO or"
               " GRO_HW on virtio_net; use generic mode)";
      else if (err == EBUSY || err == EEXIST)
        why += " (another XDP program is attached to the interface)";
      else if (err == EINVAL && options_.mode == XdpMode::kNative)
        why += " (the driver refuses native XDP with this configuration, e.g. its MTU or offloads)";
      else if (err == EINVAL)
        why += " (the kernel takes no XDP link: needs Linux >= 5.9)";
      throw LiveError(Kind::kXdpRefused, call + ": " + why);
    }
  } catch (...) {
    close_all();
    throw;
  }
  service_ = std::thread([this] { service_loop(); });
}

XdpFlowTable::~XdpFlowTable() {
  stop_.store(true);
  rules_.interrupt();
  if (service_.joinable()) service_.join();
  close_all();
}

void XdpFlowTable::close_all() {
  if (link_fd_ >= 0) ::close(link_fd_);  // detaches
  link_fd_ = -1;
  if (run_time_fd_ >= 0) ::close(run_time_fd_);
  run_time_fd_ = prog_fd_ = -1;
  if (object_ != nullptr) bpf_object__close(object_);  // the maps go when nothing else holds them
  object_ = nullptr;
  flows_fd_ = xsks_fd_ = counters_fd_ = -1;
}

// ------------------------------------------------------------ control path

void XdpFlowTable::request_insert(const FlowKey& key, FlowCounters initial, uint64_t cookie) {
  rules_.request_insert(key, initial, cookie, now_ns());
}

void XdpFlowTable::request_remove(const FlowKey& key, uint64_t cookie) { rules_.request_remove(key, cookie, now_ns()); }

size_t XdpFlowTable::poll_events(std::vector<FlowEvent>& out, size_t max) { return rules_.poll_events(out, max); }

bool XdpFlowTable::wait_events(std::chrono::microseconds timeout) { return rules_.wait_events(timeout); }

std::optional<FlowCounters> XdpFlowTable::query(const FlowKey& key) const {
  HwFlowEntry v;
  if (bpf_map_lookup_elem(flows_fd_, key.bytes.data(), &v) != 0) return std::nullopt;
  return FlowCounters{v.packets, v.bytes};
}

XdpFlowTable::DatapathCounters XdpFlowTable::datapath_counters() const {
  // Highest index first: `frames` is read last, so it is never behind
  // `not_a_flow` and `hits` (lookups = frames - not_a_flow).
  std::array<uint64_t, kCounterCount> sum{};
  const char* call = "";
  if (int err = sum_percpu_counters(counters_fd_, sum, &call)) throw LiveError(Kind::kSystem, call + (": " + errno_text(err)));
  DatapathCounters d{sum[0], sum[1], sum[2], sum[3], sum[4]};
  if (run_time_fd_ >= 0) {
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(prog_fd_, &info, &len) != 0)
      throw LiveError(Kind::kSystem, "bpf_obj_get_info_by_fd(the XDP program): " + errno_text(errno));
    d.run_time_measured = true;
    d.run_ns = info.run_time_ns;
    d.runs = info.run_cnt;
  }
  return d;
}

FlowTableStats XdpFlowTable::stats() const {
  FlowTableStats st = rules_.control_stats();
  st.capacity = options_.table.capacity;
  outcomes_.fill(st);
  DatapathCounters d = datapath_counters();
  st.lookups = d.frames - std::min(d.frames, d.not_a_flow);
  st.hits = d.hits;
  return st;
}

// ------------------------------------------------------------ service thread (the NIC's firmware)

void XdpFlowTable::service_loop() {
  if (!options_.service_cpus.empty()) {
    std::string warning = pin_current_thread(options_.service_cpus);
    if (!warning.empty()) log_warn("xdp flow table: " + warning);
  }
  prctl(PR_SET_TIMERSLACK, 1000UL);  // wake within ~1 µs of the next due insertion, not 50 µs
  std::optional<PlaceTimer> hw_time;
  if (options_.account) hw_time.emplace(*options_.account, Place::kHw);

  const uint64_t idle_timeout = options_.table.idle_timeout_ns;
  // Age in steps of a quarter of the timeout: an entry goes within 1.25 x timeout of its last hit.
  const uint64_t aging_step = std::max<uint64_t>(idle_timeout / 4, 1000000);
  uint64_t next_aging_ns = 0;
  std::vector<Request> due;
  while (!stop_.load()) {
    uint64_t now = now_ns();
    due.clear();
    rules_.take_due(now, due);
    for (const Request& r : due) apply(r, now);
    if (idle_timeout && now >= next_aging_ns) {
      age(now);
      next_aging_ns = now + aging_step;
    }
    uint64_t wake = rules_.next_due();
    if (idle_timeout && outcomes_.entries.load(std::memory_order_relaxed)) wake = std::min(wake, next_aging_ns);
    now = now_ns();
    if (wake <= now) continue;
    // Woken early by a request into an empty queue, or by the destructor.
    rules_.wait_for_request(std::chrono::nanoseconds(std::min<uint64_t>(wake - now, 1000000000)));
  }
}

void XdpFlowTable::apply(const Request& r, uint64_t now) {
  FlowEvent e{FlowEvent::Kind::kInserted, FlowEvent::Reason::kNone, r.key, r.initial, r.cookie, r.requested_ns, now};
  auto installed = installed_.find(r.key);
  if (!r.insert) {
    e.kind = FlowEvent::Kind::kRemoved;
    HwFlowEntry v;
    if (installed != installed_.end() && bpf_map_lookup_and_delete_elem(flows_fd_, r.key.bytes.data(), &v) == 0) {
      e.counters = {v.packets, v.bytes};
      installed_.erase(installed);
      outcomes_.entries.fetch_sub(1, std::memory_order_relaxed);
      outcomes_.removed.fetch_add(1, std::memory_order_relaxed);
    } else {
      e.reason = FlowEvent::Reason::kNotFound;
    }
    rules_.emit(e);
    return;
  }
  auto refuse = [&](FlowEvent::Reason reason, std::atomic<uint64_t>& counter) {
    e.kind = FlowEvent::Kind::kRefused;
    e.reason = reason;
    counter.fetch_add(1, std::memory_order_relaxed);
  };
  if (installed != installed_.end()) {
    refuse(FlowEvent::Reason::kExists, outcomes_.refused_exists);
  } else if (outcomes_.entries.load(std::memory_order_relaxed) >= options_.table.capacity) {
    refuse(FlowEvent::Reason::kTableFull, outcomes_.refused_full);
  } else {
    HwFlowEntry v{r.initial.packets, r.initial.bytes, now};  // a new entry is as fresh as a hit
    int err = bpf_map_update_elem(flows_fd_, r.key.bytes.data(), &v, BPF_NOEXIST);
    if (err == 0) {
      installed_.emplace(r.key, r.cookie);
      outcomes_.entries.fetch_add(1, std::memory_order_relaxed);
      outcomes_.inserted.fetch_add(1, std::memory_order_relaxed);
    } else if (-err == EEXIST) {
      refuse(FlowEvent::Reason::kExists, outcomes_.refused_exists);
    } else {
      // E2BIG/ENOSPC: the kernel's map is full; ENOMEM: it could not grow. Either way no room.
      if (-err != E2BIG && -err != ENOSPC && -err != ENOMEM)
        log_warn("xdp flow table: inserting " + r.key.str() + ": " + errno_text(-err));
      refuse(FlowEvent::Reason::kTableFull, outcomes_.refused_full);
    }
  }
  rules_.emit(e);
}

void XdpFlowTable::age(uint64_t now) {
  if (installed_.empty()) return;
  const uint64_t idle_timeout = options_.table.idle_timeout_ns;
  auto idle = [&](const HwFlowEntry& v) { return now - std::min(now, v.last_seen_ns) >= idle_timeout; };

  // One pass over the map with batched lookups (a few system calls for the
  // whole table instead of two per entry).
  std::vector<FlowKey> candidates;
  uint32_t chunk = static_cast<uint32_t>(std::min<size_t>(installed_.size(), 4096));
  uint64_t token_in = 0, token_out = 0;  // the hash map's opaque cursor (a bucket index)
  bool first = true;
  for (;;) {
    batch_keys_.resize(size_t(chunk) * kKeySize);
    batch_values_.resize(size_t(chunk) * sizeof(HwFlowEntry));
    uint32_t count = chunk;
    bpf_map_batch_opts opts{};
    opts.sz = sizeof opts;
    int err = bpf_map_lookup_batch(flows_fd_, first ? nullptr : &token_in, &token_out, batch_keys_.data(),
                                   batch_values_.data(), &count, &opts);
    if (err != 0 && -err != ENOENT) {
      if (-err == ENOSPC && count == 0) {  // one bucket holds more than `chunk` entries
        chunk *= 2;
        continue;
      }
      log_warn("xdp flow table: aging scan: bpf_map_lookup_batch: " + errno_text(-err));
      return;
    }
    for (uint32_t i = 0; i < count; ++i) {
      HwFlowEntry v;
      std::memcpy(&v, batch_values_.data() + size_t(i) * sizeof v, sizeof v);
      if (!idle(v)) continue;
      FlowKey k;
      std::memcpy(k.bytes.data(), batch_keys_.data() + size_t(i) * kKeySize, kKeySize);
      candidates.push_back(k);
    }
    if (err != 0) break;  // ENOENT: the scan reached the end
    token_in = token_out;
    first = false;
  }

  for (const FlowKey& k : candidates) {
    HwFlowEntry v;
    // Look again just before deleting: a hit since the scan keeps the entry.
    if (bpf_map_lookup_elem(flows_fd_, k.bytes.data(), &v) != 0 || !idle(v)) continue;
    // The counters at the moment of deletion are the final ones.
    if (bpf_map_lookup_and_delete_elem(flows_fd_, k.bytes.data(), &v) != 0) continue;
    auto it = installed_.find(k);
    uint64_t cookie = it != installed_.end() ? it->second : 0;
    if (it != installed_.end()) installed_.erase(it);
    outcomes_.entries.fetch_sub(1, std::memory_order_relaxed);
    outcomes_.aged.fetch_add(1, std::memory_order_relaxed);
    rules_.emit({FlowEvent::Kind::kAged, FlowEvent::Reason::kNone, k, {v.packets, v.bytes}, cookie, now, now});
  }
}

}  // namespace dpukit::measure
