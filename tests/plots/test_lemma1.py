"""jacond_plots.lemma1 against hand-built rows: the proof's bound 2(n−1)e^{−γ} is drawn only at the β
where every seed is diagonally dominant (γ > 0; elsewhere the bound says nothing), the points are the
medians over seeds, and the α e^{−β} reference sits beside ∂A/∂X."""

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jacond_plots import lemma1  # noqa: E402


def rows():
    out = []
    for alpha in (1.0, 2.0):
        for beta in (0.0, 1.0, 2.0, 3.0):
            for seed, gamma in enumerate((0.5 * beta - 0.2, 0.5 * beta + 0.1, 0.5 * beta + 0.3)):
                bound = 2 * 15 * np.exp(-gamma) if gamma > 0 else np.nan
                out.append(dict(alpha=alpha, beta=beta, seed=seed, n=16, d=32, gamma=gamma,
                                norm_dA_dM=0.1 * np.exp(-gamma) * (seed + 1), bound_dA_dM=bound,
                                norm_dA_dX=0.2 * np.exp(-gamma), alpha_exp_minus_beta=alpha * np.exp(-beta)))
    return pd.DataFrame(out)


def test_the_bound_is_drawn_where_every_seed_is_dominant_and_points_are_medians(tmp_path, monkeypatch):
    rows().to_csv(tmp_path / "lemma1.csv", index=False)
    figures = {}
    original = lemma1.save
    monkeypatch.setattr(lemma1, "save", lambda fig, d, name, formats: figures.setdefault(name, fig) and original(fig, d, name, formats))
    lemma1.plot(str(tmp_path), ("png",))
    left, middle, _ = figures["lemma1"].axes[:3]
    bounds = [line for line in left.lines if line.get_linestyle() == "--"]
    assert len(bounds) == 2  # one per α
    # γ of seed 0 is 0.5β − 0.2: negative at β = 0 only, so the bound starts at β = 1.
    assert list(bounds[0].get_xdata()) == [1.0, 2.0, 3.0]
    medians = [line for line in left.lines if line.get_linestyle() == "-"]
    d = rows()
    at = d[(d["alpha"] == 1.0) & (d["beta"] == 2.0)]["norm_dA_dM"].median()
    assert np.isclose(medians[0].get_ydata()[2], at)
    references = [line for line in middle.lines if line.get_linestyle() == ":"]
    assert np.allclose(references[1].get_ydata(), 2.0 * np.exp(-np.array([0.0, 1.0, 2.0, 3.0])))
    assert (tmp_path / "figures" / "lemma1.png").is_file()
