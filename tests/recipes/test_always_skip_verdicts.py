"""The always-skip recipe's verdicts: Prop. 4.2 per init from prop41.csv's paired draws (with and
without the skip), and ln κ of a singular median printed as "singular", never as a number."""

import numpy as np
import pandas as pd
import pytest

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


def test_the_convmixer_table_summarises_each_skip_and_optimizer_over_its_seeds():
    runs = pd.DataFrame([{"skip": skip, "optimizer": "adamw", "seed": seed, "accuracy (%)": acc,
                          "ln κ spatial mixing out": 4.0 + seed, "ln κ block out": np.inf if seed else 5.0}
                         for skip, accs in (("full", [86.0, 87.0, 89.0]), ("none", [88.0])) for seed, acc in enumerate(accs)])
    table = always_skip.control_summary(runs).set_index("skip")
    assert table.loc["full", "accuracy (%)"] == "87.33 (86.00–89.00)" and table.loc["full", "seeds"] == 3
    assert table.loc["none", "accuracy (%)"] == "88.00" and table.loc["none", "seeds"] == 1
    assert table.loc["full", "ln κ spatial mixing out"] == 5.0  # the lower median of 4, 5, 6
    assert table.loc["full", "ln κ block out"] == np.inf        # 2 of 3 seeds' medians singular


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


def eps_runs(ungrayed, grayed):
    """The ε table's runs: the ungrayed accuracies per seed, and {(graying, ε): [accuracy per seed]}."""
    rows = [dict(graying="none", eps=1.0, seed=seed, accuracy=a) for seed, a in enumerate(ungrayed)]
    rows += [dict(graying=g, eps=e, seed=seed, accuracy=a) for (g, e), accs in grayed.items() for seed, a in enumerate(accs)]
    return pd.DataFrame(rows).assign(ln_kappa_in_init=6.7, ln_kappa_in=5.5, ln_kappa_out=5.3)


def test_token_graying_gains_are_paired_by_seed_at_the_papers_best_eps():
    table = eps_runs([86.7, 88.2, 87.5], {
        ("svd", 0.7): [87.0, 88.5, 87.6],   # +0.3, +0.3, +0.1: above its own seed every time, though
                                            # 87.0 and 87.6 are inside the ungrayed range 86.7–88.2
        ("svd", 0.6): [86.0, 89.0, 87.0],   # −0.7, +0.8, −0.5
        ("dct", 0.7): [86.5, 88.0, 87.4],   # every seed loses
        ("svd", 0.5): [99.0]})              # not the paper's ε: not read
    gains = always_skip.graying_gains(table).set_index(["graying", "eps"])
    assert list(gains.index) == [("svd", 0.7), ("svd", 0.6), ("dct", 0.7)]
    assert gains.loc[("svd", 0.7), "reading"] == "lifts in every seed" and gains.loc[("svd", 0.7), "gain"] == "+0.2"
    assert gains.loc[("svd", 0.7), "gain per seed"] == "+0.1 to +0.3" and gains.loc[("svd", 0.7), "seeds"] == 3
    # 87.0, 88.5, 87.6 against 86.7, 88.2, 87.5: the same order over seeds, a correlation near 1 (0.99 by hand).
    assert gains.loc[("svd", 0.7), "seed correlation"] == "0.99" and gains.loc[("dct", 0.7), "seed correlation"] == "1.00"
    assert gains.loc[("svd", 0.6), "reading"] == "within the seeds' noise (they disagree on the sign)"
    assert gains.loc[("dct", 0.7), "reading"] == "lowers in every seed"
    verdict = always_skip.graying_verdict(always_skip.graying_gains(table))
    assert verdict["holds"] == ("in 1 of 3 (graying, ε) (a gain in every seed): svd-TG ε 0.7; "
                                "1 of 3 lower it in every seed: dct-TG ε 0.7")
    assert "svd-TG ε 0.7: +0.2 (per seed +0.1 to +0.3)" in verdict["here"] and "99" not in verdict["here"]


