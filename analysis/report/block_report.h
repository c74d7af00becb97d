// All condition reports of one block at one input: the matrices of `jacond block`.
//
//   K_sa, B_sa, E_sa  bare attention at its input LN1(X) and its Prop. 2 split (nd × nd)
//   K_sab             X -> SA(LN1 X) (+ X)                                     (nd × nd)
//   K_mlp             bare MLP at its input LN2(X1)        (token block-diagonal)
//   K_ffn             X1 -> MLP(LN2 X1) (+ X1)             (token block-diagonal)
//   softmax           ∂vec A_h/∂vec M_h per head, block diagonal over rows (n² × n²)
//   attention         the attention map A_h per head (n × n)
//
// Without a residual, K_sab and K_ffn inherit LayerNorm's structural nullspace (span{1} per
// token exactly, span{x̂} per token up to eps/(var+eps)): they are reported over the full space
// (status singular) and again restricted to the complement of that nullspace, with
// space = "ln-complement". The softmax Jacobian always kills 1: it is reported over the full
// space and on space = "ones-complement".
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/operators/operator_device.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/dense_cost.h"
#include "analysis/spectral/dense_device.h"
#include "analysis/spectral/gkl.h"
#include "analysis/spectral/inertia.h"

namespace jacond {

/// How κ of the nd × nd matrices is computed:
///   kFast     dense, exact: LU/QR + Lanczos (condition_fast; K_mlp/K_ffn per-token SVDs)
///   kSvd      dense, exact: the full spectrum
///   kMixed    dense, exact: the LU of the matrix in fp32 (half the memory and the factorisation
///             time of kFast), each solve refined to fp64 against the matrix-free operator
///             (analysis/spectral/mixed_lu.h); where the refinement fails (κ·u₃₂ too large) the
///             matrix takes kFast, noted. Non-square matrices (ln-complements) take kFast.
///   kLanczos  matrix-free certified bracket (analysis/spectral/gkl.h) on the operators of
///             analysis/operators/operators.h: K_sa, B_sa, E_sa, K_sab, K_mlp, K_ffn (and ln-complements)
///   kSchur    exact on the host by the Schur route (analysis/spectral/schur_lu.h: a block LU in the
///             fewest of 2 … 8 pieces that fit, their Schur complements dense, 8 N²/p bytes, the
///             off-diagonal blocks matrix-free) for K_sa, B_sa, E_sa and K_sab; kFast takes it by
///             itself past BlockReportOptions::host_memory_bytes. The
///             skipless K_sab (whose LayerNorm-complement row restricts a host matrix) takes kLanczos
///   kAuto     kFast when the matrix fits the dense route's memory and time budget on the chosen
///             device (DenseDevice::fits, analysis/spectral/dense_device.h); on the host, kSchur
///             when the Schur route in the piece count it would take fits host_memory_bytes (capped
///             by dense_max_bytes where set) and the time budget (schur_route_cost); else kLanczos,
///             except for K_mlp / K_ffn, exact by their per-token blocks wherever those fit
///             (auto_takes_tokenwise)
/// Softmax (n² × n², block diagonal over rows) and attention (n × n) per head stay dense.
enum class KappaRoute { kFast, kSvd, kMixed, kLanczos, kAuto, kSchur };

/// The one `auto` rule of jacond (block, sweep, audit, train tracking; spectrum applies it to the
/// SVD route), stated in analysis/spectral/dense_cost.h: a rows × cols matrix takes the dense route
/// when condition_fast's working memory and predicted time fit `budget` at `threads` threads.
bool auto_prefers_dense(Index rows, Index cols, const DenseBudget& budget, int threads);

/// The matrices block_reports computes (the `matrix` column), in report order:
/// K_sa B_sa E_sa K_sab K_mlp K_ffn softmax attention (Jacobians, per-head maps), then the n × d
/// token matrices of "Always Skip Attention" §4: X_in, LN1_out, SA_out = SA(LN1 X),
/// SAB_out = X + SA_out, LN2_out, FFN_out = MLP(LN2 X1), FFN_block_out = X1 + FFN_out (the two
/// "_out" with a residual carry it whatever the block's skip mode; X1 is the real SAB output).
const std::vector<std::string>& block_matrix_names();

/// The matrices post_norm_block_reports computes: K_sa B_sa E_sa softmax attention.
const std::vector<std::string>& post_norm_matrix_names();

/// Parses a comma list such as "K_sab,K_ffn,softmax" into names, each checked against
/// `valid` (std::invalid_argument naming the first unknown one and listing the valid ones);
/// "" or "all" gives {} (= every matrix).
std::vector<std::string> parse_matrix_names(const std::string& spec, const std::vector<std::string>& valid);

/// "auto" | "dense" (= "fast") | "fast" | "svd" | "mixed" | "lanczos"; anything else throws
/// std::invalid_argument naming the value.
KappaRoute parse_kappa_route(const std::string& s);
std::string to_string(KappaRoute r);

struct BlockReportOptions {
  KappaRoute route = KappaRoute::kFast;
  /// The matrices to compute (names of block_matrix_names()); empty: all. A matrix not asked
  /// for is never assembled, applied or solved.
  std::vector<std::string> matrices;
  /// Per-matrix budget of either route: kLanczos stops at lanczos.max_seconds / max_products, and
  /// kAuto takes the dense route when its predicted time is within lanczos.max_seconds and its
  /// memory within dense_max_bytes (0: half of physical memory).
  GklOptions lanczos;
  double dense_max_bytes = 0;
  /// What the dense routes may hold on the host (0: 90 % of physical memory). An nd × nd matrix of
  /// kFast whose full route (fast_route_cost: K and a copy) exceeds it takes the Schur route on the
  /// host instead (analysis/spectral/schur_lu.h: the fewest pieces whose Schur complements fit,
  /// N²/p entries; where dense_max_bytes is set, it caps them too), and one for which nothing fits
  /// is refused naming the sizes. On another dense device (`device`) such a matrix, when the device
  /// does not assemble it itself (condition_fast_assembled), is refused naming the sizes and the
  /// device: its host copy would not fit.
  double host_memory_bytes = 0;
  /// Inertia-count certificates (analysis/spectral/inertia.h) of the nd × nd matrices: kInertia
  /// always, kAuto when three counts fit the same budget (memory and 3 × predicted seconds).
  /// The dense route certifies K_sa, B_sa, E_sa, K_sab (its K_mlp / K_ffn are exact per-token
  /// spectra already); the lanczos route certifies every bracket, K_mlp / K_ffn included.
  CertifyMode certify = CertifyMode::kNone;
  /// kLanczos warm starts, keyed "matrix/space" (e.g. "K_sab/full"): read if present, then
  /// overwritten with this call's vectors, so a sweep or a series of checkpoints can chain.
  std::map<std::string, GklWarmStart>* warm = nullptr;
  /// Where the dense routes (kFast, kSvd, kMixed) run (analysis/spectral/dense_device.h); null: the host.
  /// Assembly, the token block-diagonal K_mlp / K_ffn, the per-head matrices and the
  /// certificates stay on the host.
  std::shared_ptr<const DenseDevice> device;
  /// Where the kLanczos route's products run (analysis/operators/operator_device.h); null: the
  /// host kernels. The GKL recurrence and its brackets stay on the host; such reports say
  /// method gkl-<device name>.
  std::shared_ptr<const OperatorDevice> operator_device;
  /// Called before each dense κ of an assembled nd × nd matrix (K_sa, B_sa, E_sa, K_sab by kFast,
  /// kSvd or kMixed; optional): the caller's cancellation point between factorisations, which are
  /// single LAPACK calls that cannot stop midway. It may throw to abandon the call (the Python
  /// module raises KeyboardInterrupt through it); the reports made so far go with the exception.
  std::function<void()> before_dense_solve;
  /// Called inside a dense κ that has steps of its own (optional): the Schur route, the host's or a
  /// dense device's, before each panel of each piece and each solve (34 minutes for ViT-S's K_sa in
  /// three pieces on 2 cores; only its LU calls cannot stop midway), and the token block-diagonal
  /// K_mlp / K_ffn before each token's block (n SVDs of d × d: 20 s a matrix at ViT-B). It may
  /// throw to abandon the call, as before_dense_solve.
  std::function<void()> within_dense_solve;
  /// `route` was resolved from kAuto by the caller (resolve_auto: a front end that prints or
  /// flavours the route first): block_reports still applies auto's per-token rule to K_mlp / K_ffn
  /// (auto_takes_tokenwise).
  bool resolved_from_auto = false;
};

/// The reports of a post-norm block, whose attention sees the block input Y itself (no LayerNorm
/// before the branch): K_sa, B_sa, E_sa at Y by the route block_reports would take for them
/// (resolve_route: dense, mixed, or matrix-free with the same warm starts, operator device and
/// certificates), and per head the softmax Jacobian and the attention map; only those of
/// opt.matrices. Another name in opt.matrices (K_sab, ...: a post-norm block has no LayerNorm
/// before its branches) is std::invalid_argument naming it.
std::vector<ConditionReport> post_norm_block_reports(const BlockWeights& w, const Mat& Y, const BlockReportOptions& opt = {});

/// True when `matrix` is among opt.matrices (or opt.matrices is empty).
bool wants(const BlockReportOptions& opt, const std::string& matrix);

/// The route block_reports takes for an n × d input (resolves kAuto by opt.device's fits).
KappaRoute resolve_route(const BlockReportOptions& opt, Index n, Index d);

/// resolve_route into opt.route, remembering (resolved_from_auto) when it was kAuto.
void resolve_auto(BlockReportOptions& opt, Index n, Index d);

/// K_mlp and K_ffn are token block-diagonal, so their exact spectra are n SVDs of d × d
/// (condition_blockdiag), O(n d²·hidden) flops and 8 n d² bytes a matrix: under kAuto they take
/// that route wherever it fits the budget (tokenwise_route_cost against dense_max_bytes and the
/// per-matrix lanczos seconds), whatever route the nd × nd matrices resolve to (also when a caller
/// resolved kAuto itself: resolved_from_auto). (At ViT-B
/// skipless on 2 threads: exact in 59 s for K_mlp, K_ffn and its restriction, where the lanczos
/// route spent 3 × 120 s and placed no σ_min.) Any other route keeps them on its own way: dense
/// routes per token, kLanczos through their operators.
bool auto_takes_tokenwise(const BlockReportOptions& opt, Index n, Index d, Index hidden);

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt = {});

