#include "dpukit/core/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "dpukit/core/accounting.h"

namespace dpukit {

namespace {
// Splits "64K" into 64 and "K"; throws if there is no leading number.
std::pair<double, std::string> split_number(const std::string& text) {
  size_t pos = 0;
  double v;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument("'" + text + "' is not a number");
  }
  if (!std::isfinite(v) || v < 0) throw std::invalid_argument("'" + text + "' must be a non-negative number");
  return {v, text.substr(pos)};
}
}  // namespace

uint64_t parse_bytes(const std::string& text) {
  auto [v, unit] = split_number(text);
  std::string u;
  for (char c : unit) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult;
  if (u.empty() || u == "B") mult = 1;
  else if (u == "K" || u == "KB" || u == "KIB") mult = 1024.0;
  else if (u == "M" || u == "MB" || u == "MIB") mult = 1024.0 * 1024;
  else if (u == "G" || u == "GB" || u == "GIB") mult = 1024.0 * 1024 * 1024;
  else throw std::invalid_argument("'" + text + "': unknown size unit '" + unit + "' (use B, K, M or G)");
  double bytes = v * mult;
  if (bytes > 1e18 || bytes != std::floor(bytes)) throw std::invalid_argument("'" + text + "' is not a whole number of bytes");
  return static_cast<uint64_t>(bytes);
}

ArgParser::ArgParser(std::string prog, std::string summary) : prog_(std::move(prog)), summary_(std::move(summary)) {
  flag("help", "show this help and exit");
}

ArgParser& ArgParser::option(const std::string& name, const std::string& help, const std::string& def,
                             bool required) {
  order_.push_back(name);
  opts_[name] = {help, def, false, required};
  return *this;
}

ArgParser& ArgParser::cpus_option(const std::string& name, const std::string& help, const std::string& def) {
  option(name, help, def);
  opts_[name].cpus = true;
  return *this;
}

ArgParser& ArgParser::dpu_speed_option() {
  const char* env = std::getenv("DPUKIT_DPU_SPEED");
  option("dpu-speed", kDpuSpeedHelp, env && *env ? env : "host");
  opts_["dpu-speed"].dpu_speed = true;
  return *this;
}

DpuSpeed ArgParser::dpu_speed() const {
  try {
    return DpuSpeed::parse(str("dpu-speed"));
  } catch (const std::invalid_argument& e) {
    fail(std::string("--dpu-speed") + (has("dpu-speed") ? "" : " (from $DPUKIT_DPU_SPEED)") + ": " + e.what());
  }
}

void ArgParser::check_cpus(const std::string& name, const std::string& value) const {
  CpuSet asked;
  try {
    asked = CpuSet::parse(value);
  } catch (const std::invalid_argument& e) {
    fail("--" + name + ": " + e.what());
  }
  if (asked.empty()) fail("--" + name + ": names no CPU");
  const CpuSet usable = available_cpus();
  CpuSet missing;
  for (int c : asked.cpus)
    if (std::find(usable.cpus.begin(), usable.cpus.end(), c) == usable.cpus.end()) missing.cpus.push_back(c);
  if (!missing.empty())
    fail("--" + name + ": CPU " + missing.str() + " is not available to this process (it may use " + usable.str() +
         ")");
}

ArgParser& ArgParser::flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  opts_[name] = {help, "", true, false};
  return *this;
}

std::string ArgParser::usage() const {
  std::string s = "usage: " + prog_ + " [options]\n" + summary_ + "\n\noptions:\n";
  for (const auto& name : order_) {
    const Opt& o = opts_.at(name);
    std::string left = "  --" + name + (o.is_flag ? "" : " VALUE");
    if (left.size() < 28) left.resize(28, ' ');
    else left += " ";
    s += left + o.help;
    if (!o.def.empty()) s += " (default " + o.def + ")";
    if (o.required) s += " (required)";
    s += "\n";
  }
  return s;
}

void ArgParser::fail(const std::string& message) const {
  std::fprintf(stderr, "%s: error: %s\n(see %s --help)\n", prog_.c_str(), message.c_str(), prog_.c_str());
  std::exit(2);
}

void ArgParser::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) fail("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = opts_.find(name);
    if (it == opts_.end()) fail("unknown option '--" + name + "'");
    if (it->second.is_flag) {
      if (inline_value) fail("option '--" + name + "' takes no value");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= argc) fail("option '--" + name + "' needs a value");
      value = argv[++i];
    }
    if (it->second.cpus) check_cpus(name, value);
    values_[name] = value;
  }
  if (has("help")) {
    std::fputs(usage().c_str(), stdout);
    std::exit(0);
  }
  for (const auto& [name, o] : opts_) {
    if (o.required && !has(name)) fail("option '--" + name + "' is required");
    if (o.dpu_speed) (void)dpu_speed();  // a bad value (or environment) exits 2 here, before any work
  }
}

bool ArgParser::has(const std::string& name) const { return values_.count(name) > 0; }

std::string ArgParser::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  auto o = opts_.find(name);
  return o == opts_.end() ? "" : o->second.def;
}

uint64_t ArgParser::u64(const std::string& name) const {
  std::string text = str(name);
  try {
    auto [v, unit] = split_number(text);
    double mult = unit.empty() ? 1 : unit == "K" || unit == "k" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : -1;
    if (mult < 0) throw std::invalid_argument("'" + text + "': unknown suffix '" + unit + "' (use K, M or G)");
    double n = v * mult;
    if (n != std::floor(n) || n > 1.8e19) throw std::invalid_argument("'" + text + "' is not a whole number");
    return static_cast<uint64_t>(n);
  } catch (const std::invalid_argument& e) {
    fail("--" + name + ": " + e.what());
  }
}

uint64_t ArgParser::bytes(const std::string& name) const {
  try {
    return parse_bytes(str(name));
  } catch (const std::invalid_argument& e) {
    fail("--" + name + ": " + e.what());
  }
}

double ArgParser::number(const std::string& name) const {
  try {
    auto [v, unit] = split_number(str(name));
    if (!unit.empty()) throw std::invalid_argument("'" + str(name) + "' is not a number");
    return v;
  } catch (const std::invalid_argument& e) {
    fail("--" + name + ": " + e.what());
  }
}

int run_subcommands(const char* tool, const char* summary, std::span<const Subcommand> commands, int argc,
                    char** argv) {
  auto usage = [&](FILE* out) {
    std::fprintf(out, "usage: %s COMMAND [options]\n%s\n\ncommands:\n", tool, summary);
    for (const auto& c : commands) std::fprintf(out, "  %-17s %s\n", c.name, c.help);
    std::fprintf(out, "\n'%s COMMAND --help' shows a command's options.\n", tool);
    return out == stdout ? 0 : 2;
  };
  if (argc < 2) return usage(stderr);
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
  for (const auto& c : commands) {
    if (cmd != c.name) continue;
    try {
      return c.run(argc, argv);
    } catch (const InputError& e) {
      std::fprintf(stderr, "%s %s: error: %s\n", tool, c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s %s: error: %s\n", tool, c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "%s: error: unknown command '%s'\n", tool, cmd.c_str());
  return usage(stderr);
}

}  // namespace dpukit
