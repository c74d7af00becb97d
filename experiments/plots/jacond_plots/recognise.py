"""Which jacond output a directory holds, and the renderer for it."""

import os

from . import audit, bench_dense, bench_lanczos, block, depth, lemma1, moments, prop1, prop2, prop41, spectrum, sweep, training
from .common import PlotError

# kind -> (the file that identifies it, the columns that confirm it, its renderer)
KINDS = {
    "block": ("results.csv", ("matrix", "space", "head", "kappa_lo", "kappa_hi"), block.plot),
    "bench-dense": ("bench_dense.csv", ("route", "total_s", "agree_with_torch"), bench_dense.plot),
    "bench-lanczos": ("bench_lanczos_methods.csv", ("method", "products_to_1pct", "dense_sigma_min"), bench_lanczos.plot),
    "sweep": ("sweep.csv", ("alpha", "beta", "c", "matrix", "kappa_lo"), sweep.plot),
    "train": ("eval.csv", ("step", "test_loss", "test_acc"), training.plot),
    "audit": ("audit.csv", ("checkpoint", "step", "layer", "matrix", "kappa"), audit.plot),
    "spectrum": ("spectrum.csv", ("sigma",), spectrum.plot_dense),
    "spectrum-slq": ("density.csv", ("log10_sigma", "density"), spectrum.plot_density),
    # jacond verify CLAIM --out DIR: one kind per claim that writes a table
    "verify-prop1": ("prop1_draws.csv", ("experiment", "beta", "kappa", "upper_bound", "lower_bound"), prop1.plot),
    "verify-prop2": ("prop2.csv", ("init", "kappa_K", "kappa_B", "e_norm", "premise"), prop2.plot),
    "verify-lemma1": ("lemma1.csv", ("alpha", "beta", "gamma", "norm_dA_dM", "norm_dA_dX"), lemma1.plot),
    "verify-moments": ("moments.csv", ("equation", "statistic", "measured", "derived", "paper"), moments.plot),
    "verify-eq89": ("eq89_products.csv", ("init", "equation", "depth", "kappa_ln1c"), depth.plot),
    "verify-prop41": ("prop41.csv", ("init", "kappa_x", "output", "skip", "kappa_out"), prop41.plot),
}


def _header(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().strip().split(",")


def recognise(directory):
    """The kinds of jacond output in `directory` (possibly several); PlotError when none."""
    if not os.path.isdir(directory):
        kind = "a file" if os.path.isfile(directory) else "not there"
        raise PlotError(f"{directory}: not a directory ({kind}; jacond plot takes the folders jacond commands write)")
    found, malformed = [], []
    for kind, (filename, columns, _) in KINDS.items():
        path = os.path.join(directory, filename)
        if not os.path.isfile(path):
            continue
        missing = [c for c in columns if c not in _header(path)]
        if missing:
            malformed.append(f"{path} lacks the {kind} columns {', '.join(missing)}")
        else:
            found.append(kind)
    if not found and malformed:  # the file a kind is named by, without its columns: say which
        raise PlotError(f"{'; '.join(malformed)} (not written by this jacond, or damaged)")
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
