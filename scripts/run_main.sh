#!/usr/bin/env bash
# The main job, end to end on a fresh Debian machine: install, build, verify the papers'
# propositions, run a small alpha x beta sweep of the `ours` init, train a skipless ViT with the
# `ours` init and SOAP on Fashion-MNIST while tracking its conditioning, audit its checkpoints,
# and plot. Results land in results/ (about 25 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
J=./build/experiments/jacond
mkdir -p results
echo "== jacond verify all"
$J verify all --threads 2 --out results
echo "== jacond block (ours init, skipless) -> results/block"
$J block --init ours --n 32 --d 64 --heads 4 --skip none --method auto --out results/block
echo "== jacond sweep (ours init)"
$J sweep --alpha 0:3:0.5 --beta 0:3:0.5 --c 3 --seeds 2 --n 16 --d 32 --heads 2 --out results/sweep
$J plot results/sweep --format png   # results/sweep/figures/sweep_kappa.png
echo "== jacond train (skipless, ours, SOAP, Fashion-MNIST) -> results/train-skipless-ours-soap"
rm -rf results/train-skipless-ours-soap
$J train --skip none --init ours --optimizer soap --dim 64 --depth 4 --heads 2 --patch 4 --batch 128 \
  --steps 400 --warmup-steps 40 --threads 2 --eval-every 100 --track-every 100 --checkpoint-every 100 \
  --print-every 50 --track-matrices K_sab,K_ffn,softmax --out results/train-skipless-ours-soap
echo "== jacond audit (every checkpoint, and data-free) -> results/audit"
$J audit results/train-skipless-ours-soap --matrices K_sa,K_sab,softmax --threads 2 --out results/audit
$J audit results/train-skipless-ours-soap --data-free --out results/audit-data-free
$J plot results/train-skipless-ours-soap results/audit results/audit-data-free --format png
echo "== done: results/verify.json, results/block/results.csv, results/sweep/, results/train-skipless-ours-soap/"
echo "   (eval.csv, conditioning.csv, figures/training.png, step-*/), results/audit/ (audit.csv, figures/audit.png)"
