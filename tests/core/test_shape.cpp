#include <gtest/gtest.h>

#include "kdp/core/checked_size.hpp"
#include "kdp/core/error.hpp"
#include "kdp/core/shape.hpp"

using kdp::Shape;
using kdp::ShapeError;

TEST(Shape, RankNumelAndPrinting) {
  Shape s{64, 10};
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.numel(), 640);
  EXPECT_EQ(s.str(), "[64, 10]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(Shape{}.str(), "[]");
  EXPECT_EQ(Shape({2, 0, 3}).numel(), 0);
}

TEST(Shape, NegativeDimensionsCountFromTheEnd) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.normalize_dim(-1), 2);
  EXPECT_EQ(s.size(-1), 4);
  EXPECT_EQ(s.size(0), 2);
  EXPECT_THROW(s.normalize_dim(3), kdp::ShapeError);
  EXPECT_THROW(s.normalize_dim(-4), kdp::ShapeError);
}

TEST(Shape, RejectsNegativeSizesAndTooManyDimensions) {
  EXPECT_THROW(Shape({2, -1}), kdp::ShapeError);
  EXPECT_EQ(Shape({1, 2, 3, 4, 5, 6}).numel(), 720);  // volumes with a batch, and more
  EXPECT_THROW(Shape({1, 2, 3, 4, 5, 6, 7}), kdp::ShapeError);
}

TEST(Shape, SplitAtGivesOuterSizeInner) {
  const auto s = kdp::split_at(Shape{2, 3, 4, 5}, 2);
  EXPECT_EQ(s.outer, 6);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.inner, 5);
}

TEST(Shape, SizesWhoseBytesOverflowAreRefusedWhenTheShapeIsMade) {
  // 784 x 2^62 floats: the byte count wraps around to 0 in 64 bits.
  EXPECT_THROW(Shape({784, int64_t{1} << 62}), ShapeError);
  EXPECT_THROW(Shape({int64_t{1} << 31, int64_t{1} << 31}), ShapeError);  // 2^64 bytes
  EXPECT_THROW(Shape({2, 2}).with(0, int64_t{1} << 62), ShapeError);
  try {
    Shape({784, int64_t{1} << 62});
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("784 x 4611686018427387904"), std::string::npos)
        << e.what();
  }
  // A zero anywhere makes an empty shape, however large the rest.
  EXPECT_EQ(Shape({0, int64_t{1} << 62, int64_t{1} << 62}).numel(), 0);
  // The largest shape that fits is accepted (nothing is allocated here).
  EXPECT_EQ(Shape({int64_t{1} << 30, int64_t{1} << 30}).numel(), int64_t{1} << 60);
}

TEST(CheckedSize, ProductsAndBytes) {
  using kdp::checked_bytes;
  using kdp::checked_numel;
  using kdp::format_bytes;
  EXPECT_EQ(checked_numel({3, 4, 5}, 4, "t"), 60);
  EXPECT_EQ(checked_numel({}, 4, "t"), 1);
  EXPECT_THROW(checked_numel({3, -1}, 4, "t"), ShapeError);
  EXPECT_THROW(checked_numel({int64_t{1} << 62, 2}, 1, "t"), ShapeError);  // 2^63 bytes
  EXPECT_EQ(checked_numel({int64_t{1} << 62, 1}, 1, "t"), int64_t{1} << 62);
  EXPECT_EQ(checked_bytes(10, 4, "t"), 40u);
  EXPECT_THROW(checked_bytes(-1, 4, "t"), ShapeError);
  EXPECT_THROW(checked_bytes(int64_t{1} << 62, 4, "t"), ShapeError);
  try {
    checked_numel({7, int64_t{1} << 62}, 4, "kdp::nn::Linear(7, 4611686018427387904)");
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("kdp::nn::Linear(7, 4611686018427387904)"),
              std::string::npos);
  }
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(4.0e12), "4.0 TB");
}
