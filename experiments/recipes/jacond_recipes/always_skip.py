"""always-skip: "Always Skip Attention" (Ji et al., ICCV 2025) on Fashion-MNIST: Props. 4.1/4.2, the
skip ablation with output-embedding kappa over training, and Token Graying's epsilon ablation."""

import json
import os
import shutil

import numpy as np
import pandas as pd

from jacond_plots import always_skip as plots

from .common import Report, RecipeError, signed, span

NAME = "always-skip"
SUMMARY = ("the cubic law and the skip's regularisation (Props. 4.1, 4.2), the SAB/FFN skip ablation with kappa of "
           "the sub-block outputs over training, Token Graying (SVD, DCT) across epsilon")

# (label, --skip) in the paper's order (its Table: full, w/o FFN skip, w/o SAB skip; we add neither).
SKIPS = [("full", "full"), ("w/o FFN skip", "no-ffn-skip"), ("w/o SAB skip", "no-sab-skip"), ("no skips", "none")]
INITS = ["timm", "ours"]
OPTIMIZERS = ["adamw", "soap"]
EPS = [0.9, 0.7, 0.6, 0.5]  # the paper's ablation (ε = 1 is the identity: the baseline run)
GRAYINGS = ["svd", "dct"]
# The ε ablation grays the full-skip `timm` ViT trained with SOAP (the grid's best-trained setting);
# ε = 1 is that run of the skip grid, at each of its SEEDS (the ungrayed baseline's spread).
EPS_BASE = ("full", "timm", "soap")
EPS_FLAGS = ["--skip", "full", "--init", "timm", "--optimizer", "soap"]
# Seeds (initialisation and data order; these runs do not augment) of every run: the skip modes in every
# (init, optimizer), the ConvMixer control and the grayed runs. The claims are differences of a few points,
# read against the spread between seeds, and every verdict pairs runs by seed. With five seeds "the same
# sign in every seed" is a sign test at p = 1/32 (1/16 two-sided); --quick runs the first three. Seed 0's
# runs are the grid's, plotted for κ; the other seeds' live under skip/seed-S/, convmixer/seed-S/ and
# eps/seed-S/. The ε ablation's ungrayed baseline is EPS_BASE at these seeds (the same runs, not run twice).
# The κ_in claim needs patches that span the token space: at d = 64 the 4 × 4 patches (16 columns) reach
# 16 of the 64 token dimensions and the position embedding sets σ_min(X_in). The same ε ablation at
# d = SPAN_DIM = 1·SPAN_PATCH² (Fashion-MNIST has one channel), where the patch embedding W_E is square
# (as at the paper's ViT-B/16: 3·16² = 768 = d), with its own ungrayed runs (graying "none", ε 1) under
# eps-span/. The width changes with it: the two ablations differ in more than the patches' span.
SPAN_PATCH = 4
SPAN_DIM = SPAN_PATCH ** 2
SEEDS = (0, 1, 2, 3, 4)
QUICK_SEEDS = SEEDS[:3]
PAPER_BEST_EPS = (0.7, 0.6)  # where the paper reports Token Graying's gain (81.0 → 81.4 %)
# The token matrices whose κ is tracked (analysis/report/block_report.cpp: embedding_reports).
TRACKED = "X_in,SA_out,SAB_out,FFN_out,FFN_block_out"

FULL = ["--dim", 64, "--depth", 4, "--heads", 2, "--patch", 4, "--batch", 128, "--steps", 1000, "--warmup-steps", 100,
        "--eval-every", 100, "--track-every", 100, "--checkpoint-every", 1000, "--print-every", 100, "--probe-size", 4]
QUICK = ["--dim", 16, "--depth", 2, "--heads", 2, "--patch", 7, "--batch", 32, "--steps", 12, "--warmup-steps", 3,
         "--data-limit", 640, "--test-limit", 200, "--eval-every", 6, "--track-every", 6, "--checkpoint-every", 12,
         "--print-every", 6, "--probe-size", 2]


# "Always Skip Attention" Table (ViT-Tiny, CIFAR-10) and ε ablation (ViT-B, ImageNet, SVD-TG).
PAPER_SKIP = {"full": 92.0, "w/o FFN skip": 90.0, "w/o SAB skip": 70.0}
PAPER_EPS = {1.0: (81.0, 6.72, 6.74), 0.9: (81.2, 6.64, 6.66), 0.7: (81.4, 6.15, 6.17), 0.6: (81.4, 5.73, 5.71),
             0.5: (81.0, 5.29, 5.25)}
MUCH_MORE = 2.0  # points: the smallest gap between the two ablations read as "much more" (the paper's is 20)
BENCH = ["--dim", 64, "--depth", 4, "--heads", 2, "--patch", 4, "--batch", 128, "--steps", 10, "--warmup", 2]
BENCH_QUICK = ["--dim", 16, "--depth", 1, "--heads", 2, "--patch", 7, "--batch", 8, "--steps", 1, "--warmup", 1]


def grid(r):
    """The runs, as (kind, key, directory, arguments); --quick keeps one (init, optimizer) slice, one of the
    paper's best ε, and QUICK_SEEDS (the pairing by seed is what the verdicts read)."""
    inits, optimizers = ([EPS_BASE[1]], [EPS_BASE[2]]) if r.quick else (INITS, OPTIMIZERS)
    eps_values = PAPER_BEST_EPS[-1:] if r.quick else EPS
    sizes = QUICK if r.quick else FULL
    runs = []
    for seed in seeds(r):
        for optimizer in optimizers:
            for init in inits:
                for _, skip in SKIPS:
                    runs.append(("skip", (skip, init, optimizer, seed), seeded_work(r, "skip", seed, f"{skip}-{init}-{optimizer}"),
                                 ["--skip", skip, "--init", init, "--optimizer", optimizer, *seed_flag(seed)]))
    for seed in seeds(r):  # the CNN control: the same tokens (patch 4 → 7 × 7) mixed by convolutions
        for optimizer in optimizers:
            for skip in ("full", "none"):
                runs.append(("convmixer", (skip, "ConvMixer", optimizer, seed),
                             seeded_work(r, "convmixer", seed, f"{skip}-{optimizer}"),
                             ["--arch", "convmixer", "--skip", skip, "--kernel", 5, "--optimizer", optimizer,
                              *seed_flag(seed)]))
    for seed in seeds(r):
        for graying in GRAYINGS:
            for eps in eps_values:
                runs.append(("eps", (graying, eps, seed), seeded_work(r, "eps", seed, f"{graying}-{eps:g}"),
                             [*EPS_FLAGS, "--token-graying", graying, "--tg-eps", eps, *seed_flag(seed)]))
    for seed in seeds(r):
        for graying, eps in [("none", 1.0)] + [(g, e) for g in GRAYINGS for e in eps_values]:
            grayed = ["--token-graying", graying, "--tg-eps", eps] if graying != "none" else []
            runs.append(("eps-span", (graying, eps, seed), seeded_work(r, "eps-span", seed, f"{graying}-{eps:g}"),
                         [*EPS_FLAGS, *grayed, *seed_flag(seed)]))
    span_sizes = with_values(sizes, {"--dim": SPAN_DIM, "--patch": SPAN_PATCH})
    control_sizes = without(sizes, "--heads")  # a ConvMixer has no heads (train refuses the flag)
    size_flags = {"eps-span": span_sizes, "convmixer": control_sizes}
    return [(kind, key, directory, ["train", *args, *size_flags.get(kind, sizes), "--threads",
                                    r.threads, "--track-matrices", "all" if kind == "convmixer" else TRACKED,
                                    "--out", directory])
            for kind, key, directory, args in runs]


def with_values(flags, values):
    """`flags` (a flat [--flag, value, ...] list) with the values of the flags in `values` replaced."""
    return [values.get(flags[i - 1], item) if i % 2 else item for i, item in enumerate(flags)]


def without(flags, flag):
    """`flags` (a flat [--flag, value, ...] list) without `flag` and its value."""
    i = flags.index(flag)
    return flags[:i] + flags[i + 2:]


def seeds(r):
    return QUICK_SEEDS if r.quick else SEEDS


