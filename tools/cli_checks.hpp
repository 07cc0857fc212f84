#pragma once
// Checks of the drivers' numeric options whose errors read as a person would
// write them: "--epochs must be at least 1 (got -3)".

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kdp/core/closest_name.hpp"

namespace kdp::cli {

/// A whole number in [low, high]; `meaning` replaces the range in the message
/// ("-1 (no limit) or a number of steps").
inline CLI::Validator whole_number(int64_t low, int64_t high = std::numeric_limits<int64_t>::max(),
                                   std::string meaning = "") {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        const bool parsed = !text.empty() && end == text.c_str() + text.size() && errno == 0;
        if (parsed && v >= low && v <= high) return "";
        if (!meaning.empty()) return fmt::format("must be {} (got '{}')", meaning, text);
        if (!parsed) return fmt::format("must be a whole number (got '{}')", text);
        if (v < low) return fmt::format("must be at least {} (got {})", low, v);
        return fmt::format("must be at most {} (got {})", high, v);
      },
      meaning.empty() ? fmt::format("INT >= {}", low) : meaning);
}

/// A whole number in [0, 2^64 - 1] (seeds).
inline CLI::Validator unsigned_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        (void)v;
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (digits && end == text.c_str() + text.size() && errno == 0) return "";
        if (digits) return fmt::format("must be at most {} (got {})", UINT64_MAX, text);
        const bool negative = text.size() > 1 && text[0] == '-' &&
                              text.find_first_not_of("0123456789", 1) == std::string::npos;
        if (negative) return fmt::format("must be at least 0 (got {})", text);
        return fmt::format("must be a whole number from 0 to {} (got '{}')", UINT64_MAX, text);
      },
      "UINT");
}

/// A finite number above `low` (or at least `low` when `inclusive`) that a
/// float holds: training runs in float, where a value below the smallest
/// normal float (1.17549e-38) would be lost to underflow.
inline CLI::Validator real_number(double low, bool inclusive) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) {
          return fmt::format("must be a number (got '{}')", text);
        }
        if (!std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1.0)) {
          return fmt::format("must be a finite number (got '{}')", text);
        }
        if (v != 0.0 && std::fabs(v) < FLT_MIN) {
          return fmt::format("must be {}at least the smallest normal float {} (got {})",
                             inclusive && low == 0.0 ? "0 or " : "", FLT_MIN, text);
        }
        if (v > FLT_MAX || v < -FLT_MAX) {
          return fmt::format("must be at most the largest float {} in size (got {})", FLT_MAX,
                             text);
        }
        if (inclusive ? v < low : v <= low) {
          return fmt::format("must be {} {} (got {})", inclusive ? "at least" : "greater than", low,
                             text);
        }
        return "";
      },
      fmt::format("NUMBER {} {}", inclusive ? ">=" : ">", low));
}

/// Prints parse errors as one sentence ("--epochs must be at least 1 (got -3)")
/// followed by where to find help.
/// (Call it before adding subcommands: they copy it.)
inline void use_plain_messages(CLI::App& app, const std::string& program) {
  app.failure_message([program](const CLI::App*, const CLI::Error& e) {
    std::string message = e.what();
    const size_t colon = message.find(": must ");
    if (colon != std::string::npos && message.rfind("--", 0) == 0) message.erase(colon, 1);
    return fmt::format("{}: {}\nRun with --help for more information.\n", program, message);
  });
}

/// The option of `app` closest to `name` ("--checkpoint_dir" ->
/// "--checkpoint-dir"), or "" when none is close.
inline std::string closest_option(const CLI::App& app, std::string name) {
  name = name.substr(0, name.find('='));
  std::replace(name.begin(), name.end(), '_', '-');
  std::vector<std::string> options;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& lname : opt->get_lnames()) options.push_back("--" + lname);
  }
  return closest_name(name, options);
}

/// Refuses the arguments a parser that allows extras left over (`left`),
/// except those that start with one of `passthrough` (Kokkos' own
/// "--kokkos-"): prints "kdp-train: unknown option '--checkpoint_dir' (did
/// you mean --checkpoint-dir?)", the suggestion taken from the options of
/// `app`, and returns 1; returns -1 when nothing is left.
inline int reject_unknown(const CLI::App& app, const std::vector<std::string>& left,
                          const std::string& program,
                          const std::vector<std::string>& passthrough = {}) {
  for (const std::string& arg : left) {
    const bool passes = std::any_of(passthrough.begin(), passthrough.end(),
                                    [&](const std::string& p) { return arg.rfind(p, 0) == 0; });
    if (passes) continue;
    if (arg.rfind("-", 0) != 0) {
      std::fprintf(stderr, "%s: unexpected argument '%s'\nRun with --help for more information.\n",
                   program.c_str(), arg.c_str());
      return 1;
    }
    const std::string suggestion = closest_option(app, arg);
    std::fprintf(stderr, "%s: unknown option '%s'%s\nRun with --help for more information.\n",
                 program.c_str(), arg.c_str(),
                 suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion).c_str());
    return 1;
  }
  return -1;
}

/// Parses the command line. Returns -1 when the program goes on, else its exit
/// status: 0 after --help, 1 for a bad option, the status of every other kind
/// of bad input.
inline int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
}

}  // namespace kdp::cli
