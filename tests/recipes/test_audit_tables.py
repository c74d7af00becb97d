"""The audit recipe's per-run table: κ of every whole-block report per checkpoint step, each cell
keeping its status (a singular or not-converged report is never printed as a plain κ)."""

import numpy as np
import pandas as pd

from jacond_recipes import audit


def rows():
    out = []
    def add(step, matrix, space, status, kappa, lo, hi, head="all", method="dense-lu-lanczos"):
        out.append(dict(checkpoint=f"run/step-{step:07d}", step=step, probe=0, layer=0, matrix=matrix, space=space,
                        head=head, method=method, status=status, kappa=kappa, kappa_lo=lo, kappa_hi=hi))
    for step in (0, 1000):
        add(step, "K_sab", "full", "singular", np.inf, 1.4e12, np.inf)
        add(step, "softmax", "ones-complement", "exact", 7.0, 7.0, 7.0, head=0)  # per head: not in the table
    add(0, "K_sab", "ln-complement", "singular", np.inf, 1.3e12, np.inf, method="dense-qr-lanczos")
    add(1000, "K_sab", "ln-complement", "exact", 1.071e5, 1.071e5, 1.071e5, method="dense-qr-lanczos")
    add(0, "K_sa", "full", "not-converged", 3.0e9, 2.0e9, np.inf, method="lanczos")
    add(1000, "K_sa", "full", "bracket", 5.0e8, 4.9e8, 5.1e8, method="lanczos")
    return pd.DataFrame(out)


def test_each_cell_keeps_its_status_and_per_head_rows_are_left_out():
    t = audit.kappa_over_steps(rows()).set_index(["matrix", "space"])
    assert list(t.columns) == ["layer", "method", "step 0", "step 1000"]
    assert ("softmax", "ones-complement") not in t.index
    assert t.loc[("K_sab", "full"), "step 0"] == "singular (≥ 1.4e+12)"
    assert t.loc[("K_sab", "ln-complement"), "step 0"] == "singular (≥ 1.3e+12)"
    assert t.loc[("K_sab", "ln-complement"), "step 1000"] == "1.07e+05"
    assert t.loc[("K_sab", "ln-complement"), "method"] == "dense-qr-lanczos"
    assert t.loc[("K_sa", "full"), "step 0"] == "≥ 2e+09"  # the estimate 3e9 is not a κ
    assert t.loc[("K_sa", "full"), "step 1000"] == "[4.9e+08, 5.1e+08]"


def test_several_probes_get_a_row_each_and_a_duplicate_report_is_refused():
    one = rows()
    two = pd.concat([one, one.assign(probe=1, kappa=one["kappa"] * 2, kappa_lo=one["kappa_lo"] * 2,
                                     kappa_hi=one["kappa_hi"] * 2)])
    t = audit.kappa_over_steps(two)
    assert list(t.columns[:4]) == ["probe", "layer", "matrix", "space"]
    k_sab = t[(t["matrix"] == "K_sab") & (t["space"] == "ln-complement")].set_index("probe")
    assert k_sab.loc[0, "step 1000"] == "1.07e+05" and k_sab.loc[1, "step 1000"] == "2.14e+05"
    try:
        audit.kappa_over_steps(pd.concat([one, one]))
    except audit.RecipeError as e:
        assert "two whole-block reports" in str(e)
    else:
        raise AssertionError("a duplicated report was not refused")
