#pragma once
/// \file
/// Runtime: the guard that starts MPI (when kdp is built with it) and then
/// Kokkos, and finalises them in reverse order. Create one per process, first
/// thing in main(); it owns the devices and the tensor allocator.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kdp/core/caching_allocator.hpp"
#include "kdp/core/device.hpp"
#include "kdp/core/device_threads.hpp"

namespace kdp {

/// How the Runtime starts: MPI or not, the seed, threads per rank.
struct RuntimeOptions {
  /// Initialise MPI (ignored when kdp is built without MPI). Programs that run
  /// on one process only can turn it off to start faster.
  bool init_mpi = true;
  /// Seed of every device's generator (device d of a set gets seed + d).
  uint64_t seed = 0;
  /// Threads per rank for BLAS and host backends; 0 picks cores / ranks on the
  /// node (or KDP_NUM_THREADS), so that ranks sharing a node never oversubscribe it.
  int threads = 0;
};

/// The guard that starts MPI and Kokkos and finalises them; one per process.
class Runtime {
 public:
  Runtime(int& argc, char**& argv, RuntimeOptions options = {});
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Whether a Runtime exists now.
  static bool active();
  /// The Runtime of this process; throws StateError when there is none.
  static Runtime& get();

  const Device& default_device() const { return default_device_; }

  /// n devices (see kdp::devices in kdp/parallel/devices.hpp).
  std::vector<Device> devices(int n);
  /// Whether devices(n) gives instances that run at the same time.
  bool devices_concurrent(int n);

  CachingAllocator& allocator() { return allocator_; }
  DeviceThreads& device_threads() { return device_threads_; }

  /// Seeds the generator of every device created so far and of those to come.
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }

  /// Rank and size of MPI_COMM_WORLD (0 and 1 without MPI).
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  /// Ranks on this node and the threads this rank uses (BLAS and host backend).
  int local_ranks() const { return local_ranks_; }
  int threads() const { return threads_; }
  /// Cores this process may run on (its affinity mask, as mpirun or Slurm set it).
  int cores() const { return cores_; }
  bool mpi_active() const { return mpi_initialized_; }

 private:
  void start(int* argc, char*** argv, const RuntimeOptions& options);

  bool mpi_initialized_ = false;  // MPI is up (by us or by the caller)
  bool mpi_owned_ = false;        // we must finalise it
  bool kokkos_owned_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_ranks_ = 1;
  int threads_ = 1;
  int cores_ = 1;
  uint64_t seed_ = 0;

  CachingAllocator allocator_;
  DeviceThreads device_threads_;
  Device default_device_{std::shared_ptr<detail::DeviceState>()};
  std::mutex devices_mutex_;
  std::map<int, std::vector<Device>> device_sets_;
  std::vector<Device> logical_devices_;
  std::vector<std::shared_ptr<detail::DeviceState>> all_states_;
};

/// Seeds every device's generator: Runtime::get().manual_seed(seed).
void manual_seed(uint64_t seed);

}  // namespace kdp
