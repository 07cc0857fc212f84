#include "kdp/data/splits.hpp"

#include <fmt/format.h>

#include <glob.h>

#include <algorithm>
#include <tuple>

#include "core/check.hpp"
#include "kdp/core/error.hpp"
#include "kdp/data/token_dataset.hpp"

namespace kdp::data {

namespace {

// A dataset's path in a split: names in the split's group, paths as they are.
std::string path_in(const std::string& name, const char* split) {
  return name.rfind('/', 0) == 0 ? name : fmt::format("/{}/{}", split, name);
}

// Whether the validation samples are held out of the training ones: asked
// for, or the data is one set of samples and no other file holds them.
bool held_out(const SplitSpec& s) {
  return s.val_fraction > 0.0 || (s.inputs.rfind('/', 0) == 0 && s.val_file.empty());
}

// How a part's features are stored: "uint8 [784]", "float64 [2, 32]".
std::string stored(const Dataset& d) {
  return fmt::format("{} {}", d.feature_type(), d.sample_shape().str());
}

// Both parts train and evaluate one model: both hold samples, of one kind.
void check_parts(const Splits& d) {
  for (const auto& [part, name, what] : {std::tuple{d.train.get(), &d.train_name, "train on"},
                                         std::tuple{d.val.get(), &d.val_name, "validate on"}}) {
    KDP_CHECK(part->size() > 0, ValueError, "{} holds no samples; training needs samples to {}",
              *name, what);
  }
  // Bytes are scaled by 1/255, other numbers are not: one model could not
  // read both.
  KDP_CHECK(stored_scale(*d.train) == stored_scale(*d.val), ValueError,
            "{} is {} but {} is {}: the two would be scaled and normalised differently",
            d.train_name, stored(*d.train), d.val_name, stored(*d.val));
  KDP_CHECK(d.train->sample_shape() == d.val->sample_shape() &&
                d.train->label_shape() == d.val->label_shape() &&
                (d.train->num_classes() == 0) == (d.val->num_classes() == 0),
            ValueError,
            "the training and validation samples differ: {} has samples {} and targets {}, {} "
            "has samples {} and targets {}",
            d.train_name, d.train->sample_shape().str(), d.train->label_shape().str(), d.val_name,
            d.val->sample_shape().str(), d.val->label_shape().str());
}

// The datasets at `inputs` and `targets` of every file, as one.
std::shared_ptr<Dataset> open_all(const std::vector<std::string>& files, const std::string& inputs,
                                  const std::string& targets, const HDF5DatasetOptions& options,
                                  std::shared_ptr<HDF5Dataset>* first = nullptr) {
  std::vector<std::shared_ptr<const Dataset>> parts;
  for (const std::string& f : files) {
    auto d = std::make_shared<HDF5Dataset>(f, inputs, targets, options);
    if (first != nullptr && parts.empty()) *first = d;
    parts.push_back(d);
  }
  if (parts.size() == 1) return std::const_pointer_cast<Dataset>(parts.front());
  return std::make_shared<ConcatDataset>(parts, files);
}

// "'/train/images' of 'a.h5'", or "of 4 files 'run-*.h5'".
std::string name_of(const std::string& dataset, const std::string& spec,
                    const std::vector<std::string>& files) {
  if (files.size() == 1) return fmt::format("'{}' of '{}'", dataset, files.front());
  return fmt::format("'{}' of {} files '{}'", dataset, files.size(), spec);
}

}  // namespace

std::vector<std::string> expand_files(const std::string& spec) {
  std::vector<std::string> files;
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int r = ::glob(spec.c_str(), 0, nullptr, &g);
    for (size_t k = 0; r == 0 && k < g.gl_pathc; ++k) files.emplace_back(g.gl_pathv[k]);
    globfree(&g);
    KDP_CHECK(!files.empty(), ValueError, "the pattern '{}' matches no file", spec);
    return files;
  }
  size_t from = 0;
  while (from <= spec.size()) {
    const size_t comma = std::min(spec.find(',', from), spec.size());
    if (comma > from) files.push_back(spec.substr(from, comma - from));
    from = comma + 1;
  }
  KDP_CHECK(!files.empty(), ValueError, "no data file named");
  return files;
}

namespace {

// A token file's splits (kdp-data import-text): /train and /test, whole.
Splits open_token_splits(const SplitSpec& spec, const std::vector<std::string>& files) {
  KDP_CHECK(files.size() == 1, ValueError,
            "'{}' names {} files of token windows: kdp trains on one token file", spec.file,
            files.size());
  KDP_CHECK(spec.val_fraction == 0.0, ValueError,
            "'{}' holds token windows, whose validation text is its /test split (the end of "
            "the text): a held-out fraction ({}) of windows would overlap the training ones",
            spec.file, spec.val_fraction);
  Splits d;
  d.files = files;
  d.train = std::make_shared<TokenDataset>(files.front(), "train");
  d.train_name = fmt::format("'/train/tokens' of '{}'", files.front());
  const std::string val_file = spec.val_file.empty() ? files.front() : spec.val_file;
  d.val = std::make_shared<TokenDataset>(val_file, "test");
  d.val_name = fmt::format("'/test/tokens' of '{}'", val_file);
  const auto& train = static_cast<const TokenDataset&>(*d.train);
  const auto& val = static_cast<const TokenDataset&>(*d.val);
  KDP_CHECK(train.tokenizer() == val.tokenizer() && train.num_classes() == val.num_classes(),
            ValueError, "{} has {} tokens ({}) but {} has {} ({}): one model cannot read both",
            d.train_name, train.num_classes(), train.tokenizer(), d.val_name, val.num_classes(),
            val.tokenizer());
  check_parts(d);
  return d;
}

}  // namespace

Splits open_splits(const SplitSpec& spec, const HDF5DatasetOptions& options) {
  KDP_CHECK(spec.val_fraction == 0.0 || spec.val_file.empty(), ValueError,
            "a held-out fraction ({}) and a validation file ('{}') both name the validation "
            "samples: give one",
            spec.val_fraction, spec.val_file);
  KDP_CHECK(spec.val_fraction >= 0.0 && spec.val_fraction < 1.0, ValueError,
            "a held-out fraction of {} leaves no training samples: it must be in [0, 1)",
            spec.val_fraction);
  const std::vector<std::string> files = expand_files(spec.file);
  if (TokenDataset::holds_tokens(files.front())) return open_token_splits(spec, files);
  Splits d;
  d.files = files;
  const std::string inputs = path_in(spec.inputs, "train");
  d.train = open_all(d.files, inputs, path_in(spec.targets, "train"), options, &d.source);
  d.train_name = name_of(inputs, spec.file, d.files);
  if (held_out(spec)) {
    const double fraction = spec.val_fraction > 0.0 ? spec.val_fraction : 0.1;
    const HoldoutSplit split = holdout_split(d.train->size(), fraction, spec.seed);
    d.val = std::make_shared<Subset>(d.train, split.held_out);
    d.train = std::make_shared<Subset>(d.train, split.train);
    d.val_name = fmt::format("the {} held out of {}", fraction, d.train_name);
    d.train_name = fmt::format("the rest of {}", d.train_name);
  } else {
    const std::string& spec_file = spec.val_file.empty() ? spec.file : spec.val_file;
    const std::vector<std::string> files = expand_files(spec_file);
    const std::string vi = path_in(spec.inputs, "test");
    d.val = open_all(files, vi, path_in(spec.targets, "test"), options);
    d.val_name = name_of(vi, spec_file, files);
  }
  check_parts(d);
  return d;
}

}  // namespace kdp::data
