#include "analysis/jacobians/jacobians.h"

#include <stdexcept>

namespace jacond {

Mat TokenBlockDiagonal::to_dense() const {
  Mat D = Mat::Zero(rows(), cols());
  for (Index i = 0; i < n; ++i) {
    const Mat& Bi = blocks[i];
    for (Index b = 0; b < Bi.cols(); ++b)
      for (Index a = 0; a < Bi.rows(); ++a) D(vec_index(i, a, n), vec_index(i, b, n)) = Bi(a, b);
  }
  return D;
}

Mat attention_jacobian(const BlockWeights& w, const AttentionCache& c, AttentionPart part) {
  const Index n = c.Y.rows(), d = w.d, dh = w.head_dim(), N = n * d;
  const double s = w.effective_logit_scale();
  Mat K = Mat::Zero(N, N);

  for (Index h = 0; h < w.heads; ++h) {
    const Mat& A = c.A[h];
    const auto Woh = w.Wo.middleRows(h * dh, dh);  // d_h × d

    if (part != AttentionPart::kE) {
      // B term: (W^V_h W^O_h)ᵀ ⊗ A_h, block (a, b) of size n×n is C_h[b, a] · A_h.
      const Mat C = w.Wv.middleCols(h * dh, dh) * Woh;  // d × d
      for (Index b = 0; b < d; ++b)
        for (Index a = 0; a < d; ++a) K.block(a * n, b * n, n, n).noalias() += C(b, a) * A;
    }
    if (part == AttentionPart::kB) continue;

    const Mat P = c.V.middleCols(h * dh, dh) * Woh;                              // n × d
    const Mat R = A * P;                                                        // n × d
    const Mat U = c.Q.middleCols(h * dh, dh) * w.Wk.middleCols(h * dh, dh).transpose();  // n × d
    const Mat Kq = c.K.middleCols(h * dh, dh) * w.Wq.middleCols(h * dh, dh).transpose(); // n × d

    // Through K: column (l, b), viewed as an n×d matrix over (i, a):
    //   s · A[i,l] U[i,b] · (P[l,a] − R[i,a]).
    for (Index b = 0; b < d; ++b) {
      for (Index l = 0; l < n; ++l) {
        const Vec wgt = s * A.col(l).cwiseProduct(U.col(b));  // over i
        Eigen::Map<Mat> col(K.col(l + b * n).data(), n, d);
        col.noalias() += wgt * P.row(l);
        col -= (R.array().colwise() * wgt.array()).matrix();
      }
    }
    // Through Q: token-diagonal block of token i, (a, b):
    //   s · [Pᵀ diag(p_i) Kq − R[i,:]ᵀ (p_iᵀ Kq)][a, b].
    const Mat AKq = A * Kq;  // row i = p_iᵀ Kq
    for (Index i = 0; i < n; ++i) {
      const Mat Di = s * (P.transpose() * A.row(i).transpose().asDiagonal() * Kq -
                          R.row(i).transpose() * AKq.row(i));
      for (Index b = 0; b < d; ++b)
        for (Index a = 0; a < d; ++a) K(vec_index(i, a, n), vec_index(i, b, n)) += Di(a, b);
    }
  }
  return K;
}

Mat attention_map_jacobian(const BlockWeights& w, const AttentionCache& c, Index head) {
  const Index n = c.Y.rows(), d = w.d, dh = w.head_dim(), h = head;
  if (h < 0 || h >= w.heads) throw std::invalid_argument("attention_map_jacobian: head out of range");
  const double s = w.effective_logit_scale();
  const Mat& A = c.A[h];
  const Mat U = c.Q.middleCols(h * dh, dh) * w.Wk.middleCols(h * dh, dh).transpose();   // n × d
  const Mat Kq = c.K.middleCols(h * dh, dh) * w.Wq.middleCols(h * dh, dh).transpose();  // n × d
  Mat D = Mat::Zero(n * n, n * d);
  for (Index i = 0; i < n; ++i) {
    const Mat Ji = softmax_row_jacobian(A.row(i).transpose());
    const Mat JKq = s * Ji * Kq;  // through Q: rows k, columns b, only for input token j = i
    for (Index k = 0; k < n; ++k) {
      const Index row = i + k * n;
      for (Index b = 0; b < d; ++b) {
        D(row, vec_index(i, b, n)) += JKq(k, b);
        for (Index j = 0; j < n; ++j) D(row, vec_index(j, b, n)) += s * Ji(k, j) * U(i, b);  // through K
      }
    }
  }
  return D;
}

TokenBlockDiagonal layernorm_jacobian(const Vec& gamma, const LayerNormCache& c) {
  const Index n = c.x_hat.rows(), d = c.x_hat.cols();
  TokenBlockDiagonal J;
  J.n = n;
  J.blocks.resize(n);
  for (Index i = 0; i < n; ++i) {
    const Vec xh = c.x_hat.row(i).transpose();
    Mat Ji = Mat::Identity(d, d) - Mat::Constant(d, d, 1.0 / d) - xh * xh.transpose() / static_cast<double>(d);
    J.blocks[i] = gamma.asDiagonal() * Ji * c.inv_sigma(i);
  }
  return J;
}

TokenBlockDiagonal mlp_jacobian(const BlockWeights& w, const MlpCache& c) {
  const Index n = c.Y.rows();
  TokenBlockDiagonal J;
  J.n = n;
  J.blocks.resize(n);
  for (Index i = 0; i < n; ++i) {
    const Vec g = c.pre.row(i).transpose().unaryExpr([](double z) { return gelu_derivative(z); });
    J.blocks[i] = w.W2.transpose() * g.asDiagonal() * w.W1.transpose();
  }
  return J;
}

TokenBlockDiagonal ffn_jacobian(const BlockWeights& w, const BlockForward& f) {
  TokenBlockDiagonal mlp = mlp_jacobian(w, f.mlp);
  const TokenBlockDiagonal ln = layernorm_jacobian(w.ln2_gamma, f.ln2);
  for (Index i = 0; i < mlp.n; ++i) {
    mlp.blocks[i] = mlp.blocks[i] * ln.blocks[i];
    if (ffn_residual(f.skip)) mlp.blocks[i] += Mat::Identity(w.d, w.d);
  }
  return mlp;
}

Mat right_multiply_tokenwise(const Mat& K, Index n, const std::vector<Mat>& blocks) {
  if (blocks.empty() || static_cast<Index>(blocks.size()) != n) throw std::invalid_argument("right_multiply_tokenwise: need one block per token");
  const Index d = blocks[0].rows(), k = blocks[0].cols(), N = K.rows();
  if (K.cols() != n * d) throw std::invalid_argument("right_multiply_tokenwise: column count is not n·d");
  Mat out(N, n * k);
  using Strided = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  using StridedOut = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;
  for (Index j = 0; j < n; ++j) {
    // Columns of token j are j, j + n, j + 2n, ...: an outer stride of n·N.
    Strided in(K.data() + j * N, N, d, Eigen::OuterStride<>(n * N));
    StridedOut o(out.data() + j * N, N, k, Eigen::OuterStride<>(n * N));
    o.noalias() = in * blocks[j];
  }
  return out;
}

Mat sab_jacobian(const BlockWeights& w, const BlockForward& f) {
  const Index n = f.X.rows();
  Mat K = right_multiply_tokenwise(attention_jacobian(w, f.attn), n, layernorm_jacobian(w.ln1_gamma, f.ln1).blocks);
  if (sab_residual(f.skip)) K.diagonal().array() += 1.0;
  return K;
}

Mat softmax_row_jacobian(const Vec& p) {
  Mat S = -p * p.transpose();
  S.diagonal() += p;
  return S;
}

namespace {
// Orthonormal basis of the orthogonal complement of the column span of `span` (d × r, full
// column rank), from a full Householder QR: the last d − r columns of Q.
Mat complement_of(const Mat& span) {
  Eigen::HouseholderQR<Mat> qr(span);
  const Mat Q = qr.householderQ();
  return Q.rightCols(span.rows() - span.cols());
}
}  // namespace

Mat layernorm_complement_basis(const Vec& x_hat_row) {
  const Index d = x_hat_row.size();
  Mat span(d, 2);
  span.col(0) = Vec::Ones(d);
  span.col(1) = x_hat_row;  // already ⟂ 1 (centred)
  return complement_of(span);
}

Mat ones_complement_basis(Index n) { return complement_of(Mat::Ones(n, 1)); }

}  // namespace jacond
