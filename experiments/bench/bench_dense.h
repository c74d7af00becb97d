// `jacond bench dense`: jacond's exact κ(K_sa) against the route a PyTorch user would take,
// measured in the same run on the same weights and tokens (docs/design.md §8: speed is measured by
// benchmarks, never by timed tests, and always against the alternative a user has).
//
// What is compared. The matrix is K_sa = ∂vec SA(Y)/∂vec Y at Y = X (paper Eq. 10): the Jacobian
// of BARE multi-head self-attention (qkv and proj Linears with biases, logits scaled by
// 1/sqrt(d_h)), without LayerNorm and without residual, so that both routes differentiate
// exactly the same function and nothing but the method differs. Weights come from init_block
// (timm by default, seed 0; layer 0, hidden 4d), tokens X ~ N(0, 1)^{n×d} (gaussian_tokens).
// Both are written to DIR/size-N/{weights,tokens}.safetensors in fp64, and the Python side
// reads those very files.
//
//   jacond exact κ      forward + closed-form dense K (attention_jacobian) + condition_fast:
//                       LU (2/3 N³, BLAS-3) and Lanczos for σ_max and σ_min, N = n·d.
//   jacond full spectrum forward + dense K + condition_svd (LAPACKE dgesdd, all σ).
//   jacond exact, GPU   with --device cuda: the same assembly (host) + the CUDA twin of
//                       condition_fast (analysis/cuda/dense_cuda.h); its time against the CPU exact
//                       route's is the GPU speed-up (cpu_exact_over_this), and its κ must agree
//                       with the CPU's to the tolerance below.
//   jacond mixed κ      forward + dense K rounded to fp32 + condition_mixed (analysis/spectral/
//                       mixed_lu.h): the fp32 LU refined to fp64 against the matrix-free K_sa
//                       operator; with --device cuda also on the device. Each is compared with the
//                       CPU exact route (cpu_exact_over_this, kappa_rel_diff_vs_cpu_exact).
//   torch               experiments/bench/torch_dense_route.py in a subprocess:
//                       torch.autograd.functional.jacobian(SA, X) (one reverse pass per output
//                       entry), reshape to (nd, nd), torch.linalg.svdvals, κ = s[0]/s[-1], fp64.
//
// Why that Python route: it is the code found in tutorials and forum answers for "condition
// number of a Jacobian" — the stock autograd helper plus the stock dense singular values, with
// default arguments, written straight from the model definition (timm's Attention.forward).
// It needs no knowledge of the closed form, so it is what a researcher would otherwise run.
// It gets the same thread count (torch.set_num_threads and the OMP/OpenBLAS/MKL variables) and
// its timings exclude interpreter start-up and file loading (both are recorded apart).
//
// κ agreement: both sides compute the singular values of K in fp64 with backward-stable
// methods, from Jacobians assembled differently (closed form vs autograd), so each σ moves by
// O(eps·σ_max): σ_max agrees to O(eps) relative, σ_min to O(eps·κ) relative. The check is
//   |κ_a − κ_b| / κ_b ≤ tol(κ) = max(1e-6, C·eps·κ),  C = 45,
// i.e. 1e-6 up to κ ≈ 1e8 (C·eps·1e8 ≈ 1e-6) and growing like eps·κ beyond, where no fp64
// method can do better. When σ_min is under the noise floor max(N)·eps·σ_max (status
// `singular`), κ is not a number either route can give: both must then call it singular.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_device.h"

