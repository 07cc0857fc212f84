#include "allreduce.hpp"

namespace kdp::dist::algorithms {

using detail::Element;

Plan plan(const detail::Backend& transport, Element type, const AllreduceRoute& asked) {
  if (transport.size() == 1) return {Route::Local, false};
  if (type != Element::Float) return {Route::Mpi, false};
  if (!asked.bfloat16 && transport.nodes() == 1) return {Route::Mpi, false};
  const int local = transport.size(detail::Group::Node);
  // With one rank per node, or every rank on one node, the hierarchical route
  // is the plain ring.
  if (asked.hierarchical && local > 1 && local < transport.size()) {
    return {Route::Hierarchical, asked.bfloat16};
  }
  return {Route::Ring, asked.bfloat16};
}

const char* name(const Plan& plan) {
  switch (plan.route) {
    case Route::Local:
      return "local";
    case Route::Mpi:
      return "mpi";
    case Route::Ring:
      return plan.bfloat16 ? "ring-bf16" : "ring";
    case Route::Hierarchical:
      return plan.bfloat16 ? "hierarchical-bf16" : "hierarchical";
  }
  return "?";
}

void run(const Plan& plan, detail::Backend& transport, void* data, size_t count, Element type,
         ReduceOp op, float* residual) {
  switch (plan.route) {
    case Route::Local:
      return;
    case Route::Mpi:
      transport.allreduce(data, count, type, op);
      return;
    case Route::Ring:
      ring(transport, detail::Group::World, static_cast<float*>(data), count, op, plan.bfloat16,
           residual);
      return;
    case Route::Hierarchical:
      hierarchical(transport, static_cast<float*>(data), count, op, plan.bfloat16, residual);
      return;
  }
}

}  // namespace kdp::dist::algorithms
