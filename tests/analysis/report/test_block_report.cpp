// block_reports computes only the matrices asked for (BlockReportOptions::matrices), and what it
// computes for a subset is what it computes for that matrix in the full set.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <Eigen/SVD>

#include "analysis/operators/operator_device.h"
#include "analysis/report/block_report.h"
#include "analysis/report/report_csv.h"
#include "analysis/spectral/dense_cost.h"
#include "support/random_block.h"

namespace jacond {
namespace {

std::set<std::string> matrices_of(const std::vector<ConditionReport>& reports) {
  std::set<std::string> out;
  for (const auto& r : reports) out.insert(r.matrix);
  return out;
}

// The report of (matrix, space, head) or nullptr.
const ConditionReport* find(const std::vector<ConditionReport>& reports, const ConditionReport& want) {
  for (const auto& r : reports)
    if (r.matrix == want.matrix && r.space == want.space && r.head == want.head) return &r;
  return nullptr;
}

TEST(BlockReportSelection, SubsetRowsEqualTheFullCallsRowsN8D12) {
  const BlockWeights w = test::random_block(12, 3, 48, 5);
  const Mat X = test::random_tokens(8, 12, 6);
  BlockReportOptions all;
  all.route = KappaRoute::kFast;
  const auto full = block_reports(w, X, SkipMode::kNone, all);
  EXPECT_EQ(matrices_of(full), std::set<std::string>(block_matrix_names().begin(), block_matrix_names().end()));
  for (const std::vector<std::string>& subset :
       {std::vector<std::string>{"softmax"}, {"K_sab", "K_ffn", "softmax"}, {"E_sa"}, {"attention", "K_mlp"}}) {
    BlockReportOptions opt = all;
    opt.matrices = subset;
    const auto part = block_reports(w, X, SkipMode::kNone, opt);
    SCOPED_TRACE(::testing::PrintToString(subset));
    EXPECT_EQ(matrices_of(part), std::set<std::string>(subset.begin(), subset.end()));
    size_t expected_rows = 0;
    for (const auto& r : full)
      if (std::find(subset.begin(), subset.end(), r.matrix) != subset.end()) ++expected_rows;
    EXPECT_EQ(part.size(), expected_rows);  // every space and head of each asked-for matrix
    for (const auto& r : part) {
      const ConditionReport* f = find(full, r);
      ASSERT_NE(f, nullptr) << r.matrix << " " << r.space;
      EXPECT_EQ(r.sigma_max, f->sigma_max) << r.matrix << " " << r.space << " head " << r.head;
      EXPECT_EQ(r.sigma_min, f->sigma_min) << r.matrix << " " << r.space << " head " << r.head;
    }
  }
}

// The cancellation point before each dense factorisation: called once per assembled nd × nd matrix
// the route solves densely (skipless K_sab: the full space and the LayerNorm complement), never for
// the token block-diagonal or per-head ones, on kFast, kSvd and kMixed alike; an exception from it
// leaves the call at once, before the next factorisation.
TEST(BlockReportCancellation, CalledBeforeEachDenseFactorisationAndMayAbandonTheCallN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 9);
  const Mat X = test::random_tokens(6, 8, 10);
  for (const KappaRoute route : {KappaRoute::kFast, KappaRoute::kSvd, KappaRoute::kMixed}) {
    BlockReportOptions opt;
    opt.route = route;
    int calls = 0;
    opt.before_dense_solve = [&] { ++calls; };
    block_reports(w, X, SkipMode::kNone, opt);
    EXPECT_EQ(calls, 5) << "K_sa, B_sa, E_sa, K_sab full and on the LN complement; route " << static_cast<int>(route);
    calls = 0;
    opt.before_dense_solve = [&] {
      if (++calls == 2) throw std::runtime_error("interrupted");
    };
    EXPECT_THROW(block_reports(w, X, SkipMode::kNone, opt), std::runtime_error);
    EXPECT_EQ(calls, 2);
  }
}

// The token block-diagonal K_mlp / K_ffn (one SVD of d × d per token) stop between their tokens:
// within_dense_solve before each token's block, n per row (skipless: K_mlp, K_ffn and K_ffn on the
// LayerNorm complement), never before_dense_solve; an exception from it leaves at once.
TEST(BlockReportCancellation, TokenBlockDiagonalRowsCallWithinDenseSolveBeforeEachTokensBlockN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 9);
  const Index n = 6;
  const Mat X = test::random_tokens(n, 8, 10);
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  opt.matrices = {"K_mlp", "K_ffn"};
  int within = 0, before = 0;
  opt.within_dense_solve = [&] { ++within; };
  opt.before_dense_solve = [&] { ++before; };
  EXPECT_EQ(block_reports(w, X, SkipMode::kNone, opt).size(), 3u);
  EXPECT_EQ(within, 3 * n) << "K_mlp, K_ffn full and on the LN complement, one call per token";
  EXPECT_EQ(before, 0);
  within = 0;
  opt.within_dense_solve = [&] {
    if (++within == n + 2) throw std::runtime_error("interrupted");
  };
  EXPECT_THROW(block_reports(w, X, SkipMode::kNone, opt), std::runtime_error);
  EXPECT_EQ(within, n + 2) << "left inside K_ffn, at its second token";
}

// Matrix-free route: every solved operator leaves a warm start under "matrix/space"; a matrix that
// was not asked for leaves none, so it was never applied, let alone solved.
TEST(BlockReportSelection, UnrequestedMatricesAreNeverSolvedLanczosN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 9);
  const Mat X = test::random_tokens(6, 8, 10);
  BlockReportOptions opt;
  opt.route = KappaRoute::kLanczos;
  opt.lanczos.max_products = 2000;
  opt.matrices = {"K_sab", "softmax"};
  std::map<std::string, GklWarmStart> warm;
  opt.warm = &warm;
  const auto reports = block_reports(w, X, SkipMode::kNone, opt);
  std::set<std::string> keys;
  for (const auto& [k, v] : warm) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"K_sab/full", "K_sab/ln-complement"}));
  EXPECT_EQ(matrices_of(reports), (std::set<std::string>{"K_sab", "softmax"}));
}

