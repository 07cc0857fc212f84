#pragma once
/// \file
/// Progress: what training prints on rank 0. On a terminal, a bar redrawn in
/// place (epoch, step, loss, accuracy, samples/s, ETA); otherwise plain lines
/// every `every` steps, which batch logs can read.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kdp::train {

/// What training prints on rank 0.
class Progress {
 public:
  /// `bar`: 1 always, 0 never, -1 when stdout is a terminal.
  Progress(int bar, int64_t every, bool enabled);
  void start_epoch(int64_t epoch, int64_t epochs, int64_t batches);
  /// Whether step() would print at `global_step` (the bar: a quarter second
  /// after its last draw, or the epoch's last batch): the loop reads the loss
  /// back from the device only then.
  bool shows(int64_t global_step, bool last_batch) const;
  void step(int64_t batch, int64_t global_step, double loss, double accuracy, double samples_per_s);
  void end_epoch(const std::string& summary);
  void message(const std::string& text);

 private:
  bool enabled_;
  bool bar_;
  int64_t every_;
  int64_t epoch_ = 0, epochs_ = 0, batches_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kdp::train
