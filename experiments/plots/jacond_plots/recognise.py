"""Which jacond output a directory holds, and the renderer for it."""

import os

from . import bench_dense, block, sweep
from .common import PlotError

# kind -> (the file that identifies it, the columns that confirm it, its renderer)
KINDS = {
    "block": ("results.csv", ("matrix", "space", "head", "kappa_lo", "kappa_hi"), block.plot),
    "bench-dense": ("bench_dense.csv", ("route", "total_s", "agree_with_torch"), bench_dense.plot),
    "sweep": ("sweep.csv", ("alpha", "beta", "c", "matrix", "kappa_lo"), sweep.plot),
}


def _header(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().strip().split(",")


def recognise(directory):
    """The kinds of jacond output in `directory` (possibly several); PlotError when none."""
    if not os.path.isdir(directory):
        raise PlotError(f"{directory}: not a directory")
    found = []
    for kind, (filename, columns, _) in KINDS.items():
        path = os.path.join(directory, filename)
        if os.path.isfile(path) and all(c in _header(path) for c in columns):
            found.append(kind)
    if not found:
        known = ", ".join(f"{k} ({v[0]})" for k, v in KINDS.items())
        raise PlotError(f"{directory}: no jacond results this package recognises (knows: {known})")
    return found


def plot_dir(directory, formats=("png", "svg")):
    """Renders every kind found in `directory`; returns the files written."""
    paths = []
    for kind in recognise(directory):
        paths += KINDS[kind][2](directory, formats)
    return paths
