"""The Python module against its oracles: the jacond CLI on the same weights and tokens (every
report field), the dense closed-form Jacobians (the matrix-free LinearOperators), `jacond audit` on
the same checkpoint (jacond.audit of the PyTorch model), plus errors, warnings and the GIL.

Run in-tree by ctest (python.pytest): PYTHONPATH=<build>/python JACOND_BIN=<build>/experiments/jacond
/usr/bin/python3 -m pytest python/tests.
"""

import os
import subprocess
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import jacond
from jacond import data, safetensors, vit

SKIPS = ["full", "none", "no-ffn-skip", "no-sab-skip"]


def read_csv(path):
    """A CSV jacond wrote, as jacond.read_csv reads it (the helper reports_frame parses with): the
    17-digit numbers parsed to the exact doubles, the text columns as written."""
    return jacond.read_csv(path)


def run(binary, *args):
    r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"jacond {' '.join(map(str, args))} exited {r.returncode}:\n{r.stderr[-2000:]}"
    return r


def random_block(d=8, heads=2, hidden=32, seed=0):
    """A block with every parameter random (LayerNorm affine and biases too), paper convention."""
    rng = np.random.default_rng(seed)
    W = lambda r, c: rng.standard_normal((r, c)) / np.sqrt(r)  # noqa: E731
    v = lambda n, s=0.1: s * rng.standard_normal(n)  # noqa: E731
    return jacond.Block(W(d, d), W(d, d), W(d, d), W(d, d), W(d, hidden), W(hidden, d), heads,
                        bq=v(d), bk=v(d), bv=v(d), bo=v(d), b1=v(hidden), b2=v(d),
                        ln1_gamma=1 + v(d), ln1_beta=v(d), ln2_gamma=1 + v(d), ln2_beta=v(d))


def tokens(n=6, d=8, seed=1):
    return np.random.default_rng(seed).standard_normal((n, d))


# ---------------------------------------------------------------------------------------------
# The module and the CLI are one program

def test_version_is_the_cli_version(jacond_bin):
    assert run(jacond_bin, "--version").stdout.strip() == f"jacond {jacond.__version__}"
    assert jacond.__version__.count(".") == 2


def cli_block(jacond_bin, tmp_path, block, X, skip, *flags):
    """results.csv of `jacond block` on `block` and X written as safetensors (fp64)."""
    safetensors.write(tmp_path / "w.safetensors", block.to_timm(layer=0))
    safetensors.write(tmp_path / "t.safetensors", {"tokens": X})
    out = tmp_path / f"cli-{skip}"
    run(jacond_bin, "block", "--weights", tmp_path / "w.safetensors", "--tokens", tmp_path / "t.safetensors",
        "--heads", block.heads, "--skip", skip, "--threads", 1, "--out", out, *flags)
    return read_csv(out / "results.csv")


REPORT_COLUMNS = jacond.report_csv_header().split(",")


def assert_same_reports(mine, cli):
    """Every report column equal, bit for bit as CSV text parses, except the wall-clock seconds."""
    columns = [c for c in REPORT_COLUMNS if c != "seconds"]
    assert len(mine) == len(cli) > 0
    pd.testing.assert_frame_equal(mine[columns].reset_index(drop=True), cli[columns].reset_index(drop=True),
                                  check_exact=True)


@pytest.mark.parametrize("skip", SKIPS)
def test_dense_reports_equal_the_cli(jacond_bin, tmp_path, skip):
    jacond.set_threads(1)
    block, X = random_block(), tokens()
    mine = jacond.block_reports(block, X, skip=skip, method="dense")
    assert_same_reports(mine, cli_block(jacond_bin, tmp_path, block, X, skip, "--method", "dense"))
    assert set(mine.status) <= {"exact", "singular"}


def test_lanczos_and_certified_reports_equal_the_cli(jacond_bin, tmp_path):
    jacond.set_threads(1)
    block, X = random_block(seed=3), tokens(n=8, seed=4)
    matrices = "K_sa,K_sab,K_ffn"
    mine = jacond.block_reports(block, X, skip="full", method="lanczos", matrices=matrices, certify="inertia")
    cli = cli_block(jacond_bin, tmp_path, block, X, "full", "--method", "lanczos", "--matrices", matrices,
                    "--certify", "inertia")
    assert_same_reports(mine, cli)
    assert (mine.method.str.startswith("gkl")).all() and (mine.status == "certified").all()


def test_lanczos_brackets_the_dense_kappa():
    block, X = random_block(seed=5), tokens(n=8, seed=6)
    dense = jacond.block_reports(block, X, skip="full", method="dense", matrices=["K_sab"]).iloc[0]
    bracket = jacond.block_reports(block, X, skip="full", method="lanczos", matrices=["K_sab"]).iloc[0]
    assert bracket.kappa_lo <= dense.kappa * (1 + 1e-10) and dense.kappa <= bracket.kappa_hi * (1 + 1e-10)


def test_past_host_memory_bytes_the_dense_route_is_the_schur_route_with_the_same_kappa():
    block, X = random_block(seed=7), tokens(n=8, seed=8)
    N = X.size
    full = jacond.block_reports(block, X, skip="full", method="dense", matrices=["K_sa", "K_sab"])
    halves = jacond.block_reports(block, X, skip="full", method="dense", matrices=["K_sa", "K_sab"],
                                  host_memory_bytes=16 * N * N - 1)
    assert (full.method == "dense-lu-lanczos").all() and (halves.method == "dense-schur-lu-lanczos").all()
    assert (halves.status == "exact").all()
    np.testing.assert_allclose(halves.kappa, full.kappa, rtol=1e-9)
    assert halves.note.str.contains(f"split at {N // 2} of {N}").all()
    asked = jacond.block_reports(block, X, skip="full", method="schur", matrices=["K_sa", "K_sab"])
    assert (asked.method == "dense-schur-lu-lanczos").all()
    np.testing.assert_allclose(asked.kappa, full.kappa, rtol=1e-9)


def test_reports_as_objects_carry_the_same_fields():
    block, X = random_block(), tokens()
    objects = jacond.block_reports(block, X, skip="none", method="dense", as_frame=False)
    frame = jacond.reports_frame(objects)
    assert [r.matrix for r in objects] == list(frame.matrix)
    first = objects[0].to_dict()
    assert set(first) == set(REPORT_COLUMNS)
    assert first["kappa"] == frame.kappa[0] and first["status"] == frame.status[0]
    assert first["head"] == -1 and frame["head"][0] == "all"  # the CSV spelling of a whole matrix


