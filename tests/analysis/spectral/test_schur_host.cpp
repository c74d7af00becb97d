// The Schur route on the host through block_reports (analysis/report/block_report.cpp,
// host_schur_plan and host_schur_report): a dense κ whose fp64 matrix exceeds what the host may hold takes the block
// LU of analysis/spectral/schur_lu.h on the closed-form kernels' products (HostTokenMap), in the
// fewest pieces that fit, with the full LU's numbers; one for which nothing fits is refused naming
// the sizes. No LibTorch here: the
// maps are analysis/operators/host_token_map.h over operators.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/host_token_map.h"
#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/schur_lu.h"
#include "analysis/core/threads.h"
#include "analysis/spectral/dense_cost.h"
#include "support/random_block.h"

namespace jacond {
namespace {

// HostTokenMap's columns are the closed-form Jacobian's (attention_jacobian, sab_jacobian: an
// independent assembly) to round-off, a panel at a time or whole; apply_columns is K times the
// columns; a panel past the matrix is refused.
TEST(HostTokenMap, ColumnsAreTheClosedFormJacobiansN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 11);
  const BlockForward f = block_forward(w, test::random_tokens(6, 8, 12), SkipMode::kFull);
  const Index N = 48;
  const Mat Ksa = attention_jacobian(w, f.attn), Ksab = sab_jacobian(w, f);
  const AttentionJacobianOp sa(w, f.attn);
  const SabJacobianOp sab(w, f);
  const HostTokenMap<AttentionJacobianOp> sa_map(sa);
  const HostTokenMap<SabJacobianOp> sab_map(sab);
  EXPECT_EQ(sa_map.assembles_into(), "cpu");
  Mat whole(N, N), panel(N, 7);
  ASSERT_TRUE(sa_map.assemble(whole.data()));
  EXPECT_LT((whole - Ksa).cwiseAbs().maxCoeff(), 1e-13 * Ksa.cwiseAbs().maxCoeff());
  ASSERT_TRUE(sab_map.assemble_columns(30, 7, panel.data()));
  EXPECT_LT((panel - Ksab.middleCols(30, 7)).cwiseAbs().maxCoeff(), 1e-13 * Ksab.cwiseAbs().maxCoeff());
  const Mat in = test::random_tokens(N, 3, 13);
  Mat out(N, 3);
  ASSERT_TRUE(sab_map.apply_columns(in.data(), 3, out.data()));
  EXPECT_LT((out - Ksab * in).cwiseAbs().maxCoeff(), 1e-13 * (Ksab * in).cwiseAbs().maxCoeff());
  EXPECT_THROW(sa_map.assemble_columns(45, 4, panel.data()), std::invalid_argument);
}

// AttentionJacobianColumns is attention_jacobian a panel at a time, bit for bit, for every part
// and at a logit scale far from 1/sqrt(d_h) (the E terms' differences); a HostTokenMap given it as
// its column source assembles those columns; a panel past the matrix is refused.
// N = 48 and, with an odd order and an odd first column (N = 35, n 5, d 7, one head), panels whose
// columns start at every alignment.
TEST(HostTokenMap, AttentionColumnsAreTheAssembledMatrixBitForBit) {
  struct Case {
    Index n, d, heads;
    double logit_scale;
    Index first, count;
  };
  for (const Case c : {Case{6, 8, 2, 0.0, 20, 11}, Case{6, 8, 2, 3.0, 20, 11}, Case{5, 7, 1, 0.0, 3, 29}}) {
    const BlockWeights w = test::random_block(c.d, c.heads, 4 * c.d, 17, c.logit_scale);
    const BlockForward f = block_forward(w, test::random_tokens(c.n, c.d, 18), SkipMode::kNone);
    const Index N = c.n * c.d;
    for (const AttentionPart part : {AttentionPart::kFull, AttentionPart::kB, AttentionPart::kE}) {
      const Mat K = attention_jacobian(w, f.attn, part);
      const AttentionJacobianColumns columns(w, f.attn, part);
      ASSERT_EQ(columns.order(), N);
      Mat panel(N, c.count);
      columns.columns(c.first, c.count, panel.data());
      EXPECT_EQ(panel, K.middleCols(c.first, c.count)) << "N " << N;
      const AttentionJacobianOp op(w, f.attn, part);
      const HostTokenMap<AttentionJacobianOp> map(
          op, [&](Index first, Index count, double* out) { columns.columns(first, count, out); });
      Mat whole(N, N);
      ASSERT_TRUE(map.assemble(whole.data()));
      EXPECT_EQ(whole, K) << "N " << N;
      EXPECT_THROW(columns.columns(N - 8, 9, panel.data()), std::invalid_argument);
    }
  }
}

// The block and tokens of the block_reports tests below (N = 96), and kFast with a host budget one
// byte short of the full route's 16 N²: the Schur route.
BlockWeights test_block() { return test::random_block(12, 3, 48, 5); }
Mat test_tokens() { return test::random_tokens(8, 12, 6); }
BlockReportOptions past_the_full_route(std::vector<std::string> matrices) {
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  opt.matrices = std::move(matrices);
  opt.host_memory_bytes = fast_route_cost(96, 96, 1).bytes - 1;
  return opt;
}

bool nd_by_nd(const ConditionReport& r) {
  return r.space == "full" && (r.matrix == "K_sa" || r.matrix == "B_sa" || r.matrix == "E_sa" || r.matrix == "K_sab");
}

// A row `g` of the Schur route against the full route's `e` for the same matrix (N = 96): its method,
// its cuts in the note (`cuts`: "split at … of 96"), and the full LU's κ within two backward-stable
// solves' σ_min; a singular E_sa (Prop. 2) singular, by a null vector the operator confirms (no
// SVD on this route; schur_lu.h (5)). Wrap calls in ASSERT_NO_FATAL_FAILURE.
void expect_the_full_lus_kappa(const ConditionReport& g, const ConditionReport& e, const std::string& cuts,
                               const std::string& knobs) {
  const double N = 96;
  EXPECT_EQ(g.method, "dense-schur-lu-lanczos") << knobs;
  EXPECT_NE(g.note.find(cuts), std::string::npos) << knobs;
  if (e.status != Status::kExact) {
    EXPECT_EQ(g.status, e.status) << knobs;
    return;
  }
  ASSERT_EQ(g.status, Status::kExact) << knobs;
  ASSERT_LT(e.kappa, 1e9) << knobs;  // so the tolerance below (σ_min to N·eps·σ_max) stays under 2.2e-5
  EXPECT_NEAR(g.kappa / e.kappa, 1.0, std::max(1e-9, N * 2.2e-16 * e.kappa)) << knobs;
}

// Past opt.host_memory_bytes (one byte short of the full route's K and copy, 16 N²), K_sa, B_sa,
// E_sa and K_sab (full space) take the Schur route and give the full LU's κ (within two backward-stable solves' σ_min); every
// other row is the full call's, bit for bit. The skipless K_sab keeps the host matrix (its
// LayerNorm-complement row restricts it), so it stays on the full route.
TEST(HostSchurRoute, PastTheHostsMemoryTheDenseRouteGivesTheFullLusKappaN8D12) {
  const BlockWeights w = test_block();
  const Mat X = test_tokens();
  const double N = 96;
  for (SkipMode skip : {SkipMode::kFull, SkipMode::kNone}) {
    BlockReportOptions full;
    full.route = KappaRoute::kFast;
    BlockReportOptions halves = past_the_full_route({});
    ASSERT_EQ(halves.host_memory_bytes, 16 * N * N - 1);
    int before = 0;
    halves.before_dense_solve = [&] { ++before; };
    const std::vector<ConditionReport> want = block_reports(w, X, skip, full), got = block_reports(w, X, skip, halves);
    ASSERT_EQ(got.size(), want.size());
    int schur = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const ConditionReport &g = got[i], &e = want[i];
      const std::string knobs = g.matrix + " " + g.space + " skip " + to_string(skip) + ": " + g.note;
      const bool on_schur = nd_by_nd(g) && !(g.matrix == "K_sab" && skip == SkipMode::kNone);
      if (!on_schur) {
        EXPECT_EQ(g.method, e.method) << knobs;
        EXPECT_EQ(g.kappa, e.kappa) << knobs;
        continue;
      }
      ++schur;
      ASSERT_NO_FATAL_FAILURE(expect_the_full_lus_kappa(g, e, "split at 48 of 96", knobs));
    }
    EXPECT_EQ(schur, skip == SkipMode::kFull ? 4 : 3);
    EXPECT_EQ(before, skip == SkipMode::kFull ? 4 : 5);  // the skipless K_sab's two host solves
  }
}

