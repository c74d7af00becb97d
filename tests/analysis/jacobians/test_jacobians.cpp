// Every analytic Jacobian of analysis/jacobians/jacobians.h against central finite differences of
// the forward pass, and the dense closed forms against the matrix-free operators of
// analysis/operators/operators.h, i.e. against the block kernels of
// analysis/operators/block_kernels.h (an independent derivation: JVP/VJP chain rule vs Kronecker
// closed form), both products (perform_op and perform_op_transpose) of every operator.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <sstream>

#include "analysis/core/threads.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace jacond {
namespace {

using test::kFdStep;
using test::rel_error;

// Central differences of vec f(X) w.r.t. vec X (column-major), step kFdStep.
Mat central_differences(const std::function<Mat(const Mat&)>& f, const Mat& X) {
  const Index N = X.size();
  const Mat f0 = f(X);
  Mat J(f0.size(), N);
  for (Index k = 0; k < N; ++k) {
    Mat Xp = X, Xm = X;
    Xp.data()[k] += kFdStep;
    Xm.data()[k] -= kFdStep;
    const Mat diff = (f(Xp) - f(Xm)) / (2.0 * kFdStep);
    J.col(k) = Eigen::Map<const Vec>(diff.data(), diff.size());
  }
  return J;
}

struct Case {
  Index n, d, heads;
  double logit_scale;
};

std::string name_of(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "n" + std::to_string(c.n) + "_d" + std::to_string(c.d) + "_h" + std::to_string(c.heads) +
         (c.logit_scale == 0 ? "_sdefault" : "_s1");
}

class JacobianTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const uint64_t weight_seed = 1000 + c.n * 31 + c.d * 7 + c.heads, token_seed = 77 + c.n;
    w = test::random_block(c.d, c.heads, 2 * c.d, weight_seed, c.logit_scale);
    X = test::random_tokens(c.n, c.d, token_seed);
    std::ostringstream os;
    os << "n=" << c.n << " d=" << c.d << " heads=" << c.heads << " logit_scale=" << c.logit_scale
       << " seeds " << weight_seed << " (weights), " << token_seed << " (tokens)";
    trace_ = std::make_unique<testing::ScopedTrace>(__FILE__, __LINE__, os.str());  // on every failure of the test
  }
  void TearDown() override { trace_.reset(); }
  BlockWeights w;
  Mat X;

 private:
  std::unique_ptr<testing::ScopedTrace> trace_;
};

TEST_P(JacobianTest, AttentionMatchesFiniteDifferences) {
  const AttentionCache c = attention_forward(w, X);
  const Mat K = attention_jacobian(w, c);
  const Mat fd = central_differences([&](const Mat& Y) { return attention_forward(w, Y).out; }, X);
  EXPECT_LT(rel_error(K, fd), test::kVsFiniteDifferences) << "d=" << w.d << " heads=" << w.heads;
}

TEST_P(JacobianTest, AttentionSplitSumsToFull) {
  const AttentionCache c = attention_forward(w, X);
  const Mat K = attention_jacobian(w, c);
  const Mat B = attention_jacobian(w, c, AttentionPart::kB);
  const Mat E = attention_jacobian(w, c, AttentionPart::kE);
  EXPECT_LT(rel_error(B + E, K), test::kSameMathRounding);
  // B is the Kronecker term Σ_h (W^V_h W^O_h)ᵀ ⊗ A_h: check it against an explicit kron.
  const Index dh = w.head_dim(), n = X.rows();
  Mat Bk = Mat::Zero(K.rows(), K.cols());
  for (Index h = 0; h < w.heads; ++h) {
    const Mat Ct = (w.Wv.middleCols(h * dh, dh) * w.Wo.middleRows(h * dh, dh)).transpose();
    for (Index a = 0; a < w.d; ++a)
      for (Index b = 0; b < w.d; ++b) Bk.block(a * n, b * n, n, n) += Ct(a, b) * c.A[h];
  }
  EXPECT_LT(rel_error(B, Bk), test::kSameMathRounding);
  // E vanishes when the attention map cannot move: W^Q = W^K = 0 gives uniform A.
  BlockWeights w0 = w;
  w0.Wq.setZero();
  w0.Wk.setZero();
  EXPECT_LT(attention_jacobian(w0, attention_forward(w0, X), AttentionPart::kE).norm(), 1e-14);
}

