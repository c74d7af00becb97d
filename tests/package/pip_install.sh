#!/usr/bin/env bash
# `pip install .` of the Python module, offline, the way a user installs it (pyproject.toml):
#   pip_install.sh JACOND WORK_DIR
# A venv on Debian's Python (--system-site-packages: NumPy, SciPy, pandas, torch from Debian; pip
# from python3-venv's bundled wheel), `pip install --no-build-isolation --no-deps` of the source
# tree, then, from a folder outside the tree: the version equals the CLI's, and a block's
# reports come out of the installed module.
set -euo pipefail
JACOND=$1
WORK=$2
SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
/usr/bin/python3 -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install --no-build-isolation --no-deps --no-index "$SOURCE" > "$WORK/pip.log" 2>&1 ||
  { echo "pip install failed:"; tail -n 40 "$WORK/pip.log"; exit 1; }
cd "$WORK"
expected=$("$JACOND" --version)
"$WORK/venv/bin/python" - "$expected" <<'PY'
import sys
import numpy as np
import jacond
expected = sys.argv[1]
assert f"jacond {jacond.__version__}" == expected, (jacond.__version__, expected)
assert "/venv/lib/" in jacond.__file__ and "site-packages" in jacond.__file__, f"not the installed copy: {jacond.__file__}"
rng = np.random.default_rng(0)
W = lambda r, c: rng.standard_normal((r, c)) / np.sqrt(r)
block = jacond.Block(W(8, 8), W(8, 8), W(8, 8), W(8, 8), W(8, 32), W(32, 8), 2)
df = jacond.block_reports(block, rng.standard_normal((6, 8)), skip="full", method="dense")
assert (df.status == "exact").any() and (df.kappa >= 1).all(), df
print(f"installed jacond {jacond.__version__} at {jacond.__file__}: {len(df)} reports")
PY
