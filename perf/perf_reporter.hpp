#pragma once
// A console reporter that also remembers each benchmark's time per iteration,
// so a benchmark executable can print ratios against references measured in
// the same run (absolute times on shared machines mean little).

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

namespace kdp::perf {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  // Colours only on a terminal: a log read by a program (perf/run_suite.py)
  // gets plain lines.
  RatioReporter() : ConsoleReporter(isatty(STDOUT_FILENO) != 0 ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    record(runs);
    ConsoleReporter::ReportRuns(runs);
  }

 protected:
  void record(const std::vector<Run>& runs) {
    for (const Run& r : runs) {
      // With --benchmark_repetitions the median stands for the benchmark.
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (median || (r.run_type == Run::RT_Iteration && r.iterations > 0 &&
                     medians_.count(r.run_name.function_name + "/" + r.run_name.args) == 0)) {
        // Keyed by the registered name, without Google Benchmark's "/real_time".
        std::string name = r.run_name.function_name;
        if (!r.run_name.args.empty()) name += "/" + r.run_name.args;
        if (median) medians_.insert(r.run_name.function_name + "/" + r.run_name.args);
        times_[name] = r.GetAdjustedRealTime();
        units_[name] = benchmark::GetTimeUnitString(r.time_unit);
        for (const auto& [key, counter] : r.counters) counters_[name][key] = counter.value;
      }
    }
  }

 public:
  bool has(const std::string& name) const { return times_.count(name) != 0; }
  double time(const std::string& name) const { return times_.at(name); }
  double counter(const std::string& name, const std::string& key) const {
    return counters_.at(name).at(key);
  }

  /// Prints reference_time / measured_time ("1.00" = as fast as the reference).
  double print_ratio(const std::string& label, const std::string& measured,
                     const std::string& reference, double target) const {
    if (!has(measured) || !has(reference)) return 0.0;
    const double ratio = time(reference) / time(measured);
    std::printf("RATIO %-48s %6.3f  (target >= %.2f: %s)\n", label.c_str(), ratio, target,
                ratio >= target ? "met" : "MISSED");
    return ratio;
  }

 private:
  std::map<std::string, double> times_;
  std::set<std::string> medians_;
  std::map<std::string, std::string> units_;
  std::map<std::string, std::map<std::string, double>> counters_;
};

}  // namespace kdp::perf
