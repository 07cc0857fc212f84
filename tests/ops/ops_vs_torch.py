#!/usr/bin/python3
"""kdp's fp32 ops against PyTorch's on the same inputs: conv3d, conv1d,
max_pool3d, avg_pool3d, the regression losses and the transformer's ops,
forward and gradients (kdp_torch_probe writes kdp's side; PyTorch computes
in float64 here, and in float32 for the transformer's ops, whose error kdp's
may exceed by at most 2x).

A result of kdp's is a float32 sum of at most K terms, each product or term
rounded once: it is within gamma = (K + 2) u S of the exact value, where u =
2^-24 and S is the sum of the terms' magnitudes (Higham's bound for any order
of summation). For the linear ops (convolutions, average pooling, the
gradients of max pooling) S is the op applied to the magnitudes, and K is
bounded by the largest array of the case (no sum has more terms than that);
max pooling's forward picks a value and must be exact; a loss is a sum of
n = its input's size nonnegative terms (S = its value), and its gradient a
few roundings of each element (K = 6, S = |gradient|).

    ops_vs_torch.py PROBE_EXECUTABLE WORKDIR

Exit 77 (skipped) without PyTorch.
"""
import sys

from probe_arrays import run_probe


def main():
    probe, work = sys.argv[1], sys.argv[2]
    try:
        import numpy  # noqa: F401 (run_probe reads the arrays with it)
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"skipped: PyTorch is not installed ({e})")
        return 77
    arrays = run_probe(probe, work, torch.float64)

    linear = {
        "conv3d": lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1),
                                           dilation=(1, 1, 2)),
        "conv3d_groups": lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1, groups=3),
        "conv1d": lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
        "avg_pool3d": lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True,
                                             count_include_pad=False),
        "avg_pool3d_pad": lambda x: F.avg_pool3d(x, (2, 3, 3), (1, 2, 2), (1, 1, 0)),
    }
    maximum = {"max_pool3d": lambda x: F.max_pool3d(x, (3, 2, 2), (2, 2, 1), (1, 1, 0),
                                                   ceil_mode=True)}
    losses = {
        "mse": lambda a, t: F.mse_loss(a, t),
        "l1": lambda a, t: F.l1_loss(a, t),
        "smooth_l1": lambda a, t: F.smooth_l1_loss(a, t, beta=0.5),
        "huber": lambda a, t: F.huber_loss(a, t, reduction="sum", delta=0.3),
    }
    u = 2.0 ** -24
    failures = []

    def run(op, inputs, gy, grads):
        leaves = [t.clone().requires_grad_(i < grads) for i, t in enumerate(inputs)]
        y = op(*leaves)
        y.backward(gy)
        return y.detach(), [t.grad for t in leaves[:grads]]

    def case(name):
        """A probe's inputs, how many of them got gradients, and its gy."""
        inputs = []
        while f"{name}.in{len(inputs)}" in arrays:
            inputs.append(arrays[f"{name}.in{len(inputs)}"])
        return inputs, sum(1 for i in range(len(inputs)) if f"{name}.g{i}" in arrays), arrays[f"{name}.gy"]

    def check(name, what, mine, ref, bound):
        excess = ((mine - ref).abs() - bound).max().item()
        worst = ((mine - ref).abs() / bound.clamp_min(1e-300)).max().item()
        print(f"{name} {what}: worst |kdp - torch| / bound = {worst:.3g}")
        if excess > 0:
            failures.append(f"{name} {what}: beyond the bound by {excess:.3g}")

    for name, op in {**linear, **maximum, **losses}.items():
        inputs, grads, gy = case(name)
        y, g = run(op, inputs, gy, grads)
        if name in losses:
            check(name, "y", arrays[f"{name}.y"], y, (inputs[0].numel() + 2) * u * y.abs())
            for i in range(grads):
                check(name, f"g{i}", arrays[f"{name}.g{i}"], g[i], 6 * u * g[i].abs())
            continue
        k = max([t.numel() for t in inputs] + [gy.numel()]) + 2
        if name in maximum:
            # The same picks as the forward, from the same inputs, with |gy|.
            _, sg = run(op, inputs, gy.abs(), grads)
            check(name, "y", arrays[f"{name}.y"], y, torch.zeros_like(y))
        else:
            sy, sg = run(op, [t.abs() for t in inputs], gy.abs(), grads)
            check(name, "y", arrays[f"{name}.y"], y, k * u * sy)
        for i in range(grads):
            check(name, f"g{i}", arrays[f"{name}.g{i}"], g[i], k * u * sg[i])
    # The transformer's ops: kdp's error against float64 at most twice
    # PyTorch float32's on the same inputs (plus 8 u of the result's largest
    # magnitude, for the cases where PyTorch's float32 is exact).
    ids = arrays["embedding.ids"].long()
    mask = arrays["sdpa_mask.mask"]

    def sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None):
        # PyTorch's fused function where it has one (2.0+), else its
        # definition (what its math path computes).
        if hasattr(F, "scaled_dot_product_attention"):
            kwargs = {} if scale is None else {"scale": scale}
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                                  **kwargs)
        s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if attn_mask is not None:
            s = s + attn_mask
        if is_causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(s, -1) @ v
    against_float32 = {
        "matmul_broadcast": lambda a, b: torch.matmul(a, b),
        "bmm": lambda a, b: torch.bmm(a, b),
        "permute": lambda x: x.permute(2, 0, 1),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (3, 8), w, b),
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "embedding": lambda w: F.embedding(ids, w, padding_idx=2),
        "sdpa": lambda q, k, v: sdpa(q, k, v),
        "sdpa_causal": lambda q, k, v: sdpa(q, k, v, is_causal=True),
        "sdpa_mask": lambda q, k, v: sdpa(q, k, v, attn_mask=mask.to(q.dtype), scale=0.7),
    }
    for name, op in against_float32.items():
        inputs, grads, gy = case(name)
        y, g = run(op, inputs, gy, grads)
        y32, g32 = run(op, [t.float() for t in inputs], gy.float(), grads)
        for what, mine, ref, theirs in [("y", arrays[f"{name}.y"], y, y32)] + [
                (f"g{i}", arrays[f"{name}.g{i}"], g[i], g32[i]) for i in range(grads)]:
            err = (mine - ref).abs().max().item()
            allowed = 2 * (theirs.double() - ref).abs().max().item() + 8 * u * ref.abs().max().item()
            print(f"{name} {what}: kdp {err:.3g}, PyTorch float32 {(theirs.double() - ref).abs().max().item():.3g}")
            if err > allowed:
                failures.append(f"{name} {what}: kdp's error {err:.3g} > {allowed:.3g} (2x PyTorch float32's)")
    # A pre-norm encoder layer loaded with kdp's parameters by name.
    def encoder_layer(dtype):
        layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0,
                                                 activation="gelu", batch_first=True,
                                                 norm_first=True).to(dtype)
        prefix = "encoder_layer.param."
        state = {k[len(prefix):]: v.to(dtype) for k, v in arrays.items() if k.startswith(prefix)}
        layer.load_state_dict(state, strict=True)
        x = arrays["encoder_layer.x"].to(dtype).clone().requires_grad_(True)
        causal = torch.full((5, 5), float("-inf"), dtype=dtype).triu(1)
        y = layer(x, src_mask=causal)
        y.backward(arrays["encoder_layer.gy"].to(dtype))
        grads = {"gx": x.grad}
        grads.update({f"grad.{k}": p.grad for k, p in layer.named_parameters()})
        return {"y": y.detach(), **grads}
    # The reference models as their descriptions have a PyTorch user build
    # them (torch_reference_models.py), loaded with kdp's parameters by name.
    from torch_reference_models import GPT, ViT

    def vit(dtype):
        model = ViT(1, 8, 4, 8, 2, 2, 16, 3).to(dtype)
        prefix = "vit.param."
        model.load_state_dict({k[len(prefix):]: v.to(dtype) for k, v in arrays.items()
                               if k.startswith(prefix)}, strict=True)
        x = arrays["vit.x"].to(dtype).clone().requires_grad_(True)
        y = model(x)
        y.backward(arrays["vit.gy"].to(dtype))
        return {"y": y.detach(), "gx": x.grad,
                **{f"grad.{k}": p.grad for k, p in model.named_parameters()}}

    def gpt(dtype):
        model = GPT(9, 6, 2, 2, 8).to(dtype)
        prefix = "gpt.param."
        model.load_state_dict({k[len(prefix):]: v.to(dtype) for k, v in arrays.items()
                               if k.startswith(prefix)}, strict=True)
        y = model(arrays["gpt.ids"].long())
        y.backward(arrays["gpt.gy"].to(dtype))
        return {"y": y.detach(), **{f"grad.{k}": p.grad for k, p in model.named_parameters()}}

    # In a whole module, a parameter's gradient ends a chain through every
    # layer after it and carries the rounding of the values along it: a bias
    # gradient whose terms nearly cancel is small, its error is not. The
    # floor takes the module's largest value, not the gradient's own.
    for case, build in (("encoder_layer", encoder_layer), ("vit", vit), ("gpt", gpt)):
        ref, ours32 = build(torch.float64), build(torch.float32)
        scale = max(r.abs().max().item() for r in ref.values())
        print(f"{case}: largest value {scale:.3g}")
        for what, r in ref.items():
            mine = arrays[f"{case}.{what}"]
            err = (mine - r).abs().max().item()
            theirs = (ours32[what].double() - r).abs().max().item()
            print(f"{case} {what}: kdp {err:.3g}, PyTorch float32 {theirs:.3g}")
            if err > 2 * theirs + 8 * u * scale:
                failures.append(f"{case} {what}: kdp's error {err:.3g} > 2x PyTorch float32's {theirs:.3g}")
    print(f"PyTorch {torch.__version__}")
    if failures:
        print("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