// Where two pieces do not fit but three do (their D_k 8·3·32² = 24 576 bytes, one-column panels
// and a vector 29 184; two pieces 39 936), K_sa, B_sa, E_sa and K_sab take three, with the full
// LU's κ.
TEST(HostSchurRoute, WhereTwoPiecesDoNotFitThreeGiveTheFullLusKappaN8D12) {
  const BlockWeights w = test_block();
  const Mat X = test_tokens();
  BlockReportOptions full, thirds = past_the_full_route({"K_sa", "B_sa", "E_sa", "K_sab"});
  full.route = KappaRoute::kFast;
  full.matrices = thirds.matrices;
  thirds.host_memory_bytes = 38000;
  const std::vector<ConditionReport> want = block_reports(w, X, SkipMode::kFull, full),
                                     got = block_reports(w, X, SkipMode::kFull, thirds);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < got.size(); ++i) {
    const ConditionReport &g = got[i], &e = want[i];
    const std::string knobs = g.matrix + ": " + g.note;
    ASSERT_NO_FATAL_FAILURE(expect_the_full_lus_kappa(g, e, "block LU in 3 pieces split at 32, 64 of 96", knobs));
  }
}

// Neither K nor the Schur route in its most pieces fits: one error naming the matrix, both sizes
// and the way out, before anything is assembled. A certificate asked for on the Schur route is a
// note (its counts factorise K itself), not a failure.
TEST(HostSchurRoute, RefusesWhatNoRouteHoldsAndNotesAnUncertifiedReportN8D12) {
  const BlockWeights w = test_block();
  const Mat X = test_tokens();
  BlockReportOptions tiny = past_the_full_route({"K_sa"});
  // The full route: 147 456 bytes. The Schur route's least, at this small N where the panels
  // weigh: seven pieces (13, 14, 14, 13, 14, 14, 14: Σ s² = 1 318), thirteen one-column panels and
  // a vector, 8 · (1 318 + 13·96 + 96) = 21 296 bytes (six and eight pieces: 21 504).
  tiny.host_memory_bytes = 21295;
  try {
    block_reports(w, X, SkipMode::kFull, tiny);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    for (const char* needle : {"K_sa (96 x 96)", "the dense route holds", "the Schur route at least", "(in 7 pieces)",
                               "lanczos"})
      EXPECT_NE(m.find(needle), std::string::npos) << m;
  }
  tiny.host_memory_bytes = 21296;
  const std::vector<ConditionReport> sevenths = block_reports(w, X, SkipMode::kFull, tiny);
  ASSERT_EQ(sevenths.size(), 1u);
  EXPECT_NE(sevenths[0].note.find("block LU in 7 pieces split at 13, 27, 41, 54, 68, 82 of 96"), std::string::npos)
      << sevenths[0].note;
  EXPECT_EQ(sevenths[0].status, Status::kExact) << sevenths[0].note;
  BlockReportOptions certified = past_the_full_route({"K_sa"});
  certified.certify = CertifyMode::kInertia;
  const std::vector<ConditionReport> r = block_reports(w, X, SkipMode::kFull, certified);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].method, "dense-schur-lu-lanczos");
  EXPECT_EQ(r[0].status, Status::kExact) << r[0].note;
  EXPECT_NE(r[0].note.find("not certified: the Schur route does not hold K"), std::string::npos) << r[0].note;
}

