"""`jacond verify prop2 --out DIR` (prop2.csv): Proposition 2, K_sa = B_sa + E_sa.

The β-sweep rows (bare attention at LN1(X), n = 16, d = 32, one head): `ours` at α = 2, c = 3
across β, beside `mimetic` and `timm` (neither has a β) on the same seeds and tokens.
Left: ‖E_sa‖₂ against σ_min(B_sa); the shaded half-plane ‖E‖ < σ_min(B) is where the
proposition's premise holds and Weyl brackets κ(K) by (σ_max(B) ∓ ‖E‖)/(σ_min(B) ± ‖E‖).
Right: κ(K_sa) against κ(B_sa), filled where the premise holds (with the Weyl bracket as a bar),
hollow where it does not; the diagonal is κ(K) = κ(B). `ours` points are labelled with β.
"""

import matplotlib.pyplot as plt
import numpy as np

from .common import INIT_COLOURS, caption, read_csv, require_columns, save

COLUMNS = ["experiment", "init", "beta", "kappa_K", "kappa_B", "sigma_min_B", "e_norm", "premise", "weyl_lo", "weyl_hi"]


def label_beta(ax, sub, x, y):
    """β beside the first seed's `ours` point at each β."""
    for _, row in sub[sub["init"] == "ours"].drop_duplicates("beta").iterrows():
        ax.annotate(f"β {row['beta']:g}", (row[x], row[y]), fontsize=6, xytext=(3, 3), textcoords="offset points")


def scatter(ax, sub, x, y, with_bracket):
    for init, g in sub.groupby("init"):
        colour = INIT_COLOURS.get(init, "black")
        holds = g["premise"].astype(str).str.lower() == "true"
        ax.scatter(g[x][holds], g[y][holds], color=colour, s=24, zorder=3, label=f"{init}, premise holds")
        ax.scatter(g[x][~holds], g[y][~holds], facecolors="none", edgecolors=colour, s=24, zorder=3,
                   label=f"{init}, premise fails")
        if with_bracket and holds.any():
            h = g[holds]
            ax.vlines(h[x], h["weyl_lo"], h["weyl_hi"], color=colour, lw=2, alpha=0.4)


def plot(directory, formats):
    path = f"{directory}/prop2.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    sub = df[df["experiment"] == "beta-sweep"]
    if sub.empty:
        sub = df
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2))

    scatter(left, sub, "sigma_min_B", "e_norm", False)
    lo = min(sub["sigma_min_B"].min(), sub["e_norm"].min()) / 2
    hi = max(sub["sigma_min_B"].max(), sub["e_norm"].max()) * 2
    line = np.array([lo, hi])
    left.fill_between(line, lo, line, color="#1b9e77", alpha=0.12, label="‖E‖ < σ_min(B): premise holds")
    left.plot(line, line, color="grey", lw=0.8)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_xlabel("σ_min(B_sa) (log scale)")
    left.set_ylabel("‖E_sa‖₂ (log scale)")
    left.set_title("the premise of Proposition 2", fontsize=9)
    label_beta(left, sub, "sigma_min_B", "e_norm")
    left.legend(fontsize=6)

    scatter(right, sub, "kappa_B", "kappa_K", True)
    lo = min(sub["kappa_B"].min(), sub["kappa_K"].min()) / 2
    hi = max(sub["kappa_B"].max(), sub["kappa_K"].max()) * 2
    right.plot([lo, hi], [lo, hi], color="grey", lw=0.8, label="κ(K) = κ(B)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("κ(B_sa) (log scale)")
    right.set_ylabel("κ(K_sa) (log scale)")
    right.set_title("κ(K_sa) against κ(B_sa); bars: Weyl bracket where the premise holds", fontsize=9)
    label_beta(right, sub, "kappa_B", "kappa_K")
    right.legend(fontsize=6)
    for ax in (left, right):
        ax.grid(alpha=0.3, which="both")
    first = sub.iloc[0]
    shape = f"n {first['n']}, d {first['d']}, heads {first['heads']}" if "n" in sub.columns else ""
    fig.suptitle(f"Proposition 2: K_sa = B_sa + E_sa at LN1(X), {shape}, {sub['seed'].nunique()} seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "prop2", formats)
