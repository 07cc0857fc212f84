#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

TEST(Embedding, PicksRowsForIdsOfAnyShape) {
  const Tensor w = random_tensor({5, 3}, 51);
  const Tensor ids = Tensor::from_host({4, 0, 2, 2, 1, 4}, {2, 3});
  const Tensor out = embedding(ids, w);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3}));
  const auto wv = w.to_vector(), ov = out.to_vector(), iv = ids.to_vector();
  for (size_t i = 0; i < iv.size(); ++i) {
    for (size_t j = 0; j < 3; ++j) EXPECT_EQ(ov[i * 3 + j], wv[size_t(iv[i]) * 3 + j]);
  }
  EXPECT_EQ(embedding(Tensor::scalar(3.0f), w).shape(), (Shape{3}));
}

// Closed form: a row's gradient is the sum of the output gradient's rows whose
// id picked it (row 2 twice, row 3 never), and none for the padding row.
TEST(Embedding, RepeatedIdsAddTheirGradientsAndPaddingGetsNone) {
  Tensor w = leaf(random_tensor({5, 2}, 52));
  const Tensor ids = Tensor::from_host({2, 0, 2, 4, 1}, {5});
  const Tensor g = Tensor::from_host({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 2});
  embedding(ids, w, 1).backward(g);
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3, 4, 0, 0, 6, 8, 0, 0, 7, 8}));
  w.set_grad(Tensor());
  embedding(ids, w, -1).backward(g);  // padding_idx -1 is row 4, as in PyTorch
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{3, 4, 9, 10, 6, 8, 0, 0, 0, 0}));
  check_gradients([&](const std::vector<Tensor>& in) { return embedding(ids, in[0]) * 1.5f; }, {w},
                  {}, "embedding");
}

TEST(Embedding, BadIdsAreNamedWithTheirPosition) {
  const Tensor w = Tensor::zeros({4, 2});
  for (float bad : {4.0f, -1.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    const Tensor ids = Tensor::from_host({0, 1, 2, bad, 3, 0}, {2, 3});
    try {
      embedding(ids, w);
      FAIL() << "expected ValueError for id " << bad;
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("at [1, 0]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 4)"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(embedding(Tensor::zeros({2}), Tensor::zeros({4})), ShapeError);
  EXPECT_THROW(embedding(Tensor::zeros({2}), w, 4), ValueError);
}

TEST(EmbeddingModule, WeightAsPyTorchHasIt) {
  nn::Embedding emb(6, 3, 2);
  const auto params = emb.named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[0].second.shape(), (Shape{6, 3}));
  const auto wv = emb.weight().to_vector();
  for (size_t j = 0; j < 3; ++j) EXPECT_EQ(wv[2 * 3 + j], 0.0f) << "the padding row is zero";
  double sq = 0.0;
  for (float v : wv) sq += double(v) * v;
  EXPECT_GT(sq, 0.5) << "the other rows are drawn from N(0, 1)";
  EXPECT_EQ(emb.to_string(), "Embedding(6, 3, padding_idx=2)");
  EXPECT_EQ(nn::Embedding(4, 2, -1).padding_idx(), 3);
  const Tensor ids = Tensor::from_host({5, 2, 0}, {3});
  EXPECT_EQ(emb.clone()->forward(ids).to_vector(), emb.forward(ids).to_vector());
  EXPECT_THROW(nn::Embedding(0, 3), ShapeError);
  EXPECT_THROW(nn::Embedding(4, 3, 4), ValueError);
}
