#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

// y[r][o] = sum_i x[r][i] * w[o][i] + b[o], in double.
std::vector<float> naive_linear(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int64_t rows, int64_t in,
                                int64_t out) {
  std::vector<float> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) {
        acc += static_cast<double>(x[static_cast<size_t>(r * in + i)]) *
               w[static_cast<size_t>(o * in + i)];
      }
      y[static_cast<size_t>(r * out + o)] = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace

TEST(Linear, ForwardAndBackwardMatchTripleLoops) {
  struct Case {
    int64_t rows, in, out;
  };
  uint64_t seed = 1;
  for (const Case c : {Case{1, 3, 2}, Case{7, 5, 3}, Case{4, 10, 100}, Case{64, 10, 1}}) {
    Tensor x = leaf(random_tensor({c.rows, c.in}, seed++));
    Tensor w = leaf(random_tensor({c.out, c.in}, seed++));
    Tensor b = leaf(random_tensor({c.out}, seed++));
    Tensor y = linear(x, w, b);
    ASSERT_EQ(y.shape(), Shape({c.rows, c.out}));
    const auto xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    // float32 GEMM vs double reference: error grows with the inner dimension (<= 10 here).
    test::expect_close(y.to_vector(), naive_linear(xv, wv, bv, c.rows, c.in, c.out), 1e-5, 1e-5,
                       "forward");

    const std::vector<float> g = test::random_values(c.rows * c.out, seed++);
    y.backward(Tensor::from_host(g, y.shape()));
    // dx = g w, dw = g^T x, db = column sums of g.
    std::vector<float> dx(static_cast<size_t>(c.rows * c.in), 0.0f);
    std::vector<float> dw(static_cast<size_t>(c.out * c.in), 0.0f);
    std::vector<float> db(static_cast<size_t>(c.out), 0.0f);
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t o = 0; o < c.out; ++o) {
        const float go = g[static_cast<size_t>(r * c.out + o)];
        db[static_cast<size_t>(o)] += go;
        for (int64_t i = 0; i < c.in; ++i) {
          dx[static_cast<size_t>(r * c.in + i)] += go * wv[static_cast<size_t>(o * c.in + i)];
          dw[static_cast<size_t>(o * c.in + i)] += go * xv[static_cast<size_t>(r * c.in + i)];
        }
      }
    }
    test::expect_close(x.grad().to_vector(), dx, 1e-4, 1e-4, "dx");
    test::expect_close(w.grad().to_vector(), dw, 1e-4, 1e-4, "dw");
    test::expect_close(b.grad().to_vector(), db, 1e-4, 1e-4, "db");
  }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Tensor x = leaf(random_tensor({3, 4}, 1));
  Tensor w = leaf(random_tensor({5, 4}, 2));
  Tensor b = leaf(random_tensor({5}, 3));
  check_gradients([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {x, w, b}, {}, "linear");
  check_gradients([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w}, {},
                  "linear without bias");
  // Inputs of rank 3 are batches of rows.
  Tensor x3 = leaf(random_tensor({2, 3, 4}, 4));
  check_gradients([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                  {x3, w, b}, {}, "linear rank 3");
}

TEST(Linear, FusedLinearReluEqualsTheTwoOps) {
  // Values and gradients against relu(linear(...)), with and without bias,
  // for inputs of rank 2 and 3, with more columns than one block of 64.
  for (const Shape& xs : {Shape{6, 4}, Shape{2, 3, 4}}) {
    for (int64_t out_f : {5, 70}) {
      for (bool bias : {true, false}) {
        Tensor x1 = leaf(random_tensor(xs, 1)), x2 = leaf(x1.detach().clone());
        Tensor w1 = leaf(random_tensor({out_f, 4}, 2)), w2 = leaf(w1.detach().clone());
        Tensor b1 = bias ? leaf(random_tensor({out_f}, 3)) : Tensor();
        Tensor b2 = bias ? leaf(b1.detach().clone()) : Tensor();
        Tensor fused = linear_relu(x1, w1, b1), plain = relu(linear(x2, w2, b2));
        ASSERT_EQ(fused.shape(), plain.shape());
        test::expect_close(fused.to_vector(), plain.to_vector(), 1e-6, 1e-6, "values");
        const Tensor g = random_tensor(fused.shape(), 4);
        fused.backward(g);
        plain.backward(g);
        test::expect_close(x1.grad().to_vector(), x2.grad().to_vector(), 1e-6, 1e-6, "dx");
        test::expect_close(w1.grad().to_vector(), w2.grad().to_vector(), 1e-6, 1e-6, "dw");
        if (bias)
          test::expect_close(b1.grad().to_vector(), b2.grad().to_vector(), 1e-6, 1e-6, "db");
      }
    }
  }
  Tensor x = leaf(random_tensor({3, 4}, 5)), w = leaf(random_tensor({5, 4}, 6));
  Tensor b = leaf(random_tensor({5}, 7));
  check_gradients([](const std::vector<Tensor>& in) { return linear_relu(in[0], in[1], in[2]); },
                  {x, w, b}, {}, "linear_relu");
  EXPECT_THROW(linear_relu(x, random_tensor({5, 3}, 8)), ShapeError);
}

TEST(Linear, SequentialFusesLinearAndReluWithoutChangingNames) {
  manual_seed(3);
  auto net = nn::mlp({4, 8, 3});
  std::vector<std::string> names;
  for (const auto& [name, p] : net->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  const Tensor x = random_tensor({5, 4}, 9);
  const auto& l0 = static_cast<const nn::Linear&>(*(*net)[0]);
  const auto& l2 = static_cast<const nn::Linear&>(*(*net)[2]);
  const Tensor want = linear(relu(linear(x, l0.weight(), l0.bias())), l2.weight(), l2.bias());
  test::expect_close(net->forward(x).to_vector(), want.to_vector(), 1e-6, 1e-6);
  EXPECT_EQ(net->forward(x).grad_fn()->next_edges()[0].node->name(),
            std::string("kdp::linear_relu"));
}

TEST(Linear, MatmulGradientsMatchFiniteDifferences) {
  Tensor a = leaf(random_tensor({3, 4}, 5));
  Tensor b = leaf(random_tensor({4, 2}, 6));
  check_gradients([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}, {},
                  "matmul");
  EXPECT_THROW(matmul(a, a), ShapeError);
}

TEST(Linear, MismatchedShapesNameTheShapes) {
  Tensor x = Tensor::zeros({64, 12});
  Tensor w = Tensor::zeros({100, 10});
  try {
    linear(x, w);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kdp::linear"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[64, 12]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[100, 10]"), std::string::npos) << msg;
  }
  EXPECT_THROW(linear(Tensor::zeros({4, 10}), w, Tensor::zeros({99})), ShapeError);
  EXPECT_THROW(linear(Tensor::zeros({4, 10}), Tensor::zeros({10})), ShapeError);
}

