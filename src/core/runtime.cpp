#include "kdp/core/runtime.hpp"

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/check.hpp"
#include "kdp/config.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/core/trace.hpp"

#if KDP_ENABLE_MPI
#include <mpi.h>
#endif

namespace kdp {

namespace {
std::atomic<Runtime*> current_runtime{nullptr};
std::atomic<bool> runtime_created{false};

// Cores this process may run on (its affinity mask, as Slurm and mpirun set it).
int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int choose_threads(int requested, int cores, int local_ranks) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("KDP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || n < 1) {
      // (Raw throws here: each message names the environment variable at fault.)
      throw ValueError(fmt::format("KDP_NUM_THREADS='{}' is not a positive integer", env));
    }
    return static_cast<int>(n);
  }
  return std::max(1, cores / std::max(1, local_ranks));
}

// Whether the program's arguments or the environment already tell Kokkos its GPU.
bool gpu_chosen_by_user(int* argc, char*** argv) {
  if (std::getenv("KOKKOS_DEVICE_ID") != nullptr) return true;
  if (argc == nullptr) return false;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp((*argv)[i], "--kokkos-device-id", 18) == 0 ||
        std::strncmp((*argv)[i], "--kokkos-map-device-id-by", 25) == 0) {
      return true;
    }
  }
  return false;
}

// Seeds of devices in a set differ so that dropout masks differ between replicas.
uint64_t device_seed(uint64_t seed, int index) {
  return seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index);
}
}  // namespace

Runtime::Runtime(int& argc, char**& argv, RuntimeOptions options) {
  start(&argc, &argv, options);
}

Runtime::Runtime(RuntimeOptions options) {
  start(nullptr, nullptr, options);
}

void Runtime::start(int* argc, char*** argv, const RuntimeOptions& options) {
  KDP_CHECK(!runtime_created.exchange(true), StateError,
            "a Runtime was already created in this process; create exactly one, "
            "first thing in main() (Kokkos cannot be initialised twice)");
  seed_ = options.seed;
  // Before MPI's and Kokkos' threads start, so that they inherit it.
  bool flush = options.flush_denormals;
  if (const char* env = std::getenv("KDP_FLUSH_DENORMALS")) flush = std::strcmp(env, "0") != 0;
  set_flush_denormals(flush);
  start_mpi(argc, argv, options);
  cores_ = available_cores();
  threads_ = choose_threads(options.threads, cores_, local_ranks_);
  choose_gpus(options);
  start_kokkos(argc, argv);
  trace::set_region_thread();
  set_blas_threads(threads_);
  make_default_device();
  current_runtime.store(this);
}

// MPI (unless the caller started it, or asked for none), and this rank's
// place in the world and on its node.
void Runtime::start_mpi([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv,
                        [[maybe_unused]] const RuntimeOptions& options) {
#if KDP_ENABLE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    mpi_initialized_ = true;
  } else if (options.init_mpi) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    mpi_initialized_ = true;
    mpi_owned_ = true;
  }
  if (mpi_initialized_) {
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_ranks_);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
  }
#endif
}

// The GPUs asked for (RuntimeOptions::gpus, else KDP_DEVICES), refused where
// this build cannot give them.
void Runtime::choose_gpus(const RuntimeOptions& options) {
  gpus_ = options.gpus;
  if (gpus_.empty()) {
    if (const char* env = std::getenv("KDP_DEVICES")) gpus_ = parse_gpu_list(env, "KDP_DEVICES");
  }
  KDP_CHECK(gpus_.empty() || compat::gpu_backend(), DeviceError,
            "GPUs {} were asked for (KDP_DEVICES or RuntimeOptions::gpus), but kdp "
            "runs on {}",
            fmt::join(gpus_, ","), ExecSpace::name());
  KDP_CHECK(gpus_.size() <= 1 || compat::several_gpus_per_process(), DeviceError,
            "GPUs {} were asked for in one process; that needs CUDA with Kokkos 4.3 "
            "or newer (this is Kokkos {}): run one rank per GPU instead",
            fmt::join(gpus_, ","), compat::kokkos_version_string());
}

