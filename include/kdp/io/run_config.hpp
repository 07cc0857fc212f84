#pragma once
/// \file
/// RunConfig: the settings that identify one training run (model, optimizer and
/// its hyperparameters, data and its normalisation, global batch, seed). A
/// checkpoint directory belongs to one configuration: it is recorded in the
/// directory (run.json) and in every checkpoint (/run), and a run whose settings
/// differ may not resume from, rotate or replace those files. Settings that may
/// change between a run and its resumption (epochs, threads, devices, ranks) are
/// not part of it.

#include <map>
#include <string>
#include <vector>

namespace kdp::io {

/// Setting name -> value, as text ("model" -> "784,256,256,10").
using RunConfig = std::map<std::string, std::string>;

/// One setting whose value differs between this run and a recorded one.
struct SettingDifference {
  std::string name;
  std::string ours;      // "(not set)" when this run lacks it
  std::string recorded;  // "(not recorded)" when the record lacks it
};

/// The settings that differ between `ours` and `recorded`, by name. With
/// `partial`, settings absent from the record are not compared (records of
/// checkpoints that kept only part of their configuration).
std::vector<SettingDifference> compare_run_configs(const RunConfig& ours, const RunConfig& recorded,
                                                   bool partial = false);

/// The settings a checkpoint, read and about to be loaded, records otherwise
/// than `ours`. The model's ("parameters") and the optimizer's are left out:
/// loading compares those tensor by tensor. A checkpoint that records no
/// configuration (written before they were recorded) differs in nothing.
std::vector<SettingDifference> checkpoint_differences(const RunConfig& ours,
                                                      const RunConfig& recorded);

/// The differences as a table: setting, this run's value, the recorded value
/// (whose column is headed `recorded_label`).
std::string format_differences(const std::vector<SettingDifference>& differences,
                               const std::string& recorded_label);

/// A configuration as the JSON document of a directory's run.json.
std::string run_config_to_json(const RunConfig& config);
/// Parses a run.json document; IOError naming `source` when it is not one.
RunConfig run_config_from_json(const std::string& text, const std::string& source);

}  // namespace kdp::io
