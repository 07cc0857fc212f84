#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/native/vector_exp.hpp"
#include "test_util.hpp"

using namespace kdp;

TEST(Runtime, RanksAreDealtOverTheGpusTheySee) {
  // One GPU per task (Slurm --gpus-per-task=1): every rank takes its only GPU.
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(gpu_for_local_rank(rank, 1), 0);
  // All GPUs of a node visible (mpirun): rank r takes GPU r, round-robin beyond.
  EXPECT_EQ(gpu_for_local_rank(0, 4), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4), 3);
  EXPECT_EQ(gpu_for_local_rank(5, 4), 1);
  // No GPU: host backends.
  EXPECT_EQ(gpu_for_local_rank(0, 0), -1);
  // This process: a GPU exactly when the backend has them.
  const Runtime& rt = Runtime::get();
  EXPECT_EQ(rt.gpu() >= 0, compat::gpu_backend());
  EXPECT_EQ(get_default_device().gpu(), rt.gpu());
  EXPECT_GE(rt.local_rank(), 0);
  EXPECT_LT(rt.local_rank(), rt.local_ranks());
}

TEST(Runtime, GpuListsAreParsedOrRefusedByName) {
  EXPECT_EQ(parse_gpu_list("0", "KDP_DEVICES"), (std::vector<int>{0}));
  EXPECT_EQ(parse_gpu_list("2,0,3", "KDP_DEVICES"), (std::vector<int>{2, 0, 3}));
  for (const char* bad : {"", "a", "0,", "1,,2", "-1", "0,0", "1.5"}) {
    try {
      parse_gpu_list(bad, "KDP_DEVICES");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("KDP_DEVICES"), std::string::npos) << e.what();
    }
  }
}

TEST(Runtime, EveryInstanceHasItsOwnBlasHandle) {
  // Devices share a handle exactly when they share an instance, and each
  // handle is bound to its own device's instance.
  for (int n : {1, 2, 3}) {
    const std::vector<Device> devs = devices(n);
    for (const Device& a : devs) {
      EXPECT_TRUE(compat::same_instance(a.blas().space(), a.space())) << a.str();
      for (const Device& b : devs) {
        EXPECT_EQ(&a.blas() == &b.blas(), a.instance_id() == b.instance_id())
            << a.str() << " and " << b.str();
      }
    }
  }
  // GEMMs from every device at once agree with the single-device result.
  const std::vector<Device> devs = devices(2);
  const Tensor x = test::random_tensor({33, 17}, 1), w = test::random_tensor({9, 17}, 2);
  const std::vector<float> want = linear(x, w).to_vector();
  std::vector<std::vector<float>> got(devs.size());
  std::vector<std::function<void()>> tasks;
  for (size_t d = 0; d < devs.size(); ++d) {
    tasks.push_back([&, d] { got[d] = linear(x.to(devs[d]), w.to(devs[d])).to_vector(); });
  }
  const auto errors =
      Runtime::get().device_threads().run(tasks, devs, Runtime::get().devices_concurrent(2));
  for (const auto& e : errors) EXPECT_FALSE(e);
  for (const auto& g : got) test::expect_close(g, want, 1e-6, 1e-6);
}

TEST(VectorExp, AgreesWithExpfToTwoUlpsOverTheFloatRange) {
  // A million values spread over [-87, 88], and the saturation ends.
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int i = 0; i < 1000000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 1e6f;
    const float want = std::exp(x);
    const float got = detail::vector_exp(x);
    const double ulps = std::fabs(static_cast<double>(got) - want) /
                        (std::nextafter(want, INFINITY) - static_cast<double>(want));
    if (ulps > worst) {
      worst = ulps;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  EXPECT_EQ(detail::vector_exp(0.0f), 1.0f);
  if constexpr (compat::launches_are_synchronous()) {
    // kdp's polynomial saturates at e^-87.3 and e^88.3.
    EXPECT_GT(detail::vector_exp(-100.0f), 0.0f);
    EXPECT_LT(detail::vector_exp(-100.0f), 1e-37f);
    EXPECT_TRUE(std::isfinite(detail::vector_exp(200.0f)));
  } else {
    // A device backend's build keeps the native exp (here its host side).
    EXPECT_EQ(detail::vector_exp(-100.0f), std::exp(-100.0f));
    EXPECT_EQ(detail::vector_exp(200.0f), std::exp(200.0f));
  }
  EXPECT_TRUE(std::isnan(detail::vector_exp(std::nanf(""))));  // NaN propagates
}

TEST(Runtime, DenormalsAreFlushedByDefaultAndCanBeKept) {
  // A kernel whose results (1e-20 squared) lie below the smallest normal
  // float: 0 while the Runtime flushes denormals (its default), the
  // denormal itself under IEEE's gradual underflow.
  const bool by_default = flushes_denormals();
  if (!set_flush_denormals(true)) GTEST_SKIP() << "no denormal control on this CPU";
  const char* env = std::getenv("KDP_FLUSH_DENORMALS");
  if (env == nullptr || std::string(env) != "0") {
    EXPECT_TRUE(by_default);
  }
  const Tensor x = Tensor::full({8}, 1e-20f);
  for (float v : (x * x).to_vector()) EXPECT_EQ(v, 0.0f);
  ASSERT_TRUE(set_flush_denormals(false));
  EXPECT_FALSE(flushes_denormals());
  for (float v : (x * x).to_vector()) {
    EXPECT_GT(v, 0.0f);
    EXPECT_LT(v, std::numeric_limits<float>::min());  // a denormal
  }
  set_flush_denormals(true);
}
