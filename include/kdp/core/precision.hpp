#pragma once
/// \file
/// Mixed precision, PyTorch's autocast semantics: inside an autocast region,
/// matrix products (linear, matmul, attention's) and convolutions take bf16
/// inputs and accumulate in fp32, forward and backward; everything else (reductions,
/// softmax, losses, BatchNorm statistics, the optimizer) runs in fp32, and
/// master weights and optimizer state stay fp32, so checkpoints are the same
/// in every precision. A backward pass runs each product in the precision
/// its forward ran in.
///
///     {
///       kdp::autocast guard(kdp::Precision::bf16);   // torch.autocast("cpu", torch.bfloat16)
///       loss = loss_fn(model->forward(x), y);
///     }
///     loss.backward();

#include <string>

#include "kdp/core/device.hpp"

namespace kdp {

/// How products and convolutions compute.
enum class Precision {
  fp32,  ///< fp32 inputs and accumulation (the default)
  bf16,  ///< bf16 inputs, fp32 accumulation and outputs
  Auto,  ///< bf16 where the device has bf16 matrix units, fp32 elsewhere
};

/// "fp32", "bf16", "auto".
const char* precision_name(Precision precision);
/// The precision a name stands for; throws ValueError naming the valid ones.
Precision parse_precision(const std::string& name);

/// Whether `device` multiplies bf16 on matrix units: AMX tiles (through
/// oneDNN, in a build that has it) on CPUs, tensor cores (compute capability
/// 8.0 and up) on NVIDIA GPUs. Where it has none, bf16 still computes with
/// bf16's numerics, but no faster than fp32.
bool has_bf16_matrix_units(const Device& device = get_default_device());

/// Auto as `device` would run it; fp32 and bf16 as they are.
Precision resolve_precision(Precision precision, const Device& device = get_default_device());

/// The precision of products started on this thread now: fp32 outside every
/// autocast region.
Precision autocast_precision();

/// Sets this thread's product precision for its lifetime and restores the
/// previous one (Auto is resolved for `device` here). Per thread: DataParallel
/// carries it into its replicas' threads, as it does grad mode.
class autocast {
 public:
  explicit autocast(Precision precision = Precision::bf16, bool enabled = true,
                    const Device& device = get_default_device());
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  Precision previous_;
};

}  // namespace kdp
