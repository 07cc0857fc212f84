#include "start_plan.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "kdp/core/checked_size.hpp"
#include "kdp/core/regular_file.hpp"
#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/io/output_file.hpp"
#include "kdp/io/run_directory_error.hpp"
#include "metrics_file.hpp"

namespace kdp::train {

namespace fs = std::filesystem;
using Reason = io::RunDirectoryError::Reason;
// RunDirectoryError is thrown as it is, not through KDP_FAIL: it carries the
// reason kdp-train turns into its exit status, and its texts say what to do.

namespace {

const char* kOtherDirectory = "use another checkpoint_dir";
const char* kDiscard = "resume = \"never\" with overwrite = true to discard its checkpoints";

[[noreturn]] void other_configuration(Reason reason, const std::string& what,
                                      const std::string& source,
                                      const std::vector<io::SettingDifference>& differences) {
  throw io::RunDirectoryError(
      reason,
      fmt::format("{} belongs to another run configuration ({}):", what,
                  differences.size() == 1 ? "1 setting differs"
                                          : fmt::format("{} settings differ", differences.size())),
      io::format_differences(differences, fmt::format("recorded in '{}'", source)),
      reason == Reason::OtherConfiguration
          ? fmt::format("To start this run, {}, or set {}.", kOtherDirectory, kDiscard)
          : "Resume it with the settings it records, or start fresh.");
}

int64_t step_of(const std::string& path) {
  try {
    return io::read_checkpoint_info(path).state.global_step;
  } catch (const Error&) {
    return -1;
  }
}

// The directory's lock, and the temporary files of interrupted saves removed.
void take_directory(const CheckpointOptions& o, const io::CheckpointDirectory& dir,
                    StartPlan& plan) {
  plan.directory_lock = dir.lock(o.require_locks);
  const io::CheckpointDirectory::Removed removed = dir.remove_orphaned_temporaries();
  if (removed.files > 0) {
    plan.messages.push_back(fmt::format(
        "removed {} temporary file(s) of saves interrupted by a crash in '{}' ({} freed)",
        removed.files, o.checkpoint_dir, format_bytes(static_cast<double>(removed.bytes))));
  }
}

// The metrics file, locked for the run: refused when another run holds it or
// when it is not kdp's. A file created here goes again if the run does not start.
MetricsFileContents take_metrics_file(const TrainerOptions& o, StartPlan& plan) {
  const std::string& path = o.metrics_path;
  auto refuse_unless_ours = [&](const MetricsFileContents& contents) {
    if (contents.ours) return;
    throw io::RunDirectoryError(
        Reason::NotKdpFile,
        fmt::format("'{}' is not a kdp metrics file: {}; kdp adds rows only to its "
                    "own metrics files and replaces none that is not",
                    path, contents.why_not_ours),
        "", "Choose another metrics file.");
  };
  // What is not a metrics file is refused before it is locked: it may be one of
  // the run's own inputs, which libraries lock too. Whether a kdp metrics file's
  // rows are kept or replaced is metrics_to_keep()'s decision.
  const io::OutputKind metrics{"metrics file",
                               [](const std::string& p) { return inspect_metrics_file(p).ours; }};
  try {
    io::claim_output(path, metrics, /*replace=*/true, "kdp::train");
  } catch (const io::ForeignFileError& e) {
    throw io::RunDirectoryError(Reason::NotKdpFile, e.message(), "",
                                "Choose another metrics file.");
  }
  plan.metrics_file = io::FileLock::try_acquire(path);
  plan.metrics_file.remove_when_released(plan.metrics_file.created());
  if (plan.metrics_file.busy()) {
    const std::string holder = io::FileLock::holder(path);
    throw io::RunDirectoryError(
        Reason::InUse,
        fmt::format("the metrics file '{}' is in use by another run ({})", path,
                    holder.empty() ? "a process kdp cannot name holds its lock" : holder),
        "", "Wait for that run to end, or use another metrics file.");
  }
  if (plan.metrics_file.unsupported() && o.require_locks) {
    throw io::RunDirectoryError(
        Reason::CannotLock,
        fmt::format("cannot lock the metrics file '{}': its file system has no "
                    "working locks ({})",
                    path, plan.metrics_file.reason()),
        "",
        "Write metrics to a file system with locks, or run without locks if you make sure that "
        "one run at a time uses it.");
  }
  MetricsFileContents contents = inspect_metrics_file(path);  // now that no one else writes it
  refuse_unless_ours(contents);
  return contents;
}

// What the metrics file keeps: nothing on a fresh start (which may not replace
// rows unless told to), the rows up to the resumed step on a resume.
uint64_t metrics_to_keep(const TrainerOptions& o, detail::Resume resume,
                         const MetricsFileContents& contents, const StartPlan& plan) {
  if (plan.resume_path.empty()) {
    if (contents.has_rows() && !o.overwrite) {
      throw io::RunDirectoryError(
          Reason::MetricsFileExists,
          fmt::format(
              "the metrics file '{}' already holds rows of another run, and "
              "this run starts afresh{}: it would replace them.",
              o.metrics_path,
              resume == detail::Resume::Auto ? " (there is no checkpoint to resume from)" : ""),
          "",
          "Choose another metrics_path, resume the run that wrote it, or set overwrite = true.");
    }
    return 0;
  }
  return contents.bytes_through_step(plan.resumed->state.global_step);
}

// resume = never: refused over this run's checkpoints unless overwrite, which
// may not replace a run.json that is not kdp's.
void plan_fresh_start(const CheckpointOptions& o, const io::CheckpointDirectory& dir,
                      const std::vector<std::string>& existing) {
  if (!existing.empty() && !o.overwrite) {
    throw io::RunDirectoryError(
        Reason::HoldsThisRun,
        fmt::format("the checkpoint directory '{}' already holds {} checkpoint(s) "
                    "of this run configuration (newest: '{}'), and a fresh start would "
                    "overwrite them.",
                    o.checkpoint_dir, existing.size(), existing.back()),
        "",
        fmt::format("Set resume = \"auto\" to continue that run, {}, or set {}.", kOtherDirectory,
                    kDiscard));
  }
  if (o.overwrite && path_exists(dir.config_path())) {
    try {
      dir.recorded_config();
    } catch (const Error& e) {
      throw io::RunDirectoryError(
          Reason::NotKdpFile,
          fmt::format("overwrite replaces only what kdp wrote, and {}; the run "
                      "would have to replace it to record its configuration",
                      e.what()),
          "", "Move it away, or use another checkpoint_dir.");
    }
  }
}

// resume = auto: the newest checkpoint that loads, or refused when there are
// some and none does. Nothing is moved yet.
io::CheckpointDirectory::Resumable plan_resume_newest(const CheckpointOptions& o,
                                                      const io::CheckpointDirectory& dir,
                                                      const nn::Module& model,
                                                      const optim::Optimizer& optimizer) {
  io::CheckpointDirectory::Resumable r = dir.newest_resumable(model, optimizer);
  if (r.path.empty() && !r.unusable.empty()) {
    std::string details;
    for (const auto& [path, why] : r.unusable) details += fmt::format("  '{}': {}\n", path, why);
    throw io::RunDirectoryError(
        Reason::NothingToResume,
        fmt::format("none of the {} checkpoint(s) in '{}' can be resumed from; "
                    "nothing was changed:",
                    r.unusable.size(), o.checkpoint_dir),
        details,
        fmt::format("Move them away (they are left as they are), {}, or set {}.", kOtherDirectory,
                    kDiscard));
  }
  return r;
}

// resume = a file: it must record this configuration and be no older than the
// directory's newest checkpoint.
io::Checkpoint plan_resume_file(const CheckpointOptions& o, const io::RunConfig& config,
                                const std::vector<std::string>& existing) {
  require_regular_file(o.resume, "kdp::train", "the checkpoint ");
  io::Checkpoint c = io::read_checkpoint(o.resume);
  const auto differences = io::checkpoint_differences(config, c.state.run_config);
  if (!differences.empty()) {
    other_configuration(Reason::CheckpointOfOtherConfiguration,
                        fmt::format("the checkpoint '{}'", o.resume), o.resume, differences);
  }
  if (!existing.empty()) {
    const int64_t newest = step_of(existing.back());
    if (newest > c.state.global_step) {
      throw io::RunDirectoryError(
          Reason::WouldFork,
          fmt::format("'{}' is at step {} but the checkpoint directory '{}' holds "
                      "a newer checkpoint of this run ('{}', step {}); resuming from the "
                      "older one there would mix two histories.",
                      o.resume, c.state.global_step, o.checkpoint_dir, existing.back(), newest),
          "",
          fmt::format("Set resume = \"auto\" to continue from the newest, or {} for the "
                      "resumed run.",
                      kOtherDirectory));
    }
  }
  return c;
}

// The checkpoints in the directory that are kdp checkpoints (a file of another
// kind under such a name is no run's and never overwritten: see save()).
std::vector<std::string> kdp_checkpoints(const io::CheckpointDirectory& dir) {
  std::vector<std::string> out;
  for (const std::string& path : dir.list()) {
    if (io::is_checkpoint_file(path)) out.push_back(path);
  }
  return out;
}

}  // namespace

StartPlan plan_start(const TrainerOptions& o, detail::Resume resume, const io::RunConfig& config,
                     const nn::Module& model, const optim::Optimizer& optimizer) {
  StartPlan plan;
  const bool fresh = resume == detail::Resume::Fresh;

  // 1. Own the files: nothing is decided while another run may change them.
  std::optional<io::CheckpointDirectory> dir;
  if (!o.checkpoint_dir.empty()) {
    dir.emplace(o.checkpoint_dir, o.keep_last, config);
    take_directory(o, *dir, plan);
  }
  std::optional<MetricsFileContents> metrics;
  if (!o.metrics_path.empty()) metrics = take_metrics_file(o, plan);

  // 2. Decide, changing nothing on disk.
  // overwrite: the user discards the directory, whoever it belonged to.
  if (dir) {
    if (auto conflict = fresh && o.overwrite ? std::nullopt : dir->find_conflict()) {
      other_configuration(Reason::OtherConfiguration,
                          fmt::format("the checkpoint directory '{}'", o.checkpoint_dir),
                          conflict->source, conflict->differences);
    }
  }
  const std::vector<std::string> existing =
      dir ? kdp_checkpoints(*dir) : std::vector<std::string>{};
  io::CheckpointDirectory::Resumable newest;
  if (fresh) {
    if (dir) plan_fresh_start(o, *dir, existing);
  } else if (resume == detail::Resume::Auto) {
    newest = plan_resume_newest(o, *dir, model, optimizer);
    if (!newest.path.empty()) {
      plan.resume_path = newest.path;
      plan.resumed = std::move(newest.checkpoint);
    }
  } else {
    plan.resumed = plan_resume_file(o, config, existing);
    plan.resume_path = o.resume;
  }
  if (metrics) plan.metrics_keep_bytes = metrics_to_keep(o, resume, *metrics, plan);

  // 3. The run starts: discard, move aside, record.
  if (dir && fresh && o.overwrite) {
    const size_t had = existing.size() + (io::is_checkpoint_file(dir->best_path()) ? 1 : 0);
    for (const auto& [path, why] : dir->discard()) {
      if (path == dir->best_path()) {
        // The run writes its own best.h5: the other file goes where nothing is lost.
        plan.messages.push_back(fmt::format(
            "warning: '{}' is not kdp's ({}); overwrite moved it to '{}' instead of removing it",
            path, why, dir->reject(path)));
      } else {
        plan.messages.push_back(
            fmt::format("warning: overwrite left '{}' as it is: it is not kdp's ({})", path, why));
      }
    }
    if (had > 0) {
      plan.messages.push_back(
          fmt::format("discarded {} checkpoint(s) in '{}' (overwrite)", had, o.checkpoint_dir));
    }
  }
  for (const auto& [path, why] : newest.unusable) {
    const std::string moved = dir->reject(path);
    plan.messages.push_back(
        fmt::format("warning: skipped checkpoint '{}': {}; moved it to '{}'", path, why, moved));
  }
  if (dir) dir->claim();
  plan.metrics_file.remove_when_released(false);  // the run owns it now
  return plan;
}

}  // namespace kdp::train
