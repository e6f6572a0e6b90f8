#include "dpukit/core/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace dpukit {

void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

SharedMemory SharedMemory::create(const std::string& name, size_t size) {
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw_errno("memfd_create(" + name + ")");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throw_errno("ftruncate(" + name + ")");
  // Sealed at this size: a peer that shrank it would make the other side's
  // next access to the mapping a SIGBUS.
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw_errno("seal(" + name + ")");
  return map(std::move(fd));
}

SharedMemory SharedMemory::map(UniqueFd fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("fstat(shared memory)");
  if (st.st_size <= 0) throw std::runtime_error("shared memory: empty mapping");
  SharedMemory m;
  m.size_ = static_cast<size_t>(st.st_size);
  m.data_ = ::mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m.data_ == MAP_FAILED) {
    m.data_ = nullptr;
    throw_errno("mmap(shared memory)");
  }
  m.fd_ = std::move(fd);
  return m;
}

SharedMemory::SharedMemory(SharedMemory&& o) noexcept
    : fd_(std::move(o.fd_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    fd_ = std::move(o.fd_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SharedMemory::~SharedMemory() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace dpukit
