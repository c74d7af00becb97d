"""`jacond verify prop41 --out DIR` (prop41.csv, prop41_fits.csv): "Always Skip Attention" §4.

Top row, one panel per output: κ(out) against κ(X) on log-log axes, one colour per init, with the
fitted line of each init over κ(X) ≥ 32 (slopes over all κ(X) and over that range in the legend)
and the reference slopes 3 and 1 (dashed and dotted, through the median κ(out) at κ(X) = 1). Bottom row: Prop. 4.2, κ(X + out) against κ(out) for linear and
softmax attention, per init, with the diagonal (the skip changes nothing) and the line 10× below it
("≪"). Paper's tables give natural logs; the axes are log scales labelled with κ itself.

A κ(out) ≥ 1e-4/eps ≈ 4.5e11 is rounding-dominated ("unresolved": verify leaves it out of the slope
fits, experiments/claims/verify_always_skip.cpp's kResolvedKappa) and a singular one (κ = ∞, σ_min at
the noise floor) is known only as κ ≥ κ_lo (prop41.csv's kappa_out_lo): both are drawn hollow, a
singular one at κ_lo; one with no κ_lo to draw is left out. Each panel's title counts them.
"""

import matplotlib.pyplot as plt
import numpy as np

from .common import INIT_COLOURS, caption, read_csv, require_columns, save

COLUMNS = ["init", "kappa_x", "output", "skip", "kappa_out", "bound"]
FIT_COLUMNS = ["init", "output", "slope", "constant"]
RESOLVED_KAPPA = 1e-4 / np.finfo(float).eps  # verify's kResolvedKappa: above it κ(out) is rounding-dominated
OUTPUTS = [("linear_attention", "linear attention  X W_Q W_Kᵀ Xᵀ X W_V", 3),
           ("softmax_attention", "softmax attention  SA(X)", 3),
           ("linear_ffn", "linear FFN  X W_up W_down", 1),
           ("ffn", "FFN  GELU(X W_up) W_down", 1)]


def drawn_out(rows):
    """Per row of prop41.csv: (κ(out) to draw, hollow, left out). κ(out) itself where finite, κ_lo
    (kappa_out_lo, where the table has it) where singular; hollow where unresolved (κ ≥ RESOLVED_KAPPA,
    singular included); left out where there is nothing to draw (singular without a finite κ_lo)."""
    kappa = rows["kappa_out"].to_numpy(dtype=float)
    lo = rows["kappa_out_lo"].to_numpy(dtype=float) if "kappa_out_lo" in rows.columns else np.full(len(rows), np.nan)
    singular = ~np.isfinite(kappa)
    y = np.where(singular, lo, kappa)
    left_out = ~(np.isfinite(y) & (y > 0))
    hollow = ~(kappa < RESOLVED_KAPPA) & ~left_out
    return y, hollow, left_out


def status_note(unresolved, singular, left_out):
    """The title's count of the points not drawn as a κ: "" when there are none."""
    lines = []
    if unresolved:
        lines.append(f"hollow: {unresolved} unresolved (κ ≥ {RESOLVED_KAPPA:.2g})"
                     + (f", {singular} of them singular, at κ_lo" if singular else ""))
    if left_out:
        lines.append(f"{left_out} singular without κ_lo left out")
    return "".join("\n" + line for line in lines)


