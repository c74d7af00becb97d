"""The verdicts the prop1, prop2, depth and main recipes compute from their data, on hand-built rows: an
ordering is read seed by seed, a "tight" bound is measured, a singular κ is a lower bound, and an N/A
check is not counted as passed."""

import numpy as np
import pandas as pd

from jacond_recipes import depth, main, prop1, prop2


def sweep(ours_by_beta, mimetic, timm):
    """prop2's beta-sweep rows: {β: [κ(K_sa) per seed]} for `ours`, per-seed lists for the others."""
    rows = [dict(experiment="beta-sweep", init="ours", beta=b, seed=s, kappa_K=k)
            for b, ks in ours_by_beta.items() for s, k in enumerate(ks)]
    rows += [dict(experiment="beta-sweep", init=init, beta=np.nan, seed=s, kappa_K=k)
             for init, ks in (("mimetic", mimetic), ("timm", timm)) for s, k in enumerate(ks)]
    return pd.DataFrame(rows)


def test_ours_overtakes_mimetic_only_from_the_beta_where_every_seed_wins_and_keeps_winning():
    # Medians: at β = 1.5 ours (95) is already below mimetic (100), but seed 2 is not; β = 2 wins in
    # every seed and so does 3, while β = 1 wins in every seed but is followed by a β that does not.
    t = sweep({1.0: [50, 50, 50], 1.5: [90, 95, 130], 2.0: [10, 10, 10], 3.0: [2, 2, 2]},
              mimetic=[100, 100, 100], timm=[1e9, 1e9, 1e9])
    wins = prop2.paired_wins(t, "mimetic")
    assert wins.to_dict() == {1.0: 3, 1.5: 2, 2.0: 3, 3.0: 3}
    assert prop2.overtakes_text(wins, 3, "mimetic") == \
        "`ours` is below `mimetic` in every seed (paired by seed) from β = 2 on; at β = 1.5 in 2 of 3"
    never = prop2.paired_wins(sweep({1.0: [200, 50, 200]}, [100, 100, 100], [1, 1, 1]), "mimetic")
    assert prop2.overtakes_text(never, 3, "mimetic").endswith("at no β of the sweep (at most 1 of 3 seeds, β = 1)")


def test_the_weyl_sentence_comes_from_the_checks_that_met_the_premise():
    def verify(*checks):
        return {"claims": [{"checks": [{"check": c, "pass": p, "verdict": v} for c, p, v in checks]}]}
    assert prop2.weyl_text(verify(("Weyl bracket contains kappa", True, "n/a"), ("ours better", True, "pass"))) == \
        "No split met the premise, so the Weyl bracket was not tested"
    assert prop2.weyl_text(verify(("Weyl bracket contains kappa", True, "pass"), ("the Weyl check was exercised", True,
                                                                                  "pass"))).startswith(
        "The Weyl bracket contains κ(K_sa) in every split where the premise holds (1 checks")
    assert prop2.weyl_text(verify(("Weyl bracket contains kappa", False, "fail"), ("Weyl bracket b", True, "pass"))) == \
        "The Weyl bracket missed κ(K_sa) in 1 of the 2 checks that met the premise (verdict table)"


def test_the_assembly_sentence_comes_from_the_checks_of_k_against_b_plus_e():
    def verify(*checks):
        return {"claims": [{"checks": [{"check": c, "pass": p, "verdict": v} for c, p, v in checks]}]}
    name = "(2, 0.6, 3): K_sa (matrix-free JVP) = B_sa + E_sa (assembled): ||K - (B + E)||_F <= 1e-12 ||K||_F"
    passed = prop2.assembly_text(verify((name, True, "pass"), ("beta sweep: " + name, True, "pass"),
                                        ("Weyl bracket contains kappa", True, "pass")))
    assert passed.startswith("K_sa from the matrix-free JVP (`analysis/operators`) equals B_sa + E_sa") and \
        "(2 checks): two independent implementations agree" in passed
    assert prop2.assembly_text(verify((name, False, "fail"), ("beta sweep: " + name, True, "pass"))).endswith(
        "in 1 of the 2 checks (verdict table): the two implementations disagree")
    assert prop2.assembly_text(verify(("Weyl bracket contains kappa", True, "pass"))) == \
        "K_sa was not compared with B_sa + E_sa entry by entry"
    # The Weyl sentence no longer claims to compare the two implementations: it cannot (B alone passes it).
    weyl = prop2.weyl_text(verify(("Weyl bracket contains kappa", True, "pass")))
    assert "two independent implementations" not in weyl and "B_sa alone" in weyl


