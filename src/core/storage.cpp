#include "kdp/core/storage.hpp"

#include "kdp/core/runtime.hpp"

namespace kdp {

Storage::Storage(size_t count, const Device& device)
    : count_(count), instance_id_(device.instance_id()), cached_(true) {
  view_ = Runtime::get().allocator().allocate(count, instance_id_, device.space());
}

Storage::Storage(size_t count, const Device& device, const std::string& label)
    : view_(Kokkos::view_alloc(device.space(), Kokkos::WithoutInitializing, label),
            count == 0 ? 1 : count),
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
