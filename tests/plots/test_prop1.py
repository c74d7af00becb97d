"""jacond_plots.prop1 against hand-built tables: a legend lists only what the panel draws. The lower
bound 1/(e^{Δ/τ} − 1) is drawn where it is > 1; where it is ≤ 1 at every β (as in the committed run)
the β panel had its legend entry with no line, and now says in its title that it is not drawn."""

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jacond_plots import prop1  # noqa: E402


def tables(tmp_path, beta_lower, n_lower, upper=2.0):
    draws = []
    for beta in (0.0, 1.0, 2.0):
        for seed in range(3):
            draws.append(dict(experiment="beta", n=10, alpha=0.1, beta=beta, kappa=10.0 / (1 + beta) + seed,
                              upper_bound=upper if beta > 0 else np.inf, lower_bound=beta_lower))
    for n in (10, 20, 40):
        for seed in range(3):
            draws.append(dict(experiment="n", n=n, alpha=0.1, beta=0.0, kappa=100.0 * n + seed, upper_bound=np.inf,
                              lower_bound=n_lower))
    pd.DataFrame(draws).to_csv(tmp_path / "prop1_draws.csv", index=False)
    examples = [dict(example=e, beta=b, kappa=k, row=i, col=j, value=0.1) for e, b, k in (("peak", 5, 1.1), ("diffuse", 0, 1e3))
                for i in range(2) for j in range(2)]
    pd.DataFrame(examples).to_csv(tmp_path / "prop1_examples.csv", index=False)


def legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_bound_with_nothing_to_draw_has_no_legend_entry_and_is_named_in_the_title(tmp_path, saved_figures):
    tables(tmp_path, beta_lower=0.5, n_lower=3.0)
    figures = saved_figures(prop1)
    prop1.plot(str(tmp_path), ("png",))
    beta_ax, n_ax = figures["prop1"].axes[-2:]
    assert not any("lower bound" in t for t in legend(beta_ax))
    assert "lower bound 1/(e^{Δ/τ} − 1) ≤ 1 at every β: not drawn" in beta_ax.get_title()
    assert any("lower bound" in t for t in legend(n_ax))  # drawn there: > 1
    assert "not drawn" not in n_ax.get_title()
    assert len(beta_ax.get_legend().get_texts()) == len(beta_ax.get_lines()) + len(beta_ax.collections)


def test_every_drawn_bound_keeps_its_legend_entry(tmp_path, saved_figures):
    tables(tmp_path, beta_lower=3.0, n_lower=3.0)
    figures = saved_figures(prop1)
    prop1.plot(str(tmp_path), ("png",))
    beta_ax = figures["prop1"].axes[-2]
    assert any("lower bound" in t for t in legend(beta_ax)) and any("upper bound" in t for t in legend(beta_ax))
    assert "not drawn" not in beta_ax.get_title()


def test_an_upper_bound_that_says_nothing_anywhere_has_no_legend_entry(tmp_path, saved_figures):
    tables(tmp_path, beta_lower=3.0, n_lower=3.0, upper=np.inf)
    figures = saved_figures(prop1)
    prop1.plot(str(tmp_path), ("png",))
    beta_ax = figures["prop1"].axes[-2]
    assert not any("upper bound" in t for t in legend(beta_ax))
    assert "upper bound (1+ε)/(1−ε): ε ≥ 1 at every β, not drawn" in beta_ax.get_title()


def test_a_bound_above_1_at_one_point_only_is_visible(tmp_path, saved_figures):
    """The committed run: the lower bound is > 1 at β = 0 only. A dashed line through one point draws
    nothing, while the legend listed it; it is drawn with a marker."""
    tables(tmp_path, beta_lower=0.5, n_lower=3.0)
    draws = pd.read_csv(tmp_path / "prop1_draws.csv")
    draws.loc[(draws["experiment"] == "beta") & (draws["beta"] == 0.0), "lower_bound"] = 1.8
    draws.to_csv(tmp_path / "prop1_draws.csv", index=False)
    figures = saved_figures(prop1)
    prop1.plot(str(tmp_path), ("png",))
    beta_ax = figures["prop1"].axes[-2]
    (line,) = [line for line in beta_ax.get_lines() if line.get_label().startswith("lower bound")]
    assert list(line.get_ydata()) == [1.8] and line.get_marker() not in ("None", "", None)
    assert "not drawn" not in beta_ax.get_title()
