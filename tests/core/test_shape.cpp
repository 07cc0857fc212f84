#include <gtest/gtest.h>

#include "kdp/core/error.hpp"
#include "kdp/core/shape.hpp"

using kdp::Shape;

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
  EXPECT_THROW(Shape({1, 2, 3, 4, 5}), kdp::ShapeError);
}

TEST(Shape, SplitAtGivesOuterSizeInner) {
  const auto s = kdp::split_at(Shape{2, 3, 4, 5}, 2);
  EXPECT_EQ(s.outer, 6);
  EXPECT_EQ(s.size, 4);
  EXPECT_EQ(s.inner, 5);
}
