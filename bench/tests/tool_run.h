// What the bench tests share to run the tool itself, as a user would.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace dpukit::bench {

// `dpukit-bench ARGS`, its stdout and stderr together in `out`; its exit
// status, or -1 when it could not be started.
inline int run_bench_tool(const std::string& args, std::string& out) {
  const std::string cmd = std::string(DPUKIT_BENCH_TOOL) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  out.clear();
  char buf[512];
  while (f && fgets(buf, sizeof buf, f)) out += buf;
  return f ? WEXITSTATUS(pclose(f)) : -1;
}

}  // namespace dpukit::bench
