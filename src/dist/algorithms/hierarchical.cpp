#include "allreduce.hpp"

namespace kdp::dist::algorithms {

using detail::Element;
using detail::Group;

// The node's ranks reduce onto their leader through shared memory; the leaders
// run the ring over the network; the others wait for theirs with pauses (the
// transport's barrier: polling would take the cores that the leader's
// transfers and backward need), then copy its result at memory speed.
void hierarchical(detail::Backend& transport, float* x, size_t count, ReduceOp op, bool bf16,
                  float* residual) {
  transport.reduce(x, count, Element::Float, op, Group::Node);
  ring(transport, Group::Leaders, x, count, op, bf16, residual);
  transport.barrier(Group::Node);
  transport.broadcast(x, count * sizeof(float), 0, Group::Node);
}

}  // namespace kdp::dist::algorithms