namespace {

// a [n, k] times b [k, m] in double, from host copies at offsets.
std::vector<double> naive_product(const std::vector<float>& a, size_t a_at,
                                  const std::vector<float>& b, size_t b_at, int64_t n, int64_t k,
                                  int64_t m) {
  std::vector<double> c(size_t(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        c[size_t(i * m + j)] += double(a[a_at + size_t(i * k + p)]) * b[b_at + size_t(p * m + j)];
      }
    }
  }
  return c;
}

}  // namespace

// [2, 1, 3, 4] times [5, 4, 2]: the batch broadcasts to [2, 5]; every
// product is the triple loop's of the matrices its batch index picks.
TEST(Linear, MatmulBroadcastsBatchesAsTorch) {
  const Tensor a = random_tensor({2, 1, 3, 4}, 21);
  const Tensor b = random_tensor({5, 4, 2}, 22);
  const Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 2}));
  const auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      const auto want = naive_product(av, size_t(i * 12), bv, size_t(j * 8), 3, 4, 2);
      for (size_t e = 0; e < want.size(); ++e) {
        EXPECT_NEAR(cv[size_t((i * 5 + j) * 6) + e], want[e], 1e-5) << i << "," << j;
      }
    }
  }
  // A batch times a matrix, a vector on either side, two vectors.
  const Tensor m = random_tensor({4, 2}, 23);
  EXPECT_EQ(matmul(a, m).shape(), (Shape{2, 1, 3, 2}));
  test::expect_close(matmul(a, m).to_vector(),
                     bmm(a.reshape({2, 3, 4}), expand(m, {2, 4, 2})).to_vector(), 1e-6, 1e-6);
  const Tensor v = random_tensor({4}, 24);
  EXPECT_EQ(matmul(a, v).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(matmul(v, b).shape(), (Shape{5, 2}));
  const Tensor dot = matmul(v, v);
  EXPECT_EQ(dot.dim(), 0);
  double want = 0.0;
  for (float x : v.to_vector()) want += double(x) * x;
  EXPECT_NEAR(dot.item(), want, 1e-5);
}

TEST(Linear, BatchedMatmulGradientsMatchFiniteDifferences) {
  Tensor a = leaf(random_tensor({2, 1, 3, 4}, 25));
  Tensor b = leaf(random_tensor({3, 4, 2}, 26));
  check_gradients([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b}, {},
                  "broadcast matmul");
  Tensor x = leaf(random_tensor({2, 3, 4}, 27));
  Tensor y = leaf(random_tensor({2, 4, 5}, 28));
  check_gradients([](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }, {x, y}, {},
                  "bmm");
  Tensor m = leaf(random_tensor({4, 3}, 29));
  check_gradients([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {x, m}, {},
                  "batch times matrix");
  Tensor v = leaf(random_tensor({4}, 30));
  check_gradients([](const std::vector<Tensor>& in) { return matmul(in[1], in[0]); }, {y, v}, {},
                  "vector times batch");
}

TEST(Linear, BatchedMatmulShapesAreNamed) {
  try {
    matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 6}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 5, 6]"), std::string::npos) << msg;
  }
  EXPECT_THROW(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), ShapeError)
      << "batches 2 and 3 do not broadcast";
  EXPECT_THROW(bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), ShapeError);
  EXPECT_THROW(bmm(Tensor::zeros({3, 4}), Tensor::zeros({4, 5})), ShapeError);
  EXPECT_THROW(matmul(Tensor::scalar(1.0f), Tensor::zeros({2})), ShapeError);
}
