#pragma once
/// \file
/// A per-process timeline of training's phases (data wait, forward, backward,
/// each bucket's ready time and reduction, optimizer), written as Chrome-trace
/// JSON (chrome://tracing, Perfetto) by kdp-train --trace. Recording is off
/// until set_enabled(true); a disabled Span costs one atomic load.

#include <chrono>
#include <string>
#include <vector>

namespace kdp::trace {

using Clock = std::chrono::steady_clock;

/// One phase: a span on a track ("compute" or "comm"), or an instant where
/// begin == end.
struct Event {
  std::string name;
  const char* track = "compute";
  Clock::time_point begin, end;
  int64_t step = -1;
};

bool enabled();
void set_enabled(bool on);
/// The step later events belong to.
void set_step(int64_t step);
/// Records a phase (kept while recording is on, up to a million events).
void record(std::string name, Clock::time_point begin, Clock::time_point end,
            const char* track = "compute");
/// Every event recorded so far, taken out of the recorder.
std::vector<Event> take();

/// Records the phase from construction to destruction.
class Span {
 public:
  explicit Span(const char* name) : name_(name), on_(enabled()) {
    if (on_) begin_ = Clock::now();
  }
  ~Span() {
    if (on_) record(name_, begin_, Clock::now());
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  bool on_;
  Clock::time_point begin_;
};

/// Chrome-trace event objects for `events` of `rank` (its process), times in
/// microseconds after `origin`, comma-separated (no brackets).
std::string chrome_events(const std::vector<Event>& events, int rank, Clock::time_point origin);

}  // namespace kdp::trace
