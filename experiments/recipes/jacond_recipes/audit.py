"""audit: `jacond audit` over the checkpoints of each training run, data-dependent and data-free
side by side, one page per run."""

import glob
import os
import shutil

import pandas as pd
from jacond_plots.common import log_median

from . import training
from .common import RecipeError, default_work

NAME = "audit"
SUMMARY = "jacond audit over each training run's checkpoints (the training recipe's runs), with data and data-free"

QUICK_RUN = ["--skip", "none", "--init", "ours", "--optimizer", "soap", "--dim", 16, "--depth", 2, "--heads", 2,
             "--patch", 7, "--batch", 32, "--steps", 12, "--warmup-steps", 3, "--data-limit", 640, "--test-limit", 200,
             "--eval-every", 6, "--track-every", 0, "--checkpoint-every", 6, "--checkpoint-init", "--print-every", 6]


FIGURE_CAPTION = ("Each line: the median of log κ over the probes and heads of a layer, drawn as a κ (with an even "
                  "count the geometric mean of the two middle κ), the band their min–max; hollow: singular, at κ_lo")


def training_work(r):
    """The training recipe's work folder, under the same root as this recipe's --work, as the defaults
    are (results/recipes/training beside results/recipes/audit; with --work W, W/../training)."""
    return os.path.join(os.path.dirname(os.path.normpath(r.work_dir)), training.NAME)


def runs_to_audit(r):
    """The training recipe's run directories (quick: one tiny run trained here)."""
    if r.quick:
        directory = r.work("runs", "quick-run")
        if os.path.isdir(directory) and not r.reuse:
            shutil.rmtree(directory)
        r.run("train", *QUICK_RUN, "--threads", r.threads, "--out", directory)
        return [directory]
    runs = training_work(r)
    found = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(glob.escape(runs), "*", "config.json")))
    if not found:
        given = "" if os.path.normpath(runs) == os.path.normpath(default_work(training.NAME)) else f" --work {runs}"
        raise RecipeError(f"no training runs under {runs}: run `jacond recipe training{given}` first "
                          "(this recipe audits its checkpoints)")
    order = [training.slug(label, opt) for opt in training.OPTIMIZERS for label, _, _ in training.MODELS]
    return sorted(found, key=lambda d: order.index(os.path.basename(d)) if os.path.basename(d) in order else len(order))


def median_kappa(at, matrix):
    """Median over layers of log κ(matrix) at one checkpoint, as a κ (log_median: with an even count of
    layers the geometric mean of the two middle κ, as the audit and training figures draw it), on LN⊥
    where reported (a skipless K_sab is singular on the whole space by construction), and how many
    layers were singular there. A singular layer's κ is known only as κ ≥ κ_lo: the median with κ_lo in
    its place is a lower bound, and it is the median itself unless a singular layer decides it (the
    median with ∞ in its place differs), when it shows as "≥ …"."""
    sub = at[at["matrix"] == matrix]
    if (sub["space"] == "ln-complement").any():
        sub = sub[sub["space"] == "ln-complement"]
    singular = sub["status"] == "singular"
    open_rows = int((sub["status"] == "not-converged").sum())  # only κ ≥ κ_lo known: no median to give
    if open_rows:
        return f"? ({open_rows}/{len(sub)} not converged)"
    at_least = log_median(sub["kappa"].where(~singular, sub["kappa_lo"]))
    exact = log_median(sub["kappa"].where(~singular, float("inf"))) == at_least
    return (f"{at_least:.3g}" if exact else f"≥ {at_least:.3g}") + \
        (f" ({int(singular.sum())}/{len(sub)} singular)" if singular.any() else "")


def kappa_cell(row):
    """One report as a table cell that keeps its status (never a bare number for a bound)."""
    if row["status"] == "singular":
        return f"singular (≥ {row['kappa_lo']:.3g})"
    if row["status"] == "not-converged":
        return f"≥ {row['kappa_lo']:.3g}"
    if row["status"] == "bracket":
        return f"[{row['kappa_lo']:.3g}, {row['kappa_hi']:.3g}]"
    return f"{row['kappa']:.3g}"


def kappa_over_steps(audit):
    """Rows (layer, matrix, space, method; and probe when the audit has several), one column per
    checkpoint step: the whole-block reports (not the per-head ones) of the audit."""
    whole = audit[audit["head"].astype(str).isin(["all", "-1"])].copy()
    whole["cell"] = whole.apply(kappa_cell, axis=1)
    keys = (["probe"] if whole["probe"].nunique() > 1 else []) + ["layer", "matrix", "space"]
    if whole.duplicated([*keys, "step"]).any():
        raise RecipeError("audit.csv: two whole-block reports of one (probe, layer, matrix, space, step)")
    table = whole.pivot(index=keys, columns="step", values="cell")
    methods = whole.groupby(keys)["method"].agg(lambda m: ", ".join(sorted(set(m))))
    table = table.rename(columns=lambda c: f"step {c}").join(methods).reset_index()
    return table[[*keys, "method", *[c for c in table.columns if str(c).startswith("step ")]]]


