#pragma once
/// \file
/// Runtime: the guard that starts MPI (when kdp is built with it) and then
/// Kokkos, and finalises them in reverse order. Create one per process, first
/// thing in main(); it owns the devices and the tensor allocator.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
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
  /// GPUs for this process to drive at once: devices(n) deals its devices over
  /// them (CUDA with Kokkos 4.3 or newer). Empty: those KDP_DEVICES lists
  /// ("0,1"), else the one GPU of the rank (gpu_for_local_rank()).
  std::vector<int> gpus;
  /// Denormal floats are treated as zero on the host, from the start (so that
  /// every thread kdp and Kokkos start inherits it): training reaches them in
  /// optimizer state and gradients, where the CPU's slow path for them costs a
  /// quarter of an epoch's time. KDP_FLUSH_DENORMALS=0 keeps IEEE's gradual
  /// underflow (see set_flush_denormals in kdp/core/threads.hpp).
  bool flush_denormals = true;

  /// Chained setters, one per option, to name each where it is set:
  /// RuntimeOptions{}.with_init_mpi(...).with_flush_denormals(...).
  RuntimeOptions& with_init_mpi(bool value) {
    init_mpi = value;
    return *this;
  }
  RuntimeOptions& with_seed(uint64_t value) {
    seed = value;
    return *this;
  }
  RuntimeOptions& with_threads(int value) {
    threads = value;
    return *this;
  }
  RuntimeOptions& with_gpus(std::vector<int> value) {
    gpus = std::move(value);
    return *this;
  }
  RuntimeOptions& with_flush_denormals(bool value) {
    flush_denormals = value;
    return *this;
  }
};

/// Parses a list of GPU ids ("0,1,3"); ValueError naming `source` otherwise.
std::vector<int> parse_gpu_list(const std::string& text, const std::string& source);

/// Copies between tensor memory and host memory since the Runtime started: the
/// edges of a training step (a loss read, a batch uploaded, MPI staging). On
/// host backends they are plain reads and memcpys, counted all the same, so
/// that a test on any backend shows what would cross a GPU's bus.
struct TransferCounts {
  int64_t to_host = 0;  // to_vector, item, staging for MPI and checkpoints
  int64_t to_host_bytes = 0;
  int64_t to_device = 0;  // from_host, batches, staged MPI results
  int64_t to_device_bytes = 0;
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
  /// This rank's position among the ranks of its node (MPI_Comm_split_type).
  int local_rank() const { return local_rank_; }
  /// The GPU this rank runs on (-1 on host backends): the one Kokkos was told
  /// (--kokkos-device-id, KOKKOS_DEVICE_ID), else gpu_for_local_rank().
  int gpu() const { return gpu_; }
  /// The GPUs devices(n) deals its devices over (empty on host backends).
  const std::vector<int>& gpus() const { return gpus_; }

  /// Copies between tensor memory and the host so far.
  TransferCounts transfers() const;
  /// Counts one copy (called by the edges: Tensor, DataLoader, Communicator).
  void count_transfer(bool to_host, size_t bytes);

 private:
  void start(int* argc, char*** argv, const RuntimeOptions& options);
  // start()'s steps, in order.
  void start_mpi(int* argc, char*** argv, const RuntimeOptions& options);
  void choose_gpus(const RuntimeOptions& options);
  void start_kokkos(int* argc, char*** argv);
  void make_default_device();

  bool mpi_initialized_ = false;  // MPI is up (by us or by the caller)
  bool mpi_owned_ = false;        // we must finalise it
  bool kokkos_owned_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_ranks_ = 1;
  int local_rank_ = 0;
  int gpu_ = -1;
  std::vector<int> gpus_;
  std::atomic<int64_t> to_host_{0}, to_host_bytes_{0}, to_device_{0}, to_device_bytes_{0};
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

/// The GPU for the rank at `local_rank` on a node where it sees `visible_gpus`
/// GPUs: ranks are dealt round-robin (with one GPU per task, as under Slurm's
/// --gpus-per-task=1, every rank takes its only one); -1 when there is none.
int gpu_for_local_rank(int local_rank, int visible_gpus);

/// Seeds every device's generator: Runtime::get().manual_seed(seed).
void manual_seed(uint64_t seed);

/// Where the host BLAS is OpenBLAS and took generic (pre-AVX) kernels on a CPU
/// with AVX2 or AVX-512, as a release older than the CPU does: one line saying
/// so, with the OPENBLAS_CORETYPE to export before the program starts. Empty
/// otherwise. kdp-train prints it.
std::string blas_kernel_advice();

/// OpenBLAS chooses its kernels as it loads, before main(). Where it took
/// generic ones on a CPU with AVX2 or AVX-512 (blas_kernel_advice() has
/// advice) and OPENBLAS_CORETYPE is not set, restarts the program at once as
/// the same process (exec of /proc/self/exe with `argv`) with
/// OPENBLAS_CORETYPE naming the CPU's own kernels: several times faster
/// products. Call it first in main(), before MPI starts. A user's own
/// OPENBLAS_CORETYPE is kept, and the restarted program, which has one, goes
/// on. Returns (without restarting) where nothing needs doing or exec fails.
void use_the_cpus_blas_kernels(char** argv);

/// The line a program's header gives the BLAS: the kernels
/// use_the_cpus_blas_kernels() restarted with, or blas_kernel_advice(), or
/// "" where OpenBLAS chose well or the BLAS is another.
std::string blas_kernel_line();

}  // namespace kdp
