"""The always-skip recipe's verdicts: Prop. 4.2 per init from prop41.csv's paired draws (with and
without the skip), and ln κ of a singular median printed as "singular", never as a number."""

import numpy as np
import pandas as pd

from jacond_recipes import always_skip


def draws():
    """prop41.csv rows for two inits, three draws each: `timm` gains 1000× from the skip (‖M‖ 0.5),
    `ours` 1.5× (‖M‖ 2000); softmax gains 10× and 2×."""
    rows = []
    for init, gain, norm_m, kappa_m, kappa_i_plus_m in (("timm", 1000.0, 0.5, 1e6, 2.0), ("ours", 1.5, 2000.0, 1e4, 5e3)):
        for seed, kappa_x in enumerate((1.0, 8.0, 64.0)):
            common = dict(init=init, n=32, d=16, seed=seed, kappa_target=kappa_x, kappa_x=kappa_x, norm_m=norm_m,
                          kappa_m=kappa_m, kappa_i_plus_m=kappa_i_plus_m)
            without = 1e3 * (seed + 1)
            rows.append(dict(common, output="linear_attention", skip="without", kappa_out=without))
            rows.append(dict(common, output="linear_attention", skip="with", kappa_out=without / gain))
            soft = 10.0 if init == "timm" else 2.0
            rows.append(dict(common, output="softmax_attention", skip="without", kappa_out=without))
            rows.append(dict(common, output="softmax_attention", skip="with", kappa_out=without / soft))
            rows.append(dict(common, output="ffn", skip="without", kappa_out=3.0))
    return pd.DataFrame(rows)


def test_skip_gains_pair_each_draw_with_its_skip_twin():
    gains = always_skip.skip_gains(draws()).set_index("init")
    assert np.isclose(gains.loc["timm", "median κ(XM)/κ(XM + X), linear"], 1000.0)
    assert np.isclose(gains.loc["ours", "median κ(XM)/κ(XM + X), linear"], 1.5)
    assert np.isclose(gains.loc["timm", "median κ(SA)/κ(X + SA), softmax"], 10.0)
    assert gains.loc["timm", "draws ≥ 10×, linear (%)"] == 100 and gains.loc["ours", "draws ≥ 10×, linear (%)"] == 0
    assert gains.loc["ours", "median ‖M‖"] == 2000.0 and gains.loc["ours", "median κ(I + M)"] == 5e3
    assert gains.loc["ours", "median σ_min(M)"] == 0.2 and gains.loc["timm", "draws ≥ 10×, softmax (%)"] == 100


def test_prop42_holds_only_for_the_init_whose_skip_gains_tenfold():
    verdict = always_skip.prop42_verdict(always_skip.skip_gains(draws()))
    assert verdict["holds"].startswith("for timm ")
    assert "not for ours in linear attention" in verdict["holds"] and "2e+03" in verdict["holds"]
    assert "κ(I + M)/κ(M) 0.5" in verdict["holds"]  # 5e3 / 1e4
    assert "softmax attention gains" not in verdict["holds"]  # ours' softmax gain is 2: nothing to add
    assert "ours 1.5 / 2" in verdict["here"] and "timm 1e+03 / 10" in verdict["here"]


def test_a_singular_median_is_printed_as_singular_and_ranges_count_it():
    table = pd.DataFrame({"skip": ["full", "none"], "ln κ": [6.25, np.inf], "share": [0.0, 75.0]})
    shown = always_skip.with_singular_cells(table, ["ln κ"])
    assert list(shown["ln κ"]) == ["6.25", "singular"] and list(shown["share"]) == [0.0, 75.0]
    assert always_skip.finite_range(pd.Series([17.5, np.inf, 21.46]), "runs") == \
        "17.5–21.5, singular in 1 of 3 runs (more than half their reports)"
    assert always_skip.finite_range(pd.Series([np.inf, np.inf]), "runs") == \
        "singular in all 2 runs (more than half their reports)"
    assert always_skip.finite_range(pd.Series([5.91, 5.94]), "runs") == "5.9"


def accuracies(per_setting):
    """Runs (skip label, init, optimizer, seed, accuracy) from {(init, optimizer): {skip label: [acc per seed]}}."""
    return pd.DataFrame([{"skip": skip, "init": init, "optimizer": optimizer, "seed": seed, "accuracy": acc}
                         for (init, optimizer), by_skip in per_setting.items()
                         for skip, accs in by_skip.items() for seed, acc in enumerate(accs)])


def test_the_ablation_gap_is_paired_by_seed_and_read_by_one_rule():
    runs = accuracies({
        # SAB removal costs 5 points more than FFN removal in every seed, and always loses: much more.
        ("timm", "adamw"): {"full": [80, 82, 84], "w/o FFN skip": [79, 81, 83], "w/o SAB skip": [74, 76, 78],
                            "no skips": [70]},
        # Paired by seed the gaps are +4, −1, −3: the seeds disagree on the sign.
        ("ours", "adamw"): {"full": [80, 85, 75], "w/o FFN skip": [82, 80, 75], "w/o SAB skip": [78, 81, 78]},
        # Positive gaps but under 2 points in the mean: more, not much more.
        ("ours", "soap"): {"full": [80, 80], "w/o FFN skip": [80, 80], "w/o SAB skip": [79, 79.5]},
        # Removing the FFN skip costs more in every seed.
        ("timm", "soap"): {"full": [80, 80, 80], "w/o FFN skip": [75, 76, 77], "w/o SAB skip": [79, 79, 79]}})
    gaps = always_skip.ablation_gaps(runs).set_index("setting")
    assert gaps.loc["timm, adamw", "reading"] == "much more"
    assert gaps.loc["timm, adamw", "gap"] == "+5.0" and gaps.loc["timm, adamw", "w/o SAB skip − full"] == "-6.0"
    assert gaps.loc["timm, adamw", "gap per seed"] == "+5.0 to +5.0" and gaps.loc["timm, adamw", "seeds"] == 3
    assert gaps.loc["ours, adamw", "gap per seed"] == "-3.0 to +4.0"
    assert gaps.loc["ours, adamw", "reading"].startswith("undecided")
    assert gaps.loc["ours, soap", "reading"] == "more, by less than 2 points in the mean" and gaps.loc["ours, soap", "seeds"] == 2
    assert gaps.loc["timm, soap", "reading"].startswith("less")
    verdict = always_skip.ablation_verdict(always_skip.ablation_gaps(runs))
    assert verdict["holds"].startswith("in 1 of 4 settings") and ": timm, adamw;" in verdict["holds"]
    assert verdict["holds"].endswith("undecided (seeds disagree): ours, adamw")
    assert "timm, adamw: -1.0 w/o FFN skip, -6.0 w/o SAB skip (gap per seed +5.0 to +5.0)" in verdict["here"]
    assert "means over 2/3 seeds" in verdict["here"]


