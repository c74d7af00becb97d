// The host's KrylovBasis (analysis/operators/krylov_basis.h): the long-vector work of gkl.cpp in Eigen.
#include "analysis/operators/krylov_basis.h"

namespace jacond {

namespace {

// Classical Gram–Schmidt, twice (CGS2: orthogonal to working precision), of w against the
// first j columns of V. Returns the accumulated coefficients Vᵀw.
Vec orthogonalise_against(const Mat& V, Index j, Vec& w) {
  Vec c = Vec::Zero(j);
  if (j == 0) return c;
  for (int pass = 0; pass < 2; ++pass) {
    const Vec h = V.leftCols(j).transpose() * w;
    w.noalias() -= V.leftCols(j) * h;
    c += h;
  }
  return c;
}

}  // namespace

HostKrylovBasis::HostKrylovBasis(const OperatorRef& op, Index k)
    : op_(op), P_(op.cols, k + 1), Q_(op.rows, k), work_P_(op.cols), work_Q_(op.rows) {}

bool HostKrylovBasis::product(KrylovSide from, Index j) {
  if (from == KrylovSide::kRight) {
    op_.apply(P_.col(j).data(), work_Q_.data());
    return work_Q_.allFinite();
  }
  op_.apply_transpose(Q_.col(j).data(), work_P_.data());
  return work_P_.allFinite();
}

Vec HostKrylovBasis::orthogonalise(KrylovSide side, Index j) { return orthogonalise_against(basis(side), j, work(side)); }

double HostKrylovBasis::work_norm(KrylovSide side) const { return work(side).stableNorm(); }  // no squares: gkl.h "Range"

void HostKrylovBasis::store(KrylovSide side, Index j, double alpha) { basis(side).col(j) = work(side) / alpha; }

void HostKrylovBasis::set_column(KrylovSide side, Index j, const Vec& x) { basis(side).col(j) = x; }

void HostKrylovBasis::set_work(KrylovSide side, const Vec& x) { work(side) = x; }

Vec HostKrylovBasis::combination(KrylovSide side, Index kk, const Vec& c) const { return basis(side).leftCols(kk) * c; }

void HostKrylovBasis::restart(Index kk, const Mat& V_sel, const Mat& U_sel) {
  const Index l = V_sel.cols();
  const Mat P_new = P_.leftCols(kk) * V_sel;
  const Mat Q_new = Q_.leftCols(kk) * U_sel;
  const Vec p_next = P_.col(kk);
  P_.leftCols(l) = P_new;
  P_.col(l) = p_next;
  Q_.leftCols(l) = Q_new;
}

Vec HostKrylovBasis::apply(bool transpose, const Vec& x) const {
  Vec y(transpose ? op_.cols : op_.rows);
  (transpose ? op_.apply_transpose : op_.apply)(x.data(), y.data());
  return y;
}

KrylovSpace host_krylov_space(const OperatorRef& op) {
  KrylovSpace space;
  space.rows = op.rows;
  space.cols = op.cols;
  space.make_basis = [&op](Index k) { return std::make_unique<HostKrylovBasis>(op, k); };
  return space;
}

}  // namespace jacond
