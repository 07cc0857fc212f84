#pragma once
// Checks of the drivers' numeric options whose errors read as a person would
// write them: "--epochs must be at least 1 (got -3)".

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

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

/// A finite number above `low` (or at least `low` when `inclusive`).
inline CLI::Validator real_number(double low, bool inclusive) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) {
          return fmt::format("must be a number (got '{}')", text);
        }
        if (errno == ERANGE || !std::isfinite(v)) {
          return fmt::format("must be a finite number (got '{}')", text);
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
