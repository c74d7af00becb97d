// The CUDA dense route (analysis/cuda/dense_cuda.h) against the CPU route (condition_fast) on the
// same matrices: the algorithm is one (analysis/spectral/lu_lanczos.h), so the two must agree to
// the accuracy of a backward-stable LU (relative O(eps·κ) in σ_min) on constructed spectra and on
// real block Jacobians. Tests that need a device skip without one (CI has the CUDA toolkit and no
// GPU); the input checks run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <lapacke.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <utility>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "analysis/core/scoped_env.h"
#include "analysis/cuda/dense_cuda.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operator_device.h"
#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/inertia.h"
#include "analysis/spectral/ldlt.h"
#include "analysis/spectral/mixed_lu.h"
#include "support/constructed_spectrum.h"
#include "support/expect_gpu.h"
#include "support/ldlt_product.h"
#include "support/paper_inits.h"
#include "support/random_block.h"

namespace jacond {
namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();

using test::expect_gpu;  // support/expect_gpu.h

// A test that needs a device skips without one (CI), but fails, naming why, under
// JACOND_EXPECT_GPU=1: device_available() is false on any cudaGetDeviceCount error, so on a GPU
// machine whose driver the runtime refuses ("CUDA driver version is insufficient for CUDA runtime
// version") every test here would skip and the run would read as passed.
#define REQUIRE_DEVICE()                                                                 \
  if (std::string why; !cuda::device_available(&why)) {                                  \
    if (expect_gpu()) FAIL() << "JACOND_EXPECT_GPU=1 and no usable CUDA device: " << why; \
    GTEST_SKIP() << "no CUDA device (the CPU route is tested elsewhere): " << why;       \
  }

void require_device() { REQUIRE_DEVICE(); }

// REQUIRE_DEVICE under JACOND_EXPECT_GPU=1: a failure naming cudaGetDeviceCount's reason where there
// is no device, nothing where there is one (so this test runs, and passes, on both machines).
TEST(DenseCuda, UnderExpectGpuAMissingDeviceFailsNamingWhy) {
  std::string why;
  const bool here = cuda::device_available(&why);
  EXPECT_EQ(why.empty(), here) << why;
  const ScopedEnv expect("JACOND_EXPECT_GPU", "1");
  if (here) {
    require_device();
  } else {
    EXPECT_FATAL_FAILURE(require_device(), "JACOND_EXPECT_GPU=1 and no usable CUDA device: ");
  }
}

// A device buffer whose bytes overflow size_t is refused by name, count and the line that asked,
// before cudaMalloc would be given the wrapped (small) size; runs without a device.
TEST(DenseCuda, AnOverflowingBufferIsRefusedByNameBeforeCudaMalloc) {
  EXPECT_EQ(cuda::detail::device_buffer_bytes(1000, 8, "A", "here.cpp", 1), 8000u);
  EXPECT_EQ(cuda::detail::device_buffer_bytes(0, 8, "A", "here.cpp", 1), 0u);
  const size_t count = std::numeric_limits<size_t>::max() / 8 + 1;  // 8·count wraps to 0
  try {
    cuda::detail::device_buffer_bytes(count, 8, "the exact route's matrix", "dense_cuda.cpp", 217);
    ADD_FAILURE() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc of the exact route's matrix failed at dense_cuda.cpp:217: "), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(count) + " elements of 8 bytes overflow size_t"), std::string::npos) << what;
  }
}

// A failed allocation names the buffer, its bytes and the caller's file and line (every failure
// used to name DeviceBuffer's own line, without the size), and leaves no error behind for the next
// launch check to report as its own. On a GPU the size is impossible (2^60 bytes); without one
// cudaMalloc refuses for want of a device: the same message, so this runs on both machines.
TEST(DenseCuda, AFailedAllocationNamesTheBufferItsBytesAndTheCaller) {
  const size_t bytes = size_t{1} << 60;
  int line = 0;
  try {
    line = __LINE__ + 1;
    cuda::detail::allocate_device_buffer(bytes, "the test's impossible buffer");
    ADD_FAILURE() << "expected CudaError: 2^60 bytes were allocated";
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cudaMalloc of the test's impossible buffer (" + std::to_string(bytes) + " bytes, ", 0), 0u) << what;
    EXPECT_NE(what.find("test_dense_cuda.cpp:" + std::to_string(line) + ": "), std::string::npos) << what;
  }
  if (cuda::device_available()) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// Which maps the assembled and Schur routes take (their memory, TokenMap::assembles_into): CUDA
// memory of the dense device's GPU, by ordinal or as LibTorch's current device; not host memory or
// none (the caller's host copy); and a map on another GPU is refused in one line naming both (its
// products would write the dense device's buffer from another GPU). Runs without a device.
TEST(DenseCuda, AMapOnAnotherGpuIsRefusedNamingBoth) {
  EXPECT_TRUE(cuda::detail::assembles_on("cuda", 1, "K_sa"));
  EXPECT_TRUE(cuda::detail::assembles_on("cuda:0", 0, "K_sa"));
  EXPECT_TRUE(cuda::detail::assembles_on("cuda:3", 3, "K_sa"));
  for (const char* host : {"cpu", "", "torch-cpu"}) EXPECT_FALSE(cuda::detail::assembles_on(host, 0, "K_sa")) << host;
  for (const char* other : {"cuda:1", "cuda:", "cuda:x", "cuda:-1"}) {
    try {
      cuda::detail::assembles_on(other, 0, "K_sa");
      ADD_FAILURE() << other << ": expected CudaError";
    } catch (const cuda::CudaError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(std::string("K_sa: its map assembles into ") + other + ", this dense device is cuda:0 ", 0), 0u)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// The two routes' σ agree to what each guarantees: σ_max to 1e-12 relative (Lanczos tolerance
// 1e-13 on σ_max²), σ_min to n·eps·κ relative (each LU's backward error, κ times).
void expect_same_report(const ConditionReport& cpu, const ConditionReport& gpu) {
  SCOPED_TRACE("cpu: " + format_report(cpu) + " | gpu: " + format_report(gpu) + " " + gpu.note);
  EXPECT_EQ(gpu.status, cpu.status);
  EXPECT_EQ(gpu.method, "dense-lu-lanczos-cuda");
  EXPECT_NEAR(gpu.sigma_max / cpu.sigma_max, 1.0, 1e-12);
  const double tol = std::max(1e-12, static_cast<double>(cpu.rows) * kEps * cpu.kappa);
  EXPECT_NEAR(gpu.sigma_min / cpu.sigma_min, 1.0, tol);
  EXPECT_EQ(gpu.rank, cpu.rank);
  EXPECT_NE(gpu.note.find("GPU seconds: setup "), std::string::npos);  // where the device's time went
  EXPECT_NE(gpu.note.find(", checks "), std::string::npos);
}

// A bare attention Jacobian (`ours`-like block, n 40, d 32, 2 heads: nd 1280) for the device tests.
Mat bare_attention_jacobian() {
  std::mt19937_64 rng(3);
  const BlockWeights w = test::ours_like_block(32, 2, 128, 4);
  const Mat X = test::gaussian(40, 32, 1.0, rng);
  return attention_jacobian(w, block_forward(w, X, SkipMode::kNone).attn, AttentionPart::kFull);
}

TEST(DenseCuda, AgreesWithTheCpuRouteOnConstructedSpectra) {
  REQUIRE_DEVICE();
  for (double kappa : {10.0, 1e6, 1e10}) {
    const Index n = 300;
    Vec s(n);
    for (Index i = 0; i < n; ++i) s(i) = std::pow(kappa, -static_cast<double>(i) / (n - 1));
    const Mat A = test::with_singular_values(s, n, n, 7);
    expect_same_report(condition_fast(A, "A"), cuda::condition_fast(A, "A"));
  }
}

TEST(DenseCuda, AgreesWithTheCpuRouteOnABareAttentionJacobian) {
  REQUIRE_DEVICE();
  const Mat K = bare_attention_jacobian();
  expect_same_report(condition_fast(K, "K_sa"), cuda::condition_fast(K, "K_sa"));
}

// JACOND_CUDA_LU_SOLVES set to `value` (nullopt: unset) for one scope, then put back.
class ScopedLuSolves : public ScopedEnv {
 public:
  explicit ScopedLuSolves(const std::optional<std::string>& value) : ScopedEnv("JACOND_CUDA_LU_SOLVES", value) {}
};

constexpr cuda::LuSolves kEverySweep[] = {cuda::LuSolves::kGetrs, cuda::LuSolves::kTrsv, cuda::LuSolves::kTrtri};

// The variable's values, its default, and a bad value: an error naming both, before any device
// call (so this runs without a GPU).
TEST(DenseCuda, TheSweepsSolvesComeFromTheEnvironment) {
  for (const std::optional<std::string>& none : {std::optional<std::string>(), std::optional<std::string>("")}) {
    ScopedLuSolves env(none);
    EXPECT_EQ(cuda::lu_solves_from_env(), cuda::LuSolves::kGetrs);
  }
  for (cuda::LuSolves s : kEverySweep) {
    ScopedLuSolves env(cuda::to_string(s));
    EXPECT_EQ(cuda::lu_solves_from_env(), s) << cuda::to_string(s);
  }
  ScopedLuSolves bad("getrf");
  for (const auto& call : std::vector<std::function<void()>>{
           [] { cuda::lu_solves_from_env(); }, [] { cuda::condition_fast(Mat::Identity(300, 300), "A"); }}) {
    try {
      call();
      ADD_FAILURE() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("JACOND_CUDA_LU_SOLVES"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'getrf'"), std::string::npos) << e.what();
    }
  }
}

// The algebra trsv and trtri rely on (dense_cuda.h, LuSolves), on the host: with P A = L U from
// dgetrf, (AᵀA)⁻¹ x = U⁻¹ L⁻¹ L⁻ᵀ U⁻ᵀ x, the row permutation cancelling; by triangular solves
// (trsv's four calls, their triangles, transposes and unit diagonals) and by products with the
// factors' inverses (trtri's), against Eigen's full-pivoting solves with Aᵀ and A. A gaussian A
// pivots (checked), so a sweep that needed P would fail here.
TEST(DenseCuda, TheRowPermutationCancelsInTheInverseGram) {
  std::mt19937_64 rng(11);
  const Index n = 200;
  const Mat A = test::gaussian(n, n, 1.0, rng);
  const Vec x = test::gaussian(n, 1, 1.0, rng).col(0);
  Mat LU = A;
  std::vector<lapack_int> ipiv(n);
  ASSERT_EQ(LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, LU.data(), n, ipiv.data()), 0);
  int swaps = 0;
  for (Index i = 0; i < n; ++i) swaps += ipiv[i] != i + 1;
  ASSERT_GT(swaps, n / 2);
  const Vec expected = A.fullPivLu().solve(A.transpose().fullPivLu().solve(x));
  const Mat& F = LU;  // the factors, read only
  const auto U = F.triangularView<Eigen::Upper>();
  const auto L = F.triangularView<Eigen::UnitLower>();
  const Vec by_solves = U.solve(L.solve(L.transpose().solve(U.transpose().solve(x))));
  const Mat U_inv = U.solve(Mat::Identity(n, n)), L_inv = L.solve(Mat::Identity(n, n));
  const Vec by_inverses = U_inv * (L_inv * (L_inv.transpose() * (U_inv.transpose() * x)));
  EXPECT_LT((by_solves - expected).norm(), 1e-10 * expected.norm());
  EXPECT_LT((by_inverses - expected).norm(), 1e-10 * expected.norm());
}

// A TokenMap of a host matrix K (nd × nd over n tokens of width d): assemble() copies K into the
// device buffer, as the LibTorch maps write it there (models/device, tested against the closed
// forms in test_operator_device); apply() is the host product. `can`: whether assemble() writes
// (false: it says it cannot, as a LibTorch map whose products fail to start would); `where`: the
// memory it says it writes (assembles_into), "cuda" (the current device) unless a test says another.
class HostMatrixMap final : public TokenMap {
 public:
  HostMatrixMap(Mat K, Index n, bool can = true, std::string where = "cuda")
      : K_(std::move(K)), n_(n), can_(can), where_(std::move(where)) {}
  Index n() const override { return n_; }
  Index d_in() const override { return K_.cols() / n_; }
  Index d_out() const override { return K_.rows() / n_; }
  Mat apply(const Mat& dX) const override {
    const Vec y = K_ * Eigen::Map<const Vec>(dX.data(), dX.size());
    return Eigen::Map<const Mat>(y.data(), n_, d_out());
  }
  Mat apply_transpose(const Mat& G) const override {
    const Vec y = K_.transpose() * Eigen::Map<const Vec>(G.data(), G.size());
    return Eigen::Map<const Mat>(y.data(), n_, d_in());
  }
  std::string assembles_into() const override { return where_; }
  bool assemble(double* device_out) const override {
    ++assemble_calls_;
    if (!can_) return false;
    return cudaMemcpy(device_out, K_.data(), sizeof(double) * K_.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  int assemble_calls() const { return assemble_calls_; }

 private:
  Mat K_;
  Index n_;
  bool can_;
  std::string where_;
  mutable int assemble_calls_ = 0;
};

// condition_fast_assembled: the matrix assembled in the device buffer is factorised there, with the
// report condition_fast gives (and the CPU), its note saying so; it declines a map whose assemble()
// fails though it says it writes CUDA memory (the route's fallback: asked once, then nullopt), one
// that writes host memory or none (never asked), a rectangular map and a small one (the CPU route's
// sizes); an exactly singular matrix takes the device SVD after assembling again.
TEST(DenseCuda, AssembledOnTheDeviceAgreesWithTheCopiedRoute) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(3);
  const Mat K = bare_attention_jacobian();
  const std::optional<ConditionReport> r = cuda::condition_fast_assembled(HostMatrixMap(K, 40), "K_sa");
  ASSERT_TRUE(r);
  expect_same_report(condition_fast(K, "K_sa"), *r);
  EXPECT_EQ(r->note.rfind("assembled on the GPU from the operator's products; GPU seconds: setup ", 0), 0u) << r->note;
  EXPECT_NE(r->note.find(", assembly "), std::string::npos) << r->note;

  const HostMatrixMap fails(K, 40, false);
  EXPECT_FALSE(cuda::condition_fast_assembled(fails, "K_sa"));
  EXPECT_EQ(fails.assemble_calls(), 1);  // the assemble() → false fallback ran, not an early decline
  for (const char* elsewhere : {"", "cpu"}) {
    const HostMatrixMap host(K, 40, true, elsewhere);
    EXPECT_FALSE(cuda::condition_fast_assembled(host, "K_sa")) << elsewhere;
    EXPECT_EQ(host.assemble_calls(), 0) << elsewhere;
  }
  EXPECT_FALSE(cuda::condition_fast_assembled(HostMatrixMap(K.leftCols(40 * 30), 40), "K_sa"));  // rectangular
  EXPECT_FALSE(cuda::condition_fast_assembled(HostMatrixMap(Mat::Identity(8, 8), 4), "tiny"));

  Mat singular = test::gaussian(80, 80, 1.0, rng);
  singular.col(17).setZero();
  const std::optional<ConditionReport> s = cuda::condition_fast_assembled(HostMatrixMap(singular, 20), "A");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, Status::kSingular) << s->note;
  EXPECT_EQ(s->method, "dense-svd-cuda");
  EXPECT_EQ(s->rank, 79);
  EXPECT_NE(s->note.find("exactly singular pivot on the GPU"), std::string::npos) << s->note;
}

// The assembled and Schur routes refuse a map on another GPU than the dense device's (assembles_into
// "cuda:K", as LibTorch's maps name theirs) in one line, before asking it for anything, and take one
// that names the dense device's own GPU. With one GPU the other is one past the last: a refusal
// by ordinal, which no device there is asked about.
TEST(DenseCuda, TheAssembledRoutesRefuseAMapOnAnotherGpu) {
  REQUIRE_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the free functions' device
  const Mat K = bare_attention_jacobian();
  const auto gpu = cuda::cuda_dense_device(0);
  const std::string other = "cuda:" + std::to_string(count > 1 ? 1 : count);
  const HostMatrixMap elsewhere(K, 40, true, other);
  const std::string refusal = "K_sa: its map assembles into " + other + ", this dense device is cuda:0 ";
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"device, whole", [&] { gpu->condition_fast_assembled(elsewhere, "K_sa"); }},
      {"device, Schur", [&] { gpu->condition_schur(elsewhere, SchurPlan::for_order(K.rows()), "K_sa"); }},
      {"free, whole", [&] { cuda::condition_fast_assembled(elsewhere, "K_sa"); }},
      {"free, Schur", [&] { cuda::condition_schur(elsewhere, SchurPlan::for_order(K.rows()), "K_sa"); }}};
  for (const auto& [label, call] : calls) {
    try {
      call();
      ADD_FAILURE() << label << ": expected CudaError";
    } catch (const cuda::CudaError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(refusal, 0), 0u) << label << ": " << e.what();
    }
  }
  EXPECT_EQ(elsewhere.assemble_calls(), 0);
  const HostMatrixMap here(K, 40, true, "cuda:0");
  const std::optional<ConditionReport> r = gpu->condition_fast_assembled(here, "K_sa");
  ASSERT_TRUE(r);
  expect_same_report(condition_fast(K, "K_sa"), *r);
  EXPECT_EQ(here.assemble_calls(), 1);
}

// Each of the σ_min sweep's three ways (LuSolves) gives the CPU route's report, with the matrix
// copied from the host and assembled on the device, and its note names the way it went.
TEST(DenseCuda, EverySweepOfTheFactorsAgreesWithTheCpuRoute) {
  REQUIRE_DEVICE();
  const Index n = 300;
  Vec s(n);
  for (Index i = 0; i < n; ++i) s(i) = std::pow(1e10, -static_cast<double>(i) / (n - 1));
  const std::vector<std::pair<Mat, Index>> matrices = {{bare_attention_jacobian(), 40},
                                                       {test::with_singular_values(s, n, n, 7), 30}};
  for (const auto& [K, tokens] : matrices) {
    const ConditionReport cpu = condition_fast(K, "K");
    for (cuda::LuSolves sweep : kEverySweep) {
      SCOPED_TRACE(std::string("JACOND_CUDA_LU_SOLVES=") + cuda::to_string(sweep) + ", order " + std::to_string(K.rows()));
      ScopedLuSolves env(cuda::to_string(sweep));
      const ConditionReport copied = cuda::condition_fast(K, "K");
      const std::optional<ConditionReport> assembled = cuda::condition_fast_assembled(HostMatrixMap(K, tokens), "K");
      ASSERT_TRUE(assembled);
      for (const ConditionReport* r : {&copied, &*assembled}) {
        expect_same_report(cpu, *r);
        EXPECT_NE(r->note.find(std::string(" solves, ") + cuda::to_string(sweep) + ")"), std::string::npos) << r->note;
        EXPECT_EQ(r->note.find(", triangular inverses ") != std::string::npos, sweep == cuda::LuSolves::kTrtri) << r->note;
      }
    }
  }
}

// An exactly zero column: getrf on the device reports a zero pivot (devInfo > 0), and the route
// answers with the full spectrum (on the device), as the CPU route does.
TEST(DenseCuda, ExactlySingularFallsBackToTheSvd) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(5);
  Mat A = test::gaussian(80, 80, 1.0, rng);
  A.col(17).setZero();
  const ConditionReport r = cuda::condition_fast(A, "A");
  EXPECT_EQ(r.status, Status::kSingular) << r.note;
  EXPECT_NE(r.note.find("exactly singular pivot on the GPU"), std::string::npos) << r.note;
  EXPECT_EQ(r.method, "dense-svd-cuda");
  EXPECT_EQ(r.rank, 79);
}

