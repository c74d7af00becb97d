// Eq. 8 vs Eq. 9 (Cutting the Skip §4.3): the input-to-output Jacobian of a stack
//   with skips     ∏_{i=L}^{1} (K̂_i + I)(K_i + I)      (Eq. 8, SkipMode full)
//   without skips  ∏_{i=L}^{1}  K̂_i K_i                (Eq. 9, SkipMode none)
// where K_i = ∂SA(LN1 ·)/∂x and K̂_i = ∂MLP(LN2 ·)/∂x are the branch Jacobians of block i, each
// evaluated at its own network's activations (analysis/operators/network.h layer_factors). For depth
// L = 1..12 under timm, mimetic and ours we report κ over the whole space (LayerNorm makes every
// skipless factor exactly singular: 1 per token is killed, so Eq. 9 is `singular`), κ_eff =
// σ_1/σ_rank on the numerical range, and κ restricted to the complement of the first LayerNorm's
// structural (near-)nullspace span{1, x̂_j} per input token (`ln1-complement`), plus κ of
// ∂F/∂θ^(0) (one sample), the parameter Jacobian Eqs. 8/9 are written for.
//
// Gradient flow (residual-connections tutorial, path decomposition): for a random unit cotangent
// g at the output, the gradient norms ‖∂⟨g,F⟩/∂x_ℓ‖, ‖∂⟨g,F⟩/∂θ^(ℓ)‖, ‖∂⟨g,F⟩/∂θ̂^(ℓ)‖ per block
// for the plain (skipless) and residual stacks, and for the residual stack the expansion
//   gᵀ ∏_j (I + B_j) = Σ_{k=0}^{2L} c_k,   c_k = Σ_{|S|=k} gᵀ ∏_{j∈S} B_j   (2^{2L} paths)
// over the 2L sub-layer branches B_j, by the recursion (layers in reverse) c_k ← c_k + c_{k−1} B_j.
// c_0 = g is the direct path. PASS/FAIL is reserved for identities; the rest are findings.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>

#include "analysis/spectral/condition.h"
#include "analysis/operators/network.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/network_source.h"
#include "experiments/claims/verify.h"

