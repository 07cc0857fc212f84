#pragma once
// What kdp's own tests ask of a training run through the environment, read in
// one place (and nowhere else in src/):
//
//   KDP_TEST_DELAY_RANK=RANK:SECONDS  slows that rank's forward passes: a
//                                     straggler on demand (tests of --trace)
//   KDP_TEST_SAMPLE_LOG=PATH          each rank appends "epoch step index" of
//                                     every sample it trains on to
//                                     PATH.RANK.PID (tests that count them)
//
// Unset, the seam does nothing.

#include <cstdint>
#include <string>
#include <vector>

namespace kdp::train::detail {

class TestSeam {
 public:
  TestSeam() = default;
  /// The hooks the environment asks for, as rank `rank` sees them.
  static TestSeam from_environment(int rank);

  /// Sleeps this rank's delay (none unless KDP_TEST_DELAY_RANK names it).
  void straggle() const;
  /// Appends the samples `indices`, trained on at 1-based `step` of 0-based
  /// `epoch`, to this rank's sample log (if there is one).
  void log_samples(int64_t epoch, int64_t step, const std::vector<int64_t>& indices) const;

 private:
  double delay_s_ = 0.0;
  std::string sample_log_;
};

}  // namespace kdp::train::detail
