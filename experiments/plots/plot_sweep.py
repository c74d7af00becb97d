#!/usr/bin/env python3
"""Heatmaps of log10 kappa(K_sa) and log10 kappa(K_sab) over the alpha x beta grid of a
`jacond sweep` CSV (median over seeds and c). Usage: plot_sweep.py sweep.csv out.png"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def main(csv_path: str, png_path: str) -> None:
    df = pd.read_csv(csv_path)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    for ax, matrix in zip(axes, ["K_sa", "K_sab"]):
        sub = df[df["matrix"] == matrix]
        # Skipless K_sab is singular by construction (LayerNorm nullspace): plot it on the
        # complement of that nullspace when the sweep reports it.
        space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
        sub = sub[sub["space"] == space].copy()
        # singular rows carry kappa = inf; show them at the lower bound kappa_lo, hatched in the title
        sub["log_kappa"] = np.log10(np.where(np.isinf(sub["kappa"]), sub["kappa_lo"], sub["kappa"]))
        grid = sub.groupby(["beta", "alpha"])["log_kappa"].median().unstack("alpha")
        im = ax.imshow(grid.values, origin="lower", aspect="auto", cmap="viridis",
                       extent=[grid.columns.min(), grid.columns.max(), grid.index.min(), grid.index.max()])
        ax.set_xlabel("alpha (Z weight)")
        ax.set_ylabel("beta (identity weight)")
        singular = (sub["status"] == "singular").sum()
        ax.set_title(f"log10 kappa({matrix}) on {space}, ours init" + (f"\n{singular} singular rows at kappa_lo" if singular else ""))
        fig.colorbar(im, ax=ax)
    meta = df.iloc[0]  # knobs shared by every row
    fig.suptitle(f"jacond sweep: n={meta['n']} d={meta['d']} heads={meta['heads']} skip={meta['skip']}")
    fig.savefig(png_path, dpi=110)
    print(f"wrote {png_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_sweep.py sweep.csv out.png")
    main(sys.argv[1], sys.argv[2])
