#include "exact/shard_pass.hpp"

#include <algorithm>
#include <typeinfo>

#include "kdp/core/kokkos_compat.hpp"
#include "kdp/exact/one_pass.hpp"
#include "kdp/nn/activation.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/sequential.hpp"
#include "kernels/native/row_gemm.hpp"

namespace kdp::exact {

namespace {

// Walks `m` in the order Sequential runs it, with the input's dimensions in
// `dims`; adds each linear layer's parameters to `owned`. False where a
// module may mix a batch's rows, or may not take them as samples.
bool rows_stay_samples(nn::Module& m, int& dims, std::vector<const TensorImpl*>& owned) {
  const std::type_info& type = typeid(m);
  if (type == typeid(nn::Sequential)) {
    for (const auto& [name, child] : m.named_children()) {
      if (!rows_stay_samples(*child, dims, owned)) return false;
    }
    return true;
  }
  if (type == typeid(nn::Linear)) {
    if (dims != 2) return false;
    const auto& linear = static_cast<const nn::Linear&>(m);
    owned.push_back(linear.weight().impl().get());
    if (linear.bias().defined()) owned.push_back(linear.bias().impl().get());
    return true;
  }
  if (type == typeid(nn::Flatten)) {
    const auto& flatten = static_cast<const nn::Flatten&>(m);
    if (flatten.start_dim() != 1 || flatten.end_dim() != -1 || dims < 2) return false;
    dims = 2;
    return true;
  }
  return type == typeid(nn::ReLU) || type == typeid(nn::LeakyReLU) || type == typeid(nn::Dropout);
}

}  // namespace

std::map<const TensorImpl*, size_t> one_pass_parameters(nn::Module& model,
                                                        const optim::NamedParameters& params,
                                                        int dims) {
  std::vector<const TensorImpl*> owned;
  if (!rows_stay_samples(model, dims, owned)) return {};
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index.emplace(params[i].second.impl().get(), i);
  std::vector<const TensorImpl*> sorted = owned;
  std::sort(sorted.begin(), sorted.end());
  const bool once = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (!once || owned.size() != params.size() || index.size() != params.size()) return {};
  for (const TensorImpl* p : owned) {
    if (index.count(p) == 0) return {};
  }
  return index;
}

bool one_pass_precision(Precision precision) {
  return compat::host_accessible_memory() &&
         (precision == Precision::fp32 ||
          (precision == Precision::bf16 && kdp::detail::row_gemm_bf16_fast()));
}

bool one_pass_precision(Precision precision, dist::Communicator& comm) {
  int64_t able = one_pass_precision(precision) ? 1 : 0;
  if (comm.size() > 1) comm.allreduce(&able, 1, dist::ReduceOp::Min);
  return able == 1;
}

}  // namespace kdp::exact

namespace kdp::train {

bool reproducible_in_one_pass(nn::Module& model, const optim::NamedParameters& params,
                              int input_dims, Precision precision) {
  return exact::one_pass_precision(precision) &&
         !exact::one_pass_parameters(model, params, input_dims).empty();
}

}  // namespace kdp::train

namespace kdp::exact {

ShardSlots::ShardSlots(std::vector<int64_t> starts, std::vector<int> ids, ExactGradient& exact,
                       const std::map<const TensorImpl*, size_t>& index)
    : ShardProducts(std::move(starts), exact.threads()),
      ids_(std::move(ids)),
      exact_(exact),
      index_(index),
      written_(index.size()) {
  exact_.use_one_pass();
}

bool ShardSlots::take_linear_gradients(const TensorImpl* weight, const TensorImpl* bias,
                                       const Tensor& dy, const Tensor& x, Precision precision) {
  // Each leaf's index, or npos where the leaf's gradient is not kept here.
  const auto find = [&](const TensorImpl* leaf) {
    const auto it = leaf == nullptr ? index_.end() : index_.find(leaf);
    if (it == index_.end()) return ExactGradient::npos;
    written_[it->second] = true;
    return it->second;
  };
  const size_t w = find(weight), b = find(bias);
  if (w == ExactGradient::npos && b == ExactGradient::npos) return false;
  exact_.defer(w, b, dy, x, precision, starts(), ids_);
  return true;
}

bool ShardSlots::all_written() const {
  return std::all_of(written_.begin(), written_.end(), [](bool w) { return w; });
}

}  // namespace kdp::exact
