#!/usr/bin/env python3
"""Conditioning across training, from one or more `jacond train` run directories.

Usage: plot_training.py OUT.png RUN_DIR [RUN_DIR ...]

Panels: test accuracy vs step (eval.csv); then log10 κ vs step per layer (conditioning.csv,
probe 0) for each of K_sa, K_sab and K_ffn that the runs tracked (`--track-matrices`). Skipless sub-blocks are singular on the full space by
construction (LayerNorm nullspace), so their `ln-complement` rows are used when present.
Rows whose status is `singular` are drawn at κ_lo with hollow markers; `not-converged` rows are
skipped. Each run is labelled with its directory name."""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

MATRICES = ["K_sa", "K_sab", "K_ffn"]


def conditioning_rows(cond: pd.DataFrame, matrix: str) -> pd.DataFrame:
    sub = cond[(cond["matrix"] == matrix) & (cond["head"] == "all") & (cond["probe"].astype(str) == "0")]
    if (sub["space"] == "ln-complement").any():
        sub = sub[sub["space"] == "ln-complement"]
    else:
        sub = sub[sub["space"] == "full"]
    return sub[sub["status"] != "not-converged"].copy()


def main(png: str, runs: list) -> None:
    conds = {run: pd.read_csv(os.path.join(run, "conditioning.csv"), dtype={"head": str, "probe": str}) for run in runs}
    tracked = set().union(*(set(c["matrix"]) for c in conds.values()))
    matrices = [m for m in MATRICES if m in tracked]
    fig, axes = plt.subplots(1, 1 + len(matrices), figsize=(4.2 * (1 + len(matrices)), 3.8), constrained_layout=True,
                             squeeze=False)
    axes = axes[0]
    for r, run in enumerate(runs):
        name = os.path.basename(os.path.normpath(run))
        color = f"C{r}"
        ev = pd.read_csv(os.path.join(run, "eval.csv"))
        axes[0].plot(ev["step"], ev["test_acc"], "o-", color=color, label=name)
        cond = conds[run]
        for ax, matrix in zip(axes[1:], matrices):
            sub = conditioning_rows(cond, matrix)
            for layer, g in sub.groupby("layer"):
                kappa = np.where(g["status"] == "singular", g["kappa_lo"], g["kappa"]).astype(float)
                alpha = 0.35 + 0.65 * (layer + 1) / (sub["layer"].max() + 1)
                ax.plot(g["step"], np.log10(kappa), "-", color=color, alpha=alpha,
                        label=f"{name} L{layer}" if r == 0 or layer == 0 else None)
                sing = (g["status"] == "singular").to_numpy()
                ax.scatter(g["step"][~sing], np.log10(kappa[~sing]), color=color, alpha=alpha, s=12)
                ax.scatter(g["step"][sing], np.log10(kappa[sing]), facecolors="none", edgecolors=color, s=20)
            space = sub["space"].iloc[0] if len(sub) else "full"
            ax.set_title(f"{matrix} ({space})")
            ax.set_xlabel("step")
            ax.set_ylabel("log10 κ")
    axes[0].set_title("test accuracy")
    axes[0].set_xlabel("step")
    axes[0].axhline(0.1, color="gray", lw=0.8, ls=":")
    axes[0].legend(fontsize=8)
    if len(axes) > 1:
        axes[1].legend(fontsize=6, ncol=2)
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2:])
