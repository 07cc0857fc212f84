#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

// Multi-head self-attention from unfused ops: the projections, then per head
// softmax(q k^T / sqrt(dh)) v with the whole score matrix, then out_proj.
Tensor unfused_attention(nn::MultiheadAttention& mha, const Tensor& x) {
  const int64_t e = mha.embed_dim(), h = mha.num_heads();
  const int64_t dh = e / h;
  const Tensor qkv = linear(x, mha.in_proj_weight(), mha.in_proj_bias());
  auto head = [&](int part, int64_t i) {
    return narrow(narrow(qkv, 2, part * e, e), 2, i * dh, dh);  // [B, T, dh]
  };
  std::vector<Tensor> outs;
  for (int64_t i = 0; i < h; ++i) {
    const Tensor scores = matmul(head(0, i), transpose(head(1, i), 1, 2)) / std::sqrt(float(dh));
    outs.push_back(matmul(softmax(scores, -1), head(2, i)));
  }
  return mha.out_proj()->forward(cat(outs, 2));
}

}  // namespace

TEST(MultiheadAttention, ParametersAsPyTorchNamesAndInitialisesThem) {
  nn::MultiheadAttention mha(8, 2);
  EXPECT_EQ(names(mha), (std::vector<std::string>{"in_proj_weight", "in_proj_bias",
                                                  "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight().shape(), (Shape{24, 8}));
  EXPECT_EQ(mha.in_proj_bias().to_vector(), std::vector<float>(24, 0.0f));
  EXPECT_EQ(mha.out_proj()->bias().to_vector(), std::vector<float>(8, 0.0f));
  const float bound = std::sqrt(6.0f / (8 + 24));  // Xavier-uniform of [24, 8]
  for (float w : mha.in_proj_weight().to_vector()) EXPECT_LE(std::fabs(w), bound);
  EXPECT_THROW(nn::MultiheadAttention(8, 3), ShapeError);
  EXPECT_EQ(names(nn::MultiheadAttention(8, 2, 0.0f, false)),
            (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
}

TEST(MultiheadAttention, FusedEqualsTheUnfusedOpsInEitherLayout) {
  nn::MultiheadAttention mha(8, 2, 0.0f, true, true);
  {
    NoGradGuard no_grad;
    Tensor b = mha.in_proj_bias();
    b.copy_(random_tensor({24}, 81));  // nonzero biases, so a mix-up shows
  }
  const Tensor x = random_tensor({3, 5, 8}, 82);
  test::expect_close(mha.forward(x).to_vector(), unfused_attention(mha, x).to_vector(), 1e-5, 1e-4,
                     "batch_first");
  nn::MultiheadAttention seq_first(8, 2);
  seq_first.load_state_dict(mha.state_dict());
  EXPECT_EQ(transpose(seq_first.forward(transpose(x, 0, 1)), 0, 1).to_vector(),
            mha.forward(x).to_vector());
  // Unbatched [T, E] is a batch of one; key and value apart give the same as x.
  test::expect_close(mha.forward(select(x, 0, 1)).to_vector(),
                     select(mha.forward(x), 0, 1).to_vector(), 1e-6, 1e-5, "unbatched");
  const Tensor x2 = x.clone();
  test::expect_close(mha.forward(x, x2, x2.clone()).to_vector(), mha.forward(x).to_vector(), 1e-6,
                     1e-6, "cross-attention path");
}

TEST(MultiheadAttention, GradientsMatchFiniteDifferences) {
  nn::MultiheadAttention mha(4, 2, 0.0f, true, true);
  Tensor x = leaf(random_tensor({2, 3, 4}, 83));
  Tensor mask = Tensor::from_host({0, -1e9f, 0, 0, 0, -1e9f, 0, 0, 0}, {3, 3});
  check_gradients(
      [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], mask, false); },
      {x}, {}, "self-attention with a mask");
  check_gradients(
      [&](const std::vector<Tensor>& in) {
        return mha.forward(in[0], in[0], in[0], Tensor(), true);
      },
      {x}, {}, "causal self-attention");
}

// PyTorch's state_dict keys, in its order, for TransformerEncoder(layer, 2).
TEST(TransformerEncoder, StateDictKeysAsPyTorchHasThem) {
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 16;
  nn::TransformerEncoderLayer layer(8, 2, o);
  std::vector<std::string> per_layer = {"self_attn.in_proj_weight",
                                        "self_attn.in_proj_bias",
                                        "self_attn.out_proj.weight",
                                        "self_attn.out_proj.bias",
                                        "linear1.weight",
                                        "linear1.bias",
                                        "linear2.weight",
                                        "linear2.bias",
                                        "norm1.weight",
                                        "norm1.bias",
                                        "norm2.weight",
                                        "norm2.bias"};
  EXPECT_EQ(names(layer), per_layer);
  nn::TransformerEncoder encoder(layer, 2,
                                 std::make_shared<nn::LayerNorm>(std::vector<int64_t>{8}));
  std::vector<std::string> want;
  for (int i = 0; i < 2; ++i) {
    for (const auto& n : per_layer) want.push_back("layers." + std::to_string(i) + "." + n);
  }
  want.push_back("norm.weight");
  want.push_back("norm.bias");
  EXPECT_EQ(names(encoder), want);
  // Each layer has parameters of its own.
  EXPECT_FALSE(encoder.layer(0).named_parameters()[0].second.shares_storage(
      encoder.layer(1).named_parameters()[0].second));
  EXPECT_THROW(nn::TransformerEncoderLayer(8, 2,
                                           [] {
                                             nn::TransformerEncoderLayerOptions bad;
                                             bad.activation = "swish";
                                             return bad;
                                           }()),
               ValueError);
}

// Post-norm and pre-norm against the composition of the modules (evaluation
// mode: no dropout), and the encoder as its layers one after another.
TEST(TransformerEncoder, LayersComposeAsPyTorchDefinesThem) {
  const Tensor x = random_tensor({2, 5, 8}, 84);
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayerOptions o;
    o.dim_feedforward = 16;
    o.batch_first = true;
    o.norm_first = norm_first;
    o.activation = "gelu";
    nn::TransformerEncoderLayer layer(8, 2, o);
    layer.eval();
    auto& self_attn = static_cast<nn::MultiheadAttention&>(*layer.named_children()[0].second);
    auto child = [&](const std::string& name) -> nn::Module& {
      for (auto& [n, m] : layer.named_children()) {
        if (n == name) return *m;
      }
      throw std::runtime_error(name);
    };
    auto ff = [&](const Tensor& y) {
      return child("linear2").forward(gelu(child("linear1").forward(y)));
    };
    Tensor want;
    if (norm_first) {
      const Tensor y = x + self_attn.forward(child("norm1").forward(x));
      want = y + ff(child("norm2").forward(y));
    } else {
      const Tensor y = child("norm1").forward(x + self_attn.forward(x));
      want = child("norm2").forward(y + ff(y));
    }
    EXPECT_EQ(layer.forward(x).to_vector(), want.to_vector()) << "norm_first " << norm_first;

    nn::TransformerEncoder encoder(layer, 2);
    encoder.eval();
    const Tensor twice =
        encoder.layer(1).forward(encoder.layer(0).forward(x, Tensor(), true), Tensor(), true);
    EXPECT_EQ(encoder.forward(x, Tensor(), true).to_vector(), twice.to_vector());
    EXPECT_EQ(encoder.clone()->forward(x).to_vector(), encoder.forward(x).to_vector());
  }
}

TEST(TransformerEncoder, GradientsMatchFiniteDifferences) {
  nn::TransformerEncoderLayerOptions o;
  o.dim_feedforward = 6;
  o.batch_first = true;
  o.dropout = 0.0f;
  nn::TransformerEncoderLayer layer(4, 2, o);
  Tensor x = leaf(random_tensor({2, 3, 4}, 85));
  check_gradients(
      [&](const std::vector<Tensor>& in) { return layer.forward(in[0], Tensor(), true); }, {x}, {},
      "encoder layer");
}

// The names a PyTorch user's module of the documented layout has, and the
// shapes they hold; the forward's shape; the errors that name the sizes.
TEST(VisionTransformer, StateDictAsTheDescriptionBuildsIt) {
  nn::ViTOptions o;
  o.patch = 4;
  o.dim = 8;
  o.depth = 2;
  o.heads = 2;
  o.mlp = 16;
  nn::VisionTransformer vit({1, 8, 12}, 10, o);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : vit.named_parameters()) shapes[name] = t.shape();
  EXPECT_EQ(shapes.at("cls_token"), (Shape{1, 1, 8}));
  EXPECT_EQ(shapes.at("pos_embed"), (Shape{1, 1 + 2 * 3, 8}));
  EXPECT_EQ(shapes.at("patch_embed.weight"), (Shape{8, 1, 4, 4}));
  EXPECT_EQ(shapes.at("encoder.layers.1.self_attn.in_proj_weight"), (Shape{24, 8}));
  EXPECT_EQ(shapes.at("encoder.layers.0.linear1.weight"), (Shape{16, 8}));
  EXPECT_EQ(shapes.at("norm.weight"), (Shape{8}));
  EXPECT_EQ(shapes.at("head.weight"), (Shape{10, 8}));
  EXPECT_EQ(shapes.size(), 4u + 2 * 12u + 2u + 2u);
  vit.eval();
  const Tensor x = random_tensor({3, 1, 8, 12}, 86);
  EXPECT_EQ(vit.forward(x).shape(), (Shape{3, 10}));
  EXPECT_EQ(vit.clone()->forward(x).to_vector(), vit.forward(x).to_vector());
  try {
    nn::VisionTransformer({1, 28, 28}, 10, [] {
      nn::ViTOptions bad;
      bad.patch = 5;
      return bad;
    }());
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("patches of 5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[1, 28, 28]"), std::string::npos) << msg;
  }
  o.heads = 3;
  EXPECT_THROW(nn::VisionTransformer({1, 8, 12}, 10, o), ShapeError);
  EXPECT_THROW(vit.forward(random_tensor({3, 1, 12, 8}, 87)), ShapeError);
}

