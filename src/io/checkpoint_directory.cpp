#include "kdp/io/checkpoint_directory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "kdp/core/error.hpp"

namespace kdp::io {

namespace fs = std::filesystem;

CheckpointDirectory::CheckpointDirectory(std::string dir, int keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {
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

std::vector<std::string> CheckpointDirectory::list() const {
  static const std::regex pattern(R"(ckpt-(\d+)\.h5)");
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), pattern)) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());  // zero-padded steps sort by name
  return out;
}

std::string CheckpointDirectory::save(const nn::Module& model, const optim::Optimizer& optimizer,
                                      const TrainingState& state) {
  const std::string path = path_for(state.global_step);
  save_checkpoint(path, model, optimizer, state);
  std::vector<std::string> all = list();
  while (static_cast<int>(all.size()) > keep_last_) {
    fs::remove(all.front());
    all.erase(all.begin());
  }
  return path;
}

void CheckpointDirectory::save_best(const nn::Module& model, const optim::Optimizer& optimizer,
                                    const TrainingState& state) {
  save_checkpoint(best_path(), model, optimizer, state);
}

std::optional<CheckpointDirectory::Loaded> CheckpointDirectory::load_newest(
    nn::Module& model, optim::Optimizer& optimizer, std::vector<std::string>* skipped) const {
  std::vector<std::string> all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      TrainingState state = load_checkpoint(*it, model, optimizer);
      return Loaded{*it, state};
    } catch (const Error& e) {
      if (skipped != nullptr) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace kdp::io
