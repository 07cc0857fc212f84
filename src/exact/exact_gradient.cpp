#include "exact/exact_gradient.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

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
      largest_(params.size(), 0u) {
  for (const auto& [name, p] : params_) {
    offset_.push_back(total_);
    total_ += p.numel();
  }
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

}  // namespace

void ExactGradient::defer(size_t weight, size_t bias, const Tensor& dy, const Tensor& x,
                          Precision precision, const std::vector<int64_t>& starts,
                          const std::vector<int>& ids) {
  if constexpr (!compat::host_accessible_memory()) {
    (void)weight, (void)bias, (void)dy, (void)x, (void)precision;
    KDP_FAIL(StateError, "reproducible mode's one pass needs host memory");
  } else {
    KDP_CHECK(ids.size() + 1 == starts.size(), ValueError,
              "reproducible mode: {} shard ids for {} shards", ids.size(), starts.size() - 1);
    KDP_CHECK(one_pass_, StateError, "reproducible mode: products deferred outside a one pass");
    deferred_.push_back({weight, bias, dy, x, precision, starts, ids});
  }
}

constexpr size_t kNone = ExactGradient::npos;

// Shard `id`'s rows of one parameter pair's dy (row length out) and x (row
// length in), from this rank or another.
struct ShardPiece {
  int id;
  int64_t rows;
  const float *dy, *x;
};

// A linear layer's weight and bias (either kNone), the precision of its
// weight's product, and its rows from every rank.
struct PairRows {
  size_t weight = kNone, bias = kNone;
  int64_t out = 0, in = 0;
  Precision precision = Precision::fp32;
  std::vector<ShardPiece> pieces;
};
using Pairs = std::map<std::pair<size_t, size_t>, PairRows>;

namespace {

void add_piece(Pairs& pairs, size_t weight, size_t bias, int64_t out, int64_t in,
               Precision precision, ShardPiece piece) {
  PairRows& p = pairs[{weight, bias}];
  p.weight = weight;
  p.bias = bias;
  p.out = out;
  p.in = in;
  p.precision = precision;
  p.pieces.push_back(piece);
}

// A deferred product's rows as every rank sends them: a header of int64s
// (weight, bias, out, in, precision, shards, then each shard's id and rows)
// after its length, then dy's rows, then x's.
void append_payload(std::vector<char>& out, size_t weight, size_t bias, int64_t cols_out,
                    int64_t cols_in, Precision precision, const std::vector<int64_t>& starts,
                    const std::vector<int>& ids, const float* dy, const float* x) {
  const auto shards = static_cast<int64_t>(ids.size());
  std::vector<int64_t> head{static_cast<int64_t>(weight),
                            static_cast<int64_t>(bias),
                            cols_out,
                            cols_in,
                            static_cast<int64_t>(precision),
                            shards};
  for (int64_t t = 0; t < shards; ++t) {
    head.push_back(ids[static_cast<size_t>(t)]);
    head.push_back(starts[static_cast<size_t>(t) + 1] - starts[static_cast<size_t>(t)]);
  }
  const int64_t rows = starts.back() - starts.front();
  const auto put = [&out](const void* p, size_t bytes) {
    const auto* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + bytes);
  };
  const auto count = static_cast<int64_t>(head.size());
  put(&count, sizeof(count));
  put(head.data(), head.size() * sizeof(int64_t));
  put(dy + starts.front() * cols_out, static_cast<size_t>(rows * cols_out) * sizeof(float));
  put(x + starts.front() * cols_in, static_cast<size_t>(rows * cols_in) * sizeof(float));
}

