"""`jacond spectrum --out DIR` (spectrum.csv for a dense spectrum, density.csv for SLQ).

Dense: a histogram of log10 σ over all singular values, normalised to a density per unit log10 σ,
with σ_max, σ_min and κ in the title (zero singular values are counted in the title and left out
of the log axis). SLQ (stochastic Lanczos quadrature): the estimated density per unit log10 σ.
"""

import json
import os

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, read_csv, require_columns, save


def describe(directory):
    try:
        with open(os.path.join(directory, "run.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return os.path.basename(os.path.normpath(directory))
    source = meta.get("init") or meta.get("source", "?")
    return f"{meta.get('matrix', '?')}, {source}, skip {meta.get('skip', '?')}"


def plot_dense(directory, formats):
    path = f"{directory}/spectrum.csv"
    df = read_csv(path)
    require_columns(df, path, ["sigma"])
    sigma = df["sigma"].astype(float).to_numpy()
    positive = sigma[sigma > 0]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.hist(np.log10(positive), bins=min(60, max(10, positive.size // 20)), density=True, color="#1f77b4", alpha=0.8)
    zeros = sigma.size - positive.size
    title = (f"{describe(directory)}: {sigma.size} singular values, σ_max {positive.max():.4g}, "
             f"σ_min {sigma.min():.4g}, κ {sigma.max() / sigma.min() if sigma.min() > 0 else float('inf'):.4g}")
    ax.set_title(title + (f" ({zeros} exactly zero, not drawn)" if zeros else ""), fontsize=9)
    ax.set_xlabel("log10 σ")
    ax.set_ylabel("density per unit log10 σ")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "spectrum", formats)


def plot_density(directory, formats):
    path = f"{directory}/density.csv"
    df = read_csv(path)
    require_columns(df, path, ["log10_sigma", "density"])
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.plot(df["log10_sigma"], df["density"], color="#d95f02")
    ax.fill_between(df["log10_sigma"], 0, df["density"], color="#d95f02", alpha=0.2)
    ax.set_title(f"{describe(directory)}: SLQ estimate of the singular value density", fontsize=9)
    ax.set_xlabel("log10 σ")
    ax.set_ylabel("density per unit log10 σ")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "spectrum_density", formats)