def test_the_token_graying_verdict_needs_every_setting_and_more_than_one_seed():
    def verdict(grayed, ungrayed=(87.0, 88.0)):
        return always_skip.graying_verdict(always_skip.graying_gains(eps_runs(list(ungrayed), grayed)))["holds"]
    assert verdict({("svd", 0.7): [87.5, 88.1], ("dct", 0.6): [87.1, 88.9]}).startswith("yes")
    assert verdict({("svd", 0.7): [86.5, 87.1], ("dct", 0.6): [86.1, 87.9]}).startswith("no")
    assert verdict({("svd", 0.7): [86.5, 88.1], ("dct", 0.6): [86.1, 87.9]}) == \
        "within the seeds' noise: no (graying, ε) lifts accuracy in every seed; 1 of 2 lower it in every seed: dct-TG ε 0.6"
    assert verdict({("svd", 0.7): [86.5, 88.1]}) == "within the seeds' noise: no (graying, ε) lifts accuracy in every seed"
    assert verdict({("svd", 0.7): [90.0]}, ungrayed=(87.0,)).startswith("undecided: one seed")
    assert verdict({("svd", 0.5): [90.0, 90.0]}) == "untested"  # no run at the paper's ε


def test_the_eps_table_summarises_each_graying_and_eps_over_its_seeds():
    table = eps_runs([86.7, 88.2, 87.5], {("svd", 0.7): [87.0, 88.5, 87.6], ("svd", 0.5): [99.0]})
    table.loc[table["graying"] == "none", "ln_kappa_in"] = [5.0, np.inf, 6.0]  # one seed's median singular
    summary = always_skip.eps_summary(table).set_index(["graying", "eps"])
    assert summary.loc[("none", 1.0), "accuracy (%)"] == "87.47 (86.70–88.20)" and summary.loc[("none", 1.0), "seeds"] == 3
    assert summary.loc[("svd", 0.5), "accuracy (%)"] == "99.00" and summary.loc[("svd", 0.5), "seeds"] == 1
    assert summary.loc[("none", 1.0), "ln_kappa_in"] == 6.0  # the lower median of 5, 6, ∞: finite


def kappa_runs(ends):
    """Per-run κ rows from {(skip label, init, optimizer): [ln κ(SAB out) at the end per seed]}."""
    return pd.DataFrame([{"skip": skip, "init": init, "optimizer": optimizer, "seed": seed,
                          "ln κ SAB out, init": 3.0, "ln κ SAB out, end": end, "ln κ SAB out, max": end,
                          "SAB out singular, init (%)": 0.0, "SAB out singular, end (%)": 100.0 * (end == np.inf),
                          "ln κ FFN out, init": 2.0, "ln κ FFN out, end": 4.0, "FFN out singular, end (%)": 0.0}
                         for (skip, init, optimizer), values in ends.items() for seed, end in enumerate(values)])


def test_the_kappa_claim_pairs_each_sab_less_run_with_the_full_run_of_its_seed():
    kappas = kappa_runs({("full", "timm", "adamw"): [5.0, 6.0, np.inf],
                         ("w/o SAB skip", "timm", "adamw"): [9.0, np.inf, np.inf],  # larger, larger, no order
                         ("full", "ours", "soap"): [5.0, 7.0],
                         ("w/o SAB skip", "ours", "soap"): [6.0, 6.5],              # larger, smaller
                         ("no skips", "ours", "soap"): [20.0]})
    pairs = always_skip.sab_kappa_pairs(kappas)
    assert len(pairs) == 5 and int((pairs > 0).sum()) == 3 and int(pairs.isna().sum()) == 1  # singular both ways: no order
    assert always_skip.kappa_direction(3, 4, 1) == "direction in 3 of 4 pairs (not in every one)"
    assert always_skip.kappa_direction(4, 4).startswith("direction yes") and always_skip.kappa_direction(0, 4).startswith("no")
    assert always_skip.kappa_direction(0, 0).startswith("untested")
    assert always_skip.kappa_direction(0, 0, 3) == "undecided: every pair is singular with and without the skip"
    table = always_skip.kappa_over_seeds(kappas)
    assert list(zip(table["init"], table["skip"])) == [("ours", "full"), ("ours", "w/o SAB skip"), ("ours", "no skips"),
                                                       ("timm", "full"), ("timm", "w/o SAB skip")]
    timm = table[table["init"] == "timm"].set_index("skip")
    assert timm.loc["full", "ln κ SAB out, end"] == 6.0 and timm.loc["w/o SAB skip", "ln κ SAB out, end"] == np.inf
    assert np.isclose(timm.loc["w/o SAB skip", "SAB out singular, end (%)"], 200 / 3) and timm.loc["full", "seeds"] == 3