// Checked on the host before any device call: runs without a GPU.
TEST(DenseCuda, RejectsNonFiniteInputBeforeTouchingTheDevice) {
  Mat A = Mat::Identity(60, 60);
  A(3, 4) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(cuda::condition_fast(A, "A"), std::invalid_argument);
}

// cuSOLVER's gesvd against LAPACKE's gesdd: both backward stable, so every σ_i agrees to
// O(n·eps·σ_max) absolutely; tall, wide and square.
TEST(DenseCuda, SingularValuesAgreeWithTheCpuSvd) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(11);
  for (const auto& [rows, cols] : {std::pair<Index, Index>{120, 120}, {150, 90}, {70, 130}}) {
    const Mat A = test::gaussian(rows, cols, 1.0, rng);
    const Vec cpu = singular_values(A), gpu = cuda::singular_values(A);
    ASSERT_EQ(gpu.size(), cpu.size());
    const double tol = static_cast<double>(std::max(rows, cols)) * kEps * cpu(0) * 10;
    for (Index i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu(i), cpu(i), tol) << rows << "x" << cols << " sigma_" << i;
  }
}

// fits(): by the device's free memory, read here by cudaMemGetInfo: the ViT-S attention Jacobian
// (nd 75 648: 45.8 GB of fp64) and a matrix of twice its bytes (nd 106 983: 91.6 GB) fit when the
// free memory holds the matrix with room for the LU's pivots and workspace (under 2 % of it, plus
// 1 GB for cuSOLVER's handle), and not when it does not hold the matrix alone; an 80 GB H100 holds
// the first and not the second. Never past the host budget given.
TEST(DenseCuda, FitsByTheDevicesFreeMemoryAndTheHostBudget) {
  REQUIRE_DEVICE();
  const auto gpu = cuda::cuda_dense_device();
  const DenseBudget roomy{1e12, 120};
  EXPECT_TRUE(gpu->fits(DenseRoute::kFast, 6400, 6400, roomy));
  EXPECT_FALSE(gpu->fits(DenseRoute::kFast, 6400, 6400, DenseBudget{1e8, 120}));  // 328 MB > the host's 100 MB
  EXPECT_FALSE(gpu->fits(DenseRoute::kFast, 200000, 200000, roomy));            // 320 GB
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const double free = static_cast<double>(free_bytes);
  for (const Index nd : {Index{75648}, Index{106983}}) {
    const double matrix = 8.0 * static_cast<double>(nd) * static_cast<double>(nd);
    const bool fits = gpu->fits(DenseRoute::kFast, nd, nd, roomy);
    std::cout << "device: " << gpu->description() << ", " << free / 1e9 << " GB free; nd " << nd << " ("
              << matrix / 1e9 << " GB) fits: " << fits << "\n";
    if (matrix > free) {
      EXPECT_FALSE(fits) << nd;
    }
    if (1.02 * matrix + 1e9 < free) {
      EXPECT_TRUE(fits) << nd;
    }
  }
}

