#include "exact_gradient.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.hpp"
#include "core/host_kernels.hpp"
#include "core/parallel_for.hpp"
#include "dist/exact_sum.hpp"
#include "kdp/core/trace.hpp"

namespace kdp::train::detail {

ExactGradient::ExactGradient(const optim::NamedParameters& params, dist::Communicator& comm,
                             const Device& device)
    : params_(params), comm_(comm), device_(device), largest_(params.size(), 0u) {
  for (const auto& [name, p] : params_) {
    offset_.push_back(total_);
    total_ += p.numel();
  }
  sum_ = Kokkos::View<double*, MemSpace>("kdp::reproducible exact sums", total_);
}

void ExactGradient::grow_to(int shards) {
  if (static_cast<int64_t>(kept_.extent(0)) >= shards) return;
  if (kept_.extent(0) == 0) {
    kept_ = decltype(kept_)("kdp::reproducible shard gradients", shards, total_);
  } else {
    Kokkos::resize(kept_, shards, total_);
  }
}

namespace {

constexpr int64_t kChunk = 16384;

// |x|'s bits: ordered as the magnitudes are, NaN and Inf above every finite one.
KOKKOS_INLINE_FUNCTION uint32_t magnitude_bits(float x) {
  uint32_t b = 0;
  memcpy(&b, &x, sizeof(b));
  return b & 0x7fffffffu;
}

// row = g, and the largest magnitude's bits into *largest.
KDP_ALWAYS_INLINE void keep_body(const float* __restrict g, float* __restrict row, int64_t len,
                                 uint32_t* largest) {
  uint32_t m = 0;
  for (int64_t i = 0; i < len; ++i) {
    row[i] = g[i];
    const uint32_t b = magnitude_bits(g[i]);
    m = b > m ? b : m;
  }
  *largest = m;
}
KDP_HOST_KERNEL(keep, keep_body,
                (const float* __restrict g, float* __restrict row, int64_t len, uint32_t* largest),
                (g, row, len, largest))

// *largest = the larger of itself and the largest magnitude's bits in x.
KDP_ALWAYS_INLINE void largest_body(const float* __restrict x, int64_t len, uint32_t* largest) {
  uint32_t m = *largest;
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t b = magnitude_bits(x[i]);
    m = b > m ? b : m;
  }
  *largest = m;
}
KDP_HOST_KERNEL(largest, largest_body, (const float* __restrict x, int64_t len, uint32_t* largest),
                (x, len, largest))

// sum = the shards' values rounded to the grid that `magic` sets (see reduce),
// added in double: without rounding, so in any order.
KDP_ALWAYS_INLINE void round_sum_body(const float* __restrict kept, int64_t stride, int count,
                                      double* __restrict sum, int64_t len, double magic) {
  for (int64_t i = 0; i < len; ++i) sum[i] = 0.0;
  for (int s = 0; s < count; ++s) {
    const float* k = kept + s * stride;
    for (int64_t i = 0; i < len; ++i) sum[i] += (static_cast<double>(k[i]) + magic) - magic;
  }
}
KDP_HOST_KERNEL(round_sum, round_sum_body,
                (const float* __restrict kept, int64_t stride, int count, double* __restrict sum,
                 int64_t len, double magic),
                (kept, stride, count, sum, len, magic))

}  // namespace

// Copies each gradient into the shard's row and keeps the largest magnitude
// (a NaN or Inf counts as larger than any number, so that reduce names it).
void ExactGradient::keep_shard() {
  std::vector<Tensor> grads;
  for (const auto& [name, p] : params_) grads.push_back(p.grad());
  keep_shard(grads);
}

void ExactGradient::keep_shard(const std::vector<Tensor>& grads) {
  grow_to(count_ + 1);
  const auto row = Kokkos::subview(kept_, count_, Kokkos::ALL);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = grads.at(i);
    const int64_t offset = offset_[i], n = params_[i].second.numel();
    if (!g.defined()) {
      Kokkos::deep_copy(Kokkos::subview(row, std::make_pair(offset, offset + n)), 0.0f);
      continue;
    }
    ConstView1 v = g.cflat();
    uint32_t largest = 0;
    if constexpr (compat::launches_are_synchronous()) {
      std::vector<uint32_t> chunks(static_cast<size_t>((n + kChunk - 1) / kChunk));
      uint32_t* c = chunks.data();
      kdp::detail::host_chunks("kdp::reproducible keep shard", device_, n, kChunk,
                               [=](int64_t b, int64_t e) {
                                 keep(v.data() + b, row.data() + offset + b, e - b, c + b / kChunk);
                               });
      for (uint32_t m : chunks) largest = std::max(largest, m);
    } else {
      Kokkos::parallel_reduce(
          "kdp::reproducible keep shard", kdp::detail::range(device_, n),
          KOKKOS_LAMBDA(const int64_t e, uint32_t& m) {
            row(offset + e) = v(e);
            const uint32_t b = magnitude_bits(v(e));
            m = b > m ? b : m;
          },
          Kokkos::Max<uint32_t>(largest));
    }
    largest_[i] = std::max(largest_[i], largest);
  }
  ++count_;
}

void ExactGradient::begin_shards(int count) {
  grow_to(count_ + count);
}

float* ExactGradient::slot(size_t param, int shard) {
  return kept_.data() + (count_ + shard) * total_ + offset_.at(param);
}

