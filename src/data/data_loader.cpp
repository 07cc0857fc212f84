#include "kdp/data/data_loader.hpp"

#include <fmt/format.h>

#include <chrono>

#include "core/check.hpp"
#include "core/parallel_for.hpp"
#include "data/byte_conversion.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/runtime.hpp"
#include "kdp/core/threads.hpp"
#include "kdp/core/trace.hpp"

namespace kdp::data {

namespace {
struct HostBatch {
  std::vector<float> features;
  std::vector<uint8_t> bytes;  // the features as stored, when converted on the device
  std::vector<float> labels;
  std::vector<int64_t> indices;
  std::exception_ptr error;
};

// The features of the stored numbers in `bytes` on the device, by the formula
// HDF5Dataset uses on the host (ByteFeatures). Host memory gets them straight
// from the bytes, without a staging copy.
Tensor features_from_bytes(const std::vector<uint8_t>& bytes, const ByteFeatures& how,
                           const Shape& shape, const Device& device) {
  Runtime::get().count_transfer(/*to_host=*/false, bytes.size());
  Tensor out = Tensor::empty(shape, device);
  if (compat::host_accessible_memory()) {
    detail::convert_features(bytes.data(), out.data(), static_cast<size_t>(shape.numel()), how);
    return out;
  }
  const auto n = static_cast<int64_t>(bytes.size());
  Tensor staging = Tensor::empty(Shape{(n + 3) / 4}, device);  // the bytes, in device memory
  using DeviceBytes = Kokkos::View<uint8_t*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using HostBytes =
      Kokkos::View<const uint8_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const DeviceBytes raw(reinterpret_cast<uint8_t*>(staging.data()), static_cast<size_t>(n));
  Kokkos::deep_copy(device.space(), raw, HostBytes(bytes.data(), bytes.size()));
  View1 f = out.flat();
  const unsigned char* data = raw.data();
  Kokkos::parallel_for(
      "kdp::DataLoader bytes to features", kdp::detail::range(device, shape.numel()),
      KOKKOS_LAMBDA(const int64_t i) { f(i) = how(data, i); });
  device.fence("kdp::DataLoader bytes to features");  // the host bytes go away after return
  return out;
}
}  // namespace

// One epoch: its batches' indices, and the thread that prepares them.
struct DataLoader::Epoch {
  std::shared_ptr<const Dataset> dataset;
  std::optional<ByteFeatures> bytes;  // features are fetched as bytes and converted so
  std::vector<std::vector<int64_t>> batches;
  size_t next_to_fetch = 0;  // the worker's position
  size_t capacity = 0;

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<HostBatch> ready;
  bool stop = false;
  std::thread worker;

  HostBatch load(size_t b) const {
    HostBatch h;
    h.indices = batches[b];
    try {
      const auto n = h.indices.size();
      const auto row = static_cast<size_t>(dataset->sample_shape().numel());
      checked_numel({static_cast<int64_t>(n), static_cast<int64_t>(row)}, sizeof(float),
                    "kdp::data::DataLoader: a batch");  // its floats must be addressable
      h.labels.resize(n * static_cast<size_t>(dataset->label_shape().numel()));
      if (bytes) {
        h.bytes.resize(n * row * static_cast<size_t>(stored_bytes(bytes->type)));
        dataset->fetch_bytes(h.indices, h.bytes.data(), h.labels.data());
      } else {
        h.features.resize(n * row);
        dataset->fetch(h.indices, h.features.data(), h.labels.data());
      }
    } catch (...) {
      h.error = std::current_exception();
    }
    return h;
  }