TEST(BlockReportSelection, ParsesListsAndRejectsUnknownNames) {
  EXPECT_TRUE(parse_matrix_names("all", block_matrix_names()).empty());
  // An empty list or name is a typo, not "all" (it computed every matrix).
  for (const char* typo : {"", "K_sa,", "K_sa,,B_sa", ","})
    EXPECT_THROW(parse_matrix_names(typo, block_matrix_names()), std::invalid_argument) << "'" << typo << "'";
  EXPECT_EQ(parse_matrix_names("K_sab,softmax,K_sab", block_matrix_names()),
            (std::vector<std::string>{"K_sab", "softmax"}));
  try {
    parse_matrix_names("K_sab,K_bogus", block_matrix_names());
    FAIL() << "K_bogus accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown matrix 'K_bogus'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("K_ffn"), std::string::npos) << "lists the valid names: " << e.what();
  }
  BlockReportOptions opt;
  opt.matrices = {"K_nope"};
  EXPECT_THROW(block_reports(test::random_block(4, 1, 16, 1), test::random_tokens(3, 4, 2), SkipMode::kFull, opt),
               std::invalid_argument);
}

// CSV and --help numbers: the shortest text that reads back to the same double.
TEST(FormatNumber, ShortestRoundTrip) {
  EXPECT_EQ(format_number(0.6), "0.6");
  EXPECT_EQ(format_number(3e-3), "0.003");
  EXPECT_EQ(format_number(120), "120");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");  // needs all 17 digits
  EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> U(-30, 30);
  for (int i = 0; i < 10000; ++i) {
    const double x = std::pow(10.0, U(rng)) * (i % 2 ? 1 : -1);
    ASSERT_EQ(std::strtod(format_number(x).c_str(), nullptr), x) << format_number(x) << " (seed 42, draw " << i << ")";
  }
}

// A user's matrix name (Python: condition(A, name=...)) or a note with a comma or a quote stays one
// field: the row has as many fields as the header when read as CSV (RFC 4180 quoting).
TEST(ReportCsv, NamesAndNotesWithCommasAndQuotesStayOneField) {
  ConditionReport r;
  r.matrix = "W_q,layer \"3\"";
  r.note = "a, b";
  std::vector<std::string> fields(1);
  bool quoted = false;
  const std::string row = report_csv_fields(r);
  for (size_t i = 0; i < row.size(); ++i) {
    const char c = row[i];
    if (c == '"' && quoted && i + 1 < row.size() && row[i + 1] == '"') fields.back() += '"', ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) fields.emplace_back();
    else fields.back() += c;
  }
  const std::string header = report_csv_header();
  EXPECT_EQ(fields.size(), static_cast<size_t>(std::count(header.begin(), header.end(), ',') + 1)) << row;
  EXPECT_EQ(fields.front(), r.matrix) << row;
  EXPECT_EQ(fields.back(), r.note) << row;
}

TEST(AutoRoute, DenseWheneverMemoryAndPredictedTimeFit) {
  // The rule of analysis/spectral/dense_cost.h, at 2 threads with an explicit 16 GB budget (the
  // test must not depend on this machine's memory).
  const DenseBudget two_minutes{16e9, 120};
  EXPECT_TRUE(auto_prefers_dense(12480, 12480, two_minutes, 2));   // the n 65, d 192 block: LU ≈ 15 s
  EXPECT_FALSE(auto_prefers_dense(75648, 75648, two_minutes, 2));  // ViT-S: 92 GB
  EXPECT_FALSE(auto_prefers_dense(30000, 30000, DenseBudget{1e12, 120}, 2));  // fits memory, LU ≈ 210 s
  EXPECT_FALSE(auto_prefers_dense(12480, 12480, DenseBudget{16e9, 5}, 2));    // a 5 s budget
  EXPECT_TRUE(auto_prefers_dense(12480, 12480, DenseBudget{16e9, 5}, 8));     // more threads, less time
  // The predicted time grows as N³ and memory as N².
  const DenseCost a = fast_route_cost(4000, 4000, 2), b = fast_route_cost(8000, 8000, 2);
  EXPECT_NEAR(b.seconds / a.seconds, 8.0, 1e-12);
  EXPECT_NEAR(b.bytes / a.bytes, 4.0, 1e-12);
  // block_reports: the budget is the per-matrix lanczos seconds.
  BlockReportOptions opt;
  opt.route = KappaRoute::kAuto;
  opt.dense_max_bytes = 16e9;
  EXPECT_EQ(resolve_route(opt, 65, 192), KappaRoute::kFast);
  EXPECT_EQ(resolve_route(opt, 197, 384), KappaRoute::kLanczos);
  opt.lanczos.max_seconds = 1e-3;
  EXPECT_EQ(resolve_route(opt, 65, 192), KappaRoute::kLanczos);
}

TEST(AutoRoute, CertifiesWhenThreeInertiaCountsFit) {
  BlockReportOptions opt;
  opt.dense_max_bytes = 16e9;
  EXPECT_FALSE(wants_certificate(opt, 6400, 6400));  // default: none
  opt.certify = CertifyMode::kAuto;
  EXPECT_TRUE(wants_certificate(opt, 1000, 1000));
  EXPECT_FALSE(wants_certificate(opt, 40000, 40000));  // (2N)² doubles = 51 GB
  opt.certify = CertifyMode::kInertia;
  EXPECT_TRUE(wants_certificate(opt, 40000, 40000));
}

