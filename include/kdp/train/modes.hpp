#pragma once
/// \file
/// The modes a run trains in, decided once for every rank: reproducible mode
/// or DDP's exchange, and the precision. kdp-train asks decide_modes() and
/// prints its reason; a program that drives a Trainer itself asks the same
/// and sets TrainerOptions from the answer:
///
///     train::ModeRequest ask;
///     ask.precision = Precision::Auto;
///     ask.input_dims = 4;  // batches of [N, C, H, W]
///     const train::ModeDecision modes = train::decide_modes(ask, *net, comm);
///     options.reproducible = modes.reproducible;
///     options.precision = modes.precision;
///     if (comm.rank() == 0) std::puts(modes.reason.c_str());

#include <string>

#include "kdp/core/precision.hpp"
#include "kdp/dist/communicator.hpp"
#include "kdp/nn/module.hpp"

namespace kdp::train {

/// What a run asks of reproducible mode.
enum class ReproducibleMode {
  /// DDP's exchange, with the reason the mode is off: what stands in its way
  /// for this model and request, else its cost (its exact sums cost 1.1-1.4x
  /// DDP's step on some CPUs, more than a default may: docs/performance.md).
  Auto,
  On,   ///< on (fit() refuses what the mode cannot keep)
  Off,  ///< DDP's exchange
};

/// What decide_modes() weighs besides the model.
struct ModeRequest {
  ReproducibleMode reproducible = ReproducibleMode::Auto;
  /// As asked: Auto becomes bf16 only where every rank's device has bf16
  /// matrix units.
  Precision precision = Precision::fp32;
  /// Reproducible mode's virtual shards per global batch.
  int shards = 12;
  /// Devices (DataParallel replicas) per rank.
  int devices_per_rank = 1;
  /// The DDP communication hook asked for ("": none).
  std::string comm_hook;
  /// Dimensions of a training batch (1 + a sample's).
  int input_dims = 2;
};

/// The modes a run trains in: the same on every rank.
struct ModeDecision {
  bool reproducible = false;
  /// fp32 or bf16: Auto resolved and agreed by every rank.
  Precision precision = Precision::fp32;
  /// Why Auto left reproducible mode off ("" where it was asked for either
  /// way).
  std::string why_off;
  /// One line saying which mode runs and why: "reproducible mode on: the same
  /// weights, bit for bit, at 1, 2, 3, 4, 6, 12 rank(s) with any devices and
  /// threads (shards in one pass)" (asked for; or "one by one", "together,
  /// through copies of the model"), "reproducible mode off: 5 ranks do not divide its
  /// 12 shards", "reproducible mode off (asked)".
  std::string reason;
};

/// Decides from the request, `model`'s modules (BatchNorm and SyncBatchNorm
/// layers, the layer types the one pass takes) and every rank's CPU (bf16's
/// one pass needs AVX2 on all of them). Every rank of
/// `comm` calls it together; `device` is the rank's first device.
ModeDecision decide_modes(const ModeRequest& request, nn::Module& model, dist::Communicator& comm,
                          const Device& device = get_default_device());

/// `asked` as every rank of `comm` runs it: Auto is bf16 only where every
/// rank's device has bf16 matrix units; fp32 and bf16 stay as they are. Every
/// rank calls it together (where Auto was asked on several ranks).
Precision agree_precision(Precision asked, const Device& device, dist::Communicator& comm);

}  // namespace kdp::train
