#!/usr/bin/env bash
# The main job, end to end on a fresh Debian machine: install, build, verify the papers'
# propositions, run a small alpha x beta sweep of the `ours` init, plot it.
# Results land in results/ (verify.json, sweep/sweep.csv, sweep/kappa_vs_alpha_beta.png).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
J=./build/experiments/jacond
mkdir -p results
echo "== jacond verify all"
$J verify all --threads 2 --out results
echo "== jacond block (ours init, skipless) -> results/block"
$J block --init ours --n 32 --d 64 --heads 4 --skip none --out results/block
echo "== jacond sweep (ours init)"
$J sweep --alpha 0:3:0.5 --beta 0:3:0.5 --c 3 --seeds 2 --n 16 --d 32 --heads 2 --out results/sweep
/usr/bin/python3 experiments/plot_sweep.py results/sweep/sweep.csv results/sweep/kappa_vs_alpha_beta.png
echo "== done: results/verify.json, results/block/results.csv, results/sweep/sweep.csv, results/sweep/kappa_vs_alpha_beta.png"
