#include "kdp/io/checkpoint_directory.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/regular_file.hpp"
#include "kdp/io/atomic_file.hpp"
#include "kdp/io/output_file.hpp"
#include "kdp/io/run_directory_error.hpp"

namespace kdp::io {

namespace fs = std::filesystem;

namespace {

// "" when nothing differs, else the differences in one line.
std::string describe_differences(const std::vector<SettingDifference>& differences) {
  if (differences.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& d : differences) {
    parts.push_back(fmt::format("{} is {} here but {} there", d.name, d.ours, d.recorded));
  }
  return fmt::format("written by another run configuration ({})", fmt::join(parts, "; "));
}

std::string why_not_ours(const CheckpointInfo& info, const RunConfig& ours) {
  return describe_differences(compare_run_configs(ours, info.config, info.recorded_partially));
}

// The writer's pid in a temporary file's name ".<file>.tmp.<pid>.<n>", or -1.
long temporary_writer(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (name.empty() || name[0] != '.' || tmp == std::string::npos) return -1;
  const std::string rest = name.substr(tmp + 5);  // "<pid>.<n>"
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == rest.size()) return -1;
  const auto digits = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1)) || dot > 9) return -1;
  return std::stol(rest.substr(0, dot));
}

bool process_runs(long pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

CheckpointDirectory::CheckpointDirectory(std::string dir, int keep_last, RunConfig config)
    : dir_(std::move(dir)), keep_last_(keep_last), config_(std::move(config)) {
  KDP_CHECK(keep_last >= 1, ValueError, "keep_last {} < 1", keep_last);
  // A file where the directory belongs is named for what it is (a dataset?).
  KDP_CHECK(!path_exists(dir_) || fs::is_directory(dir_), IOError,
            "cannot use '{}' as the checkpoint directory: it is {}, not a directory", dir_,
            describe_path(dir_));
  std::error_code ec;
  fs::create_directories(dir_, ec);
  KDP_CHECK(!ec && fs::is_directory(dir_), IOError,
            "cannot create the checkpoint directory '{}': {}", dir_,
            ec ? describe_file_error(ec.value()) : "it is not a directory");
}

std::string CheckpointDirectory::path_for(int64_t global_step) const {
  return (fs::path(dir_) / fmt::format("ckpt-{:09d}.h5", global_step)).string();
}

std::string CheckpointDirectory::best_path() const {
  return (fs::path(dir_) / "best.h5").string();
}

std::string CheckpointDirectory::config_path() const {
  return (fs::path(dir_) / "run.json").string();
}

std::string CheckpointDirectory::rejected_dir() const {
  return (fs::path(dir_) / "rejected").string();
}

std::string CheckpointDirectory::lock_path() const {
  return (fs::path(dir_) / ".kdp-run.lock").string();
}

FileLock CheckpointDirectory::lock(bool require) const {
  // A read-only directory (or file system) is named as such, before any file.
  KDP_CHECK(::access(dir_.c_str(), W_OK) == 0, IOError,
            "cannot write in the checkpoint directory '{}': {}", dir_, describe_file_error(errno));
  FileLock lock = FileLock::try_acquire(lock_path());
  if (lock.busy()) {  // RunDirectoryError carries its reason for kdp-train: thrown as it is
    std::string owner = FileLock::owner(lock_path());
    if (owner.empty()) owner = FileLock::holder(lock_path());
    throw RunDirectoryError(
        RunDirectoryError::Reason::InUse,
        fmt::format("the checkpoint directory '{}' is in use by another run ({})", dir_,
                    owner.empty() ? "a process kdp cannot name holds its lock" : owner),
        "", "Wait for that run to end, or use another checkpoint directory.");
  }
  if (lock.unsupported() && require) {
    throw RunDirectoryError(
        RunDirectoryError::Reason::CannotLock,
        fmt::format("cannot lock the checkpoint directory '{}': its file system has "
                    "no working locks ({}), so nothing would keep a second run from writing the "
                    "same checkpoints",
                    dir_, lock.reason()),
        "",
        "Use a directory on a file system with locks (Lustre mounted with -o flock, NFS with a "
        "lock manager), or run without locks if you make sure that one run at a time uses it.");
  }
  if (lock.held()) {
    lock.record_owner();
    lock.remove_when_released(true);
  }
  return lock;
}

CheckpointDirectory::Removed CheckpointDirectory::remove_orphaned_temporaries() const {
  Removed removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const long pid = temporary_writer(entry.path().filename().string());
    if (pid <= 0 || !entry.is_regular_file() || process_runs(pid)) continue;
    const uint64_t bytes = entry.file_size(ec);
    if (fs::remove(entry.path(), ec) && !ec) {
      removed.files += 1;
      removed.bytes += bytes;
    }
  }
  if (removed.files > 0) fsync_directory(dir_);
  return removed;
}

