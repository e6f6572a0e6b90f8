// Loader of the sockmap baseline (sockmap.h). libbpf opens the object file at
// run time, so no skeleton (and no bpftool) is needed to build.
#include "sockmap/sockmap.h"

#include "dpukit/core/bpf_counters.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstdarg>
#include <cstring>
#include <sstream>
#include <vector>

namespace dpukit::mesh::sockmap {
namespace fs = std::filesystem;

namespace {

// "CALL(WHAT): errno text", with a hint where the usual cause is known.
[[noreturn]] void fail(const std::string& call, int err) {
  std::string msg = call + ": " + std::strerror(err);
  if (err == EPERM || err == EACCES) msg += " (needs root, or CAP_BPF, CAP_NET_ADMIN and write access to the cgroup)";
  throw SockmapError(msg);
}

// /proc/mounts writes space, tab, newline and backslash in paths as \ooo.
std::string unescape_mount_path(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 3)), nullptr, 8));
      i += 3;
    } else {
      out += text[i];
    }
  }
  return out;
}

// libbpf's messages go nowhere by default: the error we throw names the call;
// DPUKIT_SOCKMAP_VERBOSE=1 shows libbpf's own lines (the verifier log).
int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  static const bool verbose = [] {
    const char* v = std::getenv("DPUKIT_SOCKMAP_VERBOSE");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  if (!verbose || level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

}  // namespace

std::string Counters::to_string() const {
  std::ostringstream out;
  for (size_t i = 0; i < kCounterCount; ++i) out << (i ? " " : "") << kCounterNames[i] << '=' << value[i];
  return out.str();
}

fs::path find_cgroup2_mount(std::string_view proc_mounts) {
  std::istringstream lines{std::string(proc_mounts)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string device, mount_point, fstype;
    if (fields >> device >> mount_point >> fstype && fstype == "cgroup2") return unescape_mount_path(mount_point);
  }
  return {};
}

fs::path resolve_cgroup(const fs::path& mount, const std::string& dir) {
  if (dir.empty()) throw std::invalid_argument("--cgroup is empty");
  fs::path p(dir);
  for (const auto& part : p)
    if (part == "..") throw std::invalid_argument("--cgroup " + dir + ": '..' is not allowed");
  fs::path full = p.is_absolute() ? p.lexically_normal() : (mount / p).lexically_normal();
  fs::path rel = full.lexically_relative(mount);
  if (rel.empty() || rel == "." || *rel.begin() == "..")
    throw std::invalid_argument("--cgroup " + dir + ": not a cgroup below the cgroup2 mount " + mount.string());
  return full;
}

SockmapRedirect::SockmapRedirect(const Options& options) {
  libbpf_set_print(libbpf_print);
  std::string mounts;
  {
    FILE* f = std::fopen("/proc/mounts", "r");
    if (f == nullptr) fail("fopen(/proc/mounts)", errno);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) mounts.append(buf, n);
    std::fclose(f);
  }
  fs::path mount = find_cgroup2_mount(mounts);
  if (mount.empty()) throw SockmapError("no cgroup2 file system is mounted (/proc/mounts has no cgroup2 line)");
  try {
    cgroup_ = resolve_cgroup(mount, options.cgroup);
  } catch (const std::invalid_argument& e) {
    throw SockmapError(e.what());
  }
  std::error_code ec;
  if (!fs::is_regular_file(options.bpf_object, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw SockmapError("BPF object " + options.bpf_object.string() + ": " + ec.message());
    throw SockmapError("BPF object " + options.bpf_object.string() + " not found (build the target sockmap_redirect_bpf)");
  }

  try {
    // Create the missing levels, remembering them (for detach, deepest first).
    std::vector<fs::path> missing;
    for (fs::path p = cgroup_; p != mount && !fs::exists(p, ec); p = p.parent_path()) missing.push_back(p);
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0755) != 0) fail("mkdir(" + it->string() + ")", errno);
      created_dirs_.push_back(*it);
    }
    created_cgroup_ = !missing.empty();
    struct statfs sfs {};
    if (::statfs(cgroup_.c_str(), &sfs) != 0) fail("statfs(" + cgroup_.string() + ")", errno);
    if (sfs.f_type != CGROUP2_SUPER_MAGIC) throw SockmapError(cgroup_.string() + " is not on a cgroup2 file system");
    cgroup_fd_ = ::open(cgroup_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cgroup_fd_ < 0) fail("open(" + cgroup_.string() + ")", errno);

    object_ = bpf_object__open_file(options.bpf_object.c_str(), nullptr);
    if (object_ == nullptr) fail("bpf_object__open_file(" + options.bpf_object.string() + ")", errno);
    if (int err = bpf_object__load(object_); err != 0) fail("bpf_object__load(" + options.bpf_object.string() + ")", -err);

    bpf_program* sock_ops = bpf_object__find_program_by_name(object_, "sockmap_track");
    bpf_program* sk_msg = bpf_object__find_program_by_name(object_, "sockmap_redirect");
    bpf_map* sockets = bpf_object__find_map_by_name(object_, "sockets");
    bpf_map* counters = bpf_object__find_map_by_name(object_, "counters");
    if (!sock_ops || !sk_msg || !sockets || !counters)
      throw SockmapError(options.bpf_object.string() +
                         " lacks sockmap_track, sockmap_redirect, sockets or counters (not sockmap_redirect.bpf.o?)");
    sock_ops_fd_ = bpf_program__fd(sock_ops);
    sk_msg_fd_ = bpf_program__fd(sk_msg);
    sockets_fd_ = bpf_map__fd(sockets);
    counters_fd_ = bpf_map__fd(counters);

    // The verdict program first: a socket takes the map's programs when it is
    // inserted, so one inserted before this would never be redirected.
    if (bpf_prog_attach(sk_msg_fd_, sockets_fd_, BPF_SK_MSG_VERDICT, 0) != 0)
      fail("bpf_prog_attach(sockmap_redirect, sockets, BPF_SK_MSG_VERDICT)", errno);
    sk_msg_attached_ = true;

    // A link, so that the kernel detaches the program even if we are killed;
    // kernels without cgroup links get a plain attachment (detached by us).
    sock_ops_link_ = bpf_program__attach_cgroup(sock_ops, cgroup_fd_);
    if (sock_ops_link_ == nullptr) {
      int link_err = errno;
      if (link_err == EPERM || link_err == EACCES)
        fail("bpf_program__attach_cgroup(sockmap_track, " + cgroup_.string() + ")", link_err);
      if (bpf_prog_attach(sock_ops_fd_, cgroup_fd_, BPF_CGROUP_SOCK_OPS, BPF_F_ALLOW_MULTI) != 0)
        fail("bpf_prog_attach(sockmap_track, " + cgroup_.string() + ", BPF_CGROUP_SOCK_OPS)", errno);
      sock_ops_attached_ = true;
    }
  } catch (...) {
    detach();
    throw;
  }
}

