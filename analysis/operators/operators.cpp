#include "analysis/operators/operators.h"

#include <stdexcept>
#include <string>

namespace jacond {

Mat TokenBlockDiagonalOp::apply(const Mat& dX) const {
  Mat out(J_.n, d_out());
  for (Index i = 0; i < J_.n; ++i) out.row(i).noalias() = dX.row(i) * J_.blocks[i].transpose();
  return out;
}

Mat TokenBlockDiagonalOp::apply_transpose(const Mat& G) const {
  Mat out(J_.n, d_in());
  for (Index i = 0; i < J_.n; ++i) out.row(i).noalias() = G.row(i) * J_.blocks[i];
  return out;
}

LayerNormComplement::LayerNormComplement(const Mat& x_hat) : d_(x_hat.cols()) {
  if (d_ < 3) throw std::invalid_argument("LayerNormComplement: need d >= 3, got d=" + std::to_string(d_));
  qr_.reserve(x_hat.rows());
  Mat span(d_, 2);
  for (Index i = 0; i < x_hat.rows(); ++i) {
    span.col(0).setOnes();
    span.col(1) = x_hat.row(i).transpose();  // as layernorm_complement_basis
    qr_.emplace_back(span);
  }
}

// C_i = Q_i[:, 2:], Q_i the full orthogonal factor of the QR of [1, x̂_i].
Mat LayerNormComplement::expand(const Mat& Cc) const {
  Mat out(n(), d_);
  Vec t(d_);
  for (Index i = 0; i < n(); ++i) {
    t.head(2).setZero();
    t.tail(d_ - 2) = Cc.row(i).transpose();
    out.row(i) = (qr_[i].householderQ() * t).transpose();
  }
  return out;
}

Mat LayerNormComplement::reduce(const Mat& Y) const {
  Mat out(n(), d_ - 2);
  for (Index i = 0; i < n(); ++i) {
    const Vec t = qr_[i].householderQ().transpose() * Y.row(i).transpose();
    out.row(i) = t.tail(d_ - 2).transpose();
  }
  return out;
}

Mat LayerNormComplement::reflectors(Index k) const {
  Mat V = Mat::Zero(n(), d_);
  for (Index i = 0; i < n(); ++i) {
    V(i, k) = 1.0;
    V.row(i).tail(d_ - k - 1) = qr_[i].matrixQR().col(k).tail(d_ - k - 1).transpose();
  }
  return V;
}

Mat LayerNormComplement::taus() const {
  Mat T(n(), 2);
  for (Index i = 0; i < n(); ++i) T.row(i) = qr_[i].hCoeffs().transpose();
  return T;
}

}  // namespace jacond