def test_condition_of_a_matrix_with_known_singular_values():
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((20, 20)))
    V, _ = np.linalg.qr(rng.standard_normal((20, 20)))
    s = np.logspace(0, -4, 20)
    for method in ("dense", "svd", "lanczos"):
        r = jacond.condition(U @ np.diag(s) @ V.T, method=method)
        assert r.kappa_lo <= 1e4 * (1 + 1e-9) and 1e4 * (1 - 1e-9) <= r.kappa_hi, (method, r)


@pytest.mark.parametrize("name", ["a\rb", "a\nb", "NA", "nan", "None", "", "1e5", "a,b", 'q"q', " pad "])
def test_reports_frame_keeps_a_name_as_written(name):
    """A name goes through the core's CSV writer and read_csv unchanged, in one row: a bare \\r
    was written unquoted (a second row for pandas), and pandas' default NA handling read "NA",
    "nan", "None" and "" as NaN and "1e5" as the float 100000.0. The numbers stay numbers."""
    frame = jacond.reports_frame([jacond.condition(np.diag([3.0, 0.5]), name=name, method="dense")])
    assert len(frame) == 1 and list(frame.columns) == REPORT_COLUMNS
    assert frame.matrix[0] == name and isinstance(frame.matrix[0], str)
    assert frame.kappa[0] == 6.0 and frame.rows[0] == 2 and frame.note[0] == ""
    assert frame.rows.dtype == np.int64 and frame.sigma_min.dtype == np.float64 and frame.matrix.dtype == object
    assert np.isnan(frame.within_1pct[0])  # a count not taken: empty, NaN


def test_read_csv_reads_a_cli_file_as_reports_frame_does(tmp_path):
    """jacond.read_csv is the parser of reports_frame, for the CLI's files: nan and empty numbers
    are NaN, inf is inf, text is kept (an empty note is "")."""
    path = tmp_path / "r.csv"
    path.write_text(jacond.report_csv_header() + "\n"
                    + "NA,full,all,2,2,fp64,gkl,not-converged,nan,0,inf,1,inf,-1,10,0.5,,,\n")
    row = jacond.read_csv(path).iloc[0]
    assert row.matrix == "NA" and row.note == "" and np.isnan(row.sigma_max) and row.kappa == np.inf
    assert np.isnan(row.within_10pct) and row.products == 10


def test_condition_takes_the_lanczos_budget():
    """lanczos_seconds and lanczos_tol of condition() are GKL's budget and target, as block_reports':
    this skipless K_sa (512 x 512) does not converge in 0.3 s (not-converged, with NotConverged),
    and a loose tolerance is met with fewer products than the default's."""
    jacond.set_threads(1)
    block, X = random_block(d=32, heads=2, hidden=128, seed=3), tokens(n=16, d=32, seed=4)
    A = jacond.dense_jacobian(block, X, "K_sa", skip="none")
    start = time.monotonic()
    with pytest.warns(jacond.NotConverged):
        r = jacond.condition(A, method="lanczos", lanczos_seconds=0.3)
    assert r.status == "not-converged" and time.monotonic() - start < 5.0
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    V, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    B = (U * np.linspace(1, 0.1, 200)) @ V.T
    tight = jacond.condition(B, method="lanczos", lanczos_tol=1e-6)
    loose = jacond.condition(B, method="lanczos", lanczos_tol=0.5)
    assert tight.status == loose.status == "bracket"
    assert tight.kappa_hi / tight.kappa_lo <= 1 + 1e-6 < 1.01 < loose.kappa_hi / loose.kappa_lo <= 1.5
    assert loose.products < tight.products


