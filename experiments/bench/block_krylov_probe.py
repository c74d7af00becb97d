#!/usr/bin/env python3
"""Does a block of starts reach sigma_min sooner than one? A measurement for issue #10, item 1.

For b = 1, 2, 4, 8, ... random orthonormal starts P_0 (nd x b), builds the unrestarted block
Krylov space span{P_0, (K^T K) P_0, (K^T K)^2 P_0, ...} with full reorthogonalisation (CGS2,
then QR of each new block) and records, every nd/40 columns, the smallest singular value of K
restricted to it: min over x in the space of ||K x|| / ||x|| = sigma_min(K V) for an orthonormal
basis V (Courant-Fischer: an upper bound on sigma_min(K), the best any method working in that
space can claim). Products are counted as a block GKL would spend them: 2 per basis vector.
b = 1 is the space of jacond's unrestarted GKL, so its curve must match that run's trace
(bench_lanczos_trace.csv); b > 1 is the block GKL the issue asks about.

K is the fp64 Jacobian of the same block as scipy_svds_route.py (K_sa bare at LN1's output,
K_sab, K_ffn), from torch.autograd.functional.jacobian on the timm-named weights and tokens that
`jacond bench lanczos` writes (<out>/<size>-<init>/); nd up to a few thousand (dense SVDs).
Writes a CSV: matrix, nd, block, products, columns, sigma_upper, sigma_min, ratio.
Usage: block_krylov_probe.py --weights W --tokens T --heads H --matrix K_sa --blocks 1,2,4,8 --out CSV
Run with /usr/bin/python3."""
import argparse
import csv
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

from scipy_svds_route import build_block, matrix_function  # noqa: E402
from torch_dense_route import load_tokens  # noqa: E402


def dense_jacobian(args):
    x = load_tokens(args.tokens)
    n, d = x.shape
    ln1, sa, ln2, mlp, _ = build_block(args.weights, 0, args.heads, args.logit_scale, d, 1e-6)
    f, x0 = matrix_function(args.matrix, x, ln1, sa, ln2, mlp)
    J = torch.autograd.functional.jacobian(f, x0, vectorize=True)  # [n, d, n, d]
    return J.reshape(n * d, n * d).numpy()


def orthonormal_block(W, V):
    """W orthogonalised against the columns of V twice (CGS2), then orthonormalised (QR)."""
    for _ in range(2):
        if V.shape[1]:
            W = W - V @ (V.T @ W)
    Q, R = np.linalg.qr(W)
    keep = np.abs(np.diag(R)) > 1e-10 * max(1.0, np.abs(R).max())  # drop directions already in V
    return Q[:, keep]


def probe(K, b, sigma_min, seed, checkpoints):
    nd = K.shape[0]
    rng = np.random.default_rng(seed)
    V = np.zeros((nd, 0))
    block = orthonormal_block(rng.standard_normal((nd, b)), V)
    rows = []
    next_check = 0
    while V.shape[1] < nd and block.shape[1]:
        V = np.hstack([V, block])
        if V.shape[1] >= checkpoints[next_check] or V.shape[1] == nd:
            upper = np.linalg.svd(K @ V, compute_uv=False)[-1]
            rows.append((2 * V.shape[1], V.shape[1], upper, upper / sigma_min))
            while next_check < len(checkpoints) - 1 and checkpoints[next_check] <= V.shape[1]:
                next_check += 1
        block = orthonormal_block(K.T @ (K @ block), V)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--matrix", default="K_sa", choices=["K_sa", "K_sab", "K_ffn"])
    ap.add_argument("--logit-scale", type=float, default=None, help="s in M_h = s Q_h K_hᵀ (default 1/sqrt(d_h))")
    ap.add_argument("--blocks", default="1,2,4,8")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(True)
    try:
        blocks = [int(b) for b in args.blocks.split(",")]
        if any(b < 1 for b in blocks):
            raise ValueError
    except ValueError:
        sys.exit(f"block_krylov_probe.py: --blocks must be a comma list of integers >= 1, got {args.blocks}")
    t0 = time.perf_counter()
    K = dense_jacobian(args)
    nd = K.shape[0]
    sigma = np.linalg.svd(K, compute_uv=False)
    sigma_min = sigma[-1]
    checkpoints = sorted({max(1, (nd * i) // 40) for i in range(1, 41)})
    tmp = args.out + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["matrix", "nd", "block", "products", "columns", "sigma_upper", "sigma_min", "ratio", "kappa"])
        for b in blocks:
            for products, cols, upper, ratio in probe(K, b, sigma_min, args.seed, checkpoints):
                # repr of a Python float: shortest round-trip digits (NumPy 2's repr of its own
                # scalars reads "np.float64(...)")
                w.writerow([args.matrix, nd, b, products, cols] +
                           [repr(float(x)) for x in (upper, sigma_min, ratio, sigma[0] / sigma_min)])
            print(f"block {b} done ({time.perf_counter() - t0:.1f} s)", flush=True)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
