#include "kdp/io/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::io {

namespace fs = std::filesystem;

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  KDP_CHECK(fd >= 0, IOError, "cannot open '{}' to sync it: {}", path, describe_file_error(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  KDP_CHECK(rc == 0, IOError, "cannot sync '{}' to disk: {}", path, describe_file_error(err));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some file systems refuse; the rename itself is still atomic
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile target(path);
  target.write(text.data(), text.size());
  target.commit();
}

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
  // From a random start: another process of the same pid (a container's on
  // another node) that left a temporary file never made this name.
  static std::atomic<uint32_t> counter{std::random_device{}() % 1000000000u};
  const fs::path t(target_);
  const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  KDP_CHECK(fs::is_directory(dir), IOError, "cannot write '{}': directory '{}' does not exist",
            target_, dir.string());
  temp_ =
      (dir / fmt::format(".{}.tmp.{}.{}", t.filename().string(), ::getpid(), counter++)).string();
}

AtomicFile::~AtomicFile() {
  if (!committed_) std::remove(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KDP_CHECK(fd >= 0, IOError, "cannot write '{}': cannot create '{}': {}", target_, temp_,
            describe_file_error(errno));
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  int err = 0;
  while (done < size && err == 0) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  KDP_CHECK(err == 0, IOError, "cannot write '{}' ({} of {} bytes written): {}", target_, done,
            size, describe_file_error(err));
  synced_ = true;
}

void AtomicFile::commit() {
  if (!synced_) fsync_file(temp_);
  KDP_CHECK(std::rename(temp_.c_str(), target_.c_str()) == 0, IOError,
            "cannot move '{}' into place as '{}': {}", temp_, target_, describe_file_error(errno));
  committed_ = true;
  const fs::path t(target_);
  fsync_directory(t.has_parent_path() ? t.parent_path().string() : ".");
}

}  // namespace kdp::io
