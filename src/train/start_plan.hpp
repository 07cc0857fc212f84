#pragma once
// Where a Trainer's run starts, decided on rank 0 before anything is written:
// the checkpoint directory's owner, what a fresh start would overwrite, which
// checkpoint to resume from and which newer ones to move aside.

#include <optional>
#include <string>
#include <vector>

#include "kdp/io/checkpoint.hpp"
#include "kdp/train/trainer.hpp"

namespace kdp::train {

struct StartPlan {
  std::string resume_path;                // empty: a fresh start
  std::optional<io::Checkpoint> resumed;  // the checkpoint at resume_path, read and checked
  std::vector<std::string> messages;      // what was done on the way (rejections)
};

/// Checks and prepares the run's files; throws io::RunDirectoryError (or the
/// IOError of a file that cannot be read) when the run may not start.
StartPlan plan_start(const TrainerOptions& options, const io::RunConfig& config,
                     const nn::Module& model, const optim::Optimizer& optimizer);

}  // namespace kdp::train
