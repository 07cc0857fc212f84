#include "kdp/train/metrics_writer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kdp/core/error.hpp"

namespace kdp::train {

const std::vector<std::string>& MetricsWriter::columns() {
  static const std::vector<std::string> c = {"epoch",    "step",          "loss",        "accuracy",
                                             "lr",       "samples_per_s", "data_wait_s", "comm_s",
                                             "val_loss", "val_accuracy",  "grad_norm"};
  return c;
}

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : path_(path), csv_(std::filesystem::path(path).extension() == ".csv") {
  const bool fresh = !append || !std::filesystem::exists(path);
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw IOError(fmt::format("kdp::train: cannot open metrics file '{}'", path));
  if (csv_ && fresh) out_ << "type," << fmt::format("{}", fmt::join(columns(), ",")) << "\n";
}

void MetricsWriter::write(const std::string& type, const std::map<std::string, double>& values) {
  if (csv_) {
    out_ << type;
    for (const auto& c : columns()) {
      out_ << ",";
      auto it = values.find(c);
      if (it != values.end() && std::isfinite(it->second))
        out_ << fmt::format("{:.6g}", it->second);
    }
    out_ << "\n";
  } else {
    nlohmann::json row;
    row["type"] = type;
    for (const auto& [k, v] : values) {
      if (std::isfinite(v)) row[k] = v;
    }
    out_ << row.dump() << "\n";
  }
  out_.flush();
}

}  // namespace kdp::train
