#pragma once
// Fuzz targets: each takes arbitrary bytes as a file of the kind kdp reads and
// must end in success or a kdp::Error, never a crash, a hang or a huge
// allocation. The same functions run under libFuzzer (scripts/fuzz.sh) and, for
// the seed corpora and every crash ever found, in CTest (fuzz_replay.cpp).

#include <cstddef>
#include <cstdint>
#include <string>

namespace kdp::fuzz {

/// Writes the bytes to a file of this process and returns its path.
std::string write_input(const uint8_t* data, size_t size, const char* suffix);

int idx_reader(const uint8_t* data, size_t size);
int hdf5_dataset(const uint8_t* data, size_t size);
int checkpoint_loader(const uint8_t* data, size_t size);

}  // namespace kdp::fuzz