std::vector<std::string> CheckpointDirectory::list() const {
  // ckpt-<digits>.h5
  auto is_checkpoint = [](const std::string& name) {
    const std::string head = "ckpt-", tail = ".h5";
    if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
      return false;
    }
    return std::all_of(name.begin() + static_cast<long>(head.size()),
                       name.end() - static_cast<long>(tail.size()),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.is_regular_file() && is_checkpoint(entry.path().filename().string())) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());  // zero-padded steps sort by name
  return out;
}

std::optional<RunConfig> CheckpointDirectory::recorded_config() const {
  const std::string path = config_path();
  if (!path_exists(path)) return std::nullopt;
  require_regular_file(path, "kdp::io", "the run configuration ");
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  KDP_CHECK(in, IOError, "cannot read the run configuration '{}': {}", path,
            describe_file_error(errno));
  return run_config_from_json(text.str(), path);
}

std::optional<CheckpointDirectory::Conflict> CheckpointDirectory::find_conflict() const {
  if (const auto recorded = recorded_config()) {
    auto differences = compare_run_configs(config_, *recorded);
    if (!differences.empty()) return Conflict{config_path(), std::move(differences)};
  }
  std::vector<std::string> files = list();
  if (fs::exists(best_path())) files.push_back(best_path());
  for (const std::string& path : files) {
    CheckpointInfo info;
    try {
      info = read_checkpoint_info(path);
    } catch (const Error&) {
      continue;
    }
    auto differences = compare_run_configs(config_, info.config, info.recorded_partially);
    if (!differences.empty()) return Conflict{path, std::move(differences)};
  }
  return std::nullopt;
}

void CheckpointDirectory::claim() const {
  if (recorded_config()) return;
  write_file_atomically(config_path(), run_config_to_json(config_));
}

std::vector<std::pair<std::string, std::string>> CheckpointDirectory::discard() const {
  std::vector<std::pair<std::string, std::string>> kept;
  std::vector<std::string> files = list();
  if (path_exists(best_path())) files.push_back(best_path());
  std::vector<std::string> doomed;
  for (const std::string& path : files) {
    std::string why;
    if (is_checkpoint_file(path, &why)) {
      doomed.push_back(path);
    } else {
      kept.emplace_back(path, why);
    }
  }
  if (path_exists(config_path())) {
    try {
      recorded_config();
      doomed.push_back(config_path());
    } catch (const Error& e) {
      kept.emplace_back(config_path(), e.what());
    }
  }
  for (const std::string& path : doomed) {
    std::error_code ec;
    fs::remove(path, ec);
    KDP_CHECK(!ec, IOError, "cannot remove '{}': {}", path, ec.message());
  }
  fsync_directory(dir_);
  return kept;
}

std::string CheckpointDirectory::reject(const std::string& path) const {
  std::error_code ec;
  fs::create_directories(rejected_dir(), ec);
  KDP_CHECK(!ec, IOError, "cannot create '{}': {}", rejected_dir(), ec.message());
  const fs::path name = fs::path(path).filename();
  fs::path target = fs::path(rejected_dir()) / name;
  for (int n = 1; fs::exists(target); ++n) {
    target = fs::path(rejected_dir()) /
             fmt::format("{}.{}{}", name.stem().string(), n, name.extension().string());
  }
  fs::rename(path, target, ec);
  KDP_CHECK(!ec, IOError, "cannot move '{}' to '{}': {}", path, target.string(), ec.message());
  fsync_directory(rejected_dir());
  fsync_directory(dir_);
  return target.string();
}

