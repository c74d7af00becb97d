// Analytic Jacobians against LibTorch autograd on the same weights (docs/design.md §8: the second oracle
// after central differences, ≤ 1e-10 relative Frobenius in fp64, test::kVsAutograd):
//   * the dense closed forms of analysis/jacobians/jacobians.h;
//   * the block kernels of analysis/operators/block_kernels.h (the one JVP/VJP implementation,
//     shared by the operators and the network Jacobians), through the operators of
//     analysis/operators/operators.h, both products: LayerNorm (LN1, LN2), MLP, attention (K_sa and
//     B_sa + E_sa), SAB and FFN in every skip mode. Their parameter tangents/gradients and their
//     chaining over layers are checked in test_network_autograd.cpp.
//
// The weights are test::random_block (Gaussian weights, NON-ZERO biases, non-unit LayerNorm
// affine), converted to timm tensors with models::block_to_timm; the oracle is the independent
// torch-ops forward of models/vit/torch_block.h differentiated row by row with
// torch::autograd::grad (models::torch_jacobian). Both sides use the column-major vec of
// analysis/core/types.h: row i + a·n (output token i, feature a), column j + b·n (input token j,
// feature b); for an attention map A_h [n, n], row i + k·n is A_h[i, k].
//
// The last tests are negative controls: deliberately wrong analytic variants (B alone, the
// transpose, row-major vec, the wrong residual, the wrong logit scale) must be rejected by the
// same comparison, so a pass above means something.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "models/track/bridge.h"
#include "models/io/tensor_map.h"
#include "models/vit/torch_block.h"
#include "support/random_block.h"
#include "support/tolerances.h"

namespace jacond {
namespace {

using models::TensorMap;
using models::TorchBlockSpec;
using test::kVsAutograd;
using test::rel_error;

const SkipMode kAllSkips[] = {SkipMode::kNone, SkipMode::kFull, SkipMode::kSab, SkipMode::kFfn};

struct Case {
  Index n, d, heads;
  double logit_scale;  // 0 = 1/sqrt(d_h)
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "n" + std::to_string(c.n) + "_d" + std::to_string(c.d) + "_h" + std::to_string(c.heads) +
         (c.logit_scale == 0 ? "_sdefault" : "_s1");
}

class AutogradTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const Index hidden = 4 * c.d;  // ViT MLP ratio
    w = test::random_block(c.d, c.heads, hidden, weight_seed(), c.logit_scale);
    X = test::random_tokens(c.n, c.d, token_seed());
    models::block_to_timm(w, 0, tensors);
    spec.layer = 0;
    spec.heads = c.heads;
    spec.logit_scale = c.logit_scale;
    spec.ln_eps = w.ln_eps;
  }

  uint64_t weight_seed() const { return 4242 + 17 * GetParam().n + 5 * GetParam().d + GetParam().heads; }
  uint64_t token_seed() const { return 99 + GetParam().n + GetParam().d; }

  /// The knobs of this case (with the seeds), for failure messages.
  std::string knobs(const std::string& extra = "") const {
    const Case& c = GetParam();
    std::ostringstream os;
    os << "n=" << c.n << " d=" << c.d << " heads=" << c.heads << " logit_scale="
       << (c.logit_scale == 0 ? std::string("default(1/sqrt(d_h))") : std::to_string(c.logit_scale))
       << " seeds " << weight_seed() << " (weights), " << token_seed() << " (tokens)";
    if (!extra.empty()) os << " " << extra;
    return os.str();
  }

  /// Autograd Jacobian of bare attention at Y.
  Mat autograd_attention(const Mat& Y) const {
    return models::torch_jacobian([&](const at::Tensor& t) { return models::torch_attention(tensors, spec, t); }, Y);
  }

  BlockWeights w;
  Mat X;
  TensorMap tensors;
  TorchBlockSpec spec;
};

