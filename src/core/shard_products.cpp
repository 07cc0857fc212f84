#include "core/shard_products.hpp"

#include <utility>

namespace kdp::detail {

namespace {
thread_local ShardProducts* innermost = nullptr;
}

ShardProducts::ShardProducts(std::vector<int64_t> starts, int threads)
    : starts_(std::move(starts)), threads_(threads), outer_(innermost) {
  if (starts_.empty()) starts_.push_back(0);
  innermost = this;
}

ShardProducts::~ShardProducts() {
  innermost = outer_;
}

ShardProducts* ShardProducts::active() {
  return innermost;
}

}  // namespace kdp::detail
