#include "kdp/core/shape.hpp"

#include <fmt/format.h>

#include "core/check.hpp"
#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"

namespace kdp {

namespace {
void check_dims(const int64_t* dims, size_t rank) {
  KDP_CHECK(rank <= static_cast<size_t>(Shape::kMaxRank), ShapeError,
            "rank {} is more than the {} dimensions kdp supports", rank, Shape::kMaxRank);
  for (size_t i = 0; i < rank; ++i) {
    KDP_CHECK(dims[i] >= 0, ShapeError, "dimension {} has negative size {}", i, dims[i]);
  }
}

// Tensors hold floats: a shape whose floats cannot be addressed is refused here,
// before any size computed from it can wrap around.
int64_t float_count(const int64_t* dims, size_t rank) {
  return checked_numel(std::vector<int64_t>(dims, dims + rank), sizeof(float), "kdp::Shape");
}
}  // namespace

Shape::Shape(std::initializer_list<int64_t> dims) {
  check_dims(dims.begin(), dims.size());
  rank_ = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), dims_.begin());
  numel_ = float_count(dims.begin(), dims.size());
}

Shape::Shape(const std::vector<int64_t>& dims) {
  check_dims(dims.data(), dims.size());
  rank_ = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), dims_.begin());
  numel_ = float_count(dims.data(), dims.size());
}

int Shape::normalize_dim(int dim) const {
  const int r = rank_ == 0 ? 1 : rank_;
  if (dim < -r || dim >= r) {  // no origin: the op that asked rethrows it under its name
    throw ShapeError(
        fmt::format("dimension {} is out of range for a tensor of shape {}", dim, str()));
  }
  return dim < 0 ? dim + r : dim;
}

Shape Shape::with(int dim, int64_t size) const {
  std::vector<int64_t> dims = to_vector();
  dims[static_cast<size_t>(normalize_dim(dim))] = size;
  return Shape(dims);
}

std::vector<int64_t> Shape::to_vector() const {
  return std::vector<int64_t>(dims_.begin(), dims_.begin() + rank_);
}

std::string Shape::str() const {
  return fmt::format("[{}]", fmt::join(to_vector(), ", "));
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int d = 0; d < rank_; ++d) {
    if (dims_[static_cast<size_t>(d)] != other.dims_[static_cast<size_t>(d)]) return false;
  }
  return true;
}

DimSplit split_at(const Shape& shape, int dim) {
  DimSplit s;
  if (shape.rank() == 0) return s;
  const int d = shape.normalize_dim(dim);
  for (int i = 0; i < d; ++i) s.outer *= shape[i];
  s.size = shape[d];
  for (int i = d + 1; i < shape.rank(); ++i) s.inner *= shape[i];
  return s;
}

}  // namespace kdp