TEST(VisionTransformer, GradientsMatchFiniteDifferences) {
  nn::ViTOptions o;
  o.patch = 2;
  o.dim = 4;
  o.depth = 1;
  o.heads = 2;
  o.mlp = 6;
  o.dropout = 0.0f;
  nn::VisionTransformer vit({1, 4, 4}, 3, o);
  Tensor x = leaf(random_tensor({2, 1, 4, 4}, 88));
  check_gradients([&](const std::vector<Tensor>& in) { return vit.forward(in[0]); }, {x}, {},
                  "vit");
}

// The description's names and shapes; the tied head: one parameter (listed
// once by named_parameters, under both names by state_dict, counted once);
// logits [N, T, vocab]; the errors that name the sizes.
TEST(GPT, TheHeadIsTiedToTheTokenEmbedding) {
  nn::GPTOptions o;
  o.depth = 2;
  o.heads = 2;
  o.dim = 8;
  nn::GPT gpt(11, 6, o);
  std::map<std::string, Tensor> named;
  for (const auto& [name, t] : gpt.named_parameters()) named[name] = t;
  EXPECT_EQ(named.count("head.weight"), 0u);
  ASSERT_EQ(named.count("tok_embed.weight"), 1u);
  EXPECT_EQ(named.at("tok_embed.weight").shape(), (Shape{11, 8}));
  EXPECT_EQ(named.at("pos_embed").shape(), (Shape{1, 6, 8}));
  EXPECT_EQ(named.at("encoder.layers.1.linear1.weight").shape(), (Shape{32, 8}));
  const auto state = gpt.state_dict();
  const Tensor* head = nn::find(state, "head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(head->is_same(named.at("tok_embed.weight")));
  EXPECT_EQ(nn::find(state, "head.bias"), nullptr);
  const int64_t layer =
      static_cast<int64_t>(nn::TransformerEncoderLayer::parameter_bytes(8, 32) / sizeof(float));
  EXPECT_EQ(gpt.num_parameters(), 11 * 8 + 6 * 8 + 2 * layer + 16);
  gpt.eval();
  const Tensor ids = Tensor::from_host({1, 2, 3, 10, 0, 5, 5, 4}, {2, 4});
  EXPECT_EQ(gpt.forward(ids).shape(), (Shape{2, 4, 11}));
  EXPECT_EQ(gpt.clone()->forward(ids).to_vector(), gpt.forward(ids).to_vector());
  EXPECT_THROW(gpt.forward(Tensor::zeros({1, 7})), ShapeError);               // beyond the context
  EXPECT_THROW(gpt.forward(Tensor::from_host({1, 11}, {1, 2})), ValueError);  // id 11 of 11
  o.heads = 3;
  EXPECT_THROW(nn::GPT(11, 6, o), ShapeError);
}

// Causal: a position's logits do not depend on the tokens after it.
TEST(GPT, APositionSeesOnlyItselfAndWhatCameBefore) {
  nn::GPTOptions o;
  o.depth = 1;
  o.heads = 2;
  o.dim = 8;
  o.dropout = 0.0f;
  nn::GPT gpt(9, 5, o);
  const std::vector<float> a = gpt.forward(Tensor::from_host({1, 2, 3, 4, 5}, {1, 5})).to_vector();
  const std::vector<float> b = gpt.forward(Tensor::from_host({1, 2, 3, 8, 0}, {1, 5})).to_vector();
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 3 * 9),
            std::vector<float>(b.begin(), b.begin() + 3 * 9));
  EXPECT_NE(std::vector<float>(a.begin() + 3 * 9, a.end()),
            std::vector<float>(b.begin() + 3 * 9, b.end()));
}