// The whole of block_reports on the GPU against the host: every nd × nd row from the device's
// route, each σ as expect_same_report requires; the other rows identical.
TEST(DenseCuda, BlockReportsOnTheGpuMatchTheHost) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(9);
  const BlockWeights w = test::ours_like_block(32, 2, 128, 4);
  const Mat X = test::gaussian(40, 32, 1.0, rng);
  BlockReportOptions opt;
  opt.route = KappaRoute::kFast;
  const auto host = block_reports(w, X, SkipMode::kFull, opt);
  opt.device = cuda::cuda_dense_device();
  const auto gpu = block_reports(w, X, SkipMode::kFull, opt);
  ASSERT_EQ(gpu.size(), host.size());
  int on_device = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    SCOPED_TRACE(gpu[i].matrix + " " + gpu[i].space + " head " + std::to_string(gpu[i].head));
    if (gpu[i].method == "dense-lu-lanczos-cuda") {
      expect_same_report(host[i], gpu[i]);
      ++on_device;
    } else if (gpu[i].method == "dense-svd-cuda") {  // both sides fell back to the full spectrum
      EXPECT_EQ(host[i].method, "dense-svd");
      EXPECT_EQ(gpu[i].status, host[i].status);
      EXPECT_EQ(gpu[i].rank, host[i].rank);
      // gesvd and gesdd: each σ_i to O(n·eps·σ_max) absolutely, so κ to n·eps·κ relatively (× 10)
      if (host[i].status == Status::kExact) {
        EXPECT_NEAR(gpu[i].kappa / host[i].kappa, 1.0, 10 * static_cast<double>(host[i].rows) * kEps * host[i].kappa);
      }
      ++on_device;
    } else {  // rows the device leaves to the host: the host's report itself
      EXPECT_EQ(gpu[i].method, host[i].method);
      EXPECT_EQ(gpu[i].kappa, host[i].kappa);
    }
  }
  EXPECT_EQ(on_device, 4);  // K_sa, B_sa, E_sa, K_sab
}

