"""`jacond spectrum --out DIR` (spectrum.csv for a dense spectrum, density.csv for SLQ).

Dense: a histogram of log10 σ over all singular values, normalised to a density per unit log10 σ,
with σ_max, σ_min and κ in the title (zero singular values are counted in the title and left out
of the log axis). Where run.json's result is singular, κ is ∞, not σ_max/σ_min: the title says
"κ = ∞ (singular, rank r of N)" and the N − r values below the rank cutoff, rounding noise rather
than singular values of the matrix, are drawn grey and hatched over a shaded band, apart from the
data. SLQ (stochastic Lanczos quadrature): the estimated density per unit log10 σ, greyed below
run.json's lowest_node_sigma (where the quadrature's lowest nodes carry every σ beneath them, a null
space too: not resolved), with the mass under the rounding floor, which density.csv leaves out, in
the title.
"""

import json
import os

import matplotlib.pyplot as plt
import numpy as np

from .common import caption, read_csv, require_columns, save


def run_record(directory):
    try:
        with open(os.path.join(directory, "run.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def describe(directory):
    meta = run_record(directory)
    if meta is None:
        return os.path.basename(os.path.normpath(directory))
    source = meta.get("init") or meta.get("source", "?")
    return f"{meta.get('matrix', '?')}, {source}, skip {meta.get('skip', '?')}"


def singular_rank(directory, size):
    """(True, rank) where run.json's result is singular, the rank None when it is not given as one of
    0..size-1; (False, None) otherwise."""
    result = (run_record(directory) or {}).get("result") or {}
    if not isinstance(result, dict) or result.get("status") != "singular":
        return False, None
    rank = result.get("rank")
    known = isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < size
    return True, rank if known else None


def kappa_text(sigma, singular, rank):
    """The title's κ: ∞ for a singular matrix (with its rank where known), else σ_max/σ_min."""
    if singular:
        return "κ = ∞ (singular" + (f", rank {rank} of {sigma.size})" if rank is not None else ")")
    return f"κ {sigma.max() / sigma.min() if sigma.min() > 0 else float('inf'):.4g}"


def plot_dense(directory, formats):
    path = f"{directory}/spectrum.csv"
    df = read_csv(path)
    require_columns(df, path, ["sigma"])
    sigma = df["sigma"].astype(float).to_numpy()
    positive = sigma[sigma > 0]
    singular, rank = singular_rank(directory, sigma.size)
    # Below the rank cutoff (the N − r smallest) the values are rounding noise: drawn apart, not as data.
    noise = np.zeros(sigma.size, dtype=bool)
    if rank is not None:
        noise[np.argsort(-sigma, kind="stable")[rank:]] = True
    data, below = sigma[~noise & (sigma > 0)], sigma[noise & (sigma > 0)]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    bins = np.histogram_bin_edges(np.log10(positive), bins=min(60, max(10, positive.size // 20)))
    labels = ["σ of the matrix", f"{below.size} values below the rank cutoff: rounding noise, not data"]
    _, _, bars = ax.hist([np.log10(data), np.log10(below)], bins=bins, density=True, stacked=True,
                         color=["#1f77b4", "0.6"], alpha=0.8, label=labels if below.size else None)
    if below.size:
        for bar in bars[1]:
            bar.set_hatch("//")
        top = bins[min(np.searchsorted(bins, np.log10(below.max()), side="right"), len(bins) - 1)]
        ax.axvspan(bins[0], top, color="0.6", alpha=0.2, zorder=0)  # the noise's bins, shaded
        ax.legend(loc="upper left", fontsize=8)
    zeros = sigma.size - positive.size
    smallest = (f"smallest above the cutoff {data.min():.4g}" if rank is not None and data.size else
                f"σ_min {sigma.min():.4g}")
    title = (f"{describe(directory)}: {sigma.size} singular values, σ_max {positive.max():.4g}, "
             f"{smallest}" + (",\n" if singular else ", ") + kappa_text(sigma, singular, rank))
    ax.set_title(title + (f" ({zeros} exactly zero, not drawn)" if zeros else ""), fontsize=9)
    ax.set_xlabel("log10 σ")
    ax.set_ylabel("density per unit log10 σ")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "spectrum", formats)


def plot_density(directory, formats):
    path = f"{directory}/density.csv"
    df = read_csv(path)
    require_columns(df, path, ["log10_sigma", "density"])
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    ax.plot(df["log10_sigma"], df["density"], color="#d95f02")
    ax.fill_between(df["log10_sigma"], 0, df["density"], color="#d95f02", alpha=0.2)
    slq = (run_record(directory) or {}).get("result") or {}
    title = f"{describe(directory)}: SLQ estimate of the singular value density"
    lowest, lowest_mass = slq.get("lowest_node_sigma"), slq.get("lowest_node_mass")
    floor = slq.get("sigma_floor", 0.0)
    # Lowest nodes under the rounding floor are the floor's mass (the title's), not drawn at all.
    if (isinstance(lowest, (int, float)) and isinstance(lowest_mass, (int, float)) and isinstance(floor, (int, float))
            and lowest > floor and np.log10(lowest) > float(df["log10_sigma"].min())):
        ax.axvspan(float(df["log10_sigma"].min()), np.log10(lowest), color="0.6", alpha=0.25,
                   label=f"not resolved: below the lowest nodes (they carry mass {lowest_mass:.3g}, "
                         "every σ beneath them included)")
        ax.legend(loc="upper left", fontsize=8)
    floor_mass = slq.get("mass_below_floor")
    if isinstance(floor_mass, (int, float)) and floor_mass > 0:
        title += f"\nmass {floor_mass:.3g} under the rounding floor (σ < {floor:.2g}: zero to rounding), not drawn"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("log10 σ")
    ax.set_ylabel("density per unit log10 σ")
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    caption(fig, directory)
    return save(fig, directory, "spectrum_density", formats)
