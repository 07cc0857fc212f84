#pragma once
/// \file
/// MetricsWriter: one row per logged step or epoch, to a CSV file (path ending
/// in .csv) or JSON lines (any other path). Columns: type (step/epoch), epoch,
/// step, loss, accuracy, lr, samples_per_s, data_wait_s, comm_s, val_loss,
/// val_accuracy (empty or absent where not measured).

#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace kdp::train {

/// Rows of metrics to a CSV or JSON-lines file.
class MetricsWriter {
 public:
  /// Opens `path` for writing (truncating, or appending when `append`).
  MetricsWriter(const std::string& path, bool append = false);
  void write(const std::string& type, const std::map<std::string, double>& values);
  const std::string& path() const { return path_; }

  static const std::vector<std::string>& columns();

 private:
  std::string path_;
  bool csv_;
  std::ofstream out_;
};

}  // namespace kdp::train
