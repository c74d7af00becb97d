#include "analysis/report/block_report.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "analysis/core/threads.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/host_token_map.h"
#include "analysis/operators/operators.h"
#include "analysis/spectral/schur_lu.h"

namespace jacond {

KappaRoute parse_kappa_route(const std::string& s) {
  if (s == "auto") return KappaRoute::kAuto;
  if (s == "dense" || s == "fast") return KappaRoute::kFast;
  if (s == "svd") return KappaRoute::kSvd;
  if (s == "mixed") return KappaRoute::kMixed;
  if (s == "lanczos") return KappaRoute::kLanczos;
  if (s == "schur") return KappaRoute::kSchur;
  throw std::invalid_argument("unknown kappa method '" + s + "' (expected auto|dense|fast|svd|mixed|schur|lanczos)");
}

std::string to_string(KappaRoute r) {
  switch (r) {
    case KappaRoute::kFast: return "dense";
    case KappaRoute::kSvd: return "svd";
    case KappaRoute::kMixed: return "mixed";
    case KappaRoute::kLanczos: return "lanczos";
    case KappaRoute::kAuto: return "auto";
    case KappaRoute::kSchur: return "schur";
  }
  return "?";
}

const std::vector<std::string>& block_matrix_names() {
  static const std::vector<std::string> names{"K_sa",   "B_sa",    "E_sa",   "K_sab",   "K_mlp",   "K_ffn",
                                              "softmax", "attention", "X_in", "LN1_out", "SA_out", "SAB_out",
                                              "LN2_out", "FFN_out", "FFN_block_out"};
  return names;
}

const std::vector<std::string>& post_norm_matrix_names() {
  static const std::vector<std::string> names{"K_sa", "B_sa", "E_sa", "softmax", "attention"};
  return names;
}

std::vector<std::string> parse_matrix_names(const std::string& spec, const std::vector<std::string>& valid) {
  std::vector<std::string> out;
  if (spec == "all") return out;  // empty `out` means every matrix
  // An empty list or name ("", "K_sa,", "K_sa,,B_sa") is a typo, not "all".
  if (spec.empty() || spec.back() == ',') throw std::invalid_argument("empty matrix name in '" + spec + "'");
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) throw std::invalid_argument("empty matrix name in '" + spec + "'");
    if (std::find(valid.begin(), valid.end(), name) == valid.end()) {
      std::string list;
      for (const auto& k : valid) list += (list.empty() ? "" : " ") + k;
      throw std::invalid_argument("unknown matrix '" + name + "' (valid: " + list + ")");
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

bool wants(const BlockReportOptions& opt, const std::string& matrix) {
  return opt.matrices.empty() || std::find(opt.matrices.begin(), opt.matrices.end(), matrix) != opt.matrices.end();
}

bool auto_prefers_dense(Index rows, Index cols, const DenseBudget& budget, int threads) {
  return fits(fast_route_cost(rows, cols, threads), budget);
}

namespace {
const DenseDevice& device_or_host(const std::shared_ptr<const DenseDevice>& device) {
  return device ? *device : *cpu_dense_device();
}

// What the host's dense routes may hold: host_memory_bytes (0: 90 % of physical memory; 0 where
// sysconf cannot say).
double host_memory(const BlockReportOptions& opt) {
  return opt.host_memory_bytes > 0 ? opt.host_memory_bytes : 0.9 * physical_memory_bytes();
}

// What the host's Schur route may hold: host_memory, capped by dense_max_bytes where that is set.
// One rule for auto's choice (resolve_route) and the route's own plan (host_schur_plan), so auto's
// time check is of the piece count that then runs.
double schur_memory(const BlockReportOptions& opt) {
  const double host = host_memory(opt);
  return opt.dense_max_bytes > 0 && (host <= 0 || opt.dense_max_bytes < host) ? opt.dense_max_bytes : host;
}
}  // namespace

KappaRoute resolve_route(const BlockReportOptions& opt, Index n, Index d) {
  if (opt.route != KappaRoute::kAuto) return opt.route;
  const DenseBudget budget{opt.dense_max_bytes, opt.lanczos.max_seconds};
  if (device_or_host(opt.device).fits(DenseRoute::kFast, n * d, n * d, budget)) return KappaRoute::kFast;
  const bool on_host = !opt.device || opt.device->name() == "cpu";
  const Index pieces = on_host ? schur_pieces_within(n * d, schur_memory(opt)) : 0;
  if (pieces > 0 && schur_route_cost(n * d, get_threads(), pieces).seconds <= budget.max_seconds)
    return KappaRoute::kSchur;
  return KappaRoute::kLanczos;
}

void resolve_auto(BlockReportOptions& opt, Index n, Index d) {
  opt.resolved_from_auto = opt.resolved_from_auto || opt.route == KappaRoute::kAuto;
  opt.route = resolve_route(opt, n, d);
}

bool auto_takes_tokenwise(const BlockReportOptions& opt, Index n, Index d, Index hidden) {
  return (opt.route == KappaRoute::kAuto || opt.resolved_from_auto) &&
         fits(tokenwise_route_cost(n, d, hidden, get_threads()), DenseBudget{opt.dense_max_bytes, opt.lanczos.max_seconds});
}

bool wants_certificate(const BlockReportOptions& opt, Index rows, Index cols) {
  if (opt.certify == CertifyMode::kNone) return false;
  if (opt.certify == CertifyMode::kInertia) return true;
  return device_or_host(opt.device).fits(DenseRoute::kInertia, rows, cols,
                                         DenseBudget{opt.dense_max_bytes, opt.lanczos.max_seconds});
}

std::string auto_decisions(const BlockReportOptions& opt, Index n, Index d, Index hidden) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  const auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
  if (opt.route == KappaRoute::kAuto || opt.resolved_from_auto) {
    add("route=" + to_string(resolve_route(opt, n, d)));
    if (hidden > 0) add("tokenwise=" + yes_no(auto_takes_tokenwise(opt, n, d, hidden)));
  }
  if (opt.certify == CertifyMode::kAuto) add("certify=" + yes_no(wants_certificate(opt, n * d, n * d)));
  return out;
}

namespace {

std::string gigabytes(double bytes) {
  std::ostringstream os;
  os.precision(3);
  os << bytes / 1e9 << " GB";
  return os.str();
}

// A report certified by inertia counts (analysis/spectral/inertia.h) on opt's device; `dense`
// assembles K only when a count needs it (not for a singular report). A certificate the host
// cannot hold (K and H_μ: inertia_count_cost's bytes past physical memory, which an explicit
// --certify inertia can ask for) leaves the report uncertified with a note naming the memory,
// instead of failing the run on an allocation.
template <typename Dense>
ConditionReport with_certificate(ConditionReport r, const Dense& dense, const ClaimedExtremes& claim,
                                 const BlockReportOptions& opt) {
  const double bytes = inertia_count_cost(r.rows, r.cols, 1).bytes, memory = physical_memory_bytes();
  if (r.status != Status::kSingular && bytes > memory) {
    r.note += (r.note.empty() ? "" : "; ") + std::string("not certified: the inertia counts need ") + gigabytes(bytes) +
              " (K and the augmented matrix), more than this machine's " + gigabytes(memory);
    return r;
  }
  const DenseDevice& device = device_or_host(opt.device);
  if (r.status == Status::kSingular) return certify_report(r, Mat(), claim, device);
  const Mat& K = dense();  // a reference to the caller's matrix, or the temporary kept alive
  return certify_report(r, K, claim, device);
}

// kMixed's fallback: the fp64 LU route (`dense` assembles the matrix again) when the refinement
// failed and the device holds the fp64 matrix; otherwise the not-converged report stands.
template <typename Dense>
ConditionReport unless_refinement_failed(ConditionReport mixed, const DenseDevice& dev, const Dense& dense) {
  if (mixed.status != Status::kNotConverged || !dev.fits(DenseRoute::kFast, mixed.rows, mixed.cols, DenseBudget{}))
    return mixed;
  ConditionReport r = dev.condition_fast(dense(), mixed.matrix);
  r.note = mixed.note + "; fp64 LU route used" + (r.note.empty() ? "" : "; " + r.note);
  r.seconds += mixed.seconds;
  return r;
}

}  // namespace

ConditionReport condition_dense(Mat A, const std::string& name, KappaRoute route,
                                const std::shared_ptr<const DenseDevice>& device, const GklOptions& gkl) {
  // A is taken by value and moved on: condition_fast factorises its argument in place, so a
  // temporary (or a matrix the caller is done with) is never copied (80 MB at n·d = 3200).
  const DenseDevice& dev = device_or_host(device);
  switch (route) {
    case KappaRoute::kSvd: return dev.condition_svd(std::move(A), name);
    case KappaRoute::kMixed: {
      if (A.rows() != A.cols()) break;  // the mixed route is for square matrices
      const DenseMatrixOp op(A);
      ConditionReport mixed = dev.condition_mixed(A.cast<float>(), linear_map(op), name);
      return unless_refinement_failed(std::move(mixed), dev, [&] { return std::move(A); });
    }
    case KappaRoute::kLanczos: return condition_lanczos(DenseMatrixOp(A), name, gkl).report;
    case KappaRoute::kAuto:
      if (!dev.fits(DenseRoute::kFast, A.rows(), A.cols(), DenseBudget{})) return condition_lanczos(DenseMatrixOp(A), name, gkl).report;
      break;
    case KappaRoute::kFast:
    case KappaRoute::kSchur: break;  // A is assembled already: the full route
  }
  return dev.condition_fast(std::move(A), name);
}

namespace {

// Per-token restriction of a token block-diagonal Jacobian to the LN complement.
std::vector<Mat> restrict_blocks(const std::vector<Mat>& blocks, const std::vector<Mat>& bases) {
  std::vector<Mat> out(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) out[i] = blocks[i] * bases[i];
  return out;
}

// A device's twin of a block operator (on_operator): TokenMapOp's products on host vectors, for
// LnComplementOp and the explicit checks, and the device's Krylov space, where it keeps GKL's
// basis beside its products (empty: the host keeps the basis).
class DeviceOperator : public TokenMapOp {
 public:
  DeviceOperator(const TokenMap& map, KrylovSpace space) : TokenMapOp(map), space_(std::move(space)) {}
  const KrylovSpace& space() const { return space_; }