// K_mlp and K_ffn are token block-diagonal: under `auto` they are exact by their per-token blocks
// wherever those fit, even where the nd × nd matrices go matrix-free (at ViT-B skipless the lanczos
// route placed no σ_min of them in 3 × 120 s; the blocks give all three exactly in 59 s). n 64,
// d 8, hidden 32 (N = 512): a budget of 150 kB holds neither the full route (16 N² bytes) nor the
// Schur route (N² at eight pieces) but the blocks (3 · 8 n d² = 98 kB).
TEST(AutoRoute, TokenBlockDiagonalMatricesAreExactWhereverTheirBlocksFitN64D8) {
  const Index n = 64, d = 8, hidden = 32;
  const double gemm = 84e9, svd = 23e9;  // dense_cost.h's rates on 2 threads
  const DenseCost vit_b = tokenwise_route_cost(197, 768, 3072, 2);
  EXPECT_NEAR(vit_b.seconds, 197 * (2.0 * 768 * 768 * 3072 + 2.0 * 768 * 768 * 768) / gemm +
                                 197 * (8.0 / 3.0) * 768 * 768 * 768 / svd, 1e-9 * vit_b.seconds);
  EXPECT_NEAR(vit_b.bytes, 3 * 8.0 * 197 * 768 * 768, 1.0);
  const BlockWeights w = test::random_block(d, 2, hidden, 31);
  const Mat X = test::random_tokens(n, d, 32);
  BlockReportOptions opt;
  opt.route = KappaRoute::kAuto;
  opt.dense_max_bytes = 150e3;
  opt.matrices = {"K_mlp", "K_ffn"};
  opt.lanczos.max_products = 200;  // the lanczos rows below need not converge: only their method is read
  ASSERT_EQ(resolve_route(opt, n, d), KappaRoute::kLanczos);
  ASSERT_TRUE(auto_takes_tokenwise(opt, n, d, hidden));
  const BlockForward f = block_forward(w, X, SkipMode::kNone);
  const Mat Kmlp = mlp_jacobian(w, f.mlp).to_dense(), Kffn = ffn_jacobian(w, f).to_dense();
  const auto got = block_reports(w, X, SkipMode::kNone, opt);
  ASSERT_EQ(got.size(), 3u);  // K_mlp, K_ffn on the full space and on the LayerNorm complement
  for (const auto& [r, K] : {std::pair<const ConditionReport&, const Mat&>{got[0], Kmlp}, {got[1], Kffn}}) {
    SCOPED_TRACE(r.matrix + " " + r.space);
    EXPECT_EQ(r.method, "dense-svd-blockdiag");
    const Vec s = singular_values(K);  // the assembled nd × nd matrix's own SVD
    EXPECT_NEAR(r.sigma_max, s(0), 1e-12 * s(0));
    if (r.status == Status::kExact) {
      EXPECT_NEAR(r.sigma_min, s(s.size() - 1), 1e-9 * s(s.size() - 1));
    } else {
      EXPECT_EQ(r.status, Status::kSingular);  // skipless K_ffn over the full space: LayerNorm's nullspace
      EXPECT_LT(s(s.size() - 1), 1e-12 * s(0));
    }
  }
  EXPECT_EQ(got[0].status, Status::kExact);
  EXPECT_EQ(got[2].space, "ln-complement");
  EXPECT_EQ(got[2].status, Status::kExact);
  // A front end that resolves auto itself first (jacond block, sweep, the Python module) keeps the rule.
  BlockReportOptions resolved = opt;
  resolve_auto(resolved, n, d);
  EXPECT_EQ(resolved.route, KappaRoute::kLanczos);
  EXPECT_TRUE(resolved.resolved_from_auto);
  for (const auto& r : block_reports(w, X, SkipMode::kNone, resolved)) EXPECT_EQ(r.method, "dense-svd-blockdiag") << r.matrix;
  // Where the blocks do not fit, or the route was asked for, the lanczos route keeps them.
  for (const auto& [label, budget, route] : {std::tuple<const char*, double, KappaRoute>{"1 byte", 1, KappaRoute::kAuto},
                                             {"lanczos asked", 150e3, KappaRoute::kLanczos}}) {
    SCOPED_TRACE(label);
    BlockReportOptions other = opt;
    other.dense_max_bytes = budget;
    other.route = route;
    EXPECT_FALSE(auto_takes_tokenwise(other, n, d, hidden));
    for (const auto& r : block_reports(w, X, SkipMode::kNone, other)) EXPECT_EQ(r.method, "gkl") << r.matrix;
  }
}

// --certify inertia through block_reports, on both routes: every nd × nd report that is not
// singular is `certified`, and its [κ_lo, κ_hi] holds the dense SVD's κ.
TEST(CertifiedReports, BothRoutesCertifyAndContainTheDenseKappa) {
  const BlockWeights w = test::random_block(12, 2, 48, 31);
  const Mat X = test::random_tokens(6, 12, 32);
  BlockReportOptions svd;
  svd.route = KappaRoute::kSvd;
  svd.matrices = {"K_sa", "B_sa", "K_sab"};
  const std::vector<ConditionReport> truth = block_reports(w, X, SkipMode::kNone, svd);
  for (KappaRoute route : {KappaRoute::kFast, KappaRoute::kLanczos}) {
    BlockReportOptions opt = svd;
    opt.route = route;
    opt.certify = CertifyMode::kInertia;
    opt.lanczos.max_seconds = 20;
    const std::vector<ConditionReport> got = block_reports(w, X, SkipMode::kNone, opt);
    ASSERT_EQ(got.size(), truth.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(to_string(route) + " " + got[i].matrix + "/" + got[i].space + ": " + got[i].note);
      if (truth[i].status == Status::kSingular) {
        EXPECT_NE(got[i].status, Status::kCertified);
        continue;
      }
      if (got[i].status != Status::kCertified) {
        // Only a not-converged bracket may stay uncertified, and then it says why.
        EXPECT_EQ(route, KappaRoute::kLanczos);
        EXPECT_NE(got[i].note.find("inertia"), std::string::npos);
        continue;
      }
      const double tau = 1e-9 * truth[i].kappa;  // the SVD's own error at κ ≤ 1e6, N = 72
      EXPECT_LE(got[i].kappa_lo, truth[i].kappa + tau);
      EXPECT_GE(got[i].kappa_hi, truth[i].kappa - tau);
      EXPECT_GE(got[i].within_1pct, 1);
      EXPECT_GE(got[i].within_10pct, got[i].within_1pct);
    }
  }
}

