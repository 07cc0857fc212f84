#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

using namespace kdp;

TEST(Conv2dLayer, ShapesKeysAndPyTorchsInitialisation) {
  manual_seed(3);
  nn::Conv2d conv(4, 6, {3, 5}, 1, 0, 1, 2);
  EXPECT_EQ(conv.weight().shape(), Shape({6, 2, 3, 5}));
  EXPECT_EQ(conv.bias().shape(), Shape({6}));
  const nn::StateDict sd = conv.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "weight");
  EXPECT_EQ(sd[1].first, "bias");
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups x kh x kw = 30.
  const float bound = 1.0f / std::sqrt(30.0f);
  float largest = 0.0f;
  for (float v : conv.weight().to_vector()) {
    EXPECT_LE(std::fabs(v), bound);
    largest = std::max(largest, std::fabs(v));
  }
  EXPECT_GT(largest, 0.8f * bound);  // 180 draws spread over the interval
  for (float v : conv.bias().to_vector()) EXPECT_LE(std::fabs(v), bound);
  EXPECT_EQ(conv.forward(Tensor::zeros({2, 4, 7, 9})).shape(), Shape({2, 6, 5, 5}));
  EXPECT_EQ(nn::Conv2d(1, 32, 3).to_string(), "Conv2d(1, 32, kernel_size=3, stride=1)");
  // PyTorch's reprs: what differs from the defaults, for each dimensionality.
  EXPECT_EQ(nn::Conv2d(2, 4, {3, 5}, 2, 1, 1, 2, false).to_string(),
            "Conv2d(2, 4, kernel_size=(3, 5), stride=2, padding=1, groups=2, bias=false)");
  EXPECT_EQ(nn::Conv1d(2, 4, 3, 1, 0, 2).to_string(),
            "Conv1d(2, 4, kernel_size=3, stride=1, dilation=2)");
  EXPECT_EQ(nn::Conv3d(1, 8, {1, 3, 3}, 1, {0, 1, 1}).to_string(),
            "Conv3d(1, 8, kernel_size=(1, 3, 3), stride=1, padding=(0, 1, 1))");
  EXPECT_THROW(nn::Conv3d(1, 8, {0, 3, 3}), ValueError);      // a kernel of depth 0
  EXPECT_THROW(nn::Conv2d(3, 4, 3, 1, 0, 1, 2), ValueError);  // 3 channels, 2 groups
  EXPECT_FALSE(nn::Conv2d(2, 2, 1, 1, 0, 1, 1, false).bias().defined());
}

TEST(Conv2dLayer, CloneCopiesTheWeights) {
  nn::Conv2d conv(2, 3, 3, 2, 1);
  auto copy = std::dynamic_pointer_cast<nn::Conv2d>(conv.clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->weight().to_vector(), conv.weight().to_vector());
  EXPECT_FALSE(copy->weight().shares_storage(conv.weight()));
  EXPECT_EQ(copy->stride(), Size2(2));
  // The family's other members clone alike, with their own sizes.
  nn::Conv1d line(2, 3, 5, 2, 1);
  auto line_copy = std::dynamic_pointer_cast<nn::Conv1d>(line.clone());
  ASSERT_TRUE(line_copy);
  EXPECT_EQ(line_copy->weight().shape(), Shape({3, 2, 5}));
  EXPECT_EQ(line_copy->weight().to_vector(), line.weight().to_vector());
  EXPECT_EQ(line_copy->padding(), 1);
  EXPECT_EQ(line.state_dict().size(), 2u);
}

TEST(PoolingLayers, ForwardAsTheFunctions) {
  const Tensor x = test::random_tensor({2, 3, 8, 6}, 1);
  EXPECT_EQ(nn::MaxPool2d(2).forward(x).to_vector(), max_pool2d(x, 2).to_vector());
  EXPECT_EQ(nn::AvgPool2d(3, 1, 1).forward(x).to_vector(), avg_pool2d(x, 3, 1, 1).to_vector());
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1).forward(x).shape(), Shape({2, 3, 1, 1}));
  EXPECT_TRUE(nn::MaxPool2d(2).state_dict().empty());
  // One family: PyTorch's names and reprs in every dimensionality, and a
  // clone that pools as the original does.
  EXPECT_EQ(nn::MaxPool1d(2).to_string(),
            "MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)");
  EXPECT_EQ(nn::AvgPool3d(Size3(1, 2, 2)).to_string(),
            "AvgPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=0)");
  EXPECT_EQ(nn::MaxPool2d(3, 1, 1, 2, true).to_string(),
            "MaxPool2d(kernel_size=3, stride=1, padding=1, dilation=2, ceil_mode=true)");
  const auto copy = nn::AvgPool2d(3, 1, 1, false, false).clone();
  EXPECT_EQ(copy->type_name(), "AvgPool2d");
  EXPECT_EQ(copy->forward(x).to_vector(), avg_pool2d(x, 3, 1, 1, false, false).to_vector());
}

