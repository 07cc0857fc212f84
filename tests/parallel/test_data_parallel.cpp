#include <gtest/gtest.h>

#include <mutex>

#include "kernels/product_policy.hpp"
#include "test_util.hpp"

using namespace kdp;

namespace {

using MyModel = test::ExplainerModel;

// Two inputs merged inside: tanh(A a) * (B b) summed over features, plus C.
class TwoInputs : public nn::Module {
 public:
  TwoInputs() : Module("TwoInputs") {
    a = register_module("a", std::make_shared<nn::Linear>(6, 8));
    b = register_module("b", std::make_shared<nn::Linear>(3, 8));
    c = register_module("c", std::make_shared<nn::Linear>(8, 2));
  }
  Tensor forward(const nn::TensorList& in) override {
    return c->forward(kdp::tanh(a->forward(in[0])) * b->forward(in[1]));
  }
  using Module::forward;
  std::shared_ptr<nn::Linear> a, b, c;
};

// A module that fails on the device with index 2.
class FailsOnDevice2 : public nn::Module {
 public:
  FailsOnDevice2() : Module("FailsOnDevice2") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 4));
  }
  Tensor forward(const Tensor& x) override {
    if (x.device().index() == 2) throw ValueError("boom in the forward");
    return fc->forward(x);
  }
  using Module::forward;
  std::shared_ptr<nn::Linear> fc;
};

// Records the execution context each replica's forward ran in.
class RecordsContext : public nn::Module {
 public:
  RecordsContext() : Module("RecordsContext") {}
  Tensor forward(const Tensor& x) override {
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(ExecutionContext::current());
    return x;
  }
  using Module::forward;
  std::mutex mutex;
  std::vector<ExecutionContext> seen;
};

// A product policy that takes nothing (its presence is what is carried).
class NoProducts : public detail::ProductPolicy {
 public:
  int64_t batch_rows() const override { return 0; }
  int threads() const override { return 1; }
  bool take_linear_gradients(const TensorImpl*, const TensorImpl*, const Tensor&, const Tensor&,
                             Precision) override {
    return false;
  }
};

struct Result {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
};

// Output and parameter gradients of sum(out * w) for fixed weights w.
Result run(const std::shared_ptr<nn::Module>& params_of, const std::function<Tensor()>& forward) {
  params_of->zero_grad();
  Tensor out = forward();
  const auto w = test::random_values(out.numel(), 99);
  out.backward(Tensor::from_host(w, out.shape(), out.device()));
  Result r{out.to_vector(), {}};
  for (auto& [name, p] : params_of->named_parameters()) r.grads.push_back(p.grad().to_vector());
  return r;
}

// Splitting the batch changes only the order in which float32 partial sums of
// the weight gradients are added (over batch chunks instead of rows), so the
// results agree to float rounding of sums of at most 64 terms: well below 1e-5
// relative, with an absolute floor for entries that cancel to near zero.
void expect_same(const Result& a, const Result& b, const std::string& what) {
  test::expect_close(a.output, b.output, 1e-6, 1e-5, what + " output");
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    test::expect_close(a.grads[i], b.grads[i], 1e-6, 1e-5, what + " grad " + std::to_string(i));
  }
}

}  // namespace

TEST(DataParallel, MatchesTheModelOnTheWholeBatch) {
  for (int n : {1, 2, 3, 4}) {
    const auto devs = devices(n);
    for (int64_t batch : {int64_t{1}, int64_t{n - 1}, int64_t{n}, int64_t{7}, int64_t{64}}) {
      if (batch < 1) continue;
      const std::string what = "n=" + std::to_string(n) + " batch=" + std::to_string(batch);
      manual_seed(1);
      auto model = std::make_shared<MyModel>();
      model->to(devs[0]);
      Tensor x = test::random_tensor({batch, 10}, 5, -1.0f, 1.0f, devs[0]);
      const Result plain = run(model, [&] { return model->forward(x); });
      auto dp = std::make_shared<DataParallel>(model, devs);
      const Result parallel = run(model, [&] { return dp->forward(x); });
      expect_same(parallel, plain, what);
    }
  }
}

