#include "kdp/autograd/grad_mode.hpp"

#include "kdp/core/execution_context.hpp"

namespace kdp::autograd {

bool GradMode::enabled() {
  return ExecutionContext::current().grad_enabled;
}
void GradMode::set_enabled(bool on) {
  ExecutionContext::current().grad_enabled = on;
}

}  // namespace kdp::autograd