TEST_P(JacobianTest, AttentionOperatorMatchesDense) {
  const AttentionCache c = attention_forward(w, X);
  for (AttentionPart part : {AttentionPart::kFull, AttentionPart::kB, AttentionPart::kE}) {
    const Mat K = attention_jacobian(w, c, part);
    const AttentionJacobianOp op(w, c, part);
    EXPECT_LT(rel_error(operator_to_dense(op), K), test::kSameMathRounding) << "part " << int(part);
    EXPECT_LT(rel_error(operator_transpose_to_dense(op), K.transpose()), test::kSameMathRounding)
        << "part " << int(part);
  }
}

// attention_jacobian splits its columns over threads (parallel_for): each column is computed by
// one thread with the same arithmetic, so the matrix is bitwise the same for any thread count.
TEST_P(JacobianTest, AttentionAssemblyDoesNotDependOnTheThreadCount) {
  const int before = get_threads();
  const AttentionCache c = attention_forward(w, X);
  set_threads(1);
  const Mat one = attention_jacobian(w, c), one_e = attention_jacobian(w, c, AttentionPart::kE);
  set_threads(3);
  const Mat three = attention_jacobian(w, c), three_e = attention_jacobian(w, c, AttentionPart::kE);
  set_threads(before);
  EXPECT_TRUE(one == three);
  EXPECT_TRUE(one_e == three_e);
}

// The fp32 assembly (the mixed route's) is the fp64 matrix rounded once per entry, for every part.
TEST_P(JacobianTest, AttentionFp32AssemblyIsTheFp64MatrixRounded) {
  const AttentionCache c = attention_forward(w, X);
  for (const auto part : {AttentionPart::kFull, AttentionPart::kB, AttentionPart::kE}) {
    const MatF K32 = attention_jacobian_fp32(w, c, part);
    const MatF want = attention_jacobian(w, c, part).cast<float>();
    EXPECT_TRUE(K32 == want) << "part " << static_cast<int>(part);
  }
}

TEST_P(JacobianTest, LayerNormMatchesFiniteDifferences) {
  const LayerNormCache c = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  const Mat J = layernorm_jacobian(w.ln1_gamma, c).to_dense();
  const Mat fd = central_differences(
      [&](const Mat& Y) { return layernorm_forward(Y, w.ln1_gamma, w.ln1_beta, w.ln_eps).y; }, X);
  EXPECT_LT(rel_error(J, fd), test::kVsFiniteDifferences);
  // Structural nullspace: adding a constant to one token changes nothing.
  Mat ones = Mat::Zero(X.rows(), X.cols());
  ones.row(0).setOnes();
  EXPECT_LT((J * vec(ones)).norm(), 1e-12 * J.norm());
}

// The unscaled LayerNorm formula, as layernorm_forward had it before rows of 2^500 and more were
// rescaled: x̂ and 1/σ per row.
std::pair<Mat, Vec> unscaled_layernorm(const Mat& X, double eps) {
  Mat x_hat(X.rows(), X.cols());
  Vec inv_sigma(X.rows());
  for (Index i = 0; i < X.rows(); ++i) {
    const RowVec centered = X.row(i).array() - X.row(i).mean();
    inv_sigma(i) = 1.0 / std::sqrt(centered.squaredNorm() / static_cast<double>(X.cols()) + eps);
    x_hat.row(i) = centered * inv_sigma(i);
  }
  return {x_hat, inv_sigma};
}

// LayerNorm at any finite scale. Tokens × 2^600 (their squares overflow fp64) normalise to the bits
// of the tokens themselves once eps is negligible (eps 1e-300 there, underflowing to 0 here), and
// 1/σ moves by exactly 2^−600. (At × 1e200 the unscaled sum of squares overflowed: x̂ = 0, K_sa
// `singular`, found by a review.) Every other scale keeps the unscaled formula's bits: ordinary,
// tiny (× 1e−160, where a first rescaling overflowed eps·2^−2k to inf: x̂ = 0, a second review)
// and subnormal tokens (× 1e−310: NaN); and a constant row of 2^600 has x̂ = 0 and 1/σ = 1/√eps.
TEST_P(JacobianTest, LayerNormKeepsItsBitsAtEveryScale) {
  const LayerNormCache c = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, 1e-300);
  const LayerNormCache huge = layernorm_forward(X * std::ldexp(1.0, 600), w.ln1_gamma, w.ln1_beta, w.ln_eps);
  EXPECT_TRUE(huge.x_hat == c.x_hat);
  EXPECT_TRUE(huge.inv_sigma == c.inv_sigma * std::ldexp(1.0, -600));
  for (const double scale : {1.0, 1e-160, 1e-310}) {
    SCOPED_TRACE("tokens x " + std::to_string(scale));
    const auto [x_hat, inv_sigma] = unscaled_layernorm(X * scale, w.ln_eps);
    const LayerNormCache got = layernorm_forward(X * scale, w.ln1_gamma, w.ln1_beta, w.ln_eps);
    ASSERT_TRUE(got.x_hat.allFinite() && got.inv_sigma.allFinite());
    EXPECT_TRUE(got.x_hat == x_hat);
    EXPECT_TRUE(got.inv_sigma == inv_sigma);
  }
  Mat constant = X;
  constant.row(0).setConstant(std::ldexp(1.0, 600));
  const LayerNormCache flat = layernorm_forward(constant, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  EXPECT_TRUE(flat.x_hat.row(0).isZero(0.0));
  EXPECT_EQ(flat.inv_sigma(0), 1.0 / std::sqrt(w.ln_eps));
}

