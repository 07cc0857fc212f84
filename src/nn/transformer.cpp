#include "kdp/nn/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/init.hpp"
#include "kdp/ops/attention.hpp"
#include "kdp/ops/elementwise.hpp"
#include "kdp/ops/linear.hpp"
#include "kdp/ops/shape.hpp"

namespace kdp::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout,
                                       bool bias, bool batch_first, const Device& device)
    : Module("MultiheadAttention"),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      dropout_(dropout),
      batch_first_(batch_first) {
  KDP_CHECK(embed_dim >= 1 && num_heads >= 1 && embed_dim % num_heads == 0, ShapeError,
            "num_heads {} does not divide embed_dim {}", num_heads, embed_dim);
  KDP_CHECK(dropout >= 0.0f && dropout < 1.0f, ValueError, "dropout {} is not in [0, 1)", dropout);
  in_proj_weight_ = register_parameter(
      "in_proj_weight", Tensor::empty_labeled({3 * embed_dim, embed_dim}, device,
                                              "kdp::MultiheadAttention::in_proj_weight"));
  if (bias) {
    in_proj_bias_ = register_parameter(
        "in_proj_bias",
        Tensor::empty_labeled({3 * embed_dim}, device, "kdp::MultiheadAttention::in_proj_bias"));
  }
  out_proj_ =
      register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, device));
  NoGradGuard no_grad;
  init::xavier_uniform_(in_proj_weight_);
  if (bias) {
    in_proj_bias_.zero_();
    Tensor out_bias = out_proj_->bias();
    out_bias.zero_();
  }
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  return forward(x, x, x);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& attn_mask, bool is_causal) {
  const int64_t e = embed_dim_, h = num_heads_, dh = e / h;
  KDP_CHECK(query.dim() == key.dim() && key.dim() == value.dim() &&
                (query.dim() == 2 || query.dim() == 3) && query.size(-1) == e &&
                key.size(-1) == e && value.size(-1) == e,
            ShapeError,
            "query {}, key {} and value {} must be [T, B, {}] ([B, T, {}] with batch_first) or "
            "unbatched [T, {}]",
            query.shape().str(), key.shape().str(), value.shape().str(), e, e, e);
  const bool unbatched = query.dim() == 2;
  // As [B, T, E]: the batch first.
  auto batch_major = [&](const Tensor& t) {
    if (unbatched) return unsqueeze(t, 0);
    return batch_first_ ? t : transpose(t, 0, 1);
  };
  const Tensor q_in = batch_major(query), k_in = batch_major(key), v_in = batch_major(value);
  KDP_CHECK(
      q_in.size(0) == k_in.size(0) && k_in.size(0) == v_in.size(0) && k_in.size(1) == v_in.size(1),
      ShapeError, "query {}, key {} and value {} differ in batch or key length",
      query.shape().str(), key.shape().str(), value.shape().str());
  const int64_t b = q_in.size(0), t = q_in.size(1), s = k_in.size(1);
  // [B, L, E] -> [B, H, L, Dh]
  auto heads = [&](const Tensor& x, int64_t len) {
    return permute(x.reshape({b, len, h, dh}), {0, 2, 1, 3});
  };
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    // Self-attention: one product, one permute of [B, T, 3, H, Dh] to
    // [3, B, H, T, Dh], and three contiguous parts.
    const Tensor qkv = permute(
        linear(q_in, in_proj_weight_, in_proj_bias_).reshape({b, t, 3, h, dh}), {2, 0, 3, 1, 4});
    const auto parts = split(qkv, 1, 0);
    q = parts[0].reshape({b, h, t, dh});
    k = parts[1].reshape({b, h, t, dh});
    v = parts[2].reshape({b, h, t, dh});
  } else {
    auto project = [&](const Tensor& x, int64_t part) {
      const Tensor w = narrow(in_proj_weight_, 0, part * e, e);
      const Tensor bias =
          in_proj_bias_.defined() ? narrow(in_proj_bias_, 0, part * e, e) : Tensor();
      return linear(x, w, bias);
    };
    q = heads(project(q_in, 0), t);
    k = heads(project(k_in, 1), s);
    v = heads(project(v_in, 2), s);
  }
  AttentionOptions o;
  if (attn_mask.defined()) {
    const bool shared = attn_mask.shape() == Shape({t, s});
    KDP_CHECK(shared || attn_mask.shape() == Shape({b * h, t, s}), ShapeError,
              "attn_mask {} is neither [T, S] = [{}, {}] nor [B * num_heads, T, S] = "
              "[{}, {}, {}]",
              attn_mask.shape().str(), t, s, b * h, t, s);
    o.attn_mask = attn_mask.dim() == 3 ? attn_mask.reshape({b, h, t, s}) : attn_mask;
  }
  o.dropout_p = is_training() ? dropout_ : 0.0f;
  o.is_causal = is_causal;
  const Tensor a = scaled_dot_product_attention(q, k, v, o);
  Tensor y = out_proj_->forward(permute(a, {0, 2, 1, 3}).reshape({b, t, e}));
  if (unbatched) return squeeze(y, 0);
  return batch_first_ ? y : transpose(y, 0, 1);
}

