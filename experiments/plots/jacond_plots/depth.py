"""`jacond verify eq89 --out DIR` (eq89_products.csv, eq89_gradients.csv): Eq. 8 against Eq. 9.

The input-to-output Jacobian of an L-block stack with skips (Eq. 8, ∏(K̂_i + I)(K_i + I), solid)
and without (Eq. 9, ∏ K̂_i K_i, dashed), per init, against depth L:
  1. κ on the complement of the first LayerNorm's structural nullspace (`ln1-complement`; the
     whole-space κ of a skipless product is infinite by construction), log scale; a product that
     is singular even there is drawn at its lower bound κ_lo with a hollow marker (the flat line
     at the top is that bound, σ_max over the noise floor, not a measured κ);
  2. the numerical rank as a fraction of nd (1 = full rank): skipless products lose rank with depth;
  3. κ of ∂F/∂θ^(0), the first block's parameter Jacobian the equations are written for (log).
With eq89_gradients.csv a fourth panel shows ‖∂⟨g, F⟩/∂x_ℓ‖ per layer ℓ for the plain and the
residual stack (log scale).
"""

import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import INIT_COLOURS, caption, read_csv, require_columns, save

COLUMNS = ["init", "equation", "depth", "rows", "rank", "kappa_ln1c", "kappa_ln1c_lo", "kappa_J0"]
STYLE = {"eq8": ("-", "Eq. 8 (skip)"), "eq9": ("--", "Eq. 9 (skipless)")}


def lines(ax, df, y, hollow=None):
    for (init, equation), g in df.groupby(["init", "equation"]):
        g = g.sort_values("depth")
        ls, name = STYLE.get(equation, (":", equation))
        colour = INIT_COLOURS.get(init, "black")
        ax.plot(g["depth"], g[y], ls, color=colour, label=f"{init}, {name}")
        mask = hollow(g) if hollow is not None else np.zeros(len(g), dtype=bool)
        ax.scatter(g["depth"][~mask], g[y][~mask], color=colour, s=14)
        ax.scatter(g["depth"][mask], g[y][mask], facecolors="none", edgecolors=colour, s=22)


def plot(directory, formats):
    path = f"{directory}/eq89_products.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    for column in ("kappa_ln1c", "kappa_ln1c_lo", "kappa_J0"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    df["kappa_drawn"] = np.where(np.isfinite(df["kappa_ln1c"]), df["kappa_ln1c"], df["kappa_ln1c_lo"])
    df["rank_fraction"] = df["rank"] / df["rows"]
    grads_path = f"{directory}/eq89_gradients.csv"
    has_grads = os.path.isfile(grads_path)
    fig, grid = plt.subplots(2, 2, figsize=(13, 9.5))
    axes = grid.flat

    lines(axes[0], df, "kappa_drawn", hollow=lambda g: ~np.isfinite(g["kappa_ln1c"]).to_numpy())
    axes[0].set_yscale("log")
    axes[0].set_ylabel("κ on the LN1 complement (log; hollow: singular, κ ≥ κ_lo)")
    axes[0].set_title("κ of the input-output Jacobian", fontsize=9)
    lines(axes[1], df, "rank_fraction")
    axes[1].set_ylabel("numerical rank / nd")
    axes[1].set_title("numerical rank (σ above the noise floor)", fontsize=9)
    lines(axes[2], df, "kappa_J0")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("κ(∂F/∂θ⁽⁰⁾) (log scale)")
    singular_j0 = df[~np.isfinite(df["kappa_J0"])]["equation"].unique()
    axes[2].set_title("κ of the first block's parameter Jacobian" +
                      (f" ({', '.join(STYLE.get(e, (None, e))[1] for e in singular_j0)}: singular, not drawn)"
                       if len(singular_j0) else ""), fontsize=9)
    for ax in axes[:3]:
        ax.set_xlabel("depth L (blocks)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7, loc="center right")

    if not has_grads:
        axes[3].set_axis_off()
    else:
        grads = read_csv(grads_path)
        require_columns(grads, grads_path, ["init", "stack", "layer", "grad_x_norm"])
        for (init, stack), g in grads.groupby(["init", "stack"]):
            axes[3].plot(g["layer"], g["grad_x_norm"], "-" if stack == "residual" else "--", marker="o", ms=3,
                         color=INIT_COLOURS.get(init, "black"), label=f"{init}, {stack}")
        axes[3].set_yscale("log")
        axes[3].set_xlabel("layer ℓ (0 = input)")
        axes[3].set_ylabel("‖∂⟨g, F⟩/∂x_ℓ‖ (log scale)")
        axes[3].set_title("gradient norm reaching layer ℓ (unit cotangent g)", fontsize=9)
        axes[3].grid(alpha=0.3, which="both")
        axes[3].legend(fontsize=6)
    first = df.iloc[0]
    fig.suptitle(f"Eq. 8 vs Eq. 9: n {first.get('n', '?')}, d {first.get('d', '?')}, heads {first.get('heads', '?')}, "
                 f"hidden {first.get('hidden', '?')}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "depth", formats)