bool CheckpointDirectory::owns(const std::string& path) const {
  try {
    return why_not_ours(read_checkpoint_info(path), config_).empty();
  } catch (const Error&) {
    return false;
  }
}

std::string CheckpointDirectory::prepare_save(const TrainingState& state,
                                              TrainingState& recorded) const {
  const std::string path = path_for(state.global_step);
  // Never replace a file that is not a checkpoint: keep it where a person finds it.
  if (path_exists(path) && !is_checkpoint_file(path)) reject(path);
  recorded = state;
  recorded.run_config = config_;
  return path;
}

void CheckpointDirectory::apply_keep_last() const {
  std::vector<std::string> ours;
  for (const std::string& p : list()) {
    if (owns(p)) ours.push_back(p);
  }
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < ours.size(); ++i) fs::remove(ours[i]);
}

std::string CheckpointDirectory::save(const nn::Module& model, const optim::Optimizer& optimizer,
                                      const TrainingState& state) {
  TrainingState recorded;
  const std::string path = prepare_save(state, recorded);
  save_checkpoint(path, model, optimizer, recorded);
  apply_keep_last();
  return path;
}

bool CheckpointDirectory::best_improves(const TrainingState& state, bool maximise) const {
  const std::string path = best_path();
  if (!fs::exists(path)) return true;
  CheckpointInfo existing;
  try {
    existing = read_checkpoint_info(path);
  } catch (const Error&) {
    reject(path);
    return true;
  }
  if (!why_not_ours(existing, config_).empty()) return false;
  auto it = existing.state.values.find("best_metric");
  auto mine = state.values.find("best_metric");
  if (it != existing.state.values.end() && std::isfinite(it->second)) {
    if (mine == state.values.end() || !std::isfinite(mine->second)) return false;
    if (maximise ? mine->second <= it->second : mine->second >= it->second) return false;
  }
  return true;
}

bool CheckpointDirectory::save_best(const nn::Module& model, const optim::Optimizer& optimizer,
                                    const TrainingState& state, bool maximise) {
  if (!best_improves(state, maximise)) return false;
  TrainingState recorded = state;
  recorded.run_config = config_;
  save_checkpoint(best_path(), model, optimizer, recorded);
  return true;
}

SlicedCheckpoint CheckpointDirectory::begin_save(const nn::Module& model,
                                                 const optim::Optimizer& optimizer,
                                                 const optim::OptimizerState& layout,
                                                 const TrainingState& state) {
  TrainingState recorded;
  const std::string path = prepare_save(state, recorded);
  return SlicedCheckpoint(path, model, optimizer, layout, recorded);
}

std::optional<SlicedCheckpoint> CheckpointDirectory::begin_save_best(
    const nn::Module& model, const optim::Optimizer& optimizer, const optim::OptimizerState& layout,
    const TrainingState& state, bool maximise) {
  if (!best_improves(state, maximise)) return std::nullopt;
  TrainingState recorded = state;
  recorded.run_config = config_;
  return SlicedCheckpoint(best_path(), model, optimizer, layout, recorded);
}

void CheckpointDirectory::finish_save(SlicedCheckpoint& checkpoint) {
  const bool step = checkpoint.path() != best_path();
  checkpoint.commit();
  if (step) apply_keep_last();
}

CheckpointDirectory::Resumable CheckpointDirectory::newest_resumable(
    const nn::Module& model, const optim::Optimizer& optimizer) const {
  Resumable r;
  const std::vector<std::string> all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      Checkpoint c = read_checkpoint(*it);
      std::vector<std::string> problems = checkpoint_mismatches(c, model, optimizer);
      if (problems.empty()) {
        // Parameters and optimizer were compared tensor by tensor above.
        const std::string why =
            describe_differences(checkpoint_differences(config_, c.state.run_config));
        if (!why.empty()) problems.push_back(why);
      }
      if (problems.empty()) {
        r.path = *it;
        r.checkpoint = std::move(c);
        return r;
      }
      r.unusable.emplace_back(
          *it, fmt::format("it does not fit this run: {}", fmt::join(problems, "; ")));
    } catch (const Error& e) {
      r.unusable.emplace_back(*it, e.what());
    }
  }
  return r;
}

}  // namespace kdp::io