// The tied weight's gradient is that of both its uses (the lookup and the
// head), against central differences of the whole model; rows of ids the
// batch does not hold get the head's part alone.
TEST(GPT, TheTiedWeightsGradientHoldsBothUses) {
  nn::GPTOptions o;
  o.depth = 1;
  o.heads = 2;
  o.dim = 4;
  o.dropout = 0.0f;
  nn::GPT gpt(7, 5, o);
  const Tensor ids = Tensor::from_host({1, 2, 2, 0, 4, 3, 1, 1}, {2, 4});
  const auto state = gpt.state_dict();
  ASSERT_NE(nn::find(state, "tok_embed.weight"), nullptr);
  Tensor weight = *nn::find(state, "tok_embed.weight");
  {
    // Rows of unit size: at GPT's own 0.02, LayerNorm's eps would dominate
    // the finite differences of float32.
    NoGradGuard no_grad;
    nn::init::normal_(weight, 0.0f, 1.0f);
  }
  const std::vector<float> original = weight.to_vector();
  check_gradients(
      [&](const std::vector<Tensor>& in) {
        if (!in[0].is_same(weight)) {
          NoGradGuard no_grad;
          weight.copy_(in[0]);
        }
        return gpt.forward(ids);
      },
      {weight}, {}, "gpt's tied weight");
  NoGradGuard no_grad;
  weight.copy_(Tensor::from_host(original, weight.shape()));
}

