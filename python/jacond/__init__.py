"""jacond from Python: the conditioning of Vision Transformer Jacobians, computed by jacond's C++ core.

Three lines audit a PyTorch ViT (timm parameter names):

    import jacond
    df = jacond.audit(model, images)          # a pandas DataFrame, the columns of `jacond audit`'s audit.csv
    df.query("matrix == 'K_sab'")[["layer", "kappa", "status"]]

One block, from arrays (NumPy, or torch tensors, which are read as fp64 NumPy):

    block = jacond.Block.from_timm(model.state_dict(), layer=0, heads=6)   # or jacond.Block(Wq, Wk, ...)
    jacond.block_reports(block, X, skip="full")          # DataFrame, as `jacond block`'s results
    K = jacond.linear_operator(block, X, "K_sab")        # scipy.sparse.linalg.LinearOperator
    scipy.sparse.linalg.svds(K, k=1)

Conventions (the C++ core's, docs/design.md §2):
  * fp64 throughout; other dtypes are converted. A fp64 Fortran-ordered matrix (or contiguous
    vector) is read in place by the core; anything else is copied once.
  * Paper convention y = x W + b: W^Q etc. are d_in x d_out (timm's Linear weights transposed;
    Block.from_timm does the transpose). Tokens X are n x d.
  * Jacobians act on vec(X) in column-major order: x = dX.ravel(order="F").
  * Every report carries its method and status: exact / certified / bracket / singular /
    not-converged. A not-converged bracket also raises the warning jacond.NotConverged.
  * Bad input raises ValueError with the same one-line message as the CLI (an argument of the
    wrong type: a one-line TypeError naming it).
  * Long computations release the GIL: other Python threads run meanwhile.
"""

import functools
import io
import numbers
import warnings

import numpy as np

from ._jacond import (
    Block,
    JacobianOperator,
    Report,
    __version__,
    block_matrix_names,
    cuda_built,
    dense_jacobian as _dense_jacobian,
    device_description,
    get_threads,
    operator_names,
    report_csv_header,
    skip_modes,
    weight_matrix_names,
)
from . import _jacond

__all__ = [
    "Block", "JacobianOperator", "Report", "NotConverged", "__version__",
    "audit", "audit_state_dict", "block_reports", "weight_reports", "condition",
    "dense_jacobian", "linear_operator", "reports_frame", "read_csv",
    "block_matrix_names", "weight_matrix_names", "operator_names", "skip_modes",
    "report_csv_header", "set_threads", "get_threads", "cuda_built", "device_description",
]


class NotConverged(UserWarning):
    """A matrix-free bracket stopped at its budget before κ_hi/κ_lo reached 1 + tolerance.

    The report is still returned, with status "not-converged" and the bracket it reached."""


def as_fp64(a, name="array", ndim=None):
    """A NumPy fp64 array of `a` (NumPy array, torch tensor, nested lists); ValueError naming
    `name` for anything else, or for another number of dimensions than `ndim` (when given)."""
    if a is None:
        raise ValueError(f"{name} is None; expected an array")
    if (a.is_complex() if hasattr(a, "detach") else np.iscomplexobj(a)):  # casting would drop the imaginary part
        raise ValueError(f"{name} is complex; jacond's weights, tokens and matrices are real")
    if hasattr(a, "detach"):  # a torch tensor: leave autograd and the device
        a = a.detach().cpu().double().numpy()
    try:
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not a numeric array: {e}") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {a.shape}")
    return a


def _tokens(X):
    """X as the n x d fp64 tokens of one image; ValueError naming the shape otherwise."""
    X = as_fp64(X, "X")
    if X.ndim != 2:
        hint = ": pass X[0]" if X.ndim == 3 and X.shape[0] == 1 else ""
        raise ValueError(f"X must be n×d (one image's tokens); got shape {X.shape}{hint}")
    return X


def _integer(value, name, low, high=2**63 - 1):
    """`value` as an int in [low, high]: TypeError naming `name` for a non-integer (2.5, None),
    ValueError outside the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be " + (f">= {low}" if value < low else f"<= {high}") + f", got {value}")
    return int(value)


def _real(value, name):
    """`value` as a float: a number, or anything float() reads but a string (a 0-d NumPy array or
    torch tensor, a Decimal); TypeError naming `name` otherwise ("30", None, True, an array), so a
    wrong type is one line, not pybind11's list of overloads with every array printed."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}") from None


def _check_strings(**values):
    """TypeError naming the first argument that is not a string (skip=None, ...)."""
    for name, value in values.items():
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {value!r}")


