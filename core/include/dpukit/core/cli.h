// Command-line options for the native tools: `--name value` and `--flag`,
// a usage text, and the same errors everywhere (message + exit code 2).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpukit/core/dpu_speed.h"

namespace dpukit {

class ArgParser {
 public:
  ArgParser(std::string prog, std::string summary);
  // A value option; `def` empty and required=false means "absent unless given".
  ArgParser& option(const std::string& name, const std::string& help, const std::string& def = "",
                    bool required = false);
  ArgParser& flag(const std::string& name, const std::string& help);
  // A list of CPUs to pin to (e.g. 1 or 0-3,6). A value given is checked at
  // parse time: it must parse and name only CPUs this process may use, or
  // the tool exits 2 (pinned elsewhere, a run would be recorded as if it ran
  // where it was asked to).
  ArgParser& cpus_option(const std::string& name, const std::string& help, const std::string& def = "");
  // --dpu-speed: a preset or a factor (DpuSpeed::parse), checked at parse
  // time. Its default is $DPUKIT_DPU_SPEED (what `dpukit eval --dpu` sets for
  // every tool it runs), else host.
  ArgParser& dpu_speed_option();
  DpuSpeed dpu_speed() const;

  // Parses argv[first..argc). --help prints the usage and exits 0; anything
  // wrong prints "<prog>: error: ..." and exits 2.
  void parse(int argc, char** argv, int first = 1);

  bool has(const std::string& name) const;  // given on the command line (or a flag set)
  std::string str(const std::string& name) const;
  uint64_t u64(const std::string& name) const;     // decimal, or with K/M/G (x1000) suffix
  uint64_t bytes(const std::string& name) const;   // 4096, 64K, 32MB, 1MiB, 1G (K = 1024)
  double number(const std::string& name) const;
  std::string usage() const;
  [[noreturn]] void fail(const std::string& message) const;  // exits 2

 private:
  struct Opt {
    std::string help, def;
    bool is_flag, required;
    bool cpus = false;
    bool dpu_speed = false;
  };
  void check_cpus(const std::string& name, const std::string& value) const;
  std::string prog_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Opt> opts_;
  std::map<std::string, std::string> values_;
};

// "32MB" -> 33554432; throws std::invalid_argument with the reason.
uint64_t parse_bytes(const std::string& text);

// Bad input that is the user's to fix (a file, a name, a budget): a tool
// reports it and exits 2, like a usage error. Anything else exits 1.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);  // argv[1] is the subcommand's name
  const char* help;
};
// `tool COMMAND [options]`: runs the named subcommand, prints the usage for
// --help or a missing or unknown command, and turns exceptions into
// "<tool> <command>: error: ..." with exit code 2 (InputError) or 1.
int run_subcommands(const char* tool, const char* summary, std::span<const Subcommand> commands, int argc,
                    char** argv);

}  // namespace dpukit
