"""`jacond audit CKPT… --out DIR` (audit.csv): per-layer κ of checkpoints.

One panel per matrix in the audit (data-dependent: K_sa, K_sab, softmax, …; --data-free: the
weight products W^V W^O, W^Q_h W^K_hᵀ and every weight matrix): κ against the checkpoint's
training step, one line per layer (the median of log κ over probes and heads, drawn as a κ: with an
even count the geometric mean of the two middle values, as the training figure's heatmap takes it;
the band their min–max), on a log scale; on the complement of a structural nullspace where the
audit reports one (skipless K_sab on LN⊥, softmax on 1⊥). An audit of a single checkpoint draws κ against the layer instead, and so
does one where checkpoints share a step (standalone .safetensors files all have step -1, two runs
have each a step 0), with one line per checkpoint named in the legend: a median over different
checkpoints is no one checkpoint's κ. Singular rows are drawn at κ_lo with hollow markers (κ ≥ κ_lo
is all that is known); lines whose hollow markers fall on one another (several layers singular at the
same κ_lo: only the last drawn would show) are named beside the first such marker, "layers 1–3
singular". Not-converged rows are left out and counted in the panel's title.
"""

import re

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, kappa_scale, log_median, plotted_kappa, read_csv, require_columns, save

COLUMNS = ["checkpoint", "step", "probe", "layer", "matrix", "space", "head", "status", "kappa", "kappa_lo"]


def matrix_rows(df, matrix):
    """Every report of `matrix`, on the complement of its structural nullspace where one is reported:
    skipless K_sab is singular on the whole space by construction (LayerNorm's, "ln-complement") and
    the softmax Jacobian always is (it kills 1, "ones-complement"); the full space's κ there is the
    fp64 floor, not a property of the weights."""
    sub = df[df["matrix"] == matrix]
    complement = sub["space"] != "full"
    return sub[complement] if complement.any() else sub


def rows_to_draw(df, matrix):
    sub = matrix_rows(df, matrix)
    sub = sub[sub["status"] != "not-converged"].copy()
    sub["drawn"] = plotted_kappa(sub)
    sub["singular"] = sub["status"] == "singular"
    return sub


def left_out(df, matrix):
    """The not-converged reports of `matrix`: no κ to draw, and the lines' medians are over the rest
    (biased low: the rows left out are the ill-conditioned ones), so the panel says how many."""
    return int((matrix_rows(df, matrix)["status"] == "not-converged").sum())


def short_names(checkpoints):
    """{checkpoint: the shortest end of its path (".safetensors" dropped) that no other one ends
    with}: "a" for two/a.safetensors beside two/b.safetensors, "run-a/step-0000000" beside
    run-b/step-0000000."""
    parts = {c: str(c).removesuffix(".safetensors").split("/") for c in checkpoints}
    names = {}
    for c, p in parts.items():
        k = 1
        while k < len(p) and any(q[-k:] == p[-k:] for d, q in parts.items() if d != c):
            k += 1
        names[c] = "/".join(p[-k:])
    return names


def shares_a_step(df):
    """Whether two checkpoints of the audit have the same step: their κ are then drawn apart."""
    return bool((df.groupby("step")["checkpoint"].nunique() > 1).any())


def series(sub, over_steps, by_checkpoint):
    """(label, colour, rows) of each line of a panel: one per layer over the steps, one per
    checkpoint against the layer (by_checkpoint), or a single unlabelled one against the layer."""
    colours = plt.get_cmap("viridis")
    if over_steps:
        layers = max(1, sub["layer"].max() + 1)
        return [(f"layer {layer}", colours(layer / layers), g) for layer, g in sub.groupby("layer")]
    if by_checkpoint:
        checkpoints = list(dict.fromkeys(sub["checkpoint"]))
        names = short_names(checkpoints)
        return [(names[c], f"C{i}", sub[sub["checkpoint"] == c]) for i, c in enumerate(checkpoints)]
    return [(None, "#1f77b4", sub)]


def series_names(labels):
    """"layers 1–3" for the labels layer 1, layer 2, layer 3 (runs of consecutive layers joined, "layers
    0, 2–3"); other labels (checkpoints) listed as they are."""
    numbers = [re.fullmatch(r"layer (\d+)", str(label)) for label in labels]
    if not all(numbers):
        return ", ".join(str(label) for label in labels)
    layers = sorted(int(m.group(1)) for m in numbers)
    runs = []
    for layer in layers:
        if runs and layer == runs[-1][1] + 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return "layers " + ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


ANNOTATION_STEP = 9  # points between successive "… singular" notes of a panel (fontsize 7 plus a gap)
COINCIDENT = 0.05  # hollow markers closer than this in log10 κ (12 %) at one x are drawn on one another


