#pragma once
/// \file
/// Embedding with PyTorch's arguments (num_embeddings, embedding_dim,
/// padding_idx) and parameter `weight` [num_embeddings, embedding_dim], drawn
/// from N(0, 1) with the padding row zeroed, as torch.nn.Embedding.

#include <cstdint>
#include <optional>

#include "kdp/nn/module.hpp"

namespace kdp::nn {

/// Looks up rows of its weight by token id (kdp::embedding): ids of any
/// shape in, ids.shape + [embedding_dim] out.
class Embedding : public Module {
 public:
  /// Throws ShapeError for a size below 1 and ValueError for a padding_idx
  /// outside [-num_embeddings, num_embeddings).
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt,
            const Device& device = get_default_device());

  Tensor forward(const Tensor& ids) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  /// The padding row, counted from the start (none: every row trains).
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  const Tensor& weight() const { return weight_; }

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;
  Tensor weight_;
};

}  // namespace kdp::nn