def seeded_work(r, kind, seed, name):
    """Seed 0's run directory is kind/name (the grid's, plotted for κ); the other seeds' kind/seed-S/name."""
    return r.work(kind, name) if seed == 0 else r.work(kind, f"seed-{seed}", name)


def seed_flag(seed):
    return ["--seed", seed] if seed else []


def train_all(r, runs):
    for _, _, directory, _ in runs:
        if os.path.isdir(directory) and not r.reuse:  # train refuses a directory with checkpoints
            shutil.rmtree(directory)
    r.run_many([argv for _, _, _, argv in runs])




def propositions(r, report):
    """Props. 4.1 and 4.2 by `jacond verify` (synthetic inputs of prescribed κ(X)); returns the fits."""
    data41, data42 = r.work("prop41"), r.work("prop42")
    draws = ["--seeds", 20] if r.quick else []
    r.run("verify", "prop41", *draws, "--threads", r.threads, "--out", data41)
    r.run("verify", "prop42", *draws, "--threads", r.threads, "--out", data42)
    figures = r.plot(data41)
    fits = r.read_csv(f"{data41}/prop41_fits.csv")
    tail = fits[fits["min_kappa_x"] == fits["min_kappa_x"].max()]
    slopes = tail.pivot(index="init", columns="output", values="slope")
    report.section("Prop. 4.1: self-attention cubes κ(X), the FFN scales it")
    report.text("""
**The claim** (§4, Prop. 4.1). For linear attention X W_Q W_Kᵀ Xᵀ X W_V the output's condition number
grows like κ(X)³ (κ(out) ≤ C·κ(X)³), for the FFN like κ(X). `jacond verify prop41` builds token
matrices X with prescribed singular values (κ(X) from 1 to 1024, several n, d and seeds), pushes
them through each init's weights, and fits ln κ(out) against ln κ(X).""")
    report.table(r.checks_table(r.verify_json(data41)))
    for png in figures:
        r.add_figure(report, png, "kappa of attention and FFN outputs against kappa(X), log-log, fitted slopes",
                     caption="κ of each output against κ(X), per init, with the fitted slopes over κ(X) ≥ 32 "
                             "(data: `jacond verify prop41`)")
    report.text(f"Slopes of ln κ(out) against ln κ(X) over κ(X) ≥ {tail['min_kappa_x'].max():g}, per init:")
    report.table(slopes.reset_index(), floatfmt="{:.2f}")
    report.text("\n".join(f"- {n}" for n in r.notes(r.verify_json(data41))))
    report.section("Prop. 4.2: the skip regularises the attention output")
    report.text("""
**The claim** (§4, Prop. 4.2). κ(XM + X) ≪ κ(XM) for the attention output XM: adding the input back
makes the output far better conditioned than without it; the paper states only this "≪". The bound
κ(XM + X) ≤ κ(X)·κ(I + M) (the output about as well conditioned as the input where I + M is) is jacond's
own addition. `jacond verify prop42` measures both for the same inputs and weights, checks that bound
(labelled (4.2) below) and when it implies "≪".""")
    verify42 = r.verify_json(data42)
    report.table(r.checks_table(verify42))
    report.text("\n".join(f"- {n}" for n in r.notes(verify42)))
    gains = skip_gains(r.read_csv(f"{data41}/prop41.csv"))
    report.text("""
Per init, over the same draws (prop41.csv: `verify prop42` draws the same inputs and weights), the
median gain κ(XM)/κ(XM + X) and what decides it, with M = W_Q W_Kᵀ Xᵀ X W_V. Since
XM + X = X(I + M), the skip helps as far as I + M is better conditioned than M (per draw, the log
gain follows ln κ(M)/κ(I + M)). With ‖M‖ ≲ 1 (`timm`) I + M is near I. With ‖M‖ in the hundreds
or thousands (`ours`, `mimetic`) the identity is a relative perturbation of size 1/‖M‖; Weyl's
inequality lets each singular value move by at most 1, and M is not symmetric positive
semidefinite, so nothing makes I + M lift M's small singular values (σ_min(M) below) to 1, and here
it does not: κ(I + M) stays of the order of κ(M), and XM + X about as ill-conditioned as XM:""")
    report.table(gains, floatfmt="{:.3g}")
    return slopes, gains


def skip_gains(draws):
    """Prop. 4.2 per init from prop41.csv's rows: the median over draws of κ(XM)/κ(XM + X) for linear
    and softmax attention, the share of draws where it is ≥ 10, and the medians of ‖M‖, κ(M), κ(I + M)."""
    keys = ["init", "n", "d", "seed", "kappa_target", "output"]
    attention = draws[draws["output"].isin(["linear_attention", "softmax_attention"])]
    without = attention[attention["skip"] == "without"].set_index(keys)["kappa_out"]
    with_skip = attention[attention["skip"] == "with"].set_index(keys)["kappa_out"]
    if not len(with_skip):
        raise RecipeError("prop41.csv: no rows with the skip (skip = with): written by an older jacond?")
    gain = (without / with_skip).rename("gain").reset_index()
    per_init = gain.pivot_table(index="init", columns="output", values="gain", aggfunc="median")
    tenfold = gain.groupby(["init", "output"])["gain"].apply(lambda g: 100 * (g >= 10).mean()).unstack()
    linear = draws[(draws["output"] == "linear_attention") & (draws["skip"] == "without")]
    linear = linear.assign(sigma_min_m=linear["norm_m"] / linear["kappa_m"],
                           i_plus_m_over_m=linear["kappa_i_plus_m"] / linear["kappa_m"]).groupby("init")
    def median(column):
        return linear[column].median().reindex(per_init.index).to_numpy()
    return pd.DataFrame({
        "init": per_init.index,
        "median κ(XM)/κ(XM + X), linear": per_init["linear_attention"].to_numpy(),
        "draws ≥ 10×, linear (%)": tenfold["linear_attention"].reindex(per_init.index).to_numpy(),
        "median κ(SA)/κ(X + SA), softmax": per_init["softmax_attention"].to_numpy(),
        "draws ≥ 10×, softmax (%)": tenfold["softmax_attention"].reindex(per_init.index).to_numpy(),
        "median ‖M‖": median("norm_m"),
        "median σ_min(M)": median("sigma_min_m"),
        "median κ(M)": median("kappa_m"),
        "median κ(I + M)": median("kappa_i_plus_m"),
        "median κ(I + M)/κ(M)": median("i_plus_m_over_m")})