  void work() {
    make_background_thread();  // taking a batch does not hand the core to this thread
    for (size_t b = next_to_fetch; b < batches.size(); ++b) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || ready.size() < capacity; });
        if (stop) return;
      }
      HostBatch h = load(b);
      const bool failed = static_cast<bool>(h.error);
      {
        std::lock_guard<std::mutex> lock(mutex);
        ready.push_back(std::move(h));
      }
      cv.notify_all();
      if (failed) return;  // the error ends the epoch at this batch
    }
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       DataLoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(std::move(options)) {
  KDP_CHECK(dataset_, StateError, "the dataset is null");
  KDP_CHECK(sampler_, StateError, "the sampler is null");
  KDP_CHECK(options_.batch_size >= 1, ValueError, "batch size {} < 1", options_.batch_size);
  KDP_CHECK(options_.prefetch >= 0, ValueError, "prefetch {} < 0", options_.prefetch);
  KDP_CHECK(!options_.normalise_targets.active() || dataset_->num_classes() == 0, ValueError,
            "the targets are class indices ({} classes): they cannot be standardised",
            dataset_->num_classes());
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::num_batches() const {
  const int64_t n = sampler_->size();
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::set_start_batch(int64_t batches) {
  KDP_CHECK(batches >= 0, ValueError, "start batch {} < 0", batches);
  start_batch_ = batches;
}

DataLoader::Iterator DataLoader::begin() {
  epoch_.reset();  // stops the previous epoch's thread, if a loop left early
  auto e = std::make_shared<Epoch>();
  e->dataset = dataset_;
  if (options_.convert_on_device) e->bytes = dataset_->byte_features();
  const std::vector<int64_t> indices = sampler_->indices();
  const auto bs = static_cast<size_t>(options_.batch_size);
  for (size_t start = 0; start < indices.size(); start += bs) {
    const size_t end = std::min(indices.size(), start + bs);
    if (options_.drop_last && end - start < bs) break;
    e->batches.emplace_back(indices.begin() + static_cast<long>(start),
                            indices.begin() + static_cast<long>(end));
  }
  e->next_to_fetch = std::min(static_cast<size_t>(start_batch_), e->batches.size());
  start_batch_ = 0;
  e->capacity = static_cast<size_t>(options_.prefetch);
  if (options_.prefetch > 0) e->worker = std::thread([ep = e.get()] { ep->work(); });
  epoch_ = e;
  return Iterator(this, e);
}

DataLoader::Iterator DataLoader::end() {
  return Iterator();
}

DataLoader::Iterator::Iterator(DataLoader* loader, std::shared_ptr<Epoch> epoch)
    : loader_(loader),
      epoch_(std::move(epoch)),
      position_(static_cast<int64_t>(epoch_->next_to_fetch)),
      done_(false) {
  fetch_next();
}

bool DataLoader::Iterator::operator==(const Iterator& other) const {
  return done_ && other.done_;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  fetch_next();
  return *this;
}

void DataLoader::Iterator::fetch_next() {
  Epoch& e = *epoch_;
  if (position_ >= static_cast<int64_t>(e.batches.size())) {
    done_ = true;
    current_ = Batch();
    return;
  }
  HostBatch h;
  trace::Region region("kdp::data::wait", "compute");
  const auto start = std::chrono::steady_clock::now();
  if (loader_->options_.prefetch == 0) {
    h = e.load(static_cast<size_t>(position_));
  } else {
    std::unique_lock<std::mutex> lock(e.mutex);
    e.cv.wait(lock, [&] { return !e.ready.empty(); });
    h = std::move(e.ready.front());
    e.ready.pop_front();
    lock.unlock();
    e.cv.notify_all();
  }
  loader_->wait_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++position_;
  if (h.error) {
    done_ = true;
    std::rethrow_exception(h.error);
  }
  const Dataset& ds = *e.dataset;
  const auto n = static_cast<int64_t>(h.indices.size());
  std::vector<int64_t> fshape{n};
  for (int64_t d : ds.sample_shape().to_vector()) fshape.push_back(d);
  std::vector<int64_t> lshape{n};
  for (int64_t d : ds.label_shape().to_vector()) lshape.push_back(d);
  current_.features =
      e.bytes ? features_from_bytes(h.bytes, *e.bytes, Shape(fshape), loader_->options_.device)
              : Tensor::from_host(h.features, Shape(fshape), loader_->options_.device);
  current_.labels = Tensor::from_host(h.labels, Shape(lshape), loader_->options_.device);
  loader_->options_.normalise_features.apply(current_.features);
  loader_->options_.normalise_targets.apply(current_.labels);
  current_.indices = std::move(h.indices);
}

}  // namespace kdp::data