namespace jacond::cli {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// kappa = inf when σ_min is at or below the noise floor (docs/design.md §4); then only κ ≥ kappa_lo =
// σ_max / floor is known, and that lower bound is what we print.
struct Kappas {
  double smax = 0, smin = 0, kappa = kInf, kappa_lo = 0, kappa_eff = kInf, kappa_ln1c = kInf, kappa_ln1c_lo = 0;
  Index rank = 0;
};

Kappas kappas_of(const Mat& P, const std::vector<Mat>& ln1_complement) {
  Kappas k;
  const Vec sv = singular_values(P);
  k.smax = sv.maxCoeff();
  k.smin = sv.minCoeff();
  const double tol = noise_floor(P.rows(), P.cols(), k.smax);
  k.rank = (sv.array() > tol).count();
  double s_rank = kInf;
  for (Index i = 0; i < sv.size(); ++i)
    if (sv(i) > tol) s_rank = std::min(s_rank, sv(i));
  k.kappa = k.smin > tol ? k.smax / k.smin : kInf;
  k.kappa_lo = k.smin > tol ? k.kappa : k.smax / tol;
  k.kappa_eff = k.rank > 0 ? k.smax / s_rank : kInf;
  const Mat R = right_multiply_tokenwise(P, static_cast<Index>(ln1_complement.size()), ln1_complement);
  const Vec svr = singular_values(R);
  const double rmin = svr.minCoeff(), rmax = svr.maxCoeff();
  const double rtol = noise_floor(R.rows(), R.cols(), rmax);
  k.kappa_ln1c = rmin > rtol ? rmax / rmin : kInf;
  k.kappa_ln1c_lo = rmin > rtol ? k.kappa_ln1c : rmax / rtol;
  return k;
}

std::string kstr(double k) { return k == kInf ? "inf" : num(k, 3); }
// κ, or ">lo" when the matrix is singular at the noise floor.
std::string kstr(double k, double lo) { return k == kInf ? ">" + num(lo, 2) : num(k, 3); }

// Gradient norms of ⟨g, F⟩ per block: at the block input x_ℓ, and w.r.t. θ^(ℓ), θ̂^(ℓ).
struct GradNorms {
  std::vector<double> x, attn, mlp;  // x has L+1 entries (x_0 … x_L = output)
};

GradNorms gradient_norms(const Network& net, const NetworkForward& fwd, const Mat& G_out) {
  const Index L = net.depth();
  GradNorms g;
  g.x.assign(L + 1, 0.0);
  g.attn.assign(L, 0.0);
  g.mlp.assign(L, 0.0);
  Mat G = G_out;
  g.x[L] = G.norm();
  for (Index l = L - 1; l >= 0; --l) {
    BlockParams gp = BlockParams::zeros(net.blocks[l], true, true);
    G = block_vjp(net.blocks[l], fwd.samples[0][l], G, &gp);
    g.x[l] = G.norm();
    g.attn[l] = std::sqrt(gp.Wq.squaredNorm() + gp.Wk.squaredNorm() + gp.Wv.squaredNorm() + gp.Wo.squaredNorm() +
                          gp.bq.squaredNorm() + gp.bk.squaredNorm() + gp.bv.squaredNorm() + gp.bo.squaredNorm());
    g.mlp[l] = std::sqrt(gp.W1.squaredNorm() + gp.W2.squaredNorm() + gp.b1.squaredNorm() + gp.b2.squaredNorm());
  }
  return g;
}

double binomial(int n, int k) {
  double b = 1;
  for (int i = 1; i <= k; ++i) b = b * (n - k + i) / i;
  return b;
}

// κ of ∂F/∂θ^(0) of the depth-L prefix of the stack (one sample), over its nd rows (wide), and its
// lower bound: κ itself, or σ_max / noise floor where σ_min is under the floor (κ = inf).
struct ParamKappa {
  double kappa = kInf, kappa_lo = 0;
};
ParamKappa prefix_param_kappa(const Network& net, const NetworkForward& fwd, Index L) {
  Network prefix;
  prefix.blocks.assign(net.blocks.begin(), net.blocks.begin() + L);
  prefix.skips.assign(net.skips.begin(), net.skips.begin() + L);
  NetworkForward pf;
  pf.samples = {std::vector<BlockForward>(fwd.samples[0].begin(), fwd.samples[0].begin() + L)};
  const Mat J0 = param_jacobian_dense(prefix, pf, ParamSelection::attention(0));
  const Vec sj = singular_values(J0);
  const double tol = noise_floor(J0.rows(), J0.cols(), sj.maxCoeff());
  if (sj.minCoeff() > tol) return {sj.maxCoeff() / sj.minCoeff(), sj.maxCoeff() / sj.minCoeff()};
  return {kInf, sj.maxCoeff() / tol};
}

// Path expansion of the residual gradient at layer 0, gᵀ ∏_j (I + B_j) = Σ_k c_k, over the 2L
// sub-layer branches B_j = factor − I, by the recursion (layers in reverse) c_k ← c_k + c_{k−1} B_j.
std::vector<Vec> path_expansion(const std::vector<LayerFactors>& factors, const Mat& G_out) {
  const Index L = static_cast<Index>(factors.size()), nd = G_out.size();
  std::vector<Vec> c(2 * L + 1, Vec::Zero(nd));
  c[0] = vec(G_out);
  for (Index l = L - 1; l >= 0; --l)
    for (const Mat* F : {&factors[l].K_ffn, &factors[l].K_sab}) {
      const Mat B = *F - Mat::Identity(nd, nd);
      for (Index k = 2 * L; k >= 1; --k) c[k] += B.transpose() * c[k - 1];
    }
  return c;
}

// Everything measured on one stack (one init, one skip mode).
struct StackResult {
  std::vector<Kappas> products;    // depth 1..L: κ of the Eq. 8 / Eq. 9 product
  std::vector<double> kappa_J0, kappa_J0_lo;  // depth 1..L: κ(∂F/∂θ^(0)) and its lower bound
  GradNorms grads;
  bool operator_matches = false;   // dense product == matrix-free stack Jacobian
  std::vector<Vec> paths;          // c_k (residual stack only)
  Vec gradient_x0;                 // Pᵀ g at depth L
};

StackResult analyse_stack(const StackConfig& cfg, const std::vector<Mat>& X, const std::vector<Mat>& ln1_comp,
                          const Mat& G_out) {
  const Network net = make_stack(cfg);
  const NetworkForward fwd = network_forward(net, X);
  const std::vector<LayerFactors> factors = layer_factors(net, fwd, 0);
  const Index nd = G_out.size();
  StackResult r;
  Mat P = Mat::Identity(nd, nd);
  for (Index L = 1; L <= cfg.depth; ++L) {
    P = factors[L - 1].K_ffn * (factors[L - 1].K_sab * P);
    r.products.push_back(kappas_of(P, ln1_comp));
    const ParamKappa j0 = prefix_param_kappa(net, fwd, L);
    r.kappa_J0.push_back(j0.kappa);
    r.kappa_J0_lo.push_back(j0.kappa_lo);
  }
  const Mat Pop = dense_from_products(StackInputJacobianOp(net, fwd, 0));
  r.operator_matches = (P - Pop).norm() <= 1e-10 * Pop.norm();
  r.grads = gradient_norms(net, fwd, G_out);
  if (cfg.skip == SkipMode::kFull) r.paths = path_expansion(factors, G_out);
  r.gradient_x0 = P.transpose() * vec(G_out);
  return r;
}

// The CSV files of the claim, accumulated over inits.
struct Eq89Csv {
  std::ostringstream products, grads, paths;
  Eq89Csv() {
    products << "init,skip,equation,depth,n,d,heads,hidden,rows,cols,sigma_max,sigma_min,rank,kappa,kappa_lo,kappa_eff,"
                "kappa_ln1c,kappa_ln1c_lo,status,kappa_J0,kappa_J0_lo\n";
    grads << "init,stack,layer,grad_x_norm,grad_attn_norm,grad_mlp_norm\n";
    paths << "init,depth,path_length,paths,norm\n";
  }
  void add(const StackConfig& cfg, Index n, const StackResult& r) {
    const bool residual = cfg.skip == SkipMode::kFull;
    const Index nd = n * cfg.d;
    for (Index L = 1; L <= cfg.depth; ++L) {
      const Kappas& k = r.products[L - 1];
      products << cfg.init << "," << to_string(cfg.skip) << "," << (residual ? "eq8" : "eq9") << "," << L << "," << n
               << "," << cfg.d << "," << cfg.heads << "," << cfg.hidden << "," << nd << "," << nd << "," << fmt(k.smax)
               << "," << fmt(k.smin) << "," << k.rank << "," << fmt(k.kappa) << "," << fmt(k.kappa_lo) << ","
               << fmt(k.kappa_eff) << "," << fmt(k.kappa_ln1c) << "," << fmt(k.kappa_ln1c_lo) << ","
               << (k.kappa == kInf ? "singular" : "exact") << "," << fmt(r.kappa_J0[L - 1]) << ","
               << fmt(r.kappa_J0_lo[L - 1]) << "\n";
    }
    for (Index l = 0; l <= cfg.depth; ++l)
      grads << cfg.init << "," << (residual ? "residual" : "plain") << "," << l << "," << fmt(r.grads.x[l]) << ","
            << (l < cfg.depth ? fmt(r.grads.attn[l]) : "") << "," << (l < cfg.depth ? fmt(r.grads.mlp[l]) : "") << "\n";
    for (size_t k = 0; k < r.paths.size(); ++k)
      paths << cfg.init << "," << cfg.depth << "," << k << ","
            << fmt(binomial(2 * static_cast<int>(cfg.depth), static_cast<int>(k))) << "," << fmt(r.paths[k].norm()) << "\n";
  }
};

// The finding line of the path expansion: |c_0| … |c_4|, …, |c_2L|, and the total.
std::string path_finding(const std::string& init, const StackResult& r) {
  const size_t K = r.paths.size() - 1;
  std::ostringstream line;
  line << init << ": residual gradient at layer 0 by path length k (of 2^" << K << " paths): ";
  for (size_t k = 0; k <= K; ++k) {
    if (k <= 4 || k == K) line << "|c_" << k << "| = " << num(r.paths[k].norm(), 3) << (k == K ? "" : ", ");
    if (k == 4) line << "..., ";
  }
  line << "; total " << num(r.gradient_x0.norm(), 3);
  return line.str();
}

// Σ_k c_k equals the residual gradient and c_0 is the direct path g (unit norm).
bool paths_sum_to_gradient(const StackResult& r) {
  Vec total = Vec::Zero(r.gradient_x0.size());
  for (const Vec& ck : r.paths) total += ck;
  return (total - r.gradient_x0).norm() <= 1e-9 * r.gradient_x0.norm() && std::abs(r.paths[0].norm() - 1.0) < 1e-14;
}

void print_depth_rows(const StackResult& a, const StackResult& b, Index Lmax) {
  for (Index L = 1; L <= Lmax; ++L) {
    if (L > 3 && L != 6 && L != Lmax) continue;
    const Kappas &p = a.products[L - 1], &q = b.products[L - 1];
    std::printf("  %-8s %5lld | %8s %9s %9s %9s | %8s %9s %9s %9s\n", "", static_cast<long long>(L),
                kstr(p.kappa, p.kappa_lo).c_str(), kstr(p.kappa_eff).c_str(), kstr(p.kappa_ln1c, p.kappa_ln1c_lo).c_str(),
                kstr(a.kappa_J0[L - 1]).c_str(), kstr(q.kappa, q.kappa_lo).c_str(), kstr(q.kappa_eff).c_str(),
                kstr(q.kappa_ln1c, q.kappa_ln1c_lo).c_str(), kstr(b.kappa_J0[L - 1]).c_str());
  }
}

std::vector<std::string> depth_findings(const std::string& init, const StackResult& a, const StackResult& b, Index Lmax) {
  const Kappas &p = a.products.back(), &q = b.products.back();
  return {init + ": at depth " + std::to_string(Lmax) + " Eq. 8 kappa_ln1c = " + kstr(p.kappa_ln1c, p.kappa_ln1c_lo) +
              " vs Eq. 9 kappa_ln1c = " + kstr(q.kappa_ln1c, q.kappa_ln1c_lo) + " (kappa_eff " + kstr(p.kappa_eff) +
              " vs " + kstr(q.kappa_eff) + "; Eq. 9 over the whole space: " +
              (q.kappa == kInf ? "singular" : kstr(q.kappa)) + "); kappa(dF/dtheta^(0)) " + kstr(a.kappa_J0.back()) +
              " vs " + kstr(b.kappa_J0.back()),
          init + ": gradient norm at layer 0 input / output: residual " + num(a.grads.x[0], 3) + ", plain " +
              num(b.grads.x[0], 3) + "; |grad theta^(0)| residual " + num(a.grads.attn[0], 3) + ", plain " +
              num(b.grads.attn[0], 3)};
}

// A random unit cotangent g ∈ R^{n×d} at the output.
Mat unit_cotangent(Index n, Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N01(0.0, 1.0);
  Mat G(n, d);
  for (Index j = 0; j < G.size(); ++j) G.data()[j] = N01(rng);
  return G / G.norm();
}

}  // namespace

