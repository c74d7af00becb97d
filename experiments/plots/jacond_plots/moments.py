"""`jacond verify moments --out DIR` (moments.csv): the App. A.2.1 moments, Eqs. 14–20.

Each variance three ways on a log axis: the Monte Carlo estimate (with ±5 standard errors, the
tolerance of the check), the formula derived in experiments/claims/verify_moments.cpp, and the
formula the paper prints (drawn only where it differs: Eqs. 17, 19 and 20). The means agree with
both and are left to the table (moments.csv; the moments recipe prints it).
"""

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, read_csv, require_columns, save

COLUMNS = ["equation", "quantity", "statistic", "measured", "standard_error", "derived", "paper", "paper_formula",
           "derived_formula"]


def pretty(formula):
    """"alpha^2 (d + 2)" -> "α²(d + 2)": the CSV keeps ASCII, the figure reads like the paper."""
    return str(formula).replace("alpha^2 ", "α²").replace("beta^2 ", "β²").replace("alpha", "α").replace("beta", "β")


def plot(directory, formats):
    path = f"{directory}/moments.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    var = df[df["statistic"] == "variance"].reset_index(drop=True)
    x = np.arange(len(var))
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ax.errorbar(x - 0.15, var["measured"], yerr=5 * var["standard_error"], fmt="o", color="black", capsize=3,
                label="Monte Carlo (± 5 SE)")
    ax.scatter(x, var["derived"], marker="s", color="#1b9e77", s=40, zorder=3, label="derived formula")
    differs = ~np.isclose(var["paper"].astype(float), var["derived"].astype(float))
    ax.scatter(x[differs] + 0.15, var["paper"][differs], marker="x", color="#d62728", s=60, zorder=3,
               label="paper's printed formula (where it differs)")
    for xi, (_, row) in zip(x, var.iterrows()):
        ax.annotate(pretty(row["derived_formula"]), (xi, row["derived"]), fontsize=6, xytext=(4, 6), textcoords="offset points")
        if differs[xi]:
            ax.annotate(pretty(row["paper_formula"]), (xi + 0.15, row["paper"]), fontsize=6, color="#d62728", xytext=(4, -10),
                        textcoords="offset points")
    ax.set_xticks(x, [f"{e}\nVar {q}" for e, q in zip(var["equation"], var["quantity"])], fontsize=8)
    ax.set_xlim(-0.6, len(var) - 1 + 1.1)  # room for the last formula
    ax.set_yscale("log")
    ax.set_ylabel("variance (log scale)")
    first = df.iloc[0]
    extra = f"d = {first['d']}, α = {first['alpha']:g}, β = {first['beta']:g}, {first['trials']} trials" if "d" in df.columns else ""
    ax.set_title(f"App. A.2.1 moments of XXᵀ, XZXᵀ and C = αB + βA: {extra}", fontsize=9)
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "moments", formats)
