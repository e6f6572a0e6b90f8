// One JSON schema for every run ("dpukit.result/1", python/dpukit/result.schema.json):
// what ran, where, with which parameters, what it measured, CPU per place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpukit/core/accounting.h"
#include "dpukit/core/dpu_speed.h"

namespace dpukit {

nlohmann::json machine_info();  // cpu_model, cores, arch, kernel, hostname

constexpr const char* kResultSchema = "dpukit.result/1";

class Result {
 public:
  Result(std::string tool, std::vector<std::string> command_line);
  Result(std::string tool, int argc, char** argv);

  nlohmann::json& parameters() { return parameters_; }
  nlohmann::json& figures() { return figures_; }
  void set_backend(std::string backend) { backend_ = std::move(backend); }
  void set_placement(const Placement& p) { placement_ = p; }
  // How fast the dpu place was modelled (--dpu-speed); "host" unless set.
  void set_dpu_speed(const DpuSpeed& s) { dpu_speed_ = s; }
  void set_cpu(const CpuAccount& account);
  void set_wall_ns(uint64_t ns) { wall_ns_ = ns; }

  nlohmann::json to_json() const;
  // Writes atomically (temporary file + rename); throws std::runtime_error naming the path.
  void write(const std::string& path) const;

 private:
  std::string tool_;
  std::vector<std::string> command_line_;
  std::string started_utc_;
  std::string backend_ = "emulated";
  Placement placement_;
  DpuSpeed dpu_speed_;
  nlohmann::json parameters_ = nlohmann::json::object();
  nlohmann::json figures_ = nlohmann::json::object();
  uint64_t cpu_[3] = {0, 0, 0};
  uint64_t wall_ns_ = 0;
};

// The first way `result` breaks the result schema, as "<field>: <what>"
// (e.g. "machine.cores: is 0, below the minimum 1"); "" when it matches. The
// schema is python/dpukit/result.schema.json itself, compiled in, so the
// native tools and the Python front door check the same thing.
std::string result_schema_violation(const nlohmann::json& result);

// A result another tool wrote (Result::write). Throws std::runtime_error
// naming the path when it is missing, not JSON, or not of this schema (and
// then the field).
nlohmann::json read_result(const std::string& path);

}  // namespace dpukit
