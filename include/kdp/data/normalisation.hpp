#pragma once
/// \file
/// Per-channel standardisation of features and targets, computed in one
/// streaming pass over a dataset and applied to each batch on its device.

#include <cstdint>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/data/dataset.hpp"

namespace kdp::data {

/// value' = (value - mean[c]) / stddev[c], c the value's channel in its
/// sample: the first dimension of samples of rank 2 or more ([C, H, W],
/// [C, L]), each element of [F] samples, the one value of a scalar.
struct ChannelNormalisation {
  std::vector<float> mean, stddev;  // one per channel; empty: none
  int64_t channel_size = 1;         // consecutive values of one channel in a sample

  bool active() const { return !mean.empty(); }
  /// Standardises a batch [B, ...] on its device, in place.
  void apply(const Tensor& batch) const;
  /// The inverse, in place: standardised values back to the original units.
  void invert(const Tensor& batch) const;
};

/// The mean and standard deviation of every channel of a dataset's features
/// (or, with `targets`, its float targets) over all its samples, read in
/// blocks and combined in double (Chan's formula: no cancellation); a
/// channel without spread gets a standard deviation of 1. Non-finite values
/// are a NumericalError naming the channel.
ChannelNormalisation channel_moments(const Dataset& dataset, bool targets);

}  // namespace kdp::data
