// Google Benchmark micro-benchmarks of the analysis kernels that every κ route spends its time
// in: one JVP and one VJP of the block Jacobians (the products GKL needs), the dense assembly of
// K_sa (Eq. 10/13), and the exact dense κ (LU + Lanczos). Sizes are ViT-Ti/S/B token counts
// (n = 197) at their widths. Threads: 1 (set explicitly), so numbers compare across machines
// with the same core; `jacond bench` has the end-to-end comparisons against PyTorch.
//
//   build/experiments/jacond_microbench --benchmark_filter=Jvp
//
// Each product costs O(n²d + nd²) flops (attention) or O(n d h) (MLP, h = 4d); the counters
// report products per second, so the GKL time at a given product budget follows directly.
#include <benchmark/benchmark.h>

#include <lapacke.h>

#include <random>
#include <vector>

#include "analysis/core/threads.h"
#include "analysis/jacobians/block.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "analysis/spectral/condition.h"

namespace {

using namespace jacond;

Mat gaussian(Index rows, Index cols, double std, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0.0, std);
  Mat M(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) M(i, j) = N(rng);
  return M;
}

// Gaussian weights of variance 1/d (logits and activations O(1)), zero biases, unit LayerNorms.
BlockWeights gaussian_block(Index d, Index heads, uint64_t seed) {
  BlockWeights w;
  w.d = d;
  w.heads = heads;
  w.hidden = 4 * d;
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  w.Wq = gaussian(d, d, s, seed);
  w.Wk = gaussian(d, d, s, seed + 1);
  w.Wv = gaussian(d, d, s, seed + 2);
  w.Wo = gaussian(d, d, s, seed + 3);
  w.W1 = gaussian(d, 4 * d, s, seed + 4);
  w.W2 = gaussian(4 * d, d, 0.5 * s, seed + 5);
  w.bq = w.bk = w.bv = w.bo = w.b2 = Vec::Zero(d);
  w.b1 = Vec::Zero(4 * d);
  w.ln1_gamma = w.ln2_gamma = Vec::Ones(d);
  w.ln1_beta = w.ln2_beta = Vec::Zero(d);
  return w;
}

// (n, d, heads) from the benchmark's arguments.
struct Case {
  BlockWeights w;
  BlockForward f;
  Case(Index n, Index d, Index heads)
      : w(gaussian_block(d, heads, 7)), f(block_forward(w, gaussian(n, d, 1.0, 11), SkipMode::kNone)) {}
};

template <typename MakeOp>
void run_products(benchmark::State& state, MakeOp make_op, bool transpose) {
  set_threads(1);
  const Case c(state.range(0), state.range(1), state.range(2));
  const auto op = make_op(c);
  const Vec x = gaussian(transpose ? op.rows() : op.cols(), 1, 1.0, 3);
  Vec y(transpose ? op.cols() : op.rows());
  for (auto _ : state) {
    if (transpose)
      op.perform_op_transpose(x.data(), y.data());
    else
      op.perform_op(x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["products/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

auto attention_op = [](const Case& c) { return AttentionJacobianOp(c.w, c.f.attn, AttentionPart::kFull); };
auto sab_op = [](const Case& c) { return SabJacobianOp(c.w, c.f); };
auto ffn_op = [](const Case& c) { return FfnJacobianOp(c.w, c.f); };

void BM_AttentionJvp(benchmark::State& s) { run_products(s, attention_op, false); }
void BM_AttentionVjp(benchmark::State& s) { run_products(s, attention_op, true); }
void BM_SabJvp(benchmark::State& s) { run_products(s, sab_op, false); }
void BM_SabVjp(benchmark::State& s) { run_products(s, sab_op, true); }
void BM_FfnJvp(benchmark::State& s) { run_products(s, ffn_op, false); }
void BM_FfnVjp(benchmark::State& s) { run_products(s, ffn_op, true); }

// ViT-Ti (192, 3 heads), ViT-S (384, 6), ViT-B (768, 12) at n = 197 tokens.
void vit_sizes(benchmark::internal::Benchmark* b) {
  b->Args({197, 192, 3})->Args({197, 384, 6})->Args({197, 768, 12})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_AttentionJvp)->Apply(vit_sizes);
BENCHMARK(BM_AttentionVjp)->Apply(vit_sizes);
BENCHMARK(BM_SabJvp)->Apply(vit_sizes);
BENCHMARK(BM_SabVjp)->Apply(vit_sizes);
BENCHMARK(BM_FfnJvp)->Apply(vit_sizes);
BENCHMARK(BM_FfnVjp)->Apply(vit_sizes);

// Dense K_sa assembly (args n, d, heads, threads: its column blocks run on parallel_for) and its
// exact κ (1 thread) at N = n·d = 1024, 3200 (and 6400 for the assembly).
void BM_DenseKsaAssembly(benchmark::State& state) {
  set_threads(static_cast<int>(state.range(3)));
  const Case c(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) benchmark::DoNotOptimize(attention_jacobian(c.w, c.f.attn, AttentionPart::kFull).data());
}
void BM_DenseKappaFast(benchmark::State& state) {
  set_threads(1);
  const Case c(state.range(0), state.range(1), state.range(2));
  const Mat K = attention_jacobian(c.w, c.f.attn, AttentionPart::kFull);
  for (auto _ : state) benchmark::DoNotOptimize(condition_fast(K, "K_sa").kappa);
}
void dense_sizes(benchmark::internal::Benchmark* b) {
  b->Args({32, 32, 2})->Args({50, 64, 4})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_DenseKsaAssembly)
    ->Args({32, 32, 2, 1})->Args({50, 64, 4, 1})->Args({100, 64, 4, 1})->Args({100, 64, 4, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseKappaFast)->Apply(dense_sizes);

// The factorisation rates behind `auto`'s cost model (analysis/spectral/dense_cost.h), on a
// Gaussian N × N matrix (symmetrised for LDLᵀ), 2 threads as on the reference machine. Counter
// GF/s: the route's flop count over the time; compare with kLuGflopsPerThread etc. × threads.
enum class Factorisation { kLu, kLdlt, kSvd };
template <Factorisation F>
void BM_LapackRate(benchmark::State& state) {
  set_threads(2);
  const lapack_int n = static_cast<lapack_int>(state.range(0));
  Mat A0 = gaussian(n, n, 1.0, 7);
  A0 = (A0 + A0.transpose()).eval();
  std::vector<lapack_int> ipiv(static_cast<size_t>(n));
  Vec e(n), s(n);
  double dummy = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Mat A = A0;
    state.ResumeTiming();
    if constexpr (F == Factorisation::kLu) LAPACKE_dgetrf(LAPACK_COL_MAJOR, n, n, A.data(), n, ipiv.data());
    if constexpr (F == Factorisation::kLdlt) LAPACKE_dsytrf_rk(LAPACK_COL_MAJOR, 'L', n, A.data(), n, e.data(), ipiv.data());
    if constexpr (F == Factorisation::kSvd) LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', n, n, A.data(), n, s.data(), &dummy, 1, &dummy, 1);
    benchmark::DoNotOptimize(A.data());
  }
  const double N = static_cast<double>(n);
  const double flops = F == Factorisation::kLu ? 2.0 / 3 * N * N * N : F == Factorisation::kLdlt ? N * N * N / 3 : 8.0 / 3 * N * N * N;
  state.counters["GF/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LapackRate<Factorisation::kLu>)->Arg(2000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LapackRate<Factorisation::kLdlt>)->Arg(2000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LapackRate<Factorisation::kSvd>)->Arg(1000)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
