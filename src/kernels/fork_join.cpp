#include "kernels/fork_join.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kdp/core/threads.hpp"
#include "kernels/native/host_kernels.hpp"

namespace kdp::detail {

namespace {

thread_local bool inside_job = false;

// How long a thread looks for what it waits on before it sleeps: a step's
// products follow one another within microseconds to a millisecond or two
// (the ops between them), and waking a sleeping thread costs about as much
// as a small product, more under a hypervisor. After the first kPause of
// it, the thread yields between looks, so that another runnable thread of
// the process (the loader's) gets the core.
constexpr auto kSpin = std::chrono::microseconds(2000);
constexpr auto kPause = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `ready()` or kSpin has passed; whether it became ready.
template <class Ready>
bool spin_until(Ready ready) {
  const auto start = std::chrono::steady_clock::now();
  while (!ready()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= start + kSpin) return false;
    if (now >= start + kPause) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
  return true;
}

// Threads that wait for a job, take its blocks one at a time, and wait again.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int threads, int64_t blocks, const std::function<void(int64_t)>& f) {
    const std::lock_guard<std::mutex> one_job(job_mutex_);
    grow(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &f;
      blocks_ = blocks;
      next_.store(0);
      helpers_ = std::min<int>(threads - 1, static_cast<int>(workers_.size()));
      busy_ = helpers_;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();  // cheap when every helper is still spinning
    take_blocks(f);
    spin_until([&] { return busy_.load() == 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_.load() == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void grow(int count) {
    const bool flush = flushes_denormals();
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index, flush] {
        set_flush_denormals(flush);
        inside_job = true;
        work(index);
      });
    }
  }

  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load() != seen || stop_.load(); });
      const std::function<void(int64_t)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && index < helpers_); });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      take_blocks(*job);
      if (busy_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller waits or will see 0
        done_.notify_one();
      }
    }
  }

  void take_blocks(const std::function<void(int64_t)>& f) {
    for (int64_t b = next_.fetch_add(1); b < blocks_; b = next_.fetch_add(1)) {
      try {
        f(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t blocks_ = 0;
  std::atomic<int64_t> next_{0};
  int helpers_ = 0;
  std::atomic<int> busy_{0};
  std::atomic<uint64_t> generation_{0};  // written under mutex_, read while spinning
  std::exception_ptr error_;
  std::atomic<bool> stop_{false};
};

}  // namespace

void fork_join(int threads, int64_t blocks, const std::function<void(int64_t)>& f) {
  if (blocks <= 0) return;
  if (threads <= 1 || blocks == 1 || inside_job) {
    for (int64_t b = 0; b < blocks; ++b) f(b);
    return;
  }
  static Pool pool;
  const bool outer = inside_job;
  inside_job = true;
  try {
    pool.run(threads, blocks, f);
  } catch (...) {
    inside_job = outer;
    throw;
  }
  inside_job = outer;
}

void host_blocks(const Device& device, int threads, int64_t n, int64_t chunk,
                 const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (device.concurrency() > 1) return host_chunks("kdp::host blocks", device, n, chunk, f);
  fork_join(threads, (n + chunk - 1) / chunk,
            [&](int64_t b) { f(b * chunk, std::min(n, (b + 1) * chunk)); });
}

}  // namespace kdp::detail
