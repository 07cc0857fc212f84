#pragma once
/// \file
/// Devices for data parallelism inside a process. Where the Kokkos version and
/// backend give distinct execution-space instances (CUDA/HIP streams from Kokkos
/// 3.5, OpenMP partitions from 4.0, Serial instances from 4.2), devices(n) uses
/// them and work on different devices runs at the same time; otherwise it gives
/// n logical devices on the default instance that run one after another (Kokkos
/// 3.4's Serial backend is not safe to launch from several threads at once).

#include <vector>

#include "kdp/core/device.hpp"

namespace kdp {

/// n devices; the same n always gives the same devices. Without concurrent
/// instances device 0 is the default device.
std::vector<Device> devices(int n);

/// Whether devices(n) run at the same time.
bool devices_concurrent(int n);

/// The number of devices that can run at the same time here (OpenMP threads, 1
/// for a GPU or a Serial backend), or KDP_DEVICES from the environment.
int device_count();

}  // namespace kdp