// within_dense_solve is the route's cancellation point: called before each panel of D_0 and D_1
// and each inverse solve, and an exception from it leaves the call at once. N = 96 at a budget of
// 16 N² − 1 = 147 455 bytes: the D_k, one-column panels and a vector take 39 936, the 107 519 left
// make panels of 46 columns (24 N bytes each), so 2 + 2 panels, then Lanczos' inverse solves.
TEST(HostSchurRoute, WithinDenseSolveIsCalledBetweenPanelsAndSolvesAndMayAbandonTheCallN8D12) {
  const BlockWeights w = test_block();
  const Mat X = test_tokens();
  BlockReportOptions opt = past_the_full_route({"K_sa"});
  int calls = 0;
  opt.within_dense_solve = [&] { ++calls; };
  const std::vector<ConditionReport> r = block_reports(w, X, SkipMode::kFull, opt);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].method, "dense-schur-lu-lanczos");
  const std::string::size_type at = r[0].note.find(" solves ");
  ASSERT_NE(at, std::string::npos) << r[0].note;
  const int solves = std::stoi(r[0].note.substr(r[0].note.rfind(' ', at - 1) + 1));
  EXPECT_EQ(calls, 4 + solves / 2) << r[0].note;  // each inverse solve is two refined solves
  struct Abandon {};
  int left = 3;
  opt.within_dense_solve = [&] {
    if (--left == 0) throw Abandon{};
  };
  EXPECT_THROW(block_reports(w, X, SkipMode::kFull, opt), Abandon);
  EXPECT_EQ(left, 0);
}

