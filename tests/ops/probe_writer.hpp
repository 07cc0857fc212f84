#pragma once
// Arrays written for a script that compares kdp's results with PyTorch's
// (probe_arrays.py reads them): DIR/NAME.f32 (raw float32, row-major) per
// array and DIR/manifest.txt with a line "NAME d0 d1 ..." per array.

#include <fstream>
#include <string>
#include <vector>

#include "kdp/kdp.hpp"

namespace kdp::test {

class ProbeWriter {
 public:
  explicit ProbeWriter(std::string dir) : dir_(std::move(dir)), manifest_(dir_ + "/manifest.txt") {}

  void put(const std::string& name, const Tensor& t) {
    const std::vector<float> v = t.to_vector();
    std::ofstream out(dir_ + "/" + name + ".f32", std::ios::binary);
    out.write(reinterpret_cast<const char*>(v.data()),
              static_cast<std::streamsize>(v.size() * sizeof(float)));
    ok_ = ok_ && static_cast<bool>(out);
    manifest_ << name;
    for (int64_t d : t.shape().to_vector()) manifest_ << ' ' << d;
    manifest_ << '\n';
  }

  /// Whether every array and the manifest were written.
  bool close() {
    manifest_.close();
    return ok_ && static_cast<bool>(manifest_);
  }

 private:
  std::string dir_;
  std::ofstream manifest_;
  bool ok_ = true;
};

}  // namespace kdp::test