// Sanity of the oracle's vec convention: f(X) = X W must give Wᵀ ⊗ I_n (docs/design.md §2).
TEST(TorchJacobianConvention, LinearMapIsKroneckerWTransposeWithIdentity) {
  const Index n = 4, d = 3, q = 5;
  const Mat X = test::random_tokens(n, d, 1);
  std::mt19937_64 rng(2);
  const Mat W = test::gaussian(d, q, 1.0, rng);
  const at::Tensor Wt = models::to_torch(W);
  const Mat J = models::torch_jacobian([&](const at::Tensor& t) { return torch::matmul(t, Wt); }, X);
  Mat kron = Mat::Zero(n * q, n * d);
  for (Index a = 0; a < q; ++a)
    for (Index b = 0; b < d; ++b) kron.block(a * n, b * n, n, n) = W(b, a) * Mat::Identity(n, n);
  ASSERT_EQ(J.rows(), n * q);
  ASSERT_EQ(J.cols(), n * d);
  EXPECT_LT(rel_error(J, kron), kVsAutograd) << "n=" << n << " d=" << d << " q=" << q << " seeds 1 (X), 2 (W)";
}

TEST_P(AutogradTest, BareAttentionKsaMatchesAutograd) {
  const AttentionCache c = attention_forward(w, X);
  const Mat K = attention_jacobian(w, c);
  const Mat Kt = autograd_attention(X);
  ASSERT_EQ(K.rows(), Kt.rows());
  ASSERT_EQ(K.cols(), Kt.cols());
  EXPECT_LT(rel_error(K, Kt), kVsAutograd) << knobs("matrix=K_sa");
}

TEST_P(AutogradTest, BareAttentionAtLayerNormOutputMatchesAutograd) {
  // The point `jacond block` uses: Y = LN1(X), rows of unit-ish scale.
  const Mat Y = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps).y;
  const Mat K = attention_jacobian(w, attention_forward(w, Y));
  EXPECT_LT(rel_error(K, autograd_attention(Y)), kVsAutograd) << knobs("matrix=K_sa at LN1(X)");
}

TEST_P(AutogradTest, BPlusESplitEqualsAutogradK) {
  const AttentionCache c = attention_forward(w, X);
  const Mat B = attention_jacobian(w, c, AttentionPart::kB);
  const Mat E = attention_jacobian(w, c, AttentionPart::kE);
  const Mat Kt = autograd_attention(X);
  EXPECT_LT(rel_error(B + E, Kt), kVsAutograd) << knobs("matrix=B_sa+E_sa");
}

TEST_P(AutogradTest, AttentionMapJacobianPerHeadMatchesAutograd) {
  const AttentionCache c = attention_forward(w, X);
  const Index n = X.rows();
  for (Index h = 0; h < w.heads; ++h) {
    const Mat Ap = attention_map_jacobian(w, c, h);
    const Mat At = models::torch_jacobian(
        [&](const at::Tensor& t) { return models::torch_attention_maps(tensors, spec, t).select(0, h); }, X);
    ASSERT_EQ(Ap.rows(), n * n);
    ASSERT_EQ(At.rows(), n * n);
    ASSERT_EQ(Ap.cols(), At.cols());
    EXPECT_LT(rel_error(Ap, At), kVsAutograd) << knobs("matrix=dvecA/dvecY head=" + std::to_string(h));
  }
}

TEST_P(AutogradTest, AttentionMapsForwardMatchesTorch) {
  // Not a Jacobian, but the maps the map-Jacobian is taken of: same weights, same A_h.
  const AttentionCache c = attention_forward(w, X);
  const at::Tensor maps = models::torch_attention_maps(tensors, spec, models::to_torch(X));
  for (Index h = 0; h < w.heads; ++h)
    EXPECT_LT(rel_error(models::to_eigen(maps.select(0, h)), c.A[h]), kVsAutograd)
        << knobs("head=" + std::to_string(h));
  const at::Tensor out = models::torch_attention(tensors, spec, models::to_torch(X));
  EXPECT_LT(rel_error(models::to_eigen(out), c.out), kVsAutograd) << knobs("SA(X) forward");
}

