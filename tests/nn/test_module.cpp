#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kdp;

namespace {

using MyModel = test::ExplainerModel;

std::vector<std::string> names(const nn::NamedTensors& t) {
  std::vector<std::string> out;
  for (auto& [n, x] : t) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, DottedNamesMatchPyTorch) {
  auto model = std::make_shared<MyModel>();
  EXPECT_EQ(names(model->named_parameters()),
            (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(model->fc1->weight().shape(), Shape({100, 10}));
  EXPECT_EQ(model->fc1->weight().name(), "fc1.weight");
  EXPECT_EQ(model->num_parameters(), 10 * 100 + 100 + 100 * 10 + 10);

  auto seq = nn::mlp({4, 8, 3});
  EXPECT_EQ(names(seq->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq->to_string(),
            "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n"
            "  (2): Linear(in_features=8, out_features=3, bias=true)\n)");
}

TEST(Module, LinearInitialisationHasPyTorchsBounds) {
  nn::Linear fc(50, 200);
  const float bound = 1.0f / std::sqrt(50.0f);
  for (float v : fc.weight().to_vector()) ASSERT_LE(std::fabs(v), bound);
  for (float v : fc.bias().to_vector()) ASSERT_LE(std::fabs(v), bound);
  // U(-b, b) has variance b^2 / 3; 10000 samples give it to within a few percent.
  double var = 0;
  for (float v : fc.weight().to_vector()) var += static_cast<double>(v) * v;
  var /= 10000.0;
  EXPECT_NEAR(var, bound * bound / 3.0, 0.1 * bound * bound / 3.0);
}

TEST(Module, TrainEvalPropagatesToChildren) {
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 3), std::make_shared<nn::Dropout>(0.5f)});
  seq->eval();
  EXPECT_FALSE((*seq)[1]->is_training());
  Tensor x = Tensor::ones({4, 3});
  EXPECT_EQ(seq->forward(x).to_vector(), seq->forward(x).to_vector());  // no dropout in eval
  seq->train();
  EXPECT_TRUE((*seq)[1]->is_training());
}

TEST(Module, ZeroGradDropsOrZeroes) {
  auto model = std::make_shared<MyModel>();
  sum(model->forward(Tensor::ones({2, 10}))).backward();
  EXPECT_TRUE(model->fc1->weight().grad().defined());
  model->zero_grad(false);
  for (float v : model->fc1->weight().grad().to_vector()) ASSERT_EQ(v, 0.0f);
  model->zero_grad();
  EXPECT_FALSE(model->fc1->weight().grad().defined());
}

TEST(Module, StateDictRoundTrip) {
  auto a = std::make_shared<MyModel>();
  auto b = std::make_shared<MyModel>();
  Tensor x = test::random_tensor({3, 10}, 1);
  EXPECT_NE(a->forward(x).to_vector(), b->forward(x).to_vector());
  b->load_state_dict(a->state_dict());
  EXPECT_EQ(a->forward(x).to_vector(), b->forward(x).to_vector());
  // Values are copied, not shared.
  EXPECT_FALSE(a->fc1->weight().shares_storage(b->fc1->weight()));
}

TEST(Module, LoadStateDictReportsEveryProblemAtOnce) {
  auto model = std::make_shared<MyModel>();
  nn::StateDict dict = model->state_dict();
  dict.erase(dict.begin());                             // fc1.weight missing
  dict[0].second = Tensor::zeros({99});                 // fc1.bias of the wrong shape
  dict.emplace_back("fc3.weight", Tensor::zeros({1}));  // unexpected
  try {
    model->load_state_dict(dict);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing key 'fc1.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc1.bias' has shape [99]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected key 'fc3.weight'"), std::string::npos) << msg;
  }
}

TEST(Module, BuiltInCloneIsIndependent) {
  auto seq = nn::mlp({4, 5, 2});
  auto copy = seq->clone();
  Tensor x = test::random_tensor({3, 4}, 2);
  EXPECT_EQ(seq->forward(x).to_vector(), copy->forward(x).to_vector());
  auto p = copy->named_parameters();
  EXPECT_FALSE(p[0].second.shares_storage(seq->named_parameters()[0].second));
  EXPECT_EQ(names(p), names(seq->named_parameters()));
}

TEST(Module, UserModuleCloneOwnsItsParametersAndGradients) {
  auto model = std::make_shared<MyModel>();
  auto copy = model->clone();
  EXPECT_EQ(names(copy->named_parameters()), names(model->named_parameters()));
  Tensor x = test::random_tensor({3, 10}, 3);
  EXPECT_EQ(copy->forward(x).to_vector(), model->forward(x).to_vector());

  sum(copy->forward(x)).backward();
  EXPECT_FALSE(model->fc1->weight().grad().defined());  // the original got nothing
  EXPECT_TRUE(copy->named_parameters()[0].second.grad().defined());

  // Changing the copy leaves the original as it was.
  {
    NoGradGuard guard;
    Tensor(copy->named_parameters()[0].second).fill_(0.0f);
  }
  EXPECT_NE(copy->forward(x).to_vector(), model->forward(x).to_vector());
}

TEST(Module, RegisteringTwiceOrWithBadNamesFails) {
  nn::Module m("Custom");
  m.register_parameter("w", Tensor::zeros({2}));
  EXPECT_THROW(m.register_parameter("w", Tensor::zeros({2})), ValueError);
  EXPECT_THROW(m.register_parameter("a.b", Tensor::zeros({2})), ValueError);
  EXPECT_THROW(m.register_module("c", std::shared_ptr<nn::Module>()), StateError);
  EXPECT_THROW(m.forward(Tensor::zeros({2})), StateError);
}

TEST(Module, ToMovesParametersInPlace) {
  auto devs = Runtime::get().devices(2);
  auto model = std::make_shared<MyModel>();
  Tensor w = model->fc1->weight();
  model->to(devs[1]);
  EXPECT_EQ(w.device(), devs[1]);  // the same handle now lives there
  EXPECT_EQ(model->device(), devs[1]);
  Tensor y = model->forward(Tensor::ones({2, 10}, devs[1]));
  EXPECT_EQ(y.device(), devs[1]);
  EXPECT_THROW(model->forward(Tensor::ones({2, 10}, devs[0])), DeviceError);
}

TEST(Module, MakeActivationKnowsPyTorchsNames) {
  for (const char* n : {"relu", "leaky_relu", "tanh", "sigmoid", "gelu"}) {
    EXPECT_NO_THROW(nn::make_activation(n));
  }
  EXPECT_THROW(nn::make_activation("swish"), ValueError);
}

TEST(ParameterMemory, ALayerWhoseSizeOverflowsIsRefusedNamingIt) {
  try {
    nn::mlp({784, int64_t{1} << 62, 10});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer '0'"), std::string::npos) << m;
    EXPECT_NE(m.find("Linear(784, 4611686018427387904)"), std::string::npos) << m;
  }
  EXPECT_THROW(nn::Linear(int64_t{1} << 40, int64_t{1} << 30), ShapeError);
}

TEST(ParameterMemory, AModelBeyondTheDevicesMemoryIsRefusedBeforeAnyAllocation) {
  // 784-1000000-1000000-10: 4 TB of parameters, far beyond any test machine.
  const AllocatorStats before = Runtime::get().allocator().stats();
  try {
    nn::mlp({784, 1000000, 1000000, 10});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    // 4 bytes x ((784 + 1) x 1e6 + (1e6 + 1) x 1e6 + (1e6 + 1) x 10) values
    EXPECT_NE(m.find("4003184000040 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("'2', Linear(1000000, 1000000)"), std::string::npos) << m;
    EXPECT_NE(m.find(get_default_device().str()), std::string::npos) << m;
  }
  const AllocatorStats after = Runtime::get().allocator().stats();
  EXPECT_EQ(after.dedicated_allocations, before.dedicated_allocations);
  EXPECT_EQ(after.allocations, before.allocations);
  // One layer alone is checked the same way.
  EXPECT_THROW(nn::Linear(1000000, 1000000), ValueError);
}

TEST(ParameterMemory, TheCheckSumsLayersAgainstTheCapacity) {
  const Device& d = get_default_device();
  const size_t half = d.memory_capacity() / 2 + 1;
  EXPECT_NO_THROW(nn::check_parameters_fit({{"0", "a", half}}, d, "one half"));
  EXPECT_THROW(nn::check_parameters_fit({{"0", "a", half}, {"1", "b", half}}, d, "two halves"),
               ValueError);
  EXPECT_THROW(nn::check_parameters_fit({{"0", "a", SIZE_MAX}, {"1", "b", 2}}, d, "wraps"),
               ValueError);
}