def test_a_graying_gain_of_zero_is_named_where_the_seeds_disagree():
    gains = always_skip.graying_gains(eps_runs([87.0, 88.0, 86.0], {("svd", 0.7): [87.5, 88.0, 86.5]}))
    assert gains["reading"].tolist() == ["within the seeds' noise (they disagree on the sign, a gain is 0)"]


def test_the_grid_runs_every_seed_of_every_skip_mode_control_and_eps():
    class Recipe:
        threads = 1
        def __init__(self, quick):
            self.quick = quick
        @staticmethod
        def work(*parts):
            return "/".join(("W", *parts))
    full = always_skip.grid(Recipe(False))
    skip_seeds = {key[3] for kind, key, _, _ in full if kind == "skip" and key[0] == "no-sab-skip"}
    assert skip_seeds == {0, 1, 2, 3, 4}
    assert {key[3] for kind, key, _, _ in full if kind == "skip" and key[0] == "none"} == {0, 1, 2, 3, 4}
    eps = {(key[0], key[1], key[2]) for kind, key, _, _ in full if kind == "eps"}
    assert eps == {(g, e, seed) for g in ("svd", "dct") for e in (0.9, 0.7, 0.6, 0.5) for seed in range(5)}
    runs = {directory: argv for _, _, directory, argv in full}
    assert runs["W/eps/seed-4/dct-0.6"][-2:] == ["--out", "W/eps/seed-4/dct-0.6"]
    assert "--seed" in runs["W/eps/seed-4/dct-0.6"] and "--seed" not in runs["W/eps/dct-0.6"]
    assert len(runs) == len(full)  # no two runs share a directory
    quick = always_skip.grid(Recipe(True))
    assert {key[-1] for _, key, _, _ in quick} == {0, 1, 2}
    assert {key[1] for kind, key, _, _ in quick if kind == "eps"} == {0.6}


def test_the_kappa_in_claim_is_paired_by_seed_at_the_lowest_eps():
    table = eps_runs([87.0, 88.0, 86.0], {("svd", 0.9): [87.0, 88.0, 86.0], ("svd", 0.5): [87.0, 88.0, 86.0]})
    def with_kappa(at_init, at_end):  # ln κ_in of the svd ε 0.5 runs per seed; the rest stays at 6.7 / 5.5
        t = table.copy()
        low = (t["graying"] == "svd") & (t["eps"] == 0.5)
        t.loc[low, "ln_kappa_in_init"], t.loc[low, "ln_kappa_in"] = at_init, at_end
        return t
    lower_at_end = always_skip.kappa_in_verdict(with_kappa([6.0, 6.1, 6.2], [5.0, 5.4, 5.1]), "svd", "why")
    assert lower_at_end["holds"] == "yes: lower after training in every seed"
    assert "the change -0.70 to -0.50 at init, -0.50 to -0.10 after training (3 seeds)" in lower_at_end["here"]
    assert "after training 5.50 → 5.10" in lower_at_end["here"] and "ε 1 → 0.5" in lower_at_end["here"]
    # Lower at init in every seed, but one seed ends above its ungrayed twin: training undoes it.
    assert always_skip.kappa_in_verdict(with_kappa([6.0, 6.1, 6.2], [5.0, 5.6, 5.1]), "svd", "why")["holds"] == \
        "at init only (lower in every seed): training undoes it"
    # Mixed signs are counted, as the page's sign rule reads them, with the reason where one is known.
    assert always_skip.kappa_in_verdict(with_kappa([6.0, 6.8, 6.2], [5.0, 5.6, 5.1]), "svd", "why")["holds"] == \
        "not in every seed: lower after training in 2 of 3; why"
    assert always_skip.kappa_in_verdict(with_kappa([6.0, 6.8, 6.2], [5.6, 5.6, 5.6]), "svd", "")["holds"] == \
        "no: lower after training in no seed"
    one_seed = with_kappa([6.0, 6.1, 6.2], [5.0, 5.4, 5.1])
    one_seed = one_seed[(one_seed["graying"] != "svd") | (one_seed["seed"] == 0)]
    assert always_skip.kappa_in_verdict(one_seed, "svd", "why")["holds"] == "undecided: one seed"


