#include "kdp/train/metrics_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"

namespace kdp::train {

const std::vector<std::string>& MetricsWriter::columns() {
  // Columns added later go at the end, so that older files keep their meaning.
  static const std::vector<std::string> c = {"epoch",    "step",          "loss",        "accuracy",
                                             "lr",       "samples_per_s", "data_wait_s", "comm_s",
                                             "val_loss", "val_accuracy",  "grad_norm",   "val_mse",
                                             "val_mae",  "val_r2",        "bpb",         "val_bpb"};
  return c;
}

std::string MetricsWriter::csv_header() {
  return fmt::format("type,{}", fmt::join(columns(), ","));
}

bool MetricsWriter::is_csv(const std::string& path) {
  return std::filesystem::path(path).extension() == ".csv";
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), csv_(is_csv(path)) {
  if (path_exists(path)) require_regular_file(path, "kdp::train", "metrics file ");
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("open", errno);
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  if (size < 0) fail("read the size of", errno);
  const uint64_t keep = append ? static_cast<uint64_t>(size) : 0;
  if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0) fail("truncate", errno);
  if (csv_ && keep == 0) write_text(csv_header() + "\n");
  read_kept_columns(keep);
}

MetricsWriter::MetricsWriter(std::string path, int fd, uint64_t keep_bytes)
    : path_(std::move(path)), csv_(is_csv(path_)), fd_(fd) {
  if (::ftruncate(fd_, static_cast<off_t>(keep_bytes)) != 0) fail("cut", errno);
  if (::lseek(fd_, 0, SEEK_END) < 0) fail("seek in", errno);
  if (csv_ && keep_bytes == 0) write_text(csv_header() + "\n");
  read_kept_columns(keep_bytes);
}

void MetricsWriter::read_kept_columns(uint64_t keep_bytes) {
  if (!csv_ || keep_bytes == 0) return;
  std::string head(static_cast<size_t>(std::min<uint64_t>(keep_bytes, 4096)), '\0');
  const ssize_t n = ::pread(fd_, head.data(), head.size(), 0);
  if (n < 0) fail("read the header of", errno);
  head.resize(static_cast<size_t>(n));
  head = head.substr(0, head.find('\n'));
  if (head.rfind("type,", 0) != 0) return;  // not a header of kdp's: rows as today
  columns_.clear();
  size_t from = 5;
  while (from <= head.size()) {
    const size_t comma = std::min(head.find(',', from), head.size());
    columns_.push_back(head.substr(from, comma - from));
    from = comma + 1;
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::fail(const char* doing, int error) const {
  KDP_FAIL(IOError, "cannot {} the metrics file '{}': {}", doing, path_,
           describe_file_error(error));
}

void MetricsWriter::write_text(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
}

void MetricsWriter::write(const std::string& type, const std::map<std::string, double>& values) {
  KDP_CHECK(fd_ >= 0, StateError, "the metrics file '{}' is closed", path_);
  std::string line;
  if (csv_) {
    line = type;
    for (const auto& c : columns_) {
      line += ",";
      auto it = values.find(c);
      if (it != values.end() && std::isfinite(it->second))
        line += fmt::format("{:.6g}", it->second);
    }
  } else {
    nlohmann::json row;
    row["type"] = type;
    for (const auto& [k, v] : values) {
      if (std::isfinite(v)) row[k] = v;
    }
    line = row.dump();
  }
  write_text(line + "\n");  // one write per row: a crash loses at most the row being written
}

void MetricsWriter::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0) fail("sync", errno);
}

void MetricsWriter::close() {
  if (fd_ < 0) return;
  const int synced = ::fsync(fd_);
  const int sync_error = errno;
  const int closed = ::close(fd_);
  const int close_error = errno;
  fd_ = -1;
  if (synced != 0) fail("sync", sync_error);
  if (closed != 0) fail("close", close_error);
}

}  // namespace kdp::train
