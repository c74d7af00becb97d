"""The PyTorch user's route to κ(K_sa): autograd Jacobian + dense singular values.

Run by `jacond bench dense` as a subprocess on the same files it analyses in-process:

    python3 torch_dense_route.py --weights W.safetensors --tokens T.safetensors \
        --heads H [--layer 0] [--logit-scale S] [--threads T] [--repeat R]

It rebuilds bare self-attention of block `layer` in fp64 torch exactly as docs/design.md §2 (no
LayerNorm, no residual):

    qkv = x Wᵀ + b          (timm Linear: weight is out×in, rows Q | K | V)
    head h: columns [h·d_h, (h+1)·d_h) of Q, K, V
    A_h = softmax_rows(s · Q_h K_hᵀ),  s = 1/sqrt(d_h) unless --logit-scale is given
    SA(x) = Concat_h(A_h V_h) W_Oᵀ + b_O   (proj Linear)

then J = torch.autograd.functional.jacobian(SA, X) (shape [n, d, n, d], reshaped to (nd, nd):
a row-major flattening on both sides, a permutation of jacond's column-major vec that leaves
the singular values alone), s = torch.linalg.svdvals(J) and κ = s[0] / s[-1]. This is the
straightforward code a PyTorch user would write; nothing is tuned (default reverse-mode
jacobian, one backward pass per output entry).

Prints ONE JSON line on stdout:
    {"jacobian_s", "svd_s", "total_s", "total_s_runs", "total_median_s", "kappa", "sigma_max",
     "sigma_min", "torch_version", "threads", ...}
Timings (time.perf_counter) are of the best repeat by total; "total_s_runs" lists every repeat's
total and "total_median_s" is their median (jacond's total_median_s of this route: the best run
alone would pass for a median); loading the files is not timed.
Errors go to stderr with exit status 1.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import package_modules  # noqa: E402

safetensors_reader = package_modules.load("safetensors")  # python/jacond/safetensors.py


def tensor(tensors, key, path, shape):
    """Looks up `key`, checks its shape, returns an fp64 torch tensor (a copy)."""
    if key not in tensors:
        raise ValueError(f"{path}: missing key {key}")
    array = tensors[key]
    if list(array.shape) != list(shape):
        raise ValueError(f"{path}: {key} has shape {list(array.shape)}, expected {list(shape)}")
    return torch.from_numpy(np.array(array, dtype=np.float64, order="C"))


def load_tokens(path):
    """`tokens` [n, d] of a safetensors file as an fp64 torch tensor (a copy)."""
    tokens, _ = safetensors_reader.read(path)
    if "tokens" not in tokens:
        raise ValueError(f"{path}: missing key tokens")
    if tokens["tokens"].ndim != 2:
        raise ValueError(f"{path}: tokens has shape {list(tokens['tokens'].shape)}, expected [n, d]")
    return torch.from_numpy(np.array(tokens["tokens"], dtype=np.float64, order="C"))


def build_attention(tensors, weights_path, layer, heads, logit_scale, d):
    """SA(x) of block `layer` as a function of x [n, d] (docs/design.md §2, bare, no LayerNorm),
    from the tensors of `weights_path` (already read; the path names it in errors)."""
    prefix = f"blocks.{layer}.attn."
    w_qkv = tensor(tensors, prefix + "qkv.weight", weights_path, [3 * d, d])
    b_qkv = tensor(tensors, prefix + "qkv.bias", weights_path, [3 * d])
    w_proj = tensor(tensors, prefix + "proj.weight", weights_path, [d, d])
    b_proj = tensor(tensors, prefix + "proj.bias", weights_path, [d])
    if d % heads != 0:
        raise ValueError(f"d = {d} is not divisible by heads = {heads}")
    d_h = d // heads
    scale = 1.0 / math.sqrt(d_h) if logit_scale is None else logit_scale

    def sa(x):
        n = x.shape[0]
        qkv = x @ w_qkv.T + b_qkv                      # [n, 3d]
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        # [n, d] -> [heads, n, d_h]: head h takes columns h·d_h .. (h+1)·d_h - 1.
        q = q.reshape(n, heads, d_h).transpose(0, 1)
        k = k.reshape(n, heads, d_h).transpose(0, 1)
        v = v.reshape(n, heads, d_h).transpose(0, 1)
        a = torch.softmax(scale * (q @ k.transpose(1, 2)), dim=-1)   # [heads, n, n]
        out = (a @ v).transpose(0, 1).reshape(n, d)    # Concat_h(A_h V_h)
        return out @ w_proj.T + b_proj

    return sa, scale


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", required=True, help="safetensors with timm block keys")
    parser.add_argument("--tokens", required=True, help="safetensors with `tokens` [n, d]")
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--logit-scale", type=float, default=None,
                        help="s in M_h = s Q_h K_hᵀ (default 1/sqrt(d_h))")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: leave torch's choice)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(True)

    x = load_tokens(args.tokens)
    n, d = x.shape
    tensors, _ = safetensors_reader.read(args.weights)
    sa, scale = build_attention(tensors, args.weights, args.layer, args.heads, args.logit_scale, d)

    best, totals = None, []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        jac = torch.autograd.functional.jacobian(sa, x)    # [n, d, n, d]
        jac = jac.reshape(n * d, n * d)
        t1 = time.perf_counter()
        s = torch.linalg.svdvals(jac)                       # descending
        t2 = time.perf_counter()
        del jac
        run = {"jacobian_s": t1 - t0, "svd_s": t2 - t1, "total_s": t2 - t0,
               "sigma_max": float(s[0]), "sigma_min": float(s[-1])}
        run["kappa"] = run["sigma_max"] / run["sigma_min"] if run["sigma_min"] > 0 else math.inf
        totals.append(run["total_s"])
        if best is None or run["total_s"] < best["total_s"]:
            best = run

    best.update({
        "total_s_runs": totals,
        "total_median_s": statistics.median(totals),  # the mean of the middle two for an even count, as jacond's
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "threads": torch.get_num_threads(),
        "n": n, "d": d, "heads": args.heads, "layer": args.layer, "logit_scale": scale,
        "repeat": args.repeat,
        "jacobian": "torch.autograd.functional.jacobian (reverse-mode, vectorize=False)",
        "svd": "torch.linalg.svdvals",
        "dtype": "float64",
    })
    # json spells inf as Infinity; jacond's reader (nlohmann) does not accept it.
    if not math.isfinite(best["kappa"]):
        best["kappa"] = None
    print(json.dumps(best), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError, RuntimeError) as e:
        print(f"torch_dense_route.py: error: {e}", file=sys.stderr)
        sys.exit(1)