TEST_P(AutogradTest, LayerNormJacobiansMatchAutograd) {
  const LayerNormCache c1 = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  const Mat J1 = layernorm_jacobian(w.ln1_gamma, c1).to_dense();
  const Mat T1 = models::torch_jacobian([&](const at::Tensor& t) { return models::torch_layernorm1(tensors, spec, t); }, X);
  EXPECT_LT(rel_error(J1, T1), kVsAutograd) << knobs("matrix=J_LN1");

  const LayerNormCache c2 = layernorm_forward(X, w.ln2_gamma, w.ln2_beta, w.ln_eps);
  const TokenBlockDiagonal J2 = layernorm_jacobian(w.ln2_gamma, c2);
  const Mat T2 = models::torch_jacobian([&](const at::Tensor& t) { return models::torch_layernorm2(tensors, spec, t); }, X);
  EXPECT_LT(rel_error(J2.to_dense(), T2), kVsAutograd) << knobs("matrix=J_LN2");

  // The kernels layernorm_jvp / layernorm_vjp (LayerNormJacobianOp), matrix-free.
  const LayerNormJacobianOp op1(w.ln1_gamma, c1), op2(w.ln2_gamma, c2);
  EXPECT_LT(rel_error(operator_to_dense(op1), T1), kVsAutograd) << knobs("LayerNormJacobianOp LN1 JVP");
  EXPECT_LT(rel_error(operator_transpose_to_dense(op1), T1.transpose()), kVsAutograd) << knobs("LayerNormJacobianOp LN1 VJP");
  EXPECT_LT(rel_error(operator_to_dense(op2), T2), kVsAutograd) << knobs("LayerNormJacobianOp LN2 JVP");
  EXPECT_LT(rel_error(operator_transpose_to_dense(op2), T2.transpose()), kVsAutograd) << knobs("LayerNormJacobianOp LN2 VJP");
}

TEST_P(AutogradTest, MlpJacobianMatchesAutograd) {
  const Mat Y = layernorm_forward(X, w.ln2_gamma, w.ln2_beta, w.ln_eps).y;
  const std::vector<std::pair<std::string, Mat>> points = {{"X", X}, {"LN2(X)", Y}};
  for (const auto& point : points) {
    const std::string& where = point.first;
    const Mat& P = point.second;  // a reference, not a structured binding: lambdas capture it (C++17)
    const MlpCache c = mlp_forward(w, P);
    const TokenBlockDiagonal J = mlp_jacobian(w, c);
    const Mat T = models::torch_jacobian([&](const at::Tensor& t) { return models::torch_mlp(tensors, spec, t); }, P);
    EXPECT_LT(rel_error(J.to_dense(), T), kVsAutograd) << knobs("matrix=K_mlp at " + where);
    // The kernels mlp_jvp / mlp_vjp (MlpJacobianOp), matrix-free.
    const MlpJacobianOp op(w, c);
    EXPECT_LT(rel_error(operator_to_dense(op), T), kVsAutograd) << knobs("MlpJacobianOp JVP at " + where);
    EXPECT_LT(rel_error(operator_transpose_to_dense(op), T.transpose()), kVsAutograd) << knobs("MlpJacobianOp VJP at " + where);
  }
}

TEST_P(AutogradTest, SabJacobianMatchesAutogradForEverySkipMode) {
  for (SkipMode skip : kAllSkips) {
    const BlockForward f = block_forward(w, X, skip);
    const Mat K = sab_jacobian(w, f);
    const bool residual = sab_residual(skip);
    const Mat T = models::torch_jacobian(
        [&](const at::Tensor& t) { return models::torch_sab(tensors, spec, t, residual); }, X);
    EXPECT_LT(rel_error(K, T), kVsAutograd) << knobs("matrix=K_sab skip=" + to_string(skip));
  }
}

