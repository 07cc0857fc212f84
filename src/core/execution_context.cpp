#include "kdp/core/execution_context.hpp"

namespace kdp {

ExecutionContext& ExecutionContext::current() {
  thread_local ExecutionContext context;
  return context;
}

}  // namespace kdp
