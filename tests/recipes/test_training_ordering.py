"""The training recipe's ordering over seeds: the ordering of the means against the paper's, how many
seeds repeat the paper's ordering, and which neighbours are closer than their seed spread (undecided)."""

import pandas as pd

from jacond_recipes import training


def table(finals):
    """finals: {(model, optimizer): [accuracy per seed]} -> the recipe's accuracy table."""
    rows = []
    for (model, optimizer), accs in finals.items():
        row = {"model": model, "optimizer": optimizer}
        row.update({f"seed {s} (%)": a for s, a in enumerate(accs)})
        row["mean (%)"] = sum(accs) / len(accs)
        row["spread (max − min)"] = max(accs) - min(accs)
        row["paper, ViT-B ImageNet (%)"] = training.PAPER[(model, optimizer)]
        rows.append(row)
    return pd.DataFrame(rows)


def test_a_clear_ordering_matching_the_paper_in_every_seed():
    # adamw, paper: skip > skipless ours > skipless timm; soap, paper: skipless ours > skip > skipless timm.
    t = table({("skip", "adamw"): [85, 86, 85.5], ("skipless ours", "adamw"): [80, 81, 80.5],
               ("skipless timm", "adamw"): [70, 71, 70.5], ("skip", "soap"): [85, 85.5, 86],
               ("skipless ours", "soap"): [88, 88.5, 89], ("skipless timm", "soap"): [75, 76, 75.5]})
    text = training.ordering_text(t, [0, 1, 2])
    assert "- adamw: mean over 3 seeds **skip > skipless ours > skipless timm**" in text
    assert "(same); the paper's ordering in 3 of 3 seeds" in text
    assert "undecided" not in text


def test_neighbours_closer_than_their_spread_are_undecided_and_seeds_are_counted():
    # adamw: skip and skipless ours swap between seeds (gap of means 0.3 < spread 2); timm far below.
    t = table({("skip", "adamw"): [82, 84, 83], ("skipless ours", "adamw"): [83.7, 82.4, 82.0],
               ("skipless timm", "adamw"): [70, 71, 72], ("skip", "soap"): [85, 85.5, 86],
               ("skipless ours", "soap"): [88, 88.5, 89], ("skipless timm", "soap"): [75, 76, 75.5]})
    text = training.ordering_text(t, [0, 1, 2])
    adamw = next(line for line in text.splitlines() if line.startswith("- adamw"))
    assert "**skip > skipless ours > skipless timm**" in adamw
    assert "the paper's ordering in 2 of 3 seeds" in adamw  # seed 0 has skipless ours first
    assert "undecided: skip vs skipless ours (0.3 points)" in adamw
    assert "skipless timm" not in adamw.split("undecided:")[1]
    soap = next(line for line in text.splitlines() if line.startswith("- soap"))
    assert "undecided" not in soap and "in 3 of 3 seeds" in soap


def test_claims_pair_the_seeds_and_decide_a_sign_only_when_every_seed_agrees():
    t = table({("skip", "adamw"): [82, 84, 83], ("skipless ours", "adamw"): [83.7, 82.4, 82.0],
               ("skipless timm", "adamw"): [70, 71, 72], ("skip", "soap"): [85, 85.5, 86],
               ("skipless ours", "soap"): [88, 88.5, 89], ("skipless timm", "soap"): [83, 84.5, 83]})
    text = training.claims_text(t, [0, 1, 2])
    lines = text.splitlines()
    # skip − timm: adamw 12, 13, 11 (mean 12.0); soap 2, 1, 3 (mean 2.0): SOAP recovers 83 % (paper: 18.9 and
    # 3.1 points, 84 %).
    assert "is 12.0 points under AdamW (per seed +11.0 to +13.0; paper 18.9)" in lines[0]
    assert "2.0 under SOAP (per seed +1.0 to +3.0; paper 3.1), so SOAP recovers 83 % of AdamW's loss (paper 84 %)" in lines[0]
    # ours − skip, adamw: +1.7, −1.6, −1.0: signs disagree; soap: +3 in every seed.
    assert "adamw**: skipless ours − skip is -0.3 points (per seed -1.6 to +1.7; paper -2.2): level" in lines[1]
    assert "soap**: skipless ours − skip is +3.0 points" in lines[2]
    assert "above the residual model in every seed" in lines[2]


def test_a_difference_that_rounds_to_zero_keeps_its_sign():
    assert training.signed(-0.03) == "-0.03" and training.signed(0.04) == "+0.04"
    assert training.signed(1.24) == "+1.2" and training.signed(-16.8) == "-16.8"
    assert training.span([-0.03, 1.2]) == "-0.03 to +1.2"
