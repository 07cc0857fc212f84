#include "backend.hpp"

namespace kdp::dist::detail {

// A build without MPI: the job is this process.
std::unique_ptr<Backend> world_backend() {
  return single_process_backend();
}

}  // namespace kdp::dist::detail
