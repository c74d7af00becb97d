"""The recipes' summaries never take a not-converged row's `kappa` (the solver's last estimate; only
κ ≥ κ_lo is known) as a κ: the sweep's sensitivity verdict and the audit's per-checkpoint median. And
where the recipes look for what they summarise: the audit recipe's training runs, the scale page's GPU
numbers."""

import re

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
    # Two of four singular: the median of log κ is between 30 and a κ known only as ≥ 1e12: ≥ √(30·1e12).
    four = pd.concat([at, at.iloc[[2]].assign(kappa_lo=2e12)], ignore_index=True)
    assert audit.median_kappa(four, "K_sa") == "≥ 5.48e+06 (2/4 singular)"
    at.loc[0, "status"] = "not-converged"
    assert audit.median_kappa(at, "K_sa") == "? (1/3 not converged)"


def test_the_audit_median_over_an_even_count_of_layers_is_the_median_of_log_kappa():
    """κ 2 and 1000: the geometric middle, 44.7, as the audit figure draws its lines, not pandas' 501."""
    at = pd.DataFrame(dict(matrix="K_sa", space="full", status="exact", kappa=[2.0, 1000.0], kappa_lo=[2.0, 1000.0]))
    assert audit.median_kappa(at, "K_sa") == "44.7"


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


AUDIT_CSV = """checkpoint,step,probe,layer,matrix,space,head,method,status,kappa,kappa_lo,kappa_hi
c/step-0000000,0,0,0,K_sa,full,all,dense,exact,10,10,10
c/step-0000000,0,0,0,K_sab,full,all,dense,exact,20,20,20
c/step-0000000,0,none,0,W_VO,full,all,dense,exact,1,1,1
c/step-0000006,6,0,0,K_sa,full,all,dense,exact,30,30,30
c/step-0000006,6,0,0,K_sab,full,all,dense,exact,40,40,40
c/step-0000006,6,none,0,W_VO,full,all,dense,exact,2,2,2
"""


def test_each_audit_page_lists_only_the_commands_behind_it(tmp_path):
    """Two training runs: each run's page lists its own two audits and two plots, once (the first page
    listed every run's audits and its own twice: it kept a reference to the list run_many extends)."""
    from test_recipe_runner import fake_jacond
    runs = tmp_path / "root" / "training"
    for slug in ("skip-adamw", "skipless-ours-adamw"):
        (runs / slug).mkdir(parents=True)
        (runs / slug / "config.json").write_text("{}")
    (tmp_path / "audit.csv").write_text(AUDIT_CSV)
    # audit copies the table into its --out (the last argument); plot draws nothing
    jacond, _ = fake_jacond(tmp_path, f'if [ "$1" = audit ]; then mkdir -p "${{@: -1}}"; '
                                      f'cp {tmp_path}/audit.csv "${{@: -1}}/audit.csv"; fi')
    out, work = tmp_path / "out", tmp_path / "root" / "audit"
    r = common.Recipe("audit", str(out), str(work), False, 1)
    r.jacond = jacond
    audit.run(r)
    for slug in ("skip-adamw", "skipless-ours-adamw"):
        page = (out / f"{slug}.md").read_text()
        listed = page.split("## Reproduce")[1].split("```")[1].strip().splitlines()
        assert listed == [
            f"jacond audit {runs / slug} --matrices K_sa,K_sab,softmax --threads 1 --out {work / slug / 'with-data'}",
            f"jacond audit {runs / slug} --data-free --threads 1 --out {work / slug / 'data-free'}",
            f"jacond plot {work / slug / 'with-data'} --format png",
            f"jacond plot {work / slug / 'data-free'} --format png"]


def test_the_scale_page_dense_section_names_no_gpu_number():
    """Section 1 runs on the CPU: where it mentions the GPU's ViT-B runs it links reports/gpu and quotes
    none of their numbers (a GPU name, a date, gigabytes), which section 5 says this page does not hold."""
    df = pd.DataFrame([
        dict(N=1024, n=16, d=64, heads=4, init="ours", route="torch", method="svdvals", total_s=2.0, torch_over_this=1.0,
             kappa=1e3, status="exact", agree_with_torch="", agree_with_cpu_exact=""),
        dict(N=1024, n=16, d=64, heads=4, init="ours", route="jacond-exact-kappa", method="dense", total_s=0.2,
             torch_over_this=10.0, kappa=1e3, status="exact", agree_with_torch="PASS", agree_with_cpu_exact="PASS")])
    report = common.Report("scale")
    scale.dense_section(None, report, df)
    text = report.markdown()
    assert "[reports/gpu](../gpu/README.md)" in text
    assert "H200" not in text and "2026-" not in text
    assert not re.search(r"\d\s*GB", text)
