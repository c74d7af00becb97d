#!/usr/bin/env bash
# CI executes every notebook (issue 12) on small results made here by the jacond under test:
#   run_notebooks.sh JACOND WORK_DIR [PYTHON_PACKAGE_DIR]
# A tiny sweep, a tiny training run with tracking, its audit (data-dependent and data-free); then
# `jupyter nbconvert --execute` of each notebook in notebooks/ with JACOND_* pointing at them. A
# cell that raises fails the test (nbconvert exits nonzero); the executed copies are checked for
# the outputs the notebooks promise (a PNG per figure cell, the sensitivity verdict, the audit's
# agreement with the tracking). PYTHON_PACKAGE_DIR (<build>/python) holds the in-tree Python module
# for python_api.ipynb; without it (a build without pybind11) that notebook is skipped.
set -euo pipefail
JACOND=$1
WORK=$2
PYTHON_PACKAGE_DIR=${3:-}
if [ -n "$PYTHON_PACKAGE_DIR" ]; then export PYTHONPATH="$PYTHON_PACKAGE_DIR${PYTHONPATH:+:$PYTHONPATH}"; fi
SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$JACOND" sweep --alpha 1.5:2.5:0.5 --beta 0.1:1.1:0.5 --c 3 --seeds 1 --n 4 --d 8 --heads 2 --out "$WORK/sweep" > "$WORK/sweep.log" 2>&1
"$JACOND" train --dim 16 --depth 2 --heads 2 --patch 7 --batch 32 --data-limit 640 --test-limit 200 --threads 1 \
  --steps 12 --warmup-steps 3 --optimizer soap --skip none --init ours --eval-every 6 --track-every 6 \
  --track-matrices K_sa,K_sab,softmax --checkpoint-every 6 --checkpoint-init --print-every 6 --out "$WORK/run" > "$WORK/train.log"
"$JACOND" audit "$WORK/run" --matrices K_sa,softmax --threads 1 --out "$WORK/audit" > "$WORK/audit.log"
"$JACOND" audit "$WORK/run" --data-free --out "$WORK/audit-free" > "$WORK/audit-free.log"
export JACOND="$JACOND" JACOND_NOTEBOOK_WORK="$WORK/own-vit"
export JACOND_SWEEP="$WORK/sweep" JACOND_RUN="$WORK/run" JACOND_AUDIT="$WORK/audit" JACOND_AUDIT_FREE="$WORK/audit-free"
for nb in "$SOURCE"/notebooks/*.ipynb; do
  name=$(basename "$nb" .ipynb)
  if [ "$name" = python_api ] && [ -z "$PYTHON_PACKAGE_DIR" ]; then echo "skipped $name (no Python module in this build)"; continue; fi
  jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=300 --output-dir "$WORK/executed" "$nb" \
    > "$WORK/$name.nbconvert.log" 2>&1 || { echo "notebook $name failed:"; tail -n 30 "$WORK/$name.nbconvert.log"; exit 1; }
  echo "executed $name"
done
# What the notebooks promise, in their executed copies.
/usr/bin/python3 - "$WORK/executed" <<'PY'
import json, sys, os
d = sys.argv[1]
def outputs(name):
    nb = json.load(open(os.path.join(d, name + ".ipynb")))
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
def text(outs):
    return "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outs)
def pngs(outs):
    return sum("image/png" in o.get("data", {}) for o in outs)
failures = []
sweep = outputs("sweep")
if pngs(sweep) < 2: failures.append(f"sweep: {pngs(sweep)} figures, expected the jacond plot heatmap and the line plot")
if "verdict:" not in text(sweep): failures.append("sweep: no sensitivity verdict")
audit = outputs("training_audit")
if pngs(audit) < 3: failures.append(f"training_audit: {pngs(audit)} figures, expected 3")
t = text(audit)
if "largest |ratio - 1| = " not in t: failures.append("training_audit: audit and tracking not compared")
else:
    worst = float(t.split("largest |ratio - 1| = ")[1].split()[0])
    if not worst < 1e-9: failures.append(f"training_audit: audit and tracking differ by {worst}")
own = outputs("audit_your_checkpoint")
if pngs(own) < 1: failures.append("audit_your_checkpoint: no figure")
if "W_VO" not in text(own) or "K_sa" not in text(own): failures.append("audit_your_checkpoint: the audit tables are missing")
if os.path.exists(os.path.join(d, "python_api.ipynb")):
    api = outputs("python_api")
    t = text(api)
    if pngs(api) < 1: failures.append("python_api: no figure")
    if "ln-complement" not in t or "K_sab" not in t: failures.append("python_api: the audit table is missing")
    if "relative difference " not in t: failures.append("python_api: svds on the operator not compared")
    else:
        diff = float(t.split("relative difference ")[1].split()[0])
        if not diff < 1e-8: failures.append(f"python_api: svds on the operator and the report differ by {diff}")
if failures:
    print("\n".join(failures)); sys.exit(1)
print("notebook outputs as promised")
PY
