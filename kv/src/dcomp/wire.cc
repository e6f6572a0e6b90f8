#include "wire.h"

#include <cstring>

namespace dpukit::kv::dcomp {

namespace {

struct Enc {
  std::string s;
  Enc& u64(uint64_t v) {
    s.append(reinterpret_cast<const char*>(&v), 8);
    return *this;
  }
  Enc& str(const std::string& v) {
    u64(v.size());
    s += v;
    return *this;
  }
};

struct Dec {
  const std::string& s;
  size_t at = 0;
  bool ok = true;
  uint64_t u64() {
    uint64_t v = 0;
    if (at + 8 > s.size()) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, s.data() + at, 8);
    at += 8;
    return v;
  }
  std::string str() {
    uint64_t n = u64();
    if (!ok || n > s.size() - at) {
      ok = false;
      return {};
    }
    std::string v = s.substr(at, n);
    at += n;
    return v;
  }
  // Everything read, nothing left over.
  bool done() const { return ok && at == s.size(); }
};

}  // namespace

std::string encode(const Job& j) {
  return Enc{}.u64(j.id).str(j.db_name).str(j.output_dir).str(j.input).u64(uint64_t(j.fault)).s;
}

std::string encode(const JobResult& r) {
  return Enc{}.u64(r.ok).str(r.error).str(r.result).u64(r.cpu_ns).u64(r.wall_ns).u64(r.refused).u64(r.dilated_ns).s;
}

std::string encode(const WorkerStats& s) {
  return Enc{}
      .u64(s.cpu_ns)
      .u64(s.jobs)
      .u64(s.jobs_failed)
      .u64(s.compact_write_bytes)
      .u64(s.compact_read_bytes)
      .u64(s.refused)
      .s;
}

std::optional<Job> decode_job(const std::string& body) {
  Dec d{body};
  Job j;
  j.id = d.u64();
  j.db_name = d.str();
  j.output_dir = d.str();
  j.input = d.str();
  uint64_t fault = d.u64();
  if (!d.done() || fault > uint64_t(Fault::kHang)) return std::nullopt;
  j.fault = Fault(fault);
  return j;
}

std::optional<JobResult> decode_result(const std::string& body) {
  Dec d{body};
  JobResult r;
  r.ok = d.u64() != 0;
  r.error = d.str();
  r.result = d.str();
  r.cpu_ns = d.u64();
  r.wall_ns = d.u64();
  r.refused = d.u64();
  r.dilated_ns = d.u64();
  if (!d.done()) return std::nullopt;
  return r;
}

std::optional<WorkerStats> decode_stats(const std::string& body) {
  Dec d{body};
  WorkerStats s;
  s.cpu_ns = d.u64();
  s.jobs = d.u64();
  s.jobs_failed = d.u64();
  s.compact_write_bytes = d.u64();
  s.compact_read_bytes = d.u64();
  s.refused = d.u64();
  if (!d.done()) return std::nullopt;
  return s;
}

}  // namespace dpukit::kv::dcomp