// kSchur asked for: K_sa, B_sa, E_sa and K_sab on the Schur route whatever the memory, with the
// full route's κ; the skipless K_sab (whose LayerNorm-complement row restricts a host matrix)
// bracketed matrix-free instead, both its rows, the bracket containing the dense κ.
TEST(HostSchurRoute, KappaRouteSchurTakesItAndBracketsTheSkiplessKsabN8D12) {
  const BlockWeights w = test_block();
  const Mat X = test_tokens();
  EXPECT_EQ(parse_kappa_route("schur"), KappaRoute::kSchur);
  EXPECT_EQ(to_string(KappaRoute::kSchur), "schur");
  for (SkipMode skip : {SkipMode::kFull, SkipMode::kNone}) {
    BlockReportOptions full, schur;
    full.route = KappaRoute::kFast;
    schur.route = KappaRoute::kSchur;
    full.matrices = schur.matrices = {"K_sa", "E_sa", "K_sab", "K_ffn"};
    const std::vector<ConditionReport> want = block_reports(w, X, skip, full), got = block_reports(w, X, skip, schur);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const ConditionReport &g = got[i], &e = want[i];
      const std::string knobs = g.matrix + " " + g.space + " skip " + to_string(skip) + ": " + g.note;
      ASSERT_EQ(g.matrix, e.matrix);
      ASSERT_EQ(g.space, e.space);
      if (g.matrix == "K_ffn") {
        EXPECT_EQ(g.kappa, e.kappa) << knobs;
      } else if (g.matrix == "K_sab" && skip == SkipMode::kNone) {
        EXPECT_EQ(g.method.rfind("gkl", 0), 0u) << knobs;
        if (e.status == Status::kExact) {
          EXPECT_LE(g.kappa_lo, e.kappa * (1 + 1e-9)) << knobs;
          EXPECT_GE(g.kappa_hi, e.kappa * (1 - 1e-9)) << knobs;
        }
      } else {
        EXPECT_EQ(g.method, "dense-schur-lu-lanczos") << knobs;
        if (e.status == Status::kExact && g.status == Status::kExact)
          EXPECT_NEAR(g.kappa / e.kappa, 1.0, 1e-7) << knobs;
        else
          EXPECT_EQ(g.status, e.status) << knobs;  // E_sa singular: by a null vector the operator confirms
      }
    }
  }
}

