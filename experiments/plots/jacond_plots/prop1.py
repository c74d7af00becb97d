"""`jacond verify prop1 --out DIR` (prop1_draws.csv, prop1_examples.csv): Proposition 1 and Fig. 5.

Top: the two 10×10 softmax matrices of the paper's Fig. 5, S(αZ + βI) with α = 0.1 at β = 5
(peaked, near the identity) and β = 0 (diffuse, near uniform rows), with their κ. Bottom left: κ
against β at n = 10 — the median and the 5–95 % band over draws, the proposition's upper bound
(1 + ε)/(1 − ε), ε = 2(n − 1)e^{−γ/τ} (median over the draws where ε < 1; it says nothing
elsewhere) and its lower bound 1/(e^{Δ/τ} − 1) where it is > 1 (a panel where a bound has nothing
to draw says so in its title, with no legend entry). Bottom right: κ against n in the diffuse case
(β = 0) with the lower bound and the first-order estimate 2n^{3/2}/α (below). Both κ axes are
logarithmic.

The first-order estimate (a heuristic, not a bound). For small logits, A_ij ≈ (1 + M_ij − m̄_i)/n with
m̄_i the row mean, i.e. A ≈ (11ᵀ + M P)/n with P = I − 11ᵀ/n. For v ⟂ 1, Av ≈ Mv/n, so σ_min(A) ≈
σ_min(M on 1⊥)/n = α σ_min(Z_{n×(n−1)})/n, and a Gaussian n × (n−1) matrix has σ_min ≈ √n − √(n−1)
≈ 1/(2√n) (Edelman). With σ_max(A) ≈ 1 (A1 = 1): κ(A) ≈ 2n^{3/2}/α — 632 at n = 10, α = 0.1,
beside the paper's 730.1 for one draw. The proposition's lower bound 1/(e^{Δ/τ} − 1) holds but is
two orders of magnitude below.
"""

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, read_csv, require_columns, save

DRAW_COLUMNS = ["experiment", "n", "alpha", "beta", "kappa", "upper_bound", "lower_bound"]
EXAMPLE_COLUMNS = ["example", "beta", "kappa", "row", "col", "value"]
KAPPA_COLOUR, UPPER_COLOUR, LOWER_COLOUR = "#1f77b4", "#d62728", "#2ca02c"


def heatmap(ax, ex, example, fig):
    sub = ex[ex["example"] == example]
    size = int(sub["row"].max()) + 1
    A = np.zeros((size, size))
    A[sub["row"].astype(int), sub["col"].astype(int)] = sub["value"].astype(float)
    image = ax.imshow(A, cmap="magma", vmin=0.0, vmax=A.max())  # own scale: diffuse rows are all near 1/n
    ax.set_title(f"{example}: S(0.1 Z + {sub['beta'].iloc[0]:g} I), κ = {sub['kappa'].iloc[0]:.4g}", fontsize=9)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    fig.colorbar(image, ax=ax, fraction=0.046, label="attention weight A_ij")


def band(ax, sub, x):
    """Median κ and its 5–95 % band over draws, per value of column x, and the median lower bound where it
    is > 1; returns a note for the title when the bound is ≤ 1 everywhere (nothing drawn, so no legend
    entry), else ""."""
    g = sub.groupby(x)["kappa"]
    xs = np.array(sorted(sub[x].unique()), dtype=float)
    ax.fill_between(xs, g.quantile(0.05).to_numpy(), g.quantile(0.95).to_numpy(), color=KAPPA_COLOUR, alpha=0.2,
                    label="κ(A), 5–95 % of draws")
    ax.plot(xs, g.median().to_numpy(), "o-", color=KAPPA_COLOUR, label="κ(A), median")
    lower = sub.groupby(x)["lower_bound"].median()
    lower = lower[lower > 1]  # κ ≥ 1 always: below 1 the bound says nothing
    if lower.empty:
        return "\nlower bound 1/(e^{Δ/τ} − 1) ≤ 1 at every " + ("β" if x == "beta" else x) + ": not drawn"
    # with markers: where the bound is > 1 at one point only (β = 0 at n = 10) a bare dashed line shows nothing
    ax.plot(lower.index.to_numpy(dtype=float), lower.to_numpy(), "D--", ms=3, color=LOWER_COLOUR,
            label="lower bound 1/(e^{Δ/τ} − 1), median, where > 1")
    return ""


def plot(directory, formats):
    draws_path, examples_path = f"{directory}/prop1_draws.csv", f"{directory}/prop1_examples.csv"
    draws, ex = read_csv(draws_path), read_csv(examples_path)
    require_columns(draws, draws_path, DRAW_COLUMNS)
    require_columns(ex, examples_path, EXAMPLE_COLUMNS)
    fig = plt.figure(figsize=(11, 9))
    grid = fig.add_gridspec(2, 2)
    heatmap(fig.add_subplot(grid[0, 0]), ex, "peak", fig)
    heatmap(fig.add_subplot(grid[0, 1]), ex, "diffuse", fig)

    ax = fig.add_subplot(grid[1, 0])
    beta = draws[draws["experiment"] == "beta"]
    note = band(ax, beta, "beta")
    upper = beta[np.isfinite(beta["upper_bound"])].groupby("beta")["upper_bound"].median()
    if upper.empty:
        note += "\nupper bound (1+ε)/(1−ε): ε ≥ 1 at every β, not drawn"
    else:
        ax.plot(upper.index.to_numpy(dtype=float), upper.to_numpy(), "s--", color=UPPER_COLOUR, ms=4,
                label="upper bound (1+ε)/(1−ε), median where ε < 1")
    ax.set_yscale("log")
    ax.set_xlabel("β (weight of the identity in the logits)")
    ax.set_ylabel("κ(A) (log scale)")
    ax.set_title(f"κ against β, n = 10, α = 0.1 ({beta.groupby('beta').size().iloc[0]} draws per β)" + note, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")

    ax = fig.add_subplot(grid[1, 1])
    sizes = draws[draws["experiment"] == "n"]
    note = band(ax, sizes, "n")
    n = np.geomspace(sizes["n"].min(), sizes["n"].max(), 50)
    ax.plot(n, 2 * n ** 1.5 / sizes["alpha"].iloc[0], ":", color="black", label="first-order estimate 2n^{3/2}/α")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (tokens; A is n × n)")
    ax.set_ylabel("κ(A) (log scale)")
    ax.set_title("diffuse case (β = 0): κ against n" + note, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.suptitle("Proposition 1: the softmax of diagonally dominant logits is well conditioned, of diffuse logits is not",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "prop1", formats)
