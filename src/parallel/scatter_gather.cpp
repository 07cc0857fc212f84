#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/parallel/gather.hpp"
#include "kdp/parallel/scatter.hpp"

namespace kdp {

std::vector<Tensor> scatter(const Tensor& input, const std::vector<Device>& devices, int dim) {
  KDP_CHECK(!devices.empty(), ValueError, "no devices");
  KDP_CHECK(input.defined(), StateError, "the input is undefined");
  KDP_CHECK(input.dim() != 0, ShapeError, "cannot split a scalar; give it a batch dimension");
  std::vector<Tensor> chunks = input.chunk(static_cast<int>(devices.size()), dim);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i] = chunks[i].to(devices[i]);
  return chunks;
}

Tensor gather(const std::vector<Tensor>& tensors, const Device& output_device, int dim) {
  KDP_CHECK(!tensors.empty(), ValueError, "nothing to gather");
  std::vector<Tensor> moved;
  moved.reserve(tensors.size());
  const bool scalars = tensors[0].defined() && tensors[0].dim() == 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KDP_CHECK(t.defined(), StateError, "output {} is undefined", i);
    KDP_CHECK((t.dim() == 0) == scalars, ShapeError, "output {} {} mixes scalars and tensors", i,
              t.shape().str());
    Tensor on_output = t.to(output_device);
    moved.push_back(scalars ? on_output.reshape({1}) : on_output);
  }
  return cat(moved, scalars ? 0 : dim);
}

}  // namespace kdp