def test_the_span_runs_are_the_eps_ablation_at_a_square_patch_embedding_with_their_own_ungrayed_runs():
    class Recipe:
        threads, quick = 1, False
        @staticmethod
        def work(*parts):
            return "/".join(("W", *parts))
    full = always_skip.grid(Recipe())
    span = {key: argv for kind, key, _, argv in full if kind == "eps-span"}
    assert set(span) == {(g, e, s) for g, e in [("none", 1.0)] + [(g, e) for g in ("svd", "dct") for e in (0.9, 0.7, 0.6, 0.5)]
                         for s in range(5)}
    def value(argv, flag):
        return argv[argv.index(flag) + 1]
    ungrayed, grayed = span[("none", 1.0, 3)], span[("dct", 0.5, 3)]
    assert "--token-graying" not in ungrayed and value(grayed, "--token-graying") == "dct" and value(grayed, "--tg-eps") == 0.5
    assert value(ungrayed, "--dim") == 16 and value(ungrayed, "--patch") == 4 and ungrayed.count("--dim") == 1
    assert value(ungrayed, "--seed") == 3 and value(ungrayed, "--out") == "W/eps-span/seed-3/none-1"
    # The other runs keep the grid's sizes: only the span runs' --dim changes.
    assert {value(argv, "--dim") for kind, _, _, argv in full if kind != "eps-span"} == {64}


def test_the_convmixer_runs_carry_no_vit_flag_and_the_vit_runs_keep_their_heads():
    class Recipe:
        threads = 1
        @staticmethod
        def work(*parts):
            return "/".join(("W", *parts))
    for quick in (False, True):
        Recipe.quick = quick
        runs = always_skip.grid(Recipe())
        controls = [argv for kind, _, _, argv in runs if kind == "convmixer"]
        assert controls and all("--heads" not in argv and "--init" not in argv and "--dim" in argv for argv in controls)
        assert all("--heads" in argv for kind, _, _, argv in runs if kind != "convmixer")
    assert always_skip.without(["--dim", 64, "--heads", 2, "--patch", 4], "--heads") == ["--dim", 64, "--patch", 4]


def test_with_values_replaces_only_the_named_flags_values():
    assert always_skip.with_values(["--dim", 64, "--depth", 4, "--patch", 7], {"--dim": 16, "--patch": 4}) == \
        ["--dim", 16, "--depth", 4, "--patch", 4]
    assert always_skip.with_values(["--dim", 64], {"--heads": 2}) == ["--dim", 64]


