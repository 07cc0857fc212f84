#include "kdp/io/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/check.hpp"
#include "io/hdf5.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

namespace kdp::io {

namespace fs = std::filesystem;

namespace {

constexpr char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";
constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";

// Up to `limit` bytes from the start of the file at `path` (none when it
// cannot be read).
std::string head_of(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(limit, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(limit));
  bytes.resize(in ? limit : static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return bytes;
}

bool starts_with(const std::string& bytes, const char* prefix) {
  return bytes.compare(0, std::strlen(prefix), prefix) == 0;
}

// The format attribute of an HDF5 file ("" when it has none or cannot be read).
std::string hdf5_format(const std::string& path) {
  try {
    const h5::File f = h5::File::open(path);
    return f.has_attribute("format") ? f.attribute_string("format") : "";
  } catch (const Error&) {
    return "";
  }
}

// Whether a PNG file carries a tEXt chunk "Software" naming kdp's plotter: the
// chunks are walked up to IEND (at most the first MiB).
bool png_from_kdp(const std::string& path) {
  const std::string png = head_of(path, size_t{1} << 20);
  if (!starts_with(png, kPngSignature)) return false;
  const std::string wanted = std::string("Software") + '\0' + kPlotSoftware;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(png[i])); };
    const uint32_t length = byte(at) << 24 | byte(at + 1) << 16 | byte(at + 2) << 8 | byte(at + 3);
    const std::string type = png.substr(at + 4, 4);
    if (type == "IEND" || length > png.size()) break;
    if (type == "tEXt" && png.compare(at + 8, wanted.size(), wanted) == 0) return true;
    at += 12 + static_cast<size_t>(length);
  }
  return false;
}

// One line that is a whole number, as --status-file writes.
bool is_status_text(const std::string& text) {
  std::string line = text;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  if (!line.empty() && line.front() == '-') line.erase(0, 1);
  return !line.empty() && line.size() <= 4 &&
         std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_text(const std::string& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 || c == '\n' || c == '\r' || c == '\t';
  });
}

// Throws unless a new file can appear in the directory of `path`: kdp writes
// beside the target and renames. The probe is a file made and removed again.
void require_writable_directory(const std::string& path, const std::string& what,
                                const std::string& who) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  KDP_CHECK_FOR(who, fs::is_directory(dir, ec), IOError,
                "cannot write the {} '{}': its directory '{}' does not exist", what, path,
                dir.string());
  const std::string probe =
      (dir / fmt::format(".{}.probe.{}", target.filename().string(), ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const int err = errno;
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return;
  }
  // (/proc and /sys say "no such file" to a new name.)
  KDP_CHECK_FOR(who, err == EEXIST, IOError,
                "cannot write the {} '{}': its directory '{}' takes no new files ({})", what, path,
                dir.string(),
                err == ENOENT ? "its file system refuses them" : describe_file_error(err));
}

}  // namespace

OutputKind OutputKind::checkpoint() {
  return {"checkpoint", [](const std::string& p) { return hdf5_format(p) == "kdp-checkpoint"; }};
}

OutputKind OutputKind::dataset() {
  return {"dataset", [](const std::string& p) { return hdf5_format(p) == "kdp-dataset"; }};
}

OutputKind OutputKind::trace() {
  return {"trace file",
          [](const std::string& p) { return starts_with(head_of(p, 64), kTracePrefix); }};
}

OutputKind OutputKind::status() {
  return {"status file", [](const std::string& p) { return is_status_text(head_of(p, 16)); }};
}

OutputKind OutputKind::plot() {
  return {"plot", png_from_kdp};
}

std::string describe_path(const std::string& path) {
  if (!path_exists(path)) return "nothing";
  if (const std::string type = non_regular_type(path); !type.empty()) return type;
  const std::string head = head_of(path, 4096);
  if (head.empty()) return "an empty file";
  if (starts_with(head, kHdf5Signature)) {
    const std::string format = hdf5_format(path);
    if (format == "kdp-checkpoint") return "a kdp checkpoint (HDF5)";
    if (format == "kdp-dataset") return "a kdp dataset (HDF5)";
    return "an HDF5 file";
  }
  if (starts_with(head, kPngSignature)) {
    return png_from_kdp(path) ? "a plot of kdp's metrics (PNG)" : "a PNG image";
  }
  if (starts_with(head, kTracePrefix)) return "a kdp trace (JSON)";
  if (is_status_text(head)) return "a kdp-train status file";
  if (head[0] == '{' || head[0] == '[') return "a JSON file";
  return is_text(head) ? "a text file" : "a binary file";
}

bool claim_output(const std::string& path, const OutputKind& kind, bool replace,
                  const std::string& who, const std::string& how_to_replace) {
  KDP_CHECK_FOR(who, !path.empty(), ValueError, "the {} path is empty", kind.name);
  const bool exists = path_exists(path);
  if (exists) {
    const std::string type = non_regular_type(path);
    KDP_CHECK_FOR(who, type.empty(), IOError, "cannot write the {} '{}': it is {}", kind.name, path,
                  type);
  }
  require_writable_directory(path, kind.name, who);
  if (!exists) return false;
  KDP_CHECK_FOR(who, kind.recognises(path), ForeignFileError,
                "'{}' is {}, not a kdp {}: kdp never replaces it; name another file", path,
                describe_path(path), kind.name);
  KDP_CHECK_FOR(who, replace, IOError,
                "the {} '{}' exists; name another file, or use {} to replace it", kind.name, path,
                how_to_replace);
  KDP_CHECK_FOR(who, ::access(path.c_str(), W_OK) == 0, IOError, "cannot write the {} '{}': {}",
                kind.name, path, describe_file_error(errno));
  return true;
}

}  // namespace kdp::io
