"""The training recipe's accuracy table and its verdicts over seeds: the table built from per-seed
accuracies, the ordering of the means against the paper's with the number of seeds that repeat it,
and Table 1's claims as differences paired by seed, whose sign is decided only when every seed agrees."""

import pytest

from jacond_recipes import common, training

SEEDS = [0, 1, 2]


def finals(adamw, soap):
    """{(model, optimizer): accuracies} from per-optimizer dicts keyed by model."""
    out = {(m, "adamw"): a for m, a in adamw.items()}
    out.update({(m, "soap"): a for m, a in soap.items()})
    return out


CLEAR = finals({"skip": [85, 86, 85.5], "skipless ours": [80, 81, 80.5], "skipless timm": [70, 71, 70.5]},
               {"skip": [85, 85.5, 86], "skipless ours": [88, 88.5, 89], "skipless timm": [75, 76, 75.5]})
# adamw: skip and ours swap between seeds (ours − skip: +1.7, −1.6, −1.0); soap: ours above skip in every seed.
MIXED = finals({"skip": [82, 84, 83], "skipless ours": [83.7, 82.4, 82.0], "skipless timm": [70, 71, 72]},
               {"skip": [85, 85.5, 86], "skipless ours": [88, 88.5, 89], "skipless timm": [83, 84.5, 83]})


def test_the_table_has_each_seed_its_mean_spread_and_the_paper():
    t = training.accuracy_table(MIXED, SEEDS).set_index(["model", "optimizer"])
    row = t.loc[("skipless ours", "adamw")]
    assert [row[f"seed {s} (%)"] for s in SEEDS] == [83.7, 82.4, 82.0]
    assert row["mean (%)"] == pytest.approx(82.7)
    assert row["spread (max − min)"] == pytest.approx(1.7)
    assert row["paper, ViT-B ImageNet (%)"] == 78.1
    assert len(t) == 6


def test_a_clear_ordering_matching_the_paper_in_every_seed():
    text = training.ordering_text(training.accuracy_table(CLEAR, SEEDS), SEEDS)
    assert "- adamw: mean over 3 seeds **skip > skipless ours > skipless timm**" in text
    assert "(same); the paper's ordering in 3 of 3 seeds" in text
    assert "undecided" not in text


def test_neighbours_whose_seeds_disagree_on_the_sign_are_undecided():
    text = training.ordering_text(training.accuracy_table(MIXED, SEEDS), SEEDS)
    adamw = next(line for line in text.splitlines() if line.startswith("- adamw"))
    assert "**skip > skipless ours > skipless timm**" in adamw  # means 83.0 > 82.7
    assert "the paper's ordering in 2 of 3 seeds" in adamw  # seed 0 has skipless ours first
    assert "undecided: skip vs skipless ours (+0.3 points, per seed -1.7 to +1.6)" in adamw
    assert "skipless timm" not in adamw.split("undecided:")[1]
    soap = next(line for line in text.splitlines() if line.startswith("- soap"))
    assert "undecided" not in soap and "in 3 of 3 seeds" in soap


def test_claims_pair_the_seeds_and_decide_a_sign_only_when_every_seed_agrees():
    lines = training.claims_text(training.accuracy_table(MIXED, SEEDS), SEEDS).splitlines()
    # skip − timm: adamw 12, 13, 11 (mean 12.0; paper 18.9); soap 2, 1, 3 (mean 2.0; paper 3.1).
    assert "adamw**: skip − skipless timm is +12.0 points (per seed +11.0 to +13.0; paper +18.9): " \
           "skip above skipless timm in every seed." in lines[0]
    assert "soap**: skip − skipless timm is +2.0 points (per seed +1.0 to +3.0; paper +3.1)" in lines[1]
    assert "SOAP's cost of dropping the skips is 17 % of AdamW's, so it recovers 83 % (paper 84 %)" in lines[2]
    assert "adamw**: skipless ours − skip is -0.3 points (per seed -1.6 to +1.7; paper -2.2): " \
           "the seeds disagree on the sign" in lines[3]
    assert "soap**: skipless ours − skip is +3.0 points (per seed +3.0 to +3.0; paper +0.7): " \
           "skipless ours above skip in every seed." in lines[4]


def test_no_recovery_share_when_dropping_the_skips_costs_nothing():
    free = finals({"skip": [80, 80, 80], "skipless ours": [80, 80, 80], "skipless timm": [81, 82, 81]},
                  {"skip": [85, 85, 85], "skipless ours": [85, 85, 85], "skipless timm": [84, 84, 84]})
    text = training.claims_text(training.accuracy_table(free, SEEDS), SEEDS)
    assert "skip below skipless timm in every seed" in text
    assert "recovers" not in text


def test_a_difference_that_rounds_to_zero_keeps_its_sign():
    assert common.signed(-0.03) == "-0.03" and common.signed(0.04) == "+0.04"
    assert common.signed(1.24) == "+1.2" and common.signed(-16.8) == "-16.8"
    assert common.span([-0.03, 1.2]) == "-0.03 to +1.2"
