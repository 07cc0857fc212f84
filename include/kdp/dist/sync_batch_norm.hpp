#pragma once
/// \file
/// SyncBatchNorm: batch normalisation with the statistics of the whole batch,
/// across the device instances of a DataParallel forward and across MPI
/// ranks, on every backend (PyTorch's works on CUDA only). Per channel, the
/// count, Σx and Σx² of every replica are reduced in one collective in the
/// forward, and Σdy and Σdy x̂ in one in the backward; each replica then
/// normalises (and differentiates) its part with the whole batch's mean and
/// variance, so the outputs, gradients and running statistics are those of
/// one device running the whole batch, also for parts of unequal sizes. The
/// running statistics come out identical on every replica and rank: DDP need
/// not broadcast them.
///
/// convert_sync_batchnorm() turns the BatchNorm layers of a model into
/// synchronised ones in place: parameters, buffers, state-dict keys and the
/// model's structure stay as they are.

#include <memory>
#include <optional>

#include "kdp/dist/communicator.hpp"
#include "kdp/nn/batch_norm.hpp"

namespace kdp::dist {

/// The synchronizer a synchronised BatchNorm uses: reduces over the current
/// ReplicaGroup (if any) and then over `comm`'s ranks. One may serve several
/// layers; every rank of `comm` must run the same layers in the same order.
std::shared_ptr<nn::BatchNormSynchronizer> batch_norm_synchronizer(Communicator comm);

/// torch.nn.SyncBatchNorm: input [N, C, ...].
class SyncBatchNorm : public nn::BatchNorm {
 public:
  /// Over `comm`'s ranks (a duplicate of the world's when not given: every
  /// rank must then construct it together).
  explicit SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options = {},
                         std::optional<Communicator> comm = std::nullopt,
                         const Device& device = get_default_device());
  std::shared_ptr<nn::Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;

 private:
  // A layer that shares `synchronizer` (what clone() makes: no collective).
  SyncBatchNorm(int64_t num_features, nn::BatchNormOptions options, const Device& device,
                std::shared_ptr<nn::BatchNormSynchronizer> synchronizer);
};

/// Makes every BatchNorm in `module` synchronised over `comm` (one duplicate
/// of the world's for the whole model when not given: every rank must then
/// call this together), in place. Returns `module`.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::optional<Communicator> comm = std::nullopt);

}  // namespace kdp::dist

namespace kdp::nn {
using dist::convert_sync_batchnorm;
using dist::SyncBatchNorm;
}  // namespace kdp::nn