def _block(block):
    """The block itself, or a TypeError naming what was passed instead (the core's would list overloads)."""
    if not isinstance(block, Block):
        raise TypeError(f"block must be a jacond.Block (Block(Wq, ..., heads=h) or Block.from_timm(state_dict)), "
                        f"got {type(block).__module__}.{type(block).__qualname__}")
    return block


def _matrix_selection(matrices):
    """The names of a `matrices` argument: None for every matrix (None, "all", ["all"]), else a
    list from "K_sa,K_sab" or a list / tuple of names. An empty selection is a ValueError."""
    if matrices is None:
        return None
    if isinstance(matrices, str):
        matrices = matrices.split(",")
    elif not isinstance(matrices, (list, tuple)) or not all(isinstance(m, str) for m in matrices):
        raise TypeError(f"matrices must be None, 'all', a comma-separated string or a list of names, got {matrices!r}")
    names = [m for m in matrices if m]
    if not names:
        raise ValueError("matrices is empty; pass None or 'all' for every matrix")
    return None if names == ["all"] else names


def set_threads(n):
    """Threads of the BLAS and of jacond's parallel loops (the CLI's --threads); the default is the
    machine's cores (or $OPENBLAS_NUM_THREADS). n < 1 is a ValueError; n above the BLAS's build-time cap (get_threads() after
    the call) runs that cap, with a RuntimeWarning saying so.

    Concurrent Python threads: each call of block_reports, audit, condition ... runs get_threads()
    threads of its own, so k Python threads calling jacond at once run k x get_threads() threads,
    which oversubscribes the cores and can be many times slower than one call after another. Call
    set_threads(1) before parallelising over blocks or images in Python (ThreadPoolExecutor)."""
    n = _integer(n, "threads", 1, 2**31 - 1)
    _jacond.set_threads(n)
    if get_threads() < n:
        _jacond.set_threads(get_threads())  # jacond's parallel loops at the BLAS's cap too
        warnings.warn(f"set_threads({n}): the BLAS allows at most {get_threads()} threads; using {get_threads()}",
                      RuntimeWarning, stacklevel=2)


_BLOCK_WEIGHTS = ("Wq", "Wk", "Wv", "Wo", "W1", "W2")
_BLOCK_VECTORS = ("bq", "bk", "bv", "bo", "b1", "b2", "ln1_gamma", "ln1_beta", "ln2_gamma", "ln2_beta")
_core_block_init, _core_from_timm = Block.__init__, Block.from_timm


def _block_options(where, options, vectors=(), reals=("logit_scale", "ln_eps"), flags=()):
    """Keyword options of `where` checked by name and type (TypeError naming the first that fails):
    vectors read as as_fp64 does, reals as _real, flags must be bool."""
    checked = {}
    for k, v in options.items():
        if k in vectors:
            checked[k] = None if v is None else as_fp64(v, k, ndim=1)
        elif k in reals:
            checked[k] = _real(v, k)
        elif k in flags:
            if not isinstance(v, bool):
                raise TypeError(f"{k} must be True or False, got {v!r}")
            checked[k] = v
        else:
            raise TypeError(f"{where} got an unexpected keyword argument {k!r} (expected one of "
                            + ", ".join(list(vectors) + list(reals) + list(flags)) + ")")
    return checked


# The Block class is the core's; these two wrappers read torch tensors (requires_grad, bf16, on a
# GPU) and other array-likes as as_fp64 does, and check heads and every keyword option, before the
# C++ constructor sees them.
@functools.wraps(_core_block_init)
def _block_init(self, Wq, Wk, Wv, Wo, W1, W2, heads, **options):
    weights = [as_fp64(a, name, ndim=2) for name, a in zip(_BLOCK_WEIGHTS, (Wq, Wk, Wv, Wo, W1, W2))]
    options = _block_options("Block()", options, vectors=_BLOCK_VECTORS)
    _core_block_init(self, *weights, _integer(heads, "heads", 1), **options)


class _HostArrays:
    """A state dict whose tensors are read, on access, as NumPy arrays on the host (fp64 when
    floating; other dtypes as they are, for the core to refuse by name)."""

    def __init__(self, state):
        self.state = state

    def keys(self):
        return self.state.keys()

    def __contains__(self, key):
        return key in self.state

    def __getitem__(self, key):
        a = self.state[key]
        if hasattr(a, "detach"):
            a = a.detach().cpu()
            a = (a.double() if a.is_floating_point() else a).numpy()
        return a


