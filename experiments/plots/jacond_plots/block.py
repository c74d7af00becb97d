"""`jacond block` (results.csv + run.json): κ of every Jacobian the block reports, on one log axis.

One row per report (matrix, space, head), in the command's order: a dot at κ coloured by status;
a bar for [κ_lo, κ_hi] where the route gives a bracket (bracket, certified); for a singular
matrix, and for a bracket that did not converge (κ_hi unbounded), a right-pointing triangle at
κ_lo, the only claim (κ ≥ κ_lo). K_mlp / K_ffn
rows are per-token spectra, softmax / attention rows per head.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import STATUS_COLOURS, caption, plotted_kappa, read_csv, require_columns, save

COLUMNS = ["matrix", "space", "head", "status", "kappa", "kappa_lo", "kappa_hi", "method"]
SPACE_LABELS = {"full": "", "ln-complement": " on LN⊥", "ones-complement": " on 1⊥"}


def row_label(row, several_layers):
    head = str(row["head"])
    label = row["matrix"] + ("" if head in ("all", "-1") else f" h{head}") + SPACE_LABELS.get(row["space"], f" on {row['space']}")
    if several_layers:
        label = f"L{row['layer']} " + label
    return label


def title(df):
    first = df.iloc[0]
    parts = []
    for key in ("init", "skip", "n", "d", "heads", "layer"):
        if key in df.columns and pd.notna(first.get(key)) and (key != "layer" or first.get("source") != "init"):
            parts.append(f"{key} {first[key]}")
    return "κ of the block's Jacobians" + (" — " + ", ".join(parts) if parts else "")


def plot(directory, formats):
    path = f"{directory}/results.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    several_layers = "layer" in df.columns and df["layer"].nunique() > 1
    kappa = plotted_kappa(df)
    lo = pd.to_numeric(df["kappa_lo"], errors="coerce").to_numpy(dtype=float)
    hi = pd.to_numeric(df["kappa_hi"], errors="coerce").to_numpy(dtype=float)
    labels = [row_label(r, several_layers) for _, r in df.iterrows()]
    y = np.arange(len(df))[::-1]

    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(df) + 1.8))
    for status, colour in STATUS_COLOURS.items():
        mask = (df["status"] == status).to_numpy() & np.isfinite(kappa)
        if not mask.any():
            continue
        lower_bound = status in ("singular", "not-converged")
        marker = ">" if lower_bound else "o"
        name = f"{status} (κ ≥ κ_lo)" if lower_bound else status
        ax.scatter(kappa[mask], y[mask], color=colour, marker=marker, s=36, zorder=3, label=name)
        span = mask & np.isfinite(lo) & np.isfinite(hi) & (hi > lo * (1 + 1e-12))
        if span.any():
            ax.hlines(y[span], lo[span], hi[span], color=colour, lw=3, alpha=0.5, zorder=2)
    ax.set_xscale("log")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("condition number κ = σ_max / σ_min (log scale)")
    ax.grid(axis="x", which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title(df), fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "block_kappa", formats)