// Kokkos, unless the caller started it: with its own --kokkos-* arguments,
// the thread count, and on GPUs the device of this rank's place on the node.
void Runtime::start_kokkos(int* argc, char*** argv) {
  if (Kokkos::is_initialized()) return;
  // Kokkos sees only its own --kokkos-* arguments: older versions also claim
  // plain ones such as --threads, which belong to the program.
  std::vector<char*> kokkos_args;
  if (argc != nullptr && *argc > 0) {
    kokkos_args.push_back((*argv)[0]);
    for (int i = 1; i < *argc; ++i) {
      if (std::strncmp((*argv)[i], "--kokkos-", 9) == 0) kokkos_args.push_back((*argv)[i]);
    }
  }
  // One rank per GPU: each takes the GPU of its place on the node, unless
  // the user chose (--kokkos-device-id, KOKKOS_DEVICE_ID).
  std::string device_arg;
  const int visible = compat::visible_gpus();
  if (visible > 0 && !gpu_chosen_by_user(argc, argv)) {
    const int gpu = gpus_.empty() ? gpu_for_local_rank(local_rank_, visible) : gpus_.front();
    device_arg = fmt::format("--kokkos-device-id={}", gpu);
    kokkos_args.push_back(device_arg.data());
  }
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  kokkos_args.push_back(nullptr);  // argv ends with a null pointer
  char** kokkos_argv = kokkos_args.data();
  compat::initialize(argc != nullptr ? &kokkos_argc : nullptr, &kokkos_argv, threads_);
  kokkos_owned_ = true;
}

// The default device: the default instance, its generator and BLAS handle.
void Runtime::make_default_device() {
  gpu_ = compat::gpu_of(ExecSpace());
  if (gpus_.empty() && gpu_ >= 0) gpus_.push_back(gpu_);
  auto state = std::make_shared<detail::DeviceState>();
  state->space = ExecSpace();
  state->index = 0;
  state->instance_id = 0;
  state->memory_id = std::max(gpu_, 0);
  state->description = gpu_ >= 0
                           ? fmt::format("{} GPU {}, default instance", ExecSpace::name(), gpu_)
                           : fmt::format("{}, default instance", ExecSpace::name());
  state->generator.manual_seed(device_seed(seed_, 0));
  state->blas = std::make_shared<compat::BlasHandle>(state->space);
  all_states_.push_back(state);
  default_device_ = Device(state);
  logical_devices_.push_back(default_device_);
}

