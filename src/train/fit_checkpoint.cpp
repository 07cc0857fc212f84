// FitRun's checkpoints: rank 0 writes them, from the whole optimizer state
// gathered onto it, or a sharded optimizer's ranks each write their own slice
// of the state into the file rank 0 made (io::SlicedCheckpoint).
#include <fmt/format.h>

#include "fit_run.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/trace.hpp"

namespace kdp::train::detail {

// Every rank together; returns whether the file was written (best.h5 is
// written only when it improves).
bool FitRun::write_checkpoint(const io::TrainingState& st, bool best) {
  trace::Region region("kdp::train::checkpoint", "compute");
  if (slices_) {
    if (const std::optional<bool> wrote = write_sliced(st, best)) return *wrote;
  }
  int64_t wrote = 0;
  in_.optimizer.gather_state();  // a sharded optimizer's whole state, for rank 0 to write
  on_rank0(
      comm_,
      [&] {
        if (best) {
          wrote = checkpoints_->save_best(bare_, in_.optimizer, st, maximised(monitor_));
        } else {
          checkpoints_->save(bare_, in_.optimizer, st);
          wrote = 1;
        }
      },
      "checkpoint not written by rank 0: ");
  comm_.broadcast(&wrote, sizeof(wrote), 0);
  return wrote != 0;
}

// Rank 0 makes the file, every rank writes its slices into it, rank 0 commits
// it once all have. When a rank cannot open the file (a checkpoint directory
// that is not one file system for every rank), nothing is committed and the
// run gathers its checkpoints onto rank 0 from then on (nullopt). Any other
// failure stops every rank with the reason, as a gathered checkpoint's would.
std::optional<bool> FitRun::write_sliced(const io::TrainingState& st, bool best) {
  const std::optional<optim::OptimizerState> layout = in_.optimizer.state_layout();
  std::optional<io::SlicedCheckpoint> file;
  on_rank0(
      comm_,
      [&] {
        if (best) {
          file =
              checkpoints_->begin_save_best(bare_, in_.optimizer, *layout, st, maximised(monitor_));
        } else {
          file = checkpoints_->begin_save(bare_, in_.optimizer, *layout, st);
        }
      },
      "checkpoint not written by rank 0: ");
  std::string plan = file ? file->plan() : "";
  broadcast_string(comm_, plan);
  if (plan.empty()) return false;  // best.h5 stays

  int64_t failure = 0;  // 1: this rank cannot open the file; 2: anything else
  std::string why;
  try {
    if (!io::write_state_slices(plan, in_.optimizer, comm_.rank(), &why)) failure = 1;
  } catch (const std::exception& e) {  // whatever it is, every rank must hear of it
    failure = 2;
    why = e.what();
  }
  int64_t worst = failure;
  comm_.allreduce(&worst, 1, dist::ReduceOp::Max);
  if (worst != 0) {
    // The reason of the first rank with the worst failure, on every rank;
    // rank 0's `file` removes itself.
    const std::string mine = failure == worst ? why : "";
    std::string first;
    for (const auto& text : comm_.allgather_bytes(mine.data(), mine.size())) {
      if (first.empty()) first.assign(text.begin(), text.end());
    }
    if (worst == 2) throw IOError(first);
    slices_ = false;
    progress_.message(fmt::format(
        "checkpoint: {}; rank 0 gathers the optimizer state and writes it from now on", first));
    return std::nullopt;
  }
  on_rank0(
      comm_, [&] { checkpoints_->finish_save(*file); }, "checkpoint not committed by rank 0: ");
  return true;
}

}  // namespace kdp::train::detail