TEST_P(JacobianTest, MlpMatchesFiniteDifferences) {
  const MlpCache c = mlp_forward(w, X);
  const Mat J = mlp_jacobian(w, c).to_dense();
  const Mat fd = central_differences([&](const Mat& Y) { return mlp_forward(w, Y).out; }, X);
  EXPECT_LT(rel_error(J, fd), test::kVsFiniteDifferences);
}

TEST_P(JacobianTest, SubBlocksMatchFiniteDifferencesInEverySkipMode) {
  for (SkipMode skip : {SkipMode::kNone, SkipMode::kFull, SkipMode::kSab, SkipMode::kFfn}) {
    const BlockForward f = block_forward(w, X, skip);
    const Mat Ksab = sab_jacobian(w, f);
    const Mat fd_sab = central_differences([&](const Mat& Y) { return block_forward(w, Y, skip).X1; }, X);
    EXPECT_LT(rel_error(Ksab, fd_sab), test::kVsFiniteDifferences) << to_string(skip);
    EXPECT_LT(rel_error(operator_to_dense(SabJacobianOp(w, f)), Ksab), test::kSameMathRounding) << to_string(skip);
    EXPECT_LT(rel_error(operator_transpose_to_dense(SabJacobianOp(w, f)), Ksab.transpose()), test::kSameMathRounding);

    const Mat Kffn = ffn_jacobian(w, f).to_dense();
    // FFN as a function of its own input X1 (the SAB output).
    const Mat fd_ffn = central_differences(
        [&](const Mat& X1) {
          const MlpCache m = mlp_forward(w, layernorm_forward(X1, w.ln2_gamma, w.ln2_beta, w.ln_eps).y);
          return ffn_residual(skip) ? Mat(X1 + m.out) : m.out;
        },
        f.X1);
    EXPECT_LT(rel_error(Kffn, fd_ffn), test::kVsFiniteDifferences) << to_string(skip);
    EXPECT_LT(rel_error(operator_to_dense(FfnJacobianOp(w, f)), Kffn), test::kSameMathRounding);
    EXPECT_LT(rel_error(operator_transpose_to_dense(FfnJacobianOp(w, f)), Kffn.transpose()), test::kSameMathRounding);
  }
}

TEST_P(JacobianTest, LayerNormMlpAndTokenBlockOperatorsMatchDense) {
  for (SkipMode skip : {SkipMode::kNone, SkipMode::kFull}) {
    const BlockForward f = block_forward(w, X, skip);
    for (const auto* ln : {&f.ln1, &f.ln2}) {
      const Vec& gamma = ln == &f.ln1 ? w.ln1_gamma : w.ln2_gamma;
      const TokenBlockDiagonal J = layernorm_jacobian(gamma, *ln);
      const Mat Jln = J.to_dense();
      const LayerNormJacobianOp op(gamma, *ln);
      EXPECT_LT(rel_error(operator_to_dense(op), Jln), test::kSameMathRounding) << to_string(skip);
      EXPECT_LT(rel_error(operator_transpose_to_dense(op), Jln.transpose()), test::kSameMathRounding) << to_string(skip);
      const TokenBlockDiagonalOp blocks(J);  // the generic per-token operator on the same blocks
      EXPECT_LT(rel_error(operator_to_dense(blocks), Jln), test::kSameMathRounding) << to_string(skip);
      EXPECT_LT(rel_error(operator_transpose_to_dense(blocks), Jln.transpose()), test::kSameMathRounding);
    }
    const Mat Jmlp = mlp_jacobian(w, f.mlp).to_dense();
    const MlpJacobianOp mlp(w, f.mlp);
    EXPECT_LT(rel_error(operator_to_dense(mlp), Jmlp), test::kSameMathRounding) << to_string(skip);
    EXPECT_LT(rel_error(operator_transpose_to_dense(mlp), Jmlp.transpose()), test::kSameMathRounding) << to_string(skip);
  }
}

