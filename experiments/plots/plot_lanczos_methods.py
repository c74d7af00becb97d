#!/usr/bin/env python3
"""Plot `jacond bench lanczos --compare-methods ... --check-dense --out DIR` (issue #10, item 1).

Left: products until sigma_min's upper end (Courant-Fischer, rigorous) first came within 1 % of
the dense sigma_min, against nd, per method; open markers at the products spent when a method
never got there; the line 2 nd is the Krylov space exhausted (nd steps of two products), the
dotted verticals mark ViT-S and ViT-B. Right: how far that upper end still was from the truth
(hi / sigma_min - 1) against products / (2 nd), for every unrestarted run that started more than
100 % away (the hard matrices): the Krylov optimum.
Several DIRs are concatenated. Run with /usr/bin/python3.
Usage: plot_lanczos_methods.py OUT.png DIR [DIR ...]"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

VIT_ND = {"ViT-S": 197 * 384, "ViT-B": 197 * 768}


def read_all(dirs, name):
    frames = []
    for d in dirs:
        path = os.path.join(d, name)
        if not os.path.exists(path):
            sys.exit(f"plot_lanczos_methods.py: {path} is missing (run bench lanczos with --compare-methods --check-dense)")
        frames.append(pd.read_csv(path))
    return pd.concat(frames, ignore_index=True)


def products_panel(ax, methods):
    methods = methods[methods["dense_sigma_min"].notna()]  # "within 1 %" needs the dense truth
    if methods.empty:
        sys.exit("plot_lanczos_methods.py: no dense truth in the CSVs (run with --check-dense, nd <= 12500)")
    markers = {"K_sa": "o", "K_sab": "s", "K_ffn": "^"}
    for i, (method, g) in enumerate(methods.groupby("method")):
        colour = f"C{i}"
        for matrix, h in g.groupby("matrix"):
            reached = h[h["products_to_1pct"].notna()]
            missed = h[h["products_to_1pct"].isna()]
            mk = markers.get(matrix, "x")
            if len(reached):
                ax.scatter(reached["nd"], reached["products_to_1pct"], color=colour, marker=mk,
                           label=f"{method} {matrix}")
            if len(missed):
                ax.scatter(missed["nd"], missed["products"], facecolors="none", edgecolors=colour, marker=mk,
                           label=f"{method} {matrix}: not within 1 % in its budget (products spent)")
    nd = np.geomspace(methods["nd"].min() / 1.5, VIT_ND["ViT-B"] * 1.5, 50)
    ax.plot(nd, 2 * nd, "k--", lw=1, label="2 nd (Krylov space exhausted)")
    for name, x in VIT_ND.items():
        ax.axvline(x, color="grey", ls=":", lw=1)
        ax.text(x, ax.get_ylim()[1] if ax.get_ylim()[1] > 0 else 1, f" {name}", rotation=90, va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nd (matrix order)")
    ax.set_ylabel("products until sigma_min upper end within 1 %")
    ax.set_title("products to a 1 % sigma_min, per method")
    ax.legend(fontsize=6)


def trace_panel(ax, trace, methods):
    runs = trace[(trace["method"] == "unrestarted") & (trace["end"] == "min") & trace["dense_sigma_min"].notna()]
    if runs.empty:
        ax.text(0.5, 0.5, "no unrestarted run with a dense truth", ha="center", transform=ax.transAxes)
        return
    keys = ["size", "init", "matrix", "method"]
    runs = runs.merge(methods[keys + ["nd"]].drop_duplicates(), on=keys)  # nd of each run
    for (nd, init, matrix), g in runs.groupby(["nd", "init", "matrix"]):
        gap = g["hi"] / g["dense_sigma_min"] - 1
        if gap.max() < 1:  # converged in the first steps (K_ffn, timm K_sab): nothing to see here
            continue
        ended = "" if gap.min() <= 0.01 else " (budget ran out)"
        ax.plot(g["products"] / (2 * nd), gap.clip(lower=1e-8), label=f"{init} {matrix} nd {nd}{ended}")
    ax.axhline(0.01, color="k", ls="--", lw=1)
    ax.text(0.02, 0.012, "1 %", fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("products / (2 nd)   (1 = Krylov space exhausted)")
    ax.set_ylabel("sigma_min upper end / true sigma_min - 1")
    ax.set_title("unrestarted GKL (the Krylov optimum)")
    ax.legend(fontsize=7)


def main(png, dirs):
    methods = read_all(dirs, "bench_lanczos_methods.csv")
    trace = read_all(dirs, "bench_lanczos_trace.csv")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    products_panel(left, methods)
    trace_panel(right, trace, methods)
    tmp = png + ".tmp.png"
    fig.savefig(tmp, dpi=130)
    os.replace(tmp, png)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
