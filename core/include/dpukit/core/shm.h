// File descriptors and shared mappings: the memory the host and dpu sides share.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace dpukit {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) { reset(); fd_ = std::exchange(o.fd_, -1); }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A MAP_SHARED mapping of a memfd: create it on one side, send the fd to the
// other side (SCM_RIGHTS), map it there.
class SharedMemory {
 public:
  SharedMemory() = default;
  static SharedMemory create(const std::string& name, size_t size);
  static SharedMemory map(UniqueFd fd);  // size from fstat
  SharedMemory(SharedMemory&& o) noexcept;
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  ~SharedMemory();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// errno as text with a prefix: "what: strerror(errno)".
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace dpukit
