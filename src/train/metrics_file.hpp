#pragma once
// What an existing metrics file holds, read before a run writes to it: whether
// it is kdp's own (a CSV file starting with MetricsWriter's header, or JSON
// lines of kdp's rows), how many rows it has, and where the rows of each step
// start, so that a resumed run keeps the rows up to its step and replaces the
// ones after it.

#include <cstdint>
#include <string>
#include <vector>

namespace kdp::train {

struct MetricsFileContents {
  uint64_t size = 0;
  bool ours = true;          // empty, or kdp's rows
  std::string why_not_ours;  // when not: what was found instead
  uint64_t body_start = 0;   // after the CSV header
  struct Row {
    int64_t step = -1;  // -1 when unreadable
    uint64_t offset = 0;
  };
  std::vector<Row> rows;
  /// Where a last line without its newline (a row cut short) starts, or size.
  uint64_t complete_end = 0;

  bool has_rows() const { return !rows.empty() || complete_end < size; }
  /// The bytes to keep for a run resumed at `step`: everything before the
  /// first row of a later step and before a row cut short.
  uint64_t bytes_through_step(int64_t step) const;
};

/// Reads the metrics file at `path` (a regular file); throws IOError naming it
/// when it cannot be read.
MetricsFileContents inspect_metrics_file(const std::string& path);

}  // namespace kdp::train