def test_a_gap_that_holds_in_every_seed_still_needs_a_loss_without_the_sab_skip():
    # The SAB-less model gains a point in one seed while the FFN-less one gains four: gaps +3, +3, +2.
    assert always_skip.gap_verdict([3.0, 3.0, 2.0], [-1.0, -2.0, 1.0]) == "more, but not every seed loses without the SAB skip"
    assert always_skip.gap_verdict([3.0, 3.0, 2.0], [-1.0, -2.0, -0.5]) == "much more"
    assert always_skip.gap_verdict([0.5, -0.5], [-1.0, -1.0]) == "undecided: the seeds disagree on the sign"
    assert always_skip.gap_verdict([0.5, 0.0], [-1.0, -1.0]) == "undecided: the seeds disagree on the sign (a gap is 0)"
    # Both removals gain accuracy (+2.1 and +0.6): a positive gap, but the SAB skip costs nothing to remove.
    assert always_skip.gap_verdict([1.5] * 3, [0.6] * 3) == "no loss without the SAB skip in any seed"


def test_the_accuracy_table_gives_the_mean_and_range_of_seeded_modes_and_one_value_otherwise():
    runs = accuracies({("timm", "adamw"): {"full": [80, 82, 84], "w/o FFN skip": [79, 81, 83],
                                           "w/o SAB skip": [74, 76, 78], "no skips": [70.04]}})
    table = always_skip.accuracy_table(runs).set_index("skip")
    assert list(table.index) == ["full", "w/o FFN skip", "w/o SAB skip", "no skips"]  # the paper's order
    assert table.loc["full", "timm, adamw"] == "82.0 (80.0–84.0)" and table.loc["no skips", "timm, adamw"] == "70.0"
    assert table.loc["w/o SAB skip", "paper, ViT-Tiny CIFAR-10"] == 70.0 and table.loc["no skips", "paper, ViT-Tiny CIFAR-10"] == "—"


def test_the_convmixer_control_pairs_each_seed_and_holds_only_when_every_seed_does():
    def control(none_minus_full):
        return pd.DataFrame([{"skip": skip, "optimizer": "adamw", "seed": seed,
                              "accuracy (%)": 80.0 + (d if skip == "none" else 0.0)}
                             for seed, d in enumerate(none_minus_full) for skip in ("full", "none")])
    assert always_skip.control_verdict(control([0.1, -0.2, 0.0]))["holds"] == "yes"
    # The mean (+0.1) is inside ±0.2 but one seed moves 0.9 points the other way: within the seeds' noise.
    moved = always_skip.control_verdict(control([0.9, -0.3, -0.3]))
    assert moved["holds"] == "undecided: the seeds disagree on the sign"
    assert moved["here"] == "adamw: +0.1 points (per seed -0.3 to +0.9)"
    assert always_skip.control_verdict(control([0.9, 0.5, 0.3]))["holds"] == "within 1 point, the same sign in every seed"
    assert always_skip.control_verdict(control([2.0, 0.0, 0.0]))["holds"] == "no"
    assert always_skip.control_verdict(control([]).reindex(columns=["skip", "optimizer", "seed", "accuracy (%)"]))["holds"] == "untested"


def test_token_graying_is_read_against_the_ungrayed_seeds_range_at_the_papers_eps():
    base = pd.DataFrame(dict(graying="none", eps=1.0, seed=[0, 1, 2], accuracy=[86.7, 87.5, 88.2]))
    def grayed(accs):
        return pd.DataFrame(dict(graying=["svd", "svd", "dct", "dct", "svd"], eps=[0.7, 0.6, 0.7, 0.6, 0.5],
                                 seed=0, accuracy=accs))
    # ε 0.5 is far above, but the claim is at ε 0.6–0.7, where one run is inside the ungrayed range.
    mixed = always_skip.graying_verdict(base, grayed([88.5, 88.4, 87.9, 88.3, 95.0]))
    assert mixed["holds"] == "within seed noise (3 of 4 above every ungrayed seed, 0 below every one)"
    assert "95.0" not in mixed["here"] and mixed["here"].endswith("the ungrayed 3 seeds 86.7–88.2 %")
    assert always_skip.graying_verdict(base, grayed([88.5, 88.4, 88.3, 88.3, 80.0]))["holds"].startswith("yes")
    assert always_skip.graying_verdict(base, grayed([86.0, 85.0, 86.5, 80.0, 99.0]))["holds"].startswith("no")
    assert always_skip.graying_verdict(base.iloc[:1], grayed([88.5] * 5))["holds"].startswith("undecided")
