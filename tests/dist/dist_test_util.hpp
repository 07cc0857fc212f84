#pragma once
// Checks across the ranks of a test under mpirun.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kdp/dist/communicator.hpp"

namespace kdp::test {

// Every rank holds the same bits as rank 0.
inline void expect_same_on_every_rank(dist::Communicator& comm, const std::vector<float>& mine,
                                      const std::string& what) {
  const auto all = comm.allgather_bytes(mine.data(), mine.size() * sizeof(float));
  for (size_t r = 0; r < all.size(); ++r) {
    ASSERT_EQ(all[r].size(), mine.size() * sizeof(float)) << what;
    EXPECT_EQ(std::memcmp(all[r].data(), all[0].data(), all[r].size()), 0)
        << what << " differs between rank 0 and rank " << r;
  }
}

}  // namespace kdp::test
