// Writes kdp's fp32 results on fixed inputs for ops_vs_torch.py, which runs
// PyTorch's ops on the same inputs: the 3-d and 1-d convolutions and pools,
// the regression losses and the transformer's ops (batched matmul, permute,
// layer_norm, gelu's tanh form, embedding, attention), forward and gradients. DIR/NAME.f32 (raw
// float32, row-major) for every input, result and gradient, and
// DIR/manifest.txt with a line "NAME d0 d1 ..." per array.
//
//   kdp_torch_probe DIR
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "kdp/kdp.hpp"
#include "probe_writer.hpp"
#include "test_util.hpp"

using namespace kdp;
using kdp::test::leaf;
using kdp::test::ProbeWriter;
using kdp::test::random_tensor;

namespace {

ProbeWriter* out = nullptr;

void put(const std::string& name, const Tensor& t) {
  out->put(name, t);
}

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// y = op(inputs) (uniform in [-1, 1), seeds from `seed`), then the backward
// of y with a random gy; writes NAME.in<i>, NAME.y, NAME.gy and NAME.g<i>
// for the first `with_grad` inputs.
void probe(const std::string& name, const std::vector<Shape>& shapes, size_t with_grad,
           const Op& op, uint64_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor t = random_tensor(shapes[i], seed + i);
    in.push_back(i < with_grad ? leaf(t) : t);
  }
  const Tensor y = op(in);
  const Tensor gy = random_tensor(y.shape(), seed + 100);
  y.backward(gy);
  for (size_t i = 0; i < in.size(); ++i) put(name + ".in" + std::to_string(i), in[i].detach());
  put(name + ".y", y.detach());
  put(name + ".gy", gy);
  for (size_t i = 0; i < with_grad; ++i) put(name + ".g" + std::to_string(i), in[i].grad());
}

// A pre-norm encoder layer with GELU, batch first, causal: its parameters
// (encoder_layer.param.NAME), input, output, output gradient, and the
// gradients of the input and every parameter (encoder_layer.grad.NAME).
void probe_encoder_layer() {
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 12;
  o.dropout = 0.0f;
  o.batch_first = true;
  o.norm_first = true;
  o.activation = "gelu";
  nn::TransformerEncoderLayer layer(8, 2, o);
  {
    NoGradGuard no_grad;  // nonzero biases and norms, so that each shows
    uint64_t seed = 200;
    for (auto& [name, p] : layer.named_parameters()) p.copy_(random_tensor(p.shape(), seed++));
  }
  Tensor x = leaf(random_tensor({2, 5, 8}, 190));
  const Tensor y = layer.forward(x, Tensor(), true);
  const Tensor gy = random_tensor(y.shape(), 191);
  y.backward(gy);
  put("encoder_layer.x", x.detach());
  put("encoder_layer.y", y.detach());
  put("encoder_layer.gy", gy);
  put("encoder_layer.gx", x.grad());
  for (const auto& [name, p] : layer.named_parameters()) {
    put("encoder_layer.param." + name, p.detach());
    put("encoder_layer.grad." + name, p.grad());
  }
}

// A small vision transformer (images [1, 8, 8], patch 4, dim 8, depth 2,
// heads 2, mlp 16, 3 classes, no dropout): its parameters (vit.param.NAME),
// input, output, output gradient, and the gradients of the input and every
// parameter (vit.grad.NAME).
void probe_vit() {
  nn::ViTOptions o;
  o.patch = 4;
  o.dim = 8;
  o.depth = 2;
  o.heads = 2;
  o.mlp = 16;
  o.dropout = 0.0f;
  nn::VisionTransformer vit({1, 8, 8}, 3, o);
  {
    NoGradGuard no_grad;
    uint64_t seed = 300;
    for (auto& [name, p] : vit.named_parameters()) p.copy_(random_tensor(p.shape(), seed++));
  }
  Tensor x = leaf(random_tensor({2, 1, 8, 8}, 290));
  const Tensor y = vit.forward(x);
  const Tensor gy = random_tensor(y.shape(), 291);
  y.backward(gy);
  put("vit.x", x.detach());
  put("vit.y", y.detach());
  put("vit.gy", gy);
  put("vit.gx", x.grad());
  for (const auto& [name, p] : vit.named_parameters()) {
    put("vit.param." + name, p.detach());
    put("vit.grad." + name, p.grad());
  }
}

