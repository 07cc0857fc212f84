#pragma once
/// \file
/// GradientBucket: the gradients of several parameters in one contiguous
/// buffer, reduced across ranks with one non-blocking allreduce. Parameters'
/// .grad() are views into it, so nothing is copied after the reduction.

#include <chrono>
#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/dist/communicator.hpp"

namespace kdp::dist {

/// Several parameters' gradients in one buffer, reduced together.
class GradientBucket {
 public:
  /// Where one parameter's gradient lies in the bucket.
  struct Slot {
    size_t parameter;  // index into the DDP's parameter list
    int64_t offset;    // in floats, into the buffer
    Shape shape;
  };

  GradientBucket(size_t index, std::vector<Slot> slots, const Device& device);

  size_t index() const { return index_; }
  const std::vector<Slot>& slots() const { return slots_; }
  Tensor& buffer() { return buffer_; }
  int64_t numel() const { return buffer_.numel(); }
  /// The view of slot `k` (a parameter's gradient).
  Tensor view(size_t k) const;

  /// Bookkeeping of one backward pass.
  int pending = 0;  // parameters whose gradient is not final yet
  bool launched = false;
  std::chrono::steady_clock::time_point ready_at;  // when its last gradient was final
  Request request;

  void reset() {
    pending = static_cast<int>(slots_.size());
    launched = false;
    request = Request();
  }

 private:
  size_t index_;
  std::vector<Slot> slots_;
  Tensor buffer_;
};

}  // namespace kdp::dist
