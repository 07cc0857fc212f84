#!/usr/bin/python3
"""kdp's autocast(bf16) against PyTorch's torch.autocast("cpu", torch.bfloat16)
on the same inputs: linear, matmul and two convolutions, forward, input,
weight and bias gradients (kdp_autocast_probe writes kdp's side).

Both round the operands of each product to bf16 (8 significant bits: a
relative rounding error of at most u = 2^-8) and accumulate in fp32; the
differences that remain, which set the tolerances:
  - PyTorch rounds each product's result to bf16 (it returns bf16 tensors),
    kdp keeps fp32: u / (1 - u) |torch|, relative to PyTorch's rounded value;
  - the order of fp32 additions: K 2^-22 S, where K is the reduction length
    and S the sum of |products| (float64, from the rounded operands);
  - PyTorch's bias is rounded to bf16 before it is added: u |bias|;
  - kdp sums the bias gradient from the unrounded output gradient, PyTorch
    from the rounded one: u sum |gy|.

    autocast_vs_torch.py PROBE_EXECUTABLE WORKDIR

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
    arrays = run_probe(probe, work, torch.float32)

    ops = {
        "linear": (lambda a, b, c: F.linear(a, b, c), 70),
        "matmul": (lambda a, b, c: torch.matmul(a, b), 70),
        "conv": (lambda a, b, c: F.conv2d(a, b, c, stride=1, padding=1), 8 * 9),
        "conv_strided": (lambda a, b, c: F.conv2d(a, b, c, stride=2, padding=0), 3 * 25),
    }
    u = 2.0 ** -8
    rounding = u / (1.0 - u)
    failures = []
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
        # S: the sums of |products| of each result, from the rounded operands.
        r = lambda t: t.detach().bfloat16().double().abs()  # noqa: E731
        with torch.enable_grad():
            a64, b64 = r(a).requires_grad_(), r(b).requires_grad_()
            s = op(a64, b64, None)
            s.backward(r(gy))
        sums = {"y": s.detach(), "ga": a64.grad, "gb": b64.grad}
        theirs = {"y": y.detach().float(), "ga": a.grad, "gb": b.grad}
        if c is not None:
            theirs["gbias"] = c.grad
        for what, t in theirs.items():
            mine = arrays[f"{name}.{what}"]
            t = t.double()
            if what == "gbias":
                dims = [d for d in range(gy.dim()) if d != 1] if gy.dim() == 4 else [0]
                tol = rounding * t.abs() + u * gy.double().abs().sum(dims)
            else:
                tol = rounding * t.abs() + k * 2.0 ** -22 * sums[what]
                if what == "y" and bias is not None:
                    shape = [1, -1, 1, 1] if y.dim() == 4 else [1, -1]
                    tol = tol + u * bias.double().abs().reshape(shape)
            excess = ((mine.double() - t).abs() - tol).max().item()
            worst = ((mine.double() - t).abs() / tol.clamp_min(1e-30)).max().item()
            print(f"{name} {what}: worst |kdp - torch| / tolerance = {worst:.3f}")
            if excess > 0:
                failures.append(f"{name} {what}: beyond the tolerance by {excess:.3g}")
    print(f"PyTorch {torch.__version__}")
    if failures:
        print("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
