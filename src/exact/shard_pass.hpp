#pragma once
// Reproducible mode's one pass over a rank's shards (docs/architecture.md
// "Reproducible mode"): for a model whose every sample's output row is
// computed from that sample's row alone, the rank's shards, their rows put
// shard after shard, go forward and back together as one batch, with
// products whose rows do not depend on the batch (row_gemm), and each linear
// layer hands its products to ExactGradient, which makes them over every
// rank's rows in the shards' order.

#include <map>
#include <vector>

#include "exact/exact_gradient.hpp"
#include "exact/shard_products.hpp"
#include "kdp/core/precision.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::exact {

/// Each parameter's index in `params` by its storage's owner, when the model
/// takes batches of `dims` dimensions one sample per row: it is made of
/// Sequential, Linear, ReLU, LeakyReLU, Dropout and Flatten (from dimension
/// 1 on) modules alone, exactly those types, its linear layers take 2-D
/// input, and every parameter is the weight or the bias of one of them, each
/// once. Otherwise empty: the shards go their separate ways.
std::map<const TensorImpl*, size_t> one_pass_parameters(nn::Module& model,
                                                        const optim::NamedParameters& params,
                                                        int dims);

/// Whether the one pass can run in `precision` here: on memory the host can
/// address, in fp32 (its products are row_gemm's) or, where row_gemm_bf16
/// runs on the CPU's bf16 dot products, in bf16 (else bf16's shards go one
/// by one, through the faster vendor products).
bool one_pass_precision(Precision precision);
/// The same on every rank of `comm`: true where every rank's is (ranks on
/// CPUs of different kinds must not choose different steps). Every rank calls
/// it together.
bool one_pass_precision(Precision precision, dist::Communicator& comm);

/// Where the backward of one pass hands its shards' products.
class ShardSlots : public ShardProducts {
 public:
  /// Rows [starts[t], starts[t + 1]) of the pass are shard ids[t]'s.
  ShardSlots(std::vector<int64_t> starts, std::vector<int> ids, ExactGradient& exact,
             const std::map<const TensorImpl*, size_t>& index);
  bool take_linear_gradients(const TensorImpl* weight, const TensorImpl* bias, const Tensor& dy,
                             const Tensor& x, Precision precision) override;
  /// Whether the backward handed the products of every parameter.
  bool all_written() const;

 private:
  std::vector<int> ids_;
  ExactGradient& exact_;
  const std::map<const TensorImpl*, size_t>& index_;
  std::vector<bool> written_;
};

}  // namespace kdp::exact
