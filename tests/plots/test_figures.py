"""jacond_plots against hand-built rows: what the depth, sweep and prop2 figures say about their data.

The depth figure names only the (init, equation) pairs that are singular, draws their points hollow
instead of ending the line, and keeps its legend off the panels; the sweep's colour bar says what a
cell is (one seed's κ or a median over N); prop2 draws a visible Weyl bracket where the premise holds
and labels β in a legend, not in text piled on the points; a figure of several runs is captioned with
their merged command, not the first one and a count."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from jacond_plots import depth, prop2, sweep  # noqa: E402

INF = np.inf


def products():
    """timm: Eq. 8 regular, Eq. 9 singular in κ(J0) everywhere; mimetic: Eq. 8 singular in κ(J0)
    at L 3 only, Eq. 9 singular on the LN1 complement from L 2."""
    rows = []
    def add(init, eq, L, k, k_lo, j0):
        rows.append(dict(init=init, equation=eq, depth=L, rows=8, rank=8, kappa_ln1c=k, kappa_ln1c_lo=k_lo,
                         kappa_J0=j0, n=2, d=4, heads=1, hidden=8))
    for L in (1, 2, 3):
        add("timm", "eq8", L, 1.0 + L / 100, 1.0 + L / 100, 1e4)
        add("timm", "eq9", L, 1e5, 1e5, INF)
        add("mimetic", "eq8", L, 10.0 ** L, 10.0 ** L, INF if L == 3 else 10.0 ** (2 * L))
        add("mimetic", "eq9", L, 1e6 if L == 1 else INF, 3.5e13, INF if L > 1 else 1e8)
    return pd.DataFrame(rows)


def test_depth_names_exactly_the_singular_pairs_and_their_depths():
    df = products()
    assert depth.singular_pairs(df, "kappa_J0") == [("mimetic", "eq8", [3]), ("mimetic", "eq9", [2, 3]),
                                                    ("timm", "eq9", [1, 2, 3])]
    assert depth.singular_pairs(df, "kappa_ln1c") == [("mimetic", "eq9", [2, 3])]
    assert depth.depth_runs([1, 2, 3, 5, 7, 8]) == "1–3, 5, 7–8"
    fig = depth.draw(df)
    top_left, _, bottom_left, _ = fig.axes
    title = bottom_left.get_title().replace("\u00a0", " ")
    assert "mimetic, Eq. 8 (skip) at L 3" in title and "mimetic, Eq. 9 (skipless) at L 2–3" in title
    assert "timm, Eq. 9 (skipless) at L 1–3" in title
    assert "timm, Eq. 8" not in title and "not drawn" not in title
    left_title = top_left.get_title().replace("\u00a0", " ")
    assert "mimetic, Eq. 9 (skipless) at L 2–3" in left_title and "timm" not in left_title
    plt.close(fig)


def test_depth_draws_singular_j0_points_hollow_on_a_marked_level_or_at_their_kappa_lo():
    df = products()
    values, singular, level = depth.j0_drawn(df)
    assert singular.sum() == 6 and np.isfinite(values).all()
    # half a decade above the largest finite κ's decade (1e8 -> 10^8.5), between ticks: a position only
    assert level == pytest.approx(10 ** 8.5) and (values[singular] == level).all()
    fig = depth.draw(df)
    bottom_left = fig.axes[2]
    hollow = [c for c in bottom_left.collections
              if len(c.get_offsets()) and (np.asarray(c.get_facecolor()).size == 0
                                            or np.allclose(np.asarray(c.get_facecolor())[:, 3], 0))]
    assert sum(len(c.get_offsets()) for c in hollow) == 6
    assert all(np.allclose(np.asarray(c.get_offsets())[:, 1], level) for c in hollow)
    # the mimetic Eq. 8 line reaches its singular L 3 point instead of ending at L 2
    mimetic_eq8 = [ln for ln in bottom_left.get_lines() if ln.get_label() == "mimetic, Eq. 8 (skip)"][0]
    assert list(mimetic_eq8.get_xdata()) == [1, 2, 3] and mimetic_eq8.get_ydata()[2] == pytest.approx(level)
    plt.close(fig)
    # a table that gives κ_lo for ∂F/∂θ⁽⁰⁾: the hollow points sit there, no level is drawn
    df["kappa_J0_lo"] = np.where(np.isfinite(df["kappa_J0"]), df["kappa_J0"], 4e12)
    values, singular, level = depth.j0_drawn(df)
    assert level is None and (values[singular] == 4e12).all()


def test_depth_legend_covers_no_panel():
    grads = pd.DataFrame(dict(init=["timm"] * 4, stack=["plain", "plain", "residual", "residual"],
                              layer=[0, 1, 0, 1], grad_x_norm=[0.1, 1.0, 1.0, 1.0]))
    fig = depth.draw(products(), grads)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer))
    plt.close(fig)


def sweep_rows(seeds):
    return pd.DataFrame([dict(alpha=a, beta=b, c=3.0, seed=s, matrix="K_sa", space="full", status="exact",
                              kappa=10.0 ** (a + b + s), kappa_lo=10.0 ** (a + b + s))
                         for a in (1.0, 2.0) for b in (0.0, 1.0) for s in seeds])


def test_sweep_colour_bar_says_one_seed_or_median_over_n():
    one, three = sweep_rows([0]), sweep_rows([0, 1, 2])
    _, kinds = sweep.cell_grid(one)
    assert sweep.seeds_per_cell(one) == [1]
    assert sweep.colour_label(kinds, sweep.seeds_per_cell(one)) == "log10 κ (1 seed)"
    assert sweep.seeds_per_cell(three) == [3]
    assert sweep.colour_label(kinds, sweep.seeds_per_cell(three)) == "log10 κ (median over 3 seeds)"
    uneven = three[~((three["alpha"] == 1.0) & (three["beta"] == 0.0) & (three["seed"] > 0))]
    assert sweep.colour_label(kinds, sweep.seeds_per_cell(uneven)) == "log10 κ (median over 1–3 seeds)"


def test_sweep_figure_colour_bar_for_a_one_seed_table(tmp_path):
    df = sweep_rows([0]).assign(n=4, d=8, heads=1, skip="none")
    df.to_csv(tmp_path / "sweep.csv", index=False)
    captured = {}
    real = plt.Figure.colorbar
    def spy(self, mappable, **kw):
        captured.setdefault("labels", []).append(kw.get("label"))
        return real(self, mappable, **kw)
    plt.Figure.colorbar = spy
    try:
        sweep.plot(str(tmp_path), ["png"])
    finally:
        plt.Figure.colorbar = real
    assert captured["labels"] == ["log10 κ (1 seed)"]


def test_a_sweep_of_an_init_without_knobs_draws_kappa_per_seed(tmp_path, saved_figures):
    """timm's sweep has nan alpha, beta, c (its grid is the seeds): the heatmap had no cell and
    failed with an IndexError; per_seed draws each seed's κ by status (a singular one at κ_lo)."""
    rows = [dict(init="timm", alpha=np.nan, beta=np.nan, c=np.nan, seed=s, matrix=m, space="full", status=st,
                 kappa=k, kappa_lo=lo, kappa_hi=k, n=4, d=8, heads=2, skip="none")
            for s, st, k, lo in ((0, "exact", 1e5, 1e5), (1, "singular", INF, 3e12), (2, "exact", 2e6, 2e6))
            for m in ("K_sa", "K_sab")]
    pd.DataFrame(rows).to_csv(tmp_path / "sweep.csv", index=False)
    figures = saved_figures(sweep)
    paths = sweep.plot(str(tmp_path), ["png"])
    assert list(figures) == ["sweep_seeds"] and paths
    for ax in figures["sweep_seeds"].axes:
        assert ax.get_yscale() == "log" and ax.get_xlabel() == "seed"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["exact", "singular (κ ≥ κ_lo)"]
        exact, singular = ax.collections[:2]
        assert np.allclose(exact.get_offsets(), [[0, 1e5], [2, 2e6]])
        assert np.allclose(singular.get_offsets(), [[1, 3e12]])


