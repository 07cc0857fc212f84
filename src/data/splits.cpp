#include "kdp/data/splits.hpp"

#include <fmt/format.h>

#include <tuple>

#include "core/check.hpp"
#include "kdp/core/error.hpp"

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

// Both parts train and evaluate one model: both hold samples, of one kind.
void check_parts(const Splits& d) {
  for (const auto& [part, name, what] : {std::tuple{d.train.get(), &d.train_name, "train on"},
                                         std::tuple{d.val.get(), &d.val_name, "validate on"}}) {
    KDP_CHECK(part->size() > 0, ValueError, "{} holds no samples; training needs samples to {}",
              *name, what);
  }
  KDP_CHECK(d.train->sample_shape() == d.val->sample_shape() &&
                d.train->label_shape() == d.val->label_shape() &&
                (d.train->num_classes() == 0) == (d.val->num_classes() == 0),
            ValueError,
            "the training and validation samples differ: {} has samples {} and targets {}, {} "
            "has samples {} and targets {}",
            d.train_name, d.train->sample_shape().str(), d.train->label_shape().str(), d.val_name,
            d.val->sample_shape().str(), d.val->label_shape().str());
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
  Splits d;
  const std::string inputs = path_in(spec.inputs, "train");
  d.source =
      std::make_shared<HDF5Dataset>(spec.file, inputs, path_in(spec.targets, "train"), options);
  d.train = d.source;
  d.train_name = fmt::format("'{}' of '{}'", inputs, spec.file);
  if (held_out(spec)) {
    const double fraction = spec.val_fraction > 0.0 ? spec.val_fraction : 0.1;
    const HoldoutSplit split = holdout_split(d.source->size(), fraction, spec.seed);
    d.train = std::make_shared<Subset>(d.source, split.train);
    d.val = std::make_shared<Subset>(d.source, split.held_out);
    d.val_name = fmt::format("the {} held out of {}", fraction, d.train_name);
    d.train_name = fmt::format("the rest of {}", d.train_name);
  } else {
    const std::string& file = spec.val_file.empty() ? spec.file : spec.val_file;
    const std::string vi = path_in(spec.inputs, "test");
    d.val = std::make_shared<HDF5Dataset>(file, vi, path_in(spec.targets, "test"), options);
    d.val_name = fmt::format("'{}' of '{}'", vi, file);
  }
  check_parts(d);
  return d;
}

}  // namespace kdp::data
