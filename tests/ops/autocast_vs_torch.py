#!/usr/bin/python3
"""kdp's autocast(bf16) against the exact result of autocast's rounding
rules and against PyTorch's torch.autocast("cpu", torch.bfloat16) on the same
inputs: linear, matmul and two convolutions, forward, input, weight and bias
gradients (kdp_autocast_probe writes kdp's side).

The rules: each product's operands (inputs, weights, output gradients) are
rounded to bf16 (8 significant bits: a relative rounding error of at most
u = 2^-8) and accumulated in fp32. The reference is that product in float64
from the rounded operands; S is the sum of |products| of each result, and K
the reduction length.

  - kdp against the reference: only fp32's additions differ, at most
    K 2^-22 S, plus 2^-22 |bias| for the bias added in fp32 and, for the bias
    gradient (summed from the unrounded output gradient), 2^-22 N sum |gy|.
  - kdp against PyTorch, which also rounds each product's result to bf16
    (u / (1 - u) |torch|), rounds the bias before it adds it (u |bias|) and
    sums the bias gradient from the rounded output gradient (u sum |gy|).
    This comparison needs PyTorch's own products to accumulate in fp32. Some
    PyTorch builds accumulate bf16 products in bf16 on some CPUs; where
    PyTorch itself is beyond those bounds from the reference, the comparison
    is reported and left out, and the reference check above still holds kdp.

    autocast_vs_torch.py PROBE_EXECUTABLE WORKDIR

Exit 77 (skipped) without PyTorch.
"""
import sys

from probe_arrays import run_probe

U = 2.0 ** -8
ROUNDING = U / (1.0 - U)
FP32_SUM = 2.0 ** -22


def worst(diff, tol):
    """(excess over the tolerance, worst ratio to it)."""
    return (diff - tol).max().item(), (diff / tol.clamp_min(1e-30)).max().item()


def reference(op, a, b, bias, gy):
    """autocast's rules in float64: the result, its gradients, and the sums of
    |products| behind each of them."""
    import torch
    r = lambda t: t.detach().bfloat16().double()  # noqa: E731
    with torch.enable_grad():
        a64, b64 = r(a).requires_grad_(), r(b).requires_grad_()
        y = op(a64, b64, None)
        y.backward(r(gy))
        abs_a, abs_b = a64.detach().abs().requires_grad_(), b64.detach().abs().requires_grad_()
        s = op(abs_a, abs_b, None)
        s.backward(r(gy).abs())
    if bias is not None:
        shape = [1, -1, 1, 1] if y.dim() == 4 else [1, -1]
        y = y + bias.double().reshape(shape)
    exact = {"y": y.detach(), "ga": a64.grad, "gb": b64.grad}
    sums = {"y": s.detach(), "ga": abs_a.grad, "gb": abs_b.grad}
    return exact, sums


def main():
    probe, work = sys.argv[1], sys.argv[2]
    try:
        import numpy  # noqa: F401 (run_probe reads the arrays with it)
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"skipped: PyTorch is not installed ({e})")
        return 77
    arrays = run_probe(probe, work, torch.float32)

    ops = {
        "linear": (lambda a, b, c: F.linear(a, b, c), 70),
        "matmul": (lambda a, b, c: torch.matmul(a, b), 70),
        "conv": (lambda a, b, c: F.conv2d(a, b, c, stride=1, padding=1), 8 * 9),
        "conv_strided": (lambda a, b, c: F.conv2d(a, b, c, stride=2, padding=0), 3 * 25),
    }
    failures, unmet = [], []
    for name, (op, k) in ops.items():
        a = arrays[name + ".a"].clone().requires_grad_()
        b = arrays[name + ".b"].clone().requires_grad_()
        bias = arrays.get(name + ".bias")
        c = bias.clone().requires_grad_() if bias is not None else None
        gy = arrays[name + ".gy"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = op(a, b, c)
        assert y.dtype == torch.bfloat16, f"{name}: PyTorch's autocast did not run in bf16"
        y.backward(gy)
        exact, sums = reference(op, a, b, bias, gy)
        theirs = {"y": y.detach().float(), "ga": a.grad, "gb": b.grad}
        if c is not None:
            dims = [d for d in range(gy.dim()) if d != 1] if gy.dim() == 4 else [0]
            exact["gbias"] = gy.double().sum(dims)
            sums["gbias"] = gy.double().abs().sum(dims)
            theirs["gbias"] = c.grad
        shape = [1, -1, 1, 1] if y.dim() == 4 else [1, -1]
        for what, t in theirs.items():
            mine, t, ref = arrays[f"{name}.{what}"].double(), t.double(), exact[what]
            if what == "gbias":
                n = gy.numel() // gy.shape[1]
                own = n * FP32_SUM * sums[what]
                peer = ROUNDING * t.abs() + U * sums[what]
            else:
                own = k * FP32_SUM * sums[what]
                peer = ROUNDING * t.abs() + own
                if what == "y" and bias is not None:
                    own = own + FP32_SUM * bias.double().abs().reshape(shape)
                    peer = peer + U * bias.double().abs().reshape(shape)
            excess, ratio = worst((mine - ref).abs(), own)
            print(f"{name} {what}: worst |kdp - exact| / tolerance = {ratio:.3f}")
            if excess > 0:
                failures.append(f"{name} {what}: kdp beyond the exact result's tolerance by {excess:.3g}")
            # PyTorch against the same reference, with its own rounding allowed.
            torch_excess, torch_ratio = worst((t - ref).abs(), peer)
            if torch_excess > 0:
                unmet.append(f"{name} {what}: PyTorch's own result is {torch_ratio:.1f}x the tolerance "
                             "from the exact one (its bf16 products do not accumulate in fp32 here)")
                continue
            excess, ratio = worst((mine - t).abs(), peer)
            print(f"{name} {what}: worst |kdp - torch| / tolerance = {ratio:.3f}")
            if excess > 0:
                failures.append(f"{name} {what}: kdp beyond PyTorch's tolerance by {excess:.3g}")
    print(f"PyTorch {torch.__version__}")
    if unmet:
        print("compared with the exact result only:\n" + "\n".join(unmet))
    if failures:
        print("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
