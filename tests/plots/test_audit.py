"""jacond_plots.audit against hand-built audit.csv rows: a matrix with a structural nullspace is drawn on
its complement (the softmax on 1⊥, as skipless K_sab on LN⊥), not at the fp64 floor of the whole space;
and a log κ axis always carries two labelled powers of ten."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jacond_plots import audit  # noqa: E402
from jacond_plots.common import kappa_scale  # noqa: E402


def softmax_rows():
    """Two checkpoints, one layer, two heads: the whole space singular (κ_lo near 1/eps), the ones
    complement well conditioned (κ 40 and 90 at step 0, 400 and 900 at step 10)."""
    rows = []
    for step, scale in ((0, 1), (10, 10)):
        for head, k in ((0, 40.0), (1, 90.0)):
            common = dict(checkpoint=f"run/step-{step:07d}", step=step, probe=0, layer=0, matrix="softmax", head=head)
            rows.append(dict(common, space="full", status="singular", kappa=np.inf, kappa_lo=3e15))
            rows.append(dict(common, space="ones-complement", status="exact", kappa=k * scale, kappa_lo=k * scale))
    return pd.DataFrame(rows)


def test_softmax_is_drawn_on_the_ones_complement_not_at_the_floor():
    df = softmax_rows()
    sub = audit.rows_to_draw(df, "softmax")
    assert set(sub["space"]) == {"ones-complement"}
    fig, ax = plt.subplots()
    audit.panel(ax, sub, "softmax", over_steps=True)
    line = ax.get_lines()[0]
    # the median of log κ over the two heads: √(40·90) = 60, not pandas' mean of the two middle values (65)
    np.testing.assert_allclose(line.get_ydata(), [60.0, 600.0])
    assert "ones-complement" in ax.get_title()
    assert ax.get_ylim()[1] < 1e5  # the 3e15 floor of the whole space is nowhere on the axis
    plt.close(fig)


def test_a_matrix_reported_on_the_full_space_only_is_drawn_there():
    df = softmax_rows()
    df = df[df["space"] == "full"].assign(matrix="K_sa")
    sub = audit.rows_to_draw(df, "K_sa")
    assert set(sub["space"]) == {"full"} and len(sub) == 4


def labelled_decades(ax):
    lo, hi = ax.get_ylim()
    return [t for t in ax.get_yticks() if lo <= t <= hi and np.isclose(np.log10(t), round(np.log10(t)))]


def test_a_log_axis_inside_one_decade_is_widened_to_two_powers_of_ten():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [150, 1600])
    kappa_scale(ax, [150, 1600])
    assert ax.get_yscale() == "log"
    lo, hi = ax.get_ylim()
    assert 80 < lo < 100 and 10000 < hi < 12500  # whole decades, and a margin so no point sits on the frame
    assert len(labelled_decades(ax)) >= 2
    plt.close(fig)


def test_a_log_axis_over_two_powers_of_ten_keeps_its_own_limits():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [50, 2000])
    kappa_scale(ax, [50, 2000])
    assert ax.get_yscale() == "log"
    lo, hi = ax.get_ylim()
    assert 10 < lo <= 50 and 2000 <= hi < 10000  # matplotlib's own margins, not whole decades
    plt.close(fig)


def test_the_audit_figure_of_a_run_is_written(tmp_path):
    softmax_rows().to_csv(tmp_path / "audit.csv", index=False)
    (paths,) = [audit.plot(str(tmp_path), ("png",))]
    assert paths == [str(tmp_path / "figures" / "audit.png")]
    assert (tmp_path / "figures" / "audit.png").stat().st_size > 0


def drawn_audit(tmp_path, saved_figures, rows):
    """audit.plot's figure of an audit.csv holding `rows`, kept as it is saved (and still written)."""
    pd.DataFrame(rows).to_csv(tmp_path / "audit.csv", index=False)
    captured = saved_figures(audit)
    audit.plot(str(tmp_path), ("png",))
    return captured["audit"]


def k_sa(checkpoint, step, layer, kappa):
    return dict(checkpoint=checkpoint, step=step, probe=0, layer=layer, matrix="K_sa", space="full", head="all",
                status="exact", kappa=kappa, kappa_lo=kappa)


def test_checkpoints_that_share_a_step_get_a_line_each_never_a_median_of_both(tmp_path, saved_figures):
    """Standalone .safetensors files all have step -1: each is its own line against the layer, named
    by its file, not one median line over both with their min-max as a band."""
    rows = [k_sa("two/a.safetensors", -1, layer, k) for layer, k in ((0, 6.8e7), (1, 6.6e7))]
    rows += [k_sa("two/b.safetensors", -1, layer, k) for layer, k in ((0, 7.6e9), (1, 1.4e9))]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    ax = fig.axes[0]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines == {"a": [6.8e7, 6.6e7], "b": [7.6e9, 1.4e9]}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert ax.get_xlabel() == "layer"
    plt.close(fig)


def test_two_runs_at_the_same_steps_are_drawn_apart_and_named_by_run(tmp_path, saved_figures):
    rows = [k_sa(f"{run}/step-{step:07d}", step, 0, k * (1 + step)) for run, k in (("run-a", 10.0), ("run-b", 1e4))
            for step in (0, 6)]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    assert lines == {"run-a/step-0000000": [10.0], "run-a/step-0000006": [70.0],
                     "run-b/step-0000000": [1e4], "run-b/step-0000006": [7e4]}
    plt.close(fig)


