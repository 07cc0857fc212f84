#pragma once
/// \file
/// Elementary kernels on flat views, shared by the layers above core. Each runs
/// on the given device's instance.

#include <cstdint>

#include "kdp/core/tensor.hpp"

namespace kdp::detail {

void fill(const Device& device, View1 out, float value);
void fill_randn(const Device& device, View1 out, uint64_t seed, uint64_t base);
void fill_rand(const Device& device, View1 out, uint64_t seed, uint64_t base, float low,
               float high);
void fill_arange(const Device& device, View1 out);
/// y += alpha * x
void axpy(const Device& device, View1 y, float alpha, ConstView1 x);
/// y *= alpha
void scale(const Device& device, View1 y, float alpha);
/// out = a + b
void add(const Device& device, View1 out, ConstView1 a, ConstView1 b);
void copy(const Device& device, View1 dst, ConstView1 src);

}  // namespace kdp::detail
