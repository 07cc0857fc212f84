// Runs a fuzz target over every file of the given directories (seed corpora and
// the inputs of crashes found so far), so that CTest checks them all in the
// normal build.
//
//   kdp_fuzz_replay TARGET DIR...
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_targets.hpp"
#include "kdp/core/runtime.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s idx_reader|hdf5_dataset|checkpoint_loader DIR...\n", argv[0]);
    return 2;
  }
  kdp::RuntimeOptions o;
  o.init_mpi = false;
  kdp::Runtime runtime(o);
  int (*target)(const uint8_t*, size_t) = nullptr;
  if (std::strcmp(argv[1], "idx_reader") == 0) target = kdp::fuzz::idx_reader;
  if (std::strcmp(argv[1], "hdf5_dataset") == 0) target = kdp::fuzz::hdf5_dataset;
  if (std::strcmp(argv[1], "checkpoint_loader") == 0) target = kdp::fuzz::checkpoint_loader;
  if (target == nullptr) {
    std::fprintf(stderr, "unknown target %s\n", argv[1]);
    return 2;
  }
  int files = 0;
  for (int i = 2; i < argc; ++i) {
    if (!std::filesystem::is_directory(argv[i])) continue;
    for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      target(bytes.data(), bytes.size());
      ++files;
    }
  }
  std::printf("%s: %d inputs, none crashed\n", argv[1], files);
  return files > 0 ? 0 : 1;
}