// Below kFastMinSize columns the GPU's fast route is the CPU's (its SVD, as condition_fast's own
// rule), and says so: no device call, so this runs without a GPU. Spectra's Lanczos cannot start
// on a matrix of order 1, and on orders 2–47 the row would otherwise name a different method.
TEST(DenseCuda, SmallMatricesTakeTheCpuRoute) {
  std::mt19937_64 rng(23);
  for (Index n : {Index(1), Index(12), kFastMinSize - 1}) {
    SCOPED_TRACE(n);
    const Mat A = test::gaussian(n, n, 1.0, rng);
    const ConditionReport cpu = condition_fast(A, "A"), gpu = cuda::condition_fast(A, "A");
    EXPECT_EQ(cpu.method, "dense-svd");
    EXPECT_EQ(gpu.method, cpu.method);
    EXPECT_EQ(gpu.kappa, cpu.kappa);
    EXPECT_NE(gpu.note.find("CPU route"), std::string::npos) << gpu.note;
  }
}

// The mixed route (analysis/spectral/mixed_lu.h) with cuSOLVER's fp32 LU against the CPU's with
// LAPACKE's: both refine to Bound 1 of mixed_lu.h, so σ_min agrees to 2·√n·u·σ_max (each side's
// backward error) and σ_max to Lanczos' 1e-12; matrices of κ 1e2 and 1e6, and the ViT-like K_sa.
TEST(DenseCuda, MixedRouteAgreesWithTheCpuMixedRoute) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(13);
  const BlockWeights w = test::ours_like_block(32, 2, 128, 4);
  const Mat X = test::gaussian(40, 32, 1.0, rng);
  const AttentionCache attn = block_forward(w, X, SkipMode::kNone).attn;
  std::vector<std::pair<std::string, Mat>> cases{{"kappa 1e2", test::with_singular_values(test::geometric(300, 1e2), 300, 300, 14)},
                                                 {"kappa 1e6", test::with_singular_values(test::geometric(300, 1e6), 300, 300, 15)},
                                                 {"K_sa", attention_jacobian(w, attn, AttentionPart::kFull)}};
  for (const auto& [label, A] : cases) {
    SCOPED_TRACE(label);
    const DenseMatrixOp op(A);
    const LinearMap map = linear_map(op);
    const ConditionReport cpu = condition_mixed(A.cast<float>(), map, label);
    const ConditionReport gpu = cuda::condition_mixed(A.cast<float>(), map, label);
    ASSERT_EQ(cpu.status, Status::kExact) << cpu.note;
    EXPECT_EQ(gpu.status, Status::kExact) << gpu.note;
    EXPECT_EQ(gpu.method, "dense-lu32-refined-lanczos-cuda");
    EXPECT_NE(gpu.note.find(", fp32 LU "), std::string::npos) << gpu.note;  // where the device's time went
    EXPECT_NEAR(gpu.sigma_max / cpu.sigma_max, 1.0, 1e-12);
    EXPECT_NEAR(gpu.sigma_min, cpu.sigma_min, 2 * std::sqrt(static_cast<double>(A.rows())) * kEps * cpu.sigma_max + 1e-12 * cpu.sigma_min);
    std::cout << label << ": cpu " << cpu.note << " | gpu " << gpu.note << "\n";
  }
}

