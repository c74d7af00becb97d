"""`jacond bench lanczos --compare-methods … --check-dense --out DIR` (bench_lanczos_methods.csv,
bench_lanczos_trace.csv): how many operator products each σ_min method needs (issue 10).

Left: products until σ_min's upper end (Courant–Fischer, rigorous) first came within 1 % of the
dense σ_min, against nd, per method; open markers at the products spent when a method never got
there; the dashed line 2 nd is the Krylov space exhausted (nd steps of two products), the dotted
verticals mark ViT-S and ViT-B. Right: how far that upper end still was from the truth
(hi / σ_min − 1) against products / (2 nd), for every unrestarted run that started more than 100 %
away (the hard matrices): the Krylov optimum.

Several runs in one figure: python3 -m jacond_plots.bench_lanczos OUT_DIR DIR [DIR …]
"""

import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import PlotError, caption_runs, read_csv, require_columns, save

VIT_ND = {"ViT-S": 197 * 384, "ViT-B": 197 * 768}
METHOD_COLUMNS = ["size", "init", "matrix", "method", "nd", "products", "products_to_1pct", "dense_sigma_min"]
TRACE_COLUMNS = ["size", "init", "matrix", "method", "end", "products", "hi", "dense_sigma_min"]


def products_panel(ax, methods):
    methods = methods[methods["dense_sigma_min"].notna()]  # "within 1 %" needs the dense truth
    if methods.empty:
        raise PlotError("bench_lanczos_methods.csv: no dense truth (column dense_sigma_min is empty: run with --check-dense, nd <= 12500)")
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
    ax.set_xlabel("nd (matrix order, log scale)")
    ax.set_ylabel("products until σ_min's upper end is within 1 % (log)")
    ax.set_title("products to a 1 % σ_min, per method", fontsize=9)
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
    ax.set_ylabel("σ_min upper end / true σ_min − 1 (log)")
    ax.set_title("unrestarted GKL (the Krylov optimum)", fontsize=9)
    ax.legend(fontsize=7)


def read_tables(directories):
    methods, traces = [], []
    for d in directories:
        for name, columns, frames in (("bench_lanczos_methods.csv", METHOD_COLUMNS, methods),
                                      ("bench_lanczos_trace.csv", TRACE_COLUMNS, traces)):
            df = read_csv(f"{d}/{name}")
            require_columns(df, f"{d}/{name}", columns)
            frames.append(df)
    return pd.concat(methods, ignore_index=True), pd.concat(traces, ignore_index=True)


def draw(directories, out_dir, formats):
    methods, trace = read_tables(directories)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.0))
    products_panel(left, methods)
    trace_panel(right, trace, methods)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption_runs(fig, directories)
    return save(fig, out_dir, "bench_lanczos_methods", formats)


def plot(directory, formats):
    return draw([directory], directory, formats)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    try:
        for path in draw(sys.argv[2:], sys.argv[1], ("png", "svg")):
            print(f"wrote {path}")
    except PlotError as e:
        sys.exit(f"jacond_plots.bench_lanczos: error: {e}")
