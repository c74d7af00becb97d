"""jacond_plots.prop41 against a hand-built prop41.csv: a κ(out) verify calls unresolved (≥ 1e-4/eps,
rounding-dominated) or singular (κ = ∞, known only as ≥ κ_lo) is drawn hollow, a singular one at its
κ_lo, and the panel's title counts them and any singular row with no κ_lo to draw (it was dropped in
silence, and unresolved points were drawn as if they were κ)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jacond_plots import prop41  # noqa: E402

BIG = 1e12  # above 1e-4/eps ≈ 4.5e11: unresolved


def rows(kappa_lo_column=True):
    """timm, linear attention: κ(X) 1, 2, 4 resolved, κ(X) 8 unresolved (1e12), κ(X) 16 singular with
    κ_lo 2e13, κ(X) 32 singular with no κ_lo; with the skip every κ(X + out) resolved."""
    out = [(1, 10.0, 10.0), (2, 80.0, 80.0), (4, 640.0, 640.0), (8, BIG, BIG), (16, np.inf, 2e13), (32, np.inf, np.nan)]
    table = []
    for kappa_x, k, lo in out:
        common = dict(init="timm", kappa_x=kappa_x, output="linear_attention", bound=np.nan)
        table.append(dict(common, skip="without", kappa_out=k, kappa_out_lo=lo))
        table.append(dict(common, skip="with", kappa_out=2.0 * kappa_x, kappa_out_lo=2.0 * kappa_x))
    df = pd.DataFrame(table)
    return df if kappa_lo_column else df.drop(columns="kappa_out_lo")


FITS = pd.DataFrame([dict(init="timm", output="linear_attention", min_kappa_x=m, slope=3.0, intercept=np.log(10.0),
                          constant=10.0) for m in (1.0, 32.0)])


def offsets(ax, hollow):
    """The points of the panel's scatters, filled or hollow."""
    points = [c.get_offsets() for c in ax.collections
              if (len(c.get_facecolors()) == 0) == hollow and len(c.get_offsets())]
    return sorted(map(tuple, np.concatenate(points))) if points else []


def test_unresolved_and_singular_outputs_are_drawn_hollow_and_counted():
    fig, ax = plt.subplots()
    prop41.growth_panel(ax, rows(), FITS, "linear_attention", "linear attention", 3)
    assert offsets(ax, hollow=False) == [(1, 10.0), (2, 80.0), (4, 640.0)]
    assert offsets(ax, hollow=True) == [(8, BIG), (16, 2e13)]  # the singular one at its κ_lo
    title = ax.get_title()
    assert "hollow: 2 unresolved (κ ≥ 4.5e+11), 1 of them singular, at κ_lo" in title
    assert "1 singular without κ_lo left out" in title
    plt.close(fig)


def test_without_a_kappa_lo_column_singular_outputs_are_left_out_and_counted():
    fig, ax = plt.subplots()
    prop41.growth_panel(ax, rows(kappa_lo_column=False), FITS, "linear_attention", "linear attention", 3)
    assert offsets(ax, hollow=True) == [(8, BIG)]
    assert "hollow: 1 unresolved" in ax.get_title() and "2 singular without κ_lo left out" in ax.get_title()
    plt.close(fig)


def test_the_skip_panel_draws_an_unresolved_or_singular_pair_hollow():
    fig, ax = plt.subplots()
    prop41.skip_panel(ax, rows(), "linear_attention", "Prop. 4.2")
    assert offsets(ax, hollow=False) == [(10.0, 2.0), (80.0, 4.0), (640.0, 8.0)]
    assert offsets(ax, hollow=True) == [(BIG, 16.0), (2e13, 32.0)]
    assert "hollow: 2 unresolved" in ax.get_title() and "1 singular without κ_lo left out" in ax.get_title()
    plt.close(fig)


def test_a_panel_with_every_point_resolved_says_nothing_more():
    df = rows()
    df = df[df["kappa_x"] <= 4]
    fig, ax = plt.subplots()
    prop41.growth_panel(ax, df, FITS, "linear_attention", "linear attention", 3)
    assert ax.get_title() == "linear attention\n(paper: ~κ(X)^3)"
    assert offsets(ax, hollow=True) == []
    plt.close(fig)
