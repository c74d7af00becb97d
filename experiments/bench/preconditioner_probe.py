#!/usr/bin/env python3
"""Is Prop. 2's dominant term B_sa a preconditioner for the bare K_sa? A measurement for the
σ_min-at-scale question (README, "Which σ_min solver").

Every method built from products with K and Kᵀ alone is bounded by the unrestarted Krylov space
(analysis/spectral/gkl.h), and that space reaches σ_min of `ours` K_sa only when it is the whole
space. A preconditioner escapes that bound, and the paper offers a cheap one: B_sa = Σ_h
(W^V_h W^O_h)ᵀ ⊗ A_h is, per head, the attention map times a rank-d_h value path, so with W^V and
W^O square and invertible B⁻¹ costs two d × d products and one n × n LU solve per head, no more
than a product with K. Inner solves of an inverse iteration (GMRES on K B⁻¹ or B⁻¹ K) would then
converge as fast as K B⁻¹ is well conditioned. This script measures κ of K, B, K B⁻¹ and B⁻¹ K
(dense fp64 SVDs of the matrices jacond assembles: `jacond.dense_jacobian`, tested against
autograd) and how many singular values of K B⁻¹ lie within a factor 2 of 1 (clustering, which is
what GMRES needs).

Input: the timm-named weights and tokens `jacond bench lanczos --out DIR` writes
(DIR/<size>-<init>/weights.safetensors, tokens.safetensors). Output: one CSV row per input.
Usage: preconditioner_probe.py --heads H --out CSV DIR/<size>-<init> [...]
Run with /usr/bin/python3 and the in-tree module (PYTHONPATH=build/python)."""
import argparse
import csv
import os

import numpy as np

import jacond
from jacond import safetensors


def kappa_and_values(M):
    s = np.linalg.svd(M, compute_uv=False)
    return s[0] / s[-1], s


def probe(run_dir, heads):
    weights = safetensors.read(os.path.join(run_dir, "weights.safetensors"))[0]
    tokens = safetensors.read(os.path.join(run_dir, "tokens.safetensors"))[0]["tokens"]
    block = jacond.Block.from_timm(weights, layer=0, heads=heads)
    K = jacond.dense_jacobian(block, tokens, "K_sa")
    B = jacond.dense_jacobian(block, tokens, "B_sa")
    kappa_K, _ = kappa_and_values(K)
    kappa_B, _ = kappa_and_values(B)
    right = np.linalg.solve(B.T, K.T).T  # K B⁻¹
    left = np.linalg.solve(B, K)  # B⁻¹ K
    kappa_right, s_right = kappa_and_values(right)
    kappa_left, _ = kappa_and_values(left)
    n, d = tokens.shape
    return {"input": os.path.basename(os.path.normpath(run_dir)), "n": n, "d": d, "heads": heads, "nd": n * d,
            "kappa_K": kappa_K, "kappa_B": kappa_B, "kappa_K_Binv": kappa_right, "kappa_Binv_K": kappa_left,
            "K_Binv_within_2x_of_1": float(np.mean((s_right > 0.5) & (s_right < 2.0)))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", help="DIR/<size>-<init> folders written by jacond bench lanczos --out DIR")
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--out", required=True, help="the CSV to write")
    args = parser.parse_args()
    rows = [probe(d, args.heads) for d in args.dirs]
    tmp = args.out + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, args.out)
    for r in rows:
        print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
