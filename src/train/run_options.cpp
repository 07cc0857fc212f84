#include "run_options.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

namespace kdp::train::detail {

Monitor parse_monitor(const std::string& name) {
  if (name == "val_loss") return Monitor::ValLoss;
  if (name == "val_accuracy") return Monitor::ValAccuracy;
  if (name == "loss") return Monitor::Loss;
  if (name == "accuracy") return Monitor::Accuracy;
  if (name == "val_mse") return Monitor::ValMse;
  if (name == "val_mae") return Monitor::ValMae;
  if (name == "val_r2") return Monitor::ValR2;
  KDP_FAIL(ValueError,
           "cannot monitor '{}' (val_loss, val_accuracy, loss, accuracy, val_mse, val_mae or "
           "val_r2)",
           name);
}

bool maximised(Monitor m) {
  return m == Monitor::ValAccuracy || m == Monitor::Accuracy || m == Monitor::ValR2;
}

double monitored_value(Monitor m, const EpochRecord& record) {
  switch (m) {
    case Monitor::ValLoss:
      return record.val_loss;
    case Monitor::ValAccuracy:
      return record.val_accuracy;
    case Monitor::Loss:
      return record.loss;
    case Monitor::Accuracy:
      return record.accuracy;
    case Monitor::ValMse:
      return record.val_mse;
    case Monitor::ValMae:
      return record.val_mae;
    case Monitor::ValR2:
      return record.val_r2;
  }
  return record.val_loss;
}

Resume parse_resume(const std::string& resume) {
  if (resume.empty() || resume == "never") return Resume::Fresh;
  if (resume == "auto") return Resume::Auto;
  return Resume::File;
}

}  // namespace kdp::train::detail