// The pieces of one rank's payload (append_payload's), pointing into it.
void read_payload(const std::vector<char>& bytes, Pairs& pairs) {
  size_t at = 0;
  const auto take = [&](size_t b) {
    KDP_CHECK(at + b <= bytes.size(), StateError,
              "reproducible mode: a rank's rows of the one pass end early");
    const char* p = bytes.data() + at;
    at += b;
    return p;
  };
  while (at < bytes.size()) {
    int64_t count = 0;
    memcpy(&count, take(sizeof(count)), sizeof(count));
    std::vector<int64_t> head(static_cast<size_t>(count));
    memcpy(head.data(), take(head.size() * sizeof(int64_t)), head.size() * sizeof(int64_t));
    const auto weight = static_cast<size_t>(head[0]), bias = static_cast<size_t>(head[1]);
    const int64_t out = head[2], in = head[3], shards = head[5];
    const auto precision = static_cast<Precision>(head[4]);
    int64_t rows = 0;
    for (int64_t t = 0; t < shards; ++t) rows += head[static_cast<size_t>(7 + 2 * t)];
    const auto* dy =
        reinterpret_cast<const float*>(take(static_cast<size_t>(rows * out) * sizeof(float)));
    const auto* x =
        reinterpret_cast<const float*>(take(static_cast<size_t>(rows * in) * sizeof(float)));
    for (int64_t t = 0, r = 0; t < shards; ++t) {
      const auto id = static_cast<int>(head[static_cast<size_t>(6 + 2 * t)]);
      const int64_t k = head[static_cast<size_t>(7 + 2 * t)];
      add_piece(pairs, weight, bias, out, in, precision, {id, k, dy + r * out, x + r * in});
      r += k;
    }
  }
}

// A pair's rows in the order of their shards' ids, as one matrix each of dy
// and x: the pieces themselves where they follow one another in memory (a
// rank's own pass), else copies in `dy_all` and `x_all`.
struct RowsInOrder {
  const float *dy, *x;
  int64_t rows;
};
RowsInOrder rows_in_order(PairRows& p, std::vector<float>& dy_all, std::vector<float>& x_all) {
  std::sort(p.pieces.begin(), p.pieces.end(),
            [](const ShardPiece& a, const ShardPiece& b) { return a.id < b.id; });
  const int64_t out = p.out, in = p.in;
  bool adjacent = true;
  int64_t rows = 0;
  for (size_t t = 0; t < p.pieces.size(); ++t) {
    const ShardPiece& piece = p.pieces[t];
    if (t > 0) {
      const ShardPiece& before = p.pieces[t - 1];
      KDP_CHECK(piece.id != before.id, StateError,
                "reproducible mode: shard {} came twice in one step's products", piece.id);
      adjacent = adjacent && piece.dy == before.dy + before.rows * out &&
                 piece.x == before.x + before.rows * in;
    }
    rows += piece.rows;
  }
  if (adjacent) return {p.pieces.front().dy, p.pieces.front().x, rows};
  dy_all.resize(static_cast<size_t>(rows * out));
  x_all.resize(static_cast<size_t>(rows * in));
  int64_t r = 0;
  for (const ShardPiece& piece : p.pieces) {
    std::copy(piece.dy, piece.dy + piece.rows * out, dy_all.data() + r * out);
    std::copy(piece.x, piece.x + piece.rows * in, x_all.data() + r * in);
    r += piece.rows;
  }
  return {dy_all.data(), x_all.data(), rows};
}

}  // namespace

// Every parameter pair's rows, from this rank alone or (more than one rank)
// from every rank by one allgather into `received`, which the pieces point
// into.
std::map<std::pair<size_t, size_t>, PairRows> ExactGradient::deferred_rows(
    std::vector<std::vector<char>>& received) const {
  Pairs pairs;
  if (comm_.size() == 1) {
    for (const Deferred& d : deferred_) {
      const int64_t rows = d.starts.back(), out = rows == 0 ? 0 : d.dy.numel() / rows;
      const int64_t in = rows == 0 ? 0 : d.x.numel() / rows;
      for (size_t t = 0; t + 1 < d.starts.size(); ++t) {
        add_piece(pairs, d.weight, d.bias, out, in, d.precision,
                  {d.ids[t], d.starts[t + 1] - d.starts[t], d.dy.data() + d.starts[t] * out,
                   d.x.data() + d.starts[t] * in});
      }
    }
    return pairs;
  }
  std::vector<char> mine;
  for (const Deferred& d : deferred_) {
    const int64_t rows = d.starts.back(), out = rows == 0 ? 0 : d.dy.numel() / rows;
    const int64_t in = rows == 0 ? 0 : d.x.numel() / rows;
    append_payload(mine, d.weight, d.bias, out, in, d.precision, d.starts, d.ids, d.dy.data(),
                   d.x.data());
  }
  {
    trace::Region region("kdp::train::exact_sum allgather rows", "comm");
    received = comm_.allgather_bytes(mine.data(), mine.size());
  }
  for (const std::vector<char>& bytes : received) read_payload(bytes, pairs);
  return pairs;
}

