"""jacond_plots against hand-built rows: what a figure draws where only a lower bound of κ is known.

The sweep's heatmap: what each cell is drawn as.

A not-converged row says only κ ≥ κ_lo (its `kappa` column is the solver's last estimate, which
the rows below set far from κ_lo on purpose): its cell must take κ_lo into the median, be hatched
and marked "≥", never coloured as a κ. A singular seed makes its cell grey and "sing.". The audit's and the
training's panels leave not-converged reports out and say how many."""

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from jacond_plots import sweep  # noqa: E402
from jacond_plots.common import PlotError, plotted_kappa, require_columns  # noqa: E402


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
    assert sweep.colour_label(kinds, [2]) == "log10 κ (median over 2 seeds)\n≥ hatched: lower bound; grey: singular"
    _, kinds = sweep.cell_grid(rows[rows["status"] != "singular"])
    assert sweep.colour_label(kinds, [2]) == "log10 κ (median over 2 seeds)\n≥ hatched: lower bound"
    _, kinds = sweep.cell_grid(rows[rows["status"] == "exact"])
    assert sweep.colour_label(kinds, [2]) == "log10 κ (median over 2 seeds)"


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


def test_audit_and_training_panels_count_the_not_converged_reports_they_leave_out():
    from jacond_plots import audit, training
    df = pd.DataFrame(dict(checkpoint="c", step=[0, 0, 100, 100], probe=0, layer=[0, 1, 0, 1], matrix="K_sa",
                           space="full", head="all", status=["exact", "not-converged", "exact", "exact"],
                           kappa=[10.0, 1e9, 20.0, 30.0], kappa_lo=[10.0, 5.0, 20.0, 30.0]))
    assert audit.left_out(df, "K_sa") == 1
    assert audit.rows_to_draw(df, "K_sa")["status"].tolist() == ["exact"] * 3
    fig, ax = plt.subplots()
    audit.panel(ax, audit.rows_to_draw(df, "K_sa"), "K_sa", True, audit.left_out(df, "K_sa"))
    assert ax.get_title().endswith("\n1 not-converged reports left out")
    sub, space, omitted = training.kappa_rows(df, "K_sa")
    assert (space, omitted, len(sub)) == ("full", 1, 3)
    fig2, ax2 = plt.subplots()
    training.layer_step_heatmap(ax2, df, "K_sa", fig2)
    assert ax2.get_title().endswith("\n1 not-converged reports left blank")
    plt.close(fig)
    plt.close(fig2)


@pytest.mark.parametrize("status", ["Exact", "converged", "", float("nan")])
def test_a_table_with_a_status_jacond_does_not_write_is_refused_naming_the_row(rows, status):
    rows.loc[3, "status"] = status
    with pytest.raises(PlotError, match=r"^t\.csv: line 5 has status .* \(expected exact \| certified"):
        require_columns(rows, "t.csv", ["status", "kappa"])
    require_columns(rows.drop(index=3), "t.csv", ["status", "kappa"])  # the others are all known


def test_a_number_column_holding_text_is_refused_and_empty_nan_inf_are_numbers():
    def table(kappa):  # as read_csv reads a jacond table
        return pd.read_csv(io.StringIO(f"status,kappa\nexact,2.5\nexact,{kappa}\n"))
    for number in ("", "nan", "inf", "1e300", "-0"):
        require_columns(table(number), "t.csv", ["status", "kappa"])
    with pytest.raises(PlotError, match=r"^t\.csv: line 3 has kappa 'abc' \(expected a number\)$"):
        require_columns(table("abc"), "t.csv", ["status", "kappa"])
    require_columns(table("abc"), "t.csv", ["status"])  # only the columns a figure asks for are checked