/// True when block_reports certifies an N × N matrix under `opt`: opt.certify, and for `auto` the
/// device's fits(DenseRoute::kInertia) within the budget (opt.device; null: the host's cost model).
bool wants_certificate(const BlockReportOptions& opt, Index rows, Index cols);

/// What `auto` chooses for an n × d block (hidden: the MLP width, 0 where no K_mlp / K_ffn is
/// asked for), as "route=…; tokenwise=yes|no; certify=yes|no": only the parts auto decides ("" when
/// neither the route nor opt.certify is auto). The choices rest on the thread count, the memory
/// and the Lanczos budget as well as the sizes, so two machines can choose differently for one
/// grid: sharded runs record them (run.json "auto_decisions") and `jacond merge` refuses shards
/// whose choices differ.
std::string auto_decisions(const BlockReportOptions& opt, Index n, Index d, Index hidden);

/// κ of a dense matrix by the chosen route on `device` (null: the host; kLanczos runs GKL on the
/// dense matrix, on the host, with `gkl`'s budget and progress hook; kMixed refines against A
/// itself; kAuto by device->fits with the default budget).
ConditionReport condition_dense(Mat A, const std::string& name, KappaRoute route,
                                const std::shared_ptr<const DenseDevice>& device = nullptr, const GklOptions& gkl = {});

/// Spectral norm of E_sa and σ_min of B_sa etc. are read from the reports; this finds one.
const ConditionReport& find_report(const std::vector<ConditionReport>& reports, const std::string& matrix,
                                   const std::string& space = "full", int head = -1);

}  // namespace jacond