def test_one_checkpoint_per_step_is_still_drawn_over_the_steps(tmp_path, saved_figures):
    rows = [k_sa(f"run/step-{step:07d}", step, layer, 10.0 * (1 + step + layer)) for step in (0, 6) for layer in (0, 1)]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    assert lines == {"layer 0": [10.0, 70.0], "layer 1": [20.0, 80.0]}
    assert fig.axes[0].get_xlabel() == "training step of the checkpoint"
    plt.close(fig)


def test_short_names_are_the_shortest_distinct_ends_of_the_paths():
    assert audit.short_names(["two/a.safetensors", "two/b.safetensors"]) == {"two/a.safetensors": "a",
                                                                              "two/b.safetensors": "b"}
    assert audit.short_names(["x/run/step-0000000", "y/run/step-0000000", "y/run/step-0000006"]) == {
        "x/run/step-0000000": "x/run/step-0000000", "y/run/step-0000000": "y/run/step-0000000",
        "y/run/step-0000006": "step-0000006"}


def test_the_line_is_the_median_of_log_kappa_over_heads():
    """Two heads with κ 100 and 1e4: the line is at their geometric middle, 1e3 (the training figure's
    heatmap takes the median of log κ too), not at pandas' 5050, which the larger head alone decides."""
    rows = [dict(k_sa("run/step-0000000", 0, 0, k), head=h) for h, k in ((0, 100.0), (1, 1e4))]
    sub = audit.rows_to_draw(pd.DataFrame(rows), "K_sa")
    fig, ax = plt.subplots()
    audit.panel(ax, sub, "K_sa", over_steps=False)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [1e3])
    plt.close(fig)


def singular_k_sa(checkpoint, step, layer, kappa_lo):
    return dict(k_sa(checkpoint, step, layer, np.inf), status="singular", kappa_lo=kappa_lo)


def test_layers_singular_at_the_same_kappa_lo_are_named_where_their_markers_coincide(tmp_path, saved_figures):
    """Layers 1-3 singular at one κ_lo at every step: their hollow markers fall on one another (only the
    last drawn shows), so the panel names them once, "layers 1–3 singular"; layer 0 is not named."""
    rows = []
    for step in (0, 10):
        rows.append(k_sa(f"run/step-{step:07d}", step, 0, 1e9 / (1 + step)))
        rows += [singular_k_sa(f"run/step-{step:07d}", step, layer, 1.4e12) for layer in (1, 2, 3)]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert notes == ["layers 1–3 singular"]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [f"layer {i}" for i in range(4)]
    assert "median of log κ" in fig._suptitle.get_text()
    plt.close(fig)


def test_notes_of_different_layer_sets_at_neighbouring_steps_do_not_overlap(tmp_path, saved_figures):
    """Layers 1-3 singular at step 0, layers 2-3 from step 250 on, all at one κ_lo (the skipless-ours
    audit): two notes at x = 0 and 250 of a 0..1000 axis, each wider than a quarter of it; they were
    printed on one line over each other."""
    rows = []
    for step in (0, 250, 500, 750, 1000):
        rows.append(k_sa(f"run/step-{step:07d}", step, 0, 1e8))
        rows.append(k_sa(f"run/step-{step:07d}", step, 1, 1e9) if step else singular_k_sa("run/step-0000000", 0, 1, 1.4e12))
        rows += [singular_k_sa(f"run/step-{step:07d}", step, layer, 1.4e12) for layer in (2, 3)]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    texts = fig.axes[0].texts
    assert sorted(t.get_text() for t in texts) == ["layers 1–3 singular", "layers 2–3 singular"]
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert not boxes[0].overlaps(boxes[1]), boxes
    plt.close(fig)


def test_a_set_of_layers_is_named_once_and_inside_the_panel(tmp_path, saved_figures):
    """Layers 2-3 singular from step 500 on at κ_lo a rounding apart, which of them is lower changing
    between steps (the skipless-timm audit): named once, not once per order, and the note at the last
    step stays inside the axes (it ran past the right edge)."""
    rows = []
    for step in (0, 250, 500, 750, 1000):
        rows.append(k_sa(f"run/step-{step:07d}", step, 0, 1e8))
        rows.append(k_sa(f"run/step-{step:07d}", step, 1, 1e9))
        lo2, lo3 = (1.40e12, 1.41e12) if step != 1000 else (1.41e12, 1.40e12)
        if step >= 500:
            rows += [singular_k_sa(f"run/step-{step:07d}", step, 2, lo2), singular_k_sa(f"run/step-{step:07d}", step, 3, lo3)]
        else:
            rows += [k_sa(f"run/step-{step:07d}", step, layer, 1e10) for layer in (2, 3)]
    fig = drawn_audit(tmp_path, saved_figures, rows)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["layers 2–3 singular"]
    assert audit.coincident_singular([(0, 1.40e12, "layer 2"), (0, 1.41e12, "layer 3"),
                                      (1, 1.40e12, "layer 3"), (1, 1.41e12, "layer 2")]) == \
        [(("layer 2", "layer 3"), 0, 1.41e12)]
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    for t in ax.texts:
        box = t.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (t.get_text(), box, inside)
    plt.close(fig)


def test_singular_markers_apart_are_not_named():
    hollow = [(0, 1e12, "layer 1"), (0, 5e12, "layer 2"), (10, 1e12, "layer 1"), (10, 1.01e12, "layer 3")]
    assert audit.coincident_singular(hollow) == [(("layer 1", "layer 3"), 10, 1.01e12)]
    assert audit.series_names(["layer 0", "layer 2", "layer 3"]) == "layers 0, 2–3"
    assert audit.series_names(["a", "b"]) == "a, b"