@functools.wraps(_core_from_timm)
def _from_timm(state, layer=0, heads=None, **options):
    state = _HostArrays(state) if hasattr(state, "keys") and hasattr(state, "__getitem__") else state
    options = _block_options("Block.from_timm()", options, flags=("fold_branch_scales",))
    return _core_from_timm(state, layer=_integer(layer, "layer", 0), heads=_integer(heads, "heads", 1), **options)


_block_init.__qualname__, _from_timm.__qualname__ = "Block.__init__", "Block.from_timm"
Block.__init__, Block.from_timm = _block_init, staticmethod(_from_timm)

_core_operator_init = JacobianOperator.__init__


# The core's JacobianOperator takes X as the other entry points do (_tokens: a torch tensor, a
# complex or None X named in one line), the block and the strings checked by name.
@functools.wraps(_core_operator_init)
def _operator_init(self, block, X, matrix, skip="full", space="full"):
    _check_strings(matrix=matrix, skip=skip, space=space)
    _core_operator_init(self, _block(block), _tokens(X), matrix, skip, space)


_operator_init.__qualname__ = "JacobianOperator.__init__"
JacobianOperator.__init__ = _operator_init


def _warn_not_converged(reports, where=""):
    stuck = [r for r in reports if r.status == "not-converged"]
    if stuck:
        names = ", ".join(sorted({r.matrix + ("" if r.space == "full" else "/" + r.space) for r in stuck}))
        warnings.warn(f"{where}{len(stuck)} bracket(s) not converged within the budget ({names}); "
                      "raise lanczos_seconds or max_products, or use method='dense'", NotConverged, stacklevel=3)


def reports_frame(reports, prefix=None):
    """A pandas DataFrame of Reports with the columns and dtypes of jacond's CSVs as read_csv reads them.

    The rows are rendered by the core's CSV writer (17 significant digits) and parsed back by
    read_csv, so numbers are the core's doubles exactly, names are kept as written ("NA", "1e5",
    "" stay strings), and the frame equals `jacond.read_csv(path)` of the file the CLI writes for
    the same reports (head -1 reads as "all", counts not taken are NaN). `prefix`: (column names,
    per-report list of values) put before the report columns, as audit.csv's checkpoint, step,
    probe, layer."""
    names, values = prefix if prefix else ([], [[] for _ in reports])
    lines = [",".join(list(names) + [report_csv_header()])]
    for r, v in zip(reports, values):
        lines.append(",".join([_csv_field(x) for x in v] + [r.csv_fields()]))
    return read_csv(io.StringIO("\n".join(lines) + "\n"))


# The text columns of jacond's CSVs: read as written, never as NaN or numbers (a matrix named "NA",
# "nan", "None", "" or "1e5"; an empty note or checkpoint is "").
_TEXT_COLUMNS = ("matrix", "space", "dtype", "method", "status", "note", "checkpoint")


def read_csv(path_or_buffer):
    """A CSV jacond wrote (results.csv, sweep.csv, conditioning.csv, audit.csv ...) as a pandas
    DataFrame: the text columns (matrix, space, dtype, method, status, note, checkpoint) as the
    strings written; the others as pandas infers them, with only an empty field and "nan" read
    as NaN, and the 17-digit numbers parsed to the exact doubles (float_precision="round_trip";
    pandas' default parser can be 1 ulp off). pandas.read_csv's defaults would read a matrix
    named "NA", "None" or "" as NaN and one named "1e5" as 100000.0."""
    import pandas as pd

    return pd.read_csv(path_or_buffer, float_precision="round_trip", keep_default_na=False, na_values=["", "nan"],
                       converters={c: str for c in _TEXT_COLUMNS})  # a converter sees the field as written


def _csv_field(x):
    s = str(x)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n\r') else s


