"""`jacond verify eq89 --out DIR` (eq89_products.csv, eq89_gradients.csv): Eq. 8 against Eq. 9.

The input-to-output Jacobian of an L-block stack with skips (Eq. 8, ∏(K̂_i + I)(K_i + I), solid)
and without (Eq. 9, ∏ K̂_i K_i, dashed), per init, against depth L:
  1. κ on the complement of the first LayerNorm's structural nullspace (`ln1-complement`; the
     whole-space κ of a skipless product is infinite by construction), log scale; a product that
     is singular even there is drawn at its lower bound κ_lo with a hollow marker (the flat line
     at the top is that bound, σ_max over the noise floor, not a measured κ);
  2. the numerical rank as a fraction of nd (1 = full rank): skipless products lose rank with depth;
  3. κ of ∂F/∂θ^(0), the first block's parameter Jacobian the equations are written for (log); a
     singular one is hollow too, at its κ_lo where the table has a `kappa_J0_lo` column, otherwise
     (eq89_products.csv writes κ = inf and no bound) on a dotted "singular" line above the finite
     values, which is a position, not a value.
Panels 1 and 3 name, in their titles, the (init, equation) pairs that are singular and at which L.
With eq89_gradients.csv a fourth panel shows ‖∂⟨g, F⟩/∂x_ℓ‖ per layer ℓ for the plain and the
residual stack (log scale). One legend for all panels, above them, so that it covers no data
(an in-panel legend hid the mimetic Eq. 8 line at depth 9–12).
"""

import math
import os
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from .common import INIT_COLOURS, caption, read_csv, require_columns, save

COLUMNS = ["init", "equation", "depth", "rows", "rank", "kappa_ln1c", "kappa_ln1c_lo", "kappa_J0"]
STYLE = {"eq8": ("-", "Eq. 8 (skip)"), "eq9": ("--", "Eq. 9 (skipless)")}


def lines(ax, df, y, hollow=None):
    for (init, equation), g in df.groupby(["init", "equation"]):
        g = g.sort_values("depth")
        ls, name = STYLE.get(equation, (":", equation))
        colour = INIT_COLOURS.get(init, "black")
        # Eq. 8 above Eq. 9: a singular Eq. 8 point sits on the skipless ones' singular level,
        # and drawn under them (groupby's order) it was hidden.
        z = 3 if equation == "eq8" else 2
        ax.plot(g["depth"], g[y], ls, color=colour, label=f"{init}, {name}", zorder=z)
        mask = hollow(g) if hollow is not None else np.zeros(len(g), dtype=bool)
        ax.scatter(g["depth"][~mask], g[y][~mask], color=colour, s=14, zorder=z)
        ax.scatter(g["depth"][mask], g[y][mask], facecolors="none", edgecolors=colour, s=22, zorder=z)


def depth_runs(depths):
    """Sorted depths as runs: [1, 2, 3, 5] -> "1–3, 5"."""
    depths = sorted(int(d) for d in depths)
    runs = []
    for d in depths:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def singular_pairs(df, column):
    """The (init, equation, depths) whose `column` is infinite (singular) at some depth, and only
    those: a title that listed every equation with any infinite value named Eq. 8 for all inits
    when only mimetic's deepest products were singular."""
    pairs = []
    for (init, equation), g in df.groupby(["init", "equation"]):
        bad = g.loc[~np.isfinite(g[column].to_numpy(dtype=float)), "depth"]
        if len(bad):
            pairs.append((init, equation, sorted(int(d) for d in bad)))
    return pairs


def singular_note(pairs, where):
    """A title's second part: the singular pairs, each with its depths, and where they are drawn."""
    if not pairs:
        return ""
    # No-break spaces inside each pair: lines break between pairs, never inside "at L 3–12".
    named = "; ".join(f"{init}, {STYLE.get(eq, (None, eq))[1]} at L {depth_runs(depths)}".replace(" ", "\u00a0")
                      for init, eq, depths in pairs)
    return "\n" + textwrap.fill(f"singular (hollow, {where}): {named}", 100)


def j0_drawn(df):
    """κ(∂F/∂θ⁽⁰⁾) to draw, the singular rows' mask, and the level they are drawn at when the table
    gives no bound. A singular row (κ = inf) is drawn at its κ_lo where the table has `kappa_J0_lo`;
    eq89_products.csv has none (and the product's kappa_ln1c_lo bounds another matrix, of another
    width, so it is no bound here), so the row goes on a "singular" level a decade above the panel's
    largest finite κ, between two decades so that no tick labels it as a value (returned; None when a
    κ_lo is drawn or nothing is singular)."""
    kappa = pd.to_numeric(df["kappa_J0"], errors="coerce").to_numpy(dtype=float)
    singular = ~np.isfinite(kappa)
    if not singular.any():
        return kappa, singular, None
    if "kappa_J0_lo" in df.columns:
        lo = pd.to_numeric(df["kappa_J0_lo"], errors="coerce").to_numpy(dtype=float)
        if np.isfinite(lo[singular]).all():
            return np.where(singular, lo, kappa), singular, None
    finite = kappa[~singular & (kappa > 0)]
    level = 10.0 ** (math.ceil(math.log10(finite.max())) + 0.5) if finite.size else 10.0 ** 16.5
    return np.where(singular, level, kappa), singular, level


