#pragma once
/// \file
/// Shape: the sizes of a tensor's dimensions, rank 0 (scalar) to 6, row-major.
/// A shape whose floats would not fit in one allocation is refused when it is
/// made (checked_numel), so no size computed from a Shape wraps around.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kdp {

/// The sizes of a tensor's dimensions. Rank 0 is a scalar with one element.
class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int d) const { return dims_[static_cast<size_t>(d)]; }
  /// The number of elements (1 for a scalar); checked when the shape was made.
  int64_t numel() const { return numel_; }
  /// The size of dimension `dim`, which may be negative (counted from the end).
  int64_t size(int dim) const { return dims_[static_cast<size_t>(normalize_dim(dim))]; }

  /// Maps a possibly negative dimension to [0, rank); throws ShapeError otherwise.
  int normalize_dim(int dim) const;

  /// The same shape with dimension `dim` set to `size`.
  Shape with(int dim, int64_t size) const;

  std::vector<int64_t> to_vector() const;
  /// "[64, 10]"; a scalar prints as "[]".
  std::string str() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
  int64_t numel_ = 1;
};

/// Product of the dimensions before `dim`, `dim` itself, and after it: the
/// [outer, size, inner] view every dimension-wise kernel works on.
struct DimSplit {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
};
DimSplit split_at(const Shape& shape, int dim);

}  // namespace kdp
