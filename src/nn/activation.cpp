#include "kdp/nn/activation.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/ops/activation.hpp"

namespace kdp::nn {

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}
std::shared_ptr<Module> ReLU::clone() const {
  return std::make_shared<ReLU>();
}

Tensor LeakyReLU::forward(const Tensor& input) {
  return leaky_relu(input, negative_slope_);
}
std::shared_ptr<Module> LeakyReLU::clone() const {
  return std::make_shared<LeakyReLU>(negative_slope_);
}
std::string LeakyReLU::extra_repr() const {
  return fmt::format("negative_slope={}", negative_slope_);
}

Tensor Tanh::forward(const Tensor& input) {
  return kdp::tanh(input);
}
std::shared_ptr<Module> Tanh::clone() const {
  return std::make_shared<Tanh>();
}

Tensor Sigmoid::forward(const Tensor& input) {
  return sigmoid(input);
}
std::shared_ptr<Module> Sigmoid::clone() const {
  return std::make_shared<Sigmoid>();
}

GELU::GELU(std::string approximate) : Module("GELU"), approximate_(std::move(approximate)) {
  KDP_CHECK(approximate_ == "none" || approximate_ == "tanh", ValueError,
            "GELU: approximate='{}' is not one of 'none', 'tanh'", approximate_);
}
Tensor GELU::forward(const Tensor& input) {
  return gelu(input, approximate_);
}
std::shared_ptr<Module> GELU::clone() const {
  return std::make_shared<GELU>(approximate_);
}

Dropout::Dropout(float p) : Module("Dropout"), p_(p) {
  KDP_CHECK(p >= 0.0f && p <= 1.0f, ValueError, "probability {} is not in [0, 1]", p);
}
Tensor Dropout::forward(const Tensor& input) {
  return dropout(input, p_, is_training());
}
std::shared_ptr<Module> Dropout::clone() const {
  auto copy = std::make_shared<Dropout>(p_);
  copy->train(is_training());
  return copy;
}
std::string Dropout::extra_repr() const {
  return fmt::format("p={}", p_);
}

Dropout2d::Dropout2d(float p) : Module("Dropout2d"), p_(p) {
  KDP_CHECK(p >= 0.0f && p <= 1.0f, ValueError, "probability {} is not in [0, 1]", p);
}
Tensor Dropout2d::forward(const Tensor& input) {
  return dropout2d(input, p_, is_training());
}
std::shared_ptr<Module> Dropout2d::clone() const {
  auto copy = std::make_shared<Dropout2d>(p_);
  copy->train(is_training());
  return copy;
}
std::string Dropout2d::extra_repr() const {
  return fmt::format("p={}", p_);
}

Tensor Flatten::forward(const Tensor& input) {
  const Shape& s = input.shape();
  if (s.rank() == 0) return input.reshape({1});
  const int start = s.normalize_dim(start_dim_);
  const int end = s.normalize_dim(end_dim_);
  if (start > end) return input;
  std::vector<int64_t> dims;
  for (int d = 0; d < start; ++d) dims.push_back(s[d]);
  int64_t merged = 1;
  for (int d = start; d <= end; ++d) merged *= s[d];
  dims.push_back(merged);
  for (int d = end + 1; d < s.rank(); ++d) dims.push_back(s[d]);
  return input.reshape(dims);
}
std::shared_ptr<Module> Flatten::clone() const {
  return std::make_shared<Flatten>(start_dim_, end_dim_);
}
std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_dim_, end_dim_);
}

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "leaky_relu") return std::make_shared<LeakyReLU>();
  if (name == "tanh") return std::make_shared<Tanh>();
  if (name == "sigmoid") return std::make_shared<Sigmoid>();
  if (name == "gelu") return std::make_shared<GELU>();
  KDP_FAIL(ValueError, "unknown activation '{}' (relu, leaky_relu, tanh, sigmoid, gelu)", name);
}

}  // namespace kdp::nn
