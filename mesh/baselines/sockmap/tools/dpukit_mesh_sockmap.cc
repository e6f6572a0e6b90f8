// dpukit-mesh-sockmap: the loader of the "envoy + sockmap" baseline
// (mesh/baselines/sockmap/bpf/sockmap_redirect.bpf.c): loopback TCP between processes of one
// cgroup v2 skips the TCP/IP stack while it runs.
//   dpukit-mesh-sockmap --cgroup DIR [--bpf-object PATH] [--exit-with-parent]
// Prints "ready" once attached. SIGUSR1 prints the counters
// ("counters seq=N sockets_added=... msgs_redirected=..."); SIGINT or SIGTERM
// prints them a last time, detaches and removes what it created.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "dpukit/core/cli.h"
#include "dpukit/core/process.h"
#include "sockmap/sockmap.h"

namespace {

const char* kTool = "dpukit-mesh-sockmap";

// The object is built beside the tools: <build>/lib/sockmap_redirect.bpf.o.
std::filesystem::path default_bpf_object() {
  try {
    return dpukit::own_executable().parent_path().parent_path() / "lib" / "sockmap_redirect.bpf.o";
  } catch (const std::runtime_error&) {
    return "sockmap_redirect.bpf.o";
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dpukit::mesh::sockmap;
  dpukit::ArgParser p(kTool,
                      "Redirects loopback TCP between the processes of one cgroup v2 with an eBPF sockmap "
                      "(sock_ops + sk_msg), until SIGINT or SIGTERM. SIGUSR1 prints the counters.");
  p.option("cgroup", "cgroup v2 directory: relative to the cgroup2 mount, or an absolute path under it "
                     "(created if missing, removed at exit if created)", "", true);
  p.option("bpf-object", "the compiled sockmap_redirect.bpf.o (default: <build>/lib beside <build>/bin)");
  p.flag("exit-with-parent", "detach and exit when the parent process dies (for orchestrators)");
  p.parse(argc, argv);

  // Block the signals before attaching: they are taken with sigwaitinfo, so a
  // stop request during the attach is served once it is done.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGHUP}) sigaddset(&signals, s);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  if (p.has("exit-with-parent")) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) return 1;  // the parent was already gone
  }

  Options options;
  options.cgroup = p.str("cgroup");
  options.bpf_object = p.has("bpf-object") ? std::filesystem::path(p.str("bpf-object")) : default_bpf_object();
  std::unique_ptr<SockmapRedirect> redirect;
  try {
    redirect = std::make_unique<SockmapRedirect>(options);
  } catch (const std::exception& e) {  // SockmapError, or the file system's own
    std::fprintf(stderr, "%s: error: %s\n", kTool, e.what());
    return 1;
  }
  std::printf("attached: cgroup %s (%s), sock_ops %s, sk_msg on the socket hash\nready\n",
              redirect->cgroup().c_str(), redirect->created_cgroup() ? "created" : "existing",
              redirect->sock_ops_via_link() ? "via a cgroup link" : "via bpf_prog_attach");
  std::fflush(stdout);

  int status = 0;
  for (unsigned long seq = 1;; ++seq) {
    siginfo_t info{};
    int sig = sigwaitinfo(&signals, &info);
    if (sig < 0) continue;  // EINTR
    try {
      std::printf("counters seq=%lu %s\n", seq, redirect->counters().to_string().c_str());
    } catch (const SockmapError& e) {
      std::fprintf(stderr, "%s: error: %s\n", kTool, e.what());
      status = 1;
    }
    std::fflush(stdout);
    if (sig == SIGUSR1) continue;
    break;
  }
  std::string note = redirect->detach();
  if (!note.empty()) {
    std::fprintf(stderr, "%s: warning: %s\n", kTool, note.c_str());
  }
  std::printf("detached\n");
  return status;
}
