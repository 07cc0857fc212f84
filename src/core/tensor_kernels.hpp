#pragma once
/// \file
/// Elementary kernels on flat views, shared by the layers above core. Each runs
/// on the given device's instance.

#include <cstdint>

#include "core/parallel_for.hpp"
#include "kdp/core/tensor.hpp"

namespace kdp::detail {

/// A double in device memory, the target of reductions that stay on the device.
using DeviceDouble = Kokkos::View<double, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// out(0) = scale * the sum of term(i) for i < n, accumulated in double on the
/// device. The result stays in device memory: nothing waits for the kernel and
/// nothing crosses to the host (a reduction into a host scalar would do both).
template <class Term>
void sum_into(const char* label, const Device& device, View1 out, int64_t n, double scale,
              const Term& term) {
  if constexpr (compat::launches_are_synchronous()) {
    // A short sum on a host backend: one work item adds in order (a reduction
    // costs more to set up than a few thousand additions).
    if (n <= 4096) {
      Kokkos::parallel_for(
          label, range(device, 1), KOKKOS_LAMBDA(const int64_t) {
            double a = 0.0;
            for (int64_t i = 0; i < n; ++i) a += term(i);
            out(0) = static_cast<float>(a * scale);
          });
      return;
    }
  }
  const Tensor scratch = Tensor::empty(Shape{2}, device);  // 8 bytes: one double
  const DeviceDouble acc(reinterpret_cast<double*>(scratch.data()));
  Kokkos::parallel_reduce(
      label, range(device, n), KOKKOS_LAMBDA(const int64_t i, double& a) { a += term(i); }, acc);
  Kokkos::parallel_for(
      label, range(device, 1),
      KOKKOS_LAMBDA(const int64_t) { out(0) = static_cast<float>(acc() * scale); });
}

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
