#include "kdp/core/regular_file.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

std::string non_regular_type(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a special file";
}

void require_regular_file(const std::string& path, const std::string& who,
                          const std::string& what) {
  struct stat st {};
  KDP_CHECK_FOR(who, ::stat(path.c_str(), &st) == 0, IOError, "cannot open {}'{}': {}", what, path,
                describe_file_error(errno));
  if (S_ISREG(st.st_mode)) return;
  const std::string type = non_regular_type(path);
  KDP_FAIL_FOR(who, IOError, "cannot open {}'{}': it is {}", what, path,
               S_ISDIR(st.st_mode) ? type : type + ", not a regular file");
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace kdp