// The dense routes go through BlockReportOptions::device (analysis/spectral/dense_device.h): a
// device that answers with the host's numbers under its own method name, and records what it
// was asked. This is the device-generic logic of the GPU back end, exercised without a GPU.
class RecordingDevice final : public DenseDevice {
 public:
  explicit RecordingDevice(bool fits) : fits_(fits) {}
  std::string name() const override { return "recording"; }
  std::string description() const override { return "a host device that records its calls"; }
  ConditionReport condition_fast(Mat A, const std::string& matrix) const override {
    fast_calls.push_back(matrix);
    ConditionReport r = jacond::condition_fast(std::move(A), matrix);
    r.method += "-recording";
    return r;
  }
  Vec singular_values(Mat A) const override {
    ++svd_calls;
    return jacond::singular_values(std::move(A));
  }
  ConditionReport condition_mixed(MatF A32, const LinearMap& A, const std::string& matrix) const override {
    mixed_calls.push_back(matrix);
    ConditionReport r = jacond::condition_mixed(std::move(A32), A, matrix);
    r.method += "-recording";
    return r;
  }
  bool fits(DenseRoute route, Index, Index, const DenseBudget&) const override {
    ++fits_calls;
    fits_routes.push_back(route);
    return fits_;
  }
  std::unique_ptr<LdltFactors> ldlt(Mat lower) const override {
    ldlt_orders.push_back(lower.rows());
    auto f = ldlt_rook(std::move(lower));
    f->where = name();
    return f;
  }
  mutable std::vector<std::string> fast_calls, mixed_calls;
  mutable std::vector<DenseRoute> fits_routes;
  mutable std::vector<Index> ldlt_orders;
  mutable int svd_calls = 0, fits_calls = 0;

 private:
  bool fits_;
};

TEST(DenseDeviceRouting, DenseRouteSolvesEveryNdByNdMatrixOnTheDeviceWithTheHostsNumbersN8D12) {
  const BlockWeights w = test::random_block(12, 3, 48, 5);
  const Mat X = test::random_tokens(8, 12, 6);
  BlockReportOptions host;
  host.route = KappaRoute::kFast;
  const auto expected = block_reports(w, X, SkipMode::kNone, host);
  auto device = std::make_shared<RecordingDevice>(true);
  BlockReportOptions on_device = host;
  on_device.device = device;
  const auto got = block_reports(w, X, SkipMode::kNone, on_device);
  // K_sa, B_sa, E_sa, and K_sab twice (full and ln-complement): the nd × nd matrices, and only those.
  EXPECT_EQ(device->fast_calls, (std::vector<std::string>{"K_sa", "B_sa", "E_sa", "K_sab", "K_sab"}));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(got[i].matrix + " on " + got[i].space);
    const bool nd_by_nd = got[i].matrix == "K_sa" || got[i].matrix == "B_sa" || got[i].matrix == "E_sa" || got[i].matrix == "K_sab";
    EXPECT_EQ(got[i].method, nd_by_nd ? expected[i].method + "-recording" : expected[i].method);
    EXPECT_EQ(got[i].sigma_max, expected[i].sigma_max);
    EXPECT_EQ(got[i].sigma_min, expected[i].sigma_min);
  }
}

TEST(DenseDeviceRouting, SvdRouteTakesTheDevicesSingularValuesN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 3);
  const Mat X = test::random_tokens(6, 8, 4);
  BlockReportOptions opt;
  opt.route = KappaRoute::kSvd;
  opt.matrices = {"K_sa", "E_sa"};
  const auto host = block_reports(w, X, SkipMode::kFull, opt);
  auto device = std::make_shared<RecordingDevice>(true);
  opt.device = device;
  const auto got = block_reports(w, X, SkipMode::kFull, opt);
  EXPECT_EQ(device->svd_calls, 2);
  ASSERT_EQ(got.size(), host.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].method, "dense-svd-recording");
    EXPECT_EQ(host[i].method, "dense-svd");
    EXPECT_EQ(got[i].kappa, host[i].kappa);
  }
}

// kMixed: the square nd × nd matrices reach the device's condition_mixed, with the host's numbers,
// and nothing takes condition_fast (with its residual K_sab has no non-square ln-complement).
TEST(DenseDeviceRouting, MixedRouteFactorisesOnTheDeviceN8D12) {
  const BlockWeights w = test::random_block(12, 3, 48, 5);
  const Mat X = test::random_tokens(8, 12, 6);
  BlockReportOptions opt;
  opt.route = KappaRoute::kMixed;
  opt.matrices = {"K_sa", "B_sa", "K_sab"};
  const auto host = block_reports(w, X, SkipMode::kFull, opt);
  auto device = std::make_shared<RecordingDevice>(true);
  opt.device = device;
  const auto got = block_reports(w, X, SkipMode::kFull, opt);
  EXPECT_EQ(device->mixed_calls, (std::vector<std::string>{"K_sa", "B_sa", "K_sab"}));
  EXPECT_TRUE(device->fast_calls.empty());
  ASSERT_EQ(got.size(), host.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(got[i].matrix);
    EXPECT_EQ(host[i].method, "dense-lu32-refined-lanczos") << host[i].note;
    EXPECT_EQ(got[i].method, "dense-lu32-refined-lanczos-recording");
    EXPECT_EQ(got[i].kappa, host[i].kappa);
  }
}

