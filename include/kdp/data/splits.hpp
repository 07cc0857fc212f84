#pragma once
/// \file
/// Where a training run's samples are in HDF5 files: the training and the
/// validation part, as kdp-train's --data, --inputs, --targets, --val-data and
/// --val-fraction name them (docs/architecture.md, "The dataset contract").

#include <cstdint>
#include <memory>
#include <string>

#include "kdp/data/hdf5_dataset.hpp"
#include "kdp/data/token_dataset.hpp"

namespace kdp::data {

/// The files and datasets of a run's samples.
struct SplitSpec {
  /// The training samples' file, or several as one dataset: a glob
  /// ("runs/run-*.h5", in name order) or a comma-separated list.
  std::string file;
  /// Datasets: a name ("images") is looked up in the /train and /test
  /// groups; a path ("/sim/fields") names one set of samples.
  std::string inputs = "images", targets = "labels";
  /// The validation samples from this file (or glob, or list) instead (at
  /// the same paths, names in its /test group).
  std::string val_file;
  /// Hold this fraction of the training samples out for validation (drawn by
  /// `seed`); 0: 0.1 for one set of samples without val_file, else none.
  double val_fraction = 0.0;
  uint64_t seed = 0;
};

/// A run's training and validation samples, opened.
struct Splits {
  std::shared_ptr<HDF5Dataset> source;  // the (first) training file's datasets (none for tokens)
  std::vector<std::string> files;       // the training files
  std::shared_ptr<Dataset> train, val;
  /// "'/train/images' of 'data.h5'", "the 0.1 held out of ...": for messages.
  std::string train_name, val_name;
  bool regression() const { return train->num_classes() == 0; }
  /// Token windows (kdp-data import-text): sequences of ids whose targets are
  /// the next ids, both splits TokenDatasets.
  bool tokens() const {
    return source == nullptr && dynamic_cast<const TokenDataset*>(train.get());
  }
};

/// Opens both parts, each dataset with `options`, and checks that both hold
/// samples of one kind (sample shape, target shape, classes or not).
/// Conflicting settings, a missing dataset or an empty part are errors
/// naming the file and dataset.
/// A file of token windows (kdp-data import-text) opens as two
/// TokenDatasets, /train and /test (val_file's /test when given); `inputs`,
/// `targets` and `options` do not apply to it, and a held-out fraction is
/// refused (its windows would overlap the training text).
Splits open_splits(const SplitSpec& spec, const HDF5DatasetOptions& options = {});

/// The files a SplitSpec::file names: the glob's matches in name order, the
/// list's entries, or the file itself. A glob that matches nothing is a
/// ValueError naming it.
std::vector<std::string> expand_files(const std::string& spec);

}  // namespace kdp::data