def skip_section(r, report, runs):
    label = dict((flag, name) for name, flag in SKIPS)
    skip_runs, skip_seeds = split_seeds(runs, "skip")
    controls, control_seeds = split_seeds(runs, "convmixer")
    accuracies = pd.DataFrame([{"skip": label[key[0]], "init": key[1], "optimizer": key[2], "seed": key[3],
                                "accuracy": plots.final_accuracy(directory)}
                               for kind, key, directory, _ in runs if kind == "skip"])
    command = r.recipe_command()
    figures = plots.skip_ablation(skip_runs, r.work(), command=f"$ {command}", controls=controls,
                                  seeds={**skip_seeds, **control_seeds})
    kappa_rows = []
    for kind, key, directory, _ in runs:
        if kind != "skip":
            continue
        skip, init, optimizer, seed = key
        k = plots.sub_block_kappa(directory)
        kappa_rows.append({"skip": label[skip], "init": init, "optimizer": optimizer, "seed": seed,
                           "ln κ SAB out, init": k["sab"].iloc[0], "ln κ SAB out, end": k["sab"].iloc[-1],
                           "ln κ SAB out, max": k["sab"].max(),
                           "SAB out singular, init (%)": 100 * k["sab_singular"].iloc[0],
                           "SAB out singular, end (%)": 100 * k["sab_singular"].iloc[-1],
                           "ln κ FFN out, init": k["ffn"].iloc[0], "ln κ FFN out, end": k["ffn"].iloc[-1],
                           "FFN out singular, end (%)": 100 * k["ffn_singular"].iloc[-1]})
    acc = accuracy_table(accuracies)
    gaps = ablation_gaps(accuracies)
    kappas = pd.DataFrame(kappa_rows)

    report.section("The skip ablation: which residual matters")
    report.text("""
**The claim** (§5, skip ablation; ViT-Tiny on CIFAR-10). Removing the FFN block's skip costs about
2 points (92 → 90 %), removing the self-attention block's skip about 22 (→ 70 %), and then κ of the
SAB outputs climbs from about e³ to e⁶ while training diverges after 30 epochs. Here: the same ablation
(plus both skips removed) on Fashion-MNIST, each run a 4-block ViT (d = 64, 2 heads, patch 4) for
1000 steps of batch 128, with AdamW and SOAP and the `timm` and `ours` inits. κ is that of the n × d
token matrix each sub-block passes on (X + SA(LN₁X) with the SAB skip, SA(LN₁X) without; likewise
for the FFN), tracked every 100 steps on 4 test images; ln κ is the median over images and layers.""")
    report.text(f"Final test accuracy (%), the mean over seeds {', '.join(map(str, seeds(r)))} with their range "
                "(seed = initialisation and data order):")
    report.table(acc, floatfmt="{:.1f}")
    report.text("What removing each skip costs, paired by seed (points against the full model of the same seed), and "
                "the claim's gap: the SAB skip's cost less the FFN skip's, i.e. acc(w/o FFN skip) − acc(w/o SAB skip), "
                f"per seed. \"Much more\" needs a mean gap of at least {MUCH_MORE:g} points (the paper's is 20) and a "
                "positive gap, and a loss without the SAB skip, in every seed; where the seeds disagree on the "
                "gap's sign the setting is undecided:")
    report.table(gaps)
    captions = {"skip_ablation_accuracy": ("final test accuracy per skip mode",
                                           "Final test accuracy per skip mode, per (init, optimizer) and for the "
                                           f"ConvMixer control: the mean over {len(seeds(r))} seeds, each seed a small "
                                           "dot, its range a bar"),
                "skip_ablation_kappa": ("ln kappa of the SAB and FFN block outputs over training",
                                        "Median ln κ of the SAB outputs (top) and FFN block outputs (bottom) over "
                                        f"training, one line per skip mode: the lower median over {len(seeds(r))} seeds "
                                        "of each run's median, each seed a thin line; hollow: more than half the seeds' "
                                        "medians are singular")}
    for png in figures:
        alt, caption = captions[os.path.splitext(os.path.basename(png))[0]]
        r.add_figure(report, png, alt, caption=caption)
    report.text("ln κ of the token matrices the sub-blocks pass on, at initialisation, at the end, and the SAB's "
                "maximum over training: per run the lower median over the (probe, layer) reports of that step, then "
                "the lower median over the seeds run, as the figure above draws it. A report "
                "whose σ_min is under the fp64 noise floor is singular (a rank collapse: κ = ∞ in fp64, only κ ≥ κ_lo "
                "is known) and enters a run's median as ∞, and a run whose median is ∞ enters the median over seeds "
                "as ∞: \"singular\" in an ln κ column means more than half of the seeds' runs have more than half "
                "their reports singular (at exactly half, the finite half's largest is shown). The % columns give "
                "the share of singular reports at the end, the mean over seeds:")
    shown = kappa_over_seeds(kappas).drop(columns=["SAB out singular, init (%)"])
    report.table(with_singular_cells(shown, [c for c in shown.columns if c.startswith("ln κ")]), floatfmt="{:.2f}")
    without = kappas[kappas["skip"].isin(["w/o SAB skip", "no skips"])]
    collapse = without.groupby("init")["SAB out singular, end (%)"].mean()
    at_init = without.groupby("init")["SAB out singular, init (%)"].mean()
    with_skip_singular = kappas[kappas["skip"].isin(["full", "w/o FFN skip"])]["SAB out singular, end (%)"].mean()
    report.text("Without the SAB skip, the attention outputs are rank-deficient in fp64 from the start (singular "
                "reports at init: " + ", ".join(f"{v:.0f} % with `{i}`" for i, v in at_init.items()) +
                "), and at the end of training " +
                ", ".join(f"{v:.0f} % of them are still singular with `{i}`" for i, v in collapse.items()) +
                ". That is the paper's e⁶ taken to its end: σ_min is under the fp64 noise floor, so κ is infinite "
                "rather than large. With the SAB skip, "
                f"{with_skip_singular:.0f} % of the X + SA(X) matrices are singular at the end.")
    control = control_table({key: d for kind, key, d, _ in runs if kind == "convmixer"})
    report.text("""
**The ConvMixer control** (the paper: skip removal moves a CNN by less than ±0.2 points). The same
7 × 7 patch tokens (d = 64, 4 blocks, `--arch convmixer --kernel 5`), mixed by a depthwise 5 × 5
convolution (with or without its residual) and a 1 × 1 one, trained the same way; ln κ of the
[49, 64] token matrix after the spatial mixing (as passed on) and after the block, the lower median
over probes and layers (a singular report as ∞), at the end; per (skip, optimizer) the accuracy's mean
over seeds with its range, ln κ the lower median over seeds:""")
    summary = control_summary(control)
    report.table(with_singular_cells(summary, [c for c in summary.columns if c.startswith("ln κ")]), floatfmt="{:.2f}")
    return gaps, kappas, control


def kappa_over_seeds(kappas):
    """One row per (skip, init, optimizer) of the per-run κ rows: the number of seeds, each ln κ column's
    lower median over seeds (+∞ when more than half the seeds' medians are: "singular"), each singular
    share's mean, in the paper's order of the skip modes."""
    table = over_seeds(kappas, ["skip", "init", "optimizer"], sort=False,
                       shares=[c for c in kappas.columns if c.endswith("(%)")])
    order = {name: i for i, (name, _) in enumerate(SKIPS)}
    return table.sort_values(["init", "optimizer", "skip"], key=lambda c: c.map(order) if c.name == "skip" else c,
                             kind="stable").reset_index(drop=True)


def sab_kappa_pairs(kappas):
    """Per (init, optimizer, seed) with both runs: ln κ(SAB out) at the end without the SAB skip less
    with it (w/o SAB skip − full; +∞ when only the run without is singular, −∞ when only the run with
    it is, NaN when both are: no order)."""
    end = kappas.pivot_table(index=["init", "optimizer", "seed"], columns="skip", values="ln κ SAB out, end",
                             aggfunc="first")
    if not {"full", "w/o SAB skip"} <= set(end.columns):
        return pd.Series(dtype=float)
    both = end[["full", "w/o SAB skip"]].dropna()
    return both["w/o SAB skip"] - both["full"]


def split_seeds(runs, kind):
    """`kind`'s runs of the grid as ({key less its seed: seed 0's directory}, {key less its seed: [the
    other seeds' directories]})."""
    first, others = {}, {}
    for run_kind, key, directory, _ in runs:
        if run_kind == kind:
            if key[-1] == 0:
                first[key[:-1]] = directory
            else:
                others.setdefault(key[:-1], []).append(directory)
    return first, others


def accuracy_table(accuracies):
    """`accuracies`: one row per run (skip label, init, optimizer, seed, accuracy). One row per skip mode
    (the paper's order), one column per (init, optimizer): the mean over the seeds run, with their range
    when there are several; and the paper's ViT-Tiny number."""
    def cell(values):
        mean = f"{values.mean():.1f}"
        return mean if len(values) == 1 else f"{mean} ({values.min():.1f}–{values.max():.1f})"
    settings = accuracies.assign(setting=accuracies["init"] + ", " + accuracies["optimizer"])
    table = settings.groupby(["skip", "setting"])["accuracy"].apply(cell).unstack("setting")
    table = table.reindex([name for name, _ in SKIPS if name in table.index])
    table["paper, ViT-Tiny CIFAR-10"] = [PAPER_SKIP.get(name, "—") for name in table.index]
    return table.reset_index()


