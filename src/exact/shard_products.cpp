#include "exact/shard_products.hpp"

#include <utility>

namespace kdp::exact {

ShardProducts::ShardProducts(std::vector<int64_t> starts, int threads)
    : starts_(std::move(starts)), threads_(threads), outer_(detail::product_policy()) {
  if (starts_.empty()) starts_.push_back(0);
  ExecutionContext::current().products = this;
}

ShardProducts::~ShardProducts() {
  ExecutionContext::current().products = outer_;
}

}  // namespace kdp::exact