TEST_P(JacobianTest, LnComplementRestrictionsMatchDense) {
  const BlockForward f = block_forward(w, X, SkipMode::kNone);
  const Index n = X.rows();
  std::vector<Mat> b1, b2;
  for (Index i = 0; i < n; ++i) {
    b1.push_back(layernorm_complement_basis(f.ln1.x_hat.row(i).transpose()));
    b2.push_back(layernorm_complement_basis(f.ln2.x_hat.row(i).transpose()));
  }
  const LayerNormComplement c1(f.ln1.x_hat), c2(f.ln2.x_hat);
  const SabJacobianOp sab(w, f);
  const FfnJacobianOp ffn(w, f);
  const LnComplementOp<SabJacobianOp> rsab(sab, c1);
  const LnComplementOp<FfnJacobianOp> rffn(ffn, c2);
  const Mat Dsab = right_multiply_tokenwise(sab_jacobian(w, f), n, b1);
  const Mat Dffn = right_multiply_tokenwise(ffn_jacobian(w, f).to_dense(), n, b2);
  ASSERT_EQ(rsab.cols(), n * (w.d - 2));
  EXPECT_LT(rel_error(operator_to_dense(rsab), Dsab), test::kSameMathRounding);
  EXPECT_LT(rel_error(operator_transpose_to_dense(rsab), Dsab.transpose()), test::kSameMathRounding);
  EXPECT_LT(rel_error(operator_to_dense(rffn), Dffn), test::kSameMathRounding);
  EXPECT_LT(rel_error(operator_transpose_to_dense(rffn), Dffn.transpose()), test::kSameMathRounding);
}

// Parameter tangents belong to the whole attention map: the B/E split is one of the input
// Jacobian, and a kernel asked for both says so instead of guessing.
TEST_P(JacobianTest, AttentionKernelsRejectParameterTangentsOnAPart) {
  const AttentionCache c = attention_forward(w, X);
  BlockParams p = BlockParams::zeros(w, /*attn=*/true, /*mlp=*/false);
  const Mat dY = Mat::Ones(X.rows(), X.cols());
  for (AttentionPart part : {AttentionPart::kB, AttentionPart::kE}) {
    EXPECT_THROW(attention_jvp(w, c, dY, part, &p), std::invalid_argument);
    EXPECT_THROW(attention_vjp(w, c, dY, part, &p), std::invalid_argument);
  }
  EXPECT_NO_THROW(attention_jvp(w, c, dY, AttentionPart::kFull, &p));
  // Without the attention group the tangents are absent and the split is allowed.
  p = BlockParams::zeros(w, /*attn=*/false, /*mlp=*/true);
  EXPECT_LT(rel_error(attention_jvp(w, c, dY, AttentionPart::kB, &p), attention_jvp(w, c, dY, AttentionPart::kB)),
            test::kSameMathRounding);
}

TEST_P(JacobianTest, SoftmaxRowJacobianMatchesFiniteDifferences) {
  const AttentionCache c = attention_forward(w, X);
  const Index n = X.rows();
  const Vec m = c.Q.row(0).transpose().head(n) + Vec::LinSpaced(n, -1.0, 1.0);  // arbitrary logits
  const Vec p = softmax_rows(m.transpose()).transpose();
  Mat fd(n, n);
  for (Index k = 0; k < n; ++k) {
    Vec mp = m, mm = m;
    mp(k) += kFdStep;
    mm(k) -= kFdStep;
    fd.col(k) = (softmax_rows(mp.transpose()) - softmax_rows(mm.transpose())).transpose() / (2 * kFdStep);
  }
  const Mat S = softmax_row_jacobian(p);
  EXPECT_LT(rel_error(S, fd), test::kVsFiniteDifferences);
  EXPECT_LT((S * Vec::Ones(n)).norm(), 1e-15);  // 1 is always in the nullspace
}

INSTANTIATE_TEST_SUITE_P(Sizes, JacobianTest,
                         testing::Values(Case{3, 4, 1, 0.0}, Case{4, 6, 2, 0.0}, Case{5, 8, 2, 1.0},
                                         Case{6, 12, 3, 0.0}, Case{7, 8, 4, 1.0}),
                         name_of);