def summary_row(name, audit, weights):
    """One run: its first and last checkpoint, side by side as `first → last`."""
    steps = sorted(audit["step"].unique())
    whole = audit[audit["head"].astype(str).isin(["all", "-1"])]
    at = [whole[whole["step"] == s] for s in (steps[0], steps[-1])]
    vo = [weights[(weights["step"] == s) & (weights["matrix"] == "W_VO")]["kappa"].max() for s in (steps[0], steps[-1])]
    return {"run": name, "steps": f"{steps[0]} → {steps[-1]}",
            "K_sa: median κ over layers (of log κ)": " → ".join(median_kappa(a, "K_sa") for a in at),
            "K_sab: median κ over layers (of log κ)": " → ".join(median_kappa(a, "K_sab") for a in at),
            "largest κ(W^V W^O) over layers": f"{vo[0]:.3g} → {vo[1]:.3g}"}


def run(r):
    pages, summary = [], []
    run_dirs = runs_to_audit(r)
    commands = []
    for run_dir in run_dirs:
        name = os.path.basename(run_dir)
        commands += [["audit", run_dir, "--matrices", "K_sa,K_sab,softmax", "--threads", r.threads,
                      "--out", r.work(name, "with-data")],
                     ["audit", run_dir, "--data-free", "--threads", r.threads, "--out", r.work(name, "data-free")]]
    trained = list(r.commands)  # --quick: the run trained here, listed on its page (a copy: run_many extends r.commands)
    r.run_many(commands)  # --jobs audits at a time
    for i, run_dir in enumerate(run_dirs):
        # Each page lists the commands behind it: its run's two audits (run_many listed all of them at once).
        r.commands = (trained if i == 0 else []) + [r.command_text(c) for c in commands if c[1] == run_dir]
        name = os.path.basename(run_dir)
        data, free = r.work(name, "with-data"), r.work(name, "data-free")
        figures = r.plot(data) + r.plot(free)
        audit = r.read_csv(f"{data}/audit.csv")
        weights = r.read_csv(f"{free}/audit.csv")
        page = r.start_report(f"Audit of `{name}`: conditioning at each checkpoint")
        page.text(f"""
The checkpoints of the training run `{name}` (steps {', '.join(str(s) for s in sorted(audit['step'].unique()))}),
audited two ways. **With data**: κ of each block's bare attention Jacobian K_sa, attention sub-block K_sab
(on the LayerNorm complement for skipless blocks) and softmax at the first Fashion-MNIST test image, the
probe training tracked. **Data-free**: from the weights alone, κ(W^V W^O), per head κ(W^V_h W^O_h) and
κ(W^Q_h W^K_hᵀ) on their rank-d_h range, and every weight matrix's σ_max and κ.""")
        page.section("Side by side")
        for png in figures:
            kind = "data" if png.startswith(data) else "free"
            r.add_figure(page, png, f"{name}: audit {kind}", name=f"{name}-{kind}.png", caption=FIGURE_CAPTION)
        page.section("κ per layer from the initialisation to the end, with data")
        page.text("Each cell is the checkpoint's κ with its status: a number where exact or certified, "
                  "`singular (≥ κ_lo)` where σ_min is under the fp64 noise floor, `≥ κ_lo` where the solver did not "
                  "converge, `[κ_lo, κ_hi]` for a bracket.")
        page.table(kappa_over_steps(audit))
        vo = weights[(weights["matrix"] == "W_VO")].pivot_table(index="layer", columns="step", values="kappa")
        page.section("κ(W^V W^O) per layer over the checkpoints (data-free)")
        page.table(vo.reset_index().rename(columns=lambda c: f"step {c}" if c != "layer" else c))
        path = os.path.join(r.out_dir, f"{name}.md")
        pages.append((name, r.finish(page, path)))
        summary.append(summary_row(name, audit, weights))
    index = r.start_report("Audits of the training runs")
    index.text("One page per run of the training recipe ([../training](../training/README.md)): `jacond audit` "
               "over its checkpoints, with data and data-free.\n\n" +
               "\n".join(f"- [{name}]({os.path.basename(path)})" for name, path in pages))
    index.section("Every run at its first and last audited checkpoint")
    index.text("With data: the median over layers of log κ(K_sa) and log κ(K_sab), shown as a κ (with an even number "
               "of layers the geometric mean of the two middle κ, as the figures draw their lines; on LN⊥ for skipless "
               "blocks; a singular layer enters the median with its lower bound κ_lo, and a median it decides shows as "
               "≥ κ). Data-free: the largest κ(W^V W^O) over layers (`ours` "
               "initialises it orthogonal, κ = 1).")
    index.table(pd.DataFrame(summary))
    r.finish(index)  # its Reproduce section: the command; each page lists the commands it ran
