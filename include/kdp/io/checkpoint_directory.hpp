#pragma once
/// \file
/// CheckpointDirectory: the checkpoints of one training run. Files are named
/// ckpt-<global step>.h5 and written atomically; after each save only the
/// newest `keep_last` are kept. best.h5 holds the best checkpoint by the
/// monitored metric. Resuming picks the newest checkpoint that loads, skipping
/// any that do not.

#include <optional>
#include <string>
#include <vector>

#include "kdp/io/checkpoint.hpp"

namespace kdp::io {

/// The rotated checkpoints of one training run.
class CheckpointDirectory {
 public:
  /// Creates the directory when missing (throws IOError when it cannot).
  CheckpointDirectory(std::string dir, int keep_last = 3);

  const std::string& dir() const { return dir_; }
  std::string path_for(int64_t global_step) const;
  std::string best_path() const;

  /// Saves ckpt-<step>.h5 and removes the oldest beyond keep_last; returns its path.
  std::string save(const nn::Module& model, const optim::Optimizer& optimizer,
                   const TrainingState& state);
  /// Saves best.h5.
  void save_best(const nn::Module& model, const optim::Optimizer& optimizer,
                 const TrainingState& state);
  /// The step checkpoints, oldest first.
  std::vector<std::string> list() const;

  /// The checkpoint that loaded and its training state.
  struct Loaded {
    std::string path;
    TrainingState state;
  };
  /// Loads the newest checkpoint that loads into model and optimizer; the ones
  /// that failed are added to `skipped` with their error. Empty when none did.
  std::optional<Loaded> load_newest(nn::Module& model, optim::Optimizer& optimizer,
                                    std::vector<std::string>* skipped = nullptr) const;

 private:
  std::string dir_;
  int keep_last_;
};

}  // namespace kdp::io
