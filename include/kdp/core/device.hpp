#pragma once
/// \file
/// Device: one execution-space instance, its memory, an index and a random
/// generator. Every kernel kdp launches runs on the instance of the tensor it
/// writes. Devices come from the Runtime: get_default_device(), or devices(n) in
/// kdp/parallel/devices.hpp.

#include <memory>
#include <string>

#include "kdp/core/generator.hpp"
#include "kdp/core/kokkos_compat.hpp"

namespace kdp {

namespace detail {
struct DeviceState;
}

/// One execution-space instance, its memory, an index and a random generator.
class Device {
 public:
  /// The runtime's default device (the default execution-space instance).
  Device();

  const ExecSpace& space() const;
  /// Position of the device in its set: the `d` of "device d".
  int index() const;
  /// Devices with the same instance id share one execution-space instance and run
  /// one after another; distinct ids may run at the same time.
  int instance_id() const;
  /// Devices with the same memory id address the same memory.
  int memory_id() const;
  /// Number of threads (or the concurrency) the instance runs kernels with.
  int concurrency() const;
  /// The device's random generator (used by rand, randn, dropout).
  Generator& generator() const;
  /// The BLAS handle of the device's instance (one per instance: devices that
  /// share an instance share it).
  compat::BlasHandle& blas() const;
  /// The GPU the device runs on (-1 on host backends).
  int gpu() const;

  /// The bytes of memory this device can hold in all: the GPU's memory, or on
  /// host backends the physical memory or the process's cgroup limit,
  /// whichever is smaller. What model sizes are checked against before
  /// anything is allocated.
  size_t memory_capacity() const;
  /// "device 1 (Serial, shared instance 0)".
  std::string str() const;

  /// Waits until the work queued on this device's instance is done.
  void fence(const char* label) const;

  bool operator==(const Device& other) const { return state_ == other.state_; }
  bool operator!=(const Device& other) const { return state_ != other.state_; }

  /// For the Runtime, which creates every device.
  explicit Device(std::shared_ptr<detail::DeviceState> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<detail::DeviceState> state_;
};

namespace detail {
struct DeviceState {
  ExecSpace space;
  int index = 0;
  int instance_id = 0;
  int memory_id = 0;
  std::string description;
  Generator generator;
  std::shared_ptr<compat::BlasHandle> blas;
};
}  // namespace detail

/// The runtime's default device.
const Device& get_default_device();

}  // namespace kdp
