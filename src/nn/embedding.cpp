#include "kdp/nn/embedding.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/init.hpp"
#include "kdp/ops/embedding.hpp"

namespace kdp::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_idx, const Device& device)
    : Module("Embedding"), num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  const std::string what = fmt::format("kdp::nn::Embedding({}, {})", num_embeddings, embedding_dim);
  KDP_CHECK(num_embeddings >= 1 && embedding_dim >= 1, ShapeError,
            "num_embeddings and embedding_dim must be at least 1");
  if (padding_idx) {
    KDP_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings, ValueError,
              "padding_idx {} is outside [{}, {})", *padding_idx, -num_embeddings, num_embeddings);
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  weight_ = register_parameter("weight", Tensor::empty_labeled({num_embeddings, embedding_dim},
                                                               device, "kdp::Embedding::weight"));
  NoGradGuard no_grad;
  init::normal_(weight_, 0.0f, 1.0f);
  if (padding_idx_) weight_.slice(0, *padding_idx_, *padding_idx_ + 1).zero_();
}

Tensor Embedding::forward(const Tensor& ids) {
  return embedding(ids, weight_, padding_idx_);
}

std::shared_ptr<Module> Embedding::clone() const {
  auto copy = std::make_shared<Embedding>(num_embeddings_, embedding_dim_, padding_idx_, device());
  copy_state_into(*copy);
  return copy;
}

std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}{}", num_embeddings_, embedding_dim_,
                     padding_idx_ ? fmt::format(", padding_idx={}", *padding_idx_) : "");
}

}  // namespace kdp::nn
