"""The lemma1 page names the statistic of each number it gives: its own findings are medians over seeds,
while `jacond verify lemma1`'s checks and notes, pasted beside them, are geometric means over seeds (the
α ratio at the largest β: 1.00, 1.23, 1.93 of the medians against 1.00, 1.18, 1.72 of the geometric
means on the committed page)."""

import json

import numpy as np
import pandas as pd

from jacond_recipes import common, lemma1
from test_recipe_runner import fake_jacond


def lemma1_rows():
    """α 1, 2, 4, β 0 … 12, three seeds whose norms are spread so that the median over seeds and the
    geometric mean differ: seed factors 1, 2, 8 (median 2, geometric mean 16^(1/3) ≈ 2.52) at α = 1 and
    1, 2, 2 at the other α."""
    rows = []
    for alpha in (1.0, 2.0, 4.0):
        factors = (1.0, 2.0, 8.0) if alpha == 1.0 else (1.0, 2.0, 2.0)
        for beta in range(13):
            for seed, f in enumerate(factors):
                gamma = 0.5 * beta
                norm = f * alpha * np.exp(-0.5 * beta)
                rows.append(dict(alpha=alpha, beta=float(beta), seed=seed, n=16, d=32, gamma=gamma,
                                 norm_dA_dM=0.1 * norm, bound_dA_dM=30 * np.exp(-gamma) if gamma > 0 else np.nan,
                                 norm_dA_dX=norm, alpha_exp_minus_beta=alpha * np.exp(-beta)))
    return pd.DataFrame(rows)


def test_the_page_says_which_numbers_are_medians_and_which_geometric_means(tmp_path):
    lemma1_rows().to_csv(tmp_path / "lemma1.csv", index=False)
    (tmp_path / "verify.json").write_text(json.dumps({"claims": [{"claim": "lemma1", "checks": [
        {"check": "slope", "pass": True, "detail": "fitted d log||dA/dM|| / d beta = -0.5"}],
        "notes": ["at beta = 12, alpha 1: ||dA/dX||_2 0.0062"]}]}))
    jacond, _ = fake_jacond(tmp_path, f'if [ "$1" = verify ]; then mkdir -p "${{@: -1}}"; '
                                      f'cp {tmp_path}/lemma1.csv {tmp_path}/verify.json "${{@: -1}}"; fi')
    r = common.Recipe("lemma1", str(tmp_path / "out"), str(tmp_path / "work"), False, 1)
    r.jacond = jacond
    lemma1.run(r)
    page = (tmp_path / "out" / "README.md").read_text()
    # at β = 12, over e^-6: α = 1 has median 2, geometric mean 16^(1/3); α = a > 1 median 2a, geometric mean a·4^(1/3)
    median_ratio, geo_ratio = 2 * 2 / 2, 2 * 4 ** (1 / 3) / 16 ** (1 / 3)
    assert (f"is in the ratio 1.00, {median_ratio:.2f}, {2 * median_ratio:.2f} of the medians over seeds "
            f"(1.00, {geo_ratio:.2f}, {2 * geo_ratio:.2f} of the geometric means") in " ".join(page.split())
    checks = page.split("## Checks")[1].split("## Figure")[0]
    assert "**geometric mean over seeds**" in checks and "**median over seeds**" in checks
    notes = page.split("## Notes of `jacond verify lemma1`")[1]
    assert "**geometric mean over seeds**" in notes.split("> at beta = 12")[0]
    assert "slope -0.50 per unit β at α = 2 (fitted to the\n  medians over seeds" in page
    assert "`jacond recipe lemma1 --threads 1 --out " in page
