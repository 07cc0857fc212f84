#include "kdp/core/trace.hpp"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

namespace kdp::trace {

namespace {

constexpr size_t kMaxEvents = 1000000;

thread_local bool region_thread = false;  // the thread that opens Kokkos Tools regions

struct Recorder {
  std::atomic<bool> on{false};
  std::atomic<int64_t> step{-1};
  std::mutex mutex;
  std::vector<Event> events;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

bool tool_regions_here() {
  return region_thread && compat::tools_loaded();
}

void set_region_thread() {
  region_thread = true;
}

bool enabled() {
  return recorder().on.load(std::memory_order_relaxed);
}

void set_enabled(bool on) {
  recorder().on = on;
}

void set_step(int64_t step) {
  recorder().step = step;
}

void record(std::string name, Clock::time_point begin, Clock::time_point end, const char* track) {
  Recorder& r = recorder();
  if (!r.on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.events.size() >= kMaxEvents) return;
  r.events.push_back({std::move(name), track, begin, end, r.step.load()});
}

std::vector<Event> take() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return std::move(r.events);
}

std::string chrome_events(const std::vector<Event>& events, int rank, Clock::time_point origin) {
  const auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin).count();
  };
  std::string out = fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{0},"args":{{"name":"rank {0}"}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"compute"}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":1,"args":{{"name":"communication"}}}})",
      rank);
  for (const Event& e : events) {
    const int tid = std::string(e.track) == "comm" ? 1 : 0;
    if (e.begin == e.end) {
      out += fmt::format(R"(,{{"name":"{}","ph":"i","s":"t","pid":{},"tid":{},"ts":{:.1f},)"
                         R"("args":{{"step":{}}}}})",
                         escaped(e.name), rank, tid, us(e.begin), e.step);
    } else {
      out += fmt::format(R"(,{{"name":"{}","ph":"X","pid":{},"tid":{},"ts":{:.1f},"dur":{:.1f},)"
                         R"("args":{{"step":{}}}}})",
                         escaped(e.name), rank, tid, us(e.begin), us(e.end) - us(e.begin), e.step);
    }
  }
  return out;
}

}  // namespace kdp::trace
