#include "start_plan.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "kdp/io/checkpoint_directory.hpp"
#include "kdp/io/run_directory_error.hpp"

namespace kdp::train {

namespace fs = std::filesystem;
using Reason = io::RunDirectoryError::Reason;

namespace {

const char* kOtherDirectory = "use another checkpoint_dir";
const char* kDiscard = "resume = \"never\" with overwrite = true to discard its checkpoints";

[[noreturn]] void other_configuration(Reason reason, const std::string& what,
                                      const std::string& source,
                                      const std::vector<io::SettingDifference>& differences) {
  throw io::RunDirectoryError(
      reason,
      fmt::format("kdp::train: {} belongs to another run configuration ({}):", what,
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

}  // namespace

StartPlan plan_start(const TrainerOptions& o, const io::RunConfig& config, const nn::Module& model,
                     const optim::Optimizer& optimizer) {
  StartPlan plan;
  const bool fresh = o.resume.empty() || o.resume == "never";

  if (fresh && !o.metrics_path.empty() && !o.overwrite && fs::exists(o.metrics_path) &&
      fs::file_size(o.metrics_path) > 0) {
    throw io::RunDirectoryError(
        Reason::MetricsFileExists,
        fmt::format("kdp::train: the metrics file '{}' already holds rows of another run, and a "
                    "fresh start would replace them.",
                    o.metrics_path),
        "", "Choose another metrics_path, resume the run that wrote it, or set overwrite = true.");
  }

  std::optional<io::CheckpointDirectory> dir;
  if (!o.checkpoint_dir.empty()) {
    dir.emplace(o.checkpoint_dir, o.keep_last, config);
    // overwrite: the user discards the directory, whoever it belonged to.
    if (auto conflict = fresh && o.overwrite ? std::nullopt : dir->find_conflict()) {
      other_configuration(Reason::OtherConfiguration,
                          fmt::format("the checkpoint directory '{}'", o.checkpoint_dir),
                          conflict->source, conflict->differences);
    }
  }
  const std::vector<std::string> existing = dir ? dir->list() : std::vector<std::string>{};

  if (fresh) {
    if (!existing.empty() && !o.overwrite) {
      throw io::RunDirectoryError(
          Reason::HoldsThisRun,
          fmt::format("kdp::train: the checkpoint directory '{}' already holds {} checkpoint(s) "
                      "of this run configuration (newest: '{}'), and a fresh start would "
                      "overwrite them.",
                      o.checkpoint_dir, existing.size(), existing.back()),
          "",
          fmt::format("Set resume = \"auto\" to continue that run, {}, or set {}.", kOtherDirectory,
                      kDiscard));
    }
    if (dir && o.overwrite) {
      const size_t had = existing.size() + (fs::exists(dir->best_path()) ? 1 : 0);
      dir->discard();
      if (had > 0) {
        plan.messages.push_back(
            fmt::format("discarded {} checkpoint(s) in '{}' (overwrite)", had, o.checkpoint_dir));
      }
    }
  } else if (o.resume == "auto") {
    io::CheckpointDirectory::Resumable r = dir->newest_resumable(model, optimizer);
    if (r.path.empty() && !r.unusable.empty()) {
      std::string details;
      for (const auto& [path, why] : r.unusable) details += fmt::format("  '{}': {}\n", path, why);
      throw io::RunDirectoryError(
          Reason::NothingToResume,
          fmt::format("kdp::train: none of the {} checkpoint(s) in '{}' can be resumed from; "
                      "nothing was changed:",
                      r.unusable.size(), o.checkpoint_dir),
          details,
          fmt::format("Move them away (they are left as they are), {}, or set {}.", kOtherDirectory,
                      kDiscard));
    }
    for (const auto& [path, why] : r.unusable) {
      const std::string moved = dir->reject(path);
      plan.messages.push_back(
          fmt::format("warning: skipped checkpoint '{}': {}; moved it to '{}'", path, why, moved));
    }
    if (!r.path.empty()) {
      plan.resume_path = r.path;
      plan.resumed = std::move(r.checkpoint);
    }
  } else {
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
            fmt::format("kdp::train: '{}' is at step {} but the checkpoint directory '{}' holds "
                        "a newer checkpoint of this run ('{}', step {}); resuming from the "
                        "older one there would mix two histories.",
                        o.resume, c.state.global_step, o.checkpoint_dir, existing.back(), newest),
            "",
            fmt::format("Set resume = \"auto\" to continue from the newest, or {} for the "
                        "resumed run.",
                        kOtherDirectory));
      }
    }
    plan.resume_path = o.resume;
    plan.resumed = std::move(c);
  }
  if (dir) dir->claim();
  return plan;
}

}  // namespace kdp::train
