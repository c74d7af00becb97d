"""jacond_plots.always_skip against hand-built runs: a singular report (σ_min under the fp64 noise
floor) enters the per-step (lower) median of ln κ as +∞, so a step where more than half the reports
are singular has ln κ = inf, not ln κ_lo printed as if it were a value; the figure's series stays
finite (singular reports at κ_lo) and draws those steps hollow."""

import json

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jacond_plots import always_skip  # noqa: E402


def write_run(directory, skip, statuses_per_step):
    """A run with SA_out (skipless SAB) or SAB_out reports: at each step one report per status given,
    κ = 10^(i + 1) for the i-th non-singular one, and κ_lo = 1e14 for the singular ones."""
    rows = []
    sab = "SAB_out" if skip == "full" else "SA_out"
    ffn = "FFN_block_out"
    for step, statuses in statuses_per_step.items():
        for i, status in enumerate(statuses):
            singular = status == "singular"
            kappa = np.inf if singular else 10.0 ** (i + 1)
            for matrix in (sab, ffn):
                rows.append(dict(step=step, probe=i, layer=0, matrix=matrix, kappa=kappa,
                                 kappa_lo=1e14 if singular else kappa, status=status))
        rows.append(dict(step=step, probe=0, layer=0, matrix="X_in", kappa=5.0, kappa_lo=5.0, status="exact"))
    directory.mkdir()
    pd.DataFrame(rows).to_csv(directory / "conditioning.csv", index=False)
    (directory / "config.json").write_text(json.dumps({"model": {"skip": skip}}))
    return str(directory)


def drawn_figures(saved_figures, *args, **kwargs):
    """skip_ablation(*args, **kwargs)'s figures by name, kept as they are saved (and still written)."""
    captured = saved_figures(always_skip)
    always_skip.skip_ablation(*args, **kwargs)
    return captured


def test_a_median_over_more_than_half_singular_reports_is_infinite_not_ln_kappa_lo(tmp_path):
    run = write_run(tmp_path / "run", "no-sab-skip", {
        0: ["exact", "exact", "exact", "singular"],        # lower median of 10, 100, 1000, ∞: 100
        100: ["exact", "exact", "singular", "singular"],   # a tie: the finite half's largest, 100
        200: ["singular", "singular", "singular", "exact"]})
    t = always_skip.sub_block_kappa(run)
    assert np.isclose(t.loc[0, "sab"], np.log(100)) and np.isclose(t.loc[100, "sab"], np.log(100))
    assert t.loc[200, "sab"] == np.inf
    assert list(t["sab_singular"]) == [0.25, 0.5, 0.75]
    # What the figure draws: the same medians with singular reports at κ_lo = 1e14, finite.
    assert np.isclose(t.loc[100, "sab_drawn"], np.log(100))
    assert np.isclose(t.loc[200, "sab_drawn"], np.log(1e14))
    assert np.isclose(t.loc[0, "x_in"], np.log(5.0))


def test_the_figure_draws_singular_medians_hollow_and_finite_ones_filled(tmp_path, saved_figures):
    runs = {("no-sab-skip", "timm", "adamw"): write_run(tmp_path / "a", "no-sab-skip", {
                0: ["singular", "singular", "exact"], 100: ["exact", "exact", "singular"]}),  # 2 of 3, 1 of 3
            ("full", "timm", "adamw"): write_run(tmp_path / "b", "full", {
                0: ["exact", "exact", "exact"], 100: ["exact", "exact", "exact"]})}
    for directory in runs.values():
        pd.DataFrame({"step": [100], "test_acc": [0.8]}).to_csv(f"{directory}/eval.csv", index=False)
    ax = drawn_figures(saved_figures, runs, str(tmp_path / "out"))["skip_ablation_kappa"].axes[0]  # the SAB row
    hollow = [line for line in ax.lines if line.get_marker() == "o" and line.get_markerfacecolor() == "none"]
    hollow_steps = sorted(x for line in hollow for x in line.get_xdata())
    assert hollow_steps == [0]  # only the skipless run's step 0 has a singular median report
    assert all(np.isfinite(y) for line in ax.lines for y in line.get_ydata())


def test_the_kappa_figure_draws_the_lower_median_over_seeds_and_each_seed_thin(tmp_path, saved_figures):
    key = ("no-sab-skip", "timm", "adamw")
    seed_runs = [write_run(tmp_path / "s0", "no-sab-skip", {0: ["exact"], 100: ["exact"]}),                  # ln 10, ln 10
                 write_run(tmp_path / "s1", "no-sab-skip", {0: ["singular"], 100: ["exact", "exact"]}),      # ∞, ln 10
                 write_run(tmp_path / "s2", "no-sab-skip", {0: ["singular"], 100: ["exact"] * 3})]           # ∞, ln 100
    for directory in seed_runs:
        pd.DataFrame({"step": [100], "test_acc": [0.8]}).to_csv(f"{directory}/eval.csv", index=False)
    figure = drawn_figures(saved_figures, {key: seed_runs[0]}, str(tmp_path / "out"),
                           seeds={key: seed_runs[1:]})["skip_ablation_kappa"]
    ax = figure.axes[0]  # the SAB row
    median = next(line for line in ax.lines if line.get_label() == "w/o SAB skip")
    # step 0: two of three seeds singular, so the median is ∞, drawn at the seeds' κ_lo (1e14) and hollow;
    # step 100: the lower median of ln 10, ln 10, ln 100.
    assert np.allclose(median.get_ydata(), [np.log(1e14), np.log(10)])
    hollow = [line for line in ax.lines if line.get_marker() == "o" and line.get_markerfacecolor() == "none"]
    assert sorted(x for line in hollow for x in line.get_xdata()) == [0]
    thin = [line for line in ax.lines if line.get_alpha() == 0.35]
    assert len(thin) == 3 and sorted(line.get_ydata()[1] for line in thin) == sorted(np.log([10, 10, 100]))
    assert "then over 3 seeds" in figure._suptitle.get_text()