SockmapRedirect::~SockmapRedirect() { detach(); }

Counters SockmapRedirect::counters() const {
  Counters out;
  if (counters_fd_ < 0) return out;
  const char* call = "";
  if (int err = sum_percpu_counters(counters_fd_, out.value, &call)) fail(call, err);
  return out;
}

std::string SockmapRedirect::detach() {
  std::string note;
  // Stop inserting sockets first, then stop redirecting.
  if (sock_ops_link_ != nullptr) {
    bpf_link__destroy(sock_ops_link_);
    sock_ops_link_ = nullptr;
  }
  if (sock_ops_attached_) {
    if (bpf_prog_detach2(sock_ops_fd_, cgroup_fd_, BPF_CGROUP_SOCK_OPS) != 0)
      note += std::string("bpf_prog_detach2(sockmap_track): ") + std::strerror(errno) + "; ";
    sock_ops_attached_ = false;
  }
  if (sk_msg_attached_) {
    if (bpf_prog_detach2(sk_msg_fd_, sockets_fd_, BPF_SK_MSG_VERDICT) != 0)
      note += std::string("bpf_prog_detach2(sockmap_redirect): ") + std::strerror(errno) + "; ";
    sk_msg_attached_ = false;
  }
  if (object_ != nullptr) {
    bpf_object__close(object_);  // closes the programs' and maps' fds: the kernel frees them
    object_ = nullptr;
  }
  sock_ops_fd_ = sk_msg_fd_ = sockets_fd_ = counters_fd_ = -1;
  if (cgroup_fd_ >= 0) {
    ::close(cgroup_fd_);
    cgroup_fd_ = -1;
  }
  for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
    if (::rmdir(it->c_str()) != 0) {
      note += "rmdir(" + it->string() + "): " + std::strerror(errno) +
              (errno == EBUSY ? " (processes are still in it; left in place)" : "") + "; ";
      break;  // its parents are not empty either
    }
  }
  created_dirs_.clear();
  if (note.size() >= 2) note.resize(note.size() - 2);
  return note;
}

}  // namespace dpukit::mesh::sockmap
