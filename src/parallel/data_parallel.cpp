#include "kdp/parallel/data_parallel.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/autograd/grad_mode.hpp"
#include "kdp/core/error.hpp"
#include "kdp/nn/bound_module.hpp"
#include "kdp/parallel/devices.hpp"
#include "kdp/parallel/gather.hpp"
#include "kdp/parallel/parallel_apply.hpp"
#include "kdp/parallel/replicate.hpp"
#include "kdp/parallel/scatter.hpp"

namespace kdp {

namespace {

void check_module_on(const nn::Module& module, const Device& device) {
  for (const auto& [name, p] : module.named_parameters()) {
    KDP_CHECK(p.device() == device, DeviceError,
              "parameter '{}' is on {} but must be on the first device, {} "
              "(move the module there with module->to(devices[0]))",
              name, p.device().str(), device.str());
  }
}

// In training, each replica updated its own copy of the buffers (BatchNorm's
// running statistics and count); the module keeps the mean of those updates.
// Replica 0 is the module itself, whose buffers hold its own update already.
void merge_buffers(nn::Module& module, const std::vector<std::shared_ptr<nn::Module>>& replicas) {
  NoGradGuard no_grad;
  const float share = 1.0f / static_cast<float>(replicas.size());
  for (auto& [name, buffer] : module.named_buffers()) {
    Tensor sum = buffer.clone();
    for (size_t k = 1; k < replicas.size(); ++k) {
      const auto* bound = dynamic_cast<const nn::BoundModule*>(replicas[k].get());
      const Tensor* copy = bound != nullptr ? bound->bindings().find(buffer.impl().get()) : nullptr;
      KDP_CHECK(copy != nullptr, StateError, "replica {} has no copy of buffer '{}'", k, name);
      sum.add_(copy->to(buffer.device()));
    }
    Tensor target = buffer;
    target.copy_(sum.mul_(share));
  }
}

}  // namespace

Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const nn::TensorList& inputs,
                     const std::vector<Device>& devices, const Device* output_device, int dim) {
  KDP_CHECK(module, StateError, "the module is null");
  KDP_CHECK(!devices.empty(), ValueError, "no devices");
  KDP_CHECK(!inputs.empty(), ValueError, "no inputs");
  const Device& out_device = output_device != nullptr ? *output_device : devices[0];
  check_module_on(*module, devices[0]);

  // Split every input; all must give the same number of chunks.
  std::vector<std::vector<Tensor>> per_input;
  per_input.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    KDP_CHECK(inputs[k].defined(), StateError, "input {} is undefined", k);
    KDP_CHECK(
        inputs[k].dim() != 0 && inputs[0].dim() != 0 && inputs[k].size(dim) == inputs[0].size(dim),
        ShapeError,
        "input {} {} and input 0 {} must have the same size along the "
        "split dimension {}",
        k, inputs[k].shape().str(), inputs[0].shape().str(), dim);
    per_input.push_back(scatter(inputs[k], devices, dim));
  }
  const size_t chunks = per_input[0].size();
  std::vector<nn::TensorList> replica_inputs(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    for (auto& pieces : per_input) replica_inputs[i].push_back(pieces[i]);
  }
  if (chunks == 1) return module->forward(replica_inputs[0]).to(out_device);

  const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<long>(chunks));
  const auto replicas = replicate(module, used);
  const std::vector<Tensor> outputs = parallel_apply(replicas, replica_inputs, used);
  if (module->is_training()) merge_buffers(*module, replicas);
  return gather(outputs, out_device, dim);
}

Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const Tensor& input,
                     const std::vector<Device>& devices, const Device* output_device, int dim) {
  return data_parallel(module, nn::TensorList{input}, devices, output_device, dim);
}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module)
    : DataParallel(std::move(module), kdp::devices(device_count())) {}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices, int dim)
    : DataParallel(std::move(module), devices, devices.empty() ? Device() : devices[0], dim) {}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
                           Device output_device, int dim)
    : Module("DataParallel"),
      module_(std::move(module)),
      devices_(std::move(devices)),
      output_device_(std::move(output_device)),
      dim_(dim) {
  KDP_CHECK(module_, StateError, "the module is null");
  KDP_CHECK(!devices_.empty(), ValueError, "no devices");
  module_->to(devices_[0]);
  register_module("module", module_);
}

Tensor DataParallel::forward(const Tensor& input) {
  return data_parallel(module_, nn::TensorList{input}, devices_, &output_device_, dim_);
}

Tensor DataParallel::forward(const nn::TensorList& inputs) {
  return data_parallel(module_, inputs, devices_, &output_device_, dim_);
}

std::shared_ptr<nn::Module> DataParallel::clone() const {
  return std::make_shared<DataParallel>(module_->clone(), devices_, output_device_, dim_);
}

std::string DataParallel::extra_repr() const {
  return fmt::format("devices={}, dim={}", devices_.size(), dim_);
}

}  // namespace kdp