def test_the_accuracy_figure_draws_the_mean_over_seeds_and_each_seed(tmp_path, saved_figures):
    def run(name, accuracy):
        directory = write_run(tmp_path / name, "full", {0: ["exact"], 100: ["exact"]})
        pd.DataFrame({"step": [50, 100], "test_acc": [0.1, accuracy]}).to_csv(f"{directory}/eval.csv", index=False)
        return directory
    runs = {("full", "timm", "adamw"): run("seed0", 0.80)}
    seeds = {("full", "timm", "adamw"): [run("seed1", 0.86), run("seed2", 0.83)]}
    ax = drawn_figures(saved_figures, runs, str(tmp_path / "out"), seeds=seeds)["skip_ablation_accuracy"].axes[0]
    big = [line for line in ax.lines if line.get_markersize() == 8]
    small = [line for line in ax.lines if line.get_markersize() == 3]
    assert np.allclose(big[0].get_ydata(), [83.0])  # the mean of 80, 86, 83: not seed 0's 80
    assert sorted(small[0].get_ydata()) == [80.0, 83.0, 86.0]
    assert np.allclose(ax.collections[0].get_segments()[0][:, 1], [80.0, 86.0])  # the range bar
    assert [t.get_text() for t in ax.texts] == ["83.0"]


def test_the_eps_figure_joins_the_means_over_seeds_and_dots_each_seed(tmp_path, monkeypatch):
    rows = [dict(graying="none", eps=1.0, seed=s, accuracy=a) for s, a in enumerate([86.0, 88.0, 87.0])]
    rows += [dict(graying="svd", eps=0.7, seed=s, accuracy=a) for s, a in enumerate([88.0, 89.0, 87.0])]
    rows += [dict(graying="svd", eps=0.5, seed=0, accuracy=90.0)]
    table = pd.DataFrame(rows).assign(ln_kappa_in=5.0, ln_kappa_out=5.0)
    table.loc[(table["graying"] == "svd") & (table["eps"] == 0.7), "ln_kappa_in"] = [4.0, np.inf, 3.0]
    captured = {}
    def keep(fig, out_dir, name, formats):
        captured[name] = fig
        return []
    monkeypatch.setattr(always_skip, "save", keep)
    always_skip.eps_ablation(table, str(tmp_path))
    ax = captured["eps_ablation"].axes[0]  # accuracy
    line = next(l for l in ax.lines if l.get_label().startswith("svd-TG (mean over seeds"))
    assert list(line.get_xdata()) == [0.5, 0.7, 1.0] and np.allclose(line.get_ydata(), [90.0, 88.0, 87.0])
    hollow = [l for l in ax.lines if l.get_marker() == "o" and l.get_markerfacecolor() == "white"]
    assert [list(l.get_xdata()) for l in hollow] == [[0.5]]  # the one ε run at one seed only
    dots = sorted((x, y) for l in ax.lines if l.get_markersize() == 2.5 for x, y in zip(l.get_xdata(), l.get_ydata()))
    assert dots == [(0.7, 87.0), (0.7, 88.0), (0.7, 89.0), (1.0, 86.0), (1.0, 87.0), (1.0, 88.0)]  # ε 0.5: one seed
    # ln κ_in: the lower median over seeds, finite while at most half the seeds' medians are singular.
    median = next(l for l in captured["eps_ablation"].axes[1].lines if l.get_label().startswith("svd-TG (median over seeds"))
    assert np.allclose(median.get_ydata(), [5.0, 4.0, 5.0])


def test_the_eps_figure_at_init_adds_a_panel_of_kappa_in_before_the_first_step_without_the_papers_line(tmp_path, monkeypatch):
    rows = [dict(graying="none", eps=1.0, seed=s, ln_kappa_in_init=4.7 + 0.1 * s) for s in range(3)]
    rows += [dict(graying="svd", eps=0.5, seed=s, ln_kappa_in_init=4.2 + 0.1 * s) for s in range(3)]
    table = pd.DataFrame(rows).assign(accuracy=80.0, ln_kappa_in=5.0, ln_kappa_out=5.0)
    captured = {}
    def keep(fig, out_dir, name, formats):
        captured[name] = fig
        return [name]
    monkeypatch.setattr(always_skip, "save", keep)
    assert always_skip.eps_ablation(table, str(tmp_path), name="span", at_init=True, title="At d = 16") == ["span"]
    axes = captured["span"].axes
    assert [ax.get_ylabel() for ax in axes][:2] == ["final test accuracy (%)", "ln κ_in before the first step"]
    assert len(axes) == 4 and captured["span"]._suptitle.get_text().startswith("At d = 16 (paper")
    median = next(l for l in axes[1].lines if l.get_label().startswith("svd-TG (median over seeds"))
    assert np.allclose(median.get_ydata(), [4.3, 4.8])  # lower medians at ε 0.5 and 1 (4.2, 4.3, 4.4; 4.7, 4.8, 4.9)
    assert not any(l.get_label().startswith("paper") for l in axes[1].lines)  # the paper's values are after training
    assert any(l.get_label().startswith("paper") for l in axes[2].lines)
    always_skip.eps_ablation(table, str(tmp_path), name="bare", at_init=True, paper=False)
    assert not any(l.get_label().startswith("paper") for ax in captured["bare"].axes for l in ax.lines)
