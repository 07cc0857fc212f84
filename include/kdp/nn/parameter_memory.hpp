#pragma once
/// \file
/// Parameter memory checked before it is allocated: a model that cannot fit in
/// its device's memory is refused at once, naming the layer, instead of
/// spending seconds and gigabytes before the allocator gives up.

#include <cstddef>
#include <string>
#include <vector>

#include "kdp/core/device.hpp"

namespace kdp::nn {

/// One layer's parameters: its name in the state dict ("2"), what it is
/// ("Linear(1000000, 1000000)") and its parameters' bytes.
struct LayerMemory {
  std::string name;
  std::string description;
  size_t bytes = 0;
};

/// Throws ValueError, naming `what`, the largest layer and the bytes needed,
/// when the layers' parameters together exceed `device.memory_capacity()`.
void check_parameters_fit(const std::vector<LayerMemory>& layers, const Device& device,
                          const std::string& what);

}  // namespace kdp::nn
