#pragma once
/// \file
/// parallel_apply: runs replicas on their devices (torch.nn.parallel.parallel_apply).

#include <memory>
#include <vector>

#include "kdp/nn/module.hpp"

namespace kdp {

/// Runs replicas[i] on inputs[i] on devices[i]: at the same time, one host thread
/// per instance, where the devices are concurrent; one after another otherwise.
/// The caller's grad mode holds in every replica. When replicas throw, the first
/// failure is rethrown after all have finished, as the same kind of kdp::Error
/// with "in replica i on device d: " before the original message.
std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<nn::TensorList>& inputs,
                                   const std::vector<Device>& devices);

/// One input tensor per replica.
std::vector<Tensor> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                   const std::vector<Tensor>& inputs,
                                   const std::vector<Device>& devices);

/// Whether `module` or a module inside it meets the other replicas in its
/// forward (Module::synchronizes_replicas: SyncBatchNorm), so that
/// parallel_apply runs each replica on a thread of its own.
bool synchronizes_replicas(const nn::Module& module);

}  // namespace kdp
