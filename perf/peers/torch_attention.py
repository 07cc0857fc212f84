#!/usr/bin/python3
"""PyTorch's side of kdp_bench_attention: F.scaled_dot_product_attention
forward and backward at [B, H, T, D] = [4, 4, T, 64], T 256 and 1024, causal
and not, in fp32 and under bf16 autocast (PyTorch's CPU flash kernel takes
both), on one thread unless told otherwise. Prints the best of several
repetitions, as kdp_bench_attention does:

    ATTENTION torch T=256 full fp32 fwd+bwd 12.345 ms

    torch_attention.py [--threads N] [--quick]

Exit 3 without PyTorch 2.0 or later.
"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"PyTorch is not installed ({e})")
        return 3
    if not hasattr(F, "scaled_dot_product_attention"):
        print(f"PyTorch is not installed in a version with F.scaled_dot_product_attention "
              f"(2.0 or later; this is {torch.__version__})")
        return 3
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    reps = 1 if args.quick else 5
    for t in (256,) if args.quick else (256, 1024):
        q, k, v, gy = (torch.randn(4, 4, t, 64) for _ in range(4))
        for precision in ("fp32", "bf16"):
            for causal in (False, True):
                leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]

                def step():
                    for x in leaves:
                        x.grad = None
                    start = time.perf_counter()
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                        y = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                    y.backward(gy.to(y.dtype))
                    return 1e3 * (time.perf_counter() - start)

                step()
                best = min(step() for _ in range(reps))
                print(f"ATTENTION torch T={t} {'causal' if causal else 'full'} {precision} fwd+bwd "
                      f"{best:.3f} ms", flush=True)
    print(f"torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