bool verify_eq89(const VerifyOptions& opt, Verifier& v) {
  StackConfig cfg;
  cfg.depth = 12;
  cfg.d = 16;
  cfg.heads = 2;
  cfg.hidden = 64;
  const Index n = 8, Lmax = cfg.depth;
  std::cout << "Eq. 8 vs Eq. 9: kappa of prod (Khat_i + I)(K_i + I) (skips) vs prod Khat_i K_i (skipless), depth 1.."
            << Lmax << ", n = " << n << ", d = " << cfg.d << ", heads = " << cfg.heads << ", hidden = " << cfg.hidden
            << ", one Gaussian sample; ours (alpha, beta, c) = (2, 0.6, 3)\n";
  Eq89Csv csv;
  int op_ok = 0, op_checked = 0, path_ok = 0, path_checked = 0;
  std::vector<std::string> findings;
  const Mat G_out = unit_cotangent(n, cfg.d, opt.seed + 89);
  for (const std::string init : {"timm", "mimetic", "ours"}) {
    cfg.init = init;
    cfg.seed = opt.seed + 8;
    const std::vector<Mat> X = gaussian_batch(1, n, cfg.d, opt.seed + 9);
    // Complement of span{1, x̂_j} per token of the first LN1 input (the same X for both stacks).
    const LayerNormCache ln1 = layernorm_forward(X[0], Vec::Ones(cfg.d), Vec::Zero(cfg.d), 1e-6);
    std::vector<Mat> comp;
    for (Index j = 0; j < n; ++j) comp.push_back(layernorm_complement_basis(ln1.x_hat.row(j).transpose()));
    std::printf("  %-8s %5s | %-36s | %-36s\n", init.c_str(), "depth", "Eq. 8 (skips): kappa / kappa_eff / ln1c / J0",
                "Eq. 9 (skipless): kappa / kappa_eff / ln1c / J0");
    StackResult res[2];
    for (int mode = 0; mode < 2; ++mode) {
      cfg.skip = mode == 0 ? SkipMode::kFull : SkipMode::kNone;
      res[mode] = analyse_stack(cfg, X, comp, G_out);
      csv.add(cfg, n, res[mode]);
      ++op_checked;
      op_ok += res[mode].operator_matches;
    }
    ++path_checked;
    path_ok += paths_sum_to_gradient(res[0]);
    findings.push_back(path_finding(init, res[0]));
    print_depth_rows(res[0], res[1], Lmax);
    for (auto& f : depth_findings(init, res[0], res[1], Lmax)) findings.push_back(std::move(f));
  }
  for (const std::string& f : findings) v.note("finding: " + f);
  v.check("dense Eq. 8/9 products equal the matrix-free stack Jacobian (depth " + std::to_string(Lmax) + ")",
          op_ok == op_checked, std::to_string(op_ok) + "/" + std::to_string(op_checked) + " stacks within 1e-10");
  v.check("path decomposition: sum over path lengths of c_k = residual gradient at layer 0, c_0 = direct path",
          path_ok == path_checked, std::to_string(path_ok) + "/" + std::to_string(path_checked) + " inits within 1e-9");
  if (!opt.out_dir.empty()) {
    ensure_directory(opt.out_dir);
    write_file_atomic(opt.out_dir + "/eq89_products.csv", csv.products.str());
    write_file_atomic(opt.out_dir + "/eq89_gradients.csv", csv.grads.str());
    write_file_atomic(opt.out_dir + "/eq89_paths.csv", csv.paths.str());
  }
  return v.all_passed();
}

}  // namespace jacond::cli
