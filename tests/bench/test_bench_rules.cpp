// The rules of `jacond bench` that decide what a number means, on hand-built inputs (no GPU, no
// Python, no timing): which timed steps of `bench train` time what (bench_train_timing.h), when
// `bench dense` takes a speed ratio (bench_dense.h), and which brackets fail `bench lanczos`
// (bench_lanczos_checks.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/bench/bench_dense.h"
#include "experiments/bench/bench_lanczos_checks.h"
#include "experiments/bench/bench_train_timing.h"

namespace {

using jacond::Status;
using jacond::cli::TimedRole;
using jacond::cli::timed_role;
using jacond::cli::timing_window;

// SOAP refreshes its eigenbases after step t when t % F == 0, t the loop's step index s from 0,
// warm-up included (models/optim/soap.cpp: step s = 0 is the statistics-only one, then t = s).
bool refreshes(int64_t s, int64_t frequency) { return s >= 1 && s % frequency == 0; }

struct Share {
  int64_t steps = 0, refreshes = 0;
};

// The refresh share of the step-timed and optimizer-timed steps of one GPU run, each window's
// checked on the way: whole, one role, one refresh.
std::map<TimedRole, Share> gpu_shares(int64_t warmup, int64_t steps, int64_t window, int64_t frequency) {
  std::map<TimedRole, Share> share;
  std::map<int64_t, Share> per_window;
  std::map<int64_t, TimedRole> role_of;
  for (int64_t k = -warmup; k < steps; ++k) {
    const TimedRole role = timed_role(true, k, steps, window);
    if (k < 0 || k >= steps / window * window) {
      EXPECT_EQ(role, TimedRole::kNone) << "k " << k << ": warm-up or a trailing partial window";
      continue;
    }
    EXPECT_NE(role, TimedRole::kNone) << "k " << k;
    EXPECT_NE(role, TimedRole::kBoth) << "k " << k << ": a GPU step times one thing";
    const bool refresh = refreshes(k + warmup, frequency);
    share[role].steps += 1, share[role].refreshes += refresh;
    per_window[k / window].steps += 1, per_window[k / window].refreshes += refresh;
    if (role_of.count(k / window)) {
      EXPECT_EQ(role_of[k / window], role) << "k " << k << ": one role per window";
    }
    role_of[k / window] = role;
  }
  if (window == frequency)
    for (const auto& [w, s] : per_window) {
      EXPECT_EQ(s.steps, window) << "window " << w;
      EXPECT_EQ(s.refreshes, 1) << "window " << w;
      EXPECT_EQ(role_of[w], w % 2 == 0 ? TimedRole::kStep : TimedRole::kOptimizer) << "window " << w;
    }
  return share;
}

// bench train on a GPU: SOAP's step and optimizer means each hold one refresh per
// precondition_frequency steps, whatever the warm-up (3 and 5 are the default and
// scripts/gpu_measure.sh's), and a trailing partial window is not counted. Step-by-step
// alternation (the old rule, a window of 1) put every refresh on the optimizer's side when the
// warm-up is odd: the H200 run's SOAP optimizer_step_s 0.028 s > step_s 0.019 s.
TEST(BenchTrainTiming, EachSoapMeanHoldsRefreshesAtTheirTrueRate) {
  const int64_t frequency = 10, window = timing_window("soap", frequency);
  EXPECT_EQ(window, frequency);
  EXPECT_EQ(timing_window("adamw", frequency), 1);
  for (const int64_t warmup : {3, 5})
    for (const int64_t steps : {20, 25, 50, 55}) {
      SCOPED_TRACE("warmup " + std::to_string(warmup) + ", steps " + std::to_string(steps));
      auto share = gpu_shares(warmup, steps, window, frequency);
      const Share &step = share[TimedRole::kStep], &opt = share[TimedRole::kOptimizer];
      EXPECT_EQ(step.steps + opt.steps, steps / window * window);
      ASSERT_GT(step.steps, 0);
      ASSERT_GT(opt.steps, 0);
      EXPECT_EQ(step.refreshes * window, step.steps);
      EXPECT_EQ(opt.refreshes * window, opt.steps);
      // The defect this replaced: windows of one step put every refresh on the optimizer's side.
      auto old = gpu_shares(warmup, steps, 1, frequency);
      EXPECT_EQ(old[TimedRole::kStep].refreshes, 0);
      EXPECT_GT(old[TimedRole::kOptimizer].refreshes, 0);
    }
  // The CPU: every timed step gives both, the warm-up nothing.
  for (int64_t k = -3; k < 25; ++k)
    EXPECT_EQ(timed_role(false, k, 25, window), k < 0 ? TimedRole::kNone : TimedRole::kBoth) << k;
}

namespace bd = jacond::cli::bench_dense;

bd::RouteResult route(const std::string& name, Status status, double total_s) {
  bd::RouteResult r;
  r.route = name;
  r.ran = true;
  r.status = status;
  r.total_s = total_s;
  return r;
}

// bench dense: a speed ratio only between routes that both gave κ (exact, certified, singular);
// a not-converged route (the mixed route whose refinement failed at N 3200: "cpu/route 3.3x") and
// a route that did not run have none, printed n/a and left empty in the CSV.
TEST(BenchDenseRatios, OnlyRoutesThatGaveKappaHaveASpeedRatio) {
  const bd::RouteResult exact = route("jacond-exact-kappa", Status::kExact, 3.0);
  EXPECT_DOUBLE_EQ(bd::speed_ratio(exact, route("jacond-mixed-kappa", Status::kExact, 1.5)), 2.0);
  EXPECT_DOUBLE_EQ(bd::speed_ratio(exact, route("jacond-mixed-kappa", Status::kCertified, 1.5)), 2.0);
  EXPECT_DOUBLE_EQ(bd::speed_ratio(exact, route("torch", Status::kSingular, 1.5)), 2.0);
  const bd::RouteResult failed = route("jacond-mixed-kappa", Status::kNotConverged, 1.0);
  EXPECT_FALSE(bd::gave_kappa(failed));
  EXPECT_TRUE(std::isnan(bd::speed_ratio(exact, failed)));
  EXPECT_TRUE(std::isnan(bd::speed_ratio(failed, exact)));
  EXPECT_TRUE(std::isnan(bd::speed_ratio(exact, bd::RouteResult{})));  // --skip-full: not run
}

// The main table's agree column: PASS only for a comparison made and passed; "no kappa" where a
// route gave none (the run still passes: a documented outcome); n/a where nothing was compared.
TEST(BenchDenseRatios, SizeVerdictNeverSaysPassForAComparisonNotMade) {
  bd::SizeResult s;
  EXPECT_EQ(s.verdict(), "n/a");  // --skip-python --skip-full
  s.exact_vs_full.checked = true;
  s.exact_vs_full.verdict = "PASS";
  EXPECT_EQ(s.verdict(), "PASS");
  s.exact_vs_full.verdict = bd::kNoKappa;
  EXPECT_EQ(s.verdict(), "no kappa");
  EXPECT_TRUE(s.pass());
  bd::VersusExact failed;
  failed.agreement.checked = true;
  failed.agreement.pass = false;
  failed.agreement.verdict = "FAIL";
  s.versus_exact.push_back(failed);
  EXPECT_EQ(s.verdict(), "FAIL");
}

namespace bl = jacond::cli::bench_lanczos;

bl::Row row_with_dense(double dense_kappa) {
  bl::Row r;
  r.size = "n8d16h2", r.init = "ours", r.matrix = "K_sa";
  r.dense_checked = true;
  r.dense_kappa = dense_kappa;
  r.dense_inside = true;  // jacond's own bracket holds it
  r.host.lz.report.status = Status::kBracket;
  r.host.lz.report.kappa_lo = 0.99 * dense_kappa;
  r.host.lz.report.kappa_hi = 1.01 * dense_kappa;
  return r;
}

bl::PeerResult peer(const std::string& status, double kappa_lo, double kappa_hi, double dense_kappa) {
  bl::PeerResult p;
  p.solver = "arpack";
  p.status = status;
  p.kappa_lo = kappa_lo;
  p.kappa_hi = kappa_hi;
  p.dense_checked = true;  // as run_peer sets it
  p.dense_inside = kappa_lo <= dense_kappa * (1 + 1e-9) && (kappa_hi == 0 || dense_kappa <= kappa_hi * (1 + 1e-9));
  return p;
}

// bench lanczos: a SciPy peer that did not converge still gives a rigorous κ_lo (Courant–Fischer):
// one above the dense κ, or above jacond's κ_hi, fails the run as a converged peer's disjoint
// bracket does. Before, an unconverged peer was not checked at all.
TEST(BenchLanczosChecks, AnUnconvergedPeersLowerBoundMustHold) {
  bl::Row r = row_with_dense(10);
  r.peers = {peer("not-converged", 20, 0, 10)};
  EXPECT_THROW(bl::check_brackets({r}), std::runtime_error);
  r.host.lz.report.status = Status::kNotConverged;  // jacond's κ_hi not in play: the dense κ alone
  EXPECT_THROW(bl::check_brackets({r}), std::runtime_error);
  r.dense_checked = false, r.peers[0].dense_checked = false;  // no dense κ: jacond's κ_hi alone
  r.host.lz.report.status = Status::kBracket;
  EXPECT_THROW(bl::check_brackets({r}), std::runtime_error);
  // A κ_lo under both, with a κ_hi under the dense κ (not converged: not held to anything), passes.
  bl::Row ok = row_with_dense(10);
  ok.peers = {peer("not-converged", 5, 8, 10)};
  EXPECT_NO_THROW(bl::check_brackets({ok}));
  // A converged peer's bracket is held as before.
  ok.peers = {peer("bracket", 5, 8, 10)};
  EXPECT_THROW(bl::check_brackets({ok}), std::runtime_error);
  ok.peers = {peer("bracket", 9.95, 10.05, 10)};
  EXPECT_NO_THROW(bl::check_brackets({ok}));
}

}  // namespace
