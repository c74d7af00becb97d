// The host's Store of the Schur route and the route on the host; the math is in schur_lu.h.
#include "analysis/spectral/schur_lu.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "analysis/core/lapack.h"

namespace jacond {

static_assert(std::is_same_v<lapack_int, int>, "CpuSchurStore keeps its pivots as int");

void CpuSchurStore::copy(Index rows, Index cols, const double* src, Index ld_src, double* dst, Index ld_dst) {
  for (Index j = 0; j < cols; ++j) std::copy(src + j * ld_src, src + j * ld_src + rows, dst + j * ld_dst);
}

void CpuSchurStore::zero(Index rows, Index cols, double* dst, Index ld) {
  for (Index j = 0; j < cols; ++j) std::fill(dst + j * ld, dst + j * ld + rows, 0.0);
}

void CpuSchurStore::subtract(Index rows, Index cols, const double* a, Index lda, const double* b, Index ldb, double* c,
                             Index ldc) {
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) c[i + j * ldc] = a[i + j * lda] - b[i + j * ldb];
}

FactorOutcome CpuSchurStore::lu_factor(double* a, Index m, Pivots& p, Index* zero_pivot) {
  const lapack_int n = static_cast<lapack_int>(m);
  const lapack_int info = LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, a, n, p.data());
  if (info > 0) {  // U(info, info) exactly zero (1-based): an outcome; dgetrf completed the factors
    *zero_pivot = info - 1;
    return FactorOutcome::kExactlySingular;
  }
  check_lapack("LAPACKE_dgetrf", info);
  return FactorOutcome::kFactored;
}

// The _work entry point: plain LAPACKE_dgetrs scans the whole factor for NaN on every call.
void CpuSchurStore::lu_solve(const double* lu, Index m, const Pivots& p, bool transposed, double* b, Index nrhs,
                             Index ldb) {
  const lapack_int n = static_cast<lapack_int>(m);
  check_lapack("LAPACKE_dgetrs", LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, transposed ? 'T' : 'N', n,
                                                     static_cast<lapack_int>(nrhs), lu, n, p.data(), b,
                                                     static_cast<lapack_int>(ldb)));
}

void CpuSchurStore::upper_solve(const double* lu, Index m, Index k, double* b) {
  if (k == 0) return;
  const lapack_int n = static_cast<lapack_int>(k);
  check_lapack("LAPACKE_dtrtrs", LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'N', 'N', n, 1, lu,
                                                     static_cast<lapack_int>(m), b, n));
}

Index CpuSchurStore::replace_zero_pivots(double* lu, Index m, double value) {
  Index replaced = 0;
  for (Index i = 0; i < m; ++i) {
    double& u = lu[i + i * m];
    if (!std::isfinite(u)) return -1;  // not from dgetrf (it skips a zero pivot's column), but the concept's
    if (u == 0.0) {
      u = value;
      ++replaced;
    }
  }
  return replaced;
}

ConditionReport condition_schur(const TokenMap& map, const SchurPlan& plan, const std::string& matrix,
                                const std::function<void()>& checkpoint) {
  if (map.assembles_into() != "cpu")
    throw std::invalid_argument("condition_schur: " + matrix + "'s map does not assemble into host memory");
  CpuSchurStore store;
  return condition_schur_with(store, map, plan, matrix, "dense-schur-lu-lanczos", checkpoint);
}

}  // namespace jacond