def test_the_kappa_in_changes_pair_each_grayed_run_with_the_ungrayed_run_of_its_seed():
    table = eps_runs([87.0, 88.0, 86.0], {("svd", 0.5): [87.5, 88.2, 86.9], ("dct", 0.5): [87.0, 88.0]})
    def set_kappa(graying, at_init, at_end):
        rows = table["graying"] == graying
        table.loc[rows, "ln_kappa_in_init"], table.loc[rows, "ln_kappa_in"] = at_init, at_end
    set_kappa("none", [4.7, 4.8, 4.6], [5.0, 5.2, 5.1])
    set_kappa("svd", [4.2, 4.4, 4.3], [5.1, 5.0, np.inf])     # −0.5, −0.4, −0.3 at init; +0.1, −0.2, +∞ at the end
    set_kappa("dct", [4.8, 4.7], [5.0, 5.3])                  # +0.1, −0.1; 0, +0.1 (seed 2 has no dct run)
    changes = always_skip.kappa_in_changes(table).set_index(["graying", "eps"])
    svd, dct = changes.loc[("svd", 0.5)], changes.loc[("dct", 0.5)]
    assert svd["Δ ln κ_in at init"] == "-0.40 (-0.50 to -0.30)" and svd["lower at init"] == "3 of 3"
    assert svd["Δ ln κ_in after training"] == "+0.10 (-0.20 to +∞, grayed run singular)"
    assert svd["lower after training"] == "1 of 3"
    assert dct["Δ ln κ_in at init"] == "+0.00 (-0.10 to +0.10)" and dct["lower at init"] == "1 of 2"  # the median, not the lower one
    assert dct["lower after training"] == "0 of 2"  # a change of exactly 0 is not lower
    assert svd["Δ accuracy (points)"] == "+0.5 (+0.2 to +0.9)" and dct["Δ accuracy (points)"] == "+0.00 (+0.00 to +0.00)"


def test_the_span_reading_says_whether_lower_kappa_in_and_higher_accuracy_go_together_and_what_else_differs(monkeypatch):
    dims = {"wide": (16, 64), "span": (16, 16), "quick-wide": (49, 16)}
    monkeypatch.setattr(always_skip, "token_dimensions", lambda directory: dims[directory])
    def runs(directory, ungrayed, grayed, kappa_end):
        """eps_runs with ln κ_in after training per (graying, ε) and seed (the ungrayed runs at 5.0)."""
        table = eps_runs(ungrayed, grayed)
        for (g, e), values in kappa_end.items():
            table.loc[(table["graying"] == g) & (table["eps"] == e), "ln_kappa_in"] = values
        table.loc[table["graying"] == "none", "ln_kappa_in"] = 5.0
        table.attrs["directory"] = directory
        return table
    wide = runs("wide", [87.0, 88.0], {("svd", 0.7): [87.5, 88.3]}, {("svd", 0.7): [5.1, 4.9]})   # lifts, κ_in not lower
    span = runs("span", [83.0, 83.2], {("svd", 0.7): [82.5, 83.3]}, {("svd", 0.7): [4.5, 4.6]})   # κ_in lower, no lift
    text = always_skip.span_reading(wide, span)
    assert "- svd-TG ε 0.7: trained κ_in lower in every seed, accuracy -0.2 points (per seed -0.5 to +0.1); at d = 64 " \
           "with 16-column patches accuracy +0.4 points (per seed +0.3 to +0.5), trained κ_in not lower in every seed" in text
    assert ("At d = 16 with 16-column patches graying lowers trained κ_in without lifting accuracy in every seed; at d = 64 "
            "with 16-column patches svd-TG ε 0.7 lifts accuracy in every seed with trained κ_in not lower.") in text
    assert "differ in the width (d = 64 against 16, and with it the heads and the MLP; ungrayed 87.5 % against 83.1 %)" in text
    assert "At d = 64 graying still conditions P·W_E, the 16 token dimensions the patches reach" in text
    assert "Too few (graying, ε)" in text  # one grayed setting: no correlation drawn from it
    span_lifts = runs("span", [83.0, 83.2], {("svd", 0.7): [83.5, 83.3]}, {("svd", 0.7): [4.5, 4.6]})
    assert "it also lifts accuracy in 1 of 1" in always_skip.span_reading(wide, span_lifts)
    span_flat = runs("span", [83.0, 83.2], {("svd", 0.7): [83.5, 83.3]}, {("svd", 0.7): [4.5, 5.1]})  # one seed higher
    assert "no graying at the paper's best ε lowers trained κ_in in every seed" in always_skip.span_reading(wide, span_flat)
    # --quick: both arms at d = 16, the grid's with 49-column patches: named by their patches, no width claimed.
    quick_wide = runs("quick-wide", [87.0, 88.0], {("svd", 0.7): [87.5, 88.3]}, {("svd", 0.7): [5.1, 4.9]})
    quick = always_skip.span_reading(quick_wide, span)
    assert "at d = 16 with 49-column patches accuracy +0.4" in quick and "the patch size (49 against 16 columns)" in quick
    assert "width" not in quick and "P·W_E" not in quick


