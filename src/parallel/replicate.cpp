#include "kdp/parallel/replicate.hpp"

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/bound_module.hpp"

namespace kdp {

std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices) {
  KDP_CHECK(module, StateError, "the module is null");
  const Device home = module->device();
  std::vector<std::shared_ptr<nn::Module>> replicas;
  replicas.reserve(devices.size());
  for (const Device& device : devices) {
    if (device == home) {
      replicas.push_back(module);
      continue;
    }
    replicas.push_back(std::make_shared<nn::BoundModule>(
        *module, [&device](const Tensor& original, bool is_buffer) {
          if (is_buffer) return original.detach().to(device).clone();
          // A differentiable move: the gradient of the view (or copy) flows back
          // to the original parameter.
          return original.to(device);
        }));
  }
  return replicas;
}

}  // namespace kdp