def ablation_gaps(accuracies):
    """Per (init, optimizer), over the seeds with all three of full, w/o FFN skip and w/o SAB skip: the
    mean change against the full model of the same seed from removing each skip, the claim's gap
    acc(w/o FFN skip) − acc(w/o SAB skip) = (full − w/o SAB) − (full − w/o FFN) per seed and in the mean,
    and gap_verdict's reading."""
    runs = accuracies.pivot_table(index=["init", "optimizer", "seed"], columns="skip", values="accuracy")
    runs = runs.dropna(subset=["full", "w/o FFN skip", "w/o SAB skip"])
    rows = []
    for (init, optimizer), g in runs.groupby(level=["init", "optimizer"]):
        no_ffn, no_sab = g["w/o FFN skip"] - g["full"], g["w/o SAB skip"] - g["full"]
        gap = g["w/o FFN skip"] - g["w/o SAB skip"]
        rows.append({"setting": f"{init}, {optimizer}", "seeds": len(g), "w/o FFN skip − full": signed(no_ffn.mean()),
                     "w/o SAB skip − full": signed(no_sab.mean()), "gap": signed(gap.mean()),
                     "gap per seed": span(gap.tolist()), "reading": gap_verdict(gap.tolist(), no_sab.tolist())})
    return pd.DataFrame(rows)


def gap_verdict(gaps, sab_changes):
    """The claim "removing the SAB skip costs much more than removing the FFN skip", per setting, from
    the per-seed gaps acc(w/o FFN skip) − acc(w/o SAB skip) and the per-seed changes acc(w/o SAB skip) −
    acc(full). First the cost itself: where no seed loses accuracy without the SAB skip there is nothing
    to compare. Then one sign rule for every setting: "much more" where every gap is positive, every seed
    loses without the SAB skip and the mean gap is at least MUCH_MORE points; "more" where every gap is
    positive but not all that holds; "less" where every gap is negative; otherwise undecided (the seeds
    disagree on the sign, or a gap is exactly 0)."""
    mean = sum(gaps) / len(gaps)
    if min(sab_changes) >= 0:
        return "no loss without the SAB skip in any seed"
    if min(gaps) > 0:
        if max(sab_changes) >= 0:
            return "more, but not every seed loses without the SAB skip"
        return "much more" if mean >= MUCH_MORE else f"more, by less than {MUCH_MORE:g} points in the mean"
    if max(gaps) < 0:
        return "less: w/o FFN skip is below w/o SAB skip in every seed"
    return "undecided: the seeds disagree on the sign" + (" (a gap is 0)" if 0 in gaps else "")


def with_singular_cells(df, columns):
    """The table with +∞ in `columns` (a lower median over values more than half of which are +∞: singular
    reports, or runs whose own median is) shown as "singular": ln κ of a rank-deficient matrix has no
    finite value to print."""
    shown = df.copy()
    for column in columns:
        shown[column] = [("singular" if v == float("inf") else f"{v:.2f}") if isinstance(v, float) else v
                         for v in df[column]]
    return shown


def finite_range(values, what):
    """The range of the finite values and how many are singular (∞), e.g. '17.5–21.5, singular in 2
    of 8 runs (more than half their reports)'."""
    finite = values[values < float("inf")]
    singular = len(values) - len(finite)
    if not len(finite):
        return f"singular in all {len(values)} {what} (more than half their reports)"
    low, high = f"{finite.min():.1f}", f"{finite.max():.1f}"
    span = low if low == high else f"{low}–{high}"
    return span + (f", singular in {singular} of {len(values)} {what} (more than half their reports)" if singular else "")


def control_table(controls):
    """One row per ConvMixer run ({(skip, "ConvMixer", optimizer, seed): directory}): its final accuracy
    and ln κ of its token matrices at the end, the lower median over the (probe, layer) reports with a
    singular one at +∞, as every other ln κ of the page (plots.sub_block_kappa)."""
    rows = []
    for (skip, _, optimizer, seed), directory in sorted(controls.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][3])):
        cond = plots.conditioning(directory)
        last = cond[cond["step"] == cond["step"].max()]
        mix = "mix_block_out" if skip == "full" else "mix_out"
        rows.append({"skip": skip, "optimizer": optimizer, "seed": seed, "accuracy (%)": plots.final_accuracy(directory),
                     "ln κ spatial mixing out": run_ln_kappa(last, mix), "ln κ block out": run_ln_kappa(last, "block_out")})
    return pd.DataFrame(rows)


def run_ln_kappa(cond, matrix):
    """ln κ of `matrix` in a run's conditioning rows (plots.conditioning): the lower median over its
    reports, a singular one at +∞ (+∞ when more than half are singular)."""
    return plots.lower_median(cond[cond["matrix"] == matrix]["ln_kappa_or_inf"])



def eps_rows(runs, kind):
    """Per-run rows (graying, eps, seed, accuracy, ln κ_in at init and at the end, ln κ_out at the end) of
    an ε ablation: `kind`'s runs; for "eps" the ungrayed runs (graying "none", ε 1) are the skip grid's
    EPS_BASE runs, "eps-span" has its own. attrs["directory"]: seed 0's ungrayed run."""
    rows, base_directory = [], None
    for run_kind, key, directory, _ in runs:
        grid_base = kind == "eps" and run_kind == "skip" and key[:3] == EPS_BASE
        if run_kind != kind and not grid_base:
            continue
        graying, eps, seed = ("none", 1.0, key[3]) if grid_base else key
        if graying == "none" and seed == 0:
            base_directory = directory
        k = plots.sub_block_kappa(directory)
        rows.append({"graying": graying, "eps": eps, "seed": seed, "accuracy": plots.final_accuracy(directory),
                     "ln_kappa_in_init": k["x_in"].iloc[0], "ln_kappa_in": k["x_in"].iloc[-1],
                     "ln_kappa_out": k["out"].iloc[-1]})
    if base_directory is None:
        raise RecipeError(f"the {kind} ablation has no ungrayed run at seed 0")
    table = pd.DataFrame(rows).sort_values(["graying", "eps", "seed"], ascending=[True, False, True])
    table.attrs["directory"] = base_directory
    return table


def eps_shown(table):
    """eps_summary(table) as the report prints it, with the paper's SVD-TG values beside each ε."""
    summary = eps_summary(table)
    paper = [PAPER_EPS.get(e, ("—",) * 3) if g != "dct" else ("—",) * 3 for g, e in zip(summary["graying"], summary["eps"])]
    shown = summary.rename(columns={"ln_kappa_in_init": "ln κ_in at init", "ln_kappa_in": "ln κ_in",
                                    "ln_kappa_out": "ln κ_out"}).assign(**{
        "paper acc (%)": [p[0] for p in paper], "paper ln κ_in": [p[1] for p in paper],
        "paper ln κ_out": [p[2] for p in paper]})
    return with_singular_cells(shown, ["ln κ_in at init", "ln κ_in", "ln κ_out"])


GAINS_TEXT = ("What graying gains, paired by seed (accuracy of the grayed run less the ungrayed run of the same "
              "seed, in points) at the paper's best ε; \"lifts\" and \"lowers\" need the same sign in every seed. "
              "The seed correlation is that of the grayed and the ungrayed runs' accuracies over seeds: where it is "
              "high a seed's initialisation and data order move both runs alike, and pairing removes that from "
              "the gain:")


