// LAPACK's failure convention, and the one place in analysis/ that turns a failure code into an
// exception.
//
// Every LAPACKE routine returns `info`:
//   0    success;
//   −i   argument i had an illegal value. LAPACKE also returns −1010 when it cannot allocate its
//        work space and, with its NaN check on (the default), −i when input matrix i holds NaN;
//   > 0  a routine-specific numerical outcome: dgesdd, the divide-and-conquer bidiagonal SVD did
//        not converge; dgetrf, U(info, info) is exactly zero; dtrtrs, A(info, info) is exactly zero.
//
// analysis/ never ignores info: every LAPACKE call hands it to check_lapack, which throws
// LapackError naming the routine and the value, e.g. "LAPACKE_dgetrs failed: info = -3".
// The only positive info that is an answer rather than a failure is dgetrf's exactly zero pivot in
// condition_fast (analysis/spectral/condition.cpp): there A is exactly singular, which is a
// numerical outcome (status `singular`, docs/design.md §4); that caller tests info > 0 first and says so.
#pragma once

#include <stdexcept>
#include <string>

namespace jacond {

/// A LAPACK routine returned a nonzero info (other than an outcome its caller handles).
class LapackError : public std::runtime_error {
 public:
  LapackError(const std::string& routine, long long info);
  const std::string& routine() const { return routine_; }
  long long info() const { return info_; }

 private:
  std::string routine_;
  long long info_;
};

/// Throws LapackError(routine, info) unless info == 0. `routine` is the LAPACKE name, optionally
/// with a context prefix ("gkl projected matrix: LAPACKE_dgesdd").
inline void check_lapack(const std::string& routine, long long info) {
  if (info != 0) throw LapackError(routine, info);
}

}  // namespace jacond
