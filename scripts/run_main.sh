#!/usr/bin/env bash
# The main job, end to end on a fresh Debian machine (4 min 41 s on 2 cores after the build, measured
# 2026-11-27 with `time jacond recipe main --out results/report --work results --threads 2`):
# install, build, then `jacond recipe main` (experiments/recipes/jacond_recipes/main.py):
#   - jacond verify all: every claim of the papers, PASS/FAIL per check (N/A where no case met a
#     premise; HOLDS / DOES NOT HOLD for a paper's conclusion measured, never a failure);
#   - the reports of the claims (prop1, prop2, moments, lemma1, depth) with their figures;
#   - a small alpha x beta sweep of the `ours` init (dense, exact);
#   - a skipless ViT trained on Fashion-MNIST (Debian's dataset-fashion-mnist) with the `ours` init
#     and SOAP, its conditioning tracked, then jacond audit of its checkpoints (with data, data-free);
# and one page linking everything: results/report/README.md (printed at the end).
# Data land in results/ (results/verify, sweep, train-skipless-ours-soap, audit, audit-data-free:
# what the notebooks in notebooks/ read by default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/experiments/jacond recipe main --out results/report --work results --threads 2