def eps_section(r, report, runs):
    table = eps_rows(runs, "eps")
    figures = plots.eps_ablation(table, r.work(), command=f"$ {r.recipe_command()}")
    report.section("Token Graying across ε")
    report.text("""
**The claim** (§5, ε ablation; ViT-B on ImageNet with SVD-TG). Graying the input lowers κ of the
input and output tokens (ln κ_in 6.72 → 5.29 from ε = 1 to 0.5) and lifts accuracy a little, best at
ε = 0.6–0.7 (81.0 → 81.4 %); DCT-TG performs like SVD-TG at a fraction of the cost. Here: the full-skip
`timm` ViT of the skip ablation trained with SOAP, with SVD-TG and DCT-TG at each ε applied to
each image's 49 × 16 matrix of 4 × 4 patches, the "token matrix" the patch embedding multiplies
(models/data/token_graying.h, which also defines DCT-TG's amplification: the paper gives one line),
and the ungrayed run and each grayed run at several seeds, paired by seed. κ_in is the tokens entering the first block, κ_out those leaving the last, on 4 test images
(grayed as in training), at the end of training; "at init" is κ_in before the first step, where runs
of one seed share their patch embedding, so it isolates what the graying does to the tokens. One row
per (graying, ε): the accuracy's mean over the seeds run with their range, ln κ the lower median over
seeds:""")
    report.table(eps_shown(table), floatfmt="{:.2f}")
    report.text(GAINS_TEXT)
    report.table(graying_gains(table))
    for png in figures:
        r.add_figure(report, png, "Token Graying: accuracy and kappa against epsilon",
                     caption="Accuracy, ln κ_in and ln κ_out against ε for SVD-TG and DCT-TG: at each ε the accuracy's mean "
                             "and ln κ's lower median over the seeds run (small dots: each seed where there are "
                             "several); grey band: the ungrayed "
                             "run's seeds (min to max); dashed: the paper's ViT-B values")
    patch_dim, dim = token_dimensions(table.attrs["directory"])
    if patch_dim < dim:
        report.text(f"""
Why κ_in hardly moves here: the first block's tokens are [class token; P·W_E + b] + position
embedding, with P the n × {patch_dim} patch matrix that graying conditions. P·W_E has rank at most
{patch_dim} in a {dim}-dimensional token space; the other {dim - patch_dim} directions come from the
position embedding and the class token (drawn small, N(0, 0.02²) and N(0, 1e-6²)), and they set
σ_min(X_in). Graying P cannot reach them. At the paper's ViT-B/16 the patch matrix has 3·16² = 768
columns, as many as the token dimension, so there it conditions the whole token space: this
setting cannot test the κ_in claim, only the accuracy one. The next section runs the ablation where it can.""")
    return table


def span_section(r, report, runs, eps_table):
    """The ε ablation at d = SPAN_DIM, where the patch embedding is square: κ_in paired by seed, and
    read against `eps_table`, the grid's ε ablation (span_reading)."""
    table = eps_rows(runs, "eps-span")
    patch_dim, dim = token_dimensions(table.attrs["directory"])
    figures = plots.eps_ablation(table, r.work(), command=f"$ {r.recipe_command()}", name="eps_ablation_span",
                                 at_init=True, title=f"Token Graying ε ablation at {arm(table)}", paper=False)
    report.section("Token Graying where the patches span the token space")
    report.text(f"""
The κ_in claim needs a patch matrix P as wide as the tokens. Here the same ε ablation (the full-skip
`timm` ViT with SOAP, the same depth, heads and schedule) at {arm(table)}: P·W_E with a
{patch_dim} × {dim} W_E {"reaches every token dimension, as at the paper's ViT-B/16" if patch_dim >= dim else
"still misses some token dimensions"}, and these runs have their own ungrayed runs (ε 1) at each seed.
The width changes with the patches, so the model is smaller too. Same columns as above:""")
    report.table(eps_shown(table), floatfmt="{:.2f}")
    report.text("What graying does to ln κ_in and to accuracy at every ε, paired by seed (the grayed run less the "
                "ungrayed run of the same seed): the median change over seeds with its range, and in how many seeds "
                "ln κ_in is lower. At init a seed's runs share their patch embedding, so that change is the graying's "
                "alone; after training it is also what training made of it:")
    report.table(kappa_in_changes(table))
    report.text(GAINS_TEXT)
    report.table(graying_gains(table))
    for png in figures:
        r.add_figure(report, png, f"Token Graying at d = {dim}: accuracy and kappa against epsilon",
                     caption=f"As the figure above, at {arm(table)}, with ln κ_in before the first step as a panel "
                             "of its own and without the paper's ViT-B values (ln κ "
                             f"{min(min(v['ln_kappa_in'], v['ln_kappa_out']) for v in plots.PAPER_EPS.values()):.1f}–"
                             f"{max(max(v['ln_kappa_in'], v['ln_kappa_out']) for v in plots.PAPER_EPS.values()):.1f}); "
                             "grey band: the ungrayed runs' seeds (min to max)")
    report.text(span_reading(eps_table, table))
    return table


def eps_summary(table):
    """One row per (graying, ε) of the per-run ε table: the number of seeds, the accuracy's mean with its
    range over seeds (mean_and_range), each ln κ column's lower median over seeds."""
    return over_seeds(table, ["graying", "eps"], sort=False, accuracy="accuracy",
                      ln_columns=["ln_kappa_in_init", "ln_kappa_in", "ln_kappa_out"])


def graying_gains(table):
    """Per graying at each of the paper's best ε (PAPER_BEST_EPS) run: acc(grayed, seed s) − acc(ungrayed,
    seed s) over the seeds with both, its mean, range and reading: "lifts" where every seed gains, "lowers"
    where every seed loses, otherwise within the seeds' noise. "seed correlation" (three seeds or more):
    the correlation over seeds of the grayed and the ungrayed runs' accuracies, what pairing by seed rests
    on (near 0, a seed's ungrayed run says nothing about its grayed one and pairing removes no noise)."""
    ungrayed = table[table["graying"] == "none"].set_index("seed")["accuracy"]
    at_paper = table[(table["graying"] != "none") & table["eps"].isin(PAPER_BEST_EPS)]
    rows = []
    for (graying, eps), g in at_paper.groupby(["graying", "eps"], sort=False):
        grayed = g.set_index("seed")["accuracy"]
        gains = paired_deltas(table, graying, eps, "accuracy")
        if not len(gains):
            continue
        both = pd.concat([grayed, ungrayed], axis=1, join="inner")
        correlation = f"{both.corr().iloc[0, 1]:.2f}" if len(both) >= 3 else "—"
        reading = ("undecided: one seed" if len(gains) < 2 else "lifts in every seed" if gains.min() > 0 else
                   "lowers in every seed" if gains.max() < 0 else "within the seeds' noise (they disagree on the sign"
                   + (", a gain is 0)" if (gains == 0).any() else ")"))
        rows.append({"graying": graying, "eps": eps, "seeds": len(gains), "gain": signed(gains.mean()),
                     "gain per seed": span(gains.tolist()), "seed correlation": correlation, "reading": reading})
    return pd.DataFrame(rows, columns=["graying", "eps", "seeds", "gain", "gain per seed", "seed correlation", "reading"])


def arm(table):
    """An ε ablation named by its token and patch dimensions: "d = 16 with 16-column patches"."""
    patch_dim, dim = token_dimensions(table.attrs["directory"])
    return f"d = {dim} with {patch_dim}-column patches"


def token_dimensions(directory):
    """(C·p², d) of a run: the columns of its patch matrix and of its tokens."""
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        model = json.load(f)["model"]
    return model["in_chans"] * model["patch"] ** 2, model["dim"]


def overhead_section(r, report):
    data = r.work("bench")
    r.run("bench", "train", *(BENCH_QUICK if r.quick else BENCH), "--track-every", 0, "--skip-python",
          "--tg", "svd,dct", "--tg-eps", 0.95, "--threads", r.threads, "--out", data)
    try:
        with open(os.path.join(data, "run.json"), encoding="utf-8") as f:
            meta = json.load(f)
        ratios, per_image = meta["ratios"], meta["token_graying_seconds_per_image"]
    except (OSError, ValueError, KeyError) as e:
        raise RecipeError(f"{data}/run.json: no Token Graying timings ({e})") from None
    rows = [{"graying": m, "step time with / without": ratios[f"{m}_tg_over_none_step"],
             "graying alone / step": ratios[f"{m}_tg_alone_over_step"],
             "per image 1×28×28 (µs)": 1e6 * per_image[m]["1x28x28"],
             "per image 3×224×224 (ms)": 1e3 * per_image[m]["3x224x224"],
             "paper, ViT-B training time": {"svd": "6.3×", "dct": "1.012×"}[m]} for m in GRAYINGS]
    report.section("What Token Graying costs")
    report.text(f"""
`jacond bench train` times the AdamW step of the ablation's ViT (batch 128, {r.threads} thread(s)) with each
graying applied to the batch inside the step, as `jacond train` does (on the host, in fp64), and the
graying alone, per image at this size and at ImageNet's (3 × 224 × 224, where the paper trained):""")
    report.table(pd.DataFrame(rows), floatfmt="{:.3g}")
    return rows