def test_the_dose_response_correlates_the_mean_paired_changes_over_every_graying_and_eps(monkeypatch):
    grayed = {("svd", 0.9): [87.0, 88.0], ("svd", 0.5): [86.0, 87.0], ("dct", 0.5): [86.5, 87.5]}
    table = eps_runs([87.0, 88.0], grayed)           # accuracy changes 0, −1, −0.5
    table.attrs["directory"] = "span"
    kappa = {("svd", 0.9): 5.0, ("svd", 0.5): 4.0, ("dct", 0.5): 4.5}   # ln κ_in changes 0, −1, −0.5 (ungrayed 5.0)
    table["ln_kappa_in"] = [5.0 if g == "none" else kappa[(g, e)] for g, e in zip(table["graying"], table["eps"])]
    monkeypatch.setattr(always_skip, "token_dimensions", lambda directory: (16, 16))
    assert always_skip.dose_response(table) == ("Over all 3 (graying, ε) at d = 16 with 16-column patches, the mean paired "
                                                 "changes in trained ln κ_in and in accuracy correlate at +1.00 (a lower "
                                                 "κ_in goes with a lower accuracy).")


def test_the_convmixer_table_takes_each_run_s_lower_median_with_a_singular_report_as_infinite(tmp_path):
    """As every other ln κ of the page: at the last step, the lower median over the (probe, layer)
    reports with a singular one at +∞ (not pandas' median with it at ln κ_lo)."""
    e = np.e
    rows = []
    for step in (0, 12):
        # mix_out: one finite report and two singular ones (κ_lo e^30): more than half singular
        for probe, (status, kappa) in enumerate((("exact", e), ("singular", np.inf), ("singular", np.inf))):
            rows.append(dict(step=step, probe=probe, layer=0, matrix="mix_out", status=status, kappa=kappa,
                             kappa_lo=e ** 30 if status == "singular" else kappa))
        # block_out: ln κ 1, 2, 3 and one singular: the lower median is 2 (pandas' with κ_lo: 2.5)
        for probe, (status, kappa) in enumerate((("exact", e), ("exact", e ** 2), ("exact", e ** 3),
                                                 ("singular", np.inf))):
            rows.append(dict(step=step, probe=probe % 2, layer=probe // 2, matrix="block_out", status=status,
                             kappa=kappa, kappa_lo=e ** 10 if status == "singular" else kappa))
    directory = tmp_path / "none-soap"
    directory.mkdir()
    pd.DataFrame(rows).to_csv(directory / "conditioning.csv", index=False)
    pd.DataFrame(dict(step=[12], test_acc=[0.875])).to_csv(directory / "eval.csv", index=False)
    table = always_skip.control_table({("none", "ConvMixer", "soap", 0): str(directory)})
    row = table.iloc[0]
    assert row["accuracy (%)"] == 87.5
    assert row["ln κ spatial mixing out"] == np.inf
    assert row["ln κ block out"] == pytest.approx(2.0)
    shown = always_skip.with_singular_cells(always_skip.control_summary(table), ["ln κ spatial mixing out", "ln κ block out"])
    assert shown.iloc[0]["ln κ spatial mixing out"] == "singular" and shown.iloc[0]["ln κ block out"] == "2.00"
