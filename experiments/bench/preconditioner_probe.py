#!/usr/bin/env python3
"""Is Prop. 2's dominant term B_sa, or K's token-diagonal blocks, a preconditioner for the bare K_sa? A measurement for the
σ_min-at-scale question (README, "Which σ_min solver").

Every method built from products with K and Kᵀ alone is bounded by the unrestarted Krylov space
(analysis/spectral/gkl.h), and that space reaches σ_min of `ours` K_sa only when it is the whole
space. A preconditioner escapes that bound, and the paper offers a cheap one. B_sa = Σ_h
(W^V_h W^O_h)ᵀ ⊗ A_h maps δY to Σ_h A_h δY W^V_h W^O_h = [A_1 (δY W^V)_1, …, A_H (δY W^V)_H] W^O,
where (·)_h is head h's d/H columns. With W^V and W^O square and invertible,
    B⁻¹ R = [A_1⁻¹ (R W^O⁻¹)_1, …, A_H⁻¹ (R W^O⁻¹)_H] W^V⁻¹          (apply_b_inverse)
costs two d × d products and one n × n LU solve per head: no more than a product with K. Inner
solves of an inverse iteration (GMRES on K B⁻¹ or B⁻¹ K) would converge as fast as K B⁻¹ is well
conditioned and clustered. This script measures κ of K, B, K B⁻¹ and B⁻¹ K (dense fp64 SVDs of
the matrices jacond assembles, `jacond.dense_jacobian`, tested against autograd) and the share of
K B⁻¹'s singular values within a factor 2 of 1 (the clustering GMRES needs).

The other cheap structural candidate is block Jacobi over tokens: M = the n diagonal d × d blocks
∂y_i/∂x_i of K (what `ours`'s diagonally dominant logits, attention maps near the identity, suggest),
n LU factorisations of d × d, cheaper than a product with K. Here M is read off the dense K (a
solver would assemble its blocks directly); κ(K M⁻¹) and its share within 2× of 1 are measured
the same way.

Input: the timm-named weights and tokens `jacond bench lanczos --out DIR` writes
(DIR/<size>-<init>/weights.safetensors, tokens.safetensors). Output: one CSV row per input.
Usage: PYTHONPATH=build/python /usr/bin/python3 experiments/bench/preconditioner_probe.py
       --heads H --out CSV DIR/<size>-<init> [...]
The test: python/tests/test_preconditioner_probe.py."""
import argparse
import csv
import os

import numpy as np

import jacond
from jacond import safetensors


def attention_maps(block, X):
    """A_h = softmax(s·(Y W^Q_h + b^Q_h)(Y W^K_h + b^K_h)ᵀ) per head at Y = LN1(X), rows summing to 1."""
    mean = X.mean(axis=1, keepdims=True)
    var = ((X - mean) ** 2).mean(axis=1, keepdims=True)
    Y = (X - mean) / np.sqrt(var + block.ln_eps) * block.ln1_gamma + block.ln1_beta
    Q, K = Y @ block.Wq + block.bq, Y @ block.Wk + block.bk
    maps = []
    for h in range(block.heads):
        cols = slice(h * block.head_dim, (h + 1) * block.head_dim)
        logits = block.logit_scale * Q[:, cols] @ K[:, cols].T
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        maps.append(e / e.sum(axis=1, keepdims=True))
    return maps


def apply_b_inverse(block, maps, R):
    """B_sa⁻¹ R for an n × d R, by the factorisation in the module docstring."""
    Z = np.linalg.solve(block.Wo.T, R.T).T  # R W^O⁻¹
    U = np.empty_like(Z)
    for h, A in enumerate(maps):
        cols = slice(h * block.head_dim, (h + 1) * block.head_dim)
        U[:, cols] = np.linalg.solve(A, Z[:, cols])
    return np.linalg.solve(block.Wv.T, U.T).T  # · W^V⁻¹


def token_blocks(K, n, d):
    """Block Jacobi of K over tokens: its n diagonal d × d blocks ∂y_i/∂x_i, zero elsewhere. vec is
    column-major (jacond's convention), so token i holds entries i, i + n, …, i + (d − 1)n."""
    M = np.zeros_like(K)
    for i in range(n):
        idx = i + n * np.arange(d)
        M[np.ix_(idx, idx)] = K[np.ix_(idx, idx)]
    return M


def kappa_and_values(M):
    s = np.linalg.svd(M, compute_uv=False)
    return s[0] / s[-1], s


def measure(block, X):
    """κ of K_sa, B_sa, K B⁻¹, B⁻¹ K and K M⁻¹ (M: token_blocks), and the share of K B⁻¹'s and of
    K M⁻¹'s σ within a factor 2 of 1."""
    K = jacond.dense_jacobian(block, X, "K_sa")
    B = jacond.dense_jacobian(block, X, "B_sa")
    right = np.linalg.solve(B.T, K.T).T  # K B⁻¹
    left = np.linalg.solve(B, K)  # B⁻¹ K
    kappa_right, s_right = kappa_and_values(right)
    n, d = X.shape
    kappa_jacobi, s_jacobi = kappa_and_values(np.linalg.solve(token_blocks(K, n, d).T, K.T).T)  # K M⁻¹
    return {"n": n, "d": d, "heads": block.heads, "nd": n * d, "kappa_K": kappa_and_values(K)[0],
            "kappa_B": kappa_and_values(B)[0], "kappa_K_Binv": kappa_right, "kappa_Binv_K": kappa_and_values(left)[0],
            "K_Binv_within_2x_of_1": float(np.mean((s_right > 0.5) & (s_right < 2.0))),
            "kappa_K_Minv": kappa_jacobi, "K_Minv_within_2x_of_1": float(np.mean((s_jacobi > 0.5) & (s_jacobi < 2.0)))}


def probe(run_dir, heads):
    weights = safetensors.read(os.path.join(run_dir, "weights.safetensors"))[0]
    X = safetensors.read(os.path.join(run_dir, "tokens.safetensors"))[0]["tokens"]
    row = {"input": os.path.basename(os.path.normpath(run_dir))}
    row.update(measure(jacond.Block.from_timm(weights, layer=0, heads=heads), X))
    return row


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
