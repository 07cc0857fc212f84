#include "kdp/nn/sequential.hpp"

#include <fmt/format.h>

#include <string>
#include <typeinfo>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/nn/activation.hpp"
#include "kdp/nn/batch_norm.hpp"
#include "kdp/nn/conv.hpp"
#include "kdp/nn/linear.hpp"
#include "kdp/nn/parameter_memory.hpp"
#include "kdp/ops/conv.hpp"
#include "kdp/ops/linear.hpp"

namespace kdp::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
    : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < modules_.size(); ++i) {
    // A Linear, a Conv2d or a BatchNorm followed by a ReLU (exactly those, not
    // subclasses that might change forward) runs as one fused op; the modules
    // and names stay.
    const Module& m = *modules_[i];
    trace::Region region(m.region_name());
    const bool relu_next =
        i + 1 < modules_.size() && typeid(*modules_[i + 1].get()) == typeid(ReLU);
    if (relu_next && typeid(m) == typeid(Linear)) {
      const auto& lin = static_cast<const Linear&>(m);
      x = linear_relu(x, lin.weight(), lin.bias());
      ++i;
      continue;
    }
    if (relu_next && typeid(m) == typeid(Conv2d)) {
      const auto& c = static_cast<const Conv2d&>(m);
      x = conv2d_relu(x, c.weight(), c.bias(), c.stride(), c.padding(), c.dilation(), c.groups());
      ++i;
      continue;
    }
    if (relu_next && (typeid(m) == typeid(BatchNorm2d) || typeid(m) == typeid(BatchNorm1d) ||
                      typeid(m) == typeid(BatchNorm3d))) {
      x = static_cast<BatchNorm&>(*modules_[i]).forward_relu(x);
      ++i;
      continue;
    }
    x = modules_[i]->forward(x);
  }
  return x;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& m : modules_) copy->push_back(m->clone());
  copy->train(is_training());
  return copy;
}

std::shared_ptr<Sequential> mlp(const std::vector<int64_t>& sizes, const std::string& activation,
                                const Device& device) {
  KDP_CHECK(sizes.size() >= 2, ValueError, "needs at least two sizes (in and out), got {}",
            sizes.size());
  // Every layer's size is checked before the first one is allocated.
  std::vector<LayerMemory> layers;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const std::string name = std::to_string(2 * i);
    const std::string what = fmt::format("Linear({}, {})", sizes[i], sizes[i + 1]);
    try {
      layers.push_back({name, what, Linear::parameter_bytes(sizes[i], sizes[i + 1])});
    } catch (const ShapeError& e) {
      KDP_FAIL(ShapeError, "layer '{}': {}", name, e.what());
    }
  }
  check_parameters_fit(layers, device, fmt::format("kdp::nn::mlp({})", fmt::join(sizes, ",")));
  auto net = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    net->push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1], true, device));
    if (i + 2 < sizes.size()) net->push_back(make_activation(activation));
  }
  return net;
}

}  // namespace kdp::nn