// The inertia counts' LDLᵀ on the GPU (cusolverDnDsytrf, Bunch–Kaufman; analysis/spectral/ldlt.h)
// against the host: the factors, converted on the host, reproduce H's eigenvalues and inertia
// (tests/support/ldlt_product.h), and the device's solves (cusolverDnXsytrs) invert H to the
// accuracy of a backward-stable solve; random symmetric and augmented H_μ of a bare K_sa.
TEST(DenseCuda, LdltFactorsReproduceHAndSolveOnTheDevice) {
  REQUIRE_DEVICE();
  const auto gpu = cuda::cuda_dense_device();
  std::mt19937_64 rng(17);
  const BlockWeights w = test::ours_like_block(16, 2, 64, 18);
  const Mat X = test::gaussian(12, 16, 1.0, rng);
  const Mat K = attention_jacobian(w, block_forward(w, X, SkipMode::kNone).attn, AttentionPart::kFull);
  const Vec sigma = singular_values(K);
  const Index m = K.rows();
  Mat H = -std::sqrt(sigma(0) * sigma(m / 2)) * Mat::Identity(2 * m, 2 * m);  // μ between two σ
  H.topRightCorner(m, m) = K;
  H.bottomLeftCorner(m, m) = K.transpose();
  const Mat G = test::gaussian(500, 500, 1.0, rng);
  // Order 1 800: several of cuSOLVER's blocked panels (its block size is not documented; LAPACK's
  // is ≤ 256), so the host's conversion of blocked storage is checked across panel boundaries.
  const Mat G2 = test::gaussian(1800, 1800, 1.0, rng);
  for (const auto& [label, A] : {std::pair<std::string, Mat>{"augmented K_sa", H}, {"random symmetric 500", G + G.transpose()},
                                 {"random symmetric 1800", G2 + G2.transpose()}}) {
    SCOPED_TRACE(label);
    const std::unique_ptr<LdltFactors> f = gpu->ldlt(A.triangularView<Eigen::Lower>());
    EXPECT_EQ(f->where, "cuda");
    EXPECT_EQ(f->pivoting, "bunch-kaufman");
    const Vec lambda = test::sorted_eigenvalues(A);
    const double norm = lambda.cwiseAbs().maxCoeff(), kappa = norm / lambda.cwiseAbs().minCoeff();
    const Vec from_factors = test::sorted_eigenvalues(test::ldlt_product(*f));
    EXPECT_LE((from_factors - lambda).cwiseAbs().maxCoeff(), 1e-10 * norm);
    EXPECT_EQ(test::negative_pivots(*f), (lambda.array() < 0).count());
    const Vec x = test::gaussian(A.rows(), 1, 1.0, rng);
    Vec b = A * x;
    f->solve(b.data(), b.data());
    EXPECT_LE((b - x).norm(), 1e4 * kEps * kappa * x.norm());
  }
}

