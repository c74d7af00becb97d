"""`jacond sweep` (sweep.csv + run.json): log10 κ over the α × β grid of the `ours` init.

One panel per matrix (K_sa, K_sab) and per c (rows): the median over seeds of log10 κ. A cell
with a singular seed (κ only bounded below, by κ_lo) is grey and labelled, outside the colour scale
(the panel title counts the singular rows). Skipless K_sab is
singular by construction (LayerNorm's nullspace); when the sweep reports it on the LayerNorm
complement, that is what is drawn. The paper's choices (α = 2, β = 0.6 and α = 1.8, β = 1, both at
c = 3) are marked where the grid covers them.
"""

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, plotted_kappa, read_csv, require_columns, save

COLUMNS = ["alpha", "beta", "c", "seed", "matrix", "space", "status", "kappa", "kappa_lo"]
MATRICES = ["K_sa", "K_sab"]
PAPER_CHOICES = [(2.0, 0.6, 3.0, "α 2, β 0.6"), (1.8, 1.0, 3.0, "α 1.8, β 1")]


def panel(ax, sub, matrix, c):
    space = "ln-complement" if (sub["space"] == "ln-complement").any() else "full"
    sub = sub[sub["space"] == space].assign(log_kappa=lambda d: np.log10(plotted_kappa(d)))
    grid = sub.groupby(["beta", "alpha"])["log_kappa"].median().unstack("alpha").sort_index().sort_index(axis=1)
    singular_cells = (sub.assign(s=sub["status"] == "singular").groupby(["beta", "alpha"])["s"].any()
                      .unstack("alpha").reindex_like(grid).fillna(False).to_numpy(dtype=bool))
    # The colour scale spans the cells with a κ; a cell with a singular seed is grey (above the
    # scale: κ there is only bounded below) and labelled, so one singular corner does not flatten
    # the rest of the map.
    values = grid.to_numpy()
    regular = values[~singular_cells & np.isfinite(values)]
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_over("lightgrey")
    top = regular.max() if regular.size else 1.0
    shown = np.where(singular_cells, top + 1.0, values)  # above vmax: the colormap's "over" grey
    mesh = ax.pcolormesh(grid.columns.to_numpy(), grid.index.to_numpy(), shown, shading="nearest", cmap=cmap,
                         vmin=regular.min() if regular.size else 0.0, vmax=top)
    for (bi, ai) in zip(*np.nonzero(singular_cells)):
        ax.text(grid.columns[ai], grid.index[bi], "sing.", ha="center", va="center", fontsize=6, color="black")
    for a, b, cc, label in PAPER_CHOICES:
        if cc == c and grid.columns.min() <= a <= grid.columns.max() and grid.index.min() <= b <= grid.index.max():
            ax.plot(a, b, marker="*", ms=12, mec="white", mfc="red", ls="none", label=f"paper: {label}")
    singular = int((sub["status"] == "singular").sum())
    where = "" if space == "full" else " on LN⊥"
    ax.set_title(f"κ({matrix}){where}, c = {c:g}" + (f"  ({singular} singular rows at κ_lo)" if singular else ""), fontsize=9)
    ax.set_xlabel("α (weight of the random Z)")
    ax.set_ylabel("β (weight of the identity)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper right")
    return mesh


def plot(directory, formats):
    path = f"{directory}/sweep.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    matrices = [m for m in MATRICES if (df["matrix"] == m).any()]
    cs = sorted(df["c"].unique())
    fig, axes = plt.subplots(len(cs), len(matrices), figsize=(5.6 * len(matrices), 4.2 * len(cs) + 0.6), squeeze=False)
    for i, c in enumerate(cs):
        for j, matrix in enumerate(matrices):
            sub = df[(df["c"] == c) & (df["matrix"] == matrix)]
            mesh = panel(axes[i][j], sub, matrix, c)
            fig.colorbar(mesh, ax=axes[i][j], extend="max", label="log10 κ (median over seeds; grey: singular)")
    first = df.iloc[0]
    fig.suptitle(f"jacond sweep, {first.get('init', 'ours')} init: n {first['n']}, d {first['d']}, heads {first['heads']}, "
                 f"skip {first['skip']}, {df['seed'].nunique()} seeds", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "sweep_kappa", formats)
