"""jacond_plots: figures from jacond's result directories (issue 12).

    python3 -m jacond_plots DIR [--format png,svg]      (or `jacond plot DIR`)

recognises what jacond wrote in DIR (the files of each kind are listed in KINDS), renders its
figures next to the data (DIR/figures/*.png and .svg) and prints the paths. Every figure carries a
caption line with the command that produced the data (run.json's "command"), log scales where κ
spans decades, and the same colour for the same init or status in every figure (common.py).

Kinds so far: `jacond block` (block.py), `jacond sweep` (sweep.py) and `jacond bench dense`
(bench_dense.py). The older stand-alone scripts beside this package (plot_training.py,
plot_spectrum.py, plot_lanczos_methods.py) move in here kind by kind.
"""

from .common import PlotError
from .recognise import KINDS, recognise, plot_dir

__all__ = ["KINDS", "PlotError", "plot_dir", "recognise"]