// The replicas run on their own threads in the caller's autocast precision:
// the bf16 forward and backward of the split batch are those of the whole
// batch (bf16 rounds each operand alike; only fp32 sums change order), and
// not those of fp32.
TEST(DataParallel, CarriesAutocastIntoTheReplicas) {
  for (int n : {2, 4}) {
    const auto devs = devices(n);
    manual_seed(1);
    auto model = std::make_shared<MyModel>();
    model->to(devs[0]);
    Tensor x = test::random_tensor({64, 10}, 5, -1.0f, 1.0f, devs[0]);
    const Result fp32 = run(model, [&] { return model->forward(x); });
    autocast bf16(Precision::bf16);
    const Result plain = run(model, [&] { return model->forward(x); });
    auto dp = std::make_shared<DataParallel>(model, devs);
    const Result parallel = run(model, [&] { return dp->forward(x); });
    expect_same(parallel, plain, "bf16 n=" + std::to_string(n));
    float largest = 0.0f;
    for (size_t i = 0; i < fp32.output.size(); ++i) {
      largest = std::max(largest, std::abs(fp32.output[i] - parallel.output[i]));
    }
    EXPECT_GT(largest, 1e-4f) << "the replicas computed in fp32";
  }
}

// parallel_apply gives each replica's thread the caller's whole execution
// context (grad mode, precision, per-sample draws, the product policy), and
// the threads go back to their own afterwards.
TEST(DataParallel, CarriesTheWholeExecutionContextIntoTheReplicas) {
  const auto devs = devices(2);
  auto recorder = std::make_shared<RecordsContext>();
  const std::vector<std::shared_ptr<nn::Module>> replicas{recorder, recorder};
  const std::vector<nn::TensorList> inputs{{Tensor::zeros({1, 2}, devs[0])},
                                           {Tensor::zeros({1, 2}, devs[1])}};
  NoProducts policy;
  {
    NoGradGuard no_grad;
    autocast bf16(Precision::bf16);
    SampleDraws draws(7, {1});
    ExecutionContext with = ExecutionContext::current();
    with.products = &policy;
    ExecutionScope scope(with);
    parallel_apply(replicas, inputs, devs);
    ASSERT_EQ(recorder->seen.size(), 2u);
    for (const ExecutionContext& c : recorder->seen) {
      EXPECT_FALSE(c.grad_enabled);
      EXPECT_EQ(c.precision, Precision::bf16);
      EXPECT_EQ(c.sample_draws, &draws);
      EXPECT_EQ(c.products, &policy);
    }
  }
  const ExecutionContext after = ExecutionContext::current();
  EXPECT_TRUE(after.grad_enabled && after.precision == Precision::fp32 &&
              after.sample_draws == nullptr && after.products == nullptr)
      << "the caller's scopes restore its context";
  recorder->seen.clear();
  parallel_apply(replicas, inputs, devs);
  ASSERT_EQ(recorder->seen.size(), 2u);
  for (const ExecutionContext& c : recorder->seen) {
    EXPECT_TRUE(c.grad_enabled && c.precision == Precision::fp32 && c.sample_draws == nullptr &&
                c.products == nullptr)
        << "a replica thread kept an earlier caller's context";
  }
}

TEST(DataParallel, CustomModuleWithTwoInputs) {
  for (int n : {2, 3, 4}) {
    const auto devs = devices(n);
    manual_seed(2);
    auto model = std::make_shared<TwoInputs>();
    model->to(devs[0]);
    for (int64_t batch : {int64_t{n - 1}, int64_t{7}, int64_t{64}}) {
      Tensor a = test::random_tensor({batch, 6}, 6, -1.0f, 1.0f, devs[0]);
      Tensor b = test::random_tensor({batch, 3}, 7, -1.0f, 1.0f, devs[0]);
      const Result plain = run(model, [&] { return model->forward(nn::TensorList{a, b}); });
      const Result parallel = run(model, [&] {
        return data_parallel(model, nn::TensorList{a, b}, devs);
      });
      expect_same(parallel, plain, "two inputs n=" + std::to_string(n));
    }
  }
}