// Counts and certificates through the GPU's LDLᵀ on real blocks: counts equal the dense SVD's at
// shifts between singular values, and a certified report (method "+inertia-cuda") contains the
// dense κ; the counts agree with the host's at every shift.
TEST(DenseCuda, InertiaCertificatesOnTheGpuContainTheDenseKappa) {
  REQUIRE_DEVICE();
  const auto gpu = cuda::cuda_dense_device();
  std::mt19937_64 rng(19);
  for (const auto& [label, w] : {std::pair<std::string, BlockWeights>{"ours", test::ours_like_block(32, 2, 128, 20)},
                                 {"timm", test::timm_like_block(32, 2, 128, 21)}}) {
    SCOPED_TRACE(label);
    const Mat X = test::gaussian(40, 32, 1.0, rng);
    const Mat K = attention_jacobian(w, block_forward(w, X, SkipMode::kNone).attn, AttentionPart::kFull);
    const Vec ref = singular_values(K);
    const double tau = std::sqrt(static_cast<double>(K.rows())) * kEps * ref(0);
    int checked = 0;  // the shifts counted: a test whose every shift is skipped checks no count
    for (Index i : {Index(0), ref.size() / 2, ref.size() - 2}) {
      const double mu = std::sqrt(ref(i) * ref(i + 1));
      if (!(mu > 1e3 * tau) || ref(i) / ref(i + 1) < 1 + 1e-8) continue;
      ++checked;
      const SingularValueCount c = count_singular_values_below(K, mu, 0, *gpu);
      EXPECT_EQ(c.where, "cuda");
      EXPECT_EQ(c.below, (ref.array() < mu).count()) << "mu " << mu;
      EXPECT_EQ(c.below, count_singular_values_below(K, mu, 0).below) << "mu " << mu;
    }
    EXPECT_GT(checked, 0) << "every shift was skipped: no count was compared";
    const ConditionReport fast = condition_fast(K, "K_sa");
    ASSERT_EQ(fast.status, Status::kExact);
    const ConditionReport r = certify_report(fast, K, ClaimedExtremes::estimate(fast.sigma_min, fast.sigma_max), *gpu);
    ASSERT_EQ(r.status, Status::kCertified) << r.note;
    EXPECT_EQ(r.method, "dense-lu-lanczos+inertia-cuda");
    const double smin = ref(ref.size() - 1);
    EXPECT_LE(r.kappa_lo, (ref(0) + tau) / std::max(smin - tau, 0.0));
    EXPECT_GE(r.kappa_hi, (ref(0) - tau) / (smin + tau));
    // As tight as the host's: σ_min placed by intervals, not by a count of 0 a radius below it
    // (Bunch–Kaufman's radius is about 40 % of σ_min on the timm block: the host twin in
    // CertifyExtremes.ARadiusWiderThanTheSecondShiftsOldGate…; the H200's first run left κ_hi 56 %
    // above κ on such a radius).
    EXPECT_LT(r.kappa_hi, 1.01 * r.kappa_lo) << r.note;
    std::cout << label << " K_sa (nd " << K.rows() << "): kappa in [" << r.kappa_lo << ", " << r.kappa_hi << "], " << r.note << "\n";
  }
}

