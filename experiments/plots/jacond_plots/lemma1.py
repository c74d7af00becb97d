"""`jacond verify lemma1 --out DIR` (lemma1.csv): Lemma 1 of *Cutting the Skip* (App. A.2.2).

The lemma states ‖∂vec A/∂vec X‖₂ = O(α e^{−β}) for W^Q W^Kᵀ = αZ + βI. Three panels against β,
one colour per α, each point the median over seeds (bars: min to max):
  ‖∂A/∂M‖₂   the softmax Jacobian the proof bounds, with the bound 2(n−1)e^{−γ} it establishes
             (dashed, where every seed is diagonally dominant, γ > 0);
  ‖∂A/∂X‖₂   the derivative the lemma states, with α e^{−β} (dotted) for its shape;
  γ / β      the smallest diagonal gap of the logits over β (the proof's idealisation is γ = β).
"""

import matplotlib.pyplot as plt

from .common import caption, read_csv, require_columns, save

COLUMNS = ["alpha", "beta", "seed", "n", "d", "gamma", "norm_dA_dM", "bound_dA_dM", "norm_dA_dX", "alpha_exp_minus_beta"]
ALPHA_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]


def per_beta(rows, column):
    """Median, min and max of `column` over seeds, per β."""
    g = rows.groupby("beta")[column]
    return g.median(), g.min(), g.max()


def draw_spread(ax, rows, column, colour, label):
    mid, lo, hi = per_beta(rows, column)
    ax.errorbar(mid.index, mid, yerr=[mid - lo, hi - mid], fmt="o-", ms=3, lw=1, capsize=2, color=colour, label=label)


def plot(directory, formats):
    path = f"{directory}/lemma1.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    first = df.iloc[0]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for colour, (alpha, rows) in zip(ALPHA_COLOURS, df.groupby("alpha")):
        draw_spread(axes[0], rows, "norm_dA_dM", colour, f"α = {alpha:g}")
        # The proven bound, drawn only where it applies to every seed (γ > 0 in all of them).
        dominant = rows.groupby("beta")["gamma"].min() > 0
        bound = rows.groupby("beta")["bound_dA_dM"].median()[dominant]
        axes[0].plot(bound.index, bound, "--", color=colour, lw=1, label=f"2(n−1)e^(−γ), α = {alpha:g}")
        draw_spread(axes[1], rows, "norm_dA_dX", colour, f"α = {alpha:g}")
        ref = rows.groupby("beta")["alpha_exp_minus_beta"].first()
        axes[1].plot(ref.index, ref, ":", color=colour, lw=1, label=f"α e^(−β), α = {alpha:g}")
        positive = rows[rows["beta"] > 0]
        draw_spread(axes[2], positive.assign(gap_over_beta=positive["gamma"] / positive["beta"]), "gap_over_beta",
                    colour, f"α = {alpha:g}")
    axes[0].set_ylabel("‖∂vec A / ∂vec M‖₂ (softmax Jacobian)")
    axes[1].set_ylabel("‖∂vec A / ∂vec X‖₂ (the lemma's quantity)")
    axes[2].set_ylabel("smallest diagonal gap γ, over β")
    axes[2].axhline(1.0, color="black", lw=0.8, ls=":", label="the proof's γ = β")
    for ax in axes[:2]:
        ax.set_yscale("log")
    for ax in axes:
        ax.set_xlabel("β (W^Q W^Kᵀ = αZ + βI)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    axes[0].set_title("what the proof bounds: decays like e^(−γ)", fontsize=9)
    axes[1].set_title("what the lemma states: O(α e^(−β))?", fontsize=9)
    axes[2].set_title("γ stays below β: the decay is slower", fontsize=9)
    fig.suptitle(f"Lemma 1 (App. A.2.2): n = {int(first['n'])}, d = {int(first['d'])}, one head, LayerNorm'd tokens, "
                 f"logit scale 1/d; median over {df['seed'].nunique()} seeds, bars min to max", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    caption(fig, directory)
    return save(fig, directory, "lemma1", formats)
