#include "kdp/core/error.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>

namespace kdp {

std::string describe_file_error(int errno_value) {
  switch (errno_value) {
    case ENOENT:
      return "no such file";
    case EACCES:
    case EPERM:
      return "permission denied";
    case EISDIR:
      return "it is a directory";
    case ENOTDIR:
      return "a part of its path is not a directory";
    case ENOSPC:
      return "no space left on the device";
    default:
      break;
  }
  std::string text = std::strerror(errno_value);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

}  // namespace kdp
