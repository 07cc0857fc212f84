#pragma once
/// \file
/// The transformer's modules with PyTorch's arguments, parameter names and
/// initialisation, so that a state_dict crosses both ways:
/// MultiheadAttention (in_proj_weight, in_proj_bias, out_proj.weight,
/// out_proj.bias), TransformerEncoderLayer (self_attn.*, linear1, linear2,
/// norm1, norm2) and TransformerEncoder (layers.{i}.*, and norm.* where given);
/// and two reference models built from them: a vision transformer
/// (VisionTransformer) and a small GPT (GPT).
/// Attention runs fused (kdp::scaled_dot_product_attention).

#include <cstdint>
#include <memory>
#include <string>

#include "kdp/nn/activation.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/embedding.hpp"
#include "kdp/nn/layer_norm.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/nn/sequential.hpp"

namespace kdp::nn {

/// torch.nn.MultiheadAttention for query, key and value of embed_dim
/// features (kdim = vdim = embed_dim): [T, B, E] in and out, or [B, T, E]
/// with batch_first (unbatched [T, E] too). in_proj_weight is
/// Xavier-uniform, the biases zero, out_proj a Linear's default. Attention
/// weights are not returned (need_weights=False): the fused kernel never
/// forms them.
class MultiheadAttention : public Module {
 public:
  /// Throws ShapeError where num_heads does not divide embed_dim.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout = 0.0f, bool bias = true,
                     bool batch_first = false, const Device& device = get_default_device());

  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override;
  using Module::forward;
  /// attn_mask: additive, [T, S] or [B * num_heads, T, S] as PyTorch's
  /// (-inf masks a key out); is_causal masks key j > query i.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& attn_mask = Tensor(), bool is_causal = false);
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  bool batch_first() const { return batch_first_; }
  const Tensor& in_proj_weight() const { return in_proj_weight_; }
  const Tensor& in_proj_bias() const { return in_proj_bias_; }
  const std::shared_ptr<Linear>& out_proj() const { return out_proj_; }

 private:
  int64_t embed_dim_, num_heads_;
  float dropout_;
  bool batch_first_;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

/// The options of a TransformerEncoderLayer (PyTorch's defaults).
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  float dropout = 0.1f;
  /// "relu" or "gelu" (exact); "gelu_tanh" for GELU's tanh form.
  std::string activation = "relu";
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
};

/// torch.nn.TransformerEncoderLayer: self-attention and a feed-forward block,
/// each with dropout and a residual connection, normalised after each
/// (norm_first = false) or before (norm_first = true).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                          TransformerEncoderLayerOptions options = {},
                          const Device& device = get_default_device());

  Tensor forward(const Tensor& src) override;
  using Module::forward;
  /// src_mask: additive, as MultiheadAttention's; is_causal masks the future.
  Tensor forward(const Tensor& src, const Tensor& src_mask, bool is_causal);
  std::shared_ptr<Module> clone() const override;

  /// The bytes of one layer's parameters, before any is allocated.
  static size_t parameter_bytes(int64_t d_model, int64_t dim_feedforward);

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerEncoderLayerOptions& options() const { return options_; }

 private:
  Tensor feed_forward(const Tensor& x);
  int64_t d_model_, nhead_;
  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<Module> activation_;
};

/// torch.nn.TransformerEncoder: num_layers copies of `layer` (each with its
/// own parameters, as `layers.{i}`), then `norm` where given.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);

  Tensor forward(const Tensor& src) override;
  using Module::forward;
  Tensor forward(const Tensor& src, const Tensor& mask, bool is_causal);
  std::shared_ptr<Module> clone() const override;

  int num_layers() const { return static_cast<int>(layers_->size()); }
  /// Layer i.
  TransformerEncoderLayer& layer(int i) const;

 private:
  TransformerEncoder() : Module("TransformerEncoder") {}
  std::shared_ptr<Sequential> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

/// The encoder of the reference models: `depth` TransformerEncoderLayer(dim,
/// heads, mlp, dropout, activation="gelu", batch_first=True,
/// norm_first=True).
std::shared_ptr<TransformerEncoder> pre_norm_encoder(int64_t dim, int64_t heads, int64_t mlp,
                                                     int64_t depth, float dropout,
                                                     const Device& device = get_default_device());

