#include "kdp/dist/gradient_bucket.hpp"

namespace kdp::dist {

namespace {
int64_t total(const std::vector<GradientBucket::Slot>& slots) {
  int64_t n = 0;
  for (const auto& s : slots) n += s.shape.numel();
  return n;
}
}  // namespace

GradientBucket::GradientBucket(size_t index, std::vector<Slot> slots, const Device& device)
    : index_(index),
      slots_(std::move(slots)),
      buffer_(
          Tensor::empty_labeled({total(slots_)}, device, "kdp::DistributedDataParallel::bucket")) {
  buffer_.zero_();
  reset();
}

Tensor GradientBucket::view(size_t k) const {
  return alias(buffer_, slots_[k].offset, slots_[k].shape, buffer_.device());
}

}  // namespace kdp::dist