// A small GPT (vocab 9, context 6, depth 2, heads 2, dim 8, no dropout) on
// ids [2, 5]: its parameters (gpt.param.NAME, the tied head under both
// names), ids, logits, their gradient, and every parameter's gradient.
void probe_gpt() {
  nn::GPTOptions o;
  o.depth = 2;
  o.heads = 2;
  o.dim = 8;
  o.dropout = 0.0f;
  nn::GPT gpt(9, 6, o);
  {
    NoGradGuard no_grad;
    uint64_t seed = 400;
    for (auto& [name, p] : gpt.named_parameters()) p.copy_(random_tensor(p.shape(), seed++));
  }
  const Tensor ids = Tensor::from_host({1, 8, 2, 2, 0, 5, 3, 7, 4, 1}, {2, 5});
  const Tensor y = gpt.forward(ids);
  const Tensor gy = random_tensor(y.shape(), 391);
  y.backward(gy);
  put("gpt.ids", ids);
  put("gpt.y", y.detach());
  put("gpt.gy", gy);
  for (const auto& [name, p] : gpt.state_dict()) put("gpt.param." + name, p.detach());
  for (const auto& [name, p] : gpt.named_parameters()) put("gpt.grad." + name, p.grad());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kdp_torch_probe DIR\n");
    return 2;
  }
  Runtime runtime(argc, argv);
  ProbeWriter writer(argv[1]);
  out = &writer;
  using V = std::vector<Tensor>;
  probe(
      "conv3d", {{2, 3, 5, 6, 7}, {4, 3, 3, 2, 3}, {4}}, 3,
      [](const V& t) {
        return conv3d(t[0], t[1], t[2], {1, 2, 1}, {1, 0, 1}, {1, 1, 2});
      },
      1);
  probe(
      "conv3d_groups", {{1, 6, 5, 4, 5}, {3, 2, 2, 2, 2}, {3}}, 3,
      [](const V& t) { return conv3d(t[0], t[1], t[2], 2, 1, 1, 3); }, 11);
  probe(
      "conv1d", {{2, 4, 11}, {6, 2, 3}, {6}}, 3,
      [](const V& t) { return conv1d(t[0], t[1], t[2], 2, 1, 2, 2); }, 21);
  probe(
      "max_pool3d", {{2, 2, 6, 7, 5}}, 1,
      [](const V& t) {
        return max_pool3d(t[0], {3, 2, 2}, Size3{2, 2, 1}, {1, 1, 0}, 1, true);
      },
      31);
  probe(
      "avg_pool3d", {{2, 2, 6, 7, 5}}, 1,
      [](const V& t) { return avg_pool3d(t[0], 3, Size3{2}, 1, true, false); }, 41);
  probe(
      "avg_pool3d_pad", {{2, 2, 6, 7, 5}}, 1,
      [](const V& t) {
        return avg_pool3d(t[0], {2, 3, 3}, Size3{1, 2, 2}, {1, 1, 0});
      },
      51);
  // Losses of an input [40, 3] against a target that takes no gradient.
  probe(
      "mse", {{40, 3}, {40, 3}}, 1, [](const V& t) { return mse_loss(t[0], t[1]); }, 61);
  probe(
      "l1", {{40, 3}, {40, 3}}, 1, [](const V& t) { return l1_loss(t[0], t[1]); }, 71);
  probe(
      "smooth_l1", {{40, 3}, {40, 3}}, 1,
      [](const V& t) { return smooth_l1_loss(t[0], t[1], Reduction::Mean, 0.5); }, 81);
  probe(
      "huber", {{40, 3}, {40, 3}}, 1,
      [](const V& t) { return huber_loss(t[0], t[1], Reduction::Sum, 0.3); }, 91);
  // The transformer's ops (ops_vs_torch.py holds them to 2x PyTorch
  // float32's error against float64).
  probe(
      "matmul_broadcast", {{2, 1, 3, 4}, {3, 4, 5}}, 2,
      [](const V& t) { return matmul(t[0], t[1]); }, 101);
  probe(
      "bmm", {{3, 4, 5}, {3, 5, 2}}, 2, [](const V& t) { return bmm(t[0], t[1]); }, 111);
  probe(
      "permute", {{2, 3, 4}}, 1,
      [](const V& t) {
        return permute(t[0], {2, 0, 1});
      },
      121);
  probe(
      "layer_norm", {{4, 3, 8}, {3, 8}, {3, 8}}, 3,
      [](const V& t) {
        return layer_norm(t[0], {3, 8}, t[1], t[2]);
      },
      131);
  probe(
      "gelu_tanh", {{40, 3}}, 1, [](const V& t) { return gelu(t[0], "tanh"); }, 141);
  const Tensor ids = Tensor::from_host({3, 0, 6, 3, 1, 6, 6, 2, 0, 5}, {2, 5});
  put("embedding.ids", ids);
  probe(
      "embedding", {{7, 4}}, 1, [&](const V& t) { return embedding(ids, t[0], 2); }, 151);
  probe(
      "sdpa", {{2, 2, 9, 4}, {2, 2, 11, 4}, {2, 2, 11, 3}}, 3,
      [](const V& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); }, 161);
  probe(
      "sdpa_causal", {{2, 2, 9, 4}, {2, 2, 9, 4}, {2, 2, 9, 3}}, 3,
      [](const V& t) {
        AttentionOptions o;
        o.is_causal = true;
        return scaled_dot_product_attention(t[0], t[1], t[2], o);
      },
      171);
  std::vector<float> m(9 * 11, 0.0f);
  for (size_t i = 0; i < m.size(); ++i) m[i] = (i * 7) % 5 == 1 && i % 11 != 0 ? -1e30f : 0.25f;
  const Tensor mask = Tensor::from_host(m, {9, 11});
  put("sdpa_mask.mask", mask);
  probe(
      "sdpa_mask", {{2, 2, 9, 4}, {2, 2, 11, 4}, {2, 2, 11, 3}}, 3,
      [&](const V& t) {
        AttentionOptions o;
        o.attn_mask = mask;
        o.scale = 0.7;
        return scaled_dot_product_attention(t[0], t[1], t[2], o);
      },
      181);
  probe_encoder_layer();
  probe_vit();
  probe_gpt();
  return writer.close() ? 0 : 1;
}
