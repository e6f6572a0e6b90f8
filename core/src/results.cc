#include "dpukit/core/results.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <regex>
#include <set>
#include <stdexcept>
#include <thread>

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

bool is_type(const nlohmann::json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer")  // JSON Schema counts 2.0 as an integer
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  throw std::logic_error("result schema: unknown type '" + type + "'");
}

std::string kind(const nlohmann::json& v) {
  if (v.is_number_integer()) return "the integer " + v.dump();
  if (v.is_number()) return "the number " + v.dump();
  if (v.is_string()) return "the string " + v.dump();
  return std::string(v.type_name());
}

// The JSON Schema (2020-12) keywords result.schema.json uses, checked as the
// standard says; a schema with another keyword is refused, not half-checked.
std::string violation(const nlohmann::json& s, const nlohmann::json& v, const std::string& at) {
  static const std::set<std::string> kAnnotations = {"$schema", "$id", "title", "description"};
  static const std::set<std::string> kChecked = {"type",     "const",     "enum",    "required",
                                                 "properties", "additionalProperties", "items", "minItems",
                                                 "minLength", "pattern", "minimum", "exclusiveMinimum"};
  for (const auto& [k, unused] : s.items())
    if (!kAnnotations.count(k) && !kChecked.count(k))
      throw std::logic_error("result schema: keyword '" + k + "' is not checked here");
  const std::string where = at.empty() ? "(top level)" : at;
  auto field = [&](const std::string& name) { return at.empty() ? name : at + "." + name; };
  if (s.contains("type")) {
    const nlohmann::json& t = s.at("type");
    bool ok = false;
    for (const auto& one : t.is_array() ? t : nlohmann::json::array({t})) ok = ok || is_type(v, one.get<std::string>());
    if (!ok) return where + ": is " + kind(v) + ", not " + (t.is_array() ? t.dump() : t.get<std::string>());
  }
  if (s.contains("const") && v != s.at("const")) return where + ": is " + v.dump() + ", not " + s.at("const").dump();
  if (s.contains("enum") && std::find(s.at("enum").begin(), s.at("enum").end(), v) == s.at("enum").end())
    return where + ": is " + v.dump() + ", not one of " + s.at("enum").dump();
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s.at("minimum").get<double>())
      return where + ": is " + v.dump() + ", below the minimum " + s.at("minimum").dump();
    if (s.contains("exclusiveMinimum") && x <= s.at("exclusiveMinimum").get<double>())
      return where + ": is " + v.dump() + ", not above " + s.at("exclusiveMinimum").dump();
  }
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    // minLength counts characters: UTF-8 bytes that do not continue one.
    const auto chars = std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; });
    if (s.contains("minLength") && chars < s.at("minLength").get<int64_t>())
      return where + ": is " + v.dump() + ", shorter than " + s.at("minLength").dump() + " characters";
    if (s.contains("pattern") && !std::regex_search(text, std::regex(s.at("pattern").get<std::string>())))
      return where + ": is " + v.dump() + ", not of the form " + s.at("pattern").get<std::string>();
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s.at("minItems").get<size_t>())
      return where + ": has " + std::to_string(v.size()) + " items, fewer than " + s.at("minItems").dump();
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        if (auto why = violation(s.at("items"), v[i], where + "[" + std::to_string(i) + "]"); !why.empty())
          return why;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& name : s.at("required"))
        if (!v.contains(name.get<std::string>())) return field(name.get<std::string>()) + ": missing";
    const nlohmann::json props = s.value("properties", nlohmann::json::object());
    for (const auto& [name, value] : v.items()) {
      if (props.contains(name)) {
        if (auto why = violation(props.at(name), value, field(name)); !why.empty()) return why;
      } else if (s.contains("additionalProperties")) {
        const nlohmann::json& extra = s.at("additionalProperties");
        if (extra.is_boolean() && !extra.get<bool>()) return field(name) + ": not a field of this object";
        if (extra.is_object())
          if (auto why = violation(extra, value, field(name)); !why.empty()) return why;
      }
    }
  }
  return "";
}

}  // namespace

std::string result_schema_violation(const nlohmann::json& result) {
  static const nlohmann::json schema = nlohmann::json::parse(detail::kResultSchemaText);
  return violation(schema, result, "");
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