// DataParallel over two device instances: the tied parameter is bound once
// in each replica, and the gradients are the plain model's.
TEST(GPT, DataParallelGivesThePlainModelsGradients) {
  nn::GPTOptions o;
  o.depth = 1;
  o.heads = 2;
  o.dim = 8;
  o.dropout = 0.0f;
  const auto devs = devices(2);
  auto gpt = std::make_shared<nn::GPT>(9, 5, o, devs[0]);
  const Tensor ids = Tensor::from_host({1, 2, 3, 4, 5, 8, 7, 6, 0, 1, 2, 2}, {3, 4}, devs[0]);
  const Tensor next = Tensor::from_host({2, 3, 4, 5, 7, 6, 0, 1, 1, 2, 2, 3}, {12}, devs[0]);
  auto grads = [&](nn::Module& runner) {
    for (auto& [name, p] : gpt->named_parameters()) p.set_grad(Tensor());
    cross_entropy(runner.forward(ids).reshape({12, 9}), next).backward();
    std::map<std::string, std::vector<float>> out;
    for (const auto& [name, p] : gpt->named_parameters()) out[name] = p.grad().to_vector();
    return out;
  };
  const auto plain = grads(*gpt);
  DataParallel dp(gpt, devs);
  const auto parallel = grads(dp);
  ASSERT_EQ(parallel.size(), plain.size());
  for (const auto& [name, g] : plain) {
    EXPECT_LT(test::max_relative_error(parallel.at(name), g, 1e-4), 1e-4) << name;
  }
}

// Generation: at temperature 0 each id is the largest logit of the model's
// own forward over the sequence so far (the last `context` ids); a seed gives
// the same draws; the model's mode is left as it was.
TEST(GPT, GenerateFollowsTheModelsLogitsAndItsSeed) {
  nn::GPTOptions o;
  o.depth = 1;
  o.heads = 2;
  o.dim = 8;
  o.dropout = 0.2f;
  nn::GPT gpt(11, 4, o);
  const std::vector<int64_t> prompt = {3, 7};
  const std::vector<int64_t> greedy = gpt.generate(prompt, 6, 0.0);
  ASSERT_EQ(greedy.size(), 6u);
  EXPECT_TRUE(gpt.is_training());
  gpt.eval();
  std::vector<int64_t> seq = prompt;
  for (int64_t next : greedy) {
    const auto t = static_cast<int64_t>(std::min<size_t>(seq.size(), 4));
    const std::vector<float> window(seq.end() - t, seq.end());
    const std::vector<float> logits = gpt.forward(Tensor::from_host(window, {1, t})).to_vector();
    const auto last = logits.begin() + (t - 1) * 11;
    EXPECT_EQ(next, std::max_element(last, last + 11) - last);
    seq.push_back(next);
  }
  const auto a = gpt.generate(prompt, 20, 1.5, 9), b = gpt.generate(prompt, 20, 1.5, 9);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, gpt.generate(prompt, 20, 1.5, 10));
  for (int64_t id : a) EXPECT_TRUE(id >= 0 && id < 11) << id;
  EXPECT_THROW(gpt.generate({}, 3), ValueError);
  EXPECT_THROW(gpt.generate({11}, 3), ValueError);
  EXPECT_THROW(gpt.generate(prompt, 3, -1.0), ValueError);
}