def prop42_verdict(gains):
    """Prop. 4.2's "κ(XM + X) ≪ κ(XM)" per init: holds where the median linear gain is ≥ 10."""
    g = gains.set_index("init")
    linear, softmax = g["median κ(XM)/κ(XM + X), linear"], g["median κ(SA)/κ(X + SA), softmax"]
    holds = [i for i in g.index if linear[i] >= 10]
    fails = [i for i in g.index if linear[i] < 10]
    softmax_gains = [f"{i}'s softmax attention gains {softmax[i]:.3g}× (≥ 10× in {g['draws ≥ 10×, softmax (%)'][i]:.0f} % "
                     "of draws)" for i in fails if softmax[i] >= 10]
    why = ("; not for " + ", ".join(fails) + " in linear attention: with ‖M‖ ≫ 1 (median " +
           ", ".join(f"{g['median ‖M‖'][i]:.3g}" for i in fails) + ") κ(I + M) stays of the order of κ(M) "
           "(median κ(I + M)/κ(M) " + ", ".join(f"{g['median κ(I + M)/κ(M)'][i]:.2g}" for i in fails) + ")" +
           ("; " + "; ".join(softmax_gains) if softmax_gains else "")) if fails else ""
    return {"claim": "Prop. 4.2: the skip regularises the attention output, κ(XM + X) ≪ κ(XM)",
            "here": "median κ(XM)/κ(XM + X), linear / softmax: " +
                    "; ".join(f"{i} {linear[i]:.3g} / {softmax[i]:.3g}" for i in g.index),
            "holds": ("for " + ", ".join(holds) if holds else "for no init") + " (a median gain ≥ 10 in linear attention)" + why}


def ablation_verdict(gaps):
    """The skip ablation's claim from ablation_gaps: each setting's mean changes and per-seed gap, and in
    how many settings removing the SAB skip costs much more (gap_verdict), with the undecided ones named."""
    much = gaps[gaps["reading"] == "much more"]["setting"].tolist()
    undecided = gaps[gaps["reading"].str.startswith("undecided")]["setting"].tolist()
    counts = sorted(set(gaps["seeds"]))
    return {"claim": "removing the SAB skip costs much more accuracy than removing the FFN skip (−22 vs −2 points)",
            "here": "; ".join(f"{g['setting']}: {g['w/o FFN skip − full']} w/o FFN skip, "
                              f"{g['w/o SAB skip − full']} w/o SAB skip (gap per seed {g['gap per seed']})"
                              for _, g in gaps.iterrows())
                    + f" (means over {'/'.join(map(str, counts))} seeds, paired)",
            "holds": f"in {len(much)} of {len(gaps)} settings (a mean gap ≥ {MUCH_MORE:g} points, positive in every seed, "
                     "and a loss without the SAB skip in every seed)"
                     + (": " + ", ".join(much) if much else "")
                     + ("; undecided (seeds disagree): " + ", ".join(undecided) if undecided else "")}


def control_summary(control):
    """control_table's runs, one row per (skip, optimizer): the number of seeds, the accuracy's mean with
    its range over seeds (eps_summary's format), each ln κ column's lower median over seeds."""
    return over_seeds(control, ["optimizer", "skip"], accuracy="accuracy (%)")


def over_seeds(runs, keys, sort=True, accuracy=None, ln_columns=None, shares=()):
    """One row per `keys` of per-run rows (a `seed` column): the number of seeds; the `accuracy` column's
    mean and range as "accuracy (%)" (mean_and_range); each ln κ column's lower median over seeds (+∞
    when more than half the seeds' values are; default: the columns named "ln κ …"); each of `shares`
    as its mean over seeds."""
    ln_columns = ln_columns or [c for c in runs.columns if c.startswith("ln κ")]
    grouped = runs.groupby(keys, sort=sort)
    parts = [grouped["seed"].count().rename("seeds")]
    if accuracy:
        parts.append(grouped[accuracy].agg(mean_and_range).rename("accuracy (%)"))
    parts.append(grouped[ln_columns].agg(plots.lower_median))
    if shares:
        parts.append(grouped[list(shares)].mean())
    return pd.concat(parts, axis=1).reset_index()


def mean_and_range(values):
    """"87.90 (87.20–88.38)": the mean over seeds and their range; one seed: the value."""
    mean = f"{values.mean():.2f}"
    return mean if len(values) == 1 else f"{mean} ({values.min():.2f}–{values.max():.2f})"


def control_verdict(control):
    """The ConvMixer claim from control_table: per optimizer, none − full paired by seed, read by the page's
    sign rule: "yes" when every seed's change is within the paper's ±0.2 points; undecided where the
    seeds disagree on its sign (the change is within their noise); otherwise "within 1 point" or "no",
    as every seed's change allows. Untested without a seed that has both runs."""
    c = control.pivot_table(index=["optimizer", "seed"], columns="skip", values="accuracy (%)").dropna()
    changes = {opt: [round(d, 6) for d in (g["none"] - g["full"])]  # accuracies are counts/total·100: fp noise
               for opt, g in c.groupby(level="optimizer")}
    every = [d for ds in changes.values() for d in ds]
    claim = "a CNN (ConvMixer) is unaffected by removing its skips (< ±0.2 points)"
    if not every:
        return {"claim": claim, "here": "no seed with both runs", "holds": "untested"}
    def reading(ds):
        if all(abs(d) <= 0.2 for d in ds):
            return "yes"
        if min(ds) < 0 < max(ds):
            return "undecided: the seeds disagree on the sign"
        return "within 1 point, the same sign in every seed" if all(abs(d) <= 1 for d in ds) else "no"
    readings = {opt: reading(ds) for opt, ds in changes.items()}
    return {"claim": claim,
            "here": "; ".join(f"{opt}: {signed(sum(ds) / len(ds))} points" + (f" (per seed {span(ds)})" if len(ds) > 1 else "")
                              for opt, ds in changes.items()),
            "holds": next(iter(readings.values())) if len(set(readings.values())) == 1 else
                     "; ".join(f"{opt}: {text}" for opt, text in readings.items())}


def graying_verdict(gains, where=""):
    """Token Graying's accuracy claim from graying_gains (paired by seed at the paper's best ε): "yes"
    where every (graying, ε) lifts accuracy in every seed, "no" where every one lowers it in every seed,
    otherwise in how many it lifts, or within the seeds' noise. (Not the best of the grayed runs against
    the ungrayed mean: the largest of several noisy runs is biased upward.)"""
    claim = f"Token Graying lifts accuracy a little{where} (+0.4 points at ε 0.6–0.7)"
    if not len(gains):
        return {"claim": claim, "here": "no grayed run at ε 0.6–0.7 with an ungrayed run of its seed",
                "holds": "untested"}
    here = ("; ".join(f"{g['graying']}-TG ε {g['eps']:g}: {g['gain']} (per seed {g['gain per seed']})"
                      for _, g in gains.iterrows()) + f" (paired with the ungrayed run of the same seed; "
            f"{'/'.join(map(str, sorted(set(gains['seeds']))))} seeds)")
    if max(gains["seeds"]) < 2:
        return {"claim": claim, "here": here, "holds": "undecided: one seed, no spread to compare with"}
    lifts = gains[gains["reading"] == "lifts in every seed"]
    lowers = gains[gains["reading"] == "lowers in every seed"]
    settings = len(gains)
    def named(rows):
        return ", ".join(f"{g}-TG ε {e:g}" for g, e in zip(rows["graying"], rows["eps"]))
    lowered = f"; {len(lowers)} of {settings} lower it in every seed: {named(lowers)}" if len(lowers) else ""
    if len(lifts) == settings:
        holds = "yes: every graying and ε lifts accuracy in every seed"
    elif len(lowers) == settings:
        holds = "no: every graying and ε lowers accuracy in every seed"
    elif len(lifts):
        holds = f"in {len(lifts)} of {settings} (graying, ε) (a gain in every seed): {named(lifts)}{lowered}"
    else:
        holds = f"within the seeds' noise: no (graying, ε) lifts accuracy in every seed{lowered}"
    return {"claim": claim, "here": here, "holds": holds}


