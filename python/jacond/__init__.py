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
  * Bad input raises ValueError with the same one-line message as the CLI.
  * Long computations release the GIL: other Python threads run meanwhile.
"""

import io
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
    set_threads,
    skip_modes,
    weight_matrix_names,
)
from . import _jacond

__all__ = [
    "Block", "JacobianOperator", "Report", "NotConverged", "__version__",
    "audit", "audit_state_dict", "block_reports", "weight_reports", "condition",
    "dense_jacobian", "linear_operator", "reports_frame",
    "block_matrix_names", "weight_matrix_names", "operator_names", "skip_modes",
    "report_csv_header", "set_threads", "get_threads", "cuda_built", "device_description",
]


class NotConverged(UserWarning):
    """A matrix-free bracket stopped at its budget before κ_hi/κ_lo reached 1 + tolerance.

    The report is still returned, with status "not-converged" and the bracket it reached."""


def as_fp64(a, name="array"):
    """A NumPy fp64 array of `a` (NumPy array, torch tensor, nested lists)."""
    if hasattr(a, "detach"):  # a torch tensor: leave autograd and the device
        a = a.detach().cpu().double().numpy()
    try:
        return np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not a numeric array: {e}") from None


def _warn_not_converged(reports, where=""):
    stuck = [r for r in reports if r.status == "not-converged"]
    if stuck:
        names = ", ".join(sorted({r.matrix + ("" if r.space == "full" else "/" + r.space) for r in stuck}))
        warnings.warn(f"{where}{len(stuck)} bracket(s) not converged within the budget ({names}); "
                      "raise lanczos_seconds or max_products, or use method='dense'", NotConverged, stacklevel=3)


def reports_frame(reports, prefix=None):
    """A pandas DataFrame of Reports with the columns and dtypes pandas gives jacond's CSVs.

    The rows are rendered by the core's CSV writer (17 significant digits) and parsed back by
    pandas.read_csv with float_precision="round_trip", so numbers are the core's doubles exactly
    and the frame equals `pandas.read_csv(path, float_precision="round_trip")` of the file the
    CLI writes for the same reports (head -1 reads as "all", counts not taken are empty). `prefix`: (column names, per-report list of values) put
    before the report columns, as audit.csv's checkpoint, step, probe, layer."""
    import pandas as pd

    names, values = prefix if prefix else ([], [[] for _ in reports])
    lines = [",".join(list(names) + [report_csv_header()])]
    for r, v in zip(reports, values):
        lines.append(",".join([_csv_field(x) for x in v] + [r.csv_fields()]))
    return pd.read_csv(io.StringIO("\n".join(lines) + "\n"), float_precision="round_trip")


def _csv_field(x):
    s = str(x)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def block_reports(block, X, *, skip="full", method="auto", matrices=None, lanczos_seconds=120.0,
                  lanczos_tol=0.01, lanczos_basis=96, max_products=200000, certify="none",
                  dense_max_bytes=0.0, norm="pre", device="cpu", as_frame=True):
    """Condition reports of one block at tokens X (n x d), as `jacond block` computes them.

    skip: full | none | no-ffn-skip | no-sab-skip. method: auto (dense when it fits the memory
    and the lanczos_seconds time budget, else lanczos) | dense | svd | mixed | lanczos.
    matrices: names among block_matrix_names() (None: all). certify: none | inertia | auto.
    norm "post": a post-norm block (K_sa, B_sa, E_sa, attention at X itself). device: cpu | cuda,
    where the dense exact routes run (`--device`; the method column says where, e.g.
    dense-lu-lanczos-cuda). Returns a DataFrame (as_frame) or the list of Report objects."""
    if isinstance(matrices, str):
        matrices = [m for m in matrices.split(",") if m]
    reports = _jacond.block_reports(block, as_fp64(X, "X"), skip=skip, method=method, matrices=matrices,
                                    lanczos_seconds=lanczos_seconds, lanczos_tol=lanczos_tol,
                                    lanczos_basis=lanczos_basis, max_products=max_products, certify=certify,
                                    dense_max_bytes=dense_max_bytes, norm=norm, device=device)
    _warn_not_converged(reports)
    return reports_frame(reports) if as_frame else reports


def weight_reports(block, as_frame=True):
    """Data-free reports of one block (`jacond audit --data-free`): W_VO, W_VO_h, W_QK_h, W_Q ... W_2."""
    reports = _jacond.weight_reports(block)
    return reports_frame(reports) if as_frame else reports


def condition(A, *, method="auto", name="A", device="cpu"):
    """The condition Report of a dense matrix by one of jacond's routes (auto | dense | svd | mixed | lanczos),
    the dense ones on `device` (cpu | cuda)."""
    report = _jacond.condition(as_fp64(A, "A"), method=method, name=name, device=device)
    _warn_not_converged([report])
    return report


def dense_jacobian(block, X, matrix, skip="full", space="full"):
    """The nd x nd Jacobian `matrix` (K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn) of `block` at X,
    assembled from the closed forms; rows and columns in vec (column-major) order.
    space="ln-complement" (K_sab, K_ffn): nd x n(d-2), K times the per-token bases of
    span{1, x̂_i}⟂ that linear_operator(..., space="ln-complement") uses."""
    return _dense_jacobian(block, as_fp64(X, "X"), matrix, skip, space)


from .operators import linear_operator  # noqa: E402  (needs as_fp64 above)
from ._audit import audit, audit_state_dict  # noqa: E402
