// FitRun's timeline (--trace): every rank's step phases as one Chrome trace,
// and which rank was slowest.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "fit_run.hpp"
#include "kdp/core/trace.hpp"
#include "kdp/io/atomic_file.hpp"
#include "kdp/io/output_file.hpp"

namespace kdp::train::detail {

// Rank 0 checks where the trace goes before training; every rank starts its
// clock at one barrier, so that the ranks' times line up.
void FitRun::start_trace() {
  if (o_.trace_path.empty()) return;
  trace_path_ = o_.trace_path;
  on_rank0(
      comm_,
      [&] {
        std::string& path = trace_path_;
        // A resumed run (a requeued job) keeps the earlier part's trace and
        // writes its own beside it, named by the step it resumed at.
        const io::OutputKind trace = io::OutputKind::trace();
        if (!o_.overwrite && !plan_.resume_path.empty() && std::filesystem::is_regular_file(path) &&
            trace.recognises(path)) {
          const std::filesystem::path p(path);
          path = (p.parent_path() / (p.stem().string() + ".step" + std::to_string(global_step_) +
                                     p.extension().string()))
                     .string();
        }
        io::claim_output(path, trace, o_.overwrite, "kdp::train::Trainer");
      },
      "rank 0 could not start the run: ");
  broadcast_string(comm_, trace_path_);
  comm_.barrier();
  trace_origin_ = trace::Clock::now();
  trace::set_step(global_step_ + 1);
  trace::set_enabled(true);
  tracing_ = true;
}

// Every rank's events to rank 0, which writes them as one Chrome trace and
// names the rank whose forward and backward took longest per step.
void FitRun::write_trace() {
  if (!tracing_) return;
  tracing_ = false;
  trace::set_enabled(false);
  const std::vector<trace::Event> events = trace::take();
  double compute = 0.0;
  std::set<int64_t> steps;
  // Computing, not waiting for the other ranks (backward holds DDP's wait).
  for (const trace::Event& e : events) {
    const double s = std::chrono::duration<double>(e.end - e.begin).count();
    if (e.name == "kdp::train::forward" || e.name == "kdp::train::backward") {
      compute += s;
      steps.insert(e.step);
    } else if (e.name == "kdp::ddp::reduction wait") {
      compute -= s;
    }
  }
  const double per_step_ms =
      steps.empty() ? 0.0 : 1e3 * compute / static_cast<double>(steps.size());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string mine = fmt::format("{} {}\n", per_step_ms, host) +
                           trace::chrome_events(events, comm_.rank(), trace_origin_);
  const auto all = comm_.allgather_bytes(mine.data(), mine.size());
  if (!rank0_) return;
  std::string json =
      std::string(io::kTracePrefix) + ",\"producer\":\"kdp-train\"},\"traceEvents\":[";
  std::vector<std::pair<double, std::string>> ranks;  // ms per step, host
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string text(all[r].begin(), all[r].end());
    const size_t eol = text.find('\n');
    std::istringstream head(text.substr(0, eol));
    double ms = 0.0;
    std::string node;
    head >> ms >> node;
    ranks.emplace_back(ms, node);
    json += (r > 0 ? "," : "") + text.substr(eol + 1);
  }
  json += "],\"displayTimeUnit\":\"ms\"}\n";
  io::write_file_atomically(trace_path_, json);
  std::vector<double> sorted;
  for (const auto& [ms, node] : ranks) sorted.push_back(ms);
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];  // the lower one
  const auto slowest =
      static_cast<size_t>(std::max_element(ranks.begin(), ranks.end()) - ranks.begin());
  progress_.message(fmt::format(
      "trace: {} ({} rank(s)); slowest rank {} (node {}): computing {:.1f} ms per step, "
      "median of the ranks {:.1f} ms{}",
      trace_path_, ranks.size(), slowest, ranks[slowest].second, ranks[slowest].first, median,
      ranks.size() > 1 && ranks[slowest].first > 1.25 * median ? " - a straggler" : ""));
}

}  // namespace kdp::train::detail
