#include "analysis/jacobians/jacobians.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "analysis/core/threads.h"

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

// Per-head factors of K_sa's terms (paper Eq. 10/13), computed once.
struct AttentionJacobianColumns::HeadFactors {
  const Mat* A = nullptr;  // A_h, n × n
  Mat C;                   // W^V_h W^O_h, d × d (B term)
  Mat P, R, U;             // V_h W^O_h, A_h P, Q_h W^K_hᵀ, n × d (E term through K)
  Mat Kq, AKq;             // K_h W^Q_hᵀ, A_h Kq, n × d (E term through Q)
};

// Column (l, b) of K, viewed as an n × d matrix over (i, a), is
//   B:          Σ_h C_h[b, a] · A_h[i, l]                                  ((W^V_h W^O_h)ᵀ ⊗ A_h)
//   E through K: Σ_h s · A_h[i, l] U_h[i, b] · (P_h[l, a] − R_h[i, a])
//   E through Q: for i = l only, D_l[a, b],  D_i = Σ_h s · [P_hᵀ diag(p_i) Kq_h − R_h[i,:]ᵀ (p_iᵀ Kq_h)]
//                = Σ_h s · (P_h − 1 R_h[i,:])ᵀ diag(p_i) (Kq_h − 1 (p_iᵀ Kq_h))   (p_i sums to 1)
// Both E terms are formed from differences (P[l,:] − R[i,:], and the centred form of D_i: the
// p_i-weighted covariance of P's and Kq's rows), never as a difference of two products scaled by s:
// where a softmax row saturates (p_i one-hot) each is exactly 0, as ∂A/∂Y is, and a large s cannot
// turn the rounding of two huge products into an E that swamps B (at s = 1e20 K came out 0).
AttentionJacobianColumns::AttentionJacobianColumns(const BlockWeights& w, const AttentionCache& c, AttentionPart part)
    : n_(c.Y.rows()), d_(w.d), s_(w.effective_logit_scale()), with_b_(part != AttentionPart::kE),
      with_e_(part != AttentionPart::kB), heads_(w.heads), D_(with_e_ ? n_ : 0, Mat::Zero(d_, d_)) {
  const Index dh = w.head_dim();
  for (Index h = 0; h < w.heads; ++h) {
    HeadFactors& f = heads_[h];
    f.A = &c.A[h];
    const auto Woh = w.Wo.middleRows(h * dh, dh);  // d_h × d
    if (with_b_) f.C = w.Wv.middleCols(h * dh, dh) * Woh;
    if (!with_e_) continue;
    f.P = c.V.middleCols(h * dh, dh) * Woh;
    f.R = *f.A * f.P;
    f.U = c.Q.middleCols(h * dh, dh) * w.Wk.middleCols(h * dh, dh).transpose();
    f.Kq = c.K.middleCols(h * dh, dh) * w.Wq.middleCols(h * dh, dh).transpose();
    f.AKq = *f.A * f.Kq;  // row i = p_iᵀ Kq
  }
  if (with_e_)  // each D_i by one thread, heads in order: the same bits for any thread count
    parallel_for(n_, [&](std::int64_t i) {
      for (const HeadFactors& f : heads_) {
        const Mat P_centred = f.P.rowwise() - f.R.row(i), Kq_centred = f.Kq.rowwise() - f.AKq.row(i);
        D_[i].noalias() += s_ * (P_centred.transpose() * f.A->row(i).transpose().asDiagonal() * Kq_centred);
      }
    });
}

AttentionJacobianColumns::~AttentionJacobianColumns() = default;

// One pass over the column per head (lazyProduct: outer products evaluated coefficient-wise), so
// each column is written once with every head's terms while it is in cache (K is 45.8 GB at
// ViT-S: passes over it, not flops, are the cost).
void AttentionJacobianColumns::column(Index j, double* out) const {
  const Index l = j % n_, b = j / n_;
  Eigen::Map<Mat> col(out, n_, d_);
  col.setZero();
  std::vector<double> wgt_storage(with_e_ ? n_ : 0);  // (a Map, not a Vec: GCC 12 misreads Eigen's free as use-after-free)
  Eigen::Map<Vec> wgt(wgt_storage.data(), static_cast<Index>(wgt_storage.size()));
  for (const HeadFactors& f : heads_) {
    if (!with_e_) {
      col.noalias() += f.A->col(l).lazyProduct(f.C.row(b));
      continue;
    }
    // E through K: wgt_i (P[l,:] − R[i,:]), the difference taken before the scaling (above).
    wgt = s_ * f.A->col(l).cwiseProduct(f.U.col(b));  // over i
    const auto e_through_k = ((-f.R).rowwise() + f.P.row(l)).array().colwise() * wgt.array();
    if (with_b_)
      col.noalias() += f.A->col(l).lazyProduct(f.C.row(b)) + e_through_k.matrix();
    else
      col.noalias() += e_through_k.matrix();
  }
  if (with_e_) col.row(l) += D_[l].col(b).transpose();
}

void AttentionJacobianColumns::columns(Index first, Index count, double* out) const {
  const Index N = order();
  if (first < 0 || count < 0 || first + count > N)
    throw std::invalid_argument("attention Jacobian columns [" + std::to_string(first) + ", " +
                                std::to_string(first + count) + ") of " + std::to_string(N));
  // The columns are independent: get_threads() threads, a result that does not depend on the count.
  parallel_for(count, [&](std::int64_t j) { column(first + j, out + j * N); });
}

namespace {

// Every column computed in fp64 by AttentionJacobianColumns; an fp32 K (Scalar = float) gets each
// column rounded once. The column blocks b run on get_threads() threads (parallel_for).
template <typename Scalar>
Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic> assemble_attention_jacobian(const BlockWeights& w,
                                                                                  const AttentionCache& c,
                                                                                  AttentionPart part) {
  const AttentionJacobianColumns columns(w, c, part);
  const Index n = c.Y.rows(), d = w.d, N = n * d;
  Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic> K(N, N);  // every column is set below
  parallel_for(d, [&](std::int64_t b) {
    std::vector<double> column_storage(std::is_same_v<Scalar, double> ? 0 : N);  // fp32: one fp64 column
    for (Index l = 0; l < n; ++l) {
      if constexpr (std::is_same_v<Scalar, double>) {
        columns.column(l + b * n, K.col(l + b * n).data());
      } else {
        columns.column(l + b * n, column_storage.data());
        K.col(l + b * n) = Eigen::Map<const Vec>(column_storage.data(), N).cast<Scalar>();
      }
    }
  });
  return K;
}

}  // namespace

Mat attention_jacobian(const BlockWeights& w, const AttentionCache& c, AttentionPart part) {
  return assemble_attention_jacobian<double>(w, c, part);
}

MatF attention_jacobian_fp32(const BlockWeights& w, const AttentionCache& c, AttentionPart part) {
  return assemble_attention_jacobian<float>(w, c, part);
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

std::vector<Mat> layernorm_complement_bases(const Mat& x_hat) {
  std::vector<Mat> bases;
  bases.reserve(x_hat.rows());
  for (Index i = 0; i < x_hat.rows(); ++i) bases.push_back(layernorm_complement_basis(x_hat.row(i).transpose()));
  return bases;
}

Mat ones_complement_basis(Index n) { return complement_of(Mat::Ones(n, 1)); }

}  // namespace jacond
