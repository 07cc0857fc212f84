#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;
using kdp::test::check_gradients;
using kdp::test::leaf;
using kdp::test::random_tensor;

namespace {

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

struct BinaryCase {
  const char* name;
  BinaryFn fn;
};

const BinaryCase kBinary[] = {
    {"add", &kdp::add}, {"sub", &kdp::sub}, {"mul", &kdp::mul}, {"div", &kdp::div}};

// Shape pairs: equal, scalar on either side, row and column broadcast, batch 1,
// broadcasting on both sides, and at ranks 5 and 6 (volumes).
const std::vector<std::pair<Shape, Shape>> kShapes = {{{3, 4}, {3, 4}},
                                                      {{3, 4}, {}},
                                                      {{}, {2, 5}},
                                                      {{3, 4}, {4}},
                                                      {{3, 4}, {3, 1}},
                                                      {{1, 4}, {1, 4}},
                                                      {{2, 1, 3}, {4, 1}},
                                                      {{5}, {2, 1}},
                                                      {{2, 3, 4}, {3, 4}},
                                                      {{2, 1, 3, 1, 2}, {3, 4, 1}},
                                                      {{2, 1, 2, 1, 1, 3}, {2, 1, 2, 1, 1}}};

}  // namespace

TEST(Elementwise, BinaryGradientsMatchFiniteDifferences) {
  uint64_t seed = 10;
  for (const auto& op : kBinary) {
    for (const auto& [sa, sb] : kShapes) {
      // Divisors are kept away from 0 so that 1/b is smooth within eps.
      Tensor a = leaf(random_tensor(sa, seed++, -1.0f, 1.0f));
      Tensor b = leaf(random_tensor(sb, seed++, 0.5f, 1.5f));
      check_gradients([&](const std::vector<Tensor>& in) { return op.fn(in[0], in[1]); }, {a, b},
                      {}, std::string(op.name) + " " + sa.str() + " " + sb.str());
    }
  }
}

TEST(Elementwise, BinaryForwardBroadcastsLikeNumpy) {
  Tensor a = Tensor::from_host({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(add(a, Tensor::from_host({10, 20, 30}, {3})).to_vector(),
            (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(mul(a, Tensor::from_host({2, 3}, {2, 1})).to_vector(),
            (std::vector<float>{2, 4, 6, 12, 15, 18}));
  EXPECT_EQ(sub(Tensor::from_host({1, 2}, {2, 1}), Tensor::from_host({10, 20, 30}, {3})).shape(),
            Shape({2, 3}));
  EXPECT_EQ((2.0f - a).to_vector(), (std::vector<float>{1, 0, -1, -2, -3, -4}));
  const Tensor column = Tensor::from_host({1, 2}, {1, 1, 1, 1, 2, 1});  // rank 6
  const Tensor sum = add(column, Tensor::from_host({10, 20, 30}, {3}));
  EXPECT_EQ(sum.shape(), Shape({1, 1, 1, 1, 2, 3}));
  EXPECT_EQ(sum.to_vector(), (std::vector<float>{11, 21, 31, 12, 22, 32}));
  EXPECT_EQ((a / 2.0f).to_vector(), (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
}

TEST(Elementwise, MismatchedShapesThrowNamingOpAndShapes) {
  Tensor a = Tensor::zeros({64, 10});
  Tensor b = Tensor::zeros({32, 10});
  for (const auto& op : kBinary) {
    try {
      op.fn(a, b);
      FAIL() << op.name << ": expected ShapeError";
    } catch (const ShapeError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("kdp::") + op.name), std::string::npos) << msg;
      EXPECT_NE(msg.find("[64, 10]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[32, 10]"), std::string::npos) << msg;
    }
  }
}

TEST(Elementwise, TensorsOnDifferentDevicesThrow) {
  auto devs = Runtime::get().devices(2);
  Tensor a = Tensor::ones({2, 2}, devs[0]);
  Tensor b = Tensor::ones({2, 2}, devs[1]);
  for (const auto& op : kBinary) {
    try {
      op.fn(a, b);
      FAIL() << op.name << ": expected DeviceError";
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("device 0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("device 1"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(linear(a, b), DeviceError);
  EXPECT_THROW(mse_loss(a, b), DeviceError);
}

TEST(Elementwise, UnaryGradientsMatchFiniteDifferences) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> fn;
    float lo, hi;
    std::vector<float> kinks;
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, -2, 2, {}},
      {"square", [](const Tensor& x) { return square(x); }, -2, 2, {}},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0f); }, -1.5, 1.5, {}},
      {"pow 0.5", [](const Tensor& x) { return pow(x, 0.5f); }, 0.5, 2, {}},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2, {}},
      {"log", [](const Tensor& x) { return log(x); }, 0.5, 3, {}},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.5, 3, {}},
      {"abs", [](const Tensor& x) { return abs(x); }, -2, 2, {0.0f}},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5f, 0.7f); }, -2, 2, {-0.5f, 0.7f}},
      {"add scalar", [](const Tensor& x) { return x + 3.0f; }, -2, 2, {}},
      {"rsub scalar", [](const Tensor& x) { return 3.0f - x; }, -2, 2, {}},
      {"mul scalar", [](const Tensor& x) { return x * -1.5f; }, -2, 2, {}},
      {"div scalar", [](const Tensor& x) { return x / 4.0f; }, -2, 2, {}},
      {"rdiv scalar", [](const Tensor& x) { return 2.0f / x; }, 0.5, 2, {}},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) {
    for (const Shape& shape : {Shape{7}, Shape{1, 5}, Shape{3, 4}, Shape{2, 3, 2}}) {
      Tensor x = leaf(test::random_away_from(shape, seed++, c.kinks, 0.02f, c.lo, c.hi));
      check_gradients([&](const std::vector<Tensor>& in) { return c.fn(in[0]); }, {x}, {},
                      std::string(c.name) + " " + shape.str());
    }
  }
}

TEST(Elementwise, ClampRejectsInvertedBounds) {
  EXPECT_THROW(clamp(Tensor::zeros({2}), 1.0f, 0.0f), ValueError);
}
