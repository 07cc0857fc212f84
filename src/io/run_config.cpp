#include "kdp/io/run_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/version.hpp"

namespace kdp::io {

namespace {

constexpr const char* kFormat = "kdp-run-config";
constexpr int kVersion = 1;

}  // namespace

std::vector<SettingDifference> compare_run_configs(const RunConfig& ours, const RunConfig& recorded,
                                                   bool partial) {
  std::vector<SettingDifference> out;
  for (const auto& [name, value] : ours) {
    auto it = recorded.find(name);
    if (it == recorded.end()) {
      if (!partial) out.push_back({name, value, "(not recorded)"});
    } else if (it->second != value) {
      out.push_back({name, value, it->second});
    }
  }
  for (const auto& [name, value] : recorded) {
    if (ours.count(name) == 0) out.push_back({name, "(not set)", value});
  }
  std::sort(out.begin(), out.end(),
            [](const SettingDifference& a, const SettingDifference& b) { return a.name < b.name; });
  return out;
}

std::vector<SettingDifference> checkpoint_differences(const RunConfig& ours,
                                                      const RunConfig& recorded) {
  RunConfig mine = ours, theirs = recorded;
  for (const char* key : {"parameters", "optimizer"}) {
    mine.erase(key);
    theirs.erase(key);
  }
  return compare_run_configs(mine, theirs, /*partial=*/recorded.empty());
}

std::string format_differences(const std::vector<SettingDifference>& differences,
                               const std::string& recorded_label) {
  size_t w0 = std::string("setting").size(), w1 = std::string("this run").size();
  for (const auto& d : differences) {
    w0 = std::max(w0, d.name.size());
    w1 = std::max(w1, d.ours.size());
  }
  std::string out =
      fmt::format("  {:<{}}  {:<{}}  {}\n", "setting", w0, "this run", w1, recorded_label);
  for (const auto& d : differences) {
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", d.name, w0, d.ours, w1, d.recorded);
  }
  return out;
}

std::string run_config_to_json(const RunConfig& config) {
  nlohmann::json doc;
  doc["format"] = kFormat;
  doc["version"] = kVersion;
  doc["written_by"] = std::string("kdp ") + version_string;
  char created[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  doc["created"] = created;
  doc["settings"] = nlohmann::json::object();
  for (const auto& [name, value] : config) doc["settings"][name] = value;
  return doc.dump(2) + "\n";
}

RunConfig run_config_from_json(const std::string& text, const std::string& source) {
  KDP_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, IOError,
            "'{}' is not a run configuration: it is empty", source);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    KDP_FAIL(IOError, "'{}' is not a run configuration: it is not JSON (a syntax error at byte {})",
             source, e.byte);
  } catch (const nlohmann::json::exception&) {
    KDP_FAIL(IOError, "'{}' is not a run configuration: it is not JSON", source);
  }
  auto is = [&](const char* key, auto check) { return doc.contains(key) && check(doc[key]); };
  KDP_CHECK(doc.is_object() && is("format", [](const auto& v) { return v == kFormat; }) &&
                is("settings", [](const auto& v) { return v.is_object(); }),
            IOError, "'{}' is not a run configuration (no format '{}' with settings)", source,
            kFormat);
  if (doc.contains("version")) {
    const nlohmann::json& version = doc["version"];
    KDP_CHECK(version.is_number_integer() && version.get<int64_t>() >= 1, IOError,
              "'{}' is not a run configuration: its version {} is not a "
              "whole number >= 1",
              source, version.dump());
    KDP_CHECK(version.get<int64_t>() <= kVersion, IOError,
              "'{}' has run configuration version {}; this kdp reads up "
              "to {}",
              source, version.get<int64_t>(), kVersion);
  }
  RunConfig config;
  for (const auto& [name, value] : doc["settings"].items()) {
    KDP_CHECK(value.is_string(), IOError, "setting '{}' in '{}' is not a string", name, source);
    config[name] = value.get<std::string>();
  }
  return config;
}

}  // namespace kdp::io