def test_how_far_the_diagonal_dominance_bound_overstates_kappa():
    draws = pd.DataFrame(dict(experiment=["beta"] * 4 + ["peak"], beta=[4.0, 4.0, 6.0, 6.0, 5.0],
                              kappa=[1.2, 1.1, 1.01, 1.02, 1.1], upper_bound=[2.0, 1.5, 1.05, np.inf, 1.5]))
    excess = prop1.upper_bound_excess(draws)  # (bound − 1)/(κ − 1): 5 and 5 at β = 4; 5 at β = 6 (∞: ε ≥ 1)
    assert np.allclose(excess.to_numpy(), [5.0, 5.0]) and list(excess.index) == [4.0, 6.0]


def test_depth_shows_a_singular_kappa_as_its_lower_bound_and_decides_each_statement_from_the_data():
    assert depth.kappa_cell(np.inf, 3.52e13) == "≥ 3.52e+13" and depth.kappa_cell(1.0886, 1.0886) == "1.089"
    deepest = pd.DataFrame(dict(init=["timm", "timm", "ours", "ours"], equation=["eq8", "eq9", "eq8", "eq9"], depth=12,
                                kappa_ln1c=[1.09, np.inf, 9253.0, np.inf], kappa_ln1c_lo=[1.09, 3.5e13, 9253.0, 3.5e13],
                                kappa=[1.1, np.inf, 9300.0, np.inf], rank=[128, 11, 128, 14], rows=128, n=8))
    cases = pd.DataFrame(dict(init="timm", skip="full", regime=["wide", "tall", "tall"],
                              eq6=["holds", "vacuous(a block singular)", "vacuous(J and a block singular)"],
                              eq6_eff=["holds", "holds", "fails"]))
    t = depth.findings_table(deepest, cases).set_index("statement")
    rows = list(t.index)
    assert t.loc[rows[0], "holds"] == "wherever it says anything (1 cases; vacuous in the other 2)"
    assert t.loc[rows[1], "holds"] == "no" and t.loc[rows[1], "here"].endswith("fails in timm/full/tall")
    assert t.loc[rows[2], "holds"] == "for 1 of 2 inits: timm" and "`ours` 9253" in t.loc[rows[2], "here"]
    assert t.loc[rows[3], "holds"] == "yes" and t.loc[rows[3], "here"].endswith("singular on LN1⊥ in 2 of 2")
    assert "`timm` rank 11 of 128 (LayerNorm alone: 120)" in t.loc[rows[3], "here"]
    # A skipless product that keeps the rank LayerNorm leaves it (finite κ on LN1⊥) does not count.
    kept = depth.findings_table(deepest.assign(kappa_ln1c=[1.09, 5.0, 9253.0, np.inf]), cases).set_index("statement")
    assert kept.loc[rows[3], "holds"] == "in 1 of 2 inits"


def test_an_na_check_is_not_counted_as_passed():
    claim = {"claim": "prop2", "passed": True, "checks": [{"pass": True, "verdict": "pass"}, {"pass": True, "verdict": "n/a"},
                                                          {"pass": True}]}
    assert main.claim_row(claim) == {"claim": "prop2", "checks passed": "2/2 (1 N/A)", "verdict": "PASS"}


def test_a_finding_about_the_papers_conclusion_is_counted_apart_from_the_checks():
    claim = {"claim": "prop2", "passed": True,
             "checks": [{"pass": True, "verdict": "pass"}, {"pass": False, "verdict": "fail"},
                        {"pass": None, "verdict": "does not hold"}, {"pass": None, "verdict": "n/a"},
                        {"pass": None, "verdict": "holds"}]}
    assert main.claim_row(claim)["checks passed"] == \
        "1/2 (1 N/A; 1 paper conclusion does not hold; 1 paper conclusion holds)"