TEST(BatchNormLayer, BuffersKeysAndModes) {
  nn::BatchNorm2d bn(3);
  std::vector<std::string> keys;
  for (const auto& [k, t] : bn.state_dict()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                            "num_batches_tracked"}));
  EXPECT_EQ(bn.num_batches_tracked().shape(), Shape{});
  const Tensor x = test::random_tensor({4, 3, 2, 2}, 2, 0.0f, 4.0f);
  bn.forward(x);
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 2.0f);
  // momentum 0.1 twice from mean 0: 0.19 of the batch mean.
  std::vector<double> sum(3, 0.0);
  const std::vector<float> xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) sum[(i / 4) % 3] += xv[i];
  for (size_t c = 0; c < 3; ++c)
    EXPECT_NEAR(bn.running_mean().to_vector()[c], 0.19 * sum[c] / 16, 1e-5);
  bn.eval();
  const std::vector<float> before = bn.running_mean().to_vector();
  bn.forward(x);
  EXPECT_EQ(bn.running_mean().to_vector(), before);  // evaluation updates nothing
  EXPECT_EQ(bn.num_batches_tracked().item(), 2.0f);
  EXPECT_THROW(bn.forward(Tensor::zeros({4, 3})), ShapeError);
  EXPECT_THROW(bn.forward(Tensor::zeros({4, 2, 2, 2})), ShapeError);
  EXPECT_THROW(nn::BatchNorm1d(3).forward(Tensor::zeros({4, 3, 2, 2})), ShapeError);
}

TEST(BatchNormLayer, MomentumNoneIsTheCumulativeAverage) {
  nn::BatchNormOptions o;
  o.momentum = std::nullopt;
  nn::BatchNorm1d bn(2, o);
  double total = 0;
  for (int step = 1; step <= 4; ++step) {
    const Tensor x = test::random_tensor({5, 2}, static_cast<uint64_t>(step));
    const std::vector<float> v = x.to_vector();
    double m = 0;
    for (int i = 0; i < 5; ++i) m += v[static_cast<size_t>(2 * i)];
    total += m / 5;
    bn.forward(x);
    EXPECT_NEAR(bn.running_mean().to_vector()[0], total / step, 1e-5) << step;
  }
}

TEST(BatchNormLayer, WithoutRunningStatisticsTheBatchNormalisesInBothModes) {
  nn::BatchNormOptions o;
  o.track_running_stats = false;
  o.affine = false;
  nn::BatchNorm1d bn(2, o);
  EXPECT_TRUE(bn.state_dict().empty());
  const Tensor x = test::random_tensor({6, 2}, 9);
  const std::vector<float> train = bn.forward(x).to_vector();
  bn.eval();
  EXPECT_EQ(bn.forward(x).to_vector(), train);
}

TEST(BatchNormLayer, ACnnWithBatchNormLearns) {
  // conv -> BN -> ReLU -> pool -> flatten -> linear on a separable toy task:
  // the label is whether the image's left half is brighter.
  manual_seed(5);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 4 * 4, 2)});
  std::vector<float> images, labels;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int i = 0; i < 64; ++i) {
    const bool left = i % 2 == 0;
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) images.push_back(u(gen) + ((x < 4) == left ? 1.0f : 0.0f));
    labels.push_back(left ? 1.0f : 0.0f);
  }
  const Tensor x = Tensor::from_host(images, {64, 1, 8, 8});
  const Tensor t = Tensor::from_host(labels, {64});
  optim::SGD opt(net->named_parameters(), optim::SGDOptions{0.1, 0.9});
  float first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(net->forward(x), t);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.25f * first);
  net->eval();
  NoGradGuard no_grad;
  EXPECT_EQ(count_correct(net->forward(x), t).item(), 64.0f);
}
