// The round trip of a cache line between two threads pinned to the first two
// CPUs of this process's affinity mask. Where those CPUs share a cache it
// takes tens of nanoseconds; where they do not (two sockets, or a virtual
// machine whose host has placed its vCPUs apart) several times as long, and
// every product that one BLAS thread writes and another reads crosses the
// machine: the suite (run_suite.py) measures it before and after each run
// and names the runs during which it changed (docs/performance.md, "Two
// speeds on machine D"). Prints one line:
//
//   ROUND_TRIP 58.3 ns between CPUs 0 and 1
//   ROUND_TRIP none (one CPU)
//
//   kdp_core_round_trip [--ms N]   (N: how long to measure, 200 by default)
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

alignas(64) std::atomic<long> ball{0};  // odd: the second thread's turn
std::atomic<bool> done{false};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The second thread: sends each odd value back as the next even one.
void returner(int cpu) {
  pin(cpu);
  long seen = 1;
  while (!done.load(std::memory_order_relaxed)) {
    if (ball.load(std::memory_order_acquire) == seen) {
      ball.store(seen + 1, std::memory_order_release);
      seen += 2;
    }
  }
}

// Nanoseconds a round trip, over `ms` milliseconds of them.
double measure(int first, int second, int ms) {
  pin(first);
  std::thread other(returner, second);
  long next = 0;
  int64_t trips = 0;
  const Clock::time_point start = Clock::now(), end = start + std::chrono::milliseconds(ms);
  Clock::time_point now = start;
  while (now < end) {
    for (int i = 0; i < 1000; ++i, ++trips, next += 2) {
      ball.store(next + 1, std::memory_order_release);
      while (ball.load(std::memory_order_acquire) != next + 2) {
      }
    }
    now = Clock::now();
  }
  done.store(true);
  other.join();
  return std::chrono::duration<double, std::nano>(now - start).count() / static_cast<double>(trips);
}

}  // namespace

int main(int argc, char** argv) {
  int ms = 200;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (std::strcmp(argv[i], "--ms") != 0 || end == argv[i + 1] || *end != '\0' || v < 10 ||
        v > 60000) {
      std::fprintf(stderr, "usage: %s [--ms N]  (N: milliseconds to measure, 10 to 60000)\n",
                   argv[0]);
      return 2;
    }
    ms = static_cast<int>(v);
    ++i;
  }
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  if (cpus.size() < 2) {
    std::printf("ROUND_TRIP none (one CPU)\n");
    return 0;
  }
  const double ns = measure(cpus[0], cpus[1], ms);
  std::printf("ROUND_TRIP %.1f ns between CPUs %d and %d\n", ns, cpus[0], cpus[1]);
  return 0;
}
