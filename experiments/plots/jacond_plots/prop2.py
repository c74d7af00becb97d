"""`jacond verify prop2 --out DIR` (prop2.csv): Proposition 2, K_sa = B_sa + E_sa.

The β-sweep rows (bare attention at LN1(X), n = 16, d = 32, one head): `ours` at α = 2, c = 3
across β, beside `mimetic` and `timm` (neither has a β) on the same seeds and tokens.
Left: ‖E_sa‖₂ against σ_min(B_sa); the shaded half-plane ‖E‖ < σ_min(B) is where the
proposition's premise holds and Weyl brackets κ(K) by (σ_max(B) ∓ ‖E‖)/(σ_min(B) ± ‖E‖).
Middle: κ(K_sa) against κ(B_sa), filled where the premise holds, hollow where it does not; the
diagonal is κ(K) = κ(B). Right: the Weyl bracket, as an error bar with caps, of each row where the
premise holds, one row per x position beside its κ(B) (grey tick), on a linear axis (on the middle panel's ten decades a bracket of a few per cent was
hidden under its marker), or a note that the premise holds nowhere.
Colour is the init, the marker `ours`'s β (one legend beside the panels: text labels at each β
piled up where the β = 0–1 points overlap).
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .common import INIT_COLOURS, caption, read_csv, require_columns, save

COLUMNS = ["experiment", "init", "beta", "kappa_K", "kappa_B", "sigma_min_B", "e_norm", "premise", "weyl_lo", "weyl_hi"]
NO_BETA = "o"  # mimetic and timm (no β)
BETA_MARKERS = ["s", "^", "v", "D", "P", "X", "<", ">", "p", "h"]
PREMISE_COLOUR = "#1b9e77"


def beta_markers(sub):
    """β -> marker for the rows that have a β (cycling past ten values)."""
    betas = sorted(b for b in sub["beta"].dropna().unique())
    return {b: BETA_MARKERS[i % len(BETA_MARKERS)] for i, b in enumerate(betas)}


def premise_holds(g):
    return g["premise"].astype(str).str.lower() == "true"


def groups(sub, markers=None):
    """(init, β or None, marker, rows) per init and β; `markers` from beta_markers of all the rows
    drawn (a subset's own would give its first β the first marker, not the legend's)."""
    markers = beta_markers(sub) if markers is None else markers
    for (init, beta), g in sub.groupby(["init", "beta"], dropna=False, sort=True):
        has_beta = beta == beta  # NaN for the inits without one
        yield init, (beta if has_beta else None), (markers[beta] if has_beta else NO_BETA), g


def scatter(ax, sub, x, y):
    for init, _, marker, g in groups(sub):
        colour = INIT_COLOURS.get(init, "black")
        holds = premise_holds(g)
        ax.scatter(g[x][holds], g[y][holds], color=colour, marker=marker, s=26, zorder=3)
        ax.scatter(g[x][~holds], g[y][~holds], facecolors="none", edgecolors=colour, marker=marker, s=26, zorder=3)


def weyl_brackets(ax, sub):
    """κ(K) with its Weyl bracket [weyl_lo, weyl_hi] as an error bar with caps, one row per x
    position (the rows' κ(B) agree to a per cent, so on a κ(B) axis the bars sat on one another),
    κ(B) beside it as a grey tick; returns how many rows were drawn (0: the panel says the premise
    holds nowhere)."""
    held = sub[premise_holds(sub)]
    x0, ticks = 0, []
    for init, beta, marker, g in groups(held, beta_markers(sub)):
        colour = INIT_COLOURS.get(init, "black")
        g = g.sort_values("kappa_K")
        x = np.arange(x0, x0 + len(g))
        k = g["kappa_K"].to_numpy(float)
        yerr = np.vstack([k - g["weyl_lo"].to_numpy(float), g["weyl_hi"].to_numpy(float) - k])
        ax.errorbar(x, k, yerr=np.clip(yerr, 0, None), fmt=marker, color=colour, ms=5,
                    elinewidth=1.5, capsize=4, capthick=1.5, zorder=3)
        ax.scatter(x, g["kappa_B"], marker="_", s=80, color="grey", zorder=4)
        name = init if beta is None else f"{init} β {beta:g}"
        ticks += [(xi, f"{name}\nseed {seed}" if "seed" in g.columns else name) for xi, seed in
                  zip(x, g["seed"] if "seed" in g.columns else [None] * len(g))]
        x0 += len(g)
    if held.empty:
        ax.text(0.5, 0.5, "the premise ‖E‖ < σ_min(B) holds for no row:\nno Weyl bracket", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="dimgrey")
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        if len(ticks) <= 16:
            ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=6)
        ax.set_xlim(-0.7, x0 - 0.3)
        ax.set_xlabel("row where the premise holds (by κ(K_sa))")
        ax.set_ylabel("κ(K_sa) with its Weyl bracket")
    return len(held)


def legend_handles(sub):
    handles = [Line2D([], [], ls="none", marker="o", color=INIT_COLOURS.get(i, "black"), label=i)
               for i in sub["init"].drop_duplicates()]
    for init, beta, marker, _ in groups(sub):
        if beta is not None:
            handles.append(Line2D([], [], ls="none", marker=marker, color="dimgrey", label=f"{init}, β {beta:g}"))
    handles += [Line2D([], [], ls="none", marker="o", color="black", label="filled: premise holds"),
                Line2D([], [], ls="none", marker="o", mfc="none", color="black", label="hollow: premise fails"),
                Patch(color=PREMISE_COLOUR, alpha=0.12, label="‖E‖ < σ_min(B)"),
                Line2D([], [], color="grey", lw=0.8, label="diagonal (κ(K) = κ(B))"),
                Line2D([], [], color="black", marker="_", ms=8, lw=1.5, label="Weyl bracket of κ(K_sa)"),
                Line2D([], [], color="grey", ls="none", marker="_", ms=9, label="κ(B_sa) (bracket panel)")]
    return handles


def draw(sub):
    """The figure (no caption) from the rows to draw."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 5.2))

    scatter(left, sub, "sigma_min_B", "e_norm")
    lo = min(sub["sigma_min_B"].min(), sub["e_norm"].min()) / 2
    hi = max(sub["sigma_min_B"].max(), sub["e_norm"].max()) * 2
    line = np.array([lo, hi])
    left.fill_between(line, lo, line, color=PREMISE_COLOUR, alpha=0.12)
    left.plot(line, line, color="grey", lw=0.8)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_xlabel("σ_min(B_sa) (log scale)")
    left.set_ylabel("‖E_sa‖₂ (log scale)")
    left.set_title("the premise of Proposition 2 (shaded: ‖E‖ < σ_min(B))", fontsize=9)

    scatter(middle, sub, "kappa_B", "kappa_K")
    lo = min(sub["kappa_B"].min(), sub["kappa_K"].min()) / 2
    hi = max(sub["kappa_B"].max(), sub["kappa_K"].max()) * 2
    middle.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    middle.set_xscale("log")
    middle.set_yscale("log")
    middle.set_xlabel("κ(B_sa) (log scale)")
    middle.set_ylabel("κ(K_sa) (log scale)")
    middle.set_title("κ(K_sa) against κ(B_sa)", fontsize=9)

    n = weyl_brackets(right, sub)
    right.set_title(f"Weyl bracket of κ(K_sa) where the premise holds ({n} of {len(sub)} rows)" if n else
                    "Weyl bracket of κ(K_sa): premise holds nowhere", fontsize=9)
    for ax in (left, middle, right):
        ax.grid(alpha=0.3, which="both")
    fig.legend(handles=legend_handles(sub), loc="center right", fontsize=7, frameon=False)
    first = sub.iloc[0]
    shape = f"n {first['n']}, d {first['d']}, heads {first['heads']}" if "n" in sub.columns else ""
    seeds = sub["seed"].nunique() if "seed" in sub.columns else "?"
    fig.suptitle(f"Proposition 2: K_sa = B_sa + E_sa at LN1(X), {shape}, {seeds} seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 0.87, 1))
    return fig


def plot(directory, formats):
    path = f"{directory}/prop2.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    sub = df[df["experiment"] == "beta-sweep"]
    if sub.empty:
        sub = df
    fig = draw(sub)
    caption(fig, directory)
    return save(fig, directory, "prop2", formats)