namespace jacond::cli {

/// `jacond bench dense [options]` (argv[0] = "dense").
int run_bench_dense(int argc, char** argv);

namespace bench_dense {

constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kKappaRelTolFloor = 1e-6;  // relative κ agreement while eps·κ is small
constexpr double kKappaTolFactor = 45.0;    // C in max(1e-6, C·eps·κ): 1e-6 at κ ≈ 1e8


struct Shape {
  Index n = 0, d = 0, heads = 0;
  Index N() const { return n * d; }
};

// The standard sizes of the benchmark: N = n·d -> (n, d, heads); every one has d_h = 16.
const std::map<Index, Shape>& standard_sizes();

/// Parses "1024,3200" into standard shapes; std::invalid_argument names --sizes.
std::vector<Shape> parse_sizes(const std::string& spec);

// One route's timings and spectrum ends for one size (the best of --repeat runs by total).
struct RouteResult {
  std::string route, method;
  double assembly_s = 0, kappa_s = 0, total_s = 0, total_median_s = 0;
  double sigma_max = 0, sigma_min = 0, kappa = 0;
  Status status = Status::kExact;
  std::string note;
  bool ran = false;
};

struct TorchResult {
  RouteResult route;
  double wall_s = 0;  // whole subprocess: interpreter start, imports, loading, repeats
  std::string torch_version;
  int threads = 0;
  nlohmann::json raw;
};

/// Whether a route returned κ: status exact or certified, or singular (K is singular: κ = ∞, an
/// answer too). A not-converged route (the mixed route whose refinement failed, mixed_lu.h) bought
/// no κ with its time, so it has no speed ratio and no κ agreement.
inline bool gave_kappa(const RouteResult& r) {
  return r.ran && (r.status == Status::kExact || r.status == Status::kCertified || r.status == Status::kSingular);
}

/// num's total seconds over den's (how many times faster den is): NaN unless both routes gave κ,
/// so that no table or CSV cell holds a speed-up of a route that failed (printed "n/a", left empty).
inline double speed_ratio(const RouteResult& num, const RouteResult& den) {
  if (!gave_kappa(num) || !gave_kappa(den) || !(den.total_s > 0)) return std::numeric_limits<double>::quiet_NaN();
  return num.total_s / den.total_s;
}

struct Agreement {
  bool checked = false, pass = true;
  double rel_diff = std::numeric_limits<double>::quiet_NaN();
  double tol = std::numeric_limits<double>::quiet_NaN();
  // PASS, FAIL, n/a, or "no kappa" (a route did not give one: a possible outcome, not a
  // disagreement, so pass stays true and the run does not fail for it)
  std::string verdict = "n/a";
  std::string why;
};
inline const std::string kNoKappa = "no kappa";

/// A route measured against the CPU exact one (the device's exact route, the mixed routes).
struct VersusExact {
  RouteResult route;
  Agreement agreement;
};

struct SizeResult {
  Shape shape;
  double logit_scale = 0;
  std::string dir;
  RouteResult exact, full;
  /// jacond-mixed-kappa; with --device cuda also jacond-exact-kappa-cuda (and -assembled, where
  /// LibTorch has CUDA), each again with every kCudaSweepVariants sweep, and jacond-mixed-kappa-cuda.
  std::vector<VersusExact> versus_exact;
  std::optional<TorchResult> torch;
  Agreement exact_vs_torch, full_vs_torch, exact_vs_full;
  bool torch_failed = false;
  /// Every κ comparison of this size.
  std::vector<const Agreement*> agreements() const {
    std::vector<const Agreement*> all{&exact_vs_torch, &full_vs_torch, &exact_vs_full};
    for (const auto& v : versus_exact) all.push_back(&v.agreement);
    return all;
  }
  bool pass() const {
    bool ok = !torch_failed;
    for (const Agreement* g : agreements()) ok = ok && g->pass;
    return ok;
  }
  /// The main table's "agree" for this size: FAIL if anything failed (pass()); else the verdict of
  /// its own comparisons (exact/full against torch, or exact against full): "no kappa" where a route
  /// gave none, "n/a" where nothing was compared (--skip-python --skip-full), PASS otherwise. The
  /// routes against the CPU exact one have their own column; a PASS here never stands for a
  /// comparison that was not made.
  std::string verdict() const {
    if (!pass()) return "FAIL";
    bool compared = false;
    for (const Agreement* g : {&exact_vs_torch, &full_vs_torch, &exact_vs_full}) {
      if (g->verdict == kNoKappa) return kNoKappa;
      compared = compared || g->checked;
    }
    return compared ? "PASS" : "n/a";
  }
};

/// What run_jacond_route computes after the assembly: condition_fast, condition_svd, or
/// condition_mixed (K rounded to fp32, residuals by the matrix-free K_sa operator); or
/// kExactAssembled: condition_fast_assembled, K assembled on the device from the products of its
/// operator twin (no host K; what `jacond block --device cuda` runs with a CUDA LibTorch).
enum class JacondRoute { kExact, kFull, kMixed, kExactAssembled };

/// "jacond-exact-kappa" / "jacond-full-spectrum" / "jacond-mixed-kappa" on the host, with
/// "-<device>" appended elsewhere; kExactAssembled: "jacond-exact-kappa-<device>-assembled".
std::string route_name(JacondRoute route, const DenseDevice& device);

/// The CUDA exact route's σ_min sweeps that --device cuda times besides the default (getrs), each
/// a row "<route>-<sweep>": JACOND_CUDA_LU_SOLVES's other values (analysis/cuda/dense_cuda.h,
/// LuSolves), which the device's measurement chooses between.
inline const std::vector<std::string> kCudaSweepVariants = {"trsv", "trtri"};

/// jacond in-process: forward + dense K + the route's κ on `device`, the best of `repeat`.
/// kExactAssembled needs `operators`, the device's operator twin (std::invalid_argument without it,
/// std::runtime_error where the device declines the assembly). `lu_solves` (a CUDA exact route):
/// JACOND_CUDA_LU_SOLVES for the duration of the call, appended to the route's name; "" on a CUDA
/// device: getrs, the default (so a variable the user set does not mislabel the row).
RouteResult run_jacond_route(const BlockWeights& w, const Mat& X, JacondRoute route, int repeat,
                             const DenseDevice& device = *cpu_dense_device(), const OperatorDevice* operators = nullptr,
                             const std::string& lu_solves = "");

/// The Python route (torch_dense_route.py) in a subprocess on DIR/{weights,tokens}.safetensors.
TorchResult run_torch_route(const std::string& python, const std::string& script, const std::string& dir,
                            const Shape& s, double logit_scale, int threads, int repeat);

/// κ agreement of two routes (see the header comment).
Agreement compare(const RouteResult& a, const RouteResult& b);

/// The stdout tables (times and ratios; the time split; with a device, GPU against CPU).
void print_tables(const std::vector<SizeResult>& results);

/// DIR/bench_dense.csv and DIR/run.json, both atomic.
void write_outputs(const std::string& out_dir, int argc, char** argv, const std::vector<SizeResult>& results,
                   const std::string& init, uint64_t seed, int threads, int repeat, const std::string& python,
                   const std::string& script, bool skip_python, const std::string& error, const DenseDevice* device = nullptr);

}  // namespace bench_dense
}  // namespace jacond::cli
