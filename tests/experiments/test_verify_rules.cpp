// The rules of `jacond verify` that decide a verdict (experiments/claims/verify_rules.h), on
// hand-built inputs: the numbers that must fail them fail them.
//  * Prop. 2: K_sa (matrix-free JVP) against B_sa + E_sa (assembled). A K built from B alone, or
//    with E's sign flipped, passes the Weyl bracket (which only sees σ's within ‖E‖ of B's) and
//    fails the entry-by-entry comparison.
//  * App. A.2.4 (Eq. 6): under the premise ρ < s_min², rank(J) ≠ Σ_k rank(J_k) is a failure, not a
//    case left out of the tally.
//  * Prop. 1 / Fig. 5: the paper's one draw per case must be typical of jacond's draws.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "analysis/spectral/condition.h"
#include "experiments/claims/verify_rules.h"
#include "support/paper_inits.h"
#include "support/random_block.h"

namespace jacond {
namespace {

namespace rules = cli::rules;

struct Parts {
  Mat K, B, E;
};

// K_sa, B_sa, E_sa of bare attention at LN1(X), as verify prop2's split_of builds them.
Parts parts_of(const BlockWeights& w, const Mat& X) {
  const LayerNormCache ln = layernorm_forward(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  const AttentionCache c = attention_forward(w, ln.y);
  return {operator_to_dense(AttentionJacobianOp(w, c, AttentionPart::kFull)),
          attention_jacobian(w, c, AttentionPart::kB), attention_jacobian(w, c, AttentionPart::kE)};
}

// verify prop2's bracket on κ(K') from σ(B) and ‖E‖ (premise ‖E‖ < σ_min(B)).
bool inside_weyl_bracket(const Mat& K, const Mat& B, double e_norm) {
  const Vec sb = singular_values(B), sk = singular_values(K);
  const double bmax = sb.maxCoeff(), bmin = sb.minCoeff(), kappa = sk.maxCoeff() / sk.minCoeff();
  return e_norm < bmin && kappa <= (bmax + e_norm) / (bmin - e_norm) * (1 + 1e-9) &&
         kappa >= (bmax - e_norm) / (bmin + e_norm) * (1 - 1e-9);
}

// At verify prop2's third setting, ours (α, β, c) = (0.5, 3, 3), n = 16, d = 32, one head, where the
// premise holds: the right K agrees with B + E to rounding; K = B (the E part missing) and K = B − E
// (E's sign flipped) lie inside the Weyl bracket all the same, and the comparison rejects both.
TEST(VerifyRulesProp2, AssemblyCheckRejectsAKBuiltWithoutEOrWithItsSignFlipped) {
  SCOPED_TRACE("ours_like_block(32, 1 head, 128, seed 7, alpha 0.5, beta 3, c 3), tokens seed 8");
  const BlockWeights w = test::ours_like_block(32, 1, 128, 7, 0.5, 3.0, 3.0);
  const Parts p = parts_of(w, test::random_tokens(16, 32, 8));
  const double e_norm = singular_values(p.E).maxCoeff();
  ASSERT_GT(e_norm, 0.0);
  ASSERT_LT(e_norm, singular_values(p.B).minCoeff()) << "the premise ||E|| < sigma_min(B) of this setting";

  EXPECT_LT(rules::assembly_residual(p.K, p.B, p.E), rules::kAssemblyTolerance);
  EXPECT_TRUE(rules::assembly_agrees(p.K, p.B, p.E));
  EXPECT_TRUE(inside_weyl_bracket(p.K, p.B, e_norm));

  const Mat b_only = p.B, sign_flipped = p.B - p.E;
  EXPECT_TRUE(inside_weyl_bracket(b_only, p.B, e_norm)) << "the bracket cannot tell B alone from K";
  EXPECT_TRUE(inside_weyl_bracket(sign_flipped, p.B, e_norm)) << "nor B - E";
  EXPECT_FALSE(rules::assembly_agrees(b_only, p.B, p.E)) << rules::assembly_residual(b_only, p.B, p.E);
  // E is small here (‖E‖_F ≈ 1.3e-4 ‖K‖_F), yet 1e8 times the tolerance.
  EXPECT_GT(rules::assembly_residual(b_only, p.B, p.E), 1e6 * rules::kAssemblyTolerance);
  EXPECT_FALSE(rules::assembly_agrees(sign_flipped, p.B, p.E)) << rules::assembly_residual(sign_flipped, p.B, p.E);
}

// Where E is large (random weights, no premise) the comparison holds to rounding too, and a K
// missing E is off by far more than the tolerance.
TEST(VerifyRulesProp2, AssemblyCheckHoldsToRoundingWithoutThePremise) {
  const BlockWeights w = test::random_block(16, 2, 32, 11);
  const Parts p = parts_of(w, test::random_tokens(8, 16, 12));
  EXPECT_LT(rules::assembly_residual(p.K, p.B, p.E), rules::kAssemblyTolerance);
  EXPECT_GT(rules::assembly_residual(p.B, p.B, p.E), 1e6 * rules::kAssemblyTolerance);
}

// The premise ρ < s_min² makes M̃ᵀM̃ positive definite: J must have rank Σ_k rank(J_k). A case with
// the premise and rank(J) = Σ_k rank(J_k) − 1 is checked and fails (the old tally dropped it, and
// a check of no case is N/A, never FAIL).
TEST(VerifyRulesEq6, PremiseWithARankMismatchIsCheckedAndFails) {
  const Index rows = 1152, total_rank = 500;
  rules::A24Tally tally;
  const rules::A24Outcome bad = rules::a24_outcome(true, total_rank - 1, total_rank, rows, 3.0, 4.0, 5.0);
  EXPECT_TRUE(bad.applies);
  EXPECT_TRUE(bad.rank_mismatch);
  EXPECT_FALSE(bad.holds);
  tally.add(bad);
  EXPECT_EQ(tally.checked, 1);
  EXPECT_EQ(tally.ok, 0);
  EXPECT_EQ(tally.rank_mismatches, 1);

  // More columns than rows cannot have full column rank either.
  EXPECT_FALSE(rules::a24_outcome(true, rows, rows + 1, rows, 3.0, 4.0, 5.0).holds);

  // The premise, the ranks agreeing and κ within both bounds: holds.
  const rules::A24Outcome good = rules::a24_outcome(true, total_rank, total_rank, rows, 3.0, 4.0, 5.0);
  EXPECT_TRUE(good.applies && good.holds && !good.rank_mismatch);
  tally.add(good);
  EXPECT_EQ(tally.checked, 2);
  EXPECT_EQ(tally.ok, 1);

  // κ above the tight bound, or the tight bound above the paper's: fails.
  EXPECT_FALSE(rules::a24_outcome(true, total_rank, total_rank, rows, 4.1, 4.0, 5.0).holds);
  EXPECT_FALSE(rules::a24_outcome(true, total_rank, total_rank, rows, 3.0, 5.1, 5.0).holds);

  // Without the premise the theorem says nothing: not checked, whatever the ranks.
  const rules::A24Outcome none = rules::a24_outcome(false, total_rank - 1, total_rank, rows, 1e9, INFINITY, INFINITY);
  EXPECT_FALSE(none.applies);
  tally.add(none);
  EXPECT_EQ(tally.checked, 2);
}

std::vector<double> spread(double lo, double hi, int count) {  // count values, geometric from lo to hi
  std::vector<double> v;
  for (int k = 0; k < count; ++k) v.push_back(lo * std::pow(hi / lo, static_cast<double>(k) / (count - 1)));
  return v;
}

// Fig. 5's diffuse κ ≈ 730.1 is one draw: it agrees where it lies inside the 5–95 % range. A
// distribution with median 200 (within the old factor 10 of 730.1, which passed it) whose 95 %
// quantile is below 730.1 fails, as does one entirely above it.
TEST(VerifyRulesProp1, DiffuseCaseAsksThatFig5sDrawLieInsideThe5To95Range) {
  const std::vector<double> measured = spread(173.0, 5600.0, 401);  // like jacond's N(0, 1) draws
  EXPECT_TRUE(rules::diffuse_agrees(measured));
  const std::vector<double> low = spread(55.0, 727.0, 401);  // median ≈ 200
  EXPECT_FALSE(rules::diffuse_agrees(low));
  EXPECT_FALSE(rules::diffuse_agrees(spread(740.0, 20000.0, 401)));
  EXPECT_FALSE(rules::diffuse_agrees({}));
  EXPECT_NEAR(rules::quantile(measured, 0.05), 173.0 * std::pow(5600.0 / 173.0, 20.0 / 400), 1e-9);
}

// Fig. 5's peak κ ≈ 1.1: median ≤ 1.15 (the old check passed anything below 1.5) and the 5–95 %
// range meeting [1.05, 1.15], the values that print as 1.1.
TEST(VerifyRulesProp1, PeakCaseAsksForAMedianAtMost1p15AndARangeMeetingFig5sValue) {
  const std::vector<double> measured = spread(1.073, 1.09, 401);
  EXPECT_TRUE(rules::peak_agrees(measured, 1.08));
  EXPECT_FALSE(rules::peak_agrees(spread(1.2, 1.45, 401), 1.3)) << "median 1.3 < 1.5 passed the old check";
  EXPECT_FALSE(rules::peak_agrees(spread(1.001, 1.01, 401), 1.005)) << "too well conditioned for kappa ~ 1.1";
  EXPECT_FALSE(rules::peak_agrees(spread(1.0, 1.3, 401), 1.16)) << "median above 1.15";
}

}  // namespace
}  // namespace jacond
