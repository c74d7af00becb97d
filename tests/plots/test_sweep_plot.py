"""jacond_plots.sweep's heatmap against hand-built rows: what each cell is drawn as.

A not-converged row says only κ ≥ κ_lo (its `kappa` column is the solver's last estimate, which
the rows below set far from κ_lo on purpose): its cell must take κ_lo into the median, be hatched
and marked "≥", never coloured as a κ. A singular seed makes its cell grey and "sing."."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from jacond_plots import sweep  # noqa: E402
from jacond_plots.common import plotted_kappa  # noqa: E402


def row(alpha, beta, seed, status, kappa, kappa_lo):
    return dict(alpha=alpha, beta=beta, c=3.0, seed=seed, matrix="K_sa", space="full", status=status,
                kappa=kappa, kappa_lo=kappa_lo, kappa_hi=np.inf if status in ("not-converged", "singular") else kappa)


@pytest.fixture
def rows():
    return pd.DataFrame([
        # (α 1, β 0): both seeds exact -> the median of log10 κ = (2 + 4) / 2
        row(1.0, 0.0, 0, "exact", 1e2, 1e2), row(1.0, 0.0, 1, "exact", 1e4, 1e4),
        # (α 2, β 0): one seed not converged: its κ_lo (1e3), not its estimate (1e9), enters the median
        row(2.0, 0.0, 0, "bracket", 1e5, 0.99e5), row(2.0, 0.0, 1, "not-converged", 1e9, 1e3),
        # (α 1, β 1): a singular seed
        row(1.0, 1.0, 0, "singular", np.inf, 1e12), row(1.0, 1.0, 1, "exact", 1e3, 1e3),
        # (α 2, β 1): neither seed converged
        row(2.0, 1.0, 0, "not-converged", 1e9, 1e2), row(2.0, 1.0, 1, "not-converged", 1e9, 1e6),
    ])


def test_cells_take_kappa_lo_where_not_converged_and_say_so(rows):
    grid, kinds = sweep.cell_grid(rows)
    assert list(grid.index) == [0.0, 1.0] and list(grid.columns) == [1.0, 2.0]
    assert kinds.tolist() == [["value", "lower"], ["singular", "lower"]]
    assert grid.loc[0.0, 1.0] == pytest.approx(3.0)
    assert grid.loc[0.0, 2.0] == pytest.approx((np.log10(1e3) + np.log10(1e5)) / 2)
    assert grid.loc[1.0, 2.0] == pytest.approx(4.0)


def test_the_panel_hatches_and_marks_lower_bounds_and_greys_singular_cells(rows):
    fig, ax = plt.subplots()
    mesh, kinds = sweep.panel(ax, rows, "K_sa", 3.0)
    assert kinds.tolist() == [["value", "lower"], ["singular", "lower"]]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("≥") == 2 and texts.count("sing.") == 1
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 2
    # each hatch covers its cell: (α 2, β 0) and (α 2, β 1) on the grid's half-step edges
    assert sorted((p.get_x(), p.get_y(), p.get_width(), p.get_height()) for p in hatched) == \
        [(1.5, -0.5, 1.0, 1.0), (1.5, 0.5, 1.0, 1.0)]
    drawn = np.asarray(mesh.get_array()).reshape(2, 2)
    assert drawn[0, 1] == pytest.approx(4.0) and drawn[1, 1] == pytest.approx(4.0)
    assert drawn[1, 0] > mesh.norm.vmax  # singular: above the scale, the colormap's grey
    assert "(1 singular, 3 not converged of 8 rows: κ_lo)" in ax.get_title()
    plt.close(fig)


def test_the_colour_bar_names_what_the_panel_holds(rows):
    """Only the marks the panel draws: a singular K_sab on the whole space, not drawn beside its
    LN-complement panel, must not add "grey" to it."""
    _, kinds = sweep.cell_grid(rows)
    assert sweep.colour_label(kinds) == "log10 κ (median over seeds)\n≥ hatched: lower bound; grey: singular"
    _, kinds = sweep.cell_grid(rows[rows["status"] != "singular"])
    assert sweep.colour_label(kinds) == "log10 κ (median over seeds)\n≥ hatched: lower bound"
    _, kinds = sweep.cell_grid(rows[rows["status"] == "exact"])
    assert sweep.colour_label(kinds) == "log10 κ (median over seeds)"


def test_cell_edges():
    assert sweep.cell_edges([0.0, 1.0, 3.0]).tolist() == [-0.5, 0.5, 2.0, 4.0]
    assert sweep.cell_edges([2.0]).tolist() == [1.5, 2.5]


def test_plotted_kappa_is_kappa_lo_wherever_only_a_lower_bound_is_known(rows):
    """What every figure draws (block, audit, training, sweep): κ, or κ_lo for singular and
    not-converged rows; a table without a status column (older files) still draws κ_lo for κ = inf."""
    want = np.where(rows["status"].isin(["singular", "not-converged"]), rows["kappa_lo"], rows["kappa"])
    assert plotted_kappa(rows).tolist() == want.tolist()
    no_status = rows.drop(columns="status")
    assert plotted_kappa(no_status).tolist() == np.where(np.isfinite(rows["kappa"]), rows["kappa"],
                                                         rows["kappa_lo"]).tolist()
