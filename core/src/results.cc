#include "dpukit/core/results.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

namespace dpukit {

namespace detail {
extern const char kResultSchemaText[];  // result_schema.cc, generated
}  // namespace detail

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
        {"dpu_speed", dpu_speed_.to_json()},
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

namespace {

// What a value is, for a message that names it.
std::string kind(const nlohmann::json& v) {
  if (v.is_number_integer()) return "the integer " + v.dump();
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_string()) return "the string " + v.dump();
  if (v.is_boolean()) return v.dump();
  return std::string(v.type_name());
}

const valijson::Schema& result_schema() {
  static const valijson::Schema* schema = [] {
    static const nlohmann::json text = nlohmann::json::parse(detail::kResultSchemaText);
    auto* s = new valijson::Schema;
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);  // the keywords the file uses are draft 7's too
    valijson::adapters::NlohmannJsonAdapter adapter(text);
    parser.populateSchema(adapter, *s);
    return s;
  }();
  return *schema;
}

}  // namespace

std::string result_schema_violation(const nlohmann::json& result) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter doc(result);
  if (validator.validate(result_schema(), doc, &results)) return "";
  // valijson reports the failing node and then each parent that failed
  // because of it; the deepest one names the field.
  valijson::ValidationResults::Error e, deepest;
  while (results.popError(e))
    if (deepest.context.empty() || e.context.size() > deepest.context.size()) deepest = e;
  // The context is "<root>" then "[name]" or "[index]": walk the document to
  // tell an array's index from a field's name and to show the value.
  std::string field;
  const nlohmann::json* at = &result;
  for (size_t i = 1; i < deepest.context.size(); ++i) {
    const std::string step = deepest.context[i].substr(1, deepest.context[i].size() - 2);
    if (at->is_array()) {
      field += "[" + step + "]";
      const size_t index = std::stoul(step);
      at = index < at->size() ? &(*at)[index] : nullptr;
    } else {
      field += (field.empty() ? "" : ".") + step;
      at = at->is_object() && at->contains(step) ? &at->at(step) : nullptr;
    }
    if (!at) break;
  }
  static const std::string kMissing = "Missing required property '";
  if (deepest.description.rfind(kMissing, 0) == 0) {
    const std::string name = deepest.description.substr(kMissing.size(), deepest.description.find('\'', kMissing.size()) - kMissing.size());
    return (field.empty() ? "" : field + ".") + name + ": missing";
  }
  return (field.empty() ? "(top level)" : field) + ": " + (at ? "is " + kind(*at) + " (" : "(") +
         deepest.description + ")";
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
  if (std::string why = result_schema_violation(j); !why.empty())
    throw std::runtime_error(path + " is not a " + std::string(kResultSchema) + " result: " + why);
  return j;
}

}  // namespace dpukit
