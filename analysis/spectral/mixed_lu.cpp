// The host's fp32 factor and the mixed route on the host; the math is in mixed_lu.h.
#include "analysis/spectral/mixed_lu.h"

#include <lapacke.h>

#include <sstream>
#include <type_traits>

#include "analysis/core/lapack.h"

namespace jacond {

std::string describe(const RefinementStats& s) {
  std::ostringstream os;
  os.precision(2);
  os << "fp32 LU refined to fp64 (GMRES-IR): ";
  if (s.solves == 0) {
    os << "no solves";
    return os.str();
  }
  const double solves = static_cast<double>(s.solves);
  os << static_cast<double>(s.steps) / solves << " steps, " << static_cast<double>(s.iterations) / solves
     << " fp32 solves per solve (max " << s.max_steps << ", " << s.max_iterations << "), backward error <= "
     << s.max_backward_error;
  return os.str();
}

static_assert(std::is_same_v<lapack_int, int>, "CpuLu32 keeps its pivots as int");

CpuLu32::CpuLu32(MatF A) : lu_(std::move(A)) {}

FactorOutcome CpuLu32::factor() {
  const lapack_int n = static_cast<lapack_int>(lu_.rows());
  ipiv_.resize(lu_.rows());
  const lapack_int info = LAPACKE_sgetrf(LAPACK_COL_MAJOR, n, n, lu_.data(), n, ipiv_.data());
  // info > 0: U(info, info) is exactly zero in fp32 (analysis/core/lapack.h: an outcome).
  if (info > 0) return FactorOutcome::kExactlySingular;
  check_lapack("LAPACKE_sgetrf", info);
  return FactorOutcome::kFactored;
}

// The _work entry point: plain LAPACKE_sgetrs scans the whole factor for NaN on every call (see
// CpuLuBackend in condition.cpp); the factor is finite and v is a scaled finite residual.
void CpuLu32::solve(float* v, bool transposed) const {
  const lapack_int n = static_cast<lapack_int>(lu_.rows());
  check_lapack("LAPACKE_sgetrs", LAPACKE_sgetrs_work(LAPACK_COL_MAJOR, transposed ? 'T' : 'N', n, 1, lu_.data(), n,
                                                     ipiv_.data(), v, n));
}

void check_mixed_input(const MatF& A32, const LinearMap& A, const std::string& matrix) {
  if (A32.rows() != A32.cols() || A32.rows() != A.order)
    throw std::invalid_argument("condition_mixed: " + matrix + " is " + std::to_string(A32.rows()) + "x" +
                                std::to_string(A32.cols()) + ", its operator of order " + std::to_string(A.order));
  if (!A32.allFinite()) throw std::invalid_argument("condition_mixed: " + matrix + " contains NaN or inf in fp32");
}

ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) {
  check_mixed_input(A32, A, matrix);
  CpuLu32 lu(std::move(A32));
  return condition_mixed_with(lu, A, matrix, "dense-lu32-refined-lanczos");
}

}  // namespace jacond
