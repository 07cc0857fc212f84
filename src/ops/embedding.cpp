// embedding: a gather of rows forward; backward adds each id's gradient row
// into its weight row, one column a work item and the ids in order.

#include "kdp/ops/embedding.hpp"

#include <fmt/format.h>

#include <cmath>

#include "kdp/core/trace.hpp"
#include "op_util.hpp"

namespace kdp {

namespace ops_detail {

namespace {

// The first position of `ids` that is not a whole number in [0, rows), or -1.
int64_t first_bad_id(const Device& device, ConstView1 ids, int64_t rows) {
  const int64_t n = static_cast<int64_t>(ids.extent(0));
  int64_t first = n;  // (the reducer's identity replaces it)
  Kokkos::parallel_reduce(
      "kdp::embedding check ids", kdp::detail::range(device, n),
      KOKKOS_LAMBDA(const int64_t i, int64_t& m) {
        const float v = ids(i);
        // NaN fails every comparison, so it is bad too.
        const bool ok = v >= 0.0f && v < static_cast<float>(rows) &&
                        v == static_cast<float>(static_cast<int64_t>(v));
        if (!ok && i < m) m = i;
      },
      Kokkos::Min<int64_t>(first));
  return first >= n ? -1 : first;  // the reducer starts from int64_t's largest
}

void gather_rows(const Device& device, View1 out, ConstView1 ids, ConstView1 w, int64_t dim) {
  kdp::detail::for_each_2d(
      "kdp::embedding", device, static_cast<int64_t>(ids.extent(0)), dim,
      KOKKOS_LAMBDA(const int64_t i, const int64_t j) {
        out(i * dim + j) = w(static_cast<int64_t>(ids(i)) * dim + j);
      });
}

// gw[id, j] += g[i, j] for i in order, per column j; the padding row stays 0.
void scatter_add_rows(const Device& device, View1 gw, ConstView1 ids, ConstView1 g, int64_t dim,
                      int64_t padding) {
  const int64_t n = static_cast<int64_t>(ids.extent(0));
  Kokkos::parallel_for(
      "kdp::embedding backward", kdp::detail::range(device, dim), KOKKOS_LAMBDA(const int64_t j) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t row = static_cast<int64_t>(ids(i));
          if (row != padding) gw(row * dim + j) += g(i * dim + j);
        }
      });
}

class EmbeddingNode : public autograd::Node {
 public:
  EmbeddingNode(const Tensor& ids, const Tensor& weight, int64_t padding)
      : Node(weight.device()), ids_(ids), shape_(weight.shape()), padding_(padding) {}
  const char* name() const override { return "kdp::embedding"; }
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    const Tensor& ids = ids_.get(*this);
    Tensor gw = Tensor::zeros(shape_, device());
    scatter_add_rows(device(), gw.flat(), ids.cflat(), grads[0].cflat(), shape_[1], padding_);
    return {Tensor(), gw};
  }
  void release_saved() override { ids_.reset(); }

 private:
  autograd::SavedTensor ids_;
  Shape shape_;
  int64_t padding_;
};

}  // namespace

}  // namespace ops_detail

using namespace ops_detail;

Tensor embedding(const Tensor& ids_in, const Tensor& w_in, std::optional<int64_t> padding_idx) {
  trace::Region region("kdp::embedding");
  const char* op = "kdp::embedding";
  const Tensor& ids = resolve(ids_in);
  const Tensor& w = resolve(w_in);
  check_defined(op, ids, "ids");
  check_defined(op, w, "weight");
  KDP_CHECK(w.dim() == 2, ShapeError, "weight {} must be [num_embeddings, embedding_dim]",
            w.describe());
  KDP_CHECK(ids.dim() < Shape::kMaxRank, ShapeError,
            "ids {} leave no dimension for the embedding (at most {})", ids.shape().str(),
            Shape::kMaxRank - 1);
  check_same_device(op, ids, "ids", w, "weight");
  const int64_t rows = w.size(0), dim = w.size(1);
  int64_t padding = -1;
  if (padding_idx) {
    padding = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
    KDP_CHECK(padding >= 0 && padding < rows, ValueError,
              "padding_idx {} is not a row of weight {}", *padding_idx, w.shape().str());
  }
  const int64_t bad = first_bad_id(ids.device(), ids.cflat(), rows);
  if (bad >= 0) {
    float value = 0.0f;
    Kokkos::deep_copy(Kokkos::View<float, Kokkos::HostSpace>(&value),
                      Kokkos::subview(ids.cflat(), bad));
    std::vector<int64_t> where(static_cast<size_t>(ids.dim()));
    int64_t rest = bad;
    for (int d = ids.dim() - 1; d >= 0; --d) {
      where[static_cast<size_t>(d)] = rest % ids.size(d);
      rest /= ids.size(d);
    }
    KDP_FAIL(ValueError,
             "ids {} hold {} at [{}]: an id must be a whole number in [0, {}) (the rows of "
             "weight {})",
             ids.shape().str(), value, fmt::join(where, ", "), rows, w.describe());
  }
  std::vector<int64_t> dims = ids.shape().to_vector();
  dims.push_back(dim);
  Tensor out = Tensor::empty(Shape(dims), w.device());
  if (out.numel() > 0) gather_rows(w.device(), out.flat(), ids.cflat(), w.cflat(), dim);
  if (autograd::needs_grad({&w})) {
    auto node = std::make_shared<EmbeddingNode>(ids, w, padding);
    node->set_next_edges({&ids, &w});
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace kdp