std::shared_ptr<Module> MultiheadAttention::clone() const {
  auto copy = std::make_shared<MultiheadAttention>(embed_dim_, num_heads_, dropout_,
                                                   in_proj_bias_.defined(), batch_first_, device());
  copy->load_state_dict(state_dict());
  copy->train(is_training());
  return copy;
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, batch_first={}", embed_dim_,
                     num_heads_, dropout_, batch_first_);
}

namespace {

std::shared_ptr<Module> feed_forward_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "gelu_tanh") return std::make_shared<GELU>("tanh");
  KDP_FAIL(ValueError, "activation '{}' is not one of relu, gelu, gelu_tanh", name);
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options,
                                                 const Device& device)
    : Module("TransformerEncoderLayer"),
      d_model_(d_model),
      nhead_(nhead),
      options_(std::move(options)) {
  const auto& o = options_;
  KDP_CHECK(o.dim_feedforward >= 1, ShapeError, "dim_feedforward {} must be at least 1",
            o.dim_feedforward);
  activation_ = feed_forward_activation(o.activation);
  // PyTorch's order of registration (its state_dict's order).
  self_attn_ =
      register_module("self_attn", std::make_shared<MultiheadAttention>(
                                       d_model, nhead, o.dropout, o.bias, o.batch_first, device));
  linear1_ = register_module("linear1",
                             std::make_shared<Linear>(d_model, o.dim_feedforward, o.bias, device));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2_ = register_module("linear2",
                             std::make_shared<Linear>(o.dim_feedforward, d_model, o.bias, device));
  norm1_ =
      register_module("norm1", std::make_shared<LayerNorm>(std::vector<int64_t>{d_model},
                                                           o.layer_norm_eps, true, o.bias, device));
  norm2_ =
      register_module("norm2", std::make_shared<LayerNorm>(std::vector<int64_t>{d_model},
                                                           o.layer_norm_eps, true, o.bias, device));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  return dropout2_->forward(
      linear2_->forward(dropout_->forward(activation_->forward(linear1_->forward(x)))));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) {
  return forward(src, Tensor(), false);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, bool is_causal) {
  auto attend = [&](const Tensor& x) {
    return dropout1_->forward(self_attn_->forward(x, x, x, src_mask, is_causal));
  };
  Tensor x = src;
  if (options_.norm_first) {
    x = x + attend(norm1_->forward(x));
    return x + feed_forward(norm2_->forward(x));
  }
  x = norm1_->forward(x + attend(x));
  return norm2_->forward(x + feed_forward(x));
}

std::shared_ptr<Module> TransformerEncoderLayer::clone() const {
  auto copy = std::make_shared<TransformerEncoderLayer>(d_model_, nhead_, options_, device());
  copy->load_state_dict(state_dict());
  copy->train(is_training());
  return copy;
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int num_layers,
                                       std::shared_ptr<LayerNorm> norm)
    : Module("TransformerEncoder") {
  KDP_CHECK(num_layers >= 1, ValueError, "num_layers {} must be at least 1", num_layers);
  layers_ = register_module("layers", std::make_shared<Sequential>());
  for (int i = 0; i < num_layers; ++i) layers_->push_back(layer.clone());
  if (norm) norm_ = register_module("norm", std::move(norm));
}

TransformerEncoderLayer& TransformerEncoder::layer(int i) const {
  KDP_CHECK(i >= 0 && i < num_layers(), ValueError, "layer {} of {}", i, num_layers());
  return static_cast<TransformerEncoderLayer&>(*(*layers_)[static_cast<size_t>(i)]);
}

Tensor TransformerEncoder::forward(const Tensor& src) {
  return forward(src, Tensor(), false);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, bool is_causal) {
  Tensor x = src;
  for (int i = 0; i < num_layers(); ++i) x = layer(i).forward(x, mask, is_causal);
  return norm_ ? norm_->forward(x) : x;
}

std::shared_ptr<Module> TransformerEncoder::clone() const {
  std::shared_ptr<TransformerEncoder> copy(new TransformerEncoder());
  copy->layers_ =
      copy->register_module("layers", std::static_pointer_cast<Sequential>(layers_->clone()));
  if (norm_)
    copy->norm_ =
        copy->register_module("norm", std::static_pointer_cast<LayerNorm>(norm_->clone()));
  copy->train(is_training());
  return copy;
}