// `auto` asks the device, not the host's cost model: a device that holds nothing sends even a
// tiny block to the matrix-free route; one that holds everything keeps it dense.
TEST(DenseDeviceRouting, AutoIsDecidedByTheDevicesFitsN6D8) {
  BlockReportOptions opt;
  opt.route = KappaRoute::kAuto;
  EXPECT_EQ(resolve_route(opt, 6, 8), KappaRoute::kFast);  // the host: a 48 × 48 matrix fits
  opt.device = std::make_shared<RecordingDevice>(false);
  EXPECT_EQ(resolve_route(opt, 6, 8), KappaRoute::kLanczos);
  opt.device = std::make_shared<RecordingDevice>(true);
  EXPECT_EQ(resolve_route(opt, 197, 384), KappaRoute::kFast);  // ViT-S: the host alone says lanczos
  opt.device = nullptr;
  EXPECT_EQ(resolve_route(opt, 197, 384), KappaRoute::kLanczos);
}

// Inertia certificates factorise H_μ on the device (its ldlt; the GPU's is cuSOLVER's), on the
// dense and the matrix-free routes alike, with the host's numbers (the recording device delegates
// to the host's rook LDLᵀ); `auto` asks the device's fits for the certificate too.
TEST(DenseDeviceRouting, InertiaCertificatesFactoriseOnTheDeviceN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 3);
  const Mat X = test::random_tokens(6, 8, 4);
  for (const KappaRoute route : {KappaRoute::kFast, KappaRoute::kLanczos}) {
    SCOPED_TRACE(to_string(route));
    BlockReportOptions opt;
    opt.route = route;
    opt.matrices = {"K_sa", "E_sa"};
    opt.certify = CertifyMode::kInertia;
    const auto host = block_reports(w, X, SkipMode::kFull, opt);
    auto device = std::make_shared<RecordingDevice>(true);
    opt.device = device;
    const auto got = block_reports(w, X, SkipMode::kFull, opt);
    ASSERT_EQ(got.size(), host.size());
    ASSERT_FALSE(device->ldlt_orders.empty());
    for (const Index M : device->ldlt_orders) EXPECT_EQ(M, 2 * 48);  // H_μ of a 48 × 48 block
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(got[i].matrix + " " + got[i].note);
      ASSERT_EQ(host[i].status, Status::kCertified) << host[i].note;
      EXPECT_EQ(got[i].status, Status::kCertified);
      const std::string host_method = host[i].method.substr(0, host[i].method.size() - std::string("+inertia").size());
      EXPECT_EQ(host[i].method, host_method + "+inertia");
      // The dense route's κ ran on the device too; the lanczos route's products on the host.
      EXPECT_EQ(got[i].method, host_method + (route == KappaRoute::kFast ? "-recording" : "") + "+inertia-recording");
      EXPECT_EQ(got[i].kappa_lo, host[i].kappa_lo);
      EXPECT_EQ(got[i].kappa_hi, host[i].kappa_hi);
    }
  }
  BlockReportOptions opt;
  opt.certify = CertifyMode::kAuto;
  EXPECT_TRUE(wants_certificate(opt, 48, 48));  // the host's rule: three counts of order 96 fit
  auto none = std::make_shared<RecordingDevice>(false);
  opt.device = none;
  EXPECT_FALSE(wants_certificate(opt, 48, 48));
  EXPECT_EQ(none->fits_routes, std::vector<DenseRoute>{DenseRoute::kInertia});
}

// An explicit --certify inertia that this machine cannot hold (K and the augmented matrix of order
// 2nd past physical memory) leaves the row uncertified with a note naming the memory, instead of
// an allocation failure: the size is chosen from this machine's memory (8·(2nd)² ≈ 1.3× it).
TEST(CertifiedReports, ACertificatePastThisMachinesMemoryIsANoteNotACrash) {
  const Index d = 64;
  const double nd = std::sqrt(1.3 * physical_memory_bytes() / 32);
  const Index n = static_cast<Index>(std::ceil(nd / d));
  const BlockWeights w = test::random_block(d, 2, 4 * d, 5);
  BlockReportOptions opt;
  opt.route = KappaRoute::kLanczos;
  opt.matrices = {"K_sa"};
  opt.certify = CertifyMode::kInertia;
  opt.lanczos.max_seconds = 0.2;
  const auto reports = block_reports(w, test::random_tokens(n, d, 6), SkipMode::kFull, opt);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].status, Status::kCertified);
  EXPECT_NE(reports[0].note.find("not certified: the inertia counts need"), std::string::npos) << reports[0].note;
  EXPECT_NE(reports[0].note.find("more than this machine's"), std::string::npos) << reports[0].note;
}

