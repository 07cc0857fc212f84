#pragma once
/// \file
/// Data parallelism inside a process: data_parallel() (the function) and
/// DataParallel (the module), as torch.nn.parallel.data_parallel and
/// torch.nn.DataParallel. A forward scatters the batch over the devices,
/// replicates the module onto them, runs the replicas (at the same time where
/// the devices are concurrent) and gathers the outputs on the output device.
/// The backward runs per device too, and sums the replicas' gradients into the
/// module's parameters.
///
/// Buffers: in training each replica updates its own copy of the module's
/// buffers (BatchNorm's running statistics and num_batches_tracked), and the
/// module keeps the mean of the replicas' updates, so that no device's data is
/// thrown away (PyTorch's DataParallel keeps replica 0's alone). For the
/// running mean with chunks of equal size, that is the update one device would
/// make from the whole batch; the running variance is the mean of the
/// replicas' variances (each replica normalises with its own chunk's
/// statistics: SyncBatchNorm normalises with the whole batch's).

#include <memory>
#include <vector>

#include "kdp/nn/module.hpp"

namespace kdp {

/// Runs `module` on `inputs` split along `dim` over `devices`; the output lands
/// on `output_device` (devices[0] when not given). Every input is split into the
/// same number of chunks (equal sizes along `dim`). The module's parameters must
/// be on devices[0]. With one device or one chunk the module runs directly.
Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const nn::TensorList& inputs,
                     const std::vector<Device>& devices, const Device* output_device = nullptr,
                     int dim = 0);
Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const Tensor& input,
                     const std::vector<Device>& devices, const Device* output_device = nullptr,
                     int dim = 0);

/// A module that runs the module it wraps data-parallel over devices. It moves
/// the wrapped module to devices[0]. Its state_dict keys carry the "module."
/// prefix, exactly as PyTorch's, and load_state_dict takes keys with or without
/// it, so checkpoints move freely between the wrapped and the bare model.
class DataParallel : public nn::Module {
 public:
  /// Over devices(device_count()).
  explicit DataParallel(std::shared_ptr<nn::Module> module);
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices, int dim = 0);
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
               Device output_device, int dim = 0);

  Tensor forward(const Tensor& input) override;
  Tensor forward(const nn::TensorList& inputs) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string extra_repr() const override;

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  std::shared_ptr<nn::Module> wrapped() const override { return module_; }
  const std::vector<Device>& devices() const { return devices_; }
  const Device& output_device() const { return output_device_; }

 private:
  std::shared_ptr<nn::Module> module_;
  std::vector<Device> devices_;
  Device output_device_;
  int dim_;
};

}  // namespace kdp