def legend_handles(inits):
    """The figure's one legend: colour = init, line = equation (stack in panel 4), hollow = singular."""
    handles = [Line2D([], [], color=INIT_COLOURS.get(i, "black"), marker="o", ms=4, label=i) for i in inits]
    handles += [Line2D([], [], color="black", ls="-", label="Eq. 8 (skip) / residual stack"),
                Line2D([], [], color="black", ls="--", label="Eq. 9 (skipless) / plain stack"),
                Line2D([], [], color="black", ls="none", marker="o", mfc="none", ms=5, label="hollow: singular")]
    return handles


def draw(df, grads=None):
    """The figure (no caption) from the products table and, if given, the gradients table."""
    df = df.copy()
    for column in ("kappa_ln1c", "kappa_ln1c_lo", "kappa_J0"):
        df[column] = pd.to_numeric(df[column], errors="coerce")
    df["kappa_drawn"] = np.where(np.isfinite(df["kappa_ln1c"]), df["kappa_ln1c"], df["kappa_ln1c_lo"])
    df["rank_fraction"] = df["rank"] / df["rows"]
    df["kappa_J0_drawn"], j0_singular, j0_level = j0_drawn(df)
    df["kappa_J0_singular"] = j0_singular
    fig, grid = plt.subplots(2, 2, figsize=(13, 9.5))
    axes = grid.flat

    lines(axes[0], df, "kappa_drawn", hollow=lambda g: ~np.isfinite(g["kappa_ln1c"]).to_numpy())
    axes[0].set_yscale("log")
    axes[0].set_ylabel("κ on the LN1 complement (log; hollow: singular, κ ≥ κ_lo)")
    axes[0].set_title("κ of the input-output Jacobian" +
                      singular_note(singular_pairs(df, "kappa_ln1c"), "drawn at κ_lo"), fontsize=9)
    lines(axes[1], df, "rank_fraction")
    axes[1].set_ylabel("numerical rank / nd")
    axes[1].set_title("numerical rank (σ above the noise floor)", fontsize=9)
    lines(axes[2], df, "kappa_J0_drawn", hollow=lambda g: g["kappa_J0_singular"].to_numpy())
    axes[2].set_yscale("log")
    axes[2].set_ylabel("κ(∂F/∂θ⁽⁰⁾) (log scale)")
    if j0_level is not None:
        # No bound in the table: the hollow points sit on a marked line that is a position only.
        axes[2].axhline(j0_level, color="grey", ls=":", lw=1)
        axes[2].set_ylim(top=j0_level * 2.5)  # no decade tick above the line: it is no value
        axes[2].annotate("singular: κ = ∞ (σ_min under the noise floor; the table gives no κ_lo)",
                         (0.01, j0_level), xycoords=("axes fraction", "data"), xytext=(0, -3),
                         textcoords="offset points", va="top", fontsize=7, color="dimgrey")
    where = "drawn at κ_lo" if j0_level is None else "on the dotted line"
    axes[2].set_title("κ of the first block's parameter Jacobian" +
                      singular_note(singular_pairs(df, "kappa_J0"), where), fontsize=9)
    for ax in axes[:3]:
        ax.set_xlabel("depth L (blocks)")
        ax.grid(alpha=0.3, which="both")

    inits = list(df["init"].drop_duplicates())
    if grads is None:
        axes[3].set_axis_off()
    else:
        for (init, stack), g in grads.groupby(["init", "stack"]):
            axes[3].plot(g["layer"], g["grad_x_norm"], "-" if stack == "residual" else "--", marker="o", ms=3,
                         color=INIT_COLOURS.get(init, "black"), label=f"{init}, {stack}")
        axes[3].set_yscale("log")
        axes[3].set_xlabel("layer ℓ (0 = input)")
        axes[3].set_ylabel("‖∂⟨g, F⟩/∂x_ℓ‖ (log scale)")
        axes[3].set_title("gradient norm reaching layer ℓ (unit cotangent g)", fontsize=9)
        axes[3].grid(alpha=0.3, which="both")
        inits += [i for i in grads["init"].drop_duplicates() if i not in inits]
    handles = legend_handles(inits)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=len(handles), fontsize=8,
               frameon=False)
    first = df.iloc[0]
    fig.suptitle(f"Eq. 8 vs Eq. 9: n {first.get('n', '?')}, d {first.get('d', '?')}, heads {first.get('heads', '?')}, "
                 f"hidden {first.get('hidden', '?')}", fontsize=10, y=0.99)
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    return fig


def plot(directory, formats):
    path = f"{directory}/eq89_products.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    grads_path = f"{directory}/eq89_gradients.csv"
    grads = None
    if os.path.isfile(grads_path):
        grads = read_csv(grads_path)
        require_columns(grads, grads_path, ["init", "stack", "layer", "grad_x_norm"])
    fig = draw(df, grads)
    caption(fig, directory)
    return save(fig, directory, "depth", formats)
