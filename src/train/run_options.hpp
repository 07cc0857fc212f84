#pragma once
// The Trainer's string options parsed once into what the loop branches on.

#include <string>

#include "kdp/train/trainer.hpp"

namespace kdp::train::detail {

/// The metric for best checkpoints, early stopping and stopping thresholds.
enum class Monitor { ValLoss, ValAccuracy, Loss, Accuracy, ValMse, ValMae, ValR2 };

/// TrainerOptions::monitor; a ValueError for anything else.
Monitor parse_monitor(const std::string& name);
/// Accuracies and R² are maximised, losses and errors minimised.
bool maximised(Monitor m);
/// The epoch's value of the monitored metric.
double monitored_value(Monitor m, const EpochRecord& record);

/// Where a run starts: afresh, from the newest usable checkpoint of its
/// directory, or from a checkpoint file.
enum class Resume { Fresh, Auto, File };

/// TrainerOptions::resume ("" or "never", "auto", a path).
Resume parse_resume(const std::string& resume);

}  // namespace kdp::train::detail
