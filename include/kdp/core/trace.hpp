#pragma once
/// \file
/// kdp's regions and its per-process timeline. Every op, layer and phase of
/// training opens a Region, which Kokkos Tools connectors see; the phases of
/// a step (data wait, forward, backward, optimizer, reduction wait, checkpoint
/// write) are also spans of the timeline, with each bucket's ready time and
/// reduction, written as Chrome-trace JSON (chrome://tracing, Perfetto) by
/// kdp-train --trace. Recording is off until set_enabled(true).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kdp/core/kokkos_compat.hpp"

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

/// Whether this thread opens Kokkos Tools regions: a connector is loaded and
/// this is the thread that started the Runtime (Kokkos Tools regions nest on
/// one stack per process: DataParallel's replica threads and the
/// communication thread open none, and their work shows inside the region of
/// the main thread that waits for it).
bool tool_regions_here();
/// Makes the calling thread the one that opens Kokkos Tools regions
/// (Runtime::start calls it).
void set_region_thread();

/// A region of kdp's work from construction to destruction: a Kokkos Tools
/// region named `name` (what kp_space_time_stack, the NVTX connector or any
/// connector shows: README, "Profiling", lists the names), and, given a
/// `track` ("compute" or "comm"), a span of the Chrome trace while recording
/// is on. `name` must outlive the region. With neither a connector nor the
/// trace on it costs a few loads.
class Region {
 public:
  explicit Region(const char* name, const char* track = nullptr) : name_(name), track_(track) {
    if (track != nullptr && enabled()) {
      traced_ = true;
      begin_ = Clock::now();
    }
    if (tool_regions_here()) tool_.emplace(name);
  }
  ~Region() {
    tool_.reset();
    if (traced_) record(name_, begin_, Clock::now(), track_);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  const char* name_;
  const char* track_;
  bool traced_ = false;
  Clock::time_point begin_;
  std::optional<compat::ScopedRegion> tool_;
};

/// Chrome-trace event objects for `events` of `rank` (its process), times in
/// microseconds after `origin`, comma-separated (no brackets).
std::string chrome_events(const std::vector<Event>& events, int rank, Clock::time_point origin);

}  // namespace kdp::trace