// The rows of weight `w`'s gradient [out, in] that hold elements of this
// rank's part: dy's columns times x's over `rows` rows (row_gemm, or
// row_gemm_bf16 in bf16), over the rank's threads, into `grad` (whole rows:
// the others' elements in them are the values their owners make); the
// largest magnitude's bits.
uint32_t ExactGradient::weight_part(size_t w, int64_t out, int64_t in, const float* dy,
                                    const float* x, int64_t rows, Precision precision,
                                    float* grad) const {
  const auto mine = part_range(part_);
  const int64_t offset = offset_[w];
  const int64_t first = std::max(mine.first, offset),
                last = std::min(mine.second, offset + out * in);
  if (first >= last) return 0u;
  const int64_t r0 = (first - offset) / in, r1 = (last - offset + in - 1) / in;
  const int64_t workers = std::max(threads_, device_.concurrency());
  const int64_t block = std::max<int64_t>(12, ((r1 - r0 + workers - 1) / workers + 11) / 12 * 12);
  std::vector<uint32_t> blocks(static_cast<size_t>((r1 - r0 + block - 1) / block), 0u);
  uint32_t* m = blocks.data();
  float* to = grad + offset + r0 * in;
  const auto product =
      precision == Precision::bf16 ? kdp::detail::row_gemm_bf16 : kdp::detail::row_gemm;
  kdp::detail::host_blocks(device_, threads_, r1 - r0, block, [=](int64_t b, int64_t e) {
    product(true, false, e - b, in, rows, 1.0f, dy + r0 + b, out, x, in, 0.0f, to + b * in, in);
    m[b / block] = largest_magnitude(to + b * in, (e - b) * in);
  });
  return *std::max_element(blocks.begin(), blocks.end());
}

// This rank's part of bias `b`'s gradient: dy's columns summed over `rows`
// rows in their order, into `grad`; the largest magnitude's bits.
uint32_t ExactGradient::bias_part(size_t b, int64_t out, const float* dy, int64_t rows,
                                  float* grad) const {
  const auto mine = part_range(part_);
  const int64_t offset = offset_[b];
  const int64_t first = std::max(mine.first, offset), last = std::min(mine.second, offset + out);
  if (first >= last) return 0u;
  float* sums = grad + first;
  std::fill(sums, grad + last, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * out + (first - offset);
    for (int64_t c = 0; c < last - first; ++c) sums[c] += row[c];
  }
  return largest_magnitude(sums, last - first);
}

// This rank's part (part_) of every deferred product, into `grad` (a flat
// buffer of every parameter's gradient), from every rank's rows of each
// parameter pair in the order of their shards' ids. A NaN or an Inf in any
// rank's part stops every rank.
void ExactGradient::make_deferred(float* grad) {
  std::vector<std::vector<char>> received;
  Pairs pairs = deferred_rows(received);
  std::vector<int64_t> largest(params_.size(), 0);
  std::vector<float> dy_all, x_all;
  for (auto& [key, p] : pairs) {
    const RowsInOrder r = rows_in_order(p, dy_all, x_all);
    if (p.weight != npos) {
      largest[p.weight] = weight_part(p.weight, p.out, p.in, r.dy, r.x, r.rows, p.precision, grad);
    }
    if (p.bias != npos) largest[p.bias] = bias_part(p.bias, p.out, r.dy, r.rows, grad);
  }
  deferred_.clear();
  comm_.allreduce(largest.data(), largest.size(), dist::ReduceOp::Max);
  for (size_t i = 0; i < params_.size(); ++i) {
    KDP_CHECK(largest[i] < 0x7f800000, NumericalError,
              "the gradient of '{}' holds NaN or Inf on some rank", params_[i].first);
  }
}

