#pragma once
/// \file
/// Parameter initialisation, in place, from the tensor's device generator.
/// Formulas follow torch.nn.init.

#include <string>

#include "kdp/core/tensor.hpp"

namespace kdp::nn::init {

/// fan_in and fan_out of a weight [out, in, ...].
std::pair<int64_t, int64_t> fans(const Tensor& weight);
void uniform_(Tensor& t, float low, float high);
void normal_(Tensor& t, float mean, float stddev);
void zeros_(Tensor& t);
void ones_(Tensor& t);
/// gain * sqrt(3 / fan) bound, gain = sqrt(2 / (1 + a^2)) for leaky ReLU slope a;
/// `mode` is "fan_in" or "fan_out".
void kaiming_uniform_(Tensor& t, float a = 0.0f, const std::string& mode = "fan_in");
/// gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t, float gain = 1.0f);

}  // namespace kdp::nn::init
