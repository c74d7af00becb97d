// End-to-end tests of the network-level commands: `jacond verify eq6`, `jacond verify eq89` and
// `jacond spectrum` (exit codes, files written, CSV columns, one-line errors). Expected values
// come from mathematics, not from the code under test: identities that hold for any weights
// (σ_max(J) ≥ σ_max of each block column; the direct path of the residual gradient has the norm
// of the unit cotangent; a skipless product through LayerNorm has rank ≤ n(d−1); the SLQ
// weights sum to 1), and for `spectrum --method dense` the library's own dense closed form
// (analysis/jacobians/jacobians.h) on the same safetensors weights and tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "analysis/jacobians/jacobians.h"
#include "support/cli_harness.h"
#include "models/track/bridge.h"
#include "models/io/safetensors.h"
#include "support/random_block.h"

namespace fs = std::filesystem;
using namespace jacond::test::cli;

namespace {

using json = nlohmann::json;

double num(const std::string& s) { return to_double(s); }

std::vector<std::string> with_args(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

class CliNetworkTest : public CliFixture {
 protected:
  // The harness's one-line-error check, plus the needle with its exact case.
  void expect_one_line_error(const std::vector<std::string>& args, const std::string& needle) {
    const RunResult r = CliFixture::expect_one_line_error(args, {needle});
    EXPECT_NE(r.err.find(needle), std::string::npos) << "error does not mention '" << needle << "'\n" << r.describe();
  }
};

TEST_F(CliNetworkTest, VerifyEq6WritesCasesAndMatrices) {
  const std::string out = path("eq6");
  const RunResult r = run({"verify", "eq6", "--out", out});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  EXPECT_NE(r.out.find("PASS eq6"), std::string::npos) << r.describe();
  EXPECT_TRUE(fs::exists(out + "/verify.json"));
  const Csv cases = read_csv(out + "/eq6_cases.csv");
  for (const char* col : {"init", "skip", "m", "regime", "kappa_J", "kappa_eff_J", "max_kappa_blocks", "eq6", "eq6_eff", "rho", "tau", "premise"})
    EXPECT_TRUE(cases.has_column(col)) << "eq6_cases.csv lacks column " << col;
  EXPECT_EQ(cases.rows.size(), 18u);  // 3 inits × 2 skip modes × 3 regimes
  for (const auto& row : cases.rows) {
    EXPECT_GE(num(row.at("tau")), 1.0);  // τ = max σ_max / min σ_max
    EXPECT_GE(num(row.at("rho")), 0.0);
    // Eq. 6 "holds" only where its bound is finite: κ(J) ≤ ∞ bounds nothing (vacuous).
    if (row.at("eq6") == "holds") {
      EXPECT_TRUE(std::isfinite(num(row.at("max_kappa_blocks"))));
      EXPECT_LE(num(row.at("kappa_J")), num(row.at("max_kappa_blocks")));
    }
    if (!std::isfinite(num(row.at("max_kappa_blocks")))) {
      EXPECT_EQ(row.at("eq6").rfind("vacuous", 0), 0u) << row.at("eq6");
    }
  }
  expect_no_vacuous_pass(r.out);  // the A.2.4 premise never holds here: N/A, not a PASS over 0/0
  // σ_max(J) ≥ σ_max of each of its block columns (J contains them): from the matrices CSV.
  const Csv mats = read_csv(out + "/eq6_matrices.csv");
  ASSERT_FALSE(mats.rows.empty());
  std::map<std::string, double> smax_J;
  for (const auto& row : mats.rows)
    if (row.at("matrix") == "J") smax_J[row.at("init") + row.at("skip") + row.at("m")] = num(row.at("sigma_max"));
  int blocks = 0;
  for (const auto& row : mats.rows) {
    EXPECT_GE(num(row.at("kappa_eff")), 1.0);
    if (row.at("matrix") == "J") continue;
    ++blocks;
    EXPECT_LE(num(row.at("sigma_max")), smax_J.at(row.at("init") + row.at("skip") + row.at("m")) * (1 + 1e-12));
  }
  EXPECT_EQ(blocks, 18 * 4);  // J_0, Jhat_0, J_1, Jhat_1 per case
}

TEST_F(CliNetworkTest, VerifyEq89WritesProductsGradientsAndPaths) {
  const std::string out = path("eq89");
  const RunResult r = run({"verify", "eq89", "--out", out});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const Csv prod = read_csv(out + "/eq89_products.csv");
  for (const char* col : {"init", "equation", "depth", "kappa", "kappa_eff", "kappa_ln1c", "rank", "status", "kappa_J0", "kappa_J0_lo"})
    EXPECT_TRUE(prod.has_column(col)) << "eq89_products.csv lacks column " << col;
  ASSERT_EQ(prod.rows.size(), 3u * 2u * 12u);
  for (const auto& row : prod.rows) {
    const long n = std::stol(row.at("n")), d = std::stol(row.at("d"));
    if (row.at("equation") == "eq9") {
      // Without skips the first factor goes through LayerNorm, which kills 1 per token.
      EXPECT_LE(std::stol(row.at("rank")), n * (d - 1)) << row.at("init") << " depth " << row.at("depth");
      EXPECT_EQ(row.at("status"), "singular");
    }
    // κ(∂F/∂θ⁽⁰⁾)'s lower bound: κ itself where finite, σ_max / noise floor (finite, > 1) where singular.
    const double j0 = num(row.at("kappa_J0")), j0_lo = num(row.at("kappa_J0_lo"));
    if (std::isfinite(j0)) {
      EXPECT_EQ(j0_lo, j0);
    } else {
      EXPECT_TRUE(std::isfinite(j0_lo) && j0_lo > 1) << row.at("kappa_J0_lo");
    }
  }
  const Csv paths = read_csv(out + "/eq89_paths.csv");
  ASSERT_FALSE(paths.rows.empty());
  int direct = 0;
  for (const auto& row : paths.rows)
    if (row.at("path_length") == "0") {
      ++direct;
      EXPECT_NEAR(num(row.at("norm")), 1.0, 1e-12);  // the direct path carries g, ‖g‖ = 1
    }
  EXPECT_EQ(direct, 3) << "one direct path per init (timm, mimetic, ours)";
  const Csv grads = read_csv(out + "/eq89_gradients.csv");
  int outputs = 0;
  for (const auto& row : grads.rows)
    if (row.at("layer") == "12") {
      ++outputs;
      EXPECT_NEAR(num(row.at("grad_x_norm")), 1.0, 1e-12);  // the cotangent at the output is g itself
    }
  EXPECT_EQ(outputs, 6) << "3 inits x (residual, plain)";
  const RunResult plot = run({"plot", out, "--format", "png"});
  ASSERT_EQ(plot.code, 0) << plot.describe();
  EXPECT_TRUE(is_figure(out + "/figures/depth.png"));
}

TEST_F(CliNetworkTest, SpectrumDenseMatchesTheLibraryOnFileWeights_n6_d8) {
  const jacond::Index n = 6, d = 8, heads = 2;
  const jacond::BlockWeights w = jacond::test::random_block(d, heads, 4 * d, 21);
  const jacond::Mat X = jacond::test::random_tokens(n, d, 5);
  jacond::models::TensorMap tw, tt;
  jacond::models::block_to_timm(w, 0, tw);
  jacond::models::save_safetensors(path("w.safetensors"), tw);
  tt["tokens"] = jacond::models::to_torch(X);
  jacond::models::save_safetensors(path("t.safetensors"), tt);

  const std::string out = path("spec");
  const RunResult r = run({"spectrum", "--matrix", "K_sa", "--weights", path("w.safetensors"), "--tokens", path("t.safetensors"),
                     "--heads", "2", "--method", "dense", "--out", out});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const Csv csv = read_csv(out + "/spectrum.csv");
  ASSERT_EQ(csv.header, (std::vector<std::string>{"index", "sigma", "sigma_over_max"}));
  ASSERT_EQ(csv.rows.size(), static_cast<size_t>(n * d));
  // Library: dense closed form of K_sa at LN1(X) (analysis/jacobians/jacobians.h).
  const jacond::LayerNormCache ln = jacond::layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  jacond::Vec sv = jacond::singular_values(jacond::attention_jacobian(w, jacond::attention_forward(w, ln.y)));
  std::sort(sv.data(), sv.data() + sv.size(), std::greater<double>());
  for (size_t i = 0; i < csv.rows.size(); ++i) {
    EXPECT_NEAR(num(csv.rows[i].at("sigma")), sv(i), 1e-10 * sv(0)) << "sigma " << i;
    if (i > 0) {
      EXPECT_LE(num(csv.rows[i].at("sigma")), num(csv.rows[i - 1].at("sigma"))) << "descending at " << i;
    }
  }
  EXPECT_TRUE(fs::exists(out + "/run.json"));
}

TEST_F(CliNetworkTest, SpectrumSlqWritesDensityAndNodes_Ksab_n8_d16) {
  const std::string out = path("slq");
  const RunResult r = run({"spectrum", "--matrix", "K_sab", "--skip", "full", "--init", "ours", "--n", "8", "--d", "16", "--heads",
                     "2", "--method", "slq", "--probes", "4", "--steps", "30", "--out", out});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const Csv rho = read_csv(out + "/density.csv");
  ASSERT_EQ(rho.header, (std::vector<std::string>{"log10_sigma", "sigma", "density"}));
  double integral = 0;
  for (size_t i = 1; i < rho.rows.size(); ++i)
    integral += 0.5 * (num(rho.rows[i].at("density")) + num(rho.rows[i - 1].at("density"))) *
                (num(rho.rows[i].at("log10_sigma")) - num(rho.rows[i - 1].at("log10_sigma")));
  const json result = json::parse(slurp(out + "/run.json")).at("result");
  EXPECT_NEAR(integral, 1.0 - result.at("mass_below_floor").get<double>(), 0.01);  // floor nodes are left out
  const Csv nodes = read_csv(out + "/nodes.csv");
  double total = 0;
  for (const auto& row : nodes.rows) total += num(row.at("weight"));
  EXPECT_NEAR(total, 1.0, 1e-10);
  const RunResult plot = run({"plot", out, "--format", "png"});
  ASSERT_EQ(plot.code, 0) << plot.describe();
  EXPECT_TRUE(is_figure(out + "/figures/spectrum_density.png"));
}

// SLQ against the dense spectrum of the same matrix: with steps = N each probe's Krylov space is
// exhausted, so every node above the floor is a singular value of K and σ_max itself is one
// (E_sa: 128 × 128 with a 16-dimensional null space, which a run past exhaustion once turned
// into nodes 2.7 × above σ_max). Rerun into the same --out by the dense method, the SLQ tables go.
TEST_F(CliNetworkTest, SpectrumSlqAtFullLengthFindsTheDenseSingularValues_Esa_n8_d16) {
  const std::string out = path("esa");
  const std::vector<std::string> block{"--matrix", "E_sa", "--init", "timm", "--n", "8", "--d", "16", "--heads", "2", "--out", out};
  RunResult r = run(with_args({"spectrum", "--method", "dense"}, block));
  ASSERT_EQ(r.code, 0) << r.describe();
  std::vector<double> dense;
  for (const auto& row : read_csv(out + "/spectrum.csv").rows) dense.push_back(num(row.at("sigma")));
  ASSERT_EQ(dense.size(), 128u);
  r = run(with_args({"spectrum", "--method", "slq", "--steps", "128", "--probes", "3"}, block));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_FALSE(fs::exists(out + "/spectrum.csv")) << "the dense run's table stayed beside the SLQ run's";
  const json result = json::parse(slurp(out + "/run.json")).at("result");
  EXPECT_NEAR(result.at("sigma_max_ritz").get<double>(), dense.front(), 1e-10 * dense.front());
  const double floor = result.at("sigma_floor").get<double>();
  for (const auto& row : read_csv(out + "/nodes.csv").rows) {
    if (row.at("below_floor") == "1") continue;
    const double sigma = num(row.at("sigma"));
    double nearest = std::numeric_limits<double>::infinity();
    for (double s : dense) nearest = std::min(nearest, std::abs(s - sigma));
    EXPECT_LE(nearest, 1e-6 * dense.front() + 1e-6 * sigma) << "node " << sigma << " is no singular value (floor " << floor << ")";
  }
  // The null space (rank 112 of 128, dense) is found: its mass is under the floor, about 16/128 per probe.
  EXPECT_GT(result.at("mass_below_floor").get<double>(), 0.03);
  r = run(with_args({"spectrum", "--method", "dense"}, block));
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_FALSE(fs::exists(out + "/density.csv"));
  EXPECT_FALSE(fs::exists(out + "/nodes.csv"));
  // A width that is no width: one line, nothing written.
  for (const char* width : {"inf", "1e200", "0"})
    EXPECT_EQ(CliFixture::expect_one_line_error({"spectrum", "--matrix", "E_sa", "--n", "8", "--d", "16", "--method", "slq", "--width", width,
                                     "--out", path("w")}, {"--width"}, path("w")).code, 2) << width;
}

TEST_F(CliNetworkTest, SpectrumOfParameterJacobianIsWideAndDense_n4_d8) {
  const std::string out = path("jl");
  const RunResult r = run({"spectrum", "--matrix", "J_l", "--n", "4", "--d", "8", "--heads", "2", "--skip", "full", "--out", out});
  ASSERT_TRUE(r.exited && r.code == 0) << r.describe();
  const Csv csv = read_csv(out + "/spectrum.csv");
  EXPECT_EQ(csv.rows.size(), 32u);  // min(nd, 4d² + 4d) = 32
  const RunResult r2 = run({"spectrum", "--matrix", "Jhat_l", "--n", "4", "--d", "8", "--heads", "2", "--method", "slq", "--probes",
                      "2", "--steps", "10", "--out", path("jhat")});
  ASSERT_TRUE(r2.exited && r2.code == 0) << r2.describe();
  EXPECT_TRUE(fs::exists(path("jhat") + "/density.csv"));
}

TEST_F(CliNetworkTest, BadFlagsGiveOneLineErrors) {
  expect_one_line_error({"spectrum", "--matrix", "K_xx"}, "K_xx");
  expect_one_line_error({"spectrum", "--n", "4"}, "--matrix");
  expect_one_line_error({"spectrum", "--matrix", "K_sa", "--method", "fancy"}, "fancy");
  expect_one_line_error({"spectrum", "--matrix", "K_sa", "--width", "0"}, "--width");
  expect_one_line_error({"spectrum", "--matrix", "K_sa", "--dense-seconds", "-1"}, "--dense-seconds");
  expect_one_line_error({"spectrum", "--matrix", "K_sa", "--skip", "sometimes"}, "sometimes");
  expect_one_line_error({"spectrum", "--matrix", "K_sa", "--bogus"}, "bogus");
  expect_one_line_error({"verify", "eq7"}, "eq7");
}

}  // namespace
