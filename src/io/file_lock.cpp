#include "kdp/io/file_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

namespace kdp::io {

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string utc(std::time_t t) {
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// When process `pid` of this host started, from /proc; "" when unknown.
std::string start_time_of(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');  // the command may hold spaces
  if (paren == std::string::npos) return "";
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i < 22) continue;
    std::ifstream proc_stat("/proc/stat");
    std::string key;
    long long boot = 0;
    while (proc_stat >> key) {
      if (key == "btime" && proc_stat >> boot) break;
    }
    const long ticks = ::sysconf(_SC_CLK_TCK);
    if (boot <= 0 || ticks <= 0) return "";
    return utc(static_cast<std::time_t>(boot + std::stoll(field) / ticks));
  }
  return "";
}

// Opens `path` read-write, creating it when missing; `created` says which.
int open_or_create(const std::string& path, bool& created) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) {
      created = false;
      return fd;
    }
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) {
      created = fd >= 0;
      return fd;
    }
  }
  errno = EEXIST;
  return -1;
}

}  // namespace

FileLock::~FileLock() {
  release();
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      held_(std::exchange(other.held_, false)),
      created_(other.created_),
      remove_(other.remove_),
      error_(other.error_) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    held_ = std::exchange(other.held_, false);
    created_ = other.created_;
    remove_ = other.remove_;
    error_ = other.error_;
  }
  return *this;
}

FileLock FileLock::try_acquire(const std::string& path) {
  if (path_exists(path)) require_regular_file(path, "kdp::io");
  FileLock lock;
  lock.path_ = path;
  bool created_any = false;
  for (int attempt = 0; attempt < 16; ++attempt) {
    lock.release();
    lock.fd_ = open_or_create(path, lock.created_);
    KDP_CHECK(lock.fd_ >= 0, IOError, "cannot open '{}' to lock it: {}", path,
              describe_file_error(errno));
    created_any = created_any || lock.created_;
    int rc = 0;
    do {
      rc = ::flock(lock.fd_, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      lock.error_ = errno == EWOULDBLOCK ? kBusy : errno;
      return lock;
    }
    // The lock counts only if the path still names the file locked: a holder
    // that removed it on release may have let a third process create another.
    struct stat locked {
    }, named{};
    if (::fstat(lock.fd_, &locked) == 0 && ::stat(path.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino) {
      lock.held_ = true;
      lock.error_ = 0;
      lock.created_ = created_any;
      return lock;
    }
  }
  KDP_FAIL(IOError,
           "cannot lock '{}': it is removed and created again "
           "continually",
           path);
}

std::string FileLock::reason() const {
  if (held_) return "";
  if (error_ == kBusy) return "another process holds its lock";
  return fmt::format("flock(): {}", describe_file_error(error_));
}

void FileLock::record_owner() const {
  if (fd_ < 0) return;
  // Only for the message another run prints: a failure here loses nothing.
  std::string started = start_time_of(std::to_string(::getpid()));  // as holder() says it
  if (started.empty()) started = utc(std::time(nullptr));
  const std::string line =
      fmt::format("pid {} on host {}, started {}\n", ::getpid(), host_name(), started);
  if (::ftruncate(fd_, 0) == 0) {
    (void)!::pwrite(fd_, line.data(), line.size(), 0);
  }
}

std::string FileLock::owner(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line.rfind("pid ", 0) != 0 || line.size() > 512) return "";
  return line;
}

std::string FileLock::holder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  std::ifstream locks("/proc/locks");
  std::string line;
  const std::string file_id = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev),
                                          static_cast<unsigned long long>(st.st_ino));
  while (std::getline(locks, line)) {
    // "1: FLOCK  ADVISORY  WRITE 2712 08:01:1835265 0 EOF" (waiters add "->").
    std::istringstream fields(line);
    std::string number, kind, mode, access, pid, id;
    if (!(fields >> number >> kind)) continue;
    if (kind == "->") continue;  // a process waiting for the lock, not holding it
    if (kind != "FLOCK" || !(fields >> mode >> access >> pid >> id)) continue;
    if (id == file_id && pid != "-1" && pid != "0") {
      const std::string started = start_time_of(pid);
      return fmt::format("pid {} on host {}{}", pid, host_name(),
                         started.empty() ? "" : ", started " + started);
    }
  }
  return "";
}

void FileLock::release() {
  // Removed before it is unlocked: whoever opened it meanwhile sees, once it
  // has the lock, that the path no longer names it (try_acquire).
  if (held_ && remove_) ::unlink(path_.c_str());
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
  fd_ = -1;
  held_ = false;
}

}  // namespace kdp::io
