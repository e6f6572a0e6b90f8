// What the DComp primary and worker say to each other: one message (a core
// MessageSocket frame) per request or answer, one connection per job. Bodies
// are u64s and length-prefixed strings in the order of the struct fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dpukit::kv::dcomp {

enum MessageType : uint32_t {
  kJob = 1,         // Job
  kResult = 2,      // JobResult
  kStats = 3,       // (empty)
  kStatsReply = 4,  // WorkerStats
  kShutdown = 5,    // (empty); answered by kBye, then the worker exits
  kBye = 6,
};

// A failure the worker acts out on one job, for tests: it computes the job,
// then dies without a word (as a crashed DPU would) or never answers (hangs).
enum class Fault : uint64_t { kNone = 0, kDie = 1, kHang = 2 };

struct Job {
  uint64_t id = 0;         // CompactionServiceJobInfo::job_id
  std::string db_name;     // the primary's DB directory
  std::string output_dir;  // where this job's outputs go
  std::string input;       // the serialized CompactionServiceInput
  Fault fault = Fault::kNone;
};

struct JobResult {
  bool ok = false;
  std::string error;   // when !ok
  std::string result;  // the serialized CompactionServiceResult, when ok
  uint64_t cpu_ns = 0, wall_ns = 0;  // the job's thread; cpu_ns includes dilated_ns
  uint64_t refused = 0;  // changes outside the job directory the guard refused
  uint64_t dilated_ns = 0;  // busy time added so the job ran at the dpu's speed (--dpu-speed)
};

struct WorkerStats {
  uint64_t cpu_ns = 0;  // the worker process so far
  uint64_t jobs = 0, jobs_failed = 0;
  uint64_t compact_write_bytes = 0, compact_read_bytes = 0;
  uint64_t refused = 0;
};

std::string encode(const Job& j);
std::string encode(const JobResult& r);
std::string encode(const WorkerStats& s);
// nullopt when the body is cut short or too long.
std::optional<Job> decode_job(const std::string& body);
std::optional<JobResult> decode_result(const std::string& body);
std::optional<WorkerStats> decode_stats(const std::string& body);

}  // namespace dpukit::kv::dcomp