TEST(DataParallel, TwentySgdStepsMatchThePlainModel) {
  const auto devs = devices(3);
  manual_seed(3);
  auto plain = nn::mlp({10, 32, 10});
  plain->to(devs[0]);
  auto copy = plain->clone();
  auto dp = std::make_shared<DataParallel>(copy, devs);
  optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  optim::SGD opt_plain(plain->named_parameters(), o);
  optim::SGD opt_dp(dp->named_parameters(), o);
  for (int step = 0; step < 20; ++step) {
    Tensor x = test::random_tensor({16, 10}, 100 + static_cast<uint64_t>(step), -1, 1, devs[0]);
    Tensor y =
        Tensor::from_host(std::vector<float>(16, static_cast<float>(step % 10)), {16}, devs[0]);
    opt_plain.zero_grad();
    cross_entropy(plain->forward(x), y).backward();
    opt_plain.step();
    opt_dp.zero_grad();
    cross_entropy(dp->forward(x), y).backward();
    opt_dp.step();
  }
  const auto a = plain->named_parameters();
  const auto b = copy->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    // 20 steps let rounding differences grow a little; they stay far below 1e-4.
    test::expect_close(b[i].second.to_vector(), a[i].second.to_vector(), 1e-5, 1e-4, a[i].first);
  }
}

TEST(DataParallel, ScatterChunkSizesFollowTorchChunk) {
  struct Case {
    int64_t batch;
    int n;
    std::vector<int64_t> sizes;
  };
  for (const Case& c : std::vector<Case>{{5, 4, {2, 2, 1}},
                                         {36, 7, {6, 6, 6, 6, 6, 6}},
                                         {1, 4, {1}},
                                         {3, 4, {1, 1, 1}},
                                         {64, 3, {22, 22, 20}},
                                         {8, 4, {2, 2, 2, 2}}}) {
    const auto devs = devices(c.n);
    Tensor x = Tensor::arange(c.batch * 2).reshape({c.batch, 2});
    const auto chunks = scatter(x, devs);
    ASSERT_EQ(chunks.size(), c.sizes.size()) << c.batch << " on " << c.n;
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].size(0), c.sizes[i]);
      EXPECT_EQ(chunks[i].device(), devs[i]);
    }
    if (!devices_concurrent(c.n) || devs[0].memory_id() == devs[1 % c.n].memory_id()) {
      EXPECT_TRUE(chunks[0].shares_storage(x));  // zero-copy on shared memory
    }
  }
}

TEST(DataParallel, ScatterAndGatherRoundTripAlongDimensionOne) {
  const auto devs = devices(3);
  Tensor x = test::random_tensor({4, 7, 2}, 8);
  const auto chunks = scatter(x, devs, 1);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].shape(), Shape({4, 3, 2}));
  EXPECT_EQ(chunks[2].shape(), Shape({4, 1, 2}));
  Tensor back = gather(chunks, devs[0], 1);
  EXPECT_EQ(back.to_vector(), x.to_vector());

  // Differentiable both ways.
  Tensor leaf = test::leaf(test::random_tensor({5, 4}, 9));
  test::check_gradients(
      [&](const std::vector<Tensor>& in) {
        auto pieces = scatter(in[0], devs, 1);
        for (size_t i = 0; i < pieces.size(); ++i) pieces[i] = pieces[i] * float(i + 2);
        return gather(pieces, devs[0], 1);
      },
      {leaf}, {}, "scatter/gather dim 1");
}

