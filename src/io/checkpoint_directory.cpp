#include "kdp/io/checkpoint_directory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kdp/core/error.hpp"
#include "kdp/io/atomic_file.hpp"

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

}  // namespace

CheckpointDirectory::CheckpointDirectory(std::string dir, int keep_last, RunConfig config)
    : dir_(std::move(dir)), keep_last_(keep_last), config_(std::move(config)) {
  if (keep_last < 1) {
    throw ValueError(fmt::format("kdp::io::CheckpointDirectory: keep_last {} < 1", keep_last));
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) {
    throw IOError(fmt::format("kdp::io: cannot create checkpoint directory '{}': {}", dir_,
                              ec ? ec.message() : "not a directory"));
  }
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
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in) throw IOError(fmt::format("kdp::io: cannot read '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
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
  AtomicFile target(config_path());
  {
    std::ofstream out(target.temp_path(), std::ios::trunc);
    out << run_config_to_json(config_);
    out.flush();
    if (!out) throw IOError(fmt::format("kdp::io: cannot write '{}'", target.temp_path()));
  }
  target.commit();
}

void CheckpointDirectory::discard() const {
  std::vector<std::string> files = list();
  files.push_back(best_path());
  files.push_back(config_path());
  for (const std::string& path : files) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) throw IOError(fmt::format("kdp::io: cannot remove '{}': {}", path, ec.message()));
  }
  fsync_directory(dir_);
}

std::string CheckpointDirectory::reject(const std::string& path) const {
  std::error_code ec;
  fs::create_directories(rejected_dir(), ec);
  if (ec) {
    throw IOError(fmt::format("kdp::io: cannot create '{}': {}", rejected_dir(), ec.message()));
  }
  const fs::path name = fs::path(path).filename();
  fs::path target = fs::path(rejected_dir()) / name;
  for (int n = 1; fs::exists(target); ++n) {
    target = fs::path(rejected_dir()) /
             fmt::format("{}.{}{}", name.stem().string(), n, name.extension().string());
  }
  fs::rename(path, target, ec);
  if (ec) {
    throw IOError(
        fmt::format("kdp::io: cannot move '{}' to '{}': {}", path, target.string(), ec.message()));
  }
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

std::string CheckpointDirectory::save(const nn::Module& model, const optim::Optimizer& optimizer,
                                      const TrainingState& state) {
  const std::string path = path_for(state.global_step);
  TrainingState recorded = state;
  recorded.run_config = config_;
  save_checkpoint(path, model, optimizer, recorded);
  std::vector<std::string> ours;
  for (const std::string& p : list()) {
    if (owns(p)) ours.push_back(p);
  }
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < ours.size(); ++i) fs::remove(ours[i]);
  return path;
}

bool CheckpointDirectory::save_best(const nn::Module& model, const optim::Optimizer& optimizer,
                                    const TrainingState& state, bool maximise) {
  const std::string path = best_path();
  if (fs::exists(path)) {
    CheckpointInfo existing;
    bool readable = true;
    try {
      existing = read_checkpoint_info(path);
    } catch (const Error&) {
      readable = false;
    }
    if (!readable) {
      reject(path);
    } else {
      if (!why_not_ours(existing, config_).empty()) return false;
      auto it = existing.state.values.find("best_metric");
      auto mine = state.values.find("best_metric");
      if (it != existing.state.values.end() && std::isfinite(it->second)) {
        if (mine == state.values.end() || !std::isfinite(mine->second)) return false;
        if (maximise ? mine->second <= it->second : mine->second >= it->second) return false;
      }
    }
  }
  TrainingState recorded = state;
  recorded.run_config = config_;
  save_checkpoint(path, model, optimizer, recorded);
  return true;
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
