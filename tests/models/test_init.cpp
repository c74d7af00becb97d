// Tests for models/init (docs/design.md §3), models/bridge (the Linear transpose) and the vec convention
// of models/torch_block's autograd Jacobian (docs/design.md §2).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <Eigen/SVD>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "analysis/jacobians/block.h"
#include "models/track/bridge.h"
#include "models/init/init.h"
#include "models/vit/torch_block.h"

namespace jacond::models {
namespace {

std::string knobs(int64_t d, int64_t heads) {
  return "d=" + std::to_string(d) + " heads=" + std::to_string(heads);
}

Eigen::VectorXd singular_values(const Mat& M) {
  return Eigen::JacobiSVD<Mat>(M).singularValues();
}

double kappa(const Mat& M) {
  Eigen::VectorXd s = singular_values(M);
  return s(0) / s(s.size() - 1);
}

BlockWeights make_block(InitConfig cfg, int64_t d, int64_t heads, int64_t layer = 0) {
  TensorMap t;
  init_block(t, layer, d, heads, 4 * d, cfg);
  return block_from_timm(t, layer, heads);
}

/// Throws-with-message helper: returns the what() of the std::invalid_argument thrown by fn.
template <typename Fn>
std::string invalid_argument_message(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<no std::invalid_argument thrown>";
}

class InitSizes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

INSTANTIATE_TEST_SUITE_P(DHeads, InitSizes,
                         ::testing::Combine(::testing::Values<int64_t>(16, 32),
                                            ::testing::Values<int64_t>(1, 2, 4)),
                         [](const auto& info) {
                           return "d" + std::to_string(std::get<0>(info.param)) + "_h" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// ours: V/O scaled orthogonal (κ = 1), Q/K per-head truncated SVD structure.

TEST_P(InitSizes, OursVoIsScaledOrthogonal) {
  const auto [d, heads] = GetParam();
  InitConfig cfg = InitConfig::for_scheme(InitScheme::kOurs, 7);
  BlockWeights w = make_block(cfg, d, heads);
  const Mat P = w.Wv * w.Wo;  // = c² U Vᵀ
  Eigen::VectorXd s = singular_values(P);
  const double c2 = cfg.c * cfg.c;
  EXPECT_NEAR(kappa(P), 1.0, 1e-12) << knobs(d, heads);
  for (Index i = 0; i < s.size(); ++i) EXPECT_NEAR(s(i), c2, 1e-12 * c2) << knobs(d, heads);
  // W^V = c U and W^O = c Vᵀ are each c × orthogonal.
  const Mat I = Mat::Identity(d, d);
  EXPECT_LT((w.Wv.transpose() * w.Wv - c2 * I).norm(), 1e-12 * c2 * d) << knobs(d, heads);
  EXPECT_LT((w.Wo * w.Wo.transpose() - c2 * I).norm(), 1e-12 * c2 * d) << knobs(d, heads);
}

TEST_P(InitSizes, OursQkPerHeadIsTruncatedSvd) {
  const auto [d, heads] = GetParam();
  const int64_t dh = d / heads;
  BlockWeights w = make_block(InitConfig::for_scheme(InitScheme::kOurs, 11), d, heads);
  for (int64_t h = 0; h < heads; ++h) {
    const Mat Qh = w.Wq.middleCols(h * dh, dh), Kh = w.Wk.middleCols(h * dh, dh);
    // W^Q_h = U_h sqrt(S_h), W^K_h = V_h sqrt(S_h)  ⇒  QᵀQ = KᵀK = diag(S_h).
    const Mat QtQ = Qh.transpose() * Qh, KtK = Kh.transpose() * Kh;
    const double scale = QtQ.norm();
    const Mat S = Mat(QtQ.diagonal().asDiagonal());
    EXPECT_LT((QtQ - S).norm(), 1e-12 * scale) << knobs(d, heads) << " head " << h;
    EXPECT_LT((KtK - S).norm(), 1e-12 * scale) << knobs(d, heads) << " head " << h;
    for (int64_t k = 0; k < dh; ++k) {
      EXPECT_GT(S(k, k), 0.0);
      if (k > 0) {
        EXPECT_LE(S(k, k), S(k - 1, k - 1) * (1 + 1e-12)) << "S_h sorted descending";
      }
    }
    // rank(W^Q_h W^K_hᵀ) = d_h, with singular values S_h.
    Eigen::VectorXd s = singular_values(Qh * Kh.transpose());
    for (int64_t k = 0; k < dh; ++k) EXPECT_NEAR(s(k), S(k, k), 1e-12 * s(0));
    for (int64_t k = dh; k < d; ++k) EXPECT_LT(s(k), 1e-12 * s(0)) << knobs(d, heads);
  }
}

// Independent check of Eq. 11 and of V/O against the documented draw order (init.cpp): the
// generator of block `layer` is seeded with layer_seed(seed, layer) and draws Z_0..Z_{h−1}
// (N(0,1)/sqrt(d)) then G. Eigen's SVD (not torch's) gives the expected truncations.
TEST_P(InitSizes, OursMatchesRedrawnEq11AndPolarFactor) {
  const auto [d, heads] = GetParam();
  const int64_t dh = d / heads, layer = 3;
  InitConfig cfg = InitConfig::for_scheme(InitScheme::kOurs, 21);
  BlockWeights w = make_block(cfg, d, heads, layer);
  auto gen = at::detail::createCPUGenerator(layer_seed(cfg.seed, layer));
  for (int64_t h = 0; h < heads; ++h) {
    const Mat Z = to_eigen(torch::randn({d, d}, gen, torch::kFloat64)) / std::sqrt(double(d));
    const Mat T = cfg.alpha * Z + cfg.beta * Mat::Identity(d, d);
    Eigen::JacobiSVD<Mat> svd(T, Eigen::ComputeFullU | Eigen::ComputeFullV);
    const Mat best = svd.matrixU().leftCols(dh) *
                     svd.singularValues().head(dh).asDiagonal() *
                     svd.matrixV().leftCols(dh).transpose();
    const Mat QK = w.Wq.middleCols(h * dh, dh) * w.Wk.middleCols(h * dh, dh).transpose();
    EXPECT_LT((QK - best).norm(), 1e-10 * T.norm()) << knobs(d, heads) << " head " << h;
    if (heads == 1) {
      EXPECT_LT((QK - T).norm(), 1e-12 * T.norm()) << knobs(d, heads);
    }
  }
  const Mat G = to_eigen(torch::randn({d, d}, gen, torch::kFloat64));
  Eigen::JacobiSVD<Mat> svd(G, Eigen::ComputeFullU | Eigen::ComputeFullV);
  const Mat polar = svd.matrixU() * svd.matrixV().transpose();  // U Vᵀ, sign-invariant
  EXPECT_LT((w.Wv * w.Wo - cfg.c * cfg.c * polar).norm(), 1e-10 * cfg.c * cfg.c * d)
      << knobs(d, heads);
}

// heads = 1: W^Q W^Kᵀ = T = αZ + βI exactly. Statistical checks of that law, pooled over layers:
// mean(diag T) − β = α·mean(diag Z) has std α/(d·sqrt(L)); off-diagonal entries of T are αZ_ij
// with variance α²/d.
TEST(InitOurs, QkSingleHeadIsAlphaZPlusBetaI) {
  for (auto [alpha, beta] : {std::pair{2.0, 0.6}, std::pair{0.5, 1.0}}) {
    for (int64_t d : {16, 32}) {
      const int L = 8;
      double diag_sum = 0, off_sq = 0;
      int64_t off_count = 0;
      for (int layer = 0; layer < L; ++layer) {
        InitConfig cfg = InitConfig::for_scheme(InitScheme::kOurs, 3);
        cfg.alpha = alpha;
        cfg.beta = beta;
        BlockWeights w = make_block(cfg, d, 1, layer);
        const Mat T = w.Wq * w.Wk.transpose();
        diag_sum += T.diagonal().sum();
        for (Index i = 0; i < d; ++i)
          for (Index j = 0; j < d; ++j)
            if (i != j) off_sq += T(i, j) * T(i, j), ++off_count;
      }
      const double mean_diag = diag_sum / (L * d);
      const double sd = alpha / (d * std::sqrt(double(L)));
      EXPECT_NEAR(mean_diag, beta, 5 * sd) << "alpha=" << alpha << " beta=" << beta << " d=" << d;
      // E[T_ij²] = α²/d; the sample mean of m = off_count squares has rel. std sqrt(2/m).
      const double var = off_sq / off_count, expect = alpha * alpha / d;
      EXPECT_NEAR(var / expect, 1.0, 5 * std::sqrt(2.0 / off_count)) << "d=" << d;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// mimetic: W^V W^O = T = 0.4 Z − 0.4 I (not orthogonal), Q/K with α = β = 0.7.

TEST_P(InitSizes, MimeticVoAndQk) {
  const auto [d, heads] = GetParam();
  const int64_t dh = d / heads;
  BlockWeights w = make_block(InitConfig::for_scheme(InitScheme::kMimetic, 5), d, heads);
  const Mat P = w.Wv * w.Wo;
  EXPECT_GT(kappa(P), 1.0 + 1e-3) << knobs(d, heads);
  EXPECT_NEAR(P.diagonal().mean(), -0.4, 5 * 0.4 / d) << knobs(d, heads);
  // W^V = U sqrt(S), W^O = sqrt(S) Vᵀ ⇒ (W^V)ᵀW^V = W^O (W^O)ᵀ = diag(S).
  const Mat VtV = w.Wv.transpose() * w.Wv, OOt = w.Wo * w.Wo.transpose();
  const Mat S = Mat(VtV.diagonal().asDiagonal());
  EXPECT_LT((VtV - S).norm(), 1e-12 * S.norm());
  EXPECT_LT((OOt - S).norm(), 1e-12 * S.norm());
  // Q/K: same structure as ours; rank d_h per head.
  for (int64_t h = 0; h < heads; ++h) {
    const Mat Qh = w.Wq.middleCols(h * dh, dh), Kh = w.Wk.middleCols(h * dh, dh);
    Eigen::VectorXd s = singular_values(Qh * Kh.transpose());
    for (int64_t k = dh; k < d; ++k) EXPECT_LT(s(k), 1e-12 * s(0));
  }
  if (heads == 1) {
    EXPECT_NEAR((w.Wq * w.Wk.transpose()).diagonal().mean(), 0.7, 5 * 0.7 / d);
  }
  // MLP is timm: trunc_normal with std 0.02 (the sample statistics of TimmStatistics).
  for (const Mat* W : {&w.W1, &w.W2}) {
    const double m = static_cast<double>(W->size()), mean = W->mean();
    const double sd = std::sqrt((W->array() - mean).square().sum() / (m - 1));
    EXPECT_NEAR(sd / 0.02, 1.0, 5 / std::sqrt(2 * m)) << knobs(d, heads);
    EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(m)) << knobs(d, heads);
  }
}

// ---------------------------------------------------------------------------------------------
// DKS scaled uniform orthogonal MLP weights.

void expect_dks(const torch::Tensor& W, const std::string& what) {
  const int64_t out = W.size(0), in = W.size(1);
  const double scale = std::max(std::sqrt(double(out) / in), 1.0);
  const Mat M = to_eigen(W);
  // The smaller Gram side is scale² I.
  const Mat G = out >= in ? Mat(M.transpose() * M) : Mat(M * M.transpose());
  const Mat I = Mat::Identity(G.rows(), G.cols());
  EXPECT_LT((G - scale * scale * I).cwiseAbs().maxCoeff(), 1e-12 * scale * scale)
      << what << " out=" << out << " in=" << in;
}

TEST_P(InitSizes, DksMlpIsScaledOrthogonal) {
  const auto [d, heads] = GetParam();
  for (int64_t hidden : {4 * d, d, d / 2}) {
    TensorMap t;
    init_block(t, 0, d, heads, hidden, InitConfig::for_scheme(InitScheme::kOurs, 1));
    expect_dks(t.at("blocks.0.mlp.fc1.weight"), "fc1 " + knobs(d, heads));
    expect_dks(t.at("blocks.0.mlp.fc2.weight"), "fc2 " + knobs(d, heads));
    EXPECT_EQ(t.at("blocks.0.mlp.fc1.bias").abs().max().item<double>(), 0.0);
  }
}

TEST(InitDks, ShapesAndScale) {
  auto gen = at::detail::createCPUGenerator(42);
  torch::Tensor W = dks_orthogonal(12, 3, gen);
  EXPECT_EQ(W.sizes(), (std::vector<int64_t>{12, 3}));
  expect_dks(W, "12x3");  // scale 2
  W = dks_orthogonal(3, 12, gen);
  EXPECT_EQ(W.sizes(), (std::vector<int64_t>{3, 12}));
  expect_dks(W, "3x12");  // scale 1
}

// ---------------------------------------------------------------------------------------------
// timm.

TEST_P(InitSizes, TimmStatistics) {
  const auto [d, heads] = GetParam();
  TensorMap t;
  init_block(t, 2, d, heads, 4 * d, InitConfig::for_scheme(InitScheme::kTimm, 9));
  const std::string p = "blocks.2.";
  EXPECT_EQ(t.size(), 12u);
  for (const char* key : {"attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight",
                          "mlp.fc2.weight"}) {
    const torch::Tensor& W = t.at(p + key);
    EXPECT_EQ(W.scalar_type(), torch::kFloat64);
    const double m = W.numel();
    // sample std of m draws: relative std ≈ 1/sqrt(2m); the ±100σ cut is invisible.
    EXPECT_NEAR(W.std().item<double>() / 0.02, 1.0, 5 / std::sqrt(2 * m)) << key << knobs(d, heads);
    EXPECT_NEAR(W.mean().item<double>(), 0.0, 5 * 0.02 / std::sqrt(m)) << key;
    EXPECT_LE(W.abs().max().item<double>(), 2.0) << key;
  }
  for (const char* key : {"norm1.bias", "norm2.bias", "attn.qkv.bias", "attn.proj.bias",
                          "mlp.fc1.bias", "mlp.fc2.bias"}) {
    EXPECT_TRUE(torch::equal(t.at(p + key), torch::zeros_like(t.at(p + key)))) << key;
  }
  for (const char* key : {"norm1.weight", "norm2.weight"}) {
    EXPECT_TRUE(torch::equal(t.at(p + key), torch::ones_like(t.at(p + key)))) << key;
  }
  EXPECT_EQ(t.at(p + "attn.qkv.weight").sizes(), (std::vector<int64_t>{3 * d, d}));
  EXPECT_EQ(t.at(p + "mlp.fc1.weight").sizes(), (std::vector<int64_t>{4 * d, d}));
  EXPECT_EQ(t.at(p + "mlp.fc2.weight").sizes(), (std::vector<int64_t>{d, 4 * d}));
}

// The inverse-CDF sampler against the truncated-normal law with a cut that matters:
// N(0,1) on [a, b] = [−1, 2] has mean (φ(a) − φ(b)) / Z, Z = Φ(b) − Φ(a).
TEST(InitTruncNormal, MatchesTruncatedLaw) {
  auto gen = at::detail::createCPUGenerator(123);
  const double a = -1.0, b = 2.0, mean = 0.5, sd = 2.0;  // standardized cut [−0.75, 0.75]
  torch::Tensor x = trunc_normal({200000}, mean, sd, a, b, gen);
  EXPECT_GE(x.min().item<double>(), a);
  EXPECT_LE(x.max().item<double>(), b);
  auto phi = [](double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); };
  auto Phi = [](double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); };
  const double al = (a - mean) / sd, be = (b - mean) / sd, Z = Phi(be) - Phi(al);
  const double expect_mean = mean + sd * (phi(al) - phi(be)) / Z;
  const double expect_var =
      sd * sd * (1 + (al * phi(al) - be * phi(be)) / Z - std::pow((phi(al) - phi(be)) / Z, 2));
  EXPECT_NEAR(x.mean().item<double>(), expect_mean, 5 * std::sqrt(expect_var / 200000));
  EXPECT_NEAR(x.var().item<double>() / expect_var, 1.0, 0.02);
  // Fraction below the midpoint of the standardized interval (symmetric cut ⇒ 1/2).
  EXPECT_NEAR((x < mean).to(torch::kFloat64).mean().item<double>(), 0.5, 0.01);
}

// ---------------------------------------------------------------------------------------------
// Determinism and argument checks.

TEST(InitDeterminism, SameSeedSameTensorsOtherSeedOrLayerDifferent) {
  for (InitScheme s : {InitScheme::kTimm, InitScheme::kOurs, InitScheme::kMimetic}) {
    InitConfig cfg = InitConfig::for_scheme(s, 2024);
    TensorMap a, b, c, e;
    init_block(a, 0, 32, 4, 128, cfg);
    init_block(b, 0, 32, 4, 128, cfg);
    init_block(a, 1, 32, 4, 128, cfg);
    ASSERT_EQ(a.size(), 24u);
    for (const auto& [key, t] : b) {
      EXPECT_TRUE(torch::equal(a.at(key), t)) << to_string(s) << " " << key;
    }
    InitConfig other = cfg;
    other.seed = 2025;
    init_block(c, 0, 32, 4, 128, other);
    for (const char* key : {"attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight",
                            "mlp.fc2.weight"}) {
      const std::string k0 = std::string("blocks.0.") + key, k1 = std::string("blocks.1.") + key;
      EXPECT_FALSE(torch::equal(a.at(k0), c.at(k0))) << to_string(s) << " seed " << key;
      EXPECT_FALSE(torch::equal(a.at(k0), a.at(k1))) << to_string(s) << " layer " << key;
    }
  }
  EXPECT_NE(layer_seed(0, 0), layer_seed(0, 1));
  EXPECT_NE(layer_seed(0, 0), layer_seed(1, 0));
}

TEST(InitArgs, RejectsBadArguments) {
  TensorMap t;
  InitConfig cfg;
  EXPECT_NE(invalid_argument_message([&] { init_block(t, 0, 10, 4, 40, cfg); }).find("10"),
            std::string::npos);
  EXPECT_THROW(init_block(t, 0, 0, 1, 4, cfg), std::invalid_argument);
  EXPECT_THROW(init_block(t, 0, 8, 0, 4, cfg), std::invalid_argument);
  EXPECT_THROW(init_block(t, 0, 8, 1, 0, cfg), std::invalid_argument);
  EXPECT_THROW(init_block(t, -1, 8, 1, 4, cfg), std::invalid_argument);
  cfg.alpha = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(invalid_argument_message([&] { init_block(t, 0, 8, 1, 4, cfg); }).find("alpha"),
            std::string::npos);
  cfg.alpha = 1;
  cfg.c = std::numeric_limits<double>::infinity();
  EXPECT_THROW(init_block(t, 0, 8, 1, 4, cfg), std::invalid_argument);
  EXPECT_TRUE(t.empty());
}

TEST(InitNames, ParseAndPrint) {
  for (InitScheme s : {InitScheme::kTimm, InitScheme::kOurs, InitScheme::kMimetic}) {
    EXPECT_EQ(parse_init_scheme(to_string(s)), s);
  }
  const std::string msg = invalid_argument_message([] { parse_init_scheme("fixup"); });
  EXPECT_NE(msg.find("fixup"), std::string::npos);
  EXPECT_NE(msg.find("mimetic"), std::string::npos);
  EXPECT_EQ(parse_mlp_init("dks"), MlpInit::kDks);
  EXPECT_EQ(to_string(MlpInit::kTimm), "timm");
  EXPECT_THROW(parse_mlp_init("orthogonal"), std::invalid_argument);
  EXPECT_EQ(default_mlp_init(InitScheme::kOurs), MlpInit::kDks);
  EXPECT_EQ(default_mlp_init(InitScheme::kMimetic), MlpInit::kTimm);
  EXPECT_EQ(default_mlp_init(InitScheme::kTimm), MlpInit::kTimm);
}

// ---------------------------------------------------------------------------------------------
// Bridge.

TEST(Bridge, ToEigenToTorchLayout) {
  torch::Tensor t = torch::arange(6, torch::kFloat32).reshape({2, 3});  // [[0,1,2],[3,4,5]]
  Mat m = to_eigen(t);
  ASSERT_EQ(m.rows(), 2);
  ASSERT_EQ(m.cols(), 3);
  EXPECT_EQ(m(0, 2), 2.0);
  EXPECT_EQ(m(1, 0), 3.0);
  Mat mt = to_eigen(t.t());  // non-contiguous view
  EXPECT_EQ(mt(2, 0), 2.0);
  EXPECT_EQ(mt(0, 1), 3.0);
  Mat col = to_eigen(torch::tensor({1.0, 2.0}));
  EXPECT_EQ(col.cols(), 1);
  EXPECT_EQ(col(1, 0), 2.0);
  torch::Tensor back = to_torch(m);
  EXPECT_EQ(back.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::equal(back, t.to(torch::kFloat64)));
  EXPECT_THROW(to_eigen(torch::zeros({2, 2, 2})), std::invalid_argument);
  EXPECT_THROW(to_eigen(torch::zeros({2}, torch::kLong)), std::invalid_argument);
}

// The transpose convention, pinned entry by entry: qkv.weight[out][in] = W(in, out).
TEST(Bridge, LinearTransposeConvention) {
  const int64_t d = 4, hidden = 6;
  BlockWeights w = BlockWeights::zeros(d, 2, hidden);
  w.Wq(0, 1) = 1.5;  // input feature 0 -> output feature 1 of Q
  w.Wk(2, 3) = 2.5;
  w.Wv(1, 0) = 3.5;
  w.Wo(3, 2) = 4.5;
  w.W1(1, 5) = 5.5;  // d×hidden
  w.W2(5, 1) = 6.5;  // hidden×d
  w.bk(2) = 7.5;
  TensorMap t;
  block_to_timm(w, 3, t);
  auto at = [&](const std::string& k, int64_t r, int64_t c) {
    return t.at("blocks.3." + k)[r][c].item<double>();
  };
  EXPECT_EQ(at("attn.qkv.weight", 1, 0), 1.5);
  EXPECT_EQ(at("attn.qkv.weight", d + 3, 2), 2.5);
  EXPECT_EQ(at("attn.qkv.weight", 2 * d + 0, 1), 3.5);
  EXPECT_EQ(at("attn.proj.weight", 2, 3), 4.5);
  EXPECT_EQ(at("mlp.fc1.weight", 5, 1), 5.5);
  EXPECT_EQ(at("mlp.fc2.weight", 1, 5), 6.5);
  EXPECT_EQ(t.at("blocks.3.attn.qkv.bias")[d + 2].item<double>(), 7.5);
}

TEST_P(InitSizes, BridgeRoundTripIsExact) {
  const auto [d, heads] = GetParam();
  TensorMap t;
  init_block(t, 1, d, heads, 4 * d, InitConfig::for_scheme(InitScheme::kOurs, 4));
  // Make every tensor distinct and nonzero (biases, LN) so a mix-up would show.
  auto gen = at::detail::createCPUGenerator(99);
  for (auto& [k, v] : t) v = v + 0.1 * torch::randn(v.sizes(), gen, torch::kFloat64);
  BlockWeights w = block_from_timm(t, 1, heads, 0.25, 1e-5);
  EXPECT_EQ(w.d, d);
  EXPECT_EQ(w.hidden, 4 * d);
  EXPECT_EQ(w.logit_scale, 0.25);
  EXPECT_EQ(w.ln_eps, 1e-5);
  TensorMap back;
  block_to_timm(w, 1, back);
  ASSERT_EQ(back.size(), t.size());
  for (const auto& [k, v] : t) {
    ASSERT_TRUE(back.count(k)) << k;
    EXPECT_EQ(back.at(k).scalar_type(), torch::kFloat64) << k;
    EXPECT_TRUE(torch::equal(back.at(k), v)) << k << " " << knobs(d, heads);
  }
  BlockWeights w2 = block_from_timm(back, 1, heads, 0.25, 1e-5);
  EXPECT_EQ(w2.Wq, w.Wq);
  EXPECT_EQ(w2.W2, w.W2);
  EXPECT_EQ(w2.bv, w.bv);
}

TEST(Bridge, FromTimmAcceptsFloat32) {
  TensorMap t;
  init_block(t, 0, 8, 2, 16, InitConfig{});
  TensorMap f;
  for (auto& [k, v] : t) f[k] = v.to(torch::kFloat32);
  BlockWeights w = block_from_timm(f, 0, 2);
  EXPECT_EQ(w.Wq(1, 2), double(f.at("blocks.0.attn.qkv.weight")[2][1].item<float>()));
}

// timm's qkv_bias=False / bias=False store no Linear .bias: the block reads as the one with zero
// Linear biases. A norm without its bias (an RMSNorm stores the same keys) is still refused.
TEST(Bridge, FromTimmReadsAnAbsentLinearBiasAsZeros) {
  TensorMap with_biases;
  init_block(with_biases, 0, 8, 2, 32, InitConfig{});
  const auto linear_bias = [](const std::string& key) {
    return key.size() > 5 && key.compare(key.size() - 5, 5, ".bias") == 0 && key.find("norm") == std::string::npos;
  };
  TensorMap zeroed = with_biases, absent;
  for (auto& [key, tensor] : zeroed)
    if (linear_bias(key)) tensor = torch::zeros_like(tensor);
    else absent[key] = tensor;
  ASSERT_EQ(absent.size() + 4, zeroed.size());  // qkv, proj, fc1, fc2
  const BlockWeights a = block_from_timm(absent, 0, 2), z = block_from_timm(zeroed, 0, 2);
  for (const auto& [x, y] : {std::pair{&a.bq, &z.bq}, {&a.bk, &z.bk}, {&a.bv, &z.bv}, {&a.bo, &z.bo}, {&a.b1, &z.b1},
                             {&a.b2, &z.b2}}) {
    EXPECT_EQ(x->size(), y->size());
    EXPECT_TRUE(x->isZero(0.0) && *x == *y);
  }
  EXPECT_EQ(a.Wq, z.Wq);
  EXPECT_EQ(a.W2, z.W2);
  EXPECT_EQ(a.ln1_beta, z.ln1_beta);
  EXPECT_EQ(a.ln2_beta, z.ln2_beta);
  TensorMap no_norm_bias = with_biases;
  no_norm_bias.erase("blocks.0.norm2.bias");
  const std::string m = invalid_argument_message([&] { block_from_timm(no_norm_bias, 0, 2); });
  EXPECT_NE(m.find("missing key blocks.0.norm2.bias"), std::string::npos) << m;
}

TEST(Bridge, FromTimmRejectsBadInput) {
  TensorMap good;
  init_block(good, 0, 8, 2, 32, InitConfig{});
  auto msg = [&](TensorMap t, int64_t heads = 2) {
    return invalid_argument_message([&] { block_from_timm(t, 0, heads); });
  };
  auto contains = [](const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  };
  {  // missing weight (a missing bias is a layer without one: FromTimmReadsAnAbsentBiasAsZeros)
    TensorMap t = good;
    t.erase("blocks.0.attn.proj.weight");
    const std::string m = msg(t);
    EXPECT_TRUE(contains(m, "missing key blocks.0.attn.proj.weight")) << m;
  }
  {  // missing block altogether
    const std::string m = invalid_argument_message([&] { block_from_timm(good, 5, 2); });
    EXPECT_TRUE(contains(m, "blocks.5.norm1.weight")) << m;
  }
  {  // wrong shape
    TensorMap t = good;
    t["blocks.0.attn.qkv.weight"] = torch::zeros({24, 9}, torch::kFloat64);
    const std::string m = msg(t);
    EXPECT_TRUE(contains(m, "blocks.0.attn.qkv.weight")) << m;
    EXPECT_TRUE(contains(m, "[24, 8]")) << m;
    EXPECT_TRUE(contains(m, "[24, 9]")) << m;
  }
  {  // NaN
    TensorMap t = good;
    t["blocks.0.mlp.fc2.weight"] = t["blocks.0.mlp.fc2.weight"].clone();
    t["blocks.0.mlp.fc2.weight"][3][4] = std::numeric_limits<double>::quiet_NaN();
    const std::string m = msg(t);
    EXPECT_TRUE(contains(m, "blocks.0.mlp.fc2.weight contains NaN")) << m;
  }
  {  // inf
    TensorMap t = good;
    t["blocks.0.norm2.bias"] = torch::full({8}, std::numeric_limits<double>::infinity());
    EXPECT_TRUE(contains(msg(t), "blocks.0.norm2.bias contains inf")) << msg(t);
  }
  {  // d not divisible by heads
    const std::string m = msg(good, 3);
    EXPECT_TRUE(contains(m, "heads = 3")) << m;
  }
}

// ---------------------------------------------------------------------------------------------
// torch_block: the vec convention of torch_jacobian and agreement with analysis/block.

// f(X) = X W with X n×d, W d×p: ∂vec(XW)/∂vec(X) = Wᵀ ⊗ I_n in column-major vec (docs/design.md §2).
TEST(TorchJacobian, LinearMapIsKroneckerWtI) {
  const int64_t n = 3, d = 4, p = 5;
  const Mat W = Mat::Random(d, p);
  const Mat X = Mat::Random(n, d);
  const torch::Tensor Wt = to_torch(W);
  Mat J = torch_jacobian([&](const torch::Tensor& x) { return torch::matmul(x, Wt); }, X);
  ASSERT_EQ(J.rows(), n * p);
  ASSERT_EQ(J.cols(), n * d);
  Mat expect = Mat::Zero(n * p, n * d);  // (Wᵀ ⊗ I_n)(i + a n, j + b n) = W(b, a) δ_ij
  for (Index a = 0; a < p; ++a)
    for (Index b = 0; b < d; ++b)
      for (Index i = 0; i < n; ++i) expect(i + a * n, i + b * n) = W(b, a);
  EXPECT_LT((J - expect).cwiseAbs().maxCoeff(), 1e-15);
}

TEST(TorchJacobian, ConstantAndRowMapsAndBadOutput) {
  const Mat X = Mat::Random(2, 3);
  Mat J0 = torch_jacobian([](const torch::Tensor&) { return torch::ones({2, 2}); }, X);
  EXPECT_EQ(J0.rows(), 4);
  EXPECT_EQ(J0.norm(), 0.0);
  // f(X) = row sums (a vector of n): ∂/∂X(j, b) of sum_b X(i, b) is δ_ij.
  Mat J1 = torch_jacobian([](const torch::Tensor& x) { return x.sum(1); }, X);
  ASSERT_EQ(J1.rows(), 2);
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 2; ++j)
      for (Index b = 0; b < 3; ++b) EXPECT_EQ(J1(i, j + b * 2), i == j ? 1.0 : 0.0);
  EXPECT_THROW(torch_jacobian([](const torch::Tensor& x) { return x.unsqueeze(0); }, X),
               std::invalid_argument);
}

// The torch reference forward and analysis/jacobians/block.cpp agree on initialized weights with all
// biases and LayerNorm affine parameters made nonzero (a cross-check of both and the bridge).
TEST_P(InitSizes, TorchForwardMatchesAnalysisForward) {
  const auto [d, heads] = GetParam();
  const int64_t n = 5;
  TensorMap t;
  init_block(t, 0, d, heads, 4 * d, InitConfig::for_scheme(InitScheme::kOurs, 8));
  auto gen = at::detail::createCPUGenerator(17);
  for (auto& [k, v] : t) {
    if (k.find("bias") != std::string::npos || k.find("norm") != std::string::npos)
      v = v + 0.3 * torch::randn(v.sizes(), gen, torch::kFloat64);
  }
  for (double s : {0.0, 1.0}) {
    TorchBlockSpec spec{0, heads, s, 1e-6};
    BlockWeights w = block_from_timm(t, 0, heads, s, 1e-6);
    const Mat X = Mat::Random(n, d);
    const torch::Tensor Xt = to_torch(X);
    for (SkipMode mode : {SkipMode::kNone, SkipMode::kFull}) {
      BlockForward fw = block_forward(w, X, mode);
      const Mat x1 = to_eigen(torch_sab(t, spec, Xt, sab_residual(mode)));
      const Mat x2 = to_eigen(torch_ffn(t, spec, to_torch(fw.X1), ffn_residual(mode)));
      EXPECT_LT((x1 - fw.X1).cwiseAbs().maxCoeff(), 1e-12 * (1 + fw.X1.cwiseAbs().maxCoeff()))
          << knobs(d, heads) << " s=" << s << " skip=" << to_string(mode);
      EXPECT_LT((x2 - fw.X2).cwiseAbs().maxCoeff(), 1e-12 * (1 + fw.X2.cwiseAbs().maxCoeff()))
          << knobs(d, heads) << " s=" << s << " skip=" << to_string(mode);
    }
    const torch::Tensor maps = torch_attention_maps(t, spec, torch_layernorm1(t, spec, Xt));
    AttentionCache ac = attention_forward(w, to_eigen(torch_layernorm1(t, spec, Xt)));
    ASSERT_EQ(maps.size(0), heads);
    for (int64_t h = 0; h < heads; ++h) {
      EXPECT_LT((to_eigen(maps[h]) - ac.A[h]).cwiseAbs().maxCoeff(), 1e-12) << "head " << h;
    }
  }
}

}  // namespace
}  // namespace jacond::models
