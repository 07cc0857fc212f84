#include "kdp/train/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace kdp::train {

Progress::Progress(int bar, int64_t every, bool enabled)
    : enabled_(enabled),
      bar_(bar == 1 || (bar < 0 && ::isatty(STDOUT_FILENO) == 1)),
      every_(every > 0 ? every : 50) {}

void Progress::start_epoch(int64_t epoch, int64_t epochs, int64_t batches) {
  epoch_ = epoch;
  epochs_ = epochs;
  batches_ = batches;
  epoch_start_ = std::chrono::steady_clock::now();
}

bool Progress::shows(int64_t global_step, bool last_batch) const {
  if (!enabled_) return false;
  if (bar_) {
    return last_batch ||
           std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(250);
  }
  return global_step % every_ == 0;
}

void Progress::step(int64_t batch, int64_t global_step, double loss, double accuracy,
                    double samples_per_s) {
  if (!enabled_) return;
  const int64_t done = batch + 1;
  const std::string acc = std::isnan(accuracy) ? "" : fmt::format(" acc {:.4f}", accuracy);
  // A regression's loss may be far below 1: significant digits, not decimals.
  const std::string shown =
      std::isnan(accuracy) ? fmt::format("{:.4g}", loss) : fmt::format("{:.4f}", loss);
  if (bar_) {
    // Redrawn at most four times a second (and on the last batch).
    const auto now = std::chrono::steady_clock::now();
    if (done != batches_ && now - last_draw_ < std::chrono::milliseconds(250)) return;
    last_draw_ = now;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
    const double eta =
        done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(batches_ - done) : 0.0;
    const int width = 24;
    const int filled = batches_ > 0 ? static_cast<int>(width * done / batches_) : width;
    std::printf("\repoch %lld/%lld [%s%s] %lld/%lld loss %s%s %.0f samples/s ETA %ds   ",
                static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_),
                std::string(static_cast<size_t>(filled), '=').c_str(),
                std::string(static_cast<size_t>(width - filled), ' ').c_str(),
                static_cast<long long>(done), static_cast<long long>(batches_), shown.c_str(),
                acc.c_str(), samples_per_s, static_cast<int>(eta));
    std::fflush(stdout);
  } else if (global_step % every_ == 0) {
    std::printf("epoch %lld step %lld batch %lld/%lld loss %s%s %.0f samples/s\n",
                static_cast<long long>(epoch_ + 1), static_cast<long long>(global_step),
                static_cast<long long>(done), static_cast<long long>(batches_), shown.c_str(),
                acc.c_str(), samples_per_s);
    std::fflush(stdout);
  }
}

void Progress::end_epoch(const std::string& summary) {
  if (!enabled_) return;
  if (bar_) std::printf("\n");
  std::printf("%s\n", summary.c_str());
  std::fflush(stdout);
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace kdp::train
