#include <algorithm>
#include <cstdint>
#include <vector>

#include "allreduce.hpp"
#include "kernels/native/bf16.hpp"

namespace kdp::dist::algorithms {

using kdp::detail::from_bf16;
using kdp::detail::to_bf16_host;

void combine(float* into, const float* from, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      for (size_t i = 0; i < n; ++i) into[i] += from[i];
      return;
    case ReduceOp::Max:
      for (size_t i = 0; i < n; ++i) into[i] = std::max(into[i], from[i]);
      return;
    case ReduceOp::Min:
      for (size_t i = 0; i < n; ++i) into[i] = std::min(into[i], from[i]);
      return;
  }
}

namespace {

// The p segments of `count` elements, whose lengths differ by one at most.
struct Segments {
  size_t count;
  size_t p;
  size_t begin(int k) const { return count * static_cast<size_t>(k) / p; }
  size_t length(int k) const { return begin(k + 1) - begin(k); }
};

// The segments rank r sends and receives in step s of the ring's first half
// (reduce-scatter: each step adds the received partial sums to r's own),
// after which r holds segment (r + 1) mod p complete, and of its second half
// (allgather: each step passes on a completed segment).
int scatter_send(int p, int r, int s) {
  return (r - s + p) % p;
}
int scatter_recv(int p, int r, int s) {
  return (r - s - 1 + p) % p;
}
int gather_send(int p, int r, int s) {
  return (r + 1 - s + p) % p;
}
int gather_recv(int p, int r, int s) {
  return (r - s + p) % p;
}

}  // namespace

// p - 1 steps of reduce-scatter, each rank passing a partial result of one
// segment to its right neighbour, then p - 1 steps of passing the completed
// segments on. With `bf16` every message carries bfloat16 values (half the
// bytes); a segment is rounded to bfloat16 once complete, so that every rank
// holds the same result, and what each rounding took goes to `residual`
// (AllreduceRoute::residual), to which the data is first added.
void ring(detail::Backend& transport, detail::Group group, float* x, size_t count, ReduceOp op,
          bool bf16, float* residual) {
  const int p = transport.size(group), r = transport.rank(group);
  if (p <= 1) return;  // one rank, or not a member of the group
  if (!bf16) residual = nullptr;
  if (residual != nullptr) {
    for (size_t i = 0; i < count; ++i) {
      x[i] += residual[i];
      residual[i] = 0.0f;
    }
  }
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const Segments seg{count, static_cast<size_t>(p)};
  const size_t largest = seg.length(p - 1) + 1;
  std::vector<float> in(largest);
  std::vector<uint16_t> out16(bf16 ? largest : 0), in16(bf16 ? largest : 0);

  // Segment `send` to the right, segment `recv` from the left into `in`;
  // with `keep_errors`, the rounding of what is sent goes to the residual.
  const auto exchange = [&](int send, int recv, int tag, bool keep_errors) {
    const size_t ns = seg.length(send), nr = seg.length(recv);
    const float* src = x + seg.begin(send);
    if (!bf16) {
      transport.sendrecv(src, ns * sizeof(float), right, in.data(), nr * sizeof(float), left, tag,
                         group);
      return;
    }
    to_bf16_host(src, out16.data(), static_cast<int64_t>(ns));
    if (residual != nullptr && keep_errors) {
      float* res = residual + seg.begin(send);
      for (size_t i = 0; i < ns; ++i) res[i] += src[i] - from_bf16(out16[i]);
    }
    transport.sendrecv(out16.data(), ns * sizeof(uint16_t), right, in16.data(),
                       nr * sizeof(uint16_t), left, tag, group);
    for (size_t i = 0; i < nr; ++i) in[i] = from_bf16(in16[i]);
  };
  for (int s = 0; s < p - 1; ++s) {
    const int send = scatter_send(p, r, s), recv = scatter_recv(p, r, s);
    exchange(send, recv, s, true);
    combine(x + seg.begin(recv), in.data(), seg.length(recv), op);
  }
  // This rank's segment (r + 1) % p is complete.
  if (bf16) {
    const int mine = (r + 1) % p;
    float* own = x + seg.begin(mine);
    for (size_t i = 0; i < seg.length(mine); ++i) {
      const float rounded = kdp::detail::round_to_bf16(own[i]);
      if (residual != nullptr) residual[seg.begin(mine) + i] += own[i] - rounded;
      own[i] = rounded;
    }
  }
  for (int s = 0; s < p - 1; ++s) {
    const int send = gather_send(p, r, s), recv = gather_recv(p, r, s);
    exchange(send, recv, p + s, false);  // bfloat16 values already
    std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(seg.length(recv)),
              x + seg.begin(recv));
  }
}

Part reduce_scatter(detail::Backend& transport, detail::Group group, double* x, size_t count) {
  const int p = transport.size(group), r = transport.rank(group);
  if (p <= 1) return {0, count};
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const Segments seg{count, static_cast<size_t>(p)};
  std::vector<double> in(seg.length(p - 1) + 1);
  for (int s = 0; s < p - 1; ++s) {
    const int send = scatter_send(p, r, s), recv = scatter_recv(p, r, s);
    const size_t nr = seg.length(recv);
    transport.sendrecv(x + seg.begin(send), seg.length(send) * sizeof(double), right, in.data(),
                       nr * sizeof(double), left, s, group);
    double* into = x + seg.begin(recv);
    for (size_t i = 0; i < nr; ++i) into[i] += in[i];
  }
  return ring_part(p, r, count);
}

Part ring_part(int ranks, int rank, size_t count) {
  if (ranks <= 1) return {0, count};
  const Segments seg{count, static_cast<size_t>(ranks)};
  const int mine = (rank + 1) % ranks;
  return {seg.begin(mine), seg.length(mine)};
}

void allgather_parts(detail::Backend& transport, detail::Group group, float* x, size_t count) {
  const int p = transport.size(group), r = transport.rank(group);
  if (p <= 1) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const Segments seg{count, static_cast<size_t>(p)};
  for (int s = 0; s < p - 1; ++s) {
    const int send = gather_send(p, r, s), recv = gather_recv(p, r, s);
    transport.sendrecv(x + seg.begin(send), seg.length(send) * sizeof(float), right,
                       x + seg.begin(recv), seg.length(recv) * sizeof(float), left, p + s, group);
  }
}

}  // namespace kdp::dist::algorithms
