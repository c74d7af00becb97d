"""jacond_plots: figures from jacond's result directories (issue 12).

    python3 -m jacond_plots DIR [--format png,svg]      (or `jacond plot DIR`)

recognises what jacond wrote in DIR (the files of each kind are listed in KINDS), renders its
figures next to the data (DIR/figures/*.png and .svg) and prints the paths. Every figure carries a
caption line with the command that produced the data (run.json's "command"), log scales where κ
spans decades, and the same colour for the same init or status in every figure (common.py).

Kinds (recognise.KINDS: the file that identifies each, one module per kind): `jacond block`
(block.py), `sweep` (sweep.py), `train` run directories (training.py), `audit` (audit.py),
`spectrum` dense and SLQ (spectrum.py), `verify prop1 | prop2 | moments | eq89` (prop1.py, prop2.py,
moments.py, depth.py), `bench dense` (bench_dense.py) and `bench lanczos --compare-methods`
(bench_lanczos.py). The reports built from these figures are jacond_recipes (experiments/recipes).
"""

from .common import PlotError
from .recognise import KINDS, recognise, plot_dir

__all__ = ["KINDS", "PlotError", "plot_dir", "recognise"]
