"""Block Jacobians as scipy.sparse.linalg.LinearOperator, for users' own solvers (svds, eigsh, lsqr).

    K = jacond.linear_operator(block, X, "K_sab", skip="full")
    K @ x, K.T @ y, K.matmat(V)          # JVP, VJP (SciPy's .T and .H call _rmatvec), JVPs; never forms K
    scipy.sparse.linalg.svds(K, k=1, which="SM")
    C = jacond.linear_operator(block, X, "K_sab", skip="none", space="ln-complement")

space="ln-complement" (K_sab, K_ffn) restricts the input to the complement of the LayerNorm's
structural nullspace, span{1, x̂_i} per token: an nd × n(d − 2) operator whose σ_min is the one
`jacond block` reports on its ln-complement rows (without a residual, the full-space K is singular).

The products are the core's matrix-free kernels (analysis/operators/operators.h), O(n²d + nd²)
each, with the GIL released. Vectors are vec(X) in column-major order (x = dX.ravel(order="F")).
"""

import numpy as np
from scipy.sparse.linalg import LinearOperator

from . import _jacond


class JacobianLinearOperator(LinearOperator):
    """A block Jacobian (K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn) at tokens X as a LinearOperator."""

    def __init__(self, block, X, matrix, skip="full", space="full"):
        from . import as_fp64

        self.core = _jacond.JacobianOperator(block, as_fp64(X, "X"), matrix, skip, space)
        self.matrix = matrix
        self.space = space
        super().__init__(dtype=np.float64, shape=self.core.shape)

    def _matvec(self, x):
        return self.core.matvec(np.ascontiguousarray(np.ravel(x), dtype=np.float64))

    def _rmatvec(self, y):
        return self.core.rmatvec(np.ascontiguousarray(np.ravel(y), dtype=np.float64))

    def _matmat(self, V):
        return self.core.matmat(np.asfortranarray(V, dtype=np.float64))

    def __repr__(self):
        where = "" if self.space == "full" else f" on the {self.space}"
        return f"<{self.shape[0]}x{self.shape[1]} jacond {self.matrix} operator{where} (matrix-free, float64)>"


def linear_operator(block, X, matrix, skip="full", space="full"):
    """`matrix` of `block` at tokens X as a scipy LinearOperator (see the module docstring)."""
    return JacobianLinearOperator(block, X, matrix, skip, space)