def verdicts(slopes, gains, gaps, kappas, control, eps_table, overhead, span_table):
    """One row per claim of the paper: what it says, what was measured here, and whether it holds."""
    rows = []
    lin, ffn = slopes["linear_attention"], slopes["linear_ffn"]
    rows.append({"claim": "Prop. 4.1: κ(linear attention out) ~ κ(X)³, κ(FFN out) ~ κ(X)",
                 "here": f"slopes {lin.min():.2f}–{lin.max():.2f} and {ffn.min():.2f}–{ffn.max():.2f} over the inits; "
                         f"softmax attention {slopes['softmax_attention'].min():.2f}–{slopes['softmax_attention'].max():.2f}",
                 "holds": "yes for linear attention; softmax attention is not cubic"
                 if slopes["softmax_attention"].max() < 2 else "yes"})
    rows.append(prop42_verdict(gains))
    rows.append(ablation_verdict(gaps))
    k = kappas.set_index(["skip", "init", "optimizer"])
    with_skip = k[k.index.get_level_values("skip").isin(["full", "w/o FFN skip"])]["ln κ SAB out, end"]
    without_runs = k[k.index.get_level_values("skip").isin(["w/o SAB skip", "no skips"])]
    without = without_runs["ln κ SAB out, end"]
    ffn_skip = k[k.index.get_level_values("skip").isin(["full", "w/o SAB skip"])]
    ffn_end = ffn_skip["ln κ FFN out, end"]
    def singular_share(column, runs):  # the share of singular reports behind the medians
        lo, hi = f"{runs[column].min():.0f}", f"{runs[column].max():.0f}"
        return "" if hi == "0" else f"; {lo if lo == hi else lo + '–' + hi} % of the reports singular"
    pairs = sab_kappa_pairs(kappas)
    larger, unordered = int((pairs > 0).sum()), int(pairs.isna().sum())
    pairs = pairs.dropna()
    rows.append({"claim": "without the SAB skip, κ of the SAB outputs reaches ≈ e⁶; with it, ≈ e³",
                 "here": f"ln κ(SAB out) at the end, per run ({len(set(kappas['seed']))} seeds): with the skip "
                         f"{finite_range(with_skip, 'runs')}; "
                         f"without {finite_range(without, 'runs')}"
                         + singular_share("SAB out singular, end (%)", without_runs)
                         + f". FFN block outputs with their skip {finite_range(ffn_end, 'runs')}"
                         + singular_share("FFN out singular, end (%)", ffn_skip)
                         + f". Paired by seed (w/o SAB skip against full, same init, optimizer and seed): larger "
                           f"without the skip in {larger} of {len(pairs)}"
                           + (f" ({unordered} more pairs singular both ways, no order)" if unordered else ""),
                 "holds": kappa_direction(larger, len(pairs), unordered)})
    rows.append(control_verdict(control))
    grayed = eps_table[eps_table["graying"] != "none"]
    rows.append(graying_verdict(graying_gains(eps_table)))
    patch_dim, dim = token_dimensions(eps_table.attrs["directory"])
    why = (f"the patches span {patch_dim} of the {dim} token dimensions here, the rest (position embedding, "
           "class token) sets σ_min" if patch_dim < dim else "")
    for graying in GRAYINGS:
        if (grayed["graying"] == graying).any():
            rows.append(kappa_in_verdict(eps_table, graying, why))
    where = f" at {arm(span_table)}"
    rows.append(graying_verdict(graying_gains(span_table), where))
    for graying in GRAYINGS:
        if (span_table["graying"] == graying).any():
            rows.append(kappa_in_verdict(span_table, graying, "", where))
    o = {row["graying"]: row for row in overhead}
    rows.append({"claim": "SVD-TG costs ≈ 6.3× the training time, DCT-TG +1.2 %",
                 "here": f"step time ×{o['svd']['step time with / without']:.2f} (svd), ×{o['dct']['step time with / without']:.2f} (dct) "
                         f"at 28 × 28; the graying alone {o['svd']['graying alone / step']:.1%} and {o['dct']['graying alone / step']:.1%} "
                         f"of a step; at 3 × 224 × 224 svd costs {o['svd']['per image 3×224×224 (ms)'] / o['dct']['per image 3×224×224 (ms)']:.1f}× dct per image",
                 "holds": "yes" if o["svd"]["step time with / without"] > 3 and o["dct"]["step time with / without"] < 1.05
                 else "not at this size: " + ("both cost little" if max(o[m]["graying alone / step"] for m in o) < 0.05
                                              else "the SVD costs more, not 6×")})
    return pd.DataFrame(rows)


def paired_deltas(table, graying, eps, column):
    """Per seed, `column` (accuracy, ln κ_in at init or at the end) of the (graying, ε) run less that of the
    ungrayed run of the same seed; a seed without both runs, or singular both ways (∞ − ∞), is left out."""
    grayed = table[(table["graying"] == graying) & (table["eps"] == eps)].set_index("seed")[column]
    return (grayed - table[table["graying"] == "none"].set_index("seed")[column]).dropna()


def grayed_settings(table):
    """The (graying, ε) of the table's grayed runs, in the table's order."""
    return list(table[table["graying"] != "none"][["graying", "eps"]].drop_duplicates().itertuples(index=False))


def kappa_in_change(table, graying):
    """(the lowest ε `graying` ran at, its paired_deltas at init, the same at the end of training)."""
    low = table[table["graying"] == graying]["eps"].min()
    return low, paired_deltas(table, graying, low, "ln_kappa_in_init"), paired_deltas(table, graying, low, "ln_kappa_in")


def span_reading(eps_table, span_table):
    """What the two ε ablations say together, from their paired_deltas: each (graying, ε) at the paper's
    best ε whose trained κ_in is lower than the ungrayed run's in every seed (two seeds or more) at the
    span arm, with its accuracy gain there and at the grid's arm; the correlation over every (graying, ε)
    of the mean changes in trained ln κ_in and in accuracy; and what else the two arms differ in."""
    span_gains = graying_gains(span_table).set_index(["graying", "eps"])
    wide_gains = graying_gains(eps_table).set_index(["graying", "eps"])
    def lowered_in_every_seed(table, key):  # trained ln κ_in, against the ungrayed run of each seed
        changes = paired_deltas(table, *key, "ln_kappa_in")
        return len(changes) >= 2 and changes.max() < 0
    def gain(gains, k):
        return f"{gains.loc[k, 'gain']} points (per seed {gains.loc[k, 'gain per seed']})"
    settings = [k for k in span_gains.index if lowered_in_every_seed(span_table, k)]
    lines = []
    for k in settings:
        line = f"{k[0]}-TG ε {k[1]:g}: trained κ_in lower in every seed, accuracy {gain(span_gains, k)}"
        if k in wide_gains.index:
            line += (f"; at {arm(eps_table)} accuracy {gain(wide_gains, k)}, trained κ_in "
                     + ("lower in every seed" if lowered_in_every_seed(eps_table, k) else "not lower in every seed"))
        lines.append(f"- {line}")
    lifts = [k for k in settings if span_gains.loc[k, "reading"] == "lifts in every seed"]
    wide_alone = [k for k in settings if k in wide_gains.index and not lowered_in_every_seed(eps_table, k)
                  and wide_gains.loc[k, "reading"] == "lifts in every seed"]
    if not settings:
        reading = f"At {arm(span_table)} no graying at the paper's best ε lowers trained κ_in in every seed."
    elif lifts:
        reading = f"Where graying lowers trained κ_in in every seed it also lifts accuracy in {len(lifts)} of {len(settings)}."
    else:
        reading = (f"At {arm(span_table)} graying lowers trained κ_in without lifting accuracy in every seed"
                   + (f"; at {arm(eps_table)} " + ", ".join(f"{g}-TG ε {e:g}" for g, e in wide_alone)
                      + f" lift{'s' if len(wide_alone) == 1 else ''} accuracy in every seed with trained κ_in not lower"
                      if wide_alone else "") + ".")
    return "\n\n".join([f"Read with the runs at {arm(eps_table)} above, at the paper's best ε:", *(["\n".join(lines)] if lines else []),
                        reading, dose_response(span_table), arms_differ(eps_table, span_table)])