// Each parameter's grid, as the magic number that rounds onto it: 2^q, from
// the largest magnitude over every kept shard of every rank (a max is exact),
// with |sum of all shards| < 2^(q + 51): every partial sum of values on the
// grid is then a double without rounding.
std::vector<double> ExactGradient::grids(int shards) {
  const size_t n = params_.size();
  std::vector<int64_t> bits(largest_.begin(), largest_.end());
  comm_.allreduce(bits.data(), bits.size(), dist::ReduceOp::Max);
  std::vector<double> magic(n);
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<uint32_t>(bits[i]);
    KDP_CHECK(b < 0x7f800000u, NumericalError, "the gradient of '{}' holds NaN or Inf on some rank",
              params_[i].first);
    float largest = 0.0f;
    memcpy(&largest, &b, sizeof(b));
    magic[i] = std::ldexp(1.5, dist::detail::grid_exponent(largest, shards));
  }
  return magic;
}

// sum_ = the exact sum of every rank's kept shards (made on the first call:
// the one pass never needs it).
void ExactGradient::sum_shards(int shards) {
  if (sum_.extent(0) == 0 && total_ > 0) {
    sum_ = Kokkos::View<double*, MemSpace>("kdp::reproducible exact sums", total_);
  }
  const size_t n = params_.size();
  const std::vector<double> magic = grids(shards);
  const auto kept = kept_;
  const auto sum = sum_;
  const int count = count_;
  for (size_t i = 0; i < n; ++i) {
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
  }
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
  count_ = 0;
}

// The one pass's part of the gradients into `grad` (make_deferred), added to
// the step's earlier micro-batches' in their order (in doubles, rounded once
// after the last). False until the step's last micro-batch.
bool ExactGradient::one_pass_part(float* grad, bool last) {
  KDP_CHECK(count_ == 0, StateError,
            "reproducible mode: shards kept apart and a one pass's products in one step");
  part_ = comm_.part(static_cast<size_t>(total_));
  make_deferred(grad);
  if (last && micro_ == 0) return true;
  if (step_.extent(0) == 0) step_ = decltype(step_)("kdp::reproducible step sums", total_);
  const auto begin = static_cast<int64_t>(part_.begin), length = static_cast<int64_t>(part_.length);
  double* to = step_.data() + begin;
  float* from = grad + begin;
  const bool first = micro_ == 0;
  kdp::detail::host_blocks(device_, threads_, length, kChunk, [=](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) to[k] = first ? from[k] : to[k] + from[k];
    if (last) {
      for (int64_t k = b; k < e; ++k) from[k] = static_cast<float>(to[k]);
    }
  });
  ++micro_;
  if (!last) return false;
  micro_ = 0;
  return true;
}

// The exact sum's part of the gradients into `rounded`, added to the step's
// earlier micro-batches' in their order. False until the step's last one.
bool ExactGradient::exact_part(int shards, bool last, const View1& rounded) {
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
    if (!last) return false;
  }
  const auto from = micro_ > 0 ? step_ : sum_;
  micro_ = 0;
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
  return true;
}

// This rank's part of the gradients (the exact sums' or the one pass's), then
// every rank's parts to every rank.
void ExactGradient::reduce(int shards, bool last) {
  // The gradients are pieces of one fresh buffer, which the parts are
  // gathered into.
  Tensor all = Tensor::empty_labeled({total_}, device_, "kdp::reproducible gradients");
  const View1 rounded = all.flat();
  if (one_pass_) {
    if (!one_pass_part(rounded.data(), last)) return;
  } else {
    if (!exact_part(shards, last, rounded)) return;
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
