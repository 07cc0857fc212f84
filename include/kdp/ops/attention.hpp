#pragma once
/// \file
/// Scaled dot-product attention, as
/// torch.nn.functional.scaled_dot_product_attention, fused in the manner of
/// flash attention: queries meet the keys a block at a time (on CPUs a block
/// of 128 query rows against every key, on GPUs a query row against blocks
/// of keys with a running softmax), and backward recomputes the scores from
/// the saved log-sum-exp, so neither direction ever holds a T x S matrix per
/// head: memory grows linearly with the sequence.

#include <cstdint>
#include <optional>

#include "kdp/core/tensor.hpp"

namespace kdp {

/// The options of scaled_dot_product_attention (PyTorch's keyword arguments).
struct AttentionOptions {
  /// Added to the scores before the softmax: [T, S], or q's leading shape +
  /// [T, S]; -infinity masks a key out. Undefined: none. It gets no gradient.
  Tensor attn_mask;
  /// Dropout on the attention weights: drawn from the device's generator, or
  /// per sample (a batch entry of q's first dimension) under a SampleDraws
  /// (reproducible mode), and drawn again in backward, never stored.
  float dropout_p = 0.0f;
  /// Key j is masked out for query i where j > i (PyTorch's top-left causal
  /// mask); with attn_mask too, both apply.
  bool is_causal = false;
  /// The factor of the scores; none: 1 / sqrt(D).
  std::optional<double> scale;
};

/// softmax(q k^T * scale + mask) v for q [..., T, D], k [..., S, D] and
/// v [..., S, Dv] with the same leading dimensions (e.g. [B, H]); out is
/// [..., T, Dv]. D and Dv are at most 256. A query row whose keys are all
/// masked out gets zeros (and passes no gradient). The scores are summed in
/// fp32 in a fixed order, forward and backward, so the results are the same
/// bits at every thread count and in any batch. Under bf16 autocast the
/// products take bf16 operands and sum in fp32, as PyTorch's autocast has it:
/// q, k, v and dO rounded to bf16, and on CPUs whose bf16 products outrun
/// their fp32 ones (AMX, or AMD's AVX512_BF16; from 128 keys) the weights and
/// dS too, on oneDNN's bf16 kernels; the softmax and the output stay fp32.
/// Differentiable in q, k and v.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

}  // namespace kdp