def test_weight_reports_are_the_svd_of_the_products():
    block = random_block(d=8, heads=2)
    df = jacond.weight_reports(block)
    assert list(df.matrix.unique()) == jacond.weight_matrix_names()
    s = np.linalg.svd(block.Wv @ block.Wo, compute_uv=False)
    assert df.set_index("matrix").loc["W_VO", "kappa"] == pytest.approx(s[0] / s[-1], rel=1e-12)
    h0 = df[(df.matrix == "W_QK_h") & (df["head"] == "0")].iloc[0]
    s = np.linalg.svd(block.Wq[:, :4] @ block.Wk[:, :4].T, compute_uv=False)
    assert h0.space == "rank-4" and h0.kappa == pytest.approx(s[0] / s[3], rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Blocks from timm names, arrays and tensors

def test_from_timm_round_trip_and_torch_tensors():
    block = random_block()
    state = block.to_timm(layer=3)
    assert state["blocks.3.attn.qkv.weight"].shape == (24, 8)
    np.testing.assert_array_equal(state["blocks.3.attn.qkv.weight"][:8], block.Wq.T)  # Linear weight = Wᵀ
    back = jacond.Block.from_timm(state, layer=3, heads=2)
    for name in ("Wq", "Wk", "Wv", "Wo", "W1", "W2", "bq", "b1", "ln2_gamma"):
        np.testing.assert_array_equal(getattr(back, name), getattr(block, name))
    as_torch = {k: torch.tensor(v, dtype=torch.float32, requires_grad=True) for k, v in state.items()}
    from_torch = jacond.Block.from_timm(as_torch, layer=3, heads=2)
    np.testing.assert_allclose(from_torch.Wq, block.Wq, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_and_from_timm_read_torch_tensors_with_grad_of_any_float_dtype(dtype):
    """As as_fp64: detached, fp64 of the tensor's values (here rounded to `dtype`)."""
    block = random_block()
    tensor = lambda a: torch.tensor(a, dtype=dtype, requires_grad=True)  # noqa: E731
    rounded = lambda a: tensor(a).detach().double().numpy()  # noqa: E731
    names = ("Wq", "Wk", "Wv", "Wo", "W1", "W2")
    made = jacond.Block(*(tensor(getattr(block, n)) for n in names), 2, bq=tensor(block.bq), ln2_beta=tensor(block.ln2_beta))
    read = jacond.Block.from_timm({k: tensor(v) for k, v in block.to_timm(layer=1).items()}, layer=1, heads=2)
    for name in names + ("bq", "ln2_beta"):
        np.testing.assert_array_equal(getattr(made, name), rounded(getattr(block, name)))
        np.testing.assert_array_equal(getattr(read, name), rounded(getattr(block, name)))


def test_device_cuda_runs_on_the_gpu_or_says_why_not():
    """device="cuda" as `jacond block --device cuda`: without the CUDA back end a ValueError, with it
    but no GPU (CI) a one-line RuntimeError naming the CUDA call; on a GPU the nd × nd rows come
    from the device's LU + Lanczos (method ...-cuda; the rectangular ln-complement rows and K_ffn's
    block-diagonal SVD take the host's routes) with the host's κ to 1e-9."""
    jacond.set_threads(1)
    block, X = random_block(), tokens()
    matrices = "K_sa,K_sab,K_ffn"
    # JACOND_EXPECT_GPU=1 (scripts/gpu_measure.sh item 1, on the GPU machine): no GPU is a failure.
    expect_gpu = os.environ.get("JACOND_EXPECT_GPU") == "1"
    assert jacond.cuda_built or not expect_gpu, "JACOND_EXPECT_GPU=1 and this jacond has no CUDA back end"
    if not jacond.cuda_built:
        with pytest.raises(ValueError, match="built without the CUDA back end"):
            jacond.block_reports(block, X, matrices=matrices, device="cuda")
        return
    try:
        gpu = jacond.block_reports(block, X, matrices=matrices, method="dense", device="cuda")
    except RuntimeError as e:
        message = str(e)
        assert not expect_gpu, f"JACOND_EXPECT_GPU=1 and {message}"
        assert message.startswith("device='cuda': no usable GPU ("), message
        assert "\n" not in message.strip()
        with pytest.raises(RuntimeError, match="no usable GPU"):
            jacond.condition(np.eye(3), device="cuda")
        return
    cpu = jacond.block_reports(block, X, matrices=matrices, method="dense", device="cpu")
    assert len(gpu) == len(cpu)
    for (_, g), (_, c) in zip(gpu.iterrows(), cpu.iterrows()):
        on_device = g.matrix != "K_ffn" and g["rows"] == g["cols"]  # rectangular rows: the host's QR route
        assert g.method == ("dense-lu-lanczos-cuda" if on_device else c.method), (g.matrix, g.space)
        assert g.status == c.status
        if g.status == "exact":
            assert g.kappa == pytest.approx(c.kappa, rel=1e-9), g.matrix
    assert "GB free of" in jacond.device_description("cuda")


# ---------------------------------------------------------------------------------------------
# Matrix-free operators = the dense closed forms

@pytest.mark.parametrize("skip", SKIPS)
@pytest.mark.parametrize("matrix", ["K_sa", "B_sa", "E_sa", "K_sab", "K_mlp", "K_ffn"])
def test_linear_operator_products_equal_the_dense_jacobian(matrix, skip):
    block, X = random_block(), tokens()
    K = jacond.dense_jacobian(block, X, matrix, skip=skip)
    op = jacond.linear_operator(block, X, matrix, skip=skip)
    assert op.shape == K.shape == (48, 48)
    rng = np.random.default_rng(7)
    x, y, V = rng.standard_normal(48), rng.standard_normal(48), rng.standard_normal((48, 3))
    scale = np.linalg.norm(K, 2)
    assert np.abs(op @ x - K @ x).max() <= 1e-13 * scale * np.abs(x).sum()
    assert np.abs(op.T @ y - K.T @ y).max() <= 1e-13 * scale * np.abs(y).sum()
    assert np.abs(op.rmatvec(y) - K.T @ y).max() <= 1e-13 * scale * np.abs(y).sum()
    assert np.abs(op @ V - K @ V).max() <= 1e-13 * scale * np.abs(V).sum()


@pytest.mark.parametrize("space", ["full", "ln-complement"])
def test_linear_operator_applies_complex_vectors_as_the_dense_matrix(space):
    block, X = random_block(), tokens()
    K = jacond.dense_jacobian(block, X, "K_sab", skip="none", space=space)
    op = jacond.linear_operator(block, X, "K_sab", skip="none", space=space)
    rng = np.random.default_rng(9)
    z = lambda *shape: rng.standard_normal(shape) + 1j * rng.standard_normal(shape)  # noqa: E731
    x, y, V, U = z(K.shape[1]), z(K.shape[0]), z(K.shape[1], 3), z(K.shape[0], 3)
    tol = 1e-13 * np.linalg.norm(K, 2) * K.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: the imaginary part is not dropped
        assert np.abs(op @ x - K @ x).max() <= tol
        assert np.abs(op.rmatvec(y) - K.T @ y).max() <= tol
        assert np.abs(op.H @ y - K.conj().T @ y).max() <= tol
        assert np.abs(op @ V - K @ V).max() <= tol
        assert np.abs(op.H @ U - K.T @ U).max() <= tol


def test_vec_is_column_major_and_scipy_svds_runs_on_the_operator():
    from scipy.sparse.linalg import svds

    block, X = random_block(), tokens()
    op = jacond.linear_operator(block, X, "K_sab")
    K = jacond.dense_jacobian(block, X, "K_sab")
    dX = np.zeros_like(X)
    dX[2, 5] = 1.0  # token 2, feature 5 -> vec index 2 + 5·n
    np.testing.assert_allclose(op @ dX.ravel(order="F"), K[:, 2 + 5 * X.shape[0]], rtol=0, atol=1e-13 * np.abs(K).max())
    assert not np.allclose(op @ dX.ravel(order="C"), K[:, 2 + 5 * X.shape[0]])  # row-major would be wrong
    top = svds(op, k=1, return_singular_vectors=False)[0]
    assert top == pytest.approx(np.linalg.norm(K, 2), rel=1e-8)


@pytest.mark.parametrize("skip", ["none", "full"])
@pytest.mark.parametrize("matrix", ["K_sab", "K_ffn"])
def test_ln_complement_operator_products_equal_its_dense_form(matrix, skip):
    block, X = random_block(), tokens()
    Kc = jacond.dense_jacobian(block, X, matrix, skip=skip, space="ln-complement")
    op = jacond.linear_operator(block, X, matrix, skip=skip, space="ln-complement")
    n, d = X.shape
    assert op.shape == Kc.shape == (n * d, n * (d - 2))
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(n * (d - 2)), rng.standard_normal(n * d)
    scale = np.linalg.norm(Kc, 2)
    assert np.abs(op @ x - Kc @ x).max() <= 1e-13 * scale * np.abs(x).sum()
    assert np.abs(op.T @ y - Kc.T @ y).max() <= 1e-13 * scale * np.abs(y).sum()
    assert "on the ln-complement" in repr(op)


def test_ln_complement_of_k_sab_is_k_on_the_complement_of_one_and_x_hat():
    """Basis-free oracle: K_c K_cᵀ = K P Kᵀ with P = blockdiag_i(I − Q_i Q_iᵀ), Q_i an orthonormal
    basis of span{1, x̂_i} computed here from X (LN1's input; eps = 1e-6); and without the skip the
    restricted K is no longer singular, its σ_min the one `block_reports` gives that row."""
    block, X = random_block(seed=5), tokens(seed=6)
    n, d = X.shape
    x_hat = (X - X.mean(1, keepdims=True)) / np.sqrt(X.var(1, keepdims=True) + 1e-6)
    P = np.zeros((n * d, n * d))
    idx = lambda i: np.arange(d) * n + i  # noqa: E731  (token i's entries in vec order)
    for i in range(n):
        Q, _ = np.linalg.qr(np.column_stack([np.ones(d), x_hat[i]]))
        P[np.ix_(idx(i), idx(i))] = np.eye(d) - Q @ Q.T
    K = jacond.dense_jacobian(block, X, "K_sab", skip="none")
    Kc = jacond.dense_jacobian(block, X, "K_sab", skip="none", space="ln-complement")
    np.testing.assert_allclose(Kc @ Kc.T, K @ P @ K.T, rtol=0, atol=1e-12 * np.linalg.norm(K, 2) ** 2)
    sigma = np.linalg.svd(Kc, compute_uv=False)
    row = jacond.block_reports(block, X, skip="none", method="dense", matrices="K_sab")
    row = row[row.space == "ln-complement"].iloc[0]
    assert row.sigma_min == pytest.approx(sigma[-1], rel=1e-10)
    assert np.linalg.svd(K, compute_uv=False)[-1] < 1e-12 * sigma[0] < sigma[-1]


# ---------------------------------------------------------------------------------------------
# audit(model) = jacond audit on the same checkpoint

@pytest.fixture(scope="module")
def fashion():
    if not Path(data.DEFAULT_DIR, "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"Fashion-MNIST is not installed in {data.DEFAULT_DIR}")


TRAIN = ["--dim", "16", "--depth", "2", "--heads", "2", "--patch", "7", "--batch", "32", "--data-limit", "640",
         "--test-limit", "100", "--threads", "1", "--steps", "6", "--lr", "0.01", "--eval-every", "6",
         "--checkpoint-every", "6", "--print-every", "6", "--track-every", "0"]


@pytest.mark.parametrize("skip,norm", [("full", "pre"), ("none", "pre"), ("rezero", "pre"), ("full", "post")])
def test_audit_of_the_model_equals_jacond_audit_of_its_checkpoint(jacond_bin, fashion, tmp_path, skip, norm):
    run(jacond_bin, "train", *TRAIN, "--skip", skip, "--norm", norm, "--out", tmp_path / "run")
    run(jacond_bin, "audit", tmp_path / "run", "--probe-size", 2, "--threads", 1, "--out", tmp_path / "audit")
    cli = read_csv(tmp_path / "audit" / "audit.csv")
    model, meta = vit.load_checkpoint(tmp_path / "run")
    mine = jacond.audit(model, data.probe_images(2), progress=False, threads=1, step=meta["step"],
                        checkpoint=cli.checkpoint[0])
    assert list(mine.columns) == list(cli.columns)
    columns = [c for c in cli.columns if c != "seconds"]
    pd.testing.assert_frame_equal(mine[columns], cli[columns], check_exact=True)
    assert model.training is False  # load_checkpoint's eval mode, restored by audit


def small_vit(seed=0):
    torch.manual_seed(seed)
    return vit.VisionTransformer(dict(dim=16, depth=2, heads=2, patch=7)), torch.randn(1, 1, 28, 28)


def test_audit_of_a_model_with_an_in_place_residual_equals_the_out_of_place_one():
    """x += branch(x) overwrites the block's input tensor: the hook must keep a copy of it."""
    model, images = small_vit()
    expected = jacond.audit(model, images, matrices="K_sab,X_in", method="dense", progress=False)
    for block in model.blocks:
        def forward(x, block=block):
            x += block.attn(block.norm1(x))
            x += block.mlp(block.norm2(x))
            return x
        block.forward = forward
    mine = jacond.audit(model, images, matrices="K_sab,X_in", method="dense", progress=False)
    columns = [c for c in mine.columns if c != "seconds"]
    pd.testing.assert_frame_equal(mine[columns], expected[columns], check_exact=True)


def audit_seeing_block_inputs(model, images, **options):
    """jacond.audit(model, images, **options) and {layer: the first image's tokens entering that
    block}, captured by forward pre-hooks on the audit's own forward pass."""
    inputs = {}
    hooks = [b.register_forward_pre_hook(lambda m, a, l=l: inputs.__setitem__(l, a[0][0].detach().clone()))
             for l, b in enumerate(model.blocks)]
    try:
        return jacond.audit(model, images, progress=False, **options), inputs
    finally:
        for h in hooks:
            h.remove()


def test_audit_folds_layerscale_and_matches_autograd_of_the_scaled_block():
    """timm's LayerScale (blocks.{l}.ls1.gamma / ls2.gamma: x + γ∘branch(x)) is part of the block:
    K_sab and K_ffn of the audit are the autograd Jacobians of the scaled sub-blocks (it was
    ignored: κ(K_sab) 1676 where the block's is 2.95)."""
    model, images = small_vit()
    model = model.double()
    g = torch.Generator().manual_seed(3)
    for block in model.blocks:
        block.ls1, block.ls2 = torch.nn.Module(), torch.nn.Module()
        block.ls1.gamma = torch.nn.Parameter(0.05 + 0.3 * torch.rand(16, generator=g, dtype=torch.float64))
        block.ls2.gamma = torch.nn.Parameter(0.05 + 0.3 * torch.rand(16, generator=g, dtype=torch.float64))
        sab = lambda x, b=block: x + b.ls1.gamma * b.attn(b.norm1(x))  # noqa: E731
        ffn = lambda x, b=block: x + b.ls2.gamma * b.mlp(b.norm2(x))  # noqa: E731
        block.sab, block.ffn = sab, ffn
        block.forward = lambda x, sab=sab, ffn=ffn: ffn(sab(x))
    df, inputs = audit_seeing_block_inputs(model, images.double(), matrices="K_sab,K_ffn", method="dense")

    def kappa(f, x):
        n, d = x.shape
        s = np.linalg.svd(torch.autograd.functional.jacobian(f, x).reshape(n * d, n * d).numpy(), compute_uv=False)
        return s[0] / s[-1]
    for layer, block in enumerate(model.blocks):
        X = inputs[layer]
        rows = df[(df.layer == layer) & (df.space == "full")].set_index("matrix")
        with torch.no_grad():
            X1 = block.sab(X[None])[0]
        expected = {"K_sab": kappa(lambda x: block.sab(x[None])[0], X), "K_ffn": kappa(lambda x: block.ffn(x[None])[0], X1)}
        for matrix, k in expected.items():
            assert rows.loc[matrix, "kappa"] == pytest.approx(k, rel=1e-8), (layer, matrix)


def test_audit_reads_the_attention_logit_scale_and_matches_autograd():
    """attn.scale (timm's and jacond.vit's s of softmax(s · Q Kᵀ)) is the block's logit scale: κ(K_sa)
    of the audit is the autograd Jacobian's of attn at LN1(X) (the scale was ignored, 1/sqrt(d_h)
    taken: κ 4.84e5 at s = 0.05 where the block's is 3.36e7)."""
    model, images = small_vit()
    model = model.double()
    model.blocks[0].attn.scale = 0.05  # layer 1 keeps the default 1/sqrt(d_h)
    df, inputs = audit_seeing_block_inputs(model, images.double(), matrices="K_sa", method="dense")
    for layer, block in enumerate(model.blocks):
        with torch.no_grad():
            Y = block.norm1(inputs[layer][None])[0]
        n, d = Y.shape
        J = torch.autograd.functional.jacobian(lambda y: block.attn(y[None])[0], Y).reshape(n * d, n * d).numpy()
        s = np.linalg.svd(J, compute_uv=False)
        row = df[(df.layer == layer) & (df.space == "full") & (df.matrix == "K_sa")].iloc[0]
        assert row.kappa == pytest.approx(s[0] / s[-1], rel=1e-8), layer


@pytest.mark.parametrize("scale", [0.0, -0.1, float("nan"), float("inf"), None, "0.1", True])
def test_audit_refuses_a_logit_scale_that_is_not_a_finite_positive_number(scale):
    model, images = small_vit()
    model.blocks[1].attn.scale = scale
    with pytest.raises(ValueError, match=r"^blocks\.1\.attn\.scale must be a finite positive number"):
        jacond.audit(model, images, matrices="K_sa", progress=False)


def test_audit_refuses_two_different_layernorm_eps_in_a_block():
    """The analysed block has one LayerNorm ε: norm2's was silently taken to be norm1's."""
    model, images = small_vit()
    model.blocks[1].norm2.eps = 1e-5
    with pytest.raises(ValueError, match=r"^blocks\.1: norm1\.eps 1e-06 and norm2\.eps 1e-05 differ"):
        jacond.audit(model, images, matrices="K_sab", progress=False)
    jacond.audit(model, images, matrices="K_sab", progress=False, ln_eps=1e-5)  # one ε for both, as asked


def test_data_free_reports_are_of_the_stored_weights_not_the_folded_branch_scales():
    """The block's Jacobians use W^O α (ReZero) or W^O diag γ (LayerScale); the data-free weight
    reports describe the stored matrices: at ReZero's init (α = 0) W_O is not reported singular."""
    torch.manual_seed(0)
    model = vit.VisionTransformer(dict(dim=16, depth=1, heads=2, patch=7, skip="rezero"))
    state = model.state_dict()
    assert float(state["blocks.0.rezero_attn"]) == 0.0
    df = jacond.audit_state_dict(state, heads=2).set_index("matrix")
    W_O = state["blocks.0.attn.proj.weight"].double().numpy()
    s = np.linalg.svd(W_O, compute_uv=False)
    assert df.loc["W_O", "status"] == "exact"
    assert df.loc["W_O", "kappa"] == pytest.approx(s[0] / s[-1], rel=1e-10)
    folded = jacond.Block.from_timm(state, heads=2)
    assert np.count_nonzero(np.asarray(folded.Wo)) == 0  # the function: the branch is off at init


def test_a_block_parameter_the_paper_block_does_not_have_is_refused():
    """timm's qk-norm (attn.q_norm, attn.k_norm) changes the block's function: read as the paper's
    block it would be analysed silently wrong, so from_timm (and audit) refuse it by name."""
    state = {k: v for k, v in small_vit()[0].state_dict().items()}
    state["blocks.1.attn.q_norm.weight"] = torch.ones(8)
    jacond.Block.from_timm(state, layer=0, heads=2)  # another block's extra key is not this block's
    with pytest.raises(ValueError, match=r"^blocks\.1\.attn\.q_norm\.weight is not a parameter of the block"):
        jacond.Block.from_timm(state, layer=1, heads=2)
    with pytest.raises(ValueError, match="q_norm"):
        jacond.audit_state_dict(state, heads=2)


def test_audit_checkpoint_column_holds_strings_also_when_empty():
    model, images = small_vit()
    for df in (jacond.audit(model, images, matrices="K_sab", progress=False),
               jacond.audit_state_dict(model.state_dict(), heads=2)):
        assert df.checkpoint.dtype == object and (df.checkpoint == "").all()
    assert (jacond.audit(model, images, matrices="K_sab", checkpoint="step_6", progress=False).checkpoint == "step_6").all()


def test_audit_restores_training_mode_and_reports_progress(jacond_bin, fashion, tmp_path, capsys):
    run(jacond_bin, "train", *TRAIN, "--out", tmp_path / "run")
    model, _ = vit.load_checkpoint(tmp_path / "run")
    model.train()
    df = jacond.audit(model, data.probe_images(1), matrices="K_sab,softmax", progress=True)
    assert model.training
    assert set(df.matrix) == {"K_sab", "softmax"} and set(df.layer) == {0, 1}
    assert "jacond audit" in capsys.readouterr().err  # the progress bar's label


def test_audit_state_dict_equals_jacond_audit_data_free(jacond_bin, fashion, tmp_path):
    run(jacond_bin, "train", *TRAIN, "--out", tmp_path / "run")
    run(jacond_bin, "audit", tmp_path / "run", "--data-free", "--out", tmp_path / "free")
    cli = read_csv(tmp_path / "free" / "audit.csv")
    model, meta = vit.load_checkpoint(tmp_path / "run")
    mine = jacond.audit_state_dict(model.state_dict(), heads=2, step=meta["step"], checkpoint=cli.checkpoint[0])
    columns = [c for c in cli.columns if c != "seconds"]
    pd.testing.assert_frame_equal(mine[columns], cli[columns], check_exact=True)


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError with one line naming the problem

def bad_inputs():
    block, X = random_block(), tokens()
    state = block.to_timm()
    nan_state = dict(state, **{"blocks.0.attn.proj.weight": np.full((8, 8), np.nan)})
    short_state = {k: v for k, v in state.items() if k != "blocks.0.mlp.fc2.weight"}
    wide_state = dict(state, **{"blocks.0.norm2.weight": np.ones(9)})
    int_state = dict(state, **{"blocks.0.norm1.bias": np.zeros(8, dtype=np.int64)})
    nan_X = X.copy()
    nan_X[1, 1] = np.nan
    W = np.eye(8)
    narrow = jacond.Block(np.eye(2), np.eye(2), np.eye(2), np.eye(2), np.eye(2, 4), np.eye(4, 2), 1)
    return [
        (lambda: jacond.block_reports(block, X[:, :5]), "X has d=5 columns but the block has d=8"),
        (lambda: jacond.block_reports(block, X[:1]), "X needs at least 2 tokens"),
        (lambda: jacond.block_reports(block, nan_X), "X contains NaN or inf"),
        (lambda: jacond.block_reports(block, X + 1j * X), "X is complex"),
        (lambda: jacond.condition(torch.eye(3, dtype=torch.complex128)), "A is complex"),
        (lambda: jacond.block_reports(block, X, skip="sometimes"), "sometimes"),
        (lambda: jacond.block_reports(block, X, method="magic"), "magic"),
        (lambda: jacond.block_reports(block, X, matrices=["K_xyz"]), "K_xyz"),
        (lambda: jacond.block_reports(block, X, certify="maybe"), "maybe"),
        (lambda: jacond.block_reports(block, X, lanczos_seconds=0), "lanczos_seconds must be > 0"),
        (lambda: jacond.block_reports(block, X, norm="middle"), "norm must be pre or post"),
        (lambda: jacond.Block.from_timm(nan_state, heads=2), "blocks.0.attn.proj.weight contains NaN"),
        (lambda: jacond.Block.from_timm(short_state, heads=2), "missing key blocks.0.mlp.fc2.weight"),
        (lambda: jacond.Block.from_timm(wide_state, heads=2), "blocks.0.norm2.weight has wrong shape: expected [8], got [9]"),
        (lambda: jacond.Block.from_timm(int_state, heads=2), "blocks.0.norm1.bias has non-floating dtype"),
        (lambda: jacond.Block.from_timm(state, heads=3), "not divisible by heads = 3"),
        (lambda: jacond.Block.from_timm([1, 2], heads=2), "state must be a mapping"),
        (lambda: jacond.Block(W, W, W, W, np.eye(8, 16), np.eye(16, 8), 3), "heads"),
        (lambda: jacond.Block(W, W, W, W * np.nan, np.eye(8, 16), np.eye(16, 8), 2), "NaN"),
        (lambda: jacond.Block(W, W, W, np.eye(8, 7), np.eye(8, 16), np.eye(16, 8), 2), "Wo"),
        (lambda: jacond.linear_operator(block, X, "K_zz"), "unknown Jacobian 'K_zz'"),
        (lambda: jacond.linear_operator(block, X, "K_sa", space="ln-complement"), "K_sab and K_ffn, not K_sa"),
        (lambda: jacond.dense_jacobian(block, X, "K_sab", space="half"), "unknown space 'half'"),
        (lambda: jacond.dense_jacobian(narrow, X[:, :2], "K_ffn", space="ln-complement"), "needs d >= 3, got d=2"),
        (lambda: jacond.block_reports(block, X, device="tpu"), "device must be cpu or cuda, got 'tpu'"),
        (lambda: jacond.JacobianOperator(block, X, "K_sab").matvec(np.ones(5)), "vector of length 5, the operator needs 48"),
        (lambda: jacond.JacobianOperator(block, X, "K_sab").matvec(np.ones(48) * 1j), "x is complex; K is real"),
        (lambda: jacond.JacobianOperator(block, X, "K_sab").rmatvec(np.ones(48, np.complex64)), "y is complex"),
        (lambda: jacond.JacobianOperator(block, X, "K_sab").matmat(np.ones((48, 2)) * 1j), "X is complex"),
        # the core's JacobianOperator took X as a real matrix: numpy dropped a complex X's
        # imaginary part (a ComplexWarning only), and None gave pybind11's list of overloads
        (lambda: jacond.JacobianOperator(block, X + 1j * X, "K_sab"), "X is complex"),
        (lambda: jacond.JacobianOperator(block, torch.tensor(X + 1j * X), "K_sab"), "X is complex"),
        (lambda: jacond.JacobianOperator(block, None, "K_sab"), "X is None"),
        (lambda: jacond.JacobianOperator(block, X[None], "K_sab"), "pass X[0]"),
        (lambda: jacond.condition(np.eye(3), method="lanczos", lanczos_seconds=0), "lanczos_seconds must be > 0"),
        (lambda: jacond.condition(np.eye(3), lanczos_tol=-1.0), "lanczos_tol must be > 0"),
        (lambda: jacond.condition(np.full((3, 3), np.inf)), "A contains NaN or inf"),
        (lambda: jacond.audit_state_dict({"head.weight": np.eye(2)}, heads=1), "no blocks"),
        (lambda: jacond.audit(torch.nn.Linear(2, 2), torch.zeros(1, 2)), "has no `blocks`"),
        (lambda: jacond.block_reports(block, X[None]), "X must be n×d (one image's tokens); got shape (1, 6, 8): pass X[0]"),
        (lambda: jacond.block_reports(block, X[0]), "X must be n×d (one image's tokens); got shape (8,)"),
        (lambda: jacond.block_reports(block, None), "X is None"),
        (lambda: jacond.linear_operator(block, X[None], "K_sab"), "pass X[0]"),
        (lambda: jacond.dense_jacobian(block, X[None], "K_sab"), "pass X[0]"),
        (lambda: jacond.Block(W[None], W, W, W, np.eye(8, 16), np.eye(16, 8), 2), "Wq must be a 2-D array"),
        (lambda: jacond.block_reports(block, X, max_products=2**70), "max_products must be <="),
        (lambda: jacond.block_reports(block, X, method="lanczos", max_products=7), "max_products must be >= 8, got 7"),
        (lambda: jacond.block_reports(block, X, dense_max_bytes=np.nan), "dense_max_bytes must be finite"),
        (lambda: jacond.block_reports(block, X, dense_max_bytes=np.inf), "dense_max_bytes must be finite"),
        (lambda: jacond.block_reports(block, X, host_memory_bytes=-1.0), "host_memory_bytes must be finite and >= 0"),
        (lambda: jacond.block_reports(block, X, method="lanczos", host_memory_bytes=1000.0),
         "host_memory_bytes bounds the host's exact route"),  # ignored before, where the CLI refuses it
        (lambda: jacond.block_reports(block, X, method="svd", host_memory_bytes=1000.0), "which method 'svd'"),
        (lambda: jacond.condition(np.eye(4), method="schur"), "method 'schur' is block_reports' route"),
        (lambda: jacond.set_threads(0), "threads must be >= 1, got 0"),
        (lambda: jacond.condition(np.ones(5)), "A must be a 2-D array, got shape (5,) (a vector: pass v[:, None]"),
        (lambda: jacond.condition(np.ones((2, 2, 2))), "A must be a 2-D array, got shape (2, 2, 2)"),
        (lambda: jacond.set_threads(-1), "threads must be >= 1, got -1"),
        (lambda: jacond.block_reports(block, X, matrices=[]), "matrices is empty; pass None or 'all'"),
        (lambda: jacond.block_reports(block, X, matrices=""), "matrices is empty; pass None or 'all'"),
        (lambda: jacond.block_reports(block, X, norm="post", matrices="K_sab"),
         "a post-norm block has only K_sa, B_sa, E_sa, softmax and attention, not K_sab"),
        (lambda: jacond.block_reports(block, X, norm="post", matrices=["K_sa", "K_ffn"]), "not K_ffn"),
        (lambda: jacond.block_reports(block, X, norm="post", skip="none"),
         "skip='none': a post-norm block is analysed at its input with its own residuals; drop skip"),
    ]


def bad_types():
    block, X, W = random_block(), tokens(), np.eye(8)
    return [
        (lambda: jacond.Block(W, W, W, W, np.eye(8, 16), np.eye(16, 8), 2.5), "heads must be an integer, got 2.5"),
        (lambda: jacond.Block.from_timm(block.to_timm(), heads=2.0), "heads must be an integer, got 2.0"),
        (lambda: jacond.block_reports(block, X, skip=3), "skip must be a string, got 3"),
        (lambda: jacond.JacobianOperator(block, X, "K_sab").matvec("abc"), "x must be a real vector, got <class 'str'>"),
        (lambda: jacond.Block(W, W, W, W, np.eye(8, 16), np.eye(16, 8), 2, logit_scale="x"),
         "logit_scale must be a real number, got 'x'"),
        (lambda: jacond.Block(W, W, W, W, np.eye(8, 16), np.eye(16, 8), 2, bias_q=np.zeros(8)),
         "Block() got an unexpected keyword argument 'bias_q' (expected one of bq, bk,"),
        (lambda: jacond.Block.from_timm(block.to_timm(), heads=2, ln_eps="1e-6"), "ln_eps must be a real number, got '1e-6'"),
        (lambda: jacond.Block.from_timm(block.to_timm(), heads=2, fold_branch_scales=1),
         "fold_branch_scales must be True or False, got 1"),
        (lambda: jacond.block_reports(block, X, lanczos_seconds="30"), "lanczos_seconds must be a real number, got '30'"),
        (lambda: jacond.block_reports(block, X, dense_max_bytes=None), "dense_max_bytes must be a real number, got None"),
        (lambda: jacond.block_reports(block, X, lanczos_tol=np.ones(2)), "lanczos_tol must be a real number, got ndarray"),
        (lambda: jacond.linear_operator(block, X, "K_sab", skip=None), "skip must be a string, got None"),
        (lambda: jacond.block_reports(block, X, matrices={"K_sa"}), "matrices must be None, 'all', a comma-separated"),
        (lambda: jacond.block_reports(block, X, max_products=1e5), "max_products must be an integer"),
        (lambda: jacond.set_threads(2.0), "threads must be an integer, got 2.0"),
        (lambda: jacond.Block(W, W, W, W, np.eye(8, 16), np.eye(16, 8), 2, np.zeros(8)), "takes 8 positional arguments"),
        (lambda: jacond.condition(W, method=5), "method must be a string, got 5"),
        (lambda: jacond.condition(W, device=None), "device must be a string, got None"),
        (lambda: jacond.block_reports(block.to_timm(), X), "block must be a jacond.Block"),
        (lambda: jacond.weight_reports("block"), "block must be a jacond.Block (Block(Wq, ..., heads=h) or"),
        (lambda: jacond.dense_jacobian(None, X, "K_sa"), "got builtins.NoneType"),
        (lambda: jacond.linear_operator([block], X, "K_sa"), "got builtins.list"),
        (lambda: jacond.JacobianOperator(block.to_timm(), X, "K_sa"), "block must be a jacond.Block"),
        (lambda: jacond.JacobianOperator(block, X, None), "matrix must be a string, got None"),
        (lambda: jacond.condition(W, lanczos_seconds="30"), "lanczos_seconds must be a real number, got '30'"),
    ]


def test_a_timm_block_without_biases_reads_as_zero_biases():
    """timm's qkv_bias=False / bias=False store no Linear .bias keys: from_timm reads them as zeros,
    the same function (it raised "missing key blocks.0.attn.qkv.bias"), and its reports equal those
    of the block with those biases set to zero. A norm's bias stays required (an RMSNorm has none)."""
    state = random_block().to_timm()
    linear_bias = [k for k in state if k.endswith(".bias") and "norm" not in k]
    absent = {k: v for k, v in state.items() if k not in linear_bias}
    zeroed = {k: (np.zeros_like(v) if k in linear_bias else v) for k, v in state.items()}
    assert len(linear_bias) == 4
    X = tokens()
    got = jacond.block_reports(jacond.Block.from_timm(absent, heads=2), X, method="dense")
    want = jacond.block_reports(jacond.Block.from_timm(zeroed, heads=2), X, method="dense")
    pd.testing.assert_frame_equal(got.drop(columns="seconds"), want.drop(columns="seconds"), check_exact=True)
    no_norm_bias = {k: v for k, v in state.items() if k != "blocks.0.norm1.bias"}
    assert_one_line_error(ValueError, lambda: jacond.Block.from_timm(no_norm_bias, heads=2), "missing key blocks.0.norm1.bias")


def test_numeric_options_take_numpy_and_torch_scalars():
    """A 0-d NumPy array, a NumPy scalar and a 0-d torch tensor are real numbers to the options, as
    they were before the options were type-checked."""
    block, X = random_block(), tokens()
    want = jacond.block_reports(block, X, matrices="K_sa", method="dense", lanczos_seconds=30.0)
    for seconds in (np.array(30.0), np.float32(30.0), torch.tensor(30.0), 30):
        got = jacond.block_reports(block, X, matrices="K_sa", method="dense", lanczos_seconds=seconds)
        assert list(got.kappa) == list(want.kappa)
    assert jacond.Block.from_timm(block.to_timm(), heads=2, ln_eps=np.array(1e-6)).ln_eps == 1e-6


def test_a_post_norm_block_takes_its_own_residuals_by_default():
    """skip defaults to None: full for a pre-norm block (as before), the block's own residuals for a
    post-norm one, where an explicit skip is a ValueError (it was silently dropped)."""
    block, X = random_block(), tokens()
    default = jacond.block_reports(block, X, matrices="K_sab", method="dense")
    full = jacond.block_reports(block, X, matrices="K_sab", method="dense", skip="full")
    pd.testing.assert_frame_equal(default.drop(columns="seconds"), full.drop(columns="seconds"), check_exact=True)
    post = jacond.block_reports(block, X, norm="post", matrices="K_sa", method="dense")
    assert list(post.matrix) == ["K_sa"]


def assert_one_line_error(error, call, expected):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert expected in message, message
    assert "\n" not in message.strip()


@pytest.mark.parametrize("case", range(len(bad_inputs())))
def test_bad_input_raises_a_one_line_value_error(case):
    assert_one_line_error(ValueError, *bad_inputs()[case])


@pytest.mark.parametrize("case", range(len(bad_types())))
def test_an_argument_of_the_wrong_type_raises_a_one_line_type_error(case):
    assert_one_line_error(TypeError, *bad_types()[case])


def test_set_threads_above_the_blas_cap_warns_and_runs_the_cap():
    before = jacond.get_threads()
    try:
        with pytest.warns(RuntimeWarning, match=r"the BLAS allows at most \d+ threads"):
            jacond.set_threads(10**6)
        assert 1 <= jacond.get_threads() < 10**6
    finally:
        jacond.set_threads(before)


def test_docstrings_say_how_to_call_jacond_from_several_python_threads():
    for f in (jacond.set_threads, jacond.block_reports):
        assert "set_threads(1)" in f.__doc__ and "oversubscribe" in f.__doc__, f.__name__


def test_matrices_all_as_a_list_is_every_matrix():
    block, X = random_block(), tokens()
    every = jacond.block_reports(block, X, method="dense")
    for matrices in (["all"], "all", None):
        df = jacond.block_reports(block, X, method="dense", matrices=matrices)
        assert list(df.matrix) == list(every.matrix), matrices
    model, images = small_vit()
    audited = jacond.audit(model, images, matrices=["all"], progress=False)
    assert list(audited[audited.layer == 0].matrix) == list(jacond.audit(model, images, progress=False).query("layer == 0").matrix)


# ---------------------------------------------------------------------------------------------
# Budgets and the GIL

def test_a_bracket_stopped_by_its_budget_warns_not_converged():
    block, X = random_block(d=16, heads=2, hidden=64, seed=9), tokens(n=12, d=16)
    with pytest.warns(jacond.NotConverged, match="not converged"):
        df = jacond.block_reports(block, X, skip="none", method="lanczos", matrices=["K_sa"], max_products=30)
    assert (df.status == "not-converged").all() and (df.kappa_lo < df.kappa_hi).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", jacond.NotConverged)
        jacond.block_reports(block, X, skip="none", method="dense", matrices=["K_sa"])  # no warning


def seconds_to_interrupt(call, after):
    """Runs call() with a SIGINT (a notebook's interrupt) sent `after` seconds in; the call must
    raise KeyboardInterrupt. Returns the seconds from the start to the raise."""
    import os
    import signal

    timer = threading.Timer(after, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        call()
    timer.join()
    return time.monotonic() - start


def test_ctrl_c_stops_a_long_matrix_free_bracket():
    """A notebook's interrupt (SIGINT) stops block_reports inside a Lanczos bracket, not after its
    lanczos_seconds: the solver checks Python's signals at every estimate. This skipless K_sa
    (n 16, d 32) does not converge in 6 s, so without the check the call runs its whole 20 s."""
    jacond.set_threads(1)
    block, X = random_block(d=32, heads=2, hidden=128, seed=3), tokens(n=16, d=32, seed=4)
    seconds = seconds_to_interrupt(lambda: jacond.block_reports(block, X, skip="none", method="lanczos",
                                                                matrices=["K_sa"], lanczos_seconds=20.0,
                                                                max_products=10**7), 1.0)
    assert seconds < 10.0, "the interrupt waited for the budget"


def test_ctrl_c_stops_condition_on_the_lanczos_route():
    """condition(A, method="lanczos") has the same hook: the same skipless K_sa assembled (512 x
    512) ran its whole 120 s budget through a Ctrl-C (here its budget is 30 s)."""
    jacond.set_threads(1)
    block, X = random_block(d=32, heads=2, hidden=128, seed=3), tokens(n=16, d=32, seed=4)
    A = jacond.dense_jacobian(block, X, "K_sa", skip="none")
    seconds = seconds_to_interrupt(lambda: jacond.condition(A, method="lanczos", lanczos_seconds=30.0), 1.0)
    assert seconds < 10.0, "the interrupt waited for the budget"


def test_ctrl_c_stops_a_dense_call_between_factorisations():
    """The dense routes check Python's signals before each factorisation: SIGINT 0.5 s into five
    dense SVDs of 2048 x 2048 Jacobians (skipless K_sa, B_sa, E_sa, K_sab on both spaces) ends the
    call after the one running, in well under half the uninterrupted call's time (measured here
    first, same sizes and threads)."""
    jacond.set_threads(1)
    block, X = random_block(d=64, heads=2, hidden=256, seed=3), tokens(n=32, d=64, seed=4)
    call = dict(skip="none", method="svd", matrices=["K_sa", "B_sa", "E_sa", "K_sab"], as_frame=False)
    start = time.monotonic()
    assert len(jacond.block_reports(block, X, **call)) == 5
    whole = time.monotonic() - start
    seconds = seconds_to_interrupt(lambda: jacond.block_reports(block, X, **call), 0.5)
    assert seconds < 0.5 * whole, f"the interrupt waited for the whole call ({whole:.1f} s)"


def test_ctrl_c_stops_the_token_block_diagonal_rows_between_tokens():
    """The per-token K_mlp / K_ffn (one SVD of d x d per token, three rows skipless) check Python's
    signals before each token's block: SIGINT 0.5 s into the call ends it in well under half the
    uninterrupted call's time (measured here first, same sizes and threads)."""
    jacond.set_threads(1)
    block, X = random_block(d=256, heads=2, hidden=1024, seed=3), tokens(n=128, d=256, seed=4)
    call = dict(skip="none", method="dense", matrices=["K_mlp", "K_ffn"], as_frame=False)
    start = time.monotonic()
    assert len(jacond.block_reports(block, X, **call)) == 3
    whole = time.monotonic() - start
    seconds = seconds_to_interrupt(lambda: jacond.block_reports(block, X, **call), 0.5)
    assert seconds < 0.5 * whole, f"the interrupt waited for the whole call ({whole:.1f} s)"


def test_long_computations_release_the_gil():
    """A second Python thread keeps running while the core computes: with the GIL held, the main
    thread below could take no sample between the worker's start and end."""
    jacond.set_threads(1)
    block, X = random_block(d=48, heads=4, hidden=192, seed=2), tokens(n=24, d=48)
    window = {}

    def work():
        window["start"] = time.monotonic()
        jacond.block_reports(block, X, skip="full", method="svd", matrices=["K_sa", "K_sab"], as_frame=False)
        window["end"] = time.monotonic()

    worker = threading.Thread(target=work)
    samples = []
    worker.start()
    while worker.is_alive():
        samples.append(time.monotonic())
    worker.join()
    inside = [t for t in samples if window["start"] + 0.05 < t < window["end"] - 0.05]
    assert window["end"] - window["start"] > 0.3, "the computation is too short to test the GIL"
    assert len(inside) > 1000, f"{len(inside)} samples while the core ran {window['end'] - window['start']:.2f} s"
