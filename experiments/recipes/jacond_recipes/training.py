"""training: Fashion-MNIST ViTs with and without skips, AdamW and SOAP, κ tracked over training."""

import os
import shutil

import pandas as pd

from jacond_plots import training as training_plots

NAME = "training"
SUMMARY = ("residual, skipless timm and skipless ours ViTs with AdamW and SOAP on Fashion-MNIST: loss, accuracy, "
           "kappa per layer over training, final accuracies beside the paper's ImageNet table")

# (label, --skip, --init) in the paper's Table 1 order.
MODELS = [("skip", "full", "timm"), ("skipless timm", "none", "timm"), ("skipless ours", "none", "ours")]
OPTIMIZERS = ["adamw", "soap"]
# Table 1 of "Cutting the Skip": ViT-Base, ImageNet-1k, validation accuracy (%).
PAPER = {("skip", "adamw"): 80.3, ("skip", "soap"): 80.1, ("skipless timm", "adamw"): 61.4,
         ("skipless timm", "soap"): 77.0, ("skipless ours", "adamw"): 78.1, ("skipless ours", "soap"): 80.8}

FULL = ["--dim", 64, "--depth", 4, "--heads", 2, "--patch", 4, "--batch", 128, "--steps", 1000, "--warmup-steps", 100,
        "--eval-every", 100, "--track-every", 200, "--checkpoint-every", 500, "--print-every", 100]
QUICK = ["--dim", 16, "--depth", 2, "--heads", 2, "--patch", 7, "--batch", 32, "--steps", 12, "--warmup-steps", 3,
         "--data-limit", 640, "--test-limit", 200, "--eval-every", 6, "--track-every", 6, "--checkpoint-every", 12,
         "--print-every", 6]


def slug(label, optimizer):
    return f"{label.replace(' ', '-')}-{optimizer}"


def ranking(table, column):
    """"skip > skipless ours > skipless timm" by `column`, per optimizer."""
    return {opt: " > ".join(g.sort_values(column, ascending=False)["model"]) for opt, g in table.groupby("optimizer")}


def run(r):
    runs = {}
    for optimizer in OPTIMIZERS:
        for label, skip, init in MODELS:
            directory = r.work(slug(label, optimizer))
            if os.path.isdir(directory) and not r.reuse:  # a fresh run each time: train refuses a directory with checkpoints
                shutil.rmtree(directory)
            r.run("train", "--skip", skip, "--init", init, "--optimizer", optimizer, *(QUICK if r.quick else FULL),
                  "--threads", r.threads, "--track-matrices", "K_sab,K_ffn", "--out", directory)
            runs[f"{label}, {optimizer}"] = directory
    compare = training_plots.compare({k: v for k, v in runs.items()}, r.work(), formats=("png",))

    rows = []
    for optimizer in OPTIMIZERS:
        for label, _, _ in MODELS:
            ev = r.read_csv(os.path.join(r.work(slug(label, optimizer)), "eval.csv"))
            rows.append({"model": label, "optimizer": optimizer, "test accuracy here (%)": 100 * ev["test_acc"].iloc[-1],
                         "best during training (%)": 100 * ev["test_acc"].max(),
                         "paper, ViT-B ImageNet (%)": PAPER[(label, optimizer)]})
    table = pd.DataFrame(rows)
    here, paper = ranking(table, "test accuracy here (%)"), ranking(table, "paper, ViT-B ImageNet (%)")

    report = r.start_report("Training without skips: Fashion-MNIST ViTs, AdamW and SOAP")
    report.text("""
**The claim** (*Cutting the Skip*, §6.1, Table 1, Fig. 1). Removing every skip connection from ViT-Base
cripples AdamW training (61.4 % vs 80.3 % on ImageNet); SOAP recovers much of it (77.0 %); the `ours`
initialisation (W^Q W^Kᵀ diagonally dominant, W^V W^O scaled orthogonal) recovers nearly all of it with
AdamW (78.1 %) and with SOAP beats the residual baseline (80.8 % vs 80.1 %). The explanation offered is
conditioning: the skipless network's Jacobian is ill conditioned at a `timm` init and well conditioned at
`ours`. Here the same six runs at laptop scale: a 4-block ViT (d = 64, 2 heads, patch 4) on Fashion-MNIST
for 1000 steps of batch 128 (about 2 epochs), κ of each block's self-attention and MLP sub-block
Jacobians (K_sab, K_ffn; skipless blocks on the LayerNorm complement) tracked on the first test image.""")
    report.section("Final accuracy, beside the paper's Table 1")
    report.table(table, floatfmt="{:.1f}")
    same = all(here[o] == paper[o] for o in OPTIMIZERS)
    report.text("Ordering per optimizer, here and in the paper:\n\n" + "\n".join(
        f"- {o}: here **{here[o]}**; paper {paper[o]}" + (" (same)" if here[o] == paper[o] else " (different)")
        for o in OPTIMIZERS) + f"\n\nThe paper's ordering {'appears' if same else 'does not fully appear'} here"
        " (a 4-block model on 28×28 images for 2 epochs is far from ViT-B on ImageNet for 300; read the"
        " ordering, not the numbers).")
    report.section("Loss and accuracy")
    for png in compare:
        r.add_figure(report, png, "training loss and test accuracy per optimizer")
    report.section("Conditioning over training, per run")
    report.text("Each panel row: loss, accuracy, then log10 κ as a layer × step heatmap for K_sab and K_ffn "
                "(hatched cells: singular, drawn at κ_lo).")
    for name, directory in runs.items():
        for png in r.plot(directory):
            r.add_figure(report, png, f"{name}: loss, accuracy, kappa per layer over training",
                         name=f"training-{os.path.basename(directory)}.png")
    r.finish(report)