TEST(DataParallel, GatherOfScalarsMakesAVector) {
  const auto devs = devices(3);
  std::vector<Tensor> scalars;
  for (int i = 0; i < 3; ++i)
    scalars.push_back(Tensor::scalar(float(i + 1), devs[static_cast<size_t>(i)]));
  Tensor v = gather(scalars, devs[0]);
  EXPECT_EQ(v.shape(), Shape({3}));
  EXPECT_EQ(v.to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST(DataParallel, ReplicaExceptionNamesTheReplicaAndTheNextCallWorks) {
  const auto devs = devices(4);
  auto model = std::make_shared<FailsOnDevice2>();
  model->to(devs[0]);
  DataParallel dp(model, devs);
  Tensor x = Tensor::ones({8, 4}, devs[0]);
  try {
    dp.forward(x);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("in replica 2 on device 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("boom in the forward"), std::string::npos) << msg;
  }
  // Two chunks use devices 0 and 1 only: the same wrapper works again.
  Tensor y = dp.forward(Tensor::ones({2, 4}, devs[0]));
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  sum(y).backward();
  EXPECT_TRUE(model->fc->weight().grad().defined());
}

TEST(DataParallel, StateDictKeysCarryModulePrefixAndLoadBothWays) {
  const auto devs = devices(2);
  auto model = std::make_shared<MyModel>();
  DataParallel dp(model, devs);
  const auto sd = dp.state_dict();
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[0].first, "module.fc1.weight");
  EXPECT_EQ(sd[3].first, "module.fc2.bias");

  // DataParallel -> bare model.
  auto bare = std::make_shared<MyModel>();
  bare->to(devs[0]);
  bare->load_state_dict(sd);
  Tensor x = test::random_tensor({5, 10}, 4, -1, 1, devs[0]);
  EXPECT_EQ(bare->forward(x).to_vector(), model->forward(x).to_vector());

  // Bare model -> DataParallel.
  auto other = std::make_shared<MyModel>();
  other->to(devs[0]);
  dp.load_state_dict(other->state_dict());
  // Row-wise results of a split batch equal the whole batch's up to GEMM rounding.
  test::expect_close(dp.forward(x).to_vector(), other->forward(x).to_vector(), 1e-6, 1e-5,
                     "after loading");
}

TEST(DataParallel, ModuleMustBeOnTheFirstDevice) {
  const auto devs = devices(2);
  auto model = std::make_shared<MyModel>();
  model->to(devs[1]);
  EXPECT_THROW(data_parallel(model, Tensor::ones({4, 10}, devs[0]), devs), DeviceError);
  EXPECT_THROW(data_parallel(model, nn::TensorList{Tensor::ones({4, 10}), Tensor::ones({3, 10})},
                             std::vector<Device>{devs[1], devs[0]}),
               ShapeError);  // inputs of different batch sizes
}

namespace {

// conv -> BN -> ReLU -> global pool -> linear: buffers that every step updates.
std::shared_ptr<nn::Sequential> bn_net() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(1),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(3, 2)});
}

}  // namespace

TEST(DataParallel, BatchNormKeepsTheMeanOfTheReplicasUpdates) {
  const Tensor x = test::random_tensor({8, 2, 4, 4}, 21, -1.0f, 2.0f);
  const std::vector<Device> devs = devices(2);
  auto single = bn_net();
  auto wrapped = bn_net();
  DataParallel dp(wrapped, devs);
  single->forward(x);
  dp.forward(x);
  auto* bn_single = dynamic_cast<nn::BatchNorm2d*>(single->named_children()[1].second.get());
  auto* bn_dp = dynamic_cast<nn::BatchNorm2d*>(wrapped->named_children()[1].second.get());
  ASSERT_TRUE(bn_single && bn_dp);
  // One step counted once, not once per replica.
  EXPECT_EQ(bn_dp->num_batches_tracked().item(), 1.0f);
  // Equal chunks: the running mean is the one the whole batch gives.
  test::expect_close(bn_dp->running_mean().to_vector(), bn_single->running_mean().to_vector(), 1e-6,
                     1e-5, "running_mean");
  // The running variance: 0.9 + 0.1 x the mean of the chunks' unbiased
  // variances of the convolution's output, recomputed here per chunk.
  NoGradGuard no_grad;
  auto conv = std::dynamic_pointer_cast<nn::Conv2d>(wrapped->named_children()[0].second);
  const std::vector<float> h = conv->forward(x.to(devs[0])).to_vector();  // [8, 3, 4, 4]
  for (int64_t c = 0; c < 3; ++c) {
    double mean_var = 0;
    for (int64_t chunk = 0; chunk < 2; ++chunk) {
      double s = 0, s2 = 0;
      for (int64_t n = chunk * 4; n < chunk * 4 + 4; ++n)
        for (int64_t i = 0; i < 16; ++i) {
          const double v = h[static_cast<size_t>((n * 3 + c) * 16 + i)];
          s += v;
          s2 += v * v;
        }
      const double m = s / 64;
      mean_var += (s2 / 64 - m * m) * 64 / 63 / 2;
    }
    EXPECT_NEAR(bn_dp->running_var().to_vector()[static_cast<size_t>(c)], 0.9 + 0.1 * mean_var,
                1e-5);
  }
  // Evaluation changes no buffer.
  dp.eval();
  const std::vector<float> before = bn_dp->running_mean().to_vector();
  dp.forward(x);
  EXPECT_EQ(bn_dp->running_mean().to_vector(), before);
}
