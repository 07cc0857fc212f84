#include "kdp/core/regular_file.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "it is a directory";
  if (S_ISFIFO(mode)) return "it is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(mode)) return "it is a character device, not a regular file";
  if (S_ISBLK(mode)) return "it is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "it is a socket, not a regular file";
  return "it is not a regular file";
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& who,
                          const std::string& what) {
  struct stat st {};
  KDP_CHECK(::stat(path.c_str(), &st) == 0, IOError, who, "cannot open {}'{}': {}", what, path,
            describe_file_error(errno));
  KDP_CHECK(S_ISREG(st.st_mode), IOError, who, "cannot open {}'{}': {}", what, path,
            kind_of(st.st_mode));
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace kdp