// A block whose attention never writes its last output feature (W_O's last column zero: a pruned
// or zero-initialised unit) has K_sa, B_sa and E_sa with n exactly zero rows, the last n of the
// feature-major vectorisation, so inside the last piece: the full route's SVD says singular of
// rank N − n; the Schur route, which has no SVD at this size, takes the last Schur complement's
// null vector x (schur_lu.h (4)), refined against the operator ((5)), in two pieces and in three:
// singular, all three. Unrefined, B_sa's x is 53 noise floors off in two pieces (1.6 in three: the
// computed D is that far from the true Schur complement); one step of (5) takes it to a 1 700th of
// a floor. Before (4) every row was not-converged.
TEST(HostSchurRoute, AnOutputFeatureTheBlockNeverWritesIsSingularOnBothRoutesN8D12) {
  BlockWeights w = test_block();
  w.Wo.col(w.d - 1).setZero();
  w.bo(w.d - 1) = 0;
  const Mat X = test_tokens();
  const Index n = X.rows(), N = n * w.d;
  BlockReportOptions full;
  full.route = KappaRoute::kSvd;
  full.matrices = {"K_sa", "B_sa", "E_sa"};
  const std::vector<ConditionReport> want = block_reports(w, X, SkipMode::kFull, full);
  ASSERT_EQ(want.size(), 3u);
  for (const ConditionReport& e : want) {
    ASSERT_EQ(e.status, Status::kSingular) << e.matrix;
    EXPECT_EQ(e.rank, N - n) << e.matrix;
  }
  for (const double memory : {fast_route_cost(N, N, 1).bytes - 1, 38000.0}) {  // two pieces; three (as above)
    BlockReportOptions schur = past_the_full_route(full.matrices);
    schur.host_memory_bytes = memory;
    const std::vector<ConditionReport> got = block_reports(w, X, SkipMode::kFull, schur);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const ConditionReport &g = got[i], &e = want[i];
      const std::string knobs = g.matrix + " at " + std::to_string(memory) + " bytes: " + g.note;
      EXPECT_EQ(g.method, "dense-schur-lu-lanczos") << knobs;
      EXPECT_NE(g.note.find(memory > 38000.0 ? "block LU in 2 pieces" : "block LU in 3 pieces"), std::string::npos)
          << knobs;
      EXPECT_NEAR(g.sigma_max / e.sigma_max, 1.0, 1e-9) << knobs;
      EXPECT_NE(g.note.find("its null vector x has"), std::string::npos) << knobs;
      const double floor = noise_floor(N, N, g.sigma_max);
      ASSERT_EQ(g.status, Status::kSingular) << knobs;
      EXPECT_TRUE(std::isinf(g.kappa)) << knobs;
      EXPECT_LE(g.sigma_min, floor) << knobs;
      EXPECT_EQ(g.kappa_lo, g.sigma_max / floor) << knobs;
    }
  }
}

