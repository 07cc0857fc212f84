#include "kdp/core/storage.hpp"

#include "kdp/core/checked_size.hpp"
#include "kdp/core/runtime.hpp"

namespace kdp {

namespace {
// A count whose bytes wrap around would allocate a small block and be written past.
size_t checked_count(size_t count, const std::string& what) {
  checked_bytes(static_cast<int64_t>(count), sizeof(float), what);
  return count;
}
}  // namespace

Storage::Storage(size_t count, const Device& device)
    : count_(checked_count(count, "kdp::Storage")),
      instance_id_(device.instance_id()),
      cached_(true) {
  view_ = Runtime::get().allocator().allocate(count, instance_id_, device.space());
}

Storage::Storage(size_t count, const Device& device, const std::string& label)
    : view_(Kokkos::view_alloc(device.space(), Kokkos::WithoutInitializing, label),
            checked_count(count, label) == 0 ? 1 : count),
      count_(count),
      instance_id_(device.instance_id()),
      cached_(false) {
  Runtime::get().allocator().note_dedicated_allocation();
}

Storage::~Storage() {
  // After the Runtime is gone there is no cache to return to; the View frees itself.
  if (cached_ && Runtime::active()) {
    Runtime::get().allocator().release(std::move(view_), instance_id_);
  }
}

}  // namespace kdp
