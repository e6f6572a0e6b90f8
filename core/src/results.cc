#include "dpukit/core/results.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace dpukit {

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    // x86 says "model name", many Arm kernels say nothing better than "CPU part".
    for (const char* key : {"model name", "Model", "cpu model"}) {
      if (line.rfind(key, 0) == 0) {
        auto colon = line.find(':');
        if (colon != std::string::npos) {
          auto v = line.substr(colon + 1);
          v.erase(0, v.find_first_not_of(" \t"));
          if (!v.empty()) return v;
        }
      }
    }
  }
  return "unknown";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

nlohmann::json machine_info() {
  utsname u{};
  uname(&u);
  return {
      {"cpu_model", cpu_model()},
      {"cores", static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))},
      {"arch", u.machine},
      {"kernel", std::string(u.sysname) + " " + u.release},
      {"hostname", u.nodename},
  };
}

Result::Result(std::string tool, std::vector<std::string> command_line)
    : tool_(std::move(tool)), command_line_(std::move(command_line)), started_utc_(utc_now()) {}

Result::Result(std::string tool, int argc, char** argv)
    : Result(std::move(tool), std::vector<std::string>(argv, argv + argc)) {}

void Result::set_cpu(const CpuAccount& account) {
  for (Place p : {Place::kHost, Place::kDpu, Place::kHw}) cpu_[static_cast<int>(p)] = account.get(p);
}

nlohmann::json Result::to_json() const {
  return {
      {"schema", kResultSchema},
      {"tool", tool_},
      {"version", DPUKIT_VERSION},
      {"command_line", command_line_},
      {"started_utc", started_utc_},
      {"machine", machine_info()},
      {"backend", backend_},
      {"placement",
       {{"host_cpus", placement_.host.str()},
        {"dpu_cpus", placement_.dpu.str()},
        {"hw_cpus", placement_.hw.str()},
        {"note", placement_.note}}},
      {"parameters", parameters_},
      {"figures", figures_},
      {"cpu_ns", {{"host", cpu_[0]}, {"dpu", cpu_[1]}, {"hw", cpu_[2]}}},
      {"wall_ns", wall_ns_},
  };
}

void Result::write(const std::string& path) const {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << to_json().dump(2) << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write " + path + " (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path);
  }
}

nlohmann::json read_result(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the result " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("the result " + path + " is not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kResultSchema)
    throw std::runtime_error(path + " is not a " + std::string(kResultSchema) + " result");
  return j;
}

}  // namespace dpukit