Runtime::~Runtime() {
  current_runtime.store(nullptr);
  device_threads_.shutdown();
  device_sets_.clear();
  logical_devices_.clear();
  all_states_.clear();
  default_device_ = Device(std::shared_ptr<detail::DeviceState>());
  allocator_.empty_cache();
  if (kokkos_owned_) Kokkos::finalize();
#if KDP_ENABLE_MPI
  if (mpi_owned_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
#endif
}

bool Runtime::active() {
  return current_runtime.load() != nullptr;
}

Runtime& Runtime::get() {
  Runtime* rt = current_runtime.load();
  KDP_CHECK(rt != nullptr, StateError,
            "no kdp::Runtime is active; create one at the start of main() "
            "(kdp::Runtime runtime(argc, argv);)");
  return *rt;
}

bool Runtime::devices_concurrent(int n) {
  return n > 1 && compat::instances_can_be_concurrent() &&
         compat::max_partitions(default_device_.space()) >= 2;
}

std::vector<Device> Runtime::devices(int n) {
  KDP_CHECK(n >= 1, ValueError, "asked for {} devices; need at least 1", n);
  std::lock_guard<std::mutex> lock(devices_mutex_);
  auto found = device_sets_.find(n);
  if (found != device_sets_.end()) return found->second;

  std::vector<Device> set;
  set.reserve(static_cast<size_t>(n));
  if (n == 1) {
    set.push_back(default_device_);
  } else if (devices_concurrent(n)) {
    // Real instances: as many as the backend can split into; devices beyond that
    // share instances round-robin (and run one after another on them).
    // With several GPUs the devices are dealt over them, each on a stream of
    // its own; otherwise the default instance is partitioned.
    const bool over_gpus = gpus_.size() > 1;
    const int parts = over_gpus ? n : std::min(n, compat::max_partitions(default_device_.space()));
    std::vector<ExecSpace> spaces;
    if (over_gpus) {
      for (int d = 0; d < n; ++d) {
        spaces.push_back(compat::instance_on_gpu(gpus_[static_cast<size_t>(d) % gpus_.size()]));
      }
    } else {
      spaces = compat::partition(default_device_.space(), parts);
    }
    const int first_instance = static_cast<int>(all_states_.size()) + 1000 * n;
    std::vector<std::shared_ptr<compat::BlasHandle>> handles(static_cast<size_t>(parts));
    for (int d = 0; d < n; ++d) {
      auto state = std::make_shared<detail::DeviceState>();
      const int part = d % parts;
      state->space = spaces[static_cast<size_t>(part)];
      state->index = d;
      state->instance_id = first_instance + part;
      const int gpu = compat::gpu_of(state->space);
      state->memory_id = std::max(gpu, 0);
      state->description =
          gpu >= 0 ? fmt::format("{} GPU {}, stream {} of {}", ExecSpace::name(), gpu, part, parts)
                   : fmt::format("{}, partition {} of {}, {} thread(s)", ExecSpace::name(), part,
                                 parts, compat::concurrency(state->space));
      state->generator.manual_seed(device_seed(seed_, d));
      auto& handle = handles[static_cast<size_t>(part)];
      if (!handle) handle = std::make_shared<compat::BlasHandle>(state->space);
      state->blas = handle;
      all_states_.push_back(state);
      set.emplace_back(state);
    }
  } else {
    // Logical devices on the default instance, one after another. Device d is
    // the same in every set (device 0 is the default device itself), so tensors
    // move freely between devices(2)[1] and devices(4)[1].
    while (logical_devices_.size() < static_cast<size_t>(n)) {
      const int d = static_cast<int>(logical_devices_.size());
      auto state = std::make_shared<detail::DeviceState>();
      state->space = default_device_.space();
      state->index = d;
      state->instance_id = 0;
      state->memory_id = std::max(gpu_, 0);
      state->blas = all_states_.front()->blas;  // the default instance's
      state->description =
          fmt::format("{}, logical device on the default instance", ExecSpace::name());
      state->generator.manual_seed(device_seed(seed_, d));
      all_states_.push_back(state);
      logical_devices_.emplace_back(state);
    }
    set.assign(logical_devices_.begin(), logical_devices_.begin() + n);
  }
  device_sets_[n] = set;
  return set;
}

void Runtime::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(devices_mutex_);
  seed_ = seed;
  for (auto& state : all_states_) state->generator.manual_seed(device_seed(seed, state->index));
}

TransferCounts Runtime::transfers() const {
  TransferCounts t;
  t.to_host = to_host_.load();
  t.to_host_bytes = to_host_bytes_.load();
  t.to_device = to_device_.load();
  t.to_device_bytes = to_device_bytes_.load();
  return t;
}

void Runtime::count_transfer(bool to_host, size_t bytes) {
  (to_host ? to_host_ : to_device_).fetch_add(1, std::memory_order_relaxed);
  (to_host ? to_host_bytes_ : to_device_bytes_)
      .fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  if (visible_gpus <= 0) return -1;
  return std::max(local_rank, 0) % visible_gpus;
}

std::vector<int> parse_gpu_list(const std::string& text, const std::string& source) {
  std::vector<int> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 1 << 16) {  // names the variable at fault
      throw ValueError(
          fmt::format("{}='{}': '{}' is not a GPU id (a list like 0,1,3)", source, text, item));
    }
    if (std::find(ids.begin(), ids.end(), static_cast<int>(v)) != ids.end()) {
      throw ValueError(fmt::format("{}='{}' lists GPU {} twice", source, text, v));
    }
    ids.push_back(static_cast<int>(v));
    start = comma + 1;
  }
  return ids;
}

void manual_seed(uint64_t seed) {
  Runtime::get().manual_seed(seed);
}

}  // namespace kdp
