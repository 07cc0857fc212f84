#pragma once
/// \file
/// DataLoader: batches of a dataset in the order of a sampler, as tensors on a
/// device. A background thread prepares the next `prefetch` batches while the
/// current one trains; an error in that thread reaches the training thread at
/// the batch it concerns. The order depends only on the sampler's seed and
/// epoch.
///
///   for (data::Batch& batch : loader) { ... batch.features ... batch.labels ... }

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kdp/core/tensor.hpp"
#include "kdp/data/dataset.hpp"
#include "kdp/data/normalisation.hpp"
#include "kdp/data/sampler.hpp"

namespace kdp::data {

/// A batch on a device: features, labels and the sample indices.
struct Batch {
  Tensor features;  // [B, sample shape...]
  Tensor labels;    // [B] class indices, or [B, k] targets
  std::vector<int64_t> indices;
};

/// Batch size, drop_last, prefetch depth and the target device.
struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool drop_last = false;
  /// Batches prepared ahead by a background thread (0: none, fetched in place).
  int prefetch = 2;
  Device device = get_default_device();
  /// Datasets of byte features (byte_features()) hand over their numbers as
  /// stored, and the batch's features are made from them on `device`: a
  /// quarter of the bytes cross to a GPU and the conversion runs on it; in
  /// host memory the training thread converts them straight into the batch,
  /// which leaves the prefetch thread a quarter of the bytes to gather and
  /// no copy after it (the thread competes for a core with the products
  /// where the rank's threads fill the cores). Off: the prefetch thread
  /// converts to floats, which are copied to `device`.
  bool convert_on_device = true;
  /// Per-channel standardisation of each batch's features and targets, on
  /// `device` (none unless set; see channel_moments).
  ChannelNormalisation normalise_features, normalise_targets;

  /// Chained setters, one per option, to name each where it is set:
  /// DataLoaderOptions{}.with_batch_size(...).with_convert_on_device(...).
  DataLoaderOptions& with_batch_size(int64_t value) {
    batch_size = value;
    return *this;
  }
  DataLoaderOptions& with_drop_last(bool value) {
    drop_last = value;
    return *this;
  }
  DataLoaderOptions& with_prefetch(int value) {
    prefetch = value;
    return *this;
  }
  DataLoaderOptions& with_device(Device value) {
    device = std::move(value);
    return *this;
  }
  DataLoaderOptions& with_convert_on_device(bool value) {
    convert_on_device = value;
    return *this;
  }
  DataLoaderOptions& with_normalise_features(ChannelNormalisation value) {
    normalise_features = std::move(value);
    return *this;
  }
  DataLoaderOptions& with_normalise_targets(ChannelNormalisation value) {
    normalise_targets = std::move(value);
    return *this;
  }
};

/// Batches of a dataset in a sampler's order, prefetched on a thread.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator;
  /// Starts an epoch (of the sampler's current epoch), from the start batch.
  Iterator begin();
  Iterator end();

  /// Batches per epoch.
  int64_t num_batches() const;
  /// Selects the sampler's epoch for the next begin().
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }
  /// The next begin() skips the first `batches` batches (resuming mid-epoch);
  /// it applies once.
  void set_start_batch(int64_t batches);
  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() { return *sampler_; }
  const DataLoaderOptions& options() const { return options_; }
  /// Seconds the training thread spent waiting for batches, in total.
  double wait_seconds() const { return wait_seconds_; }

  struct Epoch;

  /// Walks one epoch's batches.
  class Iterator {
   public:
    Iterator() = default;
    Batch& operator*() { return current_; }
    Batch* operator->() { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return !(*this == other); }
    bool operator==(const Iterator& other) const;
    /// Position of the current batch in the epoch.
    int64_t batch_index() const { return position_ - 1; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, std::shared_ptr<Epoch> epoch);
    void fetch_next();
    DataLoader* loader_ = nullptr;
    std::shared_ptr<Epoch> epoch_;
    Batch current_;
    int64_t position_ = 0;
    bool done_ = true;
  };

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  DataLoaderOptions options_;
  int64_t start_batch_ = 0;
  std::shared_ptr<Epoch> epoch_;
  double wait_seconds_ = 0.0;
};

}  // namespace kdp::data
