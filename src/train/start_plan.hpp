#pragma once
// Where a Trainer's run starts, decided on rank 0 before anything is written:
// the checkpoint directory's and the metrics file's locks, what a fresh start
// would overwrite, which checkpoint to resume from, which newer ones to move
// aside and how much of the metrics file the run keeps.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kdp/io/checkpoint.hpp"
#include "kdp/io/file_lock.hpp"
#include "kdp/train/trainer.hpp"
#include "run_options.hpp"

namespace kdp::train {

struct StartPlan {
  std::string resume_path;                // empty: a fresh start
  std::optional<io::Checkpoint> resumed;  // the checkpoint at resume_path, read and checked
  std::vector<std::string> messages;      // what was done on the way (rejections, clean-ups)
  /// Held for the whole run: the checkpoint directory's lock and the metrics
  /// file, open and locked (rank 0 only).
  io::FileLock directory_lock;
  io::FileLock metrics_file;
  /// The bytes of the metrics file the run keeps: 0 for a fresh start, the
  /// rows up to the resumed step for a resume.
  uint64_t metrics_keep_bytes = 0;
};

/// Checks and prepares the run's files; throws io::RunDirectoryError (or the
/// IOError of a file that cannot be read) when the run may not start.
StartPlan plan_start(const TrainerOptions& options, detail::Resume resume,
                     const io::RunConfig& config, const nn::Module& model,
                     const optim::Optimizer& optimizer);

}  // namespace kdp::train
