#pragma once
/// \file
/// MetricsWriter: one row per logged step or epoch, to a CSV file (path ending
/// in .csv) or JSON lines (any other path). Columns: type (step/epoch), epoch,
/// step, loss, accuracy, lr, samples_per_s, data_wait_s, comm_s, val_loss,
/// val_accuracy, grad_norm (empty or absent where not measured).
///
/// Every write is checked: a full disk or a failed sync is an IOError naming
/// the file and the reason, never a row silently lost.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kdp::train {

/// Rows of metrics to a CSV or JSON-lines file.
class MetricsWriter {
 public:
  /// Opens `path` for writing (truncating, or appending when `append`).
  MetricsWriter(const std::string& path, bool append = false);
  /// Writes through `fd`, an open read-write descriptor of `path` that the
  /// writer takes over: the file is cut to its first `keep_bytes` bytes, and
  /// the CSV header is written when nothing is kept.
  MetricsWriter(std::string path, int fd, uint64_t keep_bytes);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  /// Appends one row; throws IOError when it cannot be written whole.
  void write(const std::string& type, const std::map<std::string, double>& values);
  /// Flushes the rows to disk (fsync); throws IOError when that fails.
  void sync();
  /// Syncs and closes the file; throws IOError when either fails. (The
  /// destructor closes without reporting.)
  void close();
  const std::string& path() const { return path_; }

  static const std::vector<std::string>& columns();
  /// The first line of a CSV metrics file: "type,epoch,step,...". Rows
  /// appended to a file kept from an earlier version follow its header.
  static std::string csv_header();
  /// Whether rows go to `path` as CSV (else JSON lines).
  static bool is_csv(const std::string& path);

 private:
  void write_text(const std::string& text);
  // A CSV file kept from an earlier run: the columns of its header (older
  // versions wrote fewer), so that its rows keep one layout.
  void read_kept_columns(uint64_t keep_bytes);
  [[noreturn]] void fail(const char* doing, int error) const;

  std::string path_;
  bool csv_;
  int fd_ = -1;
  std::vector<std::string> columns_ = columns();
};

}  // namespace kdp::train
