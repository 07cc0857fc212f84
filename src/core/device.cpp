#include "kdp/core/device.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "kdp/core/runtime.hpp"

namespace kdp {

namespace {

// The memory limit of the process's cgroup (v2, then v1); 0 when there is none.
size_t cgroup_memory_limit() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (in >> text && !text.empty() && text != "max") {
      try {
        return static_cast<size_t>(std::stoull(text));
      } catch (const std::exception&) {
      }
    }
  }
  return 0;
}

size_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  size_t bytes =
      pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
  if (const size_t limit = cgroup_memory_limit(); limit > 0) bytes = std::min(bytes, limit);
  return bytes;
}

}  // namespace

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

size_t Device::memory_capacity() const {
  if (compat::host_accessible_memory()) return host_memory_bytes();
  const size_t gpu = compat::gpu_memory_bytes(this->gpu());
  return gpu > 0 ? gpu : SIZE_MAX;
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