TEST_P(AutogradTest, FfnJacobianMatchesAutogradForEverySkipMode) {
  for (SkipMode skip : kAllSkips) {
    const BlockForward f = block_forward(w, X, skip);
    const Mat K = ffn_jacobian(w, f).to_dense();
    const bool residual = ffn_residual(skip);
    const Mat T = models::torch_jacobian(
        [&](const at::Tensor& t) { return models::torch_ffn(tensors, spec, t, residual); }, f.X1);
    EXPECT_LT(rel_error(K, T), kVsAutograd) << knobs("matrix=K_ffn at X1 skip=" + to_string(skip));
  }
}

TEST_P(AutogradTest, BlockForwardMatchesTorchForEverySkipMode) {
  // The points the sub-block Jacobians are evaluated at (X1 in particular) must be the same.
  for (SkipMode skip : kAllSkips) {
    const BlockForward f = block_forward(w, X, skip);
    const at::Tensor X1 = models::torch_sab(tensors, spec, models::to_torch(X), sab_residual(skip));
    EXPECT_LT(rel_error(f.X1, models::to_eigen(X1)), kVsAutograd) << knobs("X1 skip=" + to_string(skip));
    const at::Tensor X2 = models::torch_ffn(tensors, spec, X1, ffn_residual(skip));
    EXPECT_LT(rel_error(f.X2, models::to_eigen(X2)), kVsAutograd) << knobs("X2 skip=" + to_string(skip));
  }
}

TEST_P(AutogradTest, AttentionOperatorMatchesAutograd) {
  const AttentionCache c = attention_forward(w, X);
  const Mat T = autograd_attention(X);
  const AttentionJacobianOp op(w, c);
  ASSERT_EQ(op.rows(), T.rows());
  ASSERT_EQ(op.cols(), T.cols());
  EXPECT_LT(rel_error(operator_to_dense(op), T), kVsAutograd) << knobs("AttentionJacobianOp K_sa JVP");
  EXPECT_LT(rel_error(operator_transpose_to_dense(op), T.transpose()), kVsAutograd)
      << knobs("AttentionJacobianOp K_sa VJP");
  // The split parts, matrix-free, sum to autograd's K as well.
  const AttentionJacobianOp opB(w, c, AttentionPart::kB), opE(w, c, AttentionPart::kE);
  EXPECT_LT(rel_error(operator_to_dense(opB) + operator_to_dense(opE), T), kVsAutograd)
      << knobs("AttentionJacobianOp B_sa+E_sa JVP");
  EXPECT_LT(rel_error(operator_transpose_to_dense(opB) + operator_transpose_to_dense(opE), T.transpose()),
            kVsAutograd)
      << knobs("AttentionJacobianOp B_sa+E_sa VJP");
}