def block_reports(block, X, *, skip=None, method="auto", matrices=None, lanczos_seconds=120.0,
                  lanczos_tol=0.01, lanczos_basis=96, max_products=200000, certify="none",
                  dense_max_bytes=0.0, norm="pre", device="cpu", host_memory_bytes=0.0, as_frame=True):
    """Condition reports of one block at tokens X (n x d, one image's), as `jacond block` computes them.

    skip: full (the default for a pre-norm block; `jacond block`'s is --skip none) | none |
    no-ffn-skip | no-sab-skip; a post-norm block (norm "post") is analysed at its input with its own
    residuals, and a skip is a ValueError there, as `jacond block` refuses --skip for it.
    method: auto (dense when it fits the memory and the lanczos_seconds time budget, else schur when that fits them, else lanczos; K_mlp and K_ffn
    exact by their per-token blocks wherever those fit) | dense | svd |
    mixed | schur (the host's block LU in 2 to 8 pieces, a quarter of dense's memory or less) | lanczos.
    matrices: names among block_matrix_names(), as a list or "K_sa,K_sab" (None or "all": all).
    certify: none | inertia | auto. max_products >= 8 (a Lanczos bracket's budget).
    norm "post": a post-norm block (K_sa, B_sa, E_sa, softmax, attention at X itself; others are a
    ValueError). device: cpu | cuda, where the dense exact routes run (`--device`; the method
    column says where, e.g. dense-lu-lanczos-cuda). host_memory_bytes: what the host's exact route
    may hold (0: 90% of RAM); an nd x nd matrix whose full route (16 N^2 bytes) is past it takes
    the Schur route (method dense-schur-lu-lanczos, exact, about a quarter of that memory; as
    `--host-memory`). Returns a DataFrame (as_frame) or the list of
    Report objects. Ctrl-C (KeyboardInterrupt) stops a matrix-free bracket at its next estimate
    and a dense call before its next factorisation (one running finishes first; on the Schur route,
    before its next panel or solve). Calling it from
    several Python threads at once: see set_threads (call set_threads(1) first, or the threads
    oversubscribe the cores)."""
    _check_strings(method=method, certify=certify, norm=norm, device=device)
    if skip is not None:
        _check_strings(skip=skip)
        if norm == "post":
            raise ValueError(f"skip={skip!r}: a post-norm block is analysed at its input with its own residuals; drop skip")
    reports = _jacond.block_reports(_block(block), _tokens(X), skip="full" if skip is None else skip, method=method,
                                    matrices=_matrix_selection(matrices),
                                    lanczos_seconds=_real(lanczos_seconds, "lanczos_seconds"),
                                    lanczos_tol=_real(lanczos_tol, "lanczos_tol"),
                                    lanczos_basis=_integer(lanczos_basis, "lanczos_basis", 2),
                                    max_products=_integer(max_products, "max_products", 8), certify=certify,
                                    dense_max_bytes=_real(dense_max_bytes, "dense_max_bytes"), norm=norm, device=device,
                                    host_memory_bytes=_real(host_memory_bytes, "host_memory_bytes"))
    _warn_not_converged(reports)
    return reports_frame(reports) if as_frame else reports


def weight_reports(block, as_frame=True):
    """Data-free reports of one block (`jacond audit --data-free`): W_VO, W_VO_h, W_QK_h, W_Q ... W_2."""
    reports = _jacond.weight_reports(_block(block))
    return reports_frame(reports) if as_frame else reports


def condition(A, *, method="auto", name="A", device="cpu", lanczos_seconds=120.0, lanczos_tol=0.01):
    """The condition Report of a dense matrix by one of jacond's routes (auto | dense | svd | mixed | lanczos),
    the dense ones on `device` (cpu | cuda). A must be 2-D (a vector has no one reading as a matrix:
    pass v[:, None] or v[None, :]). method="mixed" factorises fl32(A): entries beyond fp32's range
    (|a| > 3.4e38) are a ValueError; use "dense" for such a matrix.
    The Lanczos route (method "lanczos", or "auto" on a matrix too big for the dense route) brackets
    kappa matrix-free within lanczos_seconds (> 0) to kappa_hi/kappa_lo <= 1 + lanczos_tol (> 0), as
    block_reports' options of the same names; past the budget the report is "not-converged" with the
    warning NotConverged. Ctrl-C (KeyboardInterrupt) stops it at its next estimate."""
    _check_strings(method=method, name=name, device=device)
    a = as_fp64(A, "A")
    if a.ndim != 2:
        raise ValueError(f"A must be a 2-D array, got shape {a.shape}"
                         + (" (a vector: pass v[:, None] or v[None, :])" if a.ndim == 1 else ""))
    report = _jacond.condition(a, method=method, name=name, device=device,
                               lanczos_seconds=_real(lanczos_seconds, "lanczos_seconds"),
                               lanczos_tol=_real(lanczos_tol, "lanczos_tol"))
    _warn_not_converged([report])
    return report


def dense_jacobian(block, X, matrix, skip="full", space="full"):
    """The nd x nd Jacobian `matrix` (K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn) of `block` at X,
    assembled from the closed forms; rows and columns in vec (column-major) order.
    space="ln-complement" (K_sab, K_ffn): nd x n(d-2), K times the per-token bases of
    span{1, x̂_i}⟂ that linear_operator(..., space="ln-complement") uses."""
    _check_strings(matrix=matrix, skip=skip, space=space)
    return _dense_jacobian(_block(block), _tokens(X), matrix, skip, space)


from .operators import linear_operator  # noqa: E402  (needs _tokens above)
from ._audit import audit, audit_state_dict  # noqa: E402
