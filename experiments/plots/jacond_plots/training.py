"""A `jacond train` run directory (eval.csv, conditioning.csv, train_log.jsonl, config.json).

Top row: the training loss per logged step (train_log.jsonl) with the test loss at each
evaluation (eval.csv), and the train / test accuracy. Below, one panel per tracked matrix
(`--track-matrices`): log10 κ as a layer × step heatmap (median over probes; for a matrix reported
per head only, the softmax, over probes and heads, and the panel says so). A skipless sub-block is
singular on the whole space by construction (LayerNorm's nullspace), and so is the softmax (it kills
1); where the run reports them on the complement (`ln-complement`, `ones-complement`), that is what
is drawn. A cell whose κ is only bounded below (singular: drawn at κ_lo) is hatched; not-converged
cells are left blank.
"""

import json
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .common import (PlotError, caption, caption_runs, cell_edges, has_rows, kappa_scale, plotted_kappa, read_csv,
                     require_columns, save)

EVAL_COLUMNS = ["step", "test_loss", "test_acc", "train_loss", "train_acc"]
CONDITIONING_COLUMNS = ["step", "probe", "layer", "matrix", "space", "head", "status", "kappa", "kappa_lo"]
MATRIX_ORDER = ["K_sa", "K_sab", "B_sa", "E_sa", "K_mlp", "K_ffn", "softmax", "J_l", "Jhat_l",
                # token matrices ("Always Skip Attention"): the ViT's, then the ConvMixer control's
                "X_in", "LN1_out", "SA_out", "SAB_out", "LN2_out", "FFN_out", "FFN_block_out",
                "mix_out", "mix_block_out", "block_out"]
WHOLE_MATRIX = ["all", "-1"]  # the head column of a whole-matrix report
SPACE_NAMES = {"full": "", "ln-complement": " on LN⊥", "ones-complement": " on 1⊥"}  # in a panel's title


def run_config(directory):
    """config.json of the run ({} when absent or unreadable)."""
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def run_label(directory):
    """"skip none, init ours, soap" from config.json, else the directory's name."""
    cfg = run_config(directory)
    model = cfg.get("model", {})
    convmixer = cfg.get("arch") == "convmixer"
    parts = ["ConvMixer" if convmixer else None,
             f"skip {model['skip']}" if "skip" in model else None,
             f"init {model.get('init', {}).get('scheme')}" if isinstance(model.get("init"), dict) and not convmixer
             else None,
             cfg.get("optimizer")]
    parts = [p for p in parts if p]
    return ", ".join(parts) if parts else os.path.basename(os.path.normpath(directory))


def read_train_log(directory):
    """train_log.jsonl as a table (step, loss, acc, ...); None when the run has none."""
    path = os.path.join(directory, "train_log.jsonl")
    if not os.path.isfile(path):
        return None
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    raise PlotError(f"{path}: line {number} is not JSON") from None
    return pd.DataFrame(rows) if rows else None


def kappa_rows(cond, matrix):
    """The rows of `matrix` to draw, with the κ to plot (κ_lo for singular) in column `drawn`: its
    whole-matrix reports (head 'all'), or every head's where it is reported per head only (the
    softmax: one report per head, none for the whole); on the complement of a structural nullspace
    where the run reports one (a skipless sub-block on LN⊥, the softmax on 1⊥: on the whole space they
    are singular by construction). Also the space drawn and how many not-converged reports were left
    out (no κ to draw)."""
    sub = cond[cond["matrix"] == matrix]
    whole = sub["head"].astype(str).isin(WHOLE_MATRIX)
    if whole.any():
        sub = sub[whole]
    complement = sub.loc[sub["space"] != "full", "space"]
    space = complement.iloc[0] if len(complement) else "full"
    sub = sub[sub["space"] == space]
    omitted = int((sub["status"] == "not-converged").sum())  # no κ to draw; the title counts them
    sub = sub[sub["status"] != "not-converged"].copy()
    sub["drawn"] = plotted_kappa(sub)
    return sub, space, omitted


def is_per_head(sub):
    """Whether kappa_rows gave per-head reports (the heatmap's cell is then a median over heads too)."""
    return bool(len(sub)) and not sub["head"].astype(str).isin(WHOLE_MATRIX).any()


def layer_step_heatmap(ax, cond, matrix, fig):
    sub, space, omitted = kappa_rows(cond, matrix)
    if sub.empty:
        ax.set_axis_off()
        return
    per_head = is_per_head(sub)
    sub["log_kappa"] = np.log10(sub["drawn"])
    grid = sub.groupby(["layer", "step"])["log_kappa"].median().unstack("step").sort_index()
    singular = (sub.assign(s=sub["status"] == "singular").groupby(["layer", "step"])["s"].any().unstack("step")
                .reindex_like(grid).eq(True).to_numpy())
    steps, layers = grid.columns.to_numpy(), grid.index.to_numpy()
    # Explicit edges ("flat"): with one layer or one step "nearest" shading gives the cells no width.
    x_edges, y_edges = cell_edges(np.arange(len(steps))), cell_edges(layers)
    mesh = ax.pcolormesh(x_edges, y_edges, grid.to_numpy(), shading="flat", cmap="viridis")
    for li, si in zip(*np.nonzero(singular)):
        ax.add_patch(plt.Rectangle((x_edges[si], y_edges[li]), x_edges[si + 1] - x_edges[si],
                                   y_edges[li + 1] - y_edges[li], fill=False, hatch="//", lw=0))
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 8)).round().astype(int))
    ax.set_xticks(ticks, [str(steps[t]) for t in ticks], fontsize=7)
    ax.set_yticks(layers)
    ax.set_xlabel("training step")
    ax.set_ylabel("layer")
    ax.set_title(f"log10 κ({matrix}){SPACE_NAMES.get(space, f' on {space}')}"
                 + (", median over heads" if per_head else "")
                 + ("  (hatched: singular, at κ_lo)" if singular.any() else "")
                 + (f"\n{omitted} not-converged reports left blank" if omitted else ""), fontsize=9)
    fig.colorbar(mesh, ax=ax, label="log10 κ (median over probes" + (" and heads)" if per_head else ")"))