// auto on the host: the full route when it fits the budget, the Schur route when only its D_k do
// in some number of pieces (schur_route_cost: 4 N² in two, 8 N²/p for equal pieces; the memory is
// dense_max_bytes here, below the host's), the lanczos route when none does. The cost's flops are schur_lu.h's closed form 2b³(2^p − p − 1) + ⅔ p b³.
TEST(HostSchurRoute, AutoTakesTheSchurRouteWhereOnlyItFitsTheBudget) {
  BlockReportOptions opt;
  opt.route = KappaRoute::kAuto;
  const Index n = 8, d = 12, N = n * d;
  ASSERT_EQ(fast_route_cost(N, N, 1).bytes, 16.0 * N * N);
  ASSERT_EQ(schur_route_cost(N, 1).bytes, 4.0 * N * N);
  ASSERT_EQ(schur_route_cost(N, 1, 3).bytes, 8.0 * 3 * 32 * 32);
  ASSERT_EQ(schur_route_cost(N, 1, 8).bytes, 8.0 * 8 * 12 * 12);
  const double rate = kLuGflopsPerThread * 1e9;
  for (const Index p : {2, 3, 4, 8}) {
    const double b = static_cast<double>(N / p);
    const double flops = 2 * b * b * b * (std::pow(2.0, p) - p - 1) + 2.0 / 3.0 * p * b * b * b;
    EXPECT_NEAR(schur_route_cost(N, 1, p).seconds * rate / flops, 1.0, 1e-12) << p << " pieces";
  }
  EXPECT_NEAR(schur_route_cost(N, 1, 2).seconds * rate, 5.0 / 12.0 * N * N * N, 1e-6);
  opt.dense_max_bytes = 16.0 * N * N;
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kFast);
  opt.dense_max_bytes = 16.0 * N * N - 1;
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kSchur);
  opt.dense_max_bytes = 4.0 * N * N - 1;  // two pieces do not fit, three do
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kSchur);
  opt.dense_max_bytes = 8.0 * 8 * 12 * 12 - 1;  // not even eight
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kLanczos);
  // The time budget binds too, for the piece count the route then takes (the fewest that fit):
  // two pieces' 5/12 N³ where two fit, three pieces' 10/27 N³ (8/9 of it) where only three do.
  opt.dense_max_bytes = 16.0 * N * N - 1;
  opt.lanczos.max_seconds = 0.9 * schur_route_cost(N, get_threads()).seconds;
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kLanczos);
  opt.dense_max_bytes = 4.0 * N * N - 1;
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kSchur);
  opt.lanczos.max_seconds = 0.85 * schur_route_cost(N, get_threads()).seconds;
  EXPECT_EQ(resolve_route(opt, n, d), KappaRoute::kLanczos);
  // What auto chose is what runs: block_reports at that budget takes three pieces.
  opt.lanczos.max_seconds = 0.9 * schur_route_cost(N, get_threads()).seconds;
  opt.matrices = {"K_sa"};
  opt.route = resolve_route(opt, n, d);
  const std::vector<ConditionReport> r = block_reports(test_block(), test_tokens(), SkipMode::kFull, opt);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].note.find("block LU in 3 pieces"), std::string::npos) << r[0].note;
}

// A dense N × N matrix as a host TokenMap (N × 1 token matrices) whose every call (products,
// panels, columns) from call `fail_at` on throws what a device's map throws on a device failure:
// one DeviceError line (models/device/torch_operator_device.cpp, on_device). Counts its calls.
class FailingMatrixMap final : public TokenMap {
 public:
  FailingMatrixMap(const Mat& A, Index fail_at) : A_(A), fail_at_(fail_at) {}
  Index n() const override { return A_.rows(); }
  Index d_in() const override { return 1; }
  Index d_out() const override { return 1; }
  Mat apply(const Mat& dX) const override {
    call("JVP");
    return A_ * dX;
  }
  Mat apply_transpose(const Mat& G) const override {
    call("VJP");
    return A_.transpose() * G;
  }
  bool assemble_columns(Index first, Index count, double* out) const override {
    call("assembly");
    Eigen::Map<Mat>(out, A_.rows(), count) = A_.middleCols(first, count);
    return true;
  }
  bool apply_columns(const double* in, Index count, double* out) const override {
    call("panel");
    Eigen::Map<Mat>(out, A_.rows(), count) = A_ * Eigen::Map<const Mat>(in, A_.rows(), count);
    return true;
  }
  std::string assembles_into() const override { return "cpu"; }
  mutable Index calls = 0;

 private:
  void call(const std::string& what) const {
    if (++calls >= fail_at_) throw DeviceError("matrix-free product (" + what + ") on cuda:0: CUDA out of memory");
  }
  const Mat& A_;
  Index fail_at_;
};