// An OperatorDevice on the host for the routing of the lanczos route's maps: each block operator
// is its dense closed form behind TokenMap, the ln-complement restriction (when `restricts`) the
// dense K · blockdiag_i(C_i); it counts what block_reports asks of it. No Krylov space: GKL's basis
// stays on the host (TokenMapOp's products).
class RecordingOperatorDevice final : public OperatorDevice {
 public:
  explicit RecordingOperatorDevice(bool restricts) : restricts_(restricts) {}
  struct DenseMap final : TokenMap {
    DenseMap(Mat K, Index n, Index d_in, Index* counter = nullptr) : K(std::move(K)), n_(n), d_in_(d_in), counter(counter) {}
    Index n() const override { return n_; }
    Index d_in() const override { return d_in_; }
    Index d_out() const override { return K.rows() / n_; }
    Mat apply(const Mat& dX) const override {
      if (counter) ++*counter;
      return unvec(K * Eigen::Map<const Vec>(dX.data(), dX.size()), d_out());
    }
    Mat apply_transpose(const Mat& G) const override {
      if (counter) ++*counter;
      return unvec(K.transpose() * Eigen::Map<const Vec>(G.data(), G.size()), d_in());
    }
    Mat unvec(const Vec& v, Index d) const { return Eigen::Map<const Mat>(v.data(), n_, d); }
    Mat K;
    Index n_, d_in_;
    Index* counter;  // products, when counted
  };
  std::string name() const override { return "recording"; }
  std::string description() const override { return "dense closed forms on the host"; }
  std::unique_ptr<TokenMap> block_operator(const BlockWeights& w, const BlockForward& f,
                                           const std::string& matrix) const override {
    const Index n = f.X.rows();
    if (matrix == "K_sab") return std::make_unique<DenseMap>(sab_jacobian(w, f), n, w.d);
    if (matrix == "K_ffn") return std::make_unique<DenseMap>(ffn_jacobian(w, f).to_dense(), n, w.d);
    throw std::invalid_argument("RecordingOperatorDevice: only K_sab and K_ffn");
  }
  std::unique_ptr<TokenMap> ln_complement(const TokenMap& map, const LayerNormComplement& basis) const override {
    ++ln_complement_calls;
    if (!restricts_) return nullptr;
    const Index n = basis.n(), c = basis.d() - 2;
    Mat restricted(map.n() * map.d_out(), n * c);
    Vec e = Vec::Zero(n * c);
    for (Index j = 0; j < n * c; ++j) {  // column j: K · blockdiag(C_i) e_j
      e(j) = 1;
      const Mat Y = map.apply(basis.expand(Eigen::Map<const Mat>(e.data(), n, c)));
      restricted.col(j) = Eigen::Map<const Vec>(Y.data(), Y.size());
      e(j) = 0;
    }
    return std::make_unique<DenseMap>(std::move(restricted), n, c, &restricted_products);
  }
  mutable int ln_complement_calls = 0;
  mutable Index restricted_products = 0;  // products of the restricted maps it made

 private:
  bool restricts_;
};

// Skipless K_sab and K_ffn through an operator device: each ln-complement row asks the device for
// its restriction and, when it has one, runs on it (its products counted), else on LnComplementOp
// over the device's products; the brackets contain the dense κ either way.
TEST(OperatorDeviceRouting, LnComplementRowsTakeTheDevicesRestrictionN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 3);
  const Mat X = test::random_tokens(6, 8, 4);
  BlockReportOptions opt;
  opt.matrices = {"K_sab", "K_ffn"};
  const auto exact = block_reports(w, X, SkipMode::kNone, opt);
  opt.route = KappaRoute::kLanczos;
  for (const bool restricts : {true, false}) {
    SCOPED_TRACE(restricts ? "the device restricts" : "LnComplementOp over the device");
    auto device = std::make_shared<RecordingOperatorDevice>(restricts);
    opt.operator_device = device;
    const auto got = block_reports(w, X, SkipMode::kNone, opt);
    EXPECT_EQ(device->ln_complement_calls, 2);
    EXPECT_EQ(device->restricted_products > 0, restricts);
    ASSERT_EQ(got.size(), exact.size());
    int restricted_rows = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(got[i].matrix + "/" + got[i].space);
      EXPECT_EQ(got[i].space, exact[i].space);
      EXPECT_EQ(got[i].method, "gkl-recording");
      if (got[i].space != "ln-complement") continue;
      ++restricted_rows;
      ASSERT_EQ(got[i].status, Status::kBracket) << got[i].note;
      EXPECT_LE(got[i].kappa_lo, exact[i].kappa * (1 + 1e-10));
      EXPECT_GE(got[i].kappa_hi, exact[i].kappa * (1 - 1e-10));
    }
    EXPECT_EQ(restricted_rows, 2);
  }
}

// The output-embedding rows ("Always Skip Attention" §4): κ of each n × d token matrix against an
// independent oracle: the block recomputed here in plain loops (LayerNorm, per-head softmax
// attention, exact-GELU MLP) and the singular values by Eigen's JacobiSVD instead of LAPACKE's
// dgesdd. SAB_out and FFN_block_out carry their residual in a skipless block too; with skips,
// FFN_block_out is the block's output.
namespace oracle {

Mat layernorm(const Mat& X, const Vec& g, const Vec& b, double eps) {
  Mat Y(X.rows(), X.cols());
  for (Index i = 0; i < X.rows(); ++i) {
    double mu = 0, var = 0;
    for (Index j = 0; j < X.cols(); ++j) mu += X(i, j) / X.cols();
    for (Index j = 0; j < X.cols(); ++j) var += (X(i, j) - mu) * (X(i, j) - mu) / X.cols();
    for (Index j = 0; j < X.cols(); ++j) Y(i, j) = g(j) * (X(i, j) - mu) / std::sqrt(var + eps) + b(j);
  }
  return Y;
}

Mat attention(const BlockWeights& w, const Mat& Y) {
  const Index n = Y.rows(), dh = w.d / w.heads;
  const Mat Q = (Y * w.Wq).rowwise() + w.bq.transpose(), K = (Y * w.Wk).rowwise() + w.bk.transpose();
  const Mat V = (Y * w.Wv).rowwise() + w.bv.transpose();
  Mat heads(n, w.d);
  for (Index h = 0; h < w.heads; ++h)
    for (Index i = 0; i < n; ++i) {
      std::vector<double> p(n);
      double total = 0;
      for (Index j = 0; j < n; ++j) {
        p[j] = std::exp(w.effective_logit_scale() * Q.row(i).segment(h * dh, dh).dot(K.row(j).segment(h * dh, dh)));
        total += p[j];
      }
      for (Index c = 0; c < dh; ++c) {
        double v = 0;
        for (Index j = 0; j < n; ++j) v += p[j] / total * V(j, h * dh + c);
        heads(i, h * dh + c) = v;
      }
    }
  return (heads * w.Wo).rowwise() + w.bo.transpose();
}

Mat mlp(const BlockWeights& w, const Mat& Y) {
  Mat H = (Y * w.W1).rowwise() + w.b1.transpose();
  H = H.unaryExpr([](double z) { return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))); });
  return (H * w.W2).rowwise() + w.b2.transpose();
}