def dose_response(table):
    """The correlation over every grayed (graying, ε) of the mean paired change in trained ln κ_in and the
    mean paired change in accuracy: whether a lower κ_in goes with a higher accuracy across ε."""
    means = pd.DataFrame([{"kappa": paired_deltas(table, g, e, "ln_kappa_in").mean(),
                           "accuracy": paired_deltas(table, g, e, "accuracy").mean()} for g, e in grayed_settings(table)])
    means = means[np.isfinite(means["kappa"]) & np.isfinite(means["accuracy"])]
    if len(means) < 3:
        return f"Too few (graying, ε) at {arm(table)} to correlate κ_in with accuracy."
    r = means["kappa"].corr(means["accuracy"])
    direction = ("a lower κ_in goes with a lower accuracy" if r > 0.3 else
                 "a lower κ_in goes with a higher accuracy" if r < -0.3 else "no clear direction")
    return (f"Over all {len(means)} (graying, ε) at {arm(table)}, the mean paired changes in trained ln κ_in and in "
            f"accuracy correlate at {r:+.2f} ({direction}).")


def arms_differ(eps_table, span_table):
    """What the two ablations differ in besides the patches' span: read neither as the cause of the other."""
    wide_patch, wide_dim = token_dimensions(eps_table.attrs["directory"])
    span_patch, span_dim = token_dimensions(span_table.attrs["directory"])
    def ungrayed(table):
        return table[table["graying"] == "none"]["accuracy"].mean()
    differ = (f"the width (d = {wide_dim} against {span_dim}, and with it the heads and the MLP; ungrayed "
              f"{ungrayed(eps_table):.1f} % against {ungrayed(span_table):.1f} %)" if wide_dim != span_dim else
              f"the patch size ({wide_patch} against {span_patch} columns)")
    reach = (f" At d = {wide_dim} graying still conditions P·W_E, the {wide_patch} token dimensions the patches "
             "reach, only not σ_min of the whole token matrix." if wide_patch < wide_dim else "")
    return (f"The two ablations differ in {differ} as well as in how much of the token space the patches span, "
            "so together they do not say why graying moves accuracy." + reach)


def kappa_in_changes(table):
    """Per grayed (graying, ε), its paired_deltas of ln κ_in at init and at the end of training (the median
    over seeds with their range, and in how many seeds the change is negative) and of accuracy (the
    mean with its range)."""
    rows = []
    for graying, eps in grayed_settings(table):
        row = {"graying": graying, "eps": eps}
        for column, when in (("ln_kappa_in_init", "at init"), ("ln_kappa_in", "after training")):
            changes = paired_deltas(table, graying, eps, column)
            row[f"Δ ln κ_in {when}"] = (f"{ln_change(changes.median())} ({ln_change_range(changes)})"
                                        if len(changes) else "—")
            row[f"lower {when}"] = f"{int((changes < 0).sum())} of {len(changes)}"
        accuracy = paired_deltas(table, graying, eps, "accuracy")
        row["Δ accuracy (points)"] = f"{signed(accuracy.mean())} ({span(accuracy.tolist())})" if len(accuracy) else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def ln_change(value):
    """A change in ln κ: "-0.40"; ±∞ where one run of the pair is singular and the other is not."""
    return ("+∞, grayed run singular" if value == np.inf else "−∞, ungrayed run singular" if value == -np.inf
            else f"{value:+.2f}")


def ln_change_range(changes):
    """"-0.50 to -0.38": the range of per-seed changes in ln κ (one seed: its change)."""
    return ln_change(changes.min()) if len(changes) == 1 else f"{ln_change(changes.min())} to {ln_change(changes.max())}"


def kappa_in_verdict(table, graying, why, where=""):
    """Token Graying's κ_in claim for one graying, paired by seed at its lowest ε: "yes" where κ_in is
    lower than the ungrayed run's at the end of training in every seed (two seeds or more), "at init only"
    where it is lower at init in every seed but not at the end, otherwise in how many seeds it is lower
    after training, with `why` (the reason it cannot be lowered here, if one is known)."""
    low, at_init, at_end = kappa_in_change(table, graying)
    def median(column, graying_, eps):
        rows = table[(table["graying"] == graying_) & (table["eps"] == eps)]
        return f"{plots.lower_median(rows[column]):.2f}"
    here = (f"median over seeds, ε 1 → {low:g}: at init {median('ln_kappa_in_init', 'none', 1.0)} → "
            f"{median('ln_kappa_in_init', graying, low)}, after training {median('ln_kappa_in', 'none', 1.0)} → "
            f"{median('ln_kappa_in', graying, low)}; paired by seed (a seed's runs share their patch embedding at "
            f"init), the change {ln_change_range(at_init)} at init, {ln_change_range(at_end)} after training "
            f"({len(at_end)} seeds)") if len(at_end) and len(at_init) else "no seed with both runs"
    lower = int((at_end < 0).sum())
    holds = ("untested" if not len(at_end) or not len(at_init) else
             "undecided: one seed" if len(at_end) < 2 else
             "yes: lower after training in every seed" if lower == len(at_end) else
             "at init only (lower in every seed): training undoes it" if at_init.max() < 0 else
             ("no: lower after training in no seed" if lower == 0 else
              f"not in every seed: lower after training in {lower} of {len(at_end)}") + (f"; {why}" if why else ""))
    return {"claim": f"{graying.upper()}-TG lowers ln κ_in{where} (paper, SVD-TG: 6.72 → 5.29 from ε 1 to 0.5)",
            "here": here, "holds": holds}


def kappa_direction(larger, pairs, unordered=0):
    """The κ claim's direction from the paired runs: "yes" when κ(SAB out) is larger without the SAB skip
    in every (init, optimizer, seed) with an order, "no" when in none, otherwise how often. `unordered`:
    the pairs singular both ways (κ = ∞ with and without the skip), which have none."""
    if not pairs:
        return ("undecided: every pair is singular with and without the skip" if unordered else
                "untested: no seed has both runs")
    if larger == pairs:
        return f"direction yes: κ is larger without the skip (or infinite) in all {pairs} pairs"
    return "no: never larger without the skip" if larger == 0 else f"direction in {larger} of {pairs} pairs (not in every one)"


def run(r):
    runs = grid(r)
    train_all(r, runs)
    body = Report("")
    slopes, gains = propositions(r, body)
    gaps, kappas, control = skip_section(r, body, runs)
    eps_table = eps_section(r, body, runs)
    span_table = span_section(r, body, runs, eps_table)
    overhead = overhead_section(r, body)
    n = len(seeds(r))
    body.section(f"What {n} seeds can decide")
    body.text(f"""
Every run is repeated at {n} seeds. A difference smaller than the spread between seeds is not a finding;
with noise symmetric about 0, "the same sign in every seed" over {n} seeds happens by chance with
probability 2^-{n - 1} (either sign), a given sign with 2^-{n}, in one setting. The verdicts read up to
four settings each (sharing their baseline runs), so one of four "in every seed" by chance is far
likelier: about 1 − (1 − 2^-{n})⁴ = {1 - (1 - 2 ** -n) ** 4:.0%} if they were independent.""")

    report = r.start_report("Always Skip Attention: the cubic law, the skip ablation, Token Graying")
    report.text("""
*Always Skip Attention* (Ji et al., ICCV 2025) argues that self-attention, unlike the FFN, needs its
skip connection because it cubes the condition number of its input (Prop. 4.1) while the skip makes
the output far better conditioned, κ(XM + X) ≪ κ(XM) (Prop. 4.2); that removing the attention block's skip
therefore ruins training while removing the FFN's does not; and that "Token Graying", conditioning the
input image, helps a little. This page checks each claim with jacond, on synthetic matrices for the
propositions and on Fashion-MNIST ViTs for the rest.""")
    report.section("Verdict, claim by claim")
    report.table(verdicts(slopes, gains, gaps, kappas, control, eps_table, overhead, span_table))
    report.parts += body.parts[1:]
    r.finish(report)