def growth_panel(ax, df, fits, output, title, power):
    """κ(out) against κ(X) per init; the line is the fit over the asymptotic range (the largest
    min_kappa_x of prop41_fits.csv), the legend gives the slope over all κ(X) and over that range."""
    sub = df[(df["output"] == output) & (df["skip"] == "without")]
    high = fits["min_kappa_x"].max() if "min_kappa_x" in fits.columns else 1
    y, hollow, left_out = drawn_out(sub)
    counts = (int(hollow.sum()), int((hollow & ~np.isfinite(sub["kappa_out"].to_numpy(dtype=float))).sum()),
              int(left_out.sum()))
    sub = sub.assign(drawn=y, hollow=hollow, left_out=left_out)
    for init, g in sub.groupby("init"):
        colour = INIT_COLOURS.get(init, "black")
        finite = g[~g["hollow"] & ~g["left_out"]]  # resolved: what the fits are over
        unresolved = g[g["hollow"]]
        mine = fits[(fits["init"] == init) & (fits["output"] == output)]
        by_range = mine.set_index("min_kappa_x") if "min_kappa_x" in mine.columns else mine.assign(k=1).set_index("k")
        whole = by_range["slope"].get(by_range.index.min(), np.nan)
        tail = by_range["slope"].get(high, np.nan)
        ax.scatter(finite["kappa_x"], finite["kappa_out"], s=8, color=colour, alpha=0.5,
                   label=f"{init}: slope {whole:.2f} (all), {tail:.2f} (κ(X) ≥ {high:g})")
        if len(unresolved):
            ax.scatter(unresolved["kappa_x"], unresolved["drawn"], s=14, facecolors="none", edgecolors=colour,
                       linewidths=0.8)
        if np.isfinite(tail) and len(finite):
            x = np.geomspace(max(high, finite["kappa_x"].min()), finite["kappa_x"].max(), 20)
            ax.plot(x, np.exp(by_range["intercept"].get(high)) * x ** tail, color=colour, lw=1.2)
    x = np.geomspace(max(sub["kappa_x"].min(), 1), sub["kappa_x"].max(), 20)
    y0 = np.nanmedian(sub[np.isclose(sub["kappa_x"], sub["kappa_x"].min())]["kappa_out"].replace(np.inf, np.nan))
    for p, style in ((3, "--"), (1, ":")):
        ax.plot(x, y0 * x ** p, "k" + style, lw=0.8, label=f"slope {p}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("κ(X) (log scale)")
    ax.set_ylabel("κ(out) (log scale)")
    ax.set_title(f"{title}\n(paper: ~κ(X)^{power})" + status_note(*counts), fontsize=8)
    ax.legend(fontsize=6)


def skip_panel(ax, df, output, title):
    without = df[(df["output"] == output) & (df["skip"] == "without")].reset_index(drop=True)
    with_skip = df[(df["output"] == output) & (df["skip"] == "with")].reset_index(drop=True)
    x, x_hollow, x_out = drawn_out(without)
    y, y_hollow, y_out = drawn_out(with_skip)
    left_out, hollow = x_out | y_out, (x_hollow | y_hollow) & ~(x_out | y_out)
    singular = ~np.isfinite(without["kappa_out"].to_numpy(dtype=float)) | \
        ~np.isfinite(with_skip["kappa_out"].to_numpy(dtype=float))
    for init in without["init"].unique():
        mine = (without["init"] == init).to_numpy()
        colour = INIT_COLOURS.get(init, "black")
        filled = mine & ~hollow & ~left_out
        ax.scatter(x[filled], y[filled], s=8, alpha=0.5, color=colour, label=init)
        if (mine & hollow).any():
            ax.scatter(x[mine & hollow], y[mine & hollow], s=14, facecolors="none", edgecolors=colour, linewidths=0.8)
    finite = np.concatenate([x[~left_out], y[~left_out]])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    lim = np.array([finite.min(), finite.max()]) if finite.size else np.array([1, 10])
    ax.plot(lim, lim, "k-", lw=0.8, label="κ(X + out) = κ(out)")
    ax.plot(lim, lim / 10, "k--", lw=0.8, label="10× lower (\"≪\")")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("κ(out), no skip (log scale)")
    ax.set_ylabel("κ(X + out), with skip (log scale)")
    ax.set_title(title + status_note(int(hollow.sum()), int((hollow & singular).sum()), int(left_out.sum())),
                 fontsize=8)
    ax.legend(fontsize=6)


def plot(directory, formats):
    path, fits_path = f"{directory}/prop41.csv", f"{directory}/prop41_fits.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    fits = read_csv(fits_path)
    require_columns(fits, fits_path, FIT_COLUMNS)
    fig, axes = plt.subplots(2, 4, figsize=(17, 8.5))
    for ax, (output, title, power) in zip(axes[0], OUTPUTS):
        growth_panel(ax, df, fits, output, title, power)
    skip_panel(axes[1][0], df, "linear_attention", "Prop. 4.2, linear attention: X(I + M) against XM")
    skip_panel(axes[1][1], df, "softmax_attention", "Prop. 4.2, softmax attention: X + SA(X) against SA(X)")
    for ax in axes[1][2:]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "prop41", formats)