double kappa(const Mat& A) {
  const Vec s = Eigen::JacobiSVD<Mat>(A).singularValues();
  return s(0) / s(s.size() - 1);
}

}  // namespace oracle

TEST(EmbeddingReports, TokenMatricesKappaMatchesAnIndependentForwardAndSvdN10D12) {
  const BlockWeights w = test::random_block(12, 3, 48, 31);
  const Mat X = test::random_tokens(10, 12, 32);
  BlockReportOptions opt;
  opt.matrices = {"X_in", "LN1_out", "SA_out", "SAB_out", "LN2_out", "FFN_out", "FFN_block_out"};
  for (const SkipMode skip : {SkipMode::kNone, SkipMode::kFull}) {
    SCOPED_TRACE("skip " + to_string(skip));
    const Mat Y1 = oracle::layernorm(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
    const Mat sa = oracle::attention(w, Y1);
    const Mat X1 = skip == SkipMode::kFull ? Mat(X + sa) : sa;
    const Mat Y2 = oracle::layernorm(X1, w.ln2_gamma, w.ln2_beta, w.ln_eps);
    const Mat ffn = oracle::mlp(w, Y2);
    const std::map<std::string, Mat> expected = {{"X_in", X},    {"LN1_out", Y1},  {"SA_out", sa},
                                                 {"SAB_out", X + sa}, {"LN2_out", Y2}, {"FFN_out", ffn},
                                                 {"FFN_block_out", X1 + ffn}};
    const auto reports = block_reports(w, X, skip, opt);
    ASSERT_EQ(reports.size(), expected.size());
    for (const auto& r : reports) {
      SCOPED_TRACE(r.matrix);
      EXPECT_EQ(r.rows, 10);
      EXPECT_EQ(r.cols, 12);
      EXPECT_EQ(r.status, Status::kExact) << r.note;
      EXPECT_NEAR(r.kappa / oracle::kappa(expected.at(r.matrix)), 1.0, 1e-10);
    }
  }
}

// LayerScale γ (1e-5; 1e-9 for the floor) folded into W_O (timm_layout: DeiT III, DINOv2) scales K_sa by γ; κ
// must not change: the fast route's σ_max² = 1e-10·… sat under Spectra's absolute acceptance
// floor and κ(K_sa) came out 13 % low, labelled exact (analysis/spectral/lu_lanczos.h, "Scale").
TEST(DenseRoutes, KappaOfABranchScaledByLayerScaleIsTheSvdsN8D12) {
  BlockWeights w = test::random_block(12, 3, 48, 61);
  const Mat X = test::random_tokens(8, 12, 62);
  BlockReportOptions fast, svd;
  fast.route = KappaRoute::kFast;
  svd.route = KappaRoute::kSvd;
  fast.matrices = svd.matrices = {"K_sa", "B_sa", "E_sa"};
  const auto unscaled = block_reports(w, X, SkipMode::kNone, svd);
  for (const double gamma : {1e-5, 1e-9}) {
    BlockWeights scaled = w;
    scaled.Wo *= gamma;
    scaled.bo *= gamma;
    const auto got = block_reports(scaled, X, SkipMode::kNone, fast), truth = block_reports(scaled, X, SkipMode::kNone, svd);
    ASSERT_EQ(got.size(), truth.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(format_report(got[i]) + " gamma " + std::to_string(gamma) + " | " + got[i].note);
      EXPECT_EQ(got[i].status, truth[i].status);
      if (truth[i].status != Status::kExact) continue;
      EXPECT_NEAR(got[i].kappa / truth[i].kappa, 1.0, 1e-9);
      EXPECT_NEAR(truth[i].kappa / unscaled[i].kappa, 1.0, 1e-6);  // κ does not see γ
    }
  }
}

// A post-norm block's attention sees its input Y itself, a pre-norm block's sees LN1(X): at
// Y = LN1(X) (the oracle's LayerNorm) the post-norm rows are the pre-norm block's attention-level
// rows at X, which reach the attention through block_forward instead.
TEST(PostNormReports, AtYEqualToLn1XTheyAreThePreNormBlocksAttentionRowsN8D12) {
  const BlockWeights w = test::random_block(12, 3, 48, 41);
  const Mat X = test::random_tokens(8, 12, 42);
  const Mat Y = oracle::layernorm(X, w.ln1_gamma, w.ln1_beta, w.ln_eps);
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  const auto post = post_norm_block_reports(w, Y, opt);
  const auto pre = block_reports(w, X, SkipMode::kNone, opt);
  EXPECT_EQ(matrices_of(post), std::set<std::string>(post_norm_matrix_names().begin(), post_norm_matrix_names().end()));
  EXPECT_EQ(post.size(), 3u + 3u * 3u);  // K_sa B_sa E_sa, and per head softmax (two spaces) and attention
  for (const auto& r : post) {
    SCOPED_TRACE(r.matrix + "/" + r.space + " head " + std::to_string(r.head));
    const ConditionReport* p = find(pre, r);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(r.status, p->status);
    EXPECT_EQ(r.method, p->method);
    // Y and LN1(X) differ by rounding (≈ 1e-16 relative); κ ≤ 1e4 here moves by far less than 1e-9.
    if (r.status != Status::kSingular) {
      EXPECT_NEAR(r.kappa / p->kappa, 1.0, 1e-9);
    }
  }
}

// Past the dense budget a post-norm block takes the matrix-free route as a pre-norm one does:
// Lanczos brackets over the operator (never the assembled matrix's memory), the caller's warm
// starts, and inertia certificates when asked; the brackets contain the SVD's κ.
TEST(PostNormReports, PastTheDenseBudgetTheyAreCertifiedLanczosBracketsWithWarmStartsN6D8) {
  const BlockWeights w = test::random_block(8, 2, 32, 51);
  const Mat Y = test::random_tokens(6, 8, 52);
  BlockReportOptions svd;
  svd.route = KappaRoute::kSvd;
  svd.matrices = {"K_sa", "B_sa"};
  const auto truth = post_norm_block_reports(w, Y, svd);
  BlockReportOptions opt = svd;
  opt.route = KappaRoute::kAuto;
  opt.dense_max_bytes = 1;  // nothing fits: auto resolves to lanczos
  opt.certify = CertifyMode::kInertia;
  opt.lanczos.max_seconds = 20;
  std::map<std::string, GklWarmStart> warm;
  opt.warm = &warm;
  const auto got = post_norm_block_reports(w, Y, opt);
  ASSERT_EQ(got.size(), truth.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(got[i].matrix + ": " + got[i].note);
    ASSERT_EQ(got[i].matrix, truth[i].matrix);
    EXPECT_EQ(got[i].method.rfind("gkl", 0), 0u) << got[i].method;
    EXPECT_EQ(got[i].status, Status::kCertified);
    const double tau = 1e-9 * truth[i].kappa;
    EXPECT_LE(got[i].kappa_lo, truth[i].kappa + tau);
    EXPECT_GE(got[i].kappa_hi, truth[i].kappa - tau);
    EXPECT_EQ(warm.count(got[i].matrix + "/full"), 1u);
  }
}

TEST(PostNormReports, RefuseTheMatricesOfLayerNormPrecededSubBlocksByName) {
  const BlockWeights w = test::random_block(8, 2, 32, 53);
  BlockReportOptions opt;
  opt.matrices = {"K_sa", "K_ffn"};
  try {
    post_norm_block_reports(w, test::random_tokens(6, 8, 54), opt);
    FAIL() << "K_ffn of a post-norm block was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "a post-norm block has only K_sa, B_sa, E_sa, softmax and attention, not K_ffn");
  }
}

// The ln-complement drops x̂_i as near-null (LayerNorm keeps eps/(var_i + eps) of it). A constant
// token has var 0: its x̂ is rounding noise, the dropped direction is live, and the row says so;
// tokens of ordinary spread keep no such note.
TEST(BlockReportLnComplement, AConstantTokenIsNamedInTheRowsNote_n6_d8_h2) {
  const BlockWeights w = test::random_block(8, 2, 16, 3);
  Mat X = test::random_tokens(6, 8, 4);
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  opt.matrices = {"K_sab", "K_ffn"};
  for (const auto& r : block_reports(w, X, SkipMode::kNone, opt))
    EXPECT_EQ(r.note.find("variance <"), std::string::npos) << r.matrix << " " << r.space << ": " << r.note;
  X.row(2).setConstant(0.7);
  const BlockForward f = block_forward(w, X, SkipMode::kNone);
  // The premise, independently: LN1's Jacobian at token 2 keeps x̂'s direction (it is not near-null).
  ASSERT_LT(f.ln1.x_hat.row(2).squaredNorm() / 8.0, 0.5);
  const std::vector<ConditionReport> got = block_reports(w, X, SkipMode::kNone, opt);
  const ConditionReport& sab = find_report(got, "K_sab", "ln-complement", -1);
  EXPECT_NE(sab.note.find("1 token(s) (first 2) with variance < LN1's eps"), std::string::npos) << sab.note;
  const ConditionReport& full = find_report(got, "K_sab", "full", -1);
  EXPECT_EQ(full.note.find("variance <"), std::string::npos) << full.note;
}

// One token: the attention map is [1], so E_sa = 0 and K_sa = B_sa, the softmax row is 0 (singular
// on R^1) and 1⟂ = {0} has no row. Every other matrix is reported (the whole report was lost to
// "empty spectrum for softmax").
TEST(BlockReportEdges, OneTokenReportsEveryMatrixButTheEmptyRestriction_n1_d6_h2) {
  const BlockWeights w = test::random_block(6, 2, 12, 7);
  const Mat X = test::random_tokens(1, 6, 8);
  BlockReportOptions opt;
  opt.route = KappaRoute::kSvd;
  const auto got = block_reports(w, X, SkipMode::kFull, opt);
  EXPECT_EQ(matrices_of(got), std::set<std::string>(block_matrix_names().begin(), block_matrix_names().end()));
  for (const auto& r : got) EXPECT_NE(r.space, "ones-complement") << r.matrix;
  const ConditionReport& K = find_report(got, "K_sa", "full", -1);
  const ConditionReport& B = find_report(got, "B_sa", "full", -1);
  EXPECT_NEAR(K.kappa, B.kappa, 1e-12 * B.kappa);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(find_report(got, "softmax", "full", h).status, Status::kSingular);
    EXPECT_EQ(find_report(got, "attention", "full", h).kappa, 1.0);  // A_h = [1]
  }
}

// The post-norm path checks its tokens and its attention's forward pass as block_forward does: one
// line naming the problem, not a NaN matrix's "singular_values: matrix contains NaN or inf".
TEST(BlockReportEdges, PostNormTokensThatAreNotFiniteOrOverflowAreNamed_n6_d8_h2) {
  const BlockWeights w = test::random_block(8, 2, 16, 53);
  BlockReportOptions opt;
  opt.matrices = {"K_sa"};
  Mat nan_tokens = test::random_tokens(6, 8, 54);
  nan_tokens(2, 3) = std::numeric_limits<double>::quiet_NaN();
  const Mat huge = test::random_tokens(6, 8, 54) * 1e155;
  for (const auto& [Y, want] : {std::pair<Mat, std::string>{nan_tokens, "tokens contain NaN or inf"},
                                {huge, "the attention branch overflows fp64"}}) {
    try {
      post_norm_block_reports(w, Y, opt);
      ADD_FAILURE() << "accepted: " << want;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace jacond
