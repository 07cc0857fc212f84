#include "exact/exact_gradient.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "dist/algorithms/exact_sum.hpp"
#include "kdp/core/trace.hpp"
#include "kernels/fork_join.hpp"
#include "kernels/native/host_kernels.hpp"
#include "kernels/native/row_gemm.hpp"

namespace kdp::exact {

ExactGradient::ExactGradient(const optim::NamedParameters& params, dist::Communicator& comm,
                             const Device& device, int threads)
    : params_(params),
      comm_(comm),
      device_(device),
      threads_(threads),
      largest_(params.size(), 0u),
      input_bound_(params.size(), 0u),
      output_bound_(params.size(), 0u) {
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

Kokkos::pair<int64_t, int64_t> part_range(const dist::Part& part) {
  const auto begin = static_cast<int64_t>(part.begin);
  return {begin, begin + static_cast<int64_t>(part.length)};
}

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
      kdp::detail::host_blocks(device_, threads_, n, kChunk, [=](int64_t b, int64_t e) {
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

namespace {

// The bits of the largest |x| of `n` floats.
uint32_t largest_magnitude(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, magnitude_bits(x[i]));
  return m;
}

// The bits of the largest sum of |dy| over one shard's rows in one column of
// dy [rows, cols] (row length ld), and, where `sums` is given, each shard's
// sums of its rows in the rows' order from zero (shard t's gradient of a
// linear layer's bias, row t of sums, row length ld as well).
uint32_t shard_column_sums(const float* dy, int64_t cols, int64_t ld,
                           const std::vector<int64_t>& starts, float* sums) {
  std::vector<float> magnitudes(static_cast<size_t>(cols));
  uint32_t m = 0;
  for (size_t t = 0; t + 1 < starts.size(); ++t) {
    std::fill(magnitudes.begin(), magnitudes.end(), 0.0f);
    float* s = sums != nullptr ? sums + t * static_cast<size_t>(ld) : nullptr;
    if (s != nullptr) std::fill(s, s + cols, 0.0f);
    for (int64_t r = starts[t]; r < starts[t + 1]; ++r) {
      const float* row = dy + r * ld;
      if (s != nullptr) {
        for (int64_t c = 0; c < cols; ++c) s[c] += row[c];
      }
      for (int64_t c = 0; c < cols; ++c) magnitudes[static_cast<size_t>(c)] += std::fabs(row[c]);
    }
    m = std::max(m, largest_magnitude(magnitudes.data(), cols));
  }
  return m;
}

}  // namespace

void ExactGradient::defer(size_t weight, size_t bias, const Tensor& dy, const Tensor& x,
                          const std::vector<int64_t>& starts) {
  KDP_CHECK(compat::host_accessible_memory(), StateError,
            "reproducible mode's one pass needs host memory");
  const int64_t rows = starts.back(), out = rows == 0 ? 0 : dy.numel() / rows;
  std::vector<float> bias_sums;
  if (bias != npos) bias_sums.resize((starts.size() - 1) * static_cast<size_t>(out));
  // Columns in blocks over the rank's threads: each column's sums are the
  // same whichever block makes them.
  constexpr int64_t kColumns = 256;
  std::vector<uint32_t> bounds(static_cast<size_t>((out + kColumns - 1) / kColumns), 0u);
  {
    const float* d = dy.data();
    float* sums = bias_sums.empty() ? nullptr : bias_sums.data();
    uint32_t* bound = bounds.data();
    kdp::detail::host_blocks(device_, threads_, out, kColumns, [=](int64_t b, int64_t e) {
      bound[b / kColumns] =
          shard_column_sums(d + b, e - b, out, starts, sums == nullptr ? nullptr : sums + b);
    });
  }
  const uint32_t dy_bound = bounds.empty() ? 0u : *std::max_element(bounds.begin(), bounds.end());
  if (weight != npos) {
    input_bound_[weight] = std::max(input_bound_[weight], largest_magnitude(x.data(), x.numel()));
    output_bound_[weight] = std::max(output_bound_[weight], dy_bound);
  }
  if (bias != npos) {
    input_bound_[bias] = 0x3f800000u;  // 1.0f's bits: the bias's bound is dy's alone
    output_bound_[bias] = std::max(output_bound_[bias], dy_bound);
  }
  deferred_.push_back({weight, bias, dy, x, starts, std::move(bias_sums)});
}

// One deferred product's shards, made, rounded and summed into sum_ (added
// where `written` says sum_ holds this step's sums already).
void ExactGradient::make_deferred(const Deferred& d, const std::vector<double>& magic,
                                  std::vector<bool>& written) {
  const int64_t rows = d.starts.back(), out = rows == 0 ? 0 : d.dy.numel() / rows;
  const int shards = static_cast<int>(d.starts.size()) - 1;
  if (d.weight != npos) {
    const int64_t in = rows == 0 ? 0 : d.x.numel() / rows;
    const double m = magic[d.weight];
    const bool add = written[d.weight];
    double* sum = sum_.data() + offset_[d.weight];
    const float *dy = d.dy.data(), *x = d.x.data();
    const int64_t* starts = d.starts.data();
    // Rows of the weight's gradient in one block a thread (a multiple of the
    // kernel's 4-row tiles): each block packs x's rows anew.
    const int64_t workers = std::max(threads_, device_.concurrency());
    const int64_t block = ((out + workers - 1) / workers + 3) / 4 * 4;
    kdp::detail::host_blocks(device_, threads_, out, block, [=](int64_t b, int64_t e) {
      kdp::detail::row_gemm_shard_sums(true, false, e - b, in, starts, shards, dy + b, out, x, in,
                                       m, sum + b * in, in, add);
    });
    written[d.weight] = true;
  }
  if (d.bias != npos) {
    double* sum = sum_.data() + offset_[d.bias];
    const double m = magic[d.bias];
    if (!written[d.bias]) std::fill(sum, sum + out, 0.0);
    for (int t = 0; t < shards; ++t) {
      const float* s = d.bias_sums.data() + static_cast<size_t>(t) * static_cast<size_t>(out);
      for (int64_t c = 0; c < out; ++c) sum[c] += (static_cast<double>(s[c]) + m) - m;
    }
    written[d.bias] = true;
  }
}

// Each parameter's grid, as the magic number that rounds onto it: 2^q, from
// the largest magnitude over every kept shard of every rank (a max is exact)
// and the bounds of every deferred product, with |sum of all shards| <
// 2^(q + 51): every partial sum of values on the grid is then a double
// without rounding.
std::vector<double> ExactGradient::grids(int shards) {
  const size_t n = params_.size();
  std::vector<int64_t> bits(3 * n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = largest_[i];
    bits[n + i] = input_bound_[i];
    bits[2 * n + i] = output_bound_[i];
  }
  comm_.allreduce(bits.data(), bits.size(), dist::ReduceOp::Max);
  std::vector<double> magic(n);
  for (size_t i = 0; i < n; ++i) {
    float f[3];
    for (size_t k = 0; k < 3; ++k) {
      const auto b = static_cast<uint32_t>(bits[k * n + i]);
      KDP_CHECK(b < 0x7f800000u, NumericalError,
                "the gradient of '{}' holds NaN or Inf on some rank", params_[i].first);
      memcpy(&f[k], &b, sizeof(b));
    }
    const double bound = std::max<double>(f[0], double{f[1]} * double{f[2]});
    magic[i] = std::ldexp(1.5, dist::detail::grid_exponent(bound, shards));
  }
  return magic;
}

// sum_ = the exact sum of every rank's kept shards and deferred products.
void ExactGradient::sum_shards(int shards) {
  const size_t n = params_.size();
  const std::vector<double> magic = grids(shards);
  std::vector<bool> deferred(n, false), written(n, false);
  for (const Deferred& d : deferred_) {
    for (size_t i : {d.weight, d.bias}) {
      if (i != npos) deferred[i] = true;
    }
  }
  const auto kept = kept_;
  const auto sum = sum_;
  const int count = count_;
  for (size_t i = 0; i < n; ++i) {
    if (count == 0 && deferred[i]) continue;  // their products write sum_ first
    const double m = magic[i];
    const int64_t offset = offset_[i], len = params_[i].second.numel();
    if constexpr (compat::launches_are_synchronous()) {
      const int64_t stride = total_;
      kdp::detail::host_blocks(device_, threads_, len, kChunk, [=](int64_t b, int64_t e) {
        round_sum(kept.data() + offset + b, stride, count, sum.data() + offset + b, e - b, m);
      });
    } else {
      Kokkos::parallel_for(
          "kdp::reproducible round and sum", kdp::detail::range(device_, len),
          KOKKOS_LAMBDA(const int64_t e) {
            double a = 0.0;
            for (int s = 0; s < count; ++s) {
              a += (static_cast<double>(kept(s, offset + e)) + m) - m;
            }
            sum(offset + e) = a;
          });
    }
    written[i] = true;
  }
  for (const Deferred& d : deferred_) make_deferred(d, magic, written);
  deferred_.clear();
  device_.fence("kdp::reproducible sums");
  auto host = Kokkos::create_mirror_view(sum_);
  Kokkos::deep_copy(host, sum_);
  {
    trace::Region region("kdp::train::exact_sum reduce-scatter", "comm");
    part_ = comm_.reduce_scatter(host.data(), static_cast<size_t>(total_));
  }
  const auto mine = part_range(part_);
  Kokkos::deep_copy(Kokkos::subview(sum_, mine), Kokkos::subview(host, mine));
  std::fill(largest_.begin(), largest_.end(), 0u);
  std::fill(input_bound_.begin(), input_bound_.end(), 0u);
  std::fill(output_bound_.begin(), output_bound_.end(), 0u);
  count_ = 0;
}

// This rank's part of the sums (reduce_scatter's): the step's micro-batches
// are added there, and rounded to float there once.
void ExactGradient::reduce(int shards, bool last) {
  sum_shards(shards);
  const auto sum = sum_;
  const auto begin = static_cast<int64_t>(part_.begin), length = static_cast<int64_t>(part_.length);
  if (!last || micro_ > 0) {
    if (step_.extent(0) == 0) step_ = decltype(step_)("kdp::reproducible step sums", total_);
    const auto step = step_;
    const bool first = micro_ == 0;
    if constexpr (compat::launches_are_synchronous()) {
      double *to = step.data() + begin, *add = sum.data() + begin;
      kdp::detail::host_blocks(device_, threads_, length, kChunk, [=](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) to[k] = first ? add[k] : to[k] + add[k];
      });
    } else {
      Kokkos::parallel_for(
          "kdp::reproducible accumulate", kdp::detail::range(device_, length),
          KOKKOS_LAMBDA(const int64_t k) {
            const int64_t e = begin + k;
            step(e) = first ? sum(e) : step(e) + sum(e);
          });
    }
    ++micro_;
    if (!last) return;
  }
  const auto from = micro_ > 0 ? step_ : sum_;
  micro_ = 0;
  // The gradients are pieces of one fresh buffer, which the parts are
  // gathered into.
  Tensor all = Tensor::empty_labeled({total_}, device_, "kdp::reproducible gradients");
  const View1 rounded = all.flat();
  if constexpr (compat::launches_are_synchronous()) {
    const double* f = from.data() + begin;
    float* to = rounded.data() + begin;
    kdp::detail::host_blocks(device_, threads_, length, kChunk, [=](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) to[k] = static_cast<float>(f[k]);
    });
  } else {
    Kokkos::parallel_for(
        "kdp::reproducible round", kdp::detail::range(device_, length),
        KOKKOS_LAMBDA(const int64_t k) {
          rounded(begin + k) = static_cast<float>(from(begin + k));
        });
  }
  device_.fence("kdp::reproducible gradients");
  auto host = Kokkos::create_mirror_view(rounded);
  const auto mine = part_range(part_);
  Kokkos::deep_copy(Kokkos::subview(host, mine), Kokkos::subview(rounded, mine));
  {
    trace::Region region("kdp::train::exact_sum allgather", "comm");
    comm_.allgather_parts(host.data(), static_cast<size_t>(total_));
  }
  Kokkos::deep_copy(rounded, host);
  all.mark_written();
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i].second;
    p.set_grad(all.slice(0, offset_[i], offset_[i] + p.numel()).reshape(p.shape().to_vector()));
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
  for (int s = 0; s < shards; ++s) out[static_cast<size_t>(s)].shard = s;
  const int64_t step = shards / ranks;
  for (int64_t l0 = 0; l0 < std::min<int64_t>(step, rows); ++l0) {
    ShardRows& s = out[static_cast<size_t>((rank + l0 * ranks) % shards)];
    s.first = l0;
    s.step = step;
    s.count = (rows - l0 + step - 1) / step;
  }
  return out;
}

}  // namespace kdp::exact