// fits(kInertia): by device memory up to kMaxSytrfOrder (cusolverDnDsytrf's 32-bit interface),
// the host's rule past it (three counts of order 60 000 take hours on the host: no).
TEST(DenseCuda, InertiaFitsByTheDeviceUpToTheSytrfLimit) {
  REQUIRE_DEVICE();
  const auto gpu = cuda::cuda_dense_device();
  const DenseBudget roomy{1e12, 120};
  EXPECT_TRUE(gpu->fits(DenseRoute::kInertia, 6400, 6400, roomy));  // H_μ of order 12 800: 1.3 GB
  EXPECT_FALSE(gpu->fits(DenseRoute::kInertia, 6400, 6400, DenseBudget{1e9, 120}));  // the host's 1 GB
  EXPECT_FALSE(gpu->fits(DenseRoute::kInertia, 30000, 30000, roomy));
}

// A CudaDenseDevice is pinned to its GPU: its description names it, an ordinal past the devices
// present (or below −1) is a CudaError naming both, −1 is the current device fixed at construction,
// and its calls leave the thread's current device as they found it.
// NOTE: its switch-and-restore part cannot fail on a machine with one GPU, as this project's device machine is, where
// it is run: the pinned GPU and the current one coincide, so neither the switch nor the restore is
// exercised (the checks of the description, the ordinals refused and the route's report still are).
// Only a machine with two runs the route on the last GPU from device 0 and sees a restore fail.
TEST(DenseCuda, ADeviceIsPinnedToItsGpu) {
  REQUIRE_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(count - 1), cudaSuccess);
  const cuda::CudaDenseDevice current(-1);  // −1: the current device, fixed now
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(current.ordinal(), count - 1);
  EXPECT_EQ(current.description().rfind("cuda:" + std::to_string(count - 1) + " ", 0), 0u) << current.description();
  EXPECT_EQ(cuda::current_device(), 0);
  try {
    cuda::cuda_dense_device(-2);
    ADD_FAILURE() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:-2 asked for, " + std::to_string(count) + " present"), std::string::npos)
        << e.what();
  }
  const auto last = cuda::cuda_dense_device(count - 1);
  EXPECT_EQ(last->description().rfind("cuda:" + std::to_string(count - 1) + " ", 0), 0u) << last->description();
  EXPECT_NE(last->description().find(" GB free of "), std::string::npos) << last->description();
  try {
    cuda::cuda_dense_device(count);
    ADD_FAILURE() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    const std::string past = "cuda:" + std::to_string(count) + " asked for, " + std::to_string(count) + " present";
    EXPECT_NE(std::string(e.what()).find(past), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const Mat K = bare_attention_jacobian();
  expect_same_report(condition_fast(K, "K_sa"), last->condition_fast(K, "K_sa"));
  EXPECT_EQ(cuda::current_device(), 0);
  EXPECT_EQ(cuda::cuda_dense_device()->description().rfind("cuda:0 ", 0), 0u);  // −1: the current one
}

// Without a device, cuda_dense_device says so in a CudaError (the CLI's "no usable GPU").
TEST(DenseCuda, NoDeviceIsACudaErrorNamingTheCall) {
  if (cuda::device_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    cuda::cuda_dense_device();
    FAIL() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaGetDeviceCount"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace jacond
