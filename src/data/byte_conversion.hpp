#pragma once
// Stored numbers of a dataset's features as floats, on the host: the formula
// of ByteFeatures, a loop per stored type.

#include <cstddef>

#include "kdp/data/dataset.hpp"

namespace kdp::data::detail {

/// The `n` numbers of `how.type` at `src` as features, into `dst`.
void convert_features(const unsigned char* src, float* dst, size_t n, const ByteFeatures& how);

}  // namespace kdp::data::detail
