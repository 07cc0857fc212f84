#pragma once
/// \file
/// CheckpointDirectory: the checkpoints of one training run. Files are named
/// ckpt-<global step>.h5 and written atomically; best.h5 holds the best one by
/// the monitored metric; run.json records the run configuration that owns the
/// directory (see run_config.hpp), and every checkpoint records it too.
///
/// Nothing here destroys another run's work: retention (keep the newest
/// `keep_last`) removes only checkpoints this configuration wrote, best.h5 is
/// replaced only by a better metric of the same configuration, and a checkpoint
/// that cannot be resumed from is moved to rejected/, never deleted.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kdp/io/checkpoint.hpp"
#include "kdp/io/file_lock.hpp"
#include "kdp/io/run_config.hpp"

namespace kdp::io {

/// The rotated checkpoints of one training run configuration.
class CheckpointDirectory {
 public:
  /// Creates the directory when missing (throws IOError when it cannot).
  /// `config` is the configuration of the run that uses it.
  CheckpointDirectory(std::string dir, int keep_last = 3, RunConfig config = {});

  const std::string& dir() const { return dir_; }
  const RunConfig& config() const { return config_; }
  std::string path_for(int64_t global_step) const;
  std::string best_path() const;
  /// run.json: the configuration that owns the directory.
  std::string config_path() const;
  /// Where checkpoints that cannot be resumed from are moved.
  std::string rejected_dir() const;
  /// The lock file a run holds while it uses the directory (.kdp-run.lock).
  std::string lock_path() const;

  /// Takes the directory for this process: an advisory lock on lock_path(),
  /// which names this process, host and start time, and is removed when the
  /// lock is released. Throws RunDirectoryError (InUse) naming the owner when
  /// another run holds it, and (CannotLock) when the file system has no locks,
  /// unless `require` is false.
  FileLock lock(bool require = true) const;

  /// The temporary files that saves interrupted by a crash left (named
  /// .<file>.tmp.<pid>.<n>), whose writing process no longer runs on this
  /// host, are removed. Call it holding lock(). Returns their count and bytes.
  struct Removed {
    int files = 0;
    uint64_t bytes = 0;
  };
  Removed remove_orphaned_temporaries() const;

  /// The step checkpoints, oldest first.
  std::vector<std::string> list() const;

  /// The configuration recorded in run.json, if there is one.
  std::optional<RunConfig> recorded_config() const;

  /// A record in the directory (run.json or a checkpoint) whose settings differ
  /// from config().
  struct Conflict {
    std::string source;  // the file that says so
    std::vector<SettingDifference> differences;
  };
  /// The first record that belongs to another configuration: run.json, then
  /// every checkpoint that can be read (unreadable ones are resume's business).
  std::optional<Conflict> find_conflict() const;

  /// Records config() in run.json (atomically) unless it is recorded already.
  void claim() const;
  /// What --overwrite asks: removes the step checkpoints and best.h5 that are
  /// checkpoints of some kdp run (their format attribute says so), and
  /// run.json when it is a kdp run configuration. Anything else under those
  /// names stays; returns what stayed and why.
  std::vector<std::pair<std::string, std::string>> discard() const;
  /// Moves a checkpoint into rejected/ under a name not taken there; returns
  /// its new path.
  std::string reject(const std::string& path) const;
  /// Whether the checkpoint at `path` can be read and records this
  /// configuration (as far as it records one).
  bool owns(const std::string& path) const;

  /// Saves ckpt-<step>.h5 with config() in it, then removes the oldest of this
  /// configuration's checkpoints beyond keep_last; returns its path. A file
  /// under that name that is not a kdp checkpoint is moved to rejected/ first.
  std::string save(const nn::Module& model, const optim::Optimizer& optimizer,
                   const TrainingState& state);
  /// Saves best.h5 when there is none, or when the one there belongs to this
  /// configuration and records a worse `state.values["best_metric"]` (higher
  /// with `maximise`, lower otherwise). An unreadable best.h5 is moved to
  /// rejected/ first. Returns whether it wrote.
  bool save_best(const nn::Module& model, const optim::Optimizer& optimizer,
                 const TrainingState& state, bool maximise);
  /// save() and save_best() for a sharded optimizer whose ranks write their
  /// own slices of its state (SlicedCheckpoint; `layout`:
  /// Optimizer::state_layout()): the file, made ready for the slices, or
  /// none when best.h5 is not to be replaced. finish_save() commits it and,
  /// for a step checkpoint, removes what keep_last no longer keeps.
  SlicedCheckpoint begin_save(const nn::Module& model, const optim::Optimizer& optimizer,
                              const optim::OptimizerState& layout, const TrainingState& state);
  std::optional<SlicedCheckpoint> begin_save_best(const nn::Module& model,
                                                  const optim::Optimizer& optimizer,
                                                  const optim::OptimizerState& layout,
                                                  const TrainingState& state, bool maximise);
  void finish_save(SlicedCheckpoint& checkpoint);

  /// The newest checkpoint to resume from and what was wrong with newer ones.
  struct Resumable {
    std::string path;  // empty when no checkpoint qualifies
    Checkpoint checkpoint;
    /// Newer checkpoints that could not be used: path, why.
    std::vector<std::pair<std::string, std::string>> unusable;
  };
  /// Finds the newest checkpoint that reads, fits `model` and `optimizer` and
  /// was written by this configuration. Changes nothing on disk.
  Resumable newest_resumable(const nn::Module& model, const optim::Optimizer& optimizer) const;

 private:
  // save()'s first half: the path, with a file there that is not a
  // checkpoint moved away, and the state as recorded (with config()).
  std::string prepare_save(const TrainingState& state, TrainingState& recorded) const;
  void apply_keep_last() const;
  // Whether best.h5 is to be replaced by a checkpoint of `state` (an
  // unreadable one is moved to rejected/ first).
  bool best_improves(const TrainingState& state, bool maximise) const;

  std::string dir_;
  int keep_last_;
  RunConfig config_;
};

}  // namespace kdp::io
