"""The recipes' summaries never take a not-converged row's `kappa` (the solver's last estimate; only
κ ≥ κ_lo is known) as a κ: the sweep's sensitivity verdict and the audit's per-checkpoint median. And
where the recipes look for what they summarise: the audit recipe's training runs, the scale page's GPU
numbers."""

import numpy as np
import pandas as pd
import pytest

from jacond_recipes import audit, common, scale, sweep


def sweep_rows(status_at_choice):
    """A 3 × 3 grid around (α, β) = (2, 0.6) at c = 3, κ growing along α; the paper's point has
    `status_at_choice` with an estimate that would make the neighbourhood look flat."""
    rows = []
    for alpha in (1.5, 2.0, 2.5):
        for beta in (0.1, 0.6, 1.1):
            at_choice = alpha == 2.0 and beta == 0.6
            rows.append(dict(alpha=alpha, beta=beta, c=3.0, seed=0, matrix="K_sa", space="full",
                             status=status_at_choice if at_choice else "exact",
                             kappa=1e3 if at_choice else 10 ** (2 * alpha), kappa_lo=1e2 if at_choice else 10 ** (2 * alpha)))
    return pd.DataFrame(rows)


def test_sensitivity_is_undecided_where_a_point_near_the_choice_did_not_converge():
    decided = sweep.sensitivity(sweep_rows("exact"), "K_sa")
    assert decided["ratio near the choice"] == 10 ** 5 / 10 ** 3
    undecided = sweep.sensitivity(sweep_rows("not-converged"), "K_sa")
    assert undecided["points near (2, 0.6, 3)"] == 9
    assert np.isnan(undecided["ratio near the choice"])


def test_the_audit_median_is_withheld_when_a_layer_did_not_converge():
    at = pd.DataFrame(dict(matrix="K_sa", space="full", status=["exact", "exact", "singular"],
                           kappa=[10.0, 30.0, np.inf], kappa_lo=[10.0, 30.0, 1e12]))
    assert audit.median_kappa(at, "K_sa") == "30 (1/3 singular)"  # the singular layer does not decide it
    # Two of four singular: the median is the mean of 30 and a κ known only as ≥ 1e12.
    four = pd.concat([at, at.iloc[[2]].assign(kappa_lo=2e12)], ignore_index=True)
    assert audit.median_kappa(four, "K_sa") == "≥ 5e+11 (2/4 singular)"
    at.loc[0, "status"] = "not-converged"
    assert audit.median_kappa(at, "K_sa") == "? (1/3 not converged)"


def test_sensitivity_is_decided_seed_by_seed():
    def grid(slopes):  # seed s's κ grows like 10^(slope_s · (α − 1.5)) along α, times a per-seed level
        return pd.DataFrame([dict(alpha=alpha, beta=beta, c=3.0, seed=seed, matrix="K_sa", space="full", status="exact",
                                  kappa=(seed + 1) * 10 ** (slope * (alpha - 1.5)), kappa_lo=1.0)
                             for alpha in (1.5, 2.0, 2.5) for beta in (0.1, 0.6, 1.1)
                             for seed, slope in enumerate(slopes)])
    every = sweep.sensitivity(grid([1.2, 1.5, 2.0]), "K_sa")  # each seed moves 10^1.2 … 10^2 ≥ 10×
    assert np.isclose(every["per-seed ratio near the choice: min"], 10 ** 1.2) and every["seeds"] == 3
    assert "**sensitive** (≥ 10× in every seed)" in sweep.sensitivity_verdict(every)
    mixed = sweep.sensitivity(grid([0.5, 1.5, 2.0]), "K_sa")  # one seed moves only 10^0.5
    assert "undecided: some seeds move ≥ 10×, others less." in sweep.sensitivity_verdict(mixed)
    flat = sweep.sensitivity(grid([0.2, 0.5, 0.9]), "K_sa")
    assert "**not highly sensitive** (< 10× in every seed)" in sweep.sensitivity_verdict(flat)
    assert "(one seed)" in sweep.sensitivity_verdict(sweep.sensitivity(grid([2.0]), "K_sa"))


def test_the_audit_recipe_finds_the_training_runs_beside_its_own_work_folder(tmp_path, monkeypatch):
    """With --work W the training recipe's runs are W/../training, wherever the command is started
    (not results/recipes/training under the current directory)."""
    runs = tmp_path / "root" / "training"
    for slug in ("skipless-ours-adamw", "skip-adamw"):
        (runs / slug).mkdir(parents=True)
        (runs / slug / "config.json").write_text("{}")
    (runs / "seed-1" / "skip-adamw").mkdir(parents=True)  # other seeds: not audited
    (runs / "seed-1" / "skip-adamw" / "config.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "results" / "recipes" / "training" / "other").mkdir(parents=True)
    (elsewhere / "results" / "recipes" / "training" / "other" / "config.json").write_text("{}")
    monkeypatch.chdir(elsewhere)
    r = common.Recipe("audit", str(tmp_path / "out"), str(tmp_path / "root" / "audit"), False, 1)
    assert audit.runs_to_audit(r) == [str(runs / "skip-adamw"), str(runs / "skipless-ours-adamw")]
    empty = common.Recipe("audit", str(tmp_path / "out"), str(tmp_path / "none" / "audit"), False, 1)
    with pytest.raises(common.RecipeError, match=f"no training runs under {tmp_path}/none/training: run "
                                                 f"`jacond recipe training --work {tmp_path}/none/training` first"):
        audit.runs_to_audit(empty)


def test_the_scale_page_points_at_the_gpu_page_for_the_gpu_numbers():
    report = common.Report("scale")
    scale.gpu_section(report)
    text = report.markdown()
    assert "## 5. On a GPU (issue 11): reports/gpu" in text
    assert "[reports/gpu](../gpu/README.md)" in text and "**no GPU number**" in text
    assert "no session has yet had a GPU" not in text and "not measured yet" not in text
