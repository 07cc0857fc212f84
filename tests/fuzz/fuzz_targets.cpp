#include "fuzz_targets.hpp"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "kdp/kdp.hpp"

namespace kdp::fuzz {

std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = "/tmp/kdp-fuzz-" + std::to_string(::getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return path;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

int idx_reader(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size, ".idx");
  try {
    // A small cap keeps the fuzzer's memory bounded; the logic is the same.
    const data::IdxArray a = data::read_idx(path, uint64_t{1} << 24);
    (void)a;
  } catch (const Error&) {
  }
  std::remove(path.c_str());
  return 0;
}

int hdf5_dataset(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size, ".h5");
  try {
    data::HDF5DatasetOptions o;
    o.cache_bytes = size_t{16} << 20;
    data::HDF5Dataset ds(path, "train", o);
    const int64_t n = std::min<int64_t>(ds.size(), 4);
    if (n > 0 && ds.sample_shape().numel() <= (int64_t{1} << 20)) {
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < n; ++i) idx.push_back((i * 7919) % ds.size());
      std::vector<float> f(static_cast<size_t>(n * ds.sample_shape().numel())),
          l(static_cast<size_t>(n));
      ds.fetch(idx, f.data(), l.data());
    }
  } catch (const Error&) {
  }
  std::remove(path.c_str());
  return 0;
}

int checkpoint_loader(const uint8_t* data, size_t size) {
  const std::string path = write_input(data, size, ".ckpt.h5");
  try {
    const io::Checkpoint c = io::read_checkpoint(path);
    (void)c;
  } catch (const Error&) {
  }
  std::remove(path.c_str());
  return 0;
}

}  // namespace kdp::fuzz
