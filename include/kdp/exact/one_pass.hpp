#pragma once
/// \file
/// Reproducible mode's public face (docs/architecture.md, "Reproducible
/// mode"): the Trainer's `reproducible` option turns the mode on; this says
/// which models take its cheapest path.

#include "kdp/core/precision.hpp"
#include "kdp/nn/module.hpp"
#include "kdp/optim/optimizer.hpp"

namespace kdp::train {

/// Whether reproducible mode takes `model`'s shards of batches with
/// `input_dims` dimensions in one pass, where it costs about the default
/// mode's step: an MLP (Sequential, Linear, ReLU, LeakyReLU, Dropout and
/// Flatten modules, every parameter a linear layer's) on memory the host can
/// address, in fp32, or in bf16 where this CPU has AVX512_BF16 (and every
/// rank's does: the Trainer agrees). Other models take each shard forward and
/// back on its own, which costs more (docs/architecture.md, "Reproducible
/// mode").
bool reproducible_in_one_pass(nn::Module& model, const optim::NamedParameters& params,
                              int input_dims, Precision precision);

}  // namespace kdp::train