TEST_P(AutogradTest, SabAndFfnOperatorsMatchAutogradForEverySkipMode) {
  for (SkipMode skip : kAllSkips) {
    const BlockForward f = block_forward(w, X, skip);
    const Mat Tsab = models::torch_jacobian(
        [&](const at::Tensor& t) { return models::torch_sab(tensors, spec, t, sab_residual(skip)); }, X);
    const SabJacobianOp sab(w, f);
    EXPECT_LT(rel_error(operator_to_dense(sab), Tsab), kVsAutograd) << knobs("SabJacobianOp JVP skip=" + to_string(skip));
    EXPECT_LT(rel_error(operator_transpose_to_dense(sab), Tsab.transpose()), kVsAutograd)
        << knobs("SabJacobianOp VJP skip=" + to_string(skip));

    const Mat Tffn = models::torch_jacobian(
        [&](const at::Tensor& t) { return models::torch_ffn(tensors, spec, t, ffn_residual(skip)); }, f.X1);
    const FfnJacobianOp ffn(w, f);
    EXPECT_LT(rel_error(operator_to_dense(ffn), Tffn), kVsAutograd) << knobs("FfnJacobianOp JVP skip=" + to_string(skip));
    EXPECT_LT(rel_error(operator_transpose_to_dense(ffn), Tffn.transpose()), kVsAutograd)
        << knobs("FfnJacobianOp VJP skip=" + to_string(skip));
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AutogradTest,
                         testing::Values(Case{3, 4, 1, 0.0}, Case{3, 4, 1, 1.0}, Case{5, 8, 2, 0.0},
                                         Case{5, 8, 2, 1.0}, Case{6, 12, 3, 0.0}, Case{6, 12, 3, 1.0},
                                         Case{7, 16, 4, 0.0}, Case{7, 16, 4, 1.0}),
                         case_name);

// ---------------------------------------------------------------------------------------------
// Negative controls: the comparison must reject wrong analytic variants by a wide margin.

constexpr double kMustDiffer = 1e-3;

/// Row-major re-indexing of a Jacobian: entry (i + a·n, j + b·n) moved to (i·d + a, j·d + b).
Mat to_row_major_vec(const Mat& K, Index n, Index d) {
  Mat R(K.rows(), K.cols());
  for (Index b = 0; b < d; ++b)
    for (Index j = 0; j < n; ++j)
      for (Index a = 0; a < d; ++a)
        for (Index i = 0; i < n; ++i) R(i * d + a, j * d + b) = K(i + a * n, j + b * n);
  return R;
}

TEST_P(AutogradTest, WrongAnalyticVariantsAreDetected) {
  const Index n = X.rows(), d = w.d;
  const AttentionCache c = attention_forward(w, X);
  const Mat T = autograd_attention(X);
  const Mat K = attention_jacobian(w, c);
  ASSERT_LT(rel_error(K, T), kVsAutograd) << knobs("control: the right answer passes");

  // The dominant term alone (Prop. 2's B_sa) is not the Jacobian: E_sa matters.
  const Mat B = attention_jacobian(w, c, AttentionPart::kB);
  EXPECT_GT(rel_error(B, T), kMustDiffer) << knobs("wrong variant: B_sa alone");
  EXPECT_GT(rel_error(attention_jacobian(w, c, AttentionPart::kE), T), kMustDiffer)
      << knobs("wrong variant: E_sa alone");

  // Transposed Jacobian and row-major vec are different matrices.
  EXPECT_GT(rel_error(K.transpose(), T), kMustDiffer) << knobs("wrong variant: K_sa transposed");
  EXPECT_GT(rel_error(to_row_major_vec(K, n, d), T), kMustDiffer) << knobs("wrong variant: row-major vec");

  // The wrong logit scale.
  BlockWeights w_scaled = w;
  w_scaled.logit_scale = 2.0 * w.effective_logit_scale();
  EXPECT_GT(rel_error(attention_jacobian(w_scaled, attention_forward(w_scaled, X)), T), kMustDiffer)
      << knobs("wrong variant: logit scale doubled");

  // The wrong residual on the SAB: K_sab with vs without +I.
  const Mat Tsab_none = models::torch_jacobian(
      [&](const at::Tensor& t) { return models::torch_sab(tensors, spec, t, /*residual=*/false); }, X);
  EXPECT_GT(rel_error(sab_jacobian(w, block_forward(w, X, SkipMode::kFull)), Tsab_none), kMustDiffer)
      << knobs("wrong variant: SAB residual added");

  // A bias dropped (the Jacobian depends on b_Q, b_K through the attention maps).
  BlockWeights w_nobias = w;
  w_nobias.bk.setZero();
  w_nobias.bq.setZero();
  EXPECT_GT(rel_error(attention_jacobian(w_nobias, attention_forward(w_nobias, X)), T), kMustDiffer)
      << knobs("wrong variant: b_Q, b_K dropped");
}

}  // namespace
}  // namespace jacond
