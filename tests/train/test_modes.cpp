#include <gtest/gtest.h>

#include "core/cpu_isa.hpp"
#include "kernels/native/row_gemm.hpp"
#include "test_util.hpp"

using namespace kdp;

namespace {

std::shared_ptr<nn::Module> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 3)});
}

// A model of a user's own class with a BatchNorm layer under a name that
// says nothing of it: decide_modes looks at the modules, not at words.
class Normalised : public nn::Module {
 public:
  Normalised() : Module("Normalised") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 8));
    scale = register_module("scale", std::make_shared<nn::BatchNorm1d>(8));
  }
  Tensor forward(const Tensor& x) override { return scale->forward(fc->forward(x)); }
  using Module::forward;
  std::shared_ptr<nn::Module> fc, scale;
};

train::ModeDecision decide(const train::ModeRequest& ask, nn::Module& model) {
  dist::Communicator comm = dist::Communicator::world();
  return train::decide_modes(ask, model, comm);
}

}  // namespace

// Auto: off, with what stands in the mode's way for this model and request
// where something does, else its cost (more than a default may cost on some
// CPUs); On and Off as asked, whatever the model.
TEST(DecideModes, AutoWeighsTheRequestAndTheModelsModules) {
  const auto net = mlp();
  train::ModeRequest ask;
  const train::ModeDecision plain = decide(ask, *net);
  EXPECT_FALSE(plain.reproducible);
  EXPECT_EQ(plain.why_off,
            "its products cost up to 1.8x DDP's step at 2 threads a rank on some CPUs");
  EXPECT_EQ(plain.reason, "reproducible mode off: " + plain.why_off);
  EXPECT_EQ(plain.precision, Precision::fp32);

  const auto off_for = [&](train::ModeRequest r, nn::Module& model, const std::string& why) {
    const train::ModeDecision d = decide(r, model);
    EXPECT_FALSE(d.reproducible) << why;
    EXPECT_NE(d.why_off.find(why), std::string::npos) << d.why_off;
    EXPECT_EQ(d.reason, "reproducible mode off: " + d.why_off);
  };
  train::ModeRequest hook = ask;
  hook.comm_hook = "bf16";
  off_for(hook, *net, "the comm hook bf16 reduces the gradients instead");
  train::ModeRequest two = ask;
  two.devices_per_rank = 2;
  off_for(two, *net, "on the first of the 2 devices only");
  train::ModeRequest bf16 = ask;
  bf16.precision = Precision::bf16;
  // bf16 goes in one pass where row_gemm_bf16 has vector kernels (AVX2 and
  // up: then only the mode's cost stands in the way), else one by one.
  {
    const detail::CpuIsa before = detail::set_cpu_isa_limit(detail::CpuIsa::Baseline);
    off_for(bf16, *net, "one by one in bf16 on a CPU without AVX2");
    detail::set_cpu_isa_limit(before);
  }
  if (detail::row_gemm_bf16_fast()) off_for(bf16, *net, "its products cost up to 1.8x");
  EXPECT_EQ(decide(bf16, *net).precision, Precision::bf16);
  Normalised normalised;
  off_for(ask, normalised, "apart in BatchNorm");
  auto synced = nn::convert_sync_batchnorm(std::make_shared<Normalised>());
  off_for(ask, *synced, "with SyncBatchNorm its shards would go through copies of the model");
  nn::Conv2d conv(1, 2, 3);
  train::ModeRequest images = ask;
  images.input_dims = 4;
  off_for(images, conv, "this model's shards would go one by one");

  train::ModeRequest asked = images;
  asked.reproducible = train::ReproducibleMode::On;
  EXPECT_TRUE(decide(asked, conv).reproducible) << "asked for: fit() refuses what it cannot keep";
  asked = ask;
  asked.reproducible = train::ReproducibleMode::On;
  const train::ModeDecision on = decide(asked, *net);
  EXPECT_TRUE(on.reproducible);
  EXPECT_TRUE(on.why_off.empty());
  EXPECT_EQ(on.reason,
            "reproducible mode on: the same weights, bit for bit, at 1, 2, 3, 4, 6, 12 rank(s) "
            "with any devices and threads (shards in one pass)");
  asked.shards = 4;
  EXPECT_EQ(decide(asked, *synced).reason,
            "reproducible mode on: the same weights, bit for bit, at 1, 2, 4 rank(s) with any "
            "devices and threads (shards together, through copies of the model)");
  asked.shards = 12;
  asked.input_dims = 4;
  EXPECT_NE(decide(asked, conv).reason.find("(shards one by one)"), std::string::npos);
  asked.input_dims = ask.input_dims;
  asked.reproducible = train::ReproducibleMode::Off;
  const train::ModeDecision off = decide(asked, *net);
  EXPECT_FALSE(off.reproducible);
  EXPECT_EQ(off.reason, "reproducible mode off (asked)");
}

// Auto precision is what the device runs, agreed by every rank (here one).
TEST(DecideModes, AutoPrecisionIsResolvedOnce) {
  dist::Communicator comm = dist::Communicator::world();
  const Device device = get_default_device();
  EXPECT_EQ(train::agree_precision(Precision::Auto, device, comm),
            has_bf16_matrix_units(device) ? Precision::bf16 : Precision::fp32);
  EXPECT_EQ(train::agree_precision(Precision::bf16, device, comm), Precision::bf16);
  EXPECT_EQ(train::agree_precision(Precision::fp32, device, comm), Precision::fp32);
  train::ModeRequest ask;
  ask.precision = Precision::Auto;
  EXPECT_EQ(decide(ask, *mlp()).precision, train::agree_precision(Precision::Auto, device, comm));
}