std::shared_ptr<TransformerEncoder> pre_norm_encoder(int64_t dim, int64_t heads, int64_t mlp,
                                                     int64_t depth, float dropout,
                                                     const Device& device) {
  TransformerEncoderLayerOptions layer;
  layer.dim_feedforward = mlp;
  layer.dropout = dropout;
  layer.activation = "gelu";
  layer.batch_first = true;
  layer.norm_first = true;
  return std::make_shared<TransformerEncoder>(TransformerEncoderLayer(dim, heads, layer, device),
                                              static_cast<int>(depth));
}

size_t TransformerEncoderLayer::parameter_bytes(int64_t d_model, int64_t dim_feedforward) {
  // in_proj, out_proj, linear1, linear2, norm1 and norm2
  return Linear::parameter_bytes(d_model, 3 * d_model) + Linear::parameter_bytes(d_model, d_model) +
         Linear::parameter_bytes(d_model, dim_feedforward) +
         Linear::parameter_bytes(dim_feedforward, d_model) +
         4 * static_cast<size_t>(d_model) * sizeof(float);
}

VisionTransformer::VisionTransformer(const Shape& image, int64_t classes, ViTOptions options,
                                     const Device& device)
    : Module("VisionTransformer"), image_(image), classes_(classes), options_(options) {
  const ViTOptions& o = options_;
  KDP_CHECK(image.rank() == 3, ShapeError, "images {} are not [C, H, W]", image.str());
  KDP_CHECK(o.patch >= 1 && image[1] % o.patch == 0 && image[2] % o.patch == 0, ShapeError,
            "patches of {} do not tile images {} (H and W must be multiples of the patch)", o.patch,
            image.str());
  KDP_CHECK(o.dim >= 1 && o.heads >= 1 && o.dim % o.heads == 0, ShapeError,
            "heads {} do not divide dim {}", o.heads, o.dim);
  KDP_CHECK(o.depth >= 1 && o.mlp >= 1 && classes >= 1, ValueError,
            "depth {}, mlp {} and classes {} must be at least 1", o.depth, o.mlp, classes);
  const int64_t tokens = (image[1] / o.patch) * (image[2] / o.patch);
  cls_token_ = register_parameter(
      "cls_token",
      Tensor::empty_labeled({1, 1, o.dim}, device, "kdp::VisionTransformer::cls_token"));
  pos_embed_ = register_parameter(
      "pos_embed",
      Tensor::empty_labeled({1, 1 + tokens, o.dim}, device, "kdp::VisionTransformer::pos_embed"));
  {
    NoGradGuard no_grad;
    init::normal_(cls_token_, 0.0f, 0.02f);
    init::normal_(pos_embed_, 0.0f, 0.02f);
  }
  patch_embed_ = register_module(
      "patch_embed", std::make_shared<Conv2d>(image[0], o.dim, Size2(o.patch), Size2(o.patch), 0, 1,
                                              1, true, device));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  encoder_ = register_module("encoder",
                             pre_norm_encoder(o.dim, o.heads, o.mlp, o.depth, o.dropout, device));
  norm_ = register_module(
      "norm", std::make_shared<LayerNorm>(std::vector<int64_t>{o.dim}, 1e-5, true, true, device));
  head_ = register_module("head", std::make_shared<Linear>(o.dim, classes, true, device));
}

Tensor VisionTransformer::forward(const Tensor& images) {
  const int64_t dim = options_.dim;
  KDP_CHECK(images.dim() == 4 && images.size(1) == image_[0] && images.size(2) == image_[1] &&
                images.size(3) == image_[2],
            ShapeError, "input {} is not a batch of images [N, {}, {}, {}]", images.shape().str(),
            image_[0], image_[1], image_[2]);
  const int64_t n = images.size(0);
  Tensor t = patch_embed_->forward(images);  // [N, dim, H / patch, W / patch]
  const int64_t tokens = t.size(2) * t.size(3);
  t = transpose(t.reshape({n, dim, tokens}), 1, 2);  // [N, tokens, dim]
  t = cat({expand(cls_token_, {n, 1, dim}), t}, 1);  // the cls token first
  t = dropout_->forward(t + pos_embed_);
  t = norm_->forward(encoder_->forward(t));
  return head_->forward(select(t, 1, 0));
}

std::shared_ptr<Module> VisionTransformer::clone() const {
  auto copy = std::make_shared<VisionTransformer>(image_, classes_, options_, device());
  copy->load_state_dict(state_dict());
  copy->train(is_training());
  return copy;
}

namespace {

// GPT's head: a linear map without bias whose weight is another module's
// parameter (tied), registered under this module's name as well.
class TiedLinear : public Module {
 public:
  explicit TiedLinear(const Tensor& weight) : Module("Linear"), weight_(weight) {
    register_parameter("weight", weight_);
  }
  Tensor forward(const Tensor& x) override { return linear(x, weight_, Tensor()); }
  using Module::forward;