def prop2_rows():
    rows = []
    for seed in (1, 2):
        for beta, holds in ((0.3, False), (0.6, False), (1.0, False), (3.0, True)):
            k = 1.05 + seed / 100 if holds else 1e4
            rows.append(dict(experiment="beta-sweep", init="ours", beta=beta, seed=seed, n=4, d=8, heads=1,
                             kappa_K=k, kappa_B=1.001 if holds else 1e2, sigma_min_B=9.0 if holds else 0.1,
                             e_norm=0.5 if holds else 50.0, premise=holds,
                             weyl_lo=0.9 if holds else np.nan, weyl_hi=1.2 if holds else np.nan))
        rows.append(dict(experiment="beta-sweep", init="timm", beta=np.nan, seed=seed, n=4, d=8, heads=1,
                         kappa_K=1e8, kappa_B=1e7, sigma_min_B=1e-9, e_norm=1e-4, premise=False,
                         weyl_lo=np.nan, weyl_hi=np.nan))
    return pd.DataFrame(rows)


def test_prop2_labels_beta_in_the_legend_and_draws_capped_weyl_brackets():
    fig = prop2.draw(prop2_rows())
    left, middle, right = fig.axes
    assert not left.texts and not middle.texts  # no β text piled on the points
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [lab for lab in labels if "β" in lab] == ["ours, β 0.3", "ours, β 0.6", "ours, β 1", "ours, β 3"]
    # one error bar with caps per row where the premise holds, spanning [weyl_lo, weyl_hi]
    bars = [c for c in right.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
    assert len(bars) == 1
    _, caps, (segments,) = bars[0].lines
    assert len(caps) == 2 and caps[0].get_markersize() > 0
    spans = sorted(tuple(np.round(seg[:, 1], 6)) for seg in segments.get_segments())
    assert spans == [(0.9, 1.2), (0.9, 1.2)]
    assert "2 of 10 rows" in right.get_title()
    # the β 3 points wear the legend's β 3 marker in the bracket panel too
    beta3 = [h for h in prop2.legend_handles(prop2_rows()) if h.get_label() == "ours, β 3"][0]
    assert bars[0].lines[0].get_marker() == beta3.get_marker()
    plt.close(fig)


def test_prop2_says_so_where_the_premise_holds_nowhere():
    df = prop2_rows()
    df = df[~df["premise"]]
    fig = prop2.draw(df)
    right = fig.axes[2]
    assert not right.containers and "holds nowhere" in right.get_title()
    assert any("no Weyl bracket" in t.get_text() for t in right.texts)
    plt.close(fig)


def write_run(directory, command):
    directory.mkdir()
    (directory / "run.json").write_text(json.dumps({"command": command}))
    return str(directory)


def test_a_figure_of_several_runs_is_captioned_with_their_merged_command(tmp_path):
    """The flags the runs share once, a differing value as {a|b}, --out as the number of directories, a
    flag only some runs give in brackets where it stands; runs that are not one subcommand with --flag
    arguments fall back to the first command and a count."""
    from jacond_plots.common import merged_command
    a = write_run(tmp_path / "a", ["jacond", "train", "--skip", "full", "--steps", "100", "--out", "r/a"])
    b = write_run(tmp_path / "b", ["jacond", "train", "--skip", "none", "--steps", "100", "--out", "r/b"])
    c = write_run(tmp_path / "c", ["jacond", "train", "--skip", "none", "--steps", "100", "--out", "r/c"])
    assert merged_command([a, b, c]) == "jacond train --skip {full|none} --steps 100 --out {3 directories}"
    assert merged_command([a]) == "jacond train --skip full --steps 100 --out r/a"
    seeded = [write_run(tmp_path / f"s{seed}", ["jacond", "train", "--skip", "none", "--seed", str(seed), "--steps",
                                                "100", "--checkpoint-init", "--out", f"r/s{seed}"]) for seed in (1, 2)]
    assert merged_command([a, b, *seeded]) == \
        "jacond train --skip {full|none} [--seed {1|2}] --steps 100 [--checkpoint-init] --out {4 directories}"
    # Flags added by different runs after the same flag keep their order of first appearance; --seed=2 is --seed 2.
    x = write_run(tmp_path / "x", ["jacond", "train", "--skip", "full", "--x", "3", "--steps", "100", "--out", "r/x"])
    y = write_run(tmp_path / "y", ["jacond", "train", "--skip", "full", "--y", "4", "--steps", "100", "--out", "r/y"])
    z = write_run(tmp_path / "z", ["jacond", "train", "--skip", "full", "--steps", "100", "--seed=2", "--out", "r/z"])
    assert merged_command([a, x, y, z]) == \
        "jacond train --skip full [--x 3] [--y 4] --steps 100 [--seed 2] --out {4 directories}"
    other = write_run(tmp_path / "d", ["jacond", "train", "--skip", "full", "--augment", "1", "--out", "r/d"])
    assert merged_command([a, other]) == "jacond train --skip full [--steps 100] [--augment 1] --out {2 directories}"
    for odd in (["jacond", "verify", "--skip", "full", "--out", "r/f"],              # another subcommand
                ["jacond", "train", "runs/x", "--skip", "full", "--out", "r/g"],     # a positional argument
                ["jacond", "train", "--skip", "full", "--skip", "none", "--out", "r/h"],  # a repeated flag
                ["jacond", "train", "--skip", "--steps", "100", "--out", "r/i"]):    # --skip as a switch here
        run = write_run(tmp_path / odd[-1].replace("/", "-"), odd)
        assert merged_command([a, run]) == "jacond train --skip full --steps 100 --out r/a   |   and 1 more run(s)", odd
    unknown = str(tmp_path / "no-run-json")
    assert merged_command([unknown, a]).startswith("command unknown (no readable run.json or verify.json)   |   and 1")
    quoted = write_run(tmp_path / "e", "jacond train --out 'r/e")  # a stored string with an unbalanced quote
    assert merged_command([quoted, a]) == "jacond train --out 'r/e   |   and 1 more run(s)"
