#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

// Per channel of [N, C, inner]: the mean and the biased variance, in double.
void moments(const std::vector<float>& x, int64_t n, int64_t c, int64_t inner,
             std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(static_cast<size_t>(c), 0.0);
  var.assign(static_cast<size_t>(c), 0.0);
  const double m = static_cast<double>(n * inner);
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i)
        mean[static_cast<size_t>(k)] += x[static_cast<size_t>((b * c + k) * inner + i)];
    mean[static_cast<size_t>(k)] /= m;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const double d =
            x[static_cast<size_t>((b * c + k) * inner + i)] - mean[static_cast<size_t>(k)];
        var[static_cast<size_t>(k)] += d * d;
      }
    var[static_cast<size_t>(k)] /= m;
  }
}

}  // namespace

TEST(BatchNorm, TrainingNormalisesWithTheBatchAndUpdatesTheRunningStatistics) {
  for (const Shape& shape : {Shape{8, 3}, Shape{4, 3, 5}, Shape{2, 3, 4, 3}}) {
    const int64_t n = shape[0], c = shape[1], inner = shape.numel() / (n * c);
    const Tensor x = random_tensor(shape, 3, -1.0f, 3.0f);
    const Tensor w = random_tensor({c}, 4, 0.5f, 1.5f), b = random_tensor({c}, 5);
    Tensor rm = random_tensor({c}, 6), rv = random_tensor({c}, 7, 0.5f, 2.0f);
    const std::vector<float> rm0 = rm.to_vector(), rv0 = rv.to_vector();
    const double momentum = 0.3, eps = 1e-3;
    const std::vector<float> y = batch_norm(x, rm, rv, w, b, true, momentum, eps).to_vector();
    std::vector<double> mean, var;
    moments(x.to_vector(), n, c, inner, mean, var);
    const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t k = (i / static_cast<size_t>(inner)) % static_cast<size_t>(c);
      const double expect = (xv[i] - mean[k]) / std::sqrt(var[k] + eps) * wv[k] + bv[k];
      EXPECT_NEAR(y[i], expect, 1e-5) << shape.str() << " " << i;
    }
    const double count = static_cast<double>(n * inner);
    for (size_t k = 0; k < static_cast<size_t>(c); ++k) {
      EXPECT_NEAR(rm.to_vector()[k], (1 - momentum) * rm0[k] + momentum * mean[k], 1e-6);
      EXPECT_NEAR(rv.to_vector()[k],
                  (1 - momentum) * rv0[k] + momentum * var[k] * count / (count - 1), 1e-5);
    }
    // Evaluation: the running statistics normalise.
    const std::vector<float> e = batch_norm(x, rm, rv, w, b, false, momentum, eps).to_vector();
    const std::vector<float> rmv = rm.to_vector(), rvv = rv.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t k = (i / static_cast<size_t>(inner)) % static_cast<size_t>(c);
      EXPECT_NEAR(e[i], (xv[i] - rmv[k]) / std::sqrt(rvv[k] + eps) * wv[k] + bv[k], 1e-5);
    }
  }
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  uint64_t seed = 20;
  for (const Shape& shape : {Shape{6, 2}, Shape{3, 2, 4}, Shape{2, 3, 3, 2}}) {
    const int64_t c = shape[1];
    for (bool affine : {true, false}) {
      std::vector<Tensor> in = {leaf(random_tensor(shape, seed++, -1.0f, 2.0f))};
      if (affine) {
        in.push_back(leaf(random_tensor({c}, seed++, 0.5f, 1.5f)));
        in.push_back(leaf(random_tensor({c}, seed++)));
      }
      // Training (batch statistics; no running ones, so every call is the same function).
      check_gradients(
          [&](const std::vector<Tensor>& t) {
            return batch_norm(t[0], Tensor(), Tensor(), affine ? t[1] : Tensor(),
                              affine ? t[2] : Tensor(), true, 0.1, 1e-5);
          },
          in, {}, "batch_norm training " + shape.str());
      // Evaluation.
      const Tensor rm = random_tensor({c}, seed++), rv = random_tensor({c}, seed++, 0.5f, 2.0f);
      check_gradients(
          [&](const std::vector<Tensor>& t) {
            return batch_norm(t[0], rm, rv, affine ? t[1] : Tensor(), affine ? t[2] : Tensor(),
                              false, 0.1, 1e-5);
          },
          in, {}, "batch_norm eval " + shape.str());
    }
  }
}

TEST(BatchNorm, BadArgumentsAreNamed) {
  const Tensor x = random_tensor({4, 3}, 1);
  EXPECT_THROW(batch_norm(x, Tensor::zeros({2}), Tensor::ones({2}), Tensor(), Tensor(), true),
               ShapeError);
  EXPECT_THROW(batch_norm(x.slice(0, 0, 1), Tensor(), Tensor(), Tensor(), Tensor(), true),
               ValueError);  // one value per channel
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), ValueError);
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), Tensor::ones({3}), Tensor(), true), ValueError);
  EXPECT_THROW(batch_norm(Tensor::zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true),
               ShapeError);
}

TEST(BatchNorm, TheFusedReluIsReluOfBatchNormForwardAndBackward) {
  // The fused op runs the same arithmetic as the two ops one after the other:
  // the same bits, in training and evaluation, affine or not; both pieces are
  // checked against finite differences above (and relu elsewhere).
  uint64_t seed = 40;
  for (const Shape& shape : {Shape{6, 3}, Shape{4, 3, 5, 7}}) {
    const int64_t c = shape[1];
    for (bool affine : {true, false}) {
      for (bool training : {true, false}) {
        const Tensor x0 = random_tensor(shape, seed++, -1.0f, 2.0f);
        const Tensor w0 = random_tensor({c}, seed++, 0.5f, 1.5f), b0 = random_tensor({c}, seed++);
        const Tensor rm = random_tensor({c}, seed++), rv = random_tensor({c}, seed++, 0.5f, 2.0f);
        const Tensor gy = random_tensor(shape, seed++);
        Tensor grads[2][3];
        Tensor outs[2];
        for (int fused = 0; fused < 2; ++fused) {
          const Tensor x = leaf(x0.clone()), w = leaf(w0.clone()), b = leaf(b0.clone());
          const Tensor m = training ? Tensor() : rm, v = training ? Tensor() : rv;
          const Tensor aw = affine ? w : Tensor(), ab = affine ? b : Tensor();
          outs[fused] = fused ? batch_norm_relu(x, m, v, aw, ab, training)
                              : relu(batch_norm(x, m, v, aw, ab, training));
          outs[fused].backward(gy);
          grads[fused][0] = x.grad();
          if (affine) {
            grads[fused][1] = w.grad();
            grads[fused][2] = b.grad();
          }
        }
        const std::string what =
            shape.str() + (affine ? " affine" : "") + (training ? " training" : " evaluation");
        EXPECT_EQ(outs[1].to_vector(), outs[0].to_vector()) << what;
        for (int k = 0; k < (affine ? 3 : 1); ++k) {
          EXPECT_EQ(grads[1][k].to_vector(), grads[0][k].to_vector()) << what << " gradient " << k;
        }
      }
    }
  }
}
