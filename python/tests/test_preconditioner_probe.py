"""experiments/bench/preconditioner_probe.py (the README's "B_sa is no preconditioner" finding)
against independent arithmetic: its factored B_sa⁻¹ (two d × d solves and one n × n solve per
head, the cost the finding assumes) inverts jacond's assembled B_sa, and its κ of K B⁻¹ lies in
the interval submultiplicativity allows, [κ(K)/κ(B), κ(K)·κ(B)]."""

import importlib.util
from pathlib import Path

import numpy as np

import jacond

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "bench" / "preconditioner_probe.py"
spec = importlib.util.spec_from_file_location("preconditioner_probe", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def block_and_tokens(n=7, d=8, heads=2, seed=3):
    rng = np.random.default_rng(seed)
    W = lambda r, c: rng.standard_normal((r, c)) / np.sqrt(r)  # noqa: E731
    v = lambda k: 0.1 * rng.standard_normal(k)  # noqa: E731
    block = jacond.Block(W(d, d), W(d, d), W(d, d), W(d, d), W(d, 4 * d), W(4 * d, d), heads, bq=v(d), bk=v(d),
                         bv=v(d), bo=v(d), ln1_gamma=1 + v(d), ln1_beta=v(d))
    return block, rng.standard_normal((n, d))


def test_the_factored_inverse_inverts_the_assembled_b():
    block, X = block_and_tokens()
    n, d = X.shape
    B = jacond.dense_jacobian(block, X, "B_sa")
    R = np.random.default_rng(4).standard_normal((n, d))
    dY = probe.apply_b_inverse(block, probe.attention_maps(block, X), R)
    # B acts on vec(δY) in column-major order (jacond's convention): B vec(δY) = vec(R)
    residual = B @ dY.ravel(order="F") - R.ravel(order="F")
    assert np.linalg.norm(residual) <= 1e-10 * np.linalg.norm(R) * np.linalg.cond(B)


def test_the_kappas_obey_submultiplicativity():
    block, X = block_and_tokens(seed=5)
    row = probe.measure(block, X)
    assert row["nd"] == 7 * 8
    exact = jacond.condition(jacond.dense_jacobian(block, X, "K_sa"), method="svd").kappa
    assert abs(row["kappa_K"] / exact - 1) <= 1e-10
    slack = 1 + 1e-8
    assert row["kappa_K"] / row["kappa_B"] / slack <= row["kappa_K_Binv"] <= row["kappa_K"] * row["kappa_B"] * slack
    assert row["kappa_K"] / row["kappa_B"] / slack <= row["kappa_Binv_K"] <= row["kappa_K"] * row["kappa_B"] * slack
    assert 0 <= row["K_Binv_within_2x_of_1"] <= 1
    assert row["kappa_K"] / row["kappa_K_Minv"] > 0 and 0 <= row["K_Minv_within_2x_of_1"] <= 1


def test_token_blocks_are_the_jacobians_of_each_token_on_itself():
    """M's block i against the matrix-free operator (the closed-form kernels, not the dense
    assembly): K e for e a unit direction of token i, read at token i's outputs; zero across tokens."""
    block, X = block_and_tokens(seed=6)
    n, d = X.shape
    M = probe.token_blocks(jacond.dense_jacobian(block, X, "K_sa"), n, d)
    op = jacond.JacobianOperator(block, X, "K_sa", "none", "full")
    for i in (0, 3, n - 1):
        for k in (0, d - 1):
            dX = np.zeros((n, d))
            dX[i, k] = 1.0
            column = op.matvec(dX.ravel(order="F")).reshape((n, d), order="F")
            got = M[:, i + n * k].reshape((n, d), order="F")
            assert np.allclose(got[i], column[i], rtol=0, atol=1e-12 * np.abs(column).max())
            assert not got[np.arange(n) != i].any()
