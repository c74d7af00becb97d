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
