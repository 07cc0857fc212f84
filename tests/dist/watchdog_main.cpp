// A collective that rank 1 never joins: rank 0's watchdog must end the job with
// a message naming the operation, the rank and the step (CTest checks the
// output; the timeout comes from KDP_COLLECTIVE_TIMEOUT).
#include <chrono>
#include <cstdio>
#include <thread>

#include "kdp/kdp.hpp"

int main(int argc, char** argv) {
  kdp::Runtime runtime(argc, argv);
  kdp::dist::Communicator comm = kdp::dist::Communicator::world();
  comm.watchdog().set_step(7);
  if (comm.rank() == 0) {
    kdp::Tensor t = kdp::Tensor::ones({16});
    comm.allreduce(t);
    std::printf("the allreduce completed, which it must not\n");
    return 0;
  }
  // The other ranks never join; the watchdog on rank 0 ends them too.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}
