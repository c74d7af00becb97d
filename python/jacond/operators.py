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
K is real: a complex vector z is applied as K Re z + i K Im z (so K @ z is complex).
"""

import numpy as np
from scipy.sparse.linalg import LinearOperator

from . import _jacond


class JacobianLinearOperator(LinearOperator):
    """A block Jacobian (K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn) at tokens X as a LinearOperator."""

    def __init__(self, block, X, matrix, skip="full", space="full"):
        from . import _block, _check_strings, _tokens

        _check_strings(matrix=matrix, skip=skip, space=space)
        self.core = _jacond.JacobianOperator(_block(block), _tokens(X), matrix, skip, space)
        self.matrix = matrix
        self.space = space
        super().__init__(dtype=np.float64, shape=self.core.shape)

    def _matvec(self, x):
        return _real_parts(self.core.matvec, np.ravel(x), np.ascontiguousarray)

    def _rmatvec(self, y):
        return _real_parts(self.core.rmatvec, np.ravel(y), np.ascontiguousarray)

    def _matmat(self, V):
        return _real_parts(self.core.matmat, V, np.asfortranarray)

    def __repr__(self):
        where = "" if self.space == "full" else f" on the {self.space}"
        return f"<{self.shape[0]}x{self.shape[1]} jacond {self.matrix} operator{where} (matrix-free, float64)>"


def _real_parts(product, v, layout):
    """product(v) of the real operator: fp64 in `layout`; complex v as product(Re v) + i product(Im v)."""
    if np.iscomplexobj(v):
        return product(layout(v.real, dtype=np.float64)) + 1j * product(layout(v.imag, dtype=np.float64))
    return product(layout(v, dtype=np.float64))


def linear_operator(block, X, matrix, skip="full", space="full"):
    """`matrix` of `block` at tokens X as a scipy LinearOperator (see the module docstring)."""
    return JacobianLinearOperator(block, X, matrix, skip, space)
