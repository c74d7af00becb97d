"""The heatmaps of jacond_plots (sweep: α × β; training: layer × step) draw a cell for every value,
also where an axis holds one value only (a sweep at one α, a one-layer run: pcolormesh's "nearest"
shading gave such cells no width, a blank panel), and the training figure draws a matrix reported per
head only (the softmax) as the median over its heads, on its ones complement, instead of a blank panel."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from jacond_plots import sweep, training  # noqa: E402


def extent(mesh):
    """(width, height) of the area a QuadMesh covers."""
    xy = mesh.get_coordinates()
    return np.ptp(xy[..., 0]), np.ptp(xy[..., 1])


def test_a_sweep_at_one_alpha_draws_cells_of_nonzero_width():
    rows = pd.DataFrame([dict(alpha=2.0, beta=b, c=3.0, seed=0, matrix="K_sa", space="full", status="exact",
                              kappa=10.0 ** (1 + b), kappa_lo=10.0 ** (1 + b)) for b in (0.2, 0.6)])
    fig, ax = plt.subplots()
    mesh, _ = sweep.panel(ax, rows, "K_sa", 3.0)
    width, height = extent(mesh)
    assert width == pytest.approx(1.0) and height == pytest.approx(0.8)  # [1.5, 2.5] × [0, 0.8]
    assert np.asarray(mesh.get_array()).ravel() == pytest.approx([1.2, 1.6])
    plt.close(fig)


def test_a_sweep_at_one_grid_point_still_draws_its_cell():
    rows = pd.DataFrame([dict(alpha=2.0, beta=0.6, c=3.0, seed=0, matrix="K_sa", space="full", status="exact",
                              kappa=100.0, kappa_lo=100.0)])
    fig, ax = plt.subplots()
    mesh, _ = sweep.panel(ax, rows, "K_sa", 3.0)
    assert extent(mesh) == (pytest.approx(1.0), pytest.approx(1.0))
    plt.close(fig)


def conditioning(rows):
    base = dict(probe=0, status="exact")
    return pd.DataFrame([dict(base, **r, kappa_lo=r["kappa"]) for r in rows])


def test_a_one_layer_run_draws_its_layer_step_cells():
    cond = conditioning([dict(step=s, layer=0, matrix="K_sab", space="ln-complement", head="all", kappa=10.0 ** (2 + i))
                         for i, s in enumerate((0, 6, 12))])
    fig, ax = plt.subplots()
    training.layer_step_heatmap(ax, cond, "K_sab", fig)
    (mesh,) = [c for c in ax.collections if isinstance(c, matplotlib.collections.QuadMesh)]
    assert extent(mesh) == (pytest.approx(3.0), pytest.approx(1.0))
    assert np.asarray(mesh.get_array()).ravel() == pytest.approx([2.0, 3.0, 4.0])
    plt.close(fig)


def test_the_softmax_is_drawn_as_the_median_over_its_heads_on_the_ones_complement():
    rows = []
    for step, scale in ((0, 1.0), (6, 10.0)):
        for head, k in ((0, 100.0), (1, 1e4)):
            for layer in (0, 1):
                rows.append(dict(step=step, layer=layer, matrix="softmax", space="ones-complement", head=head,
                                 kappa=k * scale))
                rows.append(dict(step=step, layer=layer, matrix="softmax", space="full", head=head, kappa=np.inf,
                                 status="singular"))
    cond = conditioning(rows)
    cond.loc[cond["space"] == "full", "kappa_lo"] = 1e15  # the whole space's fp64 floor: never drawn
    sub, space, omitted = training.kappa_rows(cond, "softmax")
    assert (space, omitted, len(sub)) == ("ones-complement", 0, 8)
    fig, ax = plt.subplots()
    training.layer_step_heatmap(ax, cond, "softmax", fig)
    assert ax.axison
    (mesh,) = [c for c in ax.collections if isinstance(c, matplotlib.collections.QuadMesh)]
    # log10 of the median over the two heads (100 and 1e4: 1e3), ×10 at step 6
    assert np.asarray(mesh.get_array()).ravel() == pytest.approx([3.0, 4.0, 3.0, 4.0])
    assert ax.get_title() == "log10 κ(softmax) on 1⊥, median over heads"
    assert fig.axes[-1].get_ylabel() == "log10 κ (median over probes and heads)"
    plt.close(fig)


def test_per_head_rows_keep_their_statuses():
    """A singular head enters the median at κ_lo and hatches its cell; a not-converged one is left
    out and counted in the title."""
    cond = conditioning([dict(step=0, layer=0, matrix="softmax", space="ones-complement", head=0, kappa=100.0),
                         dict(step=0, layer=0, matrix="softmax", space="ones-complement", head=1, kappa=1e4),
                         dict(step=0, layer=0, matrix="softmax", space="ones-complement", head=2, kappa=np.inf,
                              status="singular"),
                         dict(step=0, layer=0, matrix="softmax", space="ones-complement", head=3, kappa=1e9,
                              status="not-converged")])
    cond.loc[2, "kappa_lo"] = 1e6
    cond.loc[3, "kappa_lo"] = 1e5
    fig, ax = plt.subplots()
    training.layer_step_heatmap(ax, cond, "softmax", fig)
    (mesh,) = [c for c in ax.collections if isinstance(c, matplotlib.collections.QuadMesh)]
    assert np.asarray(mesh.get_array()).ravel() == pytest.approx([4.0])  # median of 2, 4, 6 (κ_lo 1e6)
    assert [p.get_hatch() for p in ax.patches] == ["//"]
    assert ax.get_title() == ("log10 κ(softmax) on 1⊥, median over heads  (hatched: singular, at κ_lo)\n"
                              "1 not-converged reports left blank")
    plt.close(fig)