// A device failure anywhere in the Schur route (σ_max's Lanczos, the pieces' assembly, σ_min's
// Lanczos through the refined solves, the check of σ_min) leaves condition_schur at once with the
// map's own line, never as a not-converged report (κ NaN, the CLI's exit 3 instead of 1, the text
// lost): a failing call at every position of a whole run. The reviewer's case: a Gaussian 120 ×
// 120 in two pieces. (What makes a LibTorch map's failure a DeviceError: SchurRoute.ADeviceError…
// in tests/models/test_operator_device.cpp.)
TEST(SchurRoute, ADeviceErrorAtAnyCallOfTheRouteIsThrownWithItsMessage) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal;
  const Index N = 120;
  Mat A(N, N);
  for (Index k = 0; k < A.size(); ++k) A.data()[k] = normal(rng);
  const SchurPlan plan = SchurPlan::for_order(N, 2e9, 2);
  const FailingMatrixMap whole(A, std::numeric_limits<Index>::max());
  const ConditionReport r = condition_schur(whole, plan, "A");
  ASSERT_EQ(r.status, Status::kExact) << r.note;
  const Index calls = whole.calls;
  ASSERT_GT(calls, 50);
  for (Index fail_at = 1; fail_at <= calls; ++fail_at) {
    const FailingMatrixMap failing(A, fail_at);
    try {
      const ConditionReport got = condition_schur(failing, plan, "A");
      ADD_FAILURE() << "call " << fail_at << " of " << calls << " failed and the route reported "
                    << to_string(got.status) << ": " << got.note;
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(") on cuda:0: CUDA out of memory"), std::string::npos) << e.what();
      EXPECT_EQ(failing.calls, fail_at) << "call " << fail_at << ": " << e.what();
    }
  }
}

// choose_device_lu (schur_lu.h): the GPU's choice between the whole LU, the Schur route, a host
// copy and a refusal, on the CPU. Its inputs: extra(m) = cuSOLVER's Xgetrf beyond the m² matrix,
// modelled as getrf_device_bytes' three vectors and int64 pivots (32 m) plus 1 GB of workspace (more
// than a blocked LU's panel of a few hundred columns at these orders); the assembly batch 1 GB
// (TorchOperatorDevice::kAssemblyBatchBytes). Every expectation below holds for any extra +
// assembly up to the margin each comment states.
double modelled_getrf_extra(Index m) { return 32.0 * static_cast<double>(m) + 1e9; }

// ViT-B's K_sa, N = n·d = 197 · 768 = 151 296:
//   whole: 8 N² = 183.1 GB, past any one GPU.
//   two pieces of 75 648: D_0, D_1 hold 2 · 8 · 75 648² = 91.56 GB (design §10's "91.6 GB"); panels
//     of ⌊2e9 / (3 · 8 N)⌋ = 550 columns, three of them (8 · 3 N · 550 = 2.00 GB), and a vector:
//     93.56 GB + extra + assembly, within the H200's 149.553 GB free (the first run's
//     run.json, reports/gpu/measured/2026-11-27-h200) for any extra + assembly below 55.9 GB.
//   three pieces of 50 432: 3 · 8 · 50 432² = 61.04 GB ("61 GB"), panels of 330 columns, five
//     (2.00 GB): 63.04 GB + extra + assembly, within an H100's 80 GB for extra + assembly below
//     16.9 GB, where two pieces (93.56 GB) are not.
TEST(DeviceLuChoice, VitBTakesTwoPiecesOnAnH200AndThreeOnAnH100) {
  const Index N = 151296;
  const SchurPlan two = SchurPlan::for_order(N, 2e9, 2), three = SchurPlan::for_order(N, 2e9, 3);
  EXPECT_NEAR(8.0 * 2 * 75648.0 * 75648.0 / 1e9, 91.56, 0.01);
  EXPECT_EQ(two.panel, 550);
  EXPECT_NEAR(two.bytes() / 1e9, 93.56, 0.01);
  EXPECT_NEAR(8.0 * 3 * 50432.0 * 50432.0 / 1e9, 61.04, 0.01);
  EXPECT_EQ(three.panel, 330);
  EXPECT_NEAR(three.bytes() / 1e9, 63.04, 0.01);
  const DeviceLuChoice h200 = choose_device_lu(N, 149.553e9, 1e9, modelled_getrf_extra);
  ASSERT_EQ(h200.route, DeviceLuChoice::Route::kSchur);
  EXPECT_EQ(h200.plan.cuts, (std::vector<Index>{75648}));
  EXPECT_EQ(h200.plan.panel, 550);
  EXPECT_NEAR(h200.whole_bytes / 1e9, 185.13, 0.01);  // 8 N² + extra + assembly
  const DeviceLuChoice h100 = choose_device_lu(N, 80e9, 1e9, modelled_getrf_extra);
  ASSERT_EQ(h100.route, DeviceLuChoice::Route::kSchur);
  EXPECT_EQ(h100.plan.cuts, (std::vector<Index>{50432, 100864}));
}

