// The "envoy + sockmap" baseline (docs/mesh.md; the paper's "sockmap"): loads
// mesh/bpf/sockmap_redirect.bpf.c, attaches its sock_ops program to one cgroup
// v2 and its sk_msg program to the socket map, so that loopback TCP between
// processes of that cgroup skips the TCP/IP stack. Detaches and removes what
// it created when destroyed.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct bpf_object;
struct bpf_link;

namespace dpukit::mesh::sockmap {

// The kernel or the system refused: the message names the call and errno text.
struct SockmapError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Indexes of the per-CPU `counters` array of sockmap_redirect.bpf.c.
enum class Counter : uint32_t {
  sockets_added = 0,
  socket_add_failed = 1,
  msgs_redirected = 2,
  bytes_redirected = 3,
  msgs_passed = 4,
};
inline constexpr size_t kCounterCount = 5;
inline constexpr std::array<std::string_view, kCounterCount> kCounterNames = {
    "sockets_added", "socket_add_failed", "msgs_redirected", "bytes_redirected", "msgs_passed"};

struct Counters {
  std::array<uint64_t, kCounterCount> value{};
  uint64_t operator[](Counter c) const { return value[static_cast<uint32_t>(c)]; }
  // "sockets_added=3 socket_add_failed=0 ..." (the tool prints this).
  std::string to_string() const;
};

// The first cgroup2 mount point in a /proc/mounts text; empty when there is none.
std::filesystem::path find_cgroup2_mount(std::string_view proc_mounts);

// Where the cgroup `dir` is: a relative `dir` is taken under `mount`; an
// absolute one must lie under it. Throws std::invalid_argument with the reason
// for an empty name, "..", or a path outside the mount.
std::filesystem::path resolve_cgroup(const std::filesystem::path& mount, const std::string& dir);

struct Options {
  std::string cgroup;                      // relative to the cgroup2 mount, or an absolute path under it
  std::filesystem::path bpf_object;        // the compiled sockmap_redirect.bpf.o
};

class SockmapRedirect {
 public:
  // Creates the cgroup directory if needed, loads the object and attaches
  // both programs. Throws SockmapError naming the call that failed.
  explicit SockmapRedirect(const Options& options);
  ~SockmapRedirect();
  SockmapRedirect(const SockmapRedirect&) = delete;
  SockmapRedirect& operator=(const SockmapRedirect&) = delete;

  const std::filesystem::path& cgroup() const { return cgroup_; }
  bool created_cgroup() const { return created_cgroup_; }
  bool sock_ops_via_link() const { return sock_ops_link_ != nullptr; }
  Counters counters() const;

  // Detaches both programs, closes the object (its maps go with it) and
  // removes the cgroup if this created it and it is empty. Idempotent; the
  // destructor calls it. Returns a note on what could not be removed (empty
  // when everything went).
  std::string detach();

 private:
  std::filesystem::path cgroup_;
  bool created_cgroup_ = false;
  std::vector<std::filesystem::path> created_dirs_;  // outermost first
  int cgroup_fd_ = -1;
  bpf_object* object_ = nullptr;
  bpf_link* sock_ops_link_ = nullptr;  // preferred: the kernel detaches it if we die
  int sock_ops_fd_ = -1;
  bool sock_ops_attached_ = false;     // with bpf_prog_attach, where cgroup links are not supported
  int sk_msg_fd_ = -1;
  int sockets_fd_ = -1;
  int counters_fd_ = -1;
  bool sk_msg_attached_ = false;
};

}  // namespace dpukit::mesh::sockmap