def coincident_singular(hollow):
    """[(labels, x, κ)] of the hollow markers that fall on one another: `hollow` lists (x, κ, label) of
    each line's singular markers; each set of lines is named once, at its first x."""
    groups, named = [], set()
    for xv in sorted({h[0] for h in hollow}):
        at = sorted((k, label) for x_, k, label in hollow if x_ == xv)
        cluster = [at[0]] if at else []
        for k, label in at[1:] + [(np.inf, None)]:
            if label is not None and np.log10(k) - np.log10(cluster[-1][0]) < COINCIDENT:
                cluster.append((k, label))
                continue
            labels = tuple(sorted(set(c[1] for c in cluster)))  # one set, whatever order κ_lo's rounding gave
            if len(labels) > 1 and labels not in named:
                named.add(labels)
                groups.append((labels, xv, cluster[-1][0]))
            cluster = [(k, label)]
    return groups


def panel(ax, sub, matrix, over_steps, omitted=0, by_checkpoint=False):
    x = "step" if over_steps else "layer"
    hollow = []  # (x, κ, label) of every line's singular markers
    for label, colour, g in series(sub, over_steps, by_checkpoint):
        stats = g.groupby(x).agg(median=("drawn", log_median), lo=("drawn", "min"), hi=("drawn", "max"),
                                 singular=("singular", "any"))
        xs = stats.index.to_numpy()
        ax.plot(xs, stats["median"], "-", color=colour, label=label)
        ax.fill_between(xs, stats["lo"], stats["hi"], color=colour, alpha=0.15)
        s = stats["singular"].to_numpy(dtype=bool)
        ax.scatter(xs[~s], stats["median"][~s], color=colour, s=12)
        ax.scatter(xs[s], stats["median"][s], facecolors="none", edgecolors=colour, s=24)
        if label is not None:
            hollow += [(xv, k, label) for xv, k in zip(xs[s], stats["median"][s])]
    left, right = ax.get_xlim()
    for i, (labels, xv, k) in enumerate(coincident_singular(hollow)):
        # below the markers: singular ones sit at κ_lo near the fp64 floor, the top of the axis; each
        # note a line lower than the last, so notes at neighbouring steps do not print over each other;
        # in the right half of the axis the note ends at its marker, so it stays inside the panel
        to_the_left = xv > (left + right) / 2
        ax.annotate(f"{series_names(labels)} singular", (xv, k), xytext=(-5 if to_the_left else 5, -6 - ANNOTATION_STEP * i),
                    textcoords="offset points", fontsize=7, ha="right" if to_the_left else "left", va="top")
    kappa_scale(ax, sub["drawn"])
    ax.set_xlabel("training step of the checkpoint" if over_steps else "layer")
    space = sub["space"].iloc[0]
    ax.set_title(f"κ({matrix})" + ("" if space == "full" else f" on {space}")
                 + (f"\n{omitted} not-converged reports left out" if omitted else ""), fontsize=9)
    ax.grid(alpha=0.3, which="both")


def plot(directory, formats):
    path = f"{directory}/audit.csv"
    df = read_csv(path)
    require_columns(df, path, COLUMNS)
    matrices = [m for m in dict.fromkeys(df["matrix"]) if not rows_to_draw(df, m).empty]
    by_checkpoint = shares_a_step(df)  # never a median over different checkpoints
    over_steps = df["step"].nunique() > 1 and not by_checkpoint
    columns = min(4, len(matrices))
    rows = -(-len(matrices) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.8 * rows + 0.6), squeeze=False)
    for ax, matrix in zip(axes.flat, matrices):
        panel(ax, rows_to_draw(df, matrix), matrix, over_steps, left_out(df, matrix), by_checkpoint)
    for ax in list(axes.flat)[len(matrices):]:
        ax.set_axis_off()
    if over_steps or by_checkpoint:
        axes[0][0].legend(fontsize=6)
    kind = "data-free" if (df["probe"].astype(str) == "none").all() else "on the probe batch"
    parts = [f"jacond audit ({kind}): {df['checkpoint'].nunique()} checkpoint(s)",
             "line: median of log κ over probes and heads (geometric middle)", "band: min–max",
             "hollow: singular, at κ_lo"]
    # One line on a figure of three or more panels; a narrower one's is too narrow for it.
    title = {1: "\n".join(parts), 2: parts[0] + "\n" + "; ".join(parts[1:])}.get(columns, "; ".join(parts))
    fig.suptitle(title, fontsize=10 if columns > 2 else 8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "audit", formats)
