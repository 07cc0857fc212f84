#pragma once
/// \file
/// replicate: one copy of a module per device (torch.nn.parallel.replicate).

#include <memory>
#include <vector>

#include "kdp/nn/module.hpp"

namespace kdp {

/// One replica of `module` per device. A replica's parameters are linked to the
/// original's: the backward of all replicas sums their gradients into the
/// original parameters' .grad() (PyTorch's Broadcast / ReduceAddCoalesced). On a
/// shared memory space a replica's parameters are views of the original's
/// storage, so replicas own only their gradients; across memory spaces they are
/// copies made here (replicate runs on every DataParallel forward). Buffers are
/// copied; the replica on the module's own device is the module itself, so
/// buffer updates survive there and are lost on the other devices (PyTorch's
/// rule). Replicas run the original's forward code, with its train/eval mode.
/// Call it with grad mode on for the link to be recorded.
std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices);

}  // namespace kdp
