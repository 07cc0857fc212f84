// A build without oneDNN: nothing is sent to it (available() is false).
#include "core/check.hpp"
#include "kernels/vendor/onednn.hpp"

namespace kdp::detail::onednn {

bool available() {
  return false;
}

bool supports_bf16() {
  return false;
}

void matmul_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                 const uint16_t*, int64_t, float, float*, int64_t, int) {
  KDP_FAIL(StateError, "this build has no oneDNN");
}

bool conv_supported(const ConvGeometry&) {
  return false;
}

void conv_forward(const ConvGeometry&, bool, bool, const float*, const float*, const float*, float*,
                  void*) {
  KDP_FAIL(StateError, "this build has no oneDNN");
}

size_t conv_kept_input_bytes(const ConvGeometry&, bool, bool, bool) {
  return 0;
}

void conv_backward(const ConvGeometry&, bool, const float*, const float*, const float*, float*,
                   float*, const void*) {
  KDP_FAIL(StateError, "this build has no oneDNN");
}

}  // namespace kdp::detail::onednn
