// A Kokkos Tools connector for the tests: records every region's path (the
// names of the open regions, outermost first, joined by " / ") and every
// allocation's label, and writes them, one per line and each once, to
// $KDP_REGIONS_OUT.<pid> when Kokkos finalizes. Kokkos loads it from
// KOKKOS_PROFILE_LIBRARY (3.4) or KOKKOS_TOOLS_LIBS (4.x).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace {

std::vector<std::string> open_regions;
std::set<std::string> paths;
std::set<std::string> labels;
bool unbalanced = false;

std::string joined() {
  std::string path;
  for (const std::string& name : open_regions) path += (path.empty() ? "" : " / ") + name;
  return path;
}

}  // namespace

// The handle Kokkos passes with allocations: the memory space's name.
struct SpaceHandle {
  char name[64];
};

extern "C" {

void kokkosp_init_library(int, uint64_t, uint32_t, void*) {}

void kokkosp_push_profile_region(const char* name) {
  open_regions.emplace_back(name);
  paths.insert(joined());
}

void kokkosp_pop_profile_region() {
  if (open_regions.empty()) {
    unbalanced = true;
    return;
  }
  open_regions.pop_back();
}

void kokkosp_allocate_data(SpaceHandle, const char* label, const void*, uint64_t) {
  labels.insert(label);
}

void kokkosp_finalize_library() {
  const char* out = std::getenv("KDP_REGIONS_OUT");
  if (out == nullptr) return;
  const std::string path = std::string(out) + "." + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  for (const std::string& p : paths) std::fprintf(f, "region %s\n", p.c_str());
  for (const std::string& l : labels) std::fprintf(f, "allocation %s\n", l.c_str());
  if (unbalanced || !open_regions.empty()) {
    std::fprintf(f, "unbalanced %zu still open\n", open_regions.size());
  }
  std::fclose(f);
}

}  // extern "C"
