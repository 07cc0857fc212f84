#include "kdp/core/device.hpp"

#include <fmt/format.h>

#include "kdp/core/runtime.hpp"

namespace kdp {

Device::Device() : Device(get_default_device()) {}

const ExecSpace& Device::space() const {
  return state_->space;
}
int Device::index() const {
  return state_->index;
}
int Device::instance_id() const {
  return state_->instance_id;
}
int Device::memory_id() const {
  return state_->memory_id;
}
int Device::concurrency() const {
  return compat::concurrency(state_->space);
}
Generator& Device::generator() const {
  return state_->generator;
}
compat::BlasHandle& Device::blas() const {
  return *state_->blas;
}
int Device::gpu() const {
  return compat::gpu_of(state_->space);
}

std::string Device::str() const {
  return fmt::format("device {} ({})", state_->index, state_->description);
}

void Device::fence(const char* label) const {
  compat::fence(state_->space, label);
}

const Device& get_default_device() {
  return Runtime::get().default_device();
}

}  // namespace kdp
