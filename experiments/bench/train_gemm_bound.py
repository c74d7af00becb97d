"""The GEMM-only bound of `jacond bench train`'s step: how many images/s a training step that did
nothing but its matrix products would reach on this machine.

    /usr/bin/python3 experiments/bench/train_gemm_bound.py [--dim 192 --depth 6 --heads 3 --patch 4
        --batch 128 --threads 1]

Both routes of `jacond bench train` (jacond's LibTorch C++ and Python PyTorch) issue the same ATen
operations, so C++ can only save what Python spends around them. This script measures the part
neither can save: every GEMM of one step of the benchmark ViT (pre-norm blocks, fused qkv, MLP
ratio 4), forward and backward, timed alone with torch on --threads threads (set for OpenBLAS and
OpenMP before torch loads, as `jacond bench train` starts its Python route: torch.set_num_threads
alone leaves Debian's OpenBLAS on every core; fp32, outputs preallocated, best of 7 after 3
warm-ups):
  per block, T = batch·tokens rows:  qkv [T, d]·[d, 3d], proj [T, d]·[d, d], fc1 [T, d]·[d, 4d],
  fc2 [T, 4d]·[4d, d], each three times (forward, ∂X, ∂W: the same flops), and the attention's two
  batched products [B·h, n, d_h]·[B·h, d_h, n] and [B·h, n, n]·[B·h, n, d_h], each three times.
The patch embedding and the head (under 0.5 % of the flops at the defaults) are left out, so the
bound is slightly optimistic. It prints each product's GFLOP/s, a square 2048³ product as this core's
reference rate, and the bound: batch / (depth × one block's GEMM seconds).
"""

import argparse
import os
import time


def best_seconds(f, warmup=3, reps=7):
    """The fastest of `reps` calls of f after `warmup` untimed ones."""
    for _ in range(warmup):
        f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def block_gemms(d, heads, tokens, batch):
    """One block's GEMMs in a training step: (name, left shape, right shape, times per step), times
    3 for forward, ∂X and ∂W (a linear layer's) or the two operands' gradients (a batched product),
    each with the forward's flops."""
    T, bh, dh = batch * tokens, batch * heads, d // heads
    linear = [(f"{name} [{T}, {k}]x[{k}, {m}]", (T, k), (k, m), 3)
              for name, k, m in (("qkv", d, 3 * d), ("proj", d, d), ("fc1", d, 4 * d), ("fc2", 4 * d, d))]
    return linear + [(f"scores [{bh}, {tokens}, {dh}]x[.., {dh}, {tokens}]", (bh, tokens, dh), (bh, dh, tokens), 3),
                     (f"attn.V [{bh}, {tokens}, {tokens}]x[.., {tokens}, {dh}]", (bh, tokens, tokens), (bh, tokens, dh), 3)]


def flops(left, right):
    """2·(rows of the product)·k·m for left [.., r, k] · right [.., k, m]."""
    count = 2
    for s in left:
        count *= s
    return count * right[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--image", type=int, default=28)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch  # after the thread variables: OpenBLAS reads them when it loads

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    n = (a.image // a.patch) ** 2 + 1  # patches and the cls token
    rows = []  # (name, flops of one product, seconds of one product, times per block)
    for name, left, right, times in block_gemms(a.dim, a.heads, n, a.batch):
        x, y = torch.randn(left), torch.randn(right)
        out = torch.empty(left[:-1] + right[-1:])
        mm = torch.bmm if len(left) == 3 else torch.mm
        rows.append((name, flops(left, right), best_seconds(lambda: mm(x, y, out=out)), times))
    square = torch.randn(2048, 2048)
    out = torch.empty(2048, 2048)
    reference = 2.0 * 2048 ** 3 / best_seconds(lambda: torch.mm(square, square, out=out), 1, 3)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); ViT d {a.dim}, depth {a.depth}, "
          f"{a.heads} heads, {n} tokens, batch {a.batch}")
    for name, f, seconds, _ in rows:
        print(f"  {name:36s} {seconds * 1e3:8.2f} ms  {f / seconds / 1e9:6.1f} GFLOP/s")
    print(f"  {'square [2048, 2048]x[2048, 2048]':36s} {'':8s}     {reference / 1e9:6.1f} GFLOP/s (this core's reference)")
    block_s = sum(s * k for _, _, s, k in rows)
    block_flops = sum(f * k for _, f, _, k in rows)
    step_s = a.depth * block_s
    print(f"one block's GEMMs, forward and backward: {block_s * 1e3:.1f} ms, {block_flops / 1e9:.2f} GFLOP "
          f"({block_flops / block_s / 1e9:.1f} GFLOP/s)")
    print(f"GEMM-only bound: {step_s:.3f} s a step, {a.batch / step_s:.1f} images/s")


if __name__ == "__main__":
    main()