 private:
  KrylovSpace space_;
};

// condition_lanczos on an operator; a device operator on its device's Krylov space when it has one.
template <typename Op>
LanczosCondition bracket(const Op& op, const std::string& matrix, const GklOptions& gkl, const GklWarmStart& start) {
  return condition_lanczos(op, matrix, gkl, start);
}
LanczosCondition bracket(const DeviceOperator& op, const std::string& matrix, const GklOptions& gkl,
                         const GklWarmStart& start) {
  if (op.space().make_basis) return condition_lanczos(op.space(), matrix, gkl, start);
  return condition_lanczos(static_cast<const TokenMapOp&>(op), matrix, gkl, start);
}

// κ bracket of one operator, with the caller's warm starts (read, then overwritten); certified
// by inertia counts on the assembled matrix (`dense`, called only then) when opt asks for it.
template <typename Op, typename Dense>
ConditionReport lanczos_report(const Op& op, const std::string& matrix, const std::string& space,
                               const BlockReportOptions& opt, const Dense& dense) {
  const std::string key = matrix + "/" + space;
  GklWarmStart start;
  if (opt.warm) {
    auto it = opt.warm->find(key);
    if (it != opt.warm->end()) start = it->second;
  }
  LanczosCondition r = bracket(op, matrix, opt.lanczos, start);
  if (opt.warm) (*opt.warm)[key] = r.warm;
  r.report.space = space;
  if (opt.operator_device) r.report.method += "-" + opt.operator_device->name();  // on_operator's device
  if (!wants_certificate(opt, op.rows(), op.cols())) return r.report;
  return with_certificate(r.report, dense,
                          ClaimedExtremes::bracket(r.smallest.lo, r.smallest.hi, r.largest.lo, r.largest.hi), opt);
}

// K_sa and its Prop. 2 split B_sa + E_sa (paper Eq. 10/13), by name.
constexpr std::pair<const char*, AttentionPart> kAttentionParts[] = {
    {"K_sa", AttentionPart::kFull}, {"B_sa", AttentionPart::kB}, {"E_sa", AttentionPart::kE}};

// The ln-complement row of a sub-block: LnComplementOp over the host operator; on a device with
// its own restriction (OperatorDevice::ln_complement), that map and its Krylov space, so the
// skipless rows keep GKL's basis on the device too (else LnComplementOp over its products).
template <typename Op, typename Dense>
void ln_complement_row(const Op& op, const LayerNormComplement& basis, const std::string& name,
                       const BlockReportOptions& opt, const Dense& restricted, std::vector<ConditionReport>& out) {
  out.push_back(lanczos_report(LnComplementOp<Op>(op, basis), name, "ln-complement", opt, restricted));
}
template <typename Dense>
void ln_complement_row(const DeviceOperator& op, const LayerNormComplement& basis, const std::string& name,
                       const BlockReportOptions& opt, const Dense& restricted, std::vector<ConditionReport>& out) {
  const std::unique_ptr<TokenMap> map = opt.operator_device->ln_complement(op.map(), basis);
  if (!map) {
    out.push_back(lanczos_report(LnComplementOp<DeviceOperator>(op, basis), name, "ln-complement", opt, restricted));
    return;
  }
  out.push_back(lanczos_report(DeviceOperator(*map, opt.operator_device->krylov_space(*map)), name, "ln-complement",
                               opt, restricted));
}

// A pre-norm sub-block (K_sab or K_ffn) through its operator: over the full space, and, without
// its residual, restricted to the complement of its LayerNorm's structural nullspace. `dense`
// assembles the full-space matrix for a certificate.
template <typename Op, typename Dense>
void lanczos_subblock(const Op& op, const std::string& name, const LayerNormCache& ln, bool residual,
                      const BlockReportOptions& opt, const Dense& dense, std::vector<ConditionReport>& out) {
  out.push_back(lanczos_report(op, name, "full", opt, dense));
  if (residual || ln.x_hat.cols() < 3) return;
  const LayerNormComplement basis(ln.x_hat);
  const auto restricted = [&] {
    return right_multiply_tokenwise(dense(), ln.x_hat.rows(), layernorm_complement_bases(ln.x_hat));
  };
  ln_complement_row(op, basis, name, opt, restricted, out);
}

// Runs `solve` on the operator of `matrix`: the host's (`host()`, analysis/operators/operators.h)
// or, with opt.operator_device, the device's twin with its Krylov space (lanczos_report then names
// the device; its brackets keep GKL's basis on the device, the ln-complement ones too where the
// device restricts its maps itself: ln_complement_row).
template <typename HostOp, typename Solve>
void on_operator(const BlockReportOptions& opt, const BlockWeights& w, const BlockForward& f, const std::string& matrix,
                 const HostOp& host, const Solve& solve) {
  if (!opt.operator_device) return solve(host());
  const std::unique_ptr<TokenMap> map = opt.operator_device->block_operator(w, f, matrix);
  solve(DeviceOperator(*map, opt.operator_device->krylov_space(*map)));
}

// K_sab's rows through its operator (the full space, and the LayerNorm complement when skipless).
void lanczos_sab_reports(const BlockWeights& w, const BlockForward& f, SkipMode skip, const BlockReportOptions& opt,
                         std::vector<ConditionReport>& out) {
  const auto sab = [&] { return sab_jacobian(w, f); };
  on_operator(
      opt, w, f, "K_sab", [&] { return SabJacobianOp(w, f); },
      [&](const auto& op) { lanczos_subblock(op, "K_sab", f.ln1, sab_residual(skip), opt, sab, out); });
}

// The token block-diagonal K_mlp, K_ffn through their operators (the lanczos route).
void lanczos_tokenwise_reports(const BlockWeights& w, const BlockForward& f, SkipMode skip,
                               const BlockReportOptions& opt, std::vector<ConditionReport>& out) {
  const auto ffn = [&] { return ffn_jacobian(w, f).to_dense(); };
  if (wants(opt, "K_mlp"))
    on_operator(
        opt, w, f, "K_mlp", [&] { return MlpJacobianOp(w, f.mlp); },
        [&](const auto& op) {
          out.push_back(lanczos_report(op, "K_mlp", "full", opt, [&] { return mlp_jacobian(w, f.mlp).to_dense(); }));
        });
  if (wants(opt, "K_ffn"))
    on_operator(
        opt, w, f, "K_ffn", [&] { return FfnJacobianOp(w, f); },
        [&](const auto& op) { lanczos_subblock(op, "K_ffn", f.ln2, ffn_residual(skip), opt, ffn, out); });
}

// κ of one assembled nd × nd matrix by `route`, certified when opt asks for it (the factorisation
// then works on a copy: the counts need K itself).
ConditionReport dense_report(Mat K, const std::string& name, KappaRoute route, const BlockReportOptions& opt) {
  if (opt.before_dense_solve) opt.before_dense_solve();
  if (!wants_certificate(opt, K.rows(), K.cols())) return condition_dense(std::move(K), name, route, opt.device);
  const ConditionReport r = condition_dense(K, name, route, opt.device);
  return with_certificate(r, [&]() -> const Mat& { return K; }, ClaimedExtremes::estimate(r.sigma_min, r.sigma_max), opt);
}

// kMixed on one square matrix: `dense32` assembles its fp32 rounding, factorised on the device;
// residuals by its matrix-free fp64 operator `op`; `dense` assembles it in fp64 only for a fallback
// or a certificate.
template <typename Op, typename Dense, typename Dense32>
ConditionReport mixed_report(const Op& op, const std::string& name, const BlockReportOptions& opt, const Dense& dense,
                             const Dense32& dense32) {
  if (opt.before_dense_solve) opt.before_dense_solve();
  const DenseDevice& dev = device_or_host(opt.device);
  const ConditionReport r = unless_refinement_failed(dev.condition_mixed(dense32(), linear_map(op), name), dev, dense);
  if (r.status == Status::kNotConverged || !wants_certificate(opt, r.rows, r.cols)) return r;
  return with_certificate(r, dense, ClaimedExtremes::estimate(r.sigma_min, r.sigma_max), opt);
}

// kFast on a dense device that assembles the matrix itself from the operator device's twin of
// `name` (DenseDevice::condition_fast_assembled, design §10): no host matrix, no copy. nullopt
// where it does not (another route; no operator device; a certificate, whose counts need K on the
// host; or the device declines): the caller assembles on the host, where it fits (host_schur_plan
// refuses by name where not).
std::optional<ConditionReport> fast_on_device(const BlockWeights& w, const BlockForward& f, const std::string& name,
                                              KappaRoute route, const BlockReportOptions& opt) {
  const Index nd = f.X.rows() * w.d;
  if (route != KappaRoute::kFast || !opt.operator_device || !opt.device || wants_certificate(opt, nd, nd))
    return std::nullopt;
  if (opt.before_dense_solve) opt.before_dense_solve();
  const std::unique_ptr<TokenMap> map = opt.operator_device->block_operator(w, f, name);
  return opt.device->condition_fast_assembled(*map, name, opt.within_dense_solve);
}

// The host's Schur route (analysis/spectral/schur_lu.h, design §10) for an N × N matrix: always
// for kSchur (asked for, or auto's choice); for kFast where its full route (K and the copy its
// assembly holds: fast_route_cost's 16 N², measured 2.1× K's bytes at N = 12 800) exceeds what the
// host may hold (opt.host_memory_bytes; 0: 90 % of physical memory), so an exact κ reaches matrices
// of about 2·p times that memory. The fewest pieces p (two to kMaxSchurPieces) whose D_k (8 N²/p
// bytes) and a panel fit schur_memory (that memory, capped by dense_max_bytes where set): each
// piece more adds products and solves to every solve of A (schur_lu.h), so two where they fit.
// Not counted: the column source's factors (AttentionJacobianColumns: n·d² +
// heads·d² doubles, 1 % of 4 N² at ViT-B) and the operator's caches. nullopt where the full route
// is taken (another route or device; it fits); throws naming the sizes where nothing fits. The
// skipless K_sab never comes here (its LayerNorm-complement row restricts a host matrix: kFast
// assembles it, kSchur brackets both its rows matrix-free).
// On another device (kFast): the device did not take the matrix itself (fast_on_device: it declined,
// e.g. a GPU whose free memory holds neither the whole LU nor any Schur plan beside the map's batch,
// or was not asked: no operator device, a certificate), so the caller assembles K on the host and
// hands it over: the full route's host bytes again. Past what the host may hold that assembly is a
// bad_alloc or an out-of-memory kill (ViT-B: 366 GB), so it is refused by name like the host's own,
// before anything is assembled; the device's description says its free memory (a GPU's). Not the
// host's Schur route instead: the caller asked for the device, and on the host that route takes
// hours at the sizes a device declines (N 57 600 took 17 minutes on 2 threads, design §10; ViT-B's
// N 151 296 is 18 times its flops); device cpu takes it. Guarded by TorchOperatorDevice.
// ADeclinedDenseRowPastTheHostsMemoryIsRefusedByName_n8_d16_h2 (tests/models/test_operator_device.cpp).
std::optional<SchurPlan> host_schur_plan(Index N, const std::string& name, KappaRoute route, const BlockReportOptions& opt) {
  const double memory = host_memory(opt);
  const double full = fast_route_cost(N, N, get_threads()).bytes;  // named in the error below
  if (route == KappaRoute::kFast) {
    if (opt.device && opt.device->name() != "cpu") {
      if (memory > 0 && full > memory)
        throw std::runtime_error(name + " (" + std::to_string(N) + " x " + std::to_string(N) + "): " +
                                 opt.device->description() + " did not assemble it, and a host copy for it holds " +
                                 gigabytes(full) + " (K and its assembly's copy), more than the " + gigabytes(memory) +
                                 " this machine gives it; the lanczos route brackets it matrix-free (device cpu: "
                                 "the host's Schur route)");
      return std::nullopt;
    }
    if (memory <= 0 || full <= memory) return std::nullopt;  // 0: sysconf could not say
  } else if (route != KappaRoute::kSchur) {  // kSchur: asked for (or auto's choice), on the host
    return std::nullopt;
  }
  const double cap = schur_memory(opt);
  if (cap <= 0) return SchurPlan::for_order(N);
  SchurPlan least;  // the fewest bytes of any piece count (one-column panels), named if none fits
  for (Index pieces = 2; pieces <= std::min(kMaxSchurPieces, N); ++pieces) {
    const SchurPlan blocks = SchurPlan::for_order(N, 0, pieces);  // one-column panels: the D_k and little else
    if (blocks.bytes() <= cap) return SchurPlan::for_order(N, std::min(2e9, cap - blocks.bytes()), pieces);
    if (least.order == 0 || blocks.bytes() < least.bytes()) least = blocks;
  }
  throw std::runtime_error(name + " (" + std::to_string(N) + " x " + std::to_string(N) + "): the dense route holds " +
                           gigabytes(full) + ", the Schur route at least " + gigabytes(least.bytes()) + " (in " +
                           std::to_string(least.pieces()) + " pieces), more than the " + gigabytes(cap) +
                           " this machine gives it; the lanczos route brackets it matrix-free");
}

// κ of `map` (a HostTokenMap) by the Schur route with `plan`. No certificate: its counts factorise K.
ConditionReport host_schur_report(const TokenMap& map, const SchurPlan& plan, const std::string& name,
                                  const BlockReportOptions& opt) {
  if (opt.before_dense_solve) opt.before_dense_solve();
  ConditionReport r = condition_schur(map, plan, name, opt.within_dense_solve);
  if (wants_certificate(opt, plan.order, plan.order))
    r.note += (r.note.empty() ? "" : "; ") + std::string("not certified: the Schur route does not hold K, which the "
                                                         "inertia counts factorise");
  return r;
}

// K_sa, B_sa, E_sa (paper Eq. 10/13) of the attention at f.attn, by `route`: assembled and solved
// densely (kFast, kSvd, kMixed) or through their operators (kLanczos). Reads f.X and f.attn only,
// so a post-norm block, whose attention sees its input itself, passes a forward pass with just those.
void attention_reports(const BlockWeights& w, const BlockForward& f, KappaRoute route, const BlockReportOptions& opt,
                       std::vector<ConditionReport>& out) {
  for (const auto& [name, part] : kAttentionParts) {
    if (!wants(opt, name)) continue;
    const auto K = [&, p = part] { return attention_jacobian(w, f.attn, p); };
    if (route == KappaRoute::kLanczos) {
      on_operator(
          opt, w, f, name, [&, p = part] { return AttentionJacobianOp(w, f.attn, p); },
          [&, n = name](const auto& op) { out.push_back(lanczos_report(op, n, "full", opt, K)); });
      continue;
    }
    if (std::optional<ConditionReport> r = fast_on_device(w, f, name, route, opt)) {
      out.push_back(std::move(*r));
      continue;
    }
    if (const std::optional<SchurPlan> plan = host_schur_plan(f.X.rows() * w.d, name, route, opt)) {
      const AttentionJacobianOp op(w, f.attn, part);
      const AttentionJacobianColumns columns(w, f.attn, part);  // the closed form, a panel at a time
      const HostTokenMap<AttentionJacobianOp> map(
          op, [&](Index first, Index count, double* out) { columns.columns(first, count, out); });
      out.push_back(host_schur_report(map, *plan, name, opt));
      continue;
    }
    const auto K32 = [&, p = part] { return attention_jacobian_fp32(w, f.attn, p); };
    out.push_back(route == KappaRoute::kMixed ? mixed_report(AttentionJacobianOp(w, f.attn, part), name, opt, K, K32)
                                              : dense_report(K(), name, route, opt));
  }
}

// K_sab by `route`, and on the LayerNorm complement when skipless: kLanczos through its operator;
// the dense routes on the device or by the host's Schur route where either holds it without a host
// matrix, else assembled on the host. The skipless rows restrict a host matrix, so under kSchur
// (which is there not to hold one) they are bracketed matrix-free.
void sab_reports(const BlockWeights& w, const BlockForward& f, SkipMode skip, KappaRoute route,
                 const BlockReportOptions& opt, std::vector<ConditionReport>& out) {
  const Index n = f.X.rows();
  const bool restricts = !sab_residual(skip) && w.d >= 3;  // the ln-complement row needs K_sab on the host
  if (route == KappaRoute::kLanczos || (restricts && route == KappaRoute::kSchur)) {
    lanczos_sab_reports(w, f, skip, opt, out);
    return;
  }
  if (!restricts) {
    if (std::optional<ConditionReport> r = fast_on_device(w, f, "K_sab", route, opt)) {
      out.push_back(std::move(*r));
      return;
    }
    if (const std::optional<SchurPlan> plan = host_schur_plan(n * w.d, "K_sab", route, opt)) {
      const SabJacobianOp op(w, f);  // its columns by its products (sab_jacobian has no column form)
      out.push_back(host_schur_report(HostTokenMap<SabJacobianOp>(op), *plan, "K_sab", opt));
      return;
    }
  }
  Mat Ksab = sab_jacobian(w, f);
  ConditionReport restricted;
  if (restricts) {  // nd × n(d − 2): kMixed takes kFast (condition_dense)
    restricted =
        dense_report(right_multiply_tokenwise(Ksab, n, layernorm_complement_bases(f.ln1.x_hat)), "K_sab", route, opt);
    restricted.space = "ln-complement";
  }
  if (route == KappaRoute::kMixed)
    out.push_back(mixed_report(SabJacobianOp(w, f), "K_sab", opt, [&] { return Ksab; },
                               [&] { return MatF(Ksab.cast<float>()); }));
  else
    out.push_back(dense_report(std::move(Ksab), "K_sab", route, opt));  // the full space; Ksab is done with
  if (restricts) out.push_back(restricted);
}

// The token block-diagonal K_mlp / K_ffn exactly, by their per-token blocks; opt.within_dense_solve
// before each block's SVD (their cancellation point: about 0.1 s a block at ViT-B).
void tokenwise_reports(const BlockWeights& w, const BlockForward& f, SkipMode skip, const BlockReportOptions& opt,
                       std::vector<ConditionReport>& out) {
  const auto& step = opt.within_dense_solve;
  if (wants(opt, "K_mlp")) out.push_back(condition_blockdiag(mlp_jacobian(w, f.mlp).blocks, "K_mlp", step));
  if (wants(opt, "K_ffn")) {
    const TokenBlockDiagonal Kffn = ffn_jacobian(w, f);
    out.push_back(condition_blockdiag(Kffn.blocks, "K_ffn", step));
    if (!ffn_residual(skip) && w.d >= 3) {
      ConditionReport r =
          condition_blockdiag(restrict_blocks(Kffn.blocks, layernorm_complement_bases(f.ln2.x_hat)), "K_ffn", step);
      r.space = "ln-complement";
      out.push_back(r);
    }
  }
}

// Per head: the softmax Jacobian (block diagonal over rows; full and on 1⟂) and the map A_h.
void head_reports(const BlockWeights& w, const AttentionCache& c, const BlockReportOptions& opt,
                  std::vector<ConditionReport>& out) {
  const Index n = c.Y.rows();
  const Mat ones_basis = ones_complement_basis(n);
  for (Index h = 0; h < w.heads; ++h) {
    const Mat& A = c.A[h];
    if (wants(opt, "softmax")) {
      std::vector<Mat> rows_full, rows_restricted;
      for (Index i = 0; i < n; ++i) {
        const Mat S = softmax_row_jacobian(A.row(i).transpose());
        rows_full.push_back(S);
        // S is symmetric with S·1 = 0, so 1⟂ is invariant: restrict on both sides.
        rows_restricted.push_back(ones_basis.transpose() * S * ones_basis);
      }
      ConditionReport s_full = condition_blockdiag(rows_full, "softmax");
      s_full.head = static_cast<int>(h);
      out.push_back(s_full);
      if (n > 1) {  // 1⟂ of R^1 is {0}: a single token's softmax row has no restriction to report
        ConditionReport s_restricted = condition_blockdiag(rows_restricted, "softmax");
        s_restricted.head = static_cast<int>(h);
        s_restricted.space = "ones-complement";
        out.push_back(s_restricted);
      }
    }
    if (wants(opt, "attention")) {
      ConditionReport a = condition_svd(A, "attention");
      a.head = static_cast<int>(h);
      out.push_back(a);
    }
  }
}

// Output-embedding conditioning ("Always Skip Attention" §4): κ of the n × d token matrix at each
// sub-block boundary, by the SVD (σ over min(n, d) values; n·d is at most 197 × 768 at ViT-B).
// SAB_out and FFN_block_out are the outputs *with* the residual whether or not the block has one,
// so X + SA and SA (Prop. 4.2) sit side by side in every block.
void embedding_reports(const BlockForward& f, const BlockReportOptions& opt, std::vector<ConditionReport>& out) {
  const std::pair<const char*, std::function<Mat()>> matrices[] = {
      {"X_in", [&] { return f.X; }},
      {"LN1_out", [&] { return f.ln1.y; }},
      {"SA_out", [&] { return f.attn.out; }},                      // SA(LN1 X)
      {"SAB_out", [&] { return Mat(f.X + f.attn.out); }},          // X + SA(LN1 X)
      {"LN2_out", [&] { return f.ln2.y; }},
      {"FFN_out", [&] { return f.mlp.out; }},                      // MLP(LN2 X1)
      {"FFN_block_out", [&] { return Mat(f.X1 + f.mlp.out); }}};  // X1 + MLP(LN2 X1)
  for (const auto& [name, matrix] : matrices)
    if (wants(opt, name)) out.push_back(condition_svd(matrix(), name));
}

}  // namespace

namespace {
// The ln-complement space drops x̂_i as LayerNorm's near-null direction: J_i x̂_i =
// γσ_i⁻¹ (1 − ‖x̂_i‖²/d) x̂_i with ‖x̂_i‖²/d = var_i/(var_i + eps), so LayerNorm keeps a fraction
// eps/(var_i + eps) of it. Where var_i < eps (a near-constant token) that is over half, and for
// a constant token x̂_i is rounding noise: the restriction then drops a live direction and its κ
// can be below the one on the true nullspace's complement. The row says so; it stays the
// complement of span{1, x̂_i} as defined.
std::string ln_live_direction_note(const LayerNormCache& ln, const char* layernorm) {
  const Index d = ln.x_hat.cols();
  Index live = 0, first = -1;
  for (Index i = 0; i < ln.x_hat.rows(); ++i)
    if (ln.x_hat.row(i).squaredNorm() / static_cast<double>(d) < 0.5) {
      ++live;
      if (first < 0) first = i;
    }
  if (live == 0) return "";
  return std::to_string(live) + " token(s) (first " + std::to_string(first) + ") with variance < " + layernorm +
         "'s eps: x-hat is not near-null there, the restriction drops a live direction (kappa may be low)";
}

void note_live_directions(const BlockForward& f, std::vector<ConditionReport>& out) {
  for (ConditionReport& r : out) {
    if (r.space != "ln-complement") continue;
    const std::string note = ln_live_direction_note(r.matrix == "K_ffn" ? f.ln2 : f.ln1, r.matrix == "K_ffn" ? "LN2" : "LN1");
    if (!note.empty()) r.note += (r.note.empty() ? "" : "; ") + note;
  }
}
}  // namespace

std::vector<ConditionReport> block_reports(const BlockWeights& w, const Mat& X, SkipMode skip,
                                           const BlockReportOptions& opt) {
  w.validate();
  for (const auto& m : opt.matrices) parse_matrix_names(m, block_matrix_names());  // throws on unknown names
  const BlockForward f = block_forward(w, X, skip);
  std::vector<ConditionReport> out;
  const KappaRoute route = resolve_route(opt, X.rows(), w.d);
  attention_reports(w, f, route, opt, out);
  if (wants(opt, "K_sab")) sab_reports(w, f, skip, route, opt, out);
  if (route != KappaRoute::kLanczos || auto_takes_tokenwise(opt, X.rows(), w.d, w.hidden))
    tokenwise_reports(w, f, skip, opt, out);
  else
    lanczos_tokenwise_reports(w, f, skip, opt, out);
  head_reports(w, f.attn, opt, out);
  embedding_reports(f, opt, out);
  note_live_directions(f, out);
  return out;
}

const ConditionReport& find_report(const std::vector<ConditionReport>& reports, const std::string& matrix,
                                   const std::string& space, int head) {
  for (const auto& r : reports)
    if (r.matrix == matrix && r.space == space && r.head == head) return r;
  throw std::out_of_range("no report for " + matrix + " on " + space);
}

std::vector<ConditionReport> post_norm_block_reports(const BlockWeights& w, const Mat& Y, const BlockReportOptions& opt) {
  w.validate();
  const std::vector<std::string>& valid = post_norm_matrix_names();
  for (const auto& m : opt.matrices)
    if (std::find(valid.begin(), valid.end(), m) == valid.end())
      throw std::invalid_argument("a post-norm block has only K_sa, B_sa, E_sa, softmax and attention, not " + m);
  const BlockForward f = attention_only_forward(w, Y);  // the attention sees Y itself
  std::vector<ConditionReport> out;
  attention_reports(w, f, resolve_route(opt, Y.rows(), w.d), opt, out);
  head_reports(w, f.attn, opt, out);
  return out;
}

}  // namespace jacond