void ExactGradient::note_largest(size_t param, int shard) {
  const float* row = slot(param, shard);
  const int64_t n = params_.at(param).second.numel();
  std::vector<uint32_t> chunks(static_cast<size_t>((n + kChunk - 1) / kChunk), 0u);
  uint32_t* c = chunks.data();
  kdp::detail::host_chunks("kdp::reproducible largest", device_, n, kChunk,
                           [=](int64_t b, int64_t e) { largest(row + b, e - b, c + b / kChunk); });
  for (uint32_t m : chunks) largest_[param] = std::max(largest_[param], m);
}

void ExactGradient::end_shards(int count) {
  count_ += count;
}

// sum_ = the exact sum of every rank's kept shards.
void ExactGradient::sum_shards(int shards) {
  const size_t n = params_.size();
  // Each parameter's grid: 2^q, from the largest magnitude over every shard of
  // every rank (a max is exact), with |sum of all shards| < 2^(q + 51): every
  // partial sum of values on the grid is then a double without rounding.
  std::vector<int64_t> bits(largest_.begin(), largest_.end());
  comm_.allreduce(bits.data(), n, dist::ReduceOp::Max);
  const auto kept = kept_;
  const auto sum = sum_;
  const int count = count_;
  for (size_t i = 0; i < n; ++i) {
    const auto magnitude = static_cast<uint32_t>(bits[i]);
    KDP_CHECK(magnitude < 0x7f800000u, NumericalError,
              "the gradient of '{}' holds NaN or Inf on some rank", params_[i].first);
    float largest = 0.0f;
    memcpy(&largest, &magnitude, sizeof(largest));
    const double magic = std::ldexp(1.5, dist::detail::grid_exponent(largest, shards));
    const int64_t offset = offset_[i], len = params_[i].second.numel();
    if constexpr (compat::launches_are_synchronous()) {
      const int64_t stride = total_;
      kdp::detail::host_chunks("kdp::reproducible round and sum", device_, len, kChunk,
                               [=](int64_t b, int64_t e) {
                                 round_sum(kept.data() + offset + b, stride, count,
                                           sum.data() + offset + b, e - b, magic);
                               });
    } else {
      Kokkos::parallel_for(
          "kdp::reproducible round and sum", kdp::detail::range(device_, len),
          KOKKOS_LAMBDA(const int64_t e) {
            double a = 0.0;
            for (int s = 0; s < count; ++s) {
              a += (static_cast<double>(kept(s, offset + e)) + magic) - magic;
            }
            sum(offset + e) = a;
          });
    }
  }
  device_.fence("kdp::reproducible sums");
  auto host = Kokkos::create_mirror_view(sum_);
  Kokkos::deep_copy(host, sum_);
  {
    trace::Region region("kdp::train::exact_sum allreduce", "comm");
    comm_.allreduce(host.data(), static_cast<size_t>(total_), dist::ReduceOp::Sum);
  }
  Kokkos::deep_copy(sum_, host);
  std::fill(largest_.begin(), largest_.end(), 0u);
  count_ = 0;
}

void ExactGradient::reduce(int shards, bool last) {
  sum_shards(shards);
  const auto sum = sum_;
  if (!last || micro_ > 0) {
    if (step_.extent(0) == 0) step_ = decltype(step_)("kdp::reproducible step sums", total_);
    const auto step = step_;
    const bool first = micro_ == 0;
    Kokkos::parallel_for(
        "kdp::reproducible accumulate", kdp::detail::range(device_, total_),
        KOKKOS_LAMBDA(const int64_t e) { step(e) = first ? sum(e) : step(e) + sum(e); });
    ++micro_;
    if (!last) return;
  }
  const auto from = micro_ > 0 ? step_ : sum_;
  micro_ = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    Tensor g = Tensor::empty(p.shape(), p.device());
    View1 out = g.flat();
    const int64_t offset = offset_[i];
    Kokkos::parallel_for(
        "kdp::reproducible gradient", kdp::detail::range(device_, p.numel()),
        KOKKOS_LAMBDA(const int64_t e) { out(e) = static_cast<float>(from(offset + e)); });
    p.set_grad(g);
  }
}

Tensor strided_rows(const Tensor& x, int64_t first, int64_t step, int64_t count) {
  const int64_t row = x.size(0) == 0 ? 0 : x.numel() / x.size(0);
  Tensor out = Tensor::empty(x.shape().with(0, count), x.device());
  ConstView2 in = x.cmatrix(x.size(0), row);
  View2 to = out.matrix(count, row);
  kdp::detail::for_each_2d(
      "kdp::reproducible shard rows", x.device(), count, row,
      KOKKOS_LAMBDA(const int64_t r, const int64_t c) { to(r, c) = in(first + r * step, c); });
  return out;
}

std::vector<ShardRows> shard_rows(int64_t rows, int rank, int ranks, int shards) {
  std::vector<ShardRows> out(static_cast<size_t>(shards));
  const int64_t step = shards / ranks;
  for (int64_t l0 = 0; l0 < std::min<int64_t>(step, rows); ++l0) {
    ShardRows& s = out[static_cast<size_t>((rank + l0 * ranks) % shards)];
    s.first = l0;
    s.step = step;
    s.count = (rows - l0 + step - 1) / step;
  }
  return out;
}

}  // namespace kdp::train::detail
