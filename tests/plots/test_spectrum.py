"""jacond_plots.spectrum's dense figure: a singular matrix (run.json's result.status) has κ = ∞, never
σ_max/σ_min of the rounding noise, and its singular values below the rank cutoff are drawn apart (grey,
hatched, in a shaded band), not as the matrix's spectrum."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from jacond_plots import spectrum  # noqa: E402

SIGMA = [60.0, 5.0, 0.3, 2e-3, 1e-15, 3e-16]  # rank 4: the last two are rounding noise


def drawn(tmp_path, saved_figures, result):
    """plot_dense's figure of SIGMA with run.json's `result`, kept as it is saved (and still written)."""
    pd.DataFrame({"index": range(len(SIGMA)), "sigma": SIGMA}).to_csv(tmp_path / "spectrum.csv", index=False)
    (tmp_path / "run.json").write_text(json.dumps({"matrix": "E_sa", "init": "ours", "skip": "none", "result": result}))
    captured = saved_figures(spectrum)
    spectrum.plot_dense(str(tmp_path), ("png",))
    return captured["spectrum"]


def test_a_singular_matrix_has_an_infinite_kappa_and_its_noise_is_drawn_apart(tmp_path, saved_figures):
    fig = drawn(tmp_path, saved_figures, {"status": "singular", "rank": 4, "method": "dense-svd"})
    ax = fig.axes[0]
    title = ax.get_title()
    assert "κ = ∞ (singular, rank 4 of 6)" in title
    assert f"{60.0 / 3e-16:.4g}" not in title and "σ_min 3e-16" not in title
    assert "smallest above the cutoff 0.002" in title
    data, noise = ax.containers
    assert sum(b.get_height() for b in noise) > 0
    assert all(b.get_hatch() == "//" for b in noise)
    assert all(np.allclose(b.get_facecolor()[:3], (0.6, 0.6, 0.6)) for b in noise)
    # each value in its own set (one density over both): the noise's bars hold the 2 values under the cutoff
    width = noise[0].get_width()
    assert sum(b.get_height() for b in noise) * width == pytest.approx(2 / 6)
    assert sum(b.get_height() for b in data) * width == pytest.approx(4 / 6)
    assert "2 values below the rank cutoff: rounding noise, not data" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


def test_a_full_rank_matrix_keeps_its_kappa_and_one_set_of_bars(tmp_path, saved_figures):
    fig = drawn(tmp_path, saved_figures, {"status": "exact", "rank": 6, "method": "dense-svd"})
    ax = fig.axes[0]
    assert f"κ {60.0 / 3e-16:.4g}" in ax.get_title() and "∞" not in ax.get_title()
    assert ax.get_legend() is None
    assert sum(b.get_height() for b in ax.containers[1]) == 0
    plt.close(fig)


def test_a_singular_matrix_of_unknown_rank_says_singular_without_a_cutoff(tmp_path, saved_figures):
    fig = drawn(tmp_path, saved_figures, {"status": "singular", "rank": -1})
    ax = fig.axes[0]
    assert ax.get_title().endswith("κ = ∞ (singular)")
    assert ax.get_legend() is None
    plt.close(fig)