 private:
  Tensor weight_;
};

}  // namespace

GPT::GPT(int64_t vocab, int64_t context, GPTOptions options, const Device& device)
    : Module("GPT"), vocab_(vocab), context_(context), options_(options) {
  const GPTOptions& o = options_;
  KDP_CHECK(vocab >= 1 && context >= 1 && o.depth >= 1, ValueError,
            "vocab {}, context {} and depth {} must be at least 1", vocab, context, o.depth);
  KDP_CHECK(o.dim >= 1 && o.heads >= 1 && o.dim % o.heads == 0, ShapeError,
            "heads {} do not divide dim {}", o.heads, o.dim);
  tok_embed_ =
      register_module("tok_embed", std::make_shared<Embedding>(vocab, o.dim, std::nullopt, device));
  pos_embed_ = register_parameter(
      "pos_embed", Tensor::empty_labeled({1, context, o.dim}, device, "kdp::GPT::pos_embed"));
  {
    // Both tables small (GPT-2's 0.02): the tied head's logits start near 0,
    // where N(0, 1) rows (nn.Embedding's default) would give logits of
    // deviation sqrt(dim) and a first loss several times log(vocab).
    NoGradGuard no_grad;
    init::normal_(pos_embed_, 0.0f, 0.02f);
    Tensor table = tok_embed_->weight();  // shares its storage
    init::normal_(table, 0.0f, 0.02f);
  }
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  encoder_ = register_module(
      "encoder", pre_norm_encoder(o.dim, o.heads, 4 * o.dim, o.depth, o.dropout, device));
  norm_ = register_module(
      "norm", std::make_shared<LayerNorm>(std::vector<int64_t>{o.dim}, 1e-5, true, true, device));
  head_ = register_module("head", std::make_shared<TiedLinear>(tok_embed_->weight()));
}

Tensor GPT::forward(const Tensor& ids) {
  KDP_CHECK(ids.dim() == 2 && ids.size(1) >= 1 && ids.size(1) <= context_, ShapeError,
            "token ids {} are not [N, T] with T from 1 to the context, {}", ids.shape().str(),
            context_);
  const int64_t t = ids.size(1);
  Tensor h = tok_embed_->forward(ids) + narrow(pos_embed_, 1, 0, t);
  h = encoder_->forward(dropout_->forward(h), Tensor(), /*is_causal=*/true);
  return head_->forward(norm_->forward(h));
}

namespace {

// An index drawn from softmax(logits / temperature) by the uniform `u` in
// [0, 1) (the first whose cumulative share exceeds it), or the largest logit's
// at temperature 0.
int64_t draw(const std::vector<float>& logits, double temperature, double u) {
  const auto top = std::max_element(logits.begin(), logits.end());
  if (temperature == 0.0) return top - logits.begin();
  std::vector<double> p(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - *top) / temperature);
    total += p[i];
  }
  double cumulative = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i] / total;
    if (u < cumulative) return static_cast<int64_t>(i);
  }
  return top - logits.begin();  // u within rounding of 1
}

}  // namespace

std::vector<int64_t> GPT::generate(const std::vector<int64_t>& prompt, int64_t tokens,
                                   double temperature, uint64_t seed) {
  KDP_CHECK(!prompt.empty(), ValueError, "generation needs a prompt of at least one token");
  KDP_CHECK(temperature >= 0.0 && tokens >= 0, ValueError,
            "temperature {} and token count {} must not be negative", temperature, tokens);
  for (int64_t id : prompt) {
    KDP_CHECK(id >= 0 && id < vocab_, ValueError, "prompt token {} is outside the vocabulary ({})",
              id, vocab_);
  }
  const bool was_training = is_training();
  eval();
  NoGradGuard no_grad;
  std::mt19937_64 stream(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> ids = prompt, out;
  for (int64_t k = 0; k < tokens; ++k) {
    const auto t =
        static_cast<int64_t>(std::min<size_t>(ids.size(), static_cast<size_t>(context_)));
    const std::vector<float> window(ids.end() - t, ids.end());
    const Tensor logits = forward(Tensor::from_host(window, {1, t}, device()));
    const std::vector<float> last = contiguous(narrow(logits, 1, t - 1, 1)).to_vector();
    out.push_back(draw(last, temperature, uniform(stream)));
    ids.push_back(out.back());
  }
  train(was_training);
  return out;
}

std::shared_ptr<Module> GPT::clone() const {
  auto copy = std::make_shared<GPT>(vocab_, context_, options_, device());
  copy->load_state_dict(state_dict());
  copy->train(is_training());
  return copy;
}

}  // namespace kdp::nn