def plot(directory, formats):
    eval_path, cond_path = f"{directory}/eval.csv", f"{directory}/conditioning.csv"
    ev = read_csv(eval_path)
    require_columns(ev, eval_path, EVAL_COLUMNS)
    cond = None  # a run without --track-every has an empty (or header-only) conditioning.csv
    if has_rows(cond_path):
        cond = read_csv(cond_path)
        require_columns(cond, cond_path, CONDITIONING_COLUMNS)
    log = read_train_log(directory)
    tracked = [m for m in MATRIX_ORDER if cond is not None and (cond["matrix"] == m).any()]
    columns = max(2, len(tracked))
    rows = 2 if tracked else 1
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.0 * rows + 0.5), squeeze=False)

    loss, acc = axes[0][0], axes[0][1]
    if log is not None and "loss" in log.columns:
        loss.plot(log["step"], log["loss"], color="#1f77b4", lw=0.8, alpha=0.8, label="train (logged batches)")
    loss.plot(ev["step"], ev["test_loss"], "o-", color="#d62728", label="test")
    kappa_scale(loss, np.concatenate([ev["test_loss"].to_numpy(float)] +
                                     ([log["loss"].to_numpy(float)] if log is not None and "loss" in log.columns else [])),
                "cross-entropy loss")
    loss.set_xlabel("training step")
    loss.set_title("loss", fontsize=9)
    acc.plot(ev["step"], ev["train_acc"], "o-", color="#1f77b4", label="train (at evaluation)")
    acc.plot(ev["step"], ev["test_acc"], "o-", color="#d62728", label="test")
    acc.axhline(0.1, color="grey", ls=":", lw=0.8, label="chance (10 classes)")
    acc.set_ylim(0, 1)
    acc.set_xlabel("training step")
    acc.set_ylabel("accuracy")
    acc.set_title(f"accuracy (final test {ev['test_acc'].iloc[-1]:.3f})", fontsize=9)
    for ax in (loss, acc):
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for ax in axes[0][2:]:
        ax.set_axis_off()
    for j, matrix in enumerate(tracked):
        layer_step_heatmap(axes[1][j], cond, matrix, fig)
    fig.suptitle(f"jacond train: {run_label(directory)}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "training", formats)


def eval_rows(directory):
    """A run's eval.csv, checked."""
    ev = read_csv(f"{directory}/eval.csv")
    require_columns(ev, f"{directory}/eval.csv", EVAL_COLUMNS)
    return ev


def compare(runs, out_dir, name="training_compare", formats=("png",), seeds=None):
    """Several runs in one figure: per optimizer (columns), the training loss (top, log scale) and
    the test accuracy (bottom) of every model, coloured by (skip, init). `runs` maps a label
    ("skipless ours") to its run directory; the optimizer comes from each run's config.json.
    `seeds` may map a label to the directories of the same run at other seeds: its accuracy panel
    then shades the min–max over all of them at each evaluation and its legend gives their mean."""
    seeds = seeds or {}
    by_optimizer = {}
    for label, directory in runs.items():
        by_optimizer.setdefault(run_config(directory).get("optimizer", "?"), []).append((label, directory))
    optimizers = sorted(by_optimizer)
    fig, axes = plt.subplots(2, len(optimizers), figsize=(6.2 * len(optimizers), 8.2), squeeze=False)
    colours = {}
    for j, optimizer in enumerate(optimizers):
        loss, acc = axes[0][j], axes[1][j]
        for label, directory in by_optimizer[optimizer]:
            colour = colours.setdefault(label, f"C{len(colours)}")
            log = read_train_log(directory)
            ev = eval_rows(directory)
            if log is not None and "loss" in log.columns:
                smooth = log["loss"].rolling(max(1, len(log) // 50), min_periods=1).mean()
                loss.plot(log["step"], smooth, color=colour, label=label)
            every_seed = [ev] + [eval_rows(d) for d in seeds.get(label, [])]
            if len(every_seed) > 1:
                by_step = pd.concat(e[["step", "test_acc"]] for e in every_seed).groupby("step")["test_acc"]
                acc.fill_between(by_step.min().index, by_step.min(), by_step.max(), color=colour, alpha=0.18, lw=0)
                finals = [e["test_acc"].iloc[-1] for e in every_seed]
                text = f"{label} (final {ev['test_acc'].iloc[-1]:.3f}; mean of {len(finals)} seeds {np.mean(finals):.3f})"
            else:
                text = f"{label} (final {ev['test_acc'].iloc[-1]:.3f})"
            acc.plot(ev["step"], ev["test_acc"], "o-", color=colour, ms=3, label=text)
        kappa_scale(loss, [v for line in loss.get_lines() for v in line.get_ydata()], "training loss (running mean)")
        loss.set_title(f"{optimizer}: training loss", fontsize=9)
        acc.axhline(0.1, color="grey", ls=":", lw=0.8)
        acc.set_ylim(0, 1)
        acc.set_ylabel("test accuracy")
        acc.set_title(f"{optimizer}: test accuracy" + (" (line: seed 0; band: min–max over the seeds)" if seeds else ""),
                      fontsize=9)
        for ax in (loss, acc):
            ax.set_xlabel("training step")
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption_runs(fig, list(runs.values()) + [d for label in runs for d in seeds.get(label, [])])  # every run drawn
    return save(fig, out_dir, name, formats)