TEST(RightMultiplyTokenwise, MatchesDenseBlockDiagonalProduct) {
  SCOPED_TRACE("seed=5");
  std::mt19937_64 rng(5);
  const Index n = 4, d = 5, k = 3;
  const Mat K = test::gaussian(7, n * d, 1.0, rng);
  std::vector<Mat> blocks;
  TokenBlockDiagonal D;
  D.n = n;
  for (Index j = 0; j < n; ++j) blocks.push_back(test::gaussian(d, k, 1.0, rng));
  D.blocks = blocks;
  EXPECT_LT(rel_error(right_multiply_tokenwise(K, n, blocks), K * D.to_dense()), 1e-14);
}

TEST(ComplementBases, AreOrthonormalAndOrthogonalToTheNullspace) {
  Vec xh(6);
  xh << 1, -2, 0.5, 0.5, 1, -1;  // centred
  const Mat P = layernorm_complement_basis(xh);
  ASSERT_EQ(P.cols(), 4);
  EXPECT_LT((P.transpose() * P - Mat::Identity(4, 4)).norm(), 1e-14);
  EXPECT_LT((P.transpose() * Vec::Ones(6)).norm(), 1e-14);
  EXPECT_LT((P.transpose() * xh).norm(), 1e-14);
  const Mat O = ones_complement_basis(5);
  EXPECT_LT((O.transpose() * O - Mat::Identity(4, 4)).norm(), 1e-14);
  EXPECT_LT((O.transpose() * Vec::Ones(5)).norm(), 1e-14);
}

TEST(BlockWeights, ValidateNamesTheProblem) {
  BlockWeights w = test::random_block(8, 2, 16, 1);
  EXPECT_NO_THROW(w.validate());
  BlockWeights bad = w;
  bad.Wq(1, 2) = std::nan("");
  try {
    bad.validate();
    FAIL() << "NaN accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Wq"), std::string::npos) << e.what();
  }
  bad = w;
  bad.heads = 3;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = w;
  bad.W1 = Mat::Zero(8, 15);
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}


// A saturated softmax (a huge logit scale: every row of every A_h one-hot in fp64) cannot move, so
// ∂A/∂Y = 0 exactly: E_sa = 0 and K_sa = B_sa. The E terms must cancel within themselves; formed as
// s·(product) − s·(product), their rounding at s = 1e20 swamped B and K_sa came out as 0.
TEST(SaturatedAttention, KIsExactlyTheValuePathB) {
  SCOPED_TRACE("seeds 42 (weights), 43 (tokens), logit_scale 1e20");
  const BlockWeights w = test::random_block(8, 2, 16, 42, 1e20);
  const Mat X = test::random_tokens(6, 8, 43);
  const AttentionCache c = attention_forward(w, X);
  for (const Mat& A : c.A)  // the premise: one-hot rows, exactly
    for (Index i = 0; i < A.rows(); ++i) ASSERT_EQ(A.row(i).maxCoeff(), 1.0) << "row " << i;
  const Mat K = attention_jacobian(w, c), B = attention_jacobian(w, c, AttentionPart::kB);
  EXPECT_EQ(attention_jacobian(w, c, AttentionPart::kE).norm(), 0.0);
  ASSERT_GT(B.norm(), 0.0);
  EXPECT_LT(rel_error(K, B), test::kSameMathRounding);
  EXPECT_LT(rel_error(operator_to_dense(AttentionJacobianOp(w, c, AttentionPart::kFull)), B), test::kSameMathRounding);
}
}  // namespace
}  // namespace jacond

namespace jacond {
namespace {
TEST(AttentionMapJacobian, MatchesFiniteDifferencesPerHead) {
  SCOPED_TRACE("seeds 42 (weights), 43 (tokens)");
  const BlockWeights w = test::random_block(8, 2, 16, 42);
  const Mat X = test::random_tokens(5, 8, 43);
  const AttentionCache c = attention_forward(w, X);
  for (Index h = 0; h < w.heads; ++h) {
    const Mat D = attention_map_jacobian(w, c, h);
    Mat fd(D.rows(), D.cols());
    for (Index k = 0; k < X.size(); ++k) {
      Mat Xp = X, Xm = X;
      Xp.data()[k] += test::kFdStep;
      Xm.data()[k] -= test::kFdStep;
      const Mat diff = (attention_forward(w, Xp).A[h] - attention_forward(w, Xm).A[h]) / (2 * test::kFdStep);
      fd.col(k) = vec(diff);
    }
    EXPECT_LT(test::rel_error(D, fd), test::kVsFiniteDifferences) << "head " << h;
  }
}
}  // namespace
}  // namespace jacond
