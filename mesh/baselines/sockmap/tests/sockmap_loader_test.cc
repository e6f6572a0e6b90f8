// The sockmap baseline's loader (mesh/baselines/sockmap/src/): mount parsing, cgroup
// paths and bad input without privileges; with root and a cgroup2 mount, a
// real attach in which this test process joins the cgroup, talks to itself
// over loopback TCP and sees the counters move.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sockmap/sockmap.h"

namespace dpukit::mesh::sockmap {
namespace {
namespace fs = std::filesystem;

TEST(SockmapMounts, FindsTheCgroup2MountAmongOthers) {
  const char* mounts =
      "proc /proc proc rw,nosuid 0 0\n"
      "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
      "cgroup2 /other cgroup2 rw 0 0\n";
  EXPECT_EQ(find_cgroup2_mount(mounts), fs::path("/sys/fs/cgroup/unified"));
  EXPECT_EQ(find_cgroup2_mount("none /mnt/with\\040space cgroup2 rw 0 0\n"), fs::path("/mnt/with space"));
  EXPECT_TRUE(find_cgroup2_mount("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n").empty());
  EXPECT_TRUE(find_cgroup2_mount("").empty());
}

TEST(SockmapMounts, ResolvesCgroupsBelowTheMountOnly) {
  fs::path mount = "/cg";
  EXPECT_EQ(resolve_cgroup(mount, "dpukit/a"), fs::path("/cg/dpukit/a"));
  EXPECT_EQ(resolve_cgroup(mount, "/cg/x"), fs::path("/cg/x"));
  EXPECT_THROW(resolve_cgroup(mount, ""), std::invalid_argument);
  EXPECT_THROW(resolve_cgroup(mount, "../etc"), std::invalid_argument);
  EXPECT_THROW(resolve_cgroup(mount, "/cg"), std::invalid_argument);       // the root itself
  EXPECT_THROW(resolve_cgroup(mount, "/tmp/x"), std::invalid_argument);    // not under the mount
  EXPECT_THROW(resolve_cgroup(mount, "/cgroupx/y"), std::invalid_argument);
}

TEST(SockmapCounters, PrintsEveryCounterByName) {
  Counters c;
  c.value = {1, 2, 3, 4, 5};
  EXPECT_EQ(c.to_string(), "sockets_added=1 socket_add_failed=2 msgs_redirected=3 bytes_redirected=4 msgs_passed=5");
  EXPECT_EQ(c[Counter::bytes_redirected], 4u);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Skips unless this process may load BPF programs into a cgroup2 hierarchy.
fs::path cgroup2_mount_or_skip() {
  if (geteuid() != 0) return {};
  return find_cgroup2_mount(read_file("/proc/mounts"));
}

std::string unique_cgroup_name(const char* what) {
  return "dpukit-sockmap-gtest-" + std::to_string(getpid()) + "-" + what;
}

TEST(SockmapLoader, MissingObjectIsNamed) {
  if (cgroup2_mount_or_skip().empty()) GTEST_SKIP() << "needs root and a cgroup2 mount";
  try {
    SockmapRedirect r({unique_cgroup_name("missing"), "/nonexistent/sockmap_redirect.bpf.o"});
    FAIL() << "loaded a missing object";
  } catch (const SockmapError& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
}

TEST(SockmapLoader, ObjectThatIsNotBpfFailsAndLeavesNoCgroup) {
  fs::path mount = cgroup2_mount_or_skip();
  if (mount.empty()) GTEST_SKIP() << "needs root and a cgroup2 mount";
  fs::path junk = fs::temp_directory_path() / ("sockmap-junk-" + std::to_string(getpid()) + ".o");
  std::ofstream(junk) << "not an ELF file";
  std::string name = unique_cgroup_name("junk");
  try {
    SockmapRedirect r({name, junk});
    FAIL() << "loaded a junk object";
  } catch (const SockmapError& e) {
    EXPECT_NE(std::string(e.what()).find("bpf_object__open_file"), std::string::npos) << e.what();
  }
  fs::remove(junk);
  EXPECT_FALSE(fs::exists(mount / name)) << "the cgroup created before the failure was left behind";
}

// The cgroup v2 this process is in ("0::/path" in /proc/self/cgroup).
fs::path own_cgroup(const fs::path& mount) {
  std::istringstream lines(read_file("/proc/self/cgroup"));
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("0::", 0) == 0) return mount / fs::path(line.substr(3)).relative_path();
  return mount;
}

void join_cgroup(const fs::path& cgroup) {
  std::ofstream procs(cgroup / "cgroup.procs");
  procs << getpid() << std::flush;
  ASSERT_TRUE(procs.good()) << "could not write our pid to " << (cgroup / "cgroup.procs");
}

// A loopback TCP pair made by this process: (client fd, accepted fd).
std::pair<int, int> loopback_pair() {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(listen(listener, 4), 0);
  EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  int server = accept(listener, nullptr, nullptr);
  EXPECT_GE(server, 0);
  close(listener);
  return {client, server};
}

// Sends `data` on `from` (in a thread) while reading it all on `to`.
std::string transfer(int from, int to, const std::string& data) {
  std::thread sender([&] {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = send(from, data.data() + off, std::min<size_t>(data.size() - off, 100'000), MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  });
  std::string got;
  std::vector<char> buf(65536);
  while (got.size() < data.size()) {
    ssize_t n = recv(to, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    got.append(buf.data(), static_cast<size_t>(n));
  }
  sender.join();
  return got;
}

TEST(SockmapLoader, RedirectsLoopbackTcpOfTheCgroupAndCleansUp) {
  fs::path mount = cgroup2_mount_or_skip();
  if (mount.empty()) GTEST_SKIP() << "needs root and a cgroup2 mount";
  fs::path home = own_cgroup(mount);
  std::string name = unique_cgroup_name("redirect");
  std::string data(8 << 20, '\0');
  std::mt19937_64 rng(42);
  for (auto& ch : data) ch = static_cast<char>(rng());
  {
    SockmapRedirect redirect({name, SOCKMAP_BPF_OBJECT});
    EXPECT_TRUE(redirect.created_cgroup());
    ASSERT_TRUE(fs::is_directory(mount / name));
    EXPECT_EQ(redirect.counters().to_string(), Counters{}.to_string());

    // Outside the cgroup: untouched.
    auto [c0, s0] = loopback_pair();
    EXPECT_EQ(transfer(c0, s0, data), data);
    EXPECT_EQ(redirect.counters()[Counter::sockets_added], 0u);
    EXPECT_EQ(redirect.counters()[Counter::msgs_redirected], 0u);

    join_cgroup(mount / name);
    auto [c1, s1] = loopback_pair();
    EXPECT_EQ(transfer(c1, s1, data), data);
    EXPECT_EQ(transfer(s1, c1, data), data);
    Counters after = redirect.counters();
    join_cgroup(home);
    EXPECT_EQ(after[Counter::sockets_added], 2u) << after.to_string();
    EXPECT_GT(after[Counter::msgs_redirected], 0u) << after.to_string();
    EXPECT_EQ(after[Counter::bytes_redirected], 2 * data.size()) << after.to_string();
    for (int fd : {c0, s0, c1, s1}) close(fd);
    EXPECT_EQ(redirect.detach(), "");
  }
  EXPECT_FALSE(fs::exists(mount / name));
}

}  // namespace
}  // namespace dpukit::mesh::sockmap