// The other outcomes and the boundary of each, where the test is ≤:
//   nd 6 400 (the bench's size): 8 N² = 0.33 GB, whole on any GPU.
//   ViT-B at the least Schur plan's bytes exactly: eight pieces of 18 912 (Σ s² · 8 = 22.89 GB, panels
//     of ⌊2e9 / (15 · 8 N)⌋ = 110 columns, fifteen: 2.00 GB), 24.89 GB, plus extra + assembly:
//     26.89 GB; one byte less: none (a host copy's LU, 183 GB, neither), and the refusal names the
//     order, both needs and the free memory.
//   nd 6 400 with the matrix's LU free but not the 1 GB batch beside it: no Schur plan either (each
//     holds 0.6 GB or more of panels, and the batch and a workspace), so the host's copy, whose LU
//     holds no batch; one byte less: none.
TEST(DeviceLuChoice, WholeSchurHostCopyOrNoneAtTheirBoundaries) {
  const DeviceLuChoice small = choose_device_lu(6400, 149.553e9, 1e9, modelled_getrf_extra);
  EXPECT_EQ(small.route, DeviceLuChoice::Route::kWhole);
  EXPECT_EQ(choose_device_lu(6400, small.whole_bytes, 1e9, modelled_getrf_extra).route, DeviceLuChoice::Route::kWhole);

  const Index N = 151296;
  const SchurPlan eight = SchurPlan::for_order(N, 2e9, 8);
  EXPECT_EQ(eight.largest_piece(), 18912);
  EXPECT_EQ(eight.panel, 110);
  const double least = eight.bytes() + modelled_getrf_extra(18912) + 1e9;
  EXPECT_NEAR(least / 1e9, 26.89, 0.01);
  const DeviceLuChoice fits = choose_device_lu(N, least, 1e9, modelled_getrf_extra);
  ASSERT_EQ(fits.route, DeviceLuChoice::Route::kSchur);
  EXPECT_EQ(fits.plan.pieces(), 8);
  const DeviceLuChoice none = choose_device_lu(N, least - 1, 1e9, modelled_getrf_extra);
  ASSERT_EQ(none.route, DeviceLuChoice::Route::kNone);
  EXPECT_EQ(none.least_schur_pieces, 8);
  EXPECT_EQ(none.least_schur_bytes, least);
  const std::string refusal = device_lu_refusal("K_sa", N, none, least - 1, "cuda:0 a GPU (26.9 GB free of 80)");
  EXPECT_EQ(refusal, "K_sa (151296 x 151296) does not fit cuda:0 a GPU (26.9 GB free of 80): the whole LU needs "
                     "185 GB, the Schur route at least 26.9 GB (in 8 pieces), 26.9 GB are free; the lanczos route "
                     "brackets it matrix-free");

  const double lu = 8.0 * 6400 * 6400 + modelled_getrf_extra(6400);
  const DeviceLuChoice copy = choose_device_lu(6400, lu, 1e9, modelled_getrf_extra);
  EXPECT_EQ(copy.route, DeviceLuChoice::Route::kHostCopy);
  EXPECT_EQ(choose_device_lu(6400, lu - 1, 1e9, modelled_getrf_extra).route, DeviceLuChoice::Route::kNone);
}

}  // namespace
}  // namespace jacond
