#include "analysis/spectral/ldlt.h"

#include <lapacke.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "analysis/core/lapack.h"

// LAPACK's dsyconvf (3.8 and later) is in Debian's liblapack and OpenBLAS, but LAPACKE 3.11 has
// no wrapper and lapack.h no prototype: this is the Fortran routine's, in lapack.h's convention
// (hidden string lengths last when LAPACK_FORTRAN_STRLEN_END, which lapack.h defines).
extern "C" void LAPACK_GLOBAL(dsyconvf, DSYCONVF)(const char* uplo, const char* way, const lapack_int* n, double* a,
                                                  const lapack_int* lda, double* e, lapack_int* ipiv, lapack_int* info
#ifdef LAPACK_FORTRAN_STRLEN_END
                                                  ,
                                                  size_t uplo_len, size_t way_len
#endif
);

namespace jacond {

static_assert(std::is_same_v<LapackInt, lapack_int>, "LapackInt must be this LAPACKE's lapack_int");

namespace {

// The workspace query and the call of dsytrf_rk or dsytrf (same arguments but e).
template <typename Call>
lapack_int with_workspace(const char* routine, Call call) {
  double query = 0;
  check_lapack(routine, call(&query, -1));
  std::vector<double> work(static_cast<size_t>(std::max(1.0, query)));
  const lapack_int info = call(work.data(), static_cast<lapack_int>(work.size()));
  if (info < 0) check_lapack(routine, info);
  return info;  // > 0: D(info, info) is exactly zero
}

std::unique_ptr<LdltFactors> start(Mat lower, const char* pivoting) {
  auto f = std::make_unique<LdltFactors>();
  f->F = std::move(lower);
  f->e = Vec::Zero(f->F.rows());
  f->ipiv.assign(static_cast<size_t>(f->F.rows()), 0);
  f->pivoting = pivoting;
  return f;
}

}  // namespace

void LdltFactors::solve(const double* x, double* y) const {
  const lapack_int N = static_cast<lapack_int>(order());
  if (x != y) std::copy(x, x + order(), y);
  check_lapack("LAPACKE_dsytrs_3",
               LAPACKE_dsytrs_3_work(LAPACK_COL_MAJOR, 'L', N, 1, F.data(), N, e.data(), ipiv.data(), y, N));
}

std::unique_ptr<LdltFactors> ldlt_rook(Mat lower) {
  auto f = start(std::move(lower), "rook");
  const lapack_int N = static_cast<lapack_int>(f->order());
  f->zero_pivot = with_workspace("LAPACKE_dsytrf_rk", [&](double* work, lapack_int lwork) {
                    return LAPACKE_dsytrf_rk_work(LAPACK_COL_MAJOR, 'L', N, f->F.data(), N, f->e.data(), f->ipiv.data(),
                                                  work, lwork);
                  }) > 0;
  return f;
}

std::unique_ptr<LdltFactors> ldlt_bunch_kaufman(Mat lower) {
  auto f = start(std::move(lower), "bunch-kaufman");
  const lapack_int N = static_cast<lapack_int>(f->order());
  f->zero_pivot = with_workspace("LAPACKE_dsytrf", [&](double* work, lapack_int lwork) {
                    return LAPACKE_dsytrf_work(LAPACK_COL_MAJOR, 'L', N, f->F.data(), N, f->ipiv.data(), work, lwork);
                  }) > 0;
  bunch_kaufman_to_rk_layout(*f);
  return f;
}

void bunch_kaufman_to_rk_layout(LdltFactors& f) {
  const lapack_int N = static_cast<lapack_int>(f.order());
  // dsytrf marks a 2 × 2 block at (k, k+1) by IPIV(k) = IPIV(k+1) < 0 (uplo 'L').
  std::vector<bool> block_start(f.ipiv.size(), false);
  for (size_t k = 0; k + 1 < f.ipiv.size(); ++k)
    if (f.ipiv[k] < 0) block_start[k++] = true;
  f.e = Vec::Zero(f.order());
  lapack_int info = 0;
  const char uplo = 'L', way = 'C';
  LAPACK_GLOBAL(dsyconvf, DSYCONVF)(&uplo, &way, &N, f.F.data(), &N, f.e.data(), f.ipiv.data(), &info
#ifdef LAPACK_FORTRAN_STRLEN_END
                                    ,
                                    1, 1
#endif
  );
  check_lapack("dsyconvf", info);
  // dsyconvf rewrites such an IPIV(k) as +k (row k is not interchanged), but dsytrs_3 reads the
  // block from the sign of IPIV(k), as dsytrf_rk writes it (−k when not interchanged): with +k it
  // would solve the block as two 1 × 1 pivots. Restore the sign (dsytrs_3 swaps by |IPIV(k)|).
  for (size_t k = 0; k < block_start.size(); ++k)
    if (block_start[k] && f.ipiv[k] > 0) f.ipiv[k] = -f.ipiv[k];
}

}  // namespace jacond