/// The sizes of a VisionTransformer (kdp-train's vit(patch, dim, depth,
/// heads, mlp)).
struct ViTOptions {
  int64_t patch = 4;
  int64_t dim = 64;
  int64_t depth = 6;
  int64_t heads = 4;
  int64_t mlp = 128;
  float dropout = 0.1f;
};

/// A vision transformer a PyTorch user rebuilds from this description and
/// loads kdp's state dict into: on images [N, C, H, W],
///   patch_embed  Conv2d(C, dim, kernel_size = stride = patch)
///   flattened to tokens [N, HW / patch^2, dim] (row by row of patches)
///   cls_token    [1, 1, dim], in front of the tokens
///   pos_embed    [1, 1 + HW / patch^2, dim], added
///   dropout      Dropout(dropout)
///   encoder      TransformerEncoder(TransformerEncoderLayer(dim, heads, mlp,
///                dropout, activation="gelu", batch_first=True,
///                norm_first=True), depth)
///   norm         LayerNorm(dim)
///   head         Linear(dim, classes), on the cls token.
/// cls_token and pos_embed are drawn from N(0, 0.02^2).
class VisionTransformer : public Module {
 public:
  /// `image` is [C, H, W]; a patch that does not tile H and W, or heads that
  /// do not divide dim, is a ShapeError naming the sizes.
  VisionTransformer(const Shape& image, int64_t classes, ViTOptions options = {},
                    const Device& device = get_default_device());

  Tensor forward(const Tensor& images) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;

  const Shape& image() const { return image_; }
  int64_t classes() const { return classes_; }
  const ViTOptions& options() const { return options_; }

 private:
  Shape image_;
  int64_t classes_;
  ViTOptions options_;
  Tensor cls_token_, pos_embed_;
  std::shared_ptr<Module> patch_embed_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<TransformerEncoder> encoder_;
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Linear> head_;
};

/// The sizes of a GPT (kdp-train's gpt(depth, heads, dim)).
struct GPTOptions {
  int64_t depth = 4;
  int64_t heads = 4;
  int64_t dim = 128;
  float dropout = 0.1f;
};

/// A small GPT a PyTorch user rebuilds from this description and loads kdp's
/// state dict into: on token ids [N, T] (T at most `context`), logits
/// [N, T, vocab] for the next token at each position,
///   tok_embed  Embedding(vocab, dim)
///   pos_embed  [1, context, dim], its first T rows added
///   dropout    Dropout(dropout)
///   encoder    TransformerEncoder(TransformerEncoderLayer(dim, heads,
///              4 dim, dropout, activation="gelu", batch_first=True,
///              norm_first=True), depth), with the causal mask (a query sees
///              itself and the keys before it)
///   norm       LayerNorm(dim)
///   head       Linear(dim, vocab, bias=False) whose weight is
///              tok_embed.weight: one parameter, tied. named_parameters()
///              lists it once (as tok_embed.weight), state_dict() under both
///              names, as PyTorch's do.
/// pos_embed and tok_embed.weight are drawn from N(0, 0.02^2).
class GPT : public Module {
 public:
  /// Heads that do not divide dim are a ShapeError naming the sizes.
  GPT(int64_t vocab, int64_t context, GPTOptions options = {},
      const Device& device = get_default_device());

  /// A sequence longer than the context, or ids not [N, T], is a ShapeError
  /// naming the shape; an id outside [0, vocab) a ValueError naming its
  /// position (kdp::embedding).
  Tensor forward(const Tensor& ids) override;
  using Module::forward;
  std::shared_ptr<Module> clone() const override;

  /// `tokens` ids that follow `prompt`, one at a time: each drawn from the
  /// softmax of the last position's logits over `temperature` (0: the most
  /// likely id), with the model in eval mode on the last `context` ids. The
  /// draws come from a stream of `seed` alone: the same model, prompt,
  /// temperature and seed give the same ids. An empty prompt, ids outside
  /// the vocabulary or a negative temperature are a ValueError.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t tokens,
                                double temperature = 1.0, uint64_t seed = 0);

  int64_t vocab() const { return vocab_; }
  int64_t context() const { return context_; }
  const GPTOptions& options() const { return options_; }

 private:
  int64_t vocab_, context_;
  GPTOptions options_;
  Tensor pos_embed_;
  std::shared_ptr<Embedding> tok_embed_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<TransformerEncoder> encoder_;
  std::shared_ptr<LayerNorm> norm_;
  std::shared_ptr<Module> head_;
};

}  // namespace kdp::nn
