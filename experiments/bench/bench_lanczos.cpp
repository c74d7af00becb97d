// `jacond bench lanczos`: matrix-free κ brackets (analysis/spectral/gkl.h) at ViT sizes, against
// the route a researcher would take otherwise (issue #10, item 4).
//
// For each size (ViT-S: n 197, d 384, 6 heads; ViT-B: n 197, d 768, 12 heads; dense6400 and
// dense12480 where the dense truth fits; or a custom nNdDhH) and init (ours, timm, mimetic; paper
// defaults α 2, β 0.6, c 3, seed 0, Gaussian tokens) and each matrix (K_sab and K_ffn with their
// residuals, bare K_sa at LN1's output), one condition_lanczos call with a --seconds budget and
// target κ_hi/κ_lo ≤ 1 + --tol. Reported: time to the σ_max bracket, time to the κ bracket (or
// not-converged with the best bracket at the cap), products, and the peak resident memory of the
// process (getrusage ru_maxrss, cumulative: it includes the forward caches and every earlier row).
//
// Peers (--peers, default arpack): experiments/bench/scipy_svds_route.py runs
// scipy.sparse.linalg.svds (ARPACK, PROPACK or LOBPCG) on a LinearOperator of PyTorch autograd
// JVP/VJP products of the same fp64 block, on the same weights and tokens (written to
// <out>/<size>-<init>/), the same threads, budget and target bracket width, and reports the same
// residual bracket. bench_lanczos_peers.csv holds both times and speedup = peer s / jacond s
// where both reached the target; otherwise the row says which did not converge in how many s.
//
// Timing: a route (jacond's or a peer's) that reaches its bracket in under 2 s is run --repeats
// times (default 5) and the median seconds reported; every run's seconds are in the CSVs. A run
// of a few hundredths of a second is otherwise at the scheduler's mercy (single runs of the same
// nd 6400 row gave ratios from 7.3x to 16.7x).
//
// With --check-dense, a size where the dense route fits (nd ≤ 12 500) is also run through
// condition_fast on the dense matrix: the dense κ must lie inside the bracket (exit 1 if not).
//
// --device cuda (issue 11, items 3 and 5) runs jacond's route a second time on each matrix on the
// GPU (models/device/torch_operator_device.h: ATen, the weights and caches copied there once per
// matrix), the products and GKL's basis there (TorchKrylovBasis; the k × k recurrence, bounds and
// statuses on the host): route jacond-gkl-cuda, the same start vectors, repeats and target, as
// `block --device cuda` runs it. Both routes time the seconds spent inside their products
// (product_s), so the rest is the basis work and the recurrence (docs/design.md §10). The two
// brackets must intersect, and with --check-dense both contain the dense κ (exit 1 otherwise).
// --device torch-cpu runs the same ATen code on the CPU (what CI can run; also the cost of ATen's
// kernels against the host's).
//
// --compare-methods (issue #10, item 1) runs each listed solver configuration on each matrix
// instead of the default route alone, and writes bench_lanczos_methods.csv (one row per method:
// status, seconds, products, bracket width, basis memory, and with the dense truth the products
// at which σ_min's upper end first came within 1 % and 10 % of it) and bench_lanczos_trace.csv
// (every estimate: method, end, products, bracket), from which
// `jacond plot DIR` (experiments/plots/jacond_plots/bench_lanczos.py) draws products-to-accuracy against κ and nd.
// Methods: restart-K (thick restarts with a basis of K, keeping K/3: restart-96 is the default
// route) and unrestarted (one sweep with a basis of min(nd, what --basis-memory-gb allows):
// the Krylov optimum, see README "Which σ_min solver").
#include "experiments/bench/bench_lanczos.h"
#include "experiments/bench/bench_lanczos_checks.h"

#include <sys/resource.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/gkl.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operator_device.h"
#include "analysis/operators/operators.h"
#include "analysis/core/threads.h"
#include "experiments/cli/block_source.h"
#include "experiments/bench/bench_tables.h"
#include "experiments/bench/python_route.h"
#include "experiments/cli/cli_common.h"
#include "models/device/torch_operator_device.h"
#include "models/init/init.h"
#include "models/io/safetensors.h"
#include "models/track/bridge.h"

namespace jacond::cli {
namespace {

namespace po = boost::program_options;
// The rows and the checks that fail a run, apart for tests/bench/test_bench_rules.cpp.
using namespace bench_lanczos;

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

struct Size {
  std::string name;
  Index n, d, heads;
};

constexpr Index kDenseCheckMaxNd = 12500;  // condition_fast in ≤ ~2 min and 2.5 GB here
// A route that reaches its bracket in under this many seconds is run --repeats times and its
// median reported (scipy_svds_route.py REPEAT_BELOW_S: the same rule for the peers).
constexpr double kRepeatBelowSeconds = 2.0;

std::string joined(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : ";") + fmt(x);
  return out;
}

/// A solver configuration of --compare-methods.
struct Method {
  std::string name;   // restart-K | unrestarted
  Index basis = 96;   // 0: min(nd, the memory cap)
  Index keep = 32;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(t);
  return out;
}

// "vit-s", "vit-b", "dense6400", "dense12480", or a custom "n<N>d<D>h<H>" (e.g. n65d192h3).
Size parse_size(const std::string& s) {
  if (s == "vit-s") return {s, 197, 384, 6};
  if (s == "vit-b") return {s, 197, 768, 12};
  if (s == "dense6400") return {s, 100, 64, 4};
  if (s == "dense12480") return {s, 65, 192, 3};
  long long n = 0, d = 0, h = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "n%lldd%lldh%lld%c", &n, &d, &h, &tail) == 3 && n >= 2 && d >= 1 && h >= 1 && d % h == 0)
    return {s, n, d, h};
  throw std::invalid_argument("--sizes: unknown size '" + s +
                              "' (vit-s | vit-b | dense6400 | dense12480 | nNdDhH with h dividing d)");
}

std::vector<Size> parse_sizes(const std::string& spec) {
  std::vector<Size> sizes;
  for (const auto& s : split_commas(spec)) sizes.push_back(parse_size(s));
  return sizes;
}

// "restart-K" or "unrestarted".
Method parse_method(const std::string& s) {
  long long k = 0;
  char tail = 0;
  if (s == "unrestarted") return {s, 0, 32};
  if (std::sscanf(s.c_str(), "restart-%lld%c", &k, &tail) == 1 && k >= 2) return {s, k, std::max<Index>(1, k / 3)};
  throw std::invalid_argument("--compare-methods: unknown method '" + s + "' (restart-K with K >= 2 | unrestarted)");
}

// Bytes of the GKL basis (P: nd × (k+1), Q: nd × k) and of B_k (k × k), fp64.
double basis_bytes(Index nd, Index k) { return 8.0 * (2.0 * nd * k + static_cast<double>(k) * k); }

// The basis of a method at size nd: unrestarted takes the largest k ≤ nd whose basis fits `memory_gb`.
Index method_basis(const Method& m, Index nd, double memory_gb) {
  if (m.basis > 0) return std::min(m.basis, nd);
  Index k = nd;
  while (k > 2 && basis_bytes(nd, k) > memory_gb * 1e9) k = k * 9 / 10;
  return k;
}

struct DenseTruth {
  bool checked = false;
  double kappa = 0, sigma_min = 0, seconds = 0;
};

// condition_fast on the dense matrix (nd ≤ kDenseCheckMaxNd), the reference for --check-dense.
DenseTruth dense_truth(const Size& sz, const std::string& m, const BlockWeights& w, const BlockForward& f) {
  DenseTruth t;
  if (sz.n * sz.d > kDenseCheckMaxNd) return t;
  const auto t0 = std::chrono::steady_clock::now();
  const Mat K = m == "K_sab" ? sab_jacobian(w, f) : m == "K_ffn" ? ffn_jacobian(w, f).to_dense()
                                                                 : attention_jacobian(w, f.attn);
  const ConditionReport d = condition_fast(K, m);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.checked = true;
  t.kappa = d.kappa;
  t.sigma_min = d.sigma_min;
  return t;
}

// op with every product timed into *seconds.
OperatorRef timed(OperatorRef op, double* seconds) {
  const auto time = [seconds](std::function<void(const double*, double*)> product) {
    return [seconds, product = std::move(product)](const double* x, double* y) {
      const auto t0 = std::chrono::steady_clock::now();
      product(x, y);
      *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
  };
  op.apply = time(std::move(op.apply));
  op.apply_transpose = time(std::move(op.apply_transpose));
  return op;
}

// A device's KrylovBasis with its products timed into *seconds. product() ends with its
// finiteness check, read on the host, so it waits for the device: the seconds are the products'.
class TimedBasis final : public KrylovBasis {
 public:
  TimedBasis(std::unique_ptr<KrylovBasis> inner, double* seconds) : inner_(std::move(inner)), seconds_(seconds) {}
  bool product(KrylovSide from, Index j) override { return time([&] { return inner_->product(from, j); }); }
  Vec apply(bool transpose, const Vec& x) const override { return time([&] { return inner_->apply(transpose, x); }); }
  Vec orthogonalise(KrylovSide side, Index j) override { return inner_->orthogonalise(side, j); }
  double work_norm(KrylovSide side) const override { return inner_->work_norm(side); }
  void store(KrylovSide side, Index j, double alpha) override { inner_->store(side, j, alpha); }
  void set_column(KrylovSide side, Index j, const Vec& x) override { inner_->set_column(side, j, x); }
  void set_work(KrylovSide side, const Vec& x) override { inner_->set_work(side, x); }
  Vec combination(KrylovSide side, Index kk, const Vec& c) const override { return inner_->combination(side, kk, c); }
  void restart(Index kk, const Mat& V_sel, const Mat& U_sel) override { inner_->restart(kk, V_sel, U_sel); }

 private:
  template <typename F>
  auto time(const F& f) const -> decltype(f()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = f();
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
  std::unique_ptr<KrylovBasis> inner_;
  double* seconds_;
};

KrylovSpace timed(KrylovSpace space, double* seconds) {
  space.make_basis = [make = std::move(space.make_basis), seconds](Index k) {
    return std::make_unique<TimedBasis>(make(k), seconds);
  };
  return space;
}

// One untimed product each way: the first products of a process start the BLAS threads and
// touch the operator's buffers (~0.08 s at nd 6400, more than a whole well-conditioned bracket;
// on a GPU the first product also loads cuBLAS).
void warm_up(const OperatorRef& op) {
  Vec x = Vec::Ones(op.cols), y(op.rows);
  op.apply(x.data(), y.data());
  op.apply_transpose(y.data(), x.data());
}
void warm_up(const KrylovSpace& space) {
  const std::unique_ptr<KrylovBasis> basis = space.make_basis(1);
  basis->set_column(KrylovSide::kRight, 0, Vec::Ones(space.cols));
  basis->set_column(KrylovSide::kLeft, 0, Vec::Ones(space.rows));
  basis->product(KrylovSide::kRight, 0);
  basis->product(KrylovSide::kLeft, 0);
}

// condition_lanczos on a route (an operator with the basis on the host, or a device's Krylov
// space) after warm_up, as the peer's seconds exclude its setup (setup_s). A run that brackets in
// under 2 s is repeated up to `repeats` times (without gkl.progress: the trace is the first
// run's) and its median reported.
template <typename Route>
RouteRun run_route(const Route& route, const std::string& m, const GklOptions& gkl, int repeats) {
  const auto bracket = [&](const GklOptions& o, double* product_s) {
    warm_up(route);
    return condition_lanczos(timed(route, product_s), m, o);
  };
  RouteRun out;
  out.lz = bracket(gkl, &out.product_s);
  out.seconds_runs = {out.lz.report.seconds};
  GklOptions quiet = gkl;
  quiet.progress = nullptr;
  double ignored = 0;
  while (static_cast<int>(out.seconds_runs.size()) < repeats && out.lz.report.status == Status::kBracket &&
         out.seconds_runs[0] < kRepeatBelowSeconds)
    out.seconds_runs.push_back(bracket(quiet, &ignored).report.seconds);
  out.lz.report.seconds = median(out.seconds_runs);
  return out;
}

// The host operator of a bench matrix: K_sab and K_ffn with their residuals, bare K_sa at LN1's output.
RouteRun run_host_route(const BlockWeights& w, const BlockForward& f, const std::string& m, const GklOptions& gkl,
                        int repeats) {
  if (m == "K_sab") return run_route(make_operator_ref(SabJacobianOp(w, f)), m, gkl, repeats);
  if (m == "K_ffn") return run_route(make_operator_ref(FfnJacobianOp(w, f)), m, gkl, repeats);
  return run_route(make_operator_ref(AttentionJacobianOp(w, f.attn)), m, gkl, repeats);
}

// Whether κ lies inside a report's bracket (relative slack 1e-9 for the two roundings).
bool inside(const ConditionReport& c, double kappa) {
  return c.kappa_lo <= kappa * (1 + 1e-9) && kappa <= c.kappa_hi * (1 + 1e-9);
}

// One matrix of one block under one method: the GKL bracket, every estimate, and against the dense
// truth (when given) whether κ lies inside and when σ_min's upper end came within 1 % / 10 %.
Row measure(const Size& sz, const std::string& init, const std::string& m, const BlockWeights& w, const BlockForward& f,
            GklOptions gkl, const Method& method, Index basis, const DenseTruth& truth, int repeats) {
  Row r{sz.name, init, m, method.name, basis, truth.sigma_min, {}, {}, sz.n, sz.d, sz.heads, {}, 0, false, 0, 0, false, {}, {}};
  gkl.max_basis = basis;
  gkl.keep = std::min(method.keep, basis - 1);
  gkl.progress = [&r](const GklProgress& p) { r.trace.push_back(p); };
  r.host = run_host_route(w, f, m, gkl, repeats);
  r.rss_mb = peak_rss_mb();
  if (truth.checked) {
    r.dense_checked = true;
    r.dense_kappa = truth.kappa;
    r.dense_seconds = truth.seconds;
    r.dense_inside = inside(r.host.lz.report, truth.kappa);
    for (const GklProgress& p : r.trace) {
      if (!p.smallest) continue;
      if (r.approach.products_10pct < 0 && p.hi <= 1.10 * truth.sigma_min) r.approach.products_10pct = p.products;
      if (r.approach.products_1pct < 0 && p.hi <= 1.01 * truth.sigma_min) r.approach.products_1pct = p.products;
    }
  }
  return r;
}

// --device: the row's route again on `device` (its weights and caches copied there once per
// matrix, outside the timing): the products there, and GKL's basis too where the device keeps one
// (its Krylov space), as `block --device` runs it; same options, start vectors and repeats.
void measure_on_device(Row& r, const OperatorDevice& device, const BlockWeights& w, const BlockForward& f,
                       GklOptions gkl, int repeats) {
  gkl.progress = nullptr;
  const std::unique_ptr<TokenMap> map = device.block_operator(w, f, r.matrix);
  const KrylovSpace space = device.krylov_space(*map);
  const TokenMapOp op(*map);
  DeviceRun d{"jacond-gkl-" + device.name(),
              space.make_basis ? run_route(space, r.matrix, gkl, repeats)
                               : run_route(make_operator_ref(op), r.matrix, gkl, repeats),
              false};
  d.run.lz.report.method += "-" + device.name();
  if (r.dense_checked) d.dense_inside = inside(d.run.lz.report, r.dense_kappa);
  r.device = std::move(d);
}

struct PeerSetup {
  std::vector<std::string> solvers;  // empty: no peers
  std::string python = "/usr/bin/python3";
  std::string script = std::string(JACOND_SOURCE_DIR) + "/experiments/bench/scipy_svds_route.py";
};

// Weights (block 0, timm keys) and tokens of one (size, init) for the Python route; returns the directory.
std::string write_peer_inputs(const std::string& out_dir, const Size& sz, const std::string& init,
                              const models::TensorMap& tensors, const Mat& X) {
  const std::string dir = out_dir + "/" + sz.name + "-" + init;
  ensure_directory(dir);
  const std::map<std::string, std::string> meta = {{"init", init}, {"written_by", "jacond bench lanczos"}};
  models::save_safetensors(dir + "/weights.safetensors", tensors, meta);
  models::save_safetensors(dir + "/tokens.safetensors", {{"tokens", models::to_torch(X)}}, meta);
  return dir;
}

double json_number_or(const nlohmann::json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

PeerResult run_peer(const PeerSetup& peer, const std::string& solver, const std::string& dir, const Row& r,
                    double logit_scale, const GklOptions& gkl, int threads, int repeats) {
  const std::vector<std::string> argv = {peer.python, peer.script, "--weights", dir + "/weights.safetensors",
                                         "--tokens", dir + "/tokens.safetensors", "--heads", std::to_string(r.heads),
                                         "--matrix", r.matrix, "--solver", solver, "--seconds", fmt(gkl.max_seconds),
                                         "--tol", fmt(gkl.tolerance), "--logit-scale", fmt(logit_scale),
                                         "--basis", std::to_string(gkl.max_basis), "--seed", std::to_string(gkl.seed),
                                         "--threads", std::to_string(threads), "--repeats", std::to_string(repeats)};
  const nlohmann::json j = run_python_json(argv, threads, dir, "scipy svds route (" + solver + ", " + r.matrix + ")",
                                           {"status", "seconds", "products", "kappa_lo", "note"});
  PeerResult p;
  p.solver = solver;
  p.status = j["status"].get<std::string>();
  p.note = j["note"].get<std::string>();
  p.seconds = j["seconds"].get<double>();
  p.setup_s = json_number_or(j, "setup_s", 0);
  if (j.contains("seconds_runs") && j["seconds_runs"].is_array()) p.seconds_runs = j["seconds_runs"].get<std::vector<double>>();
  else p.seconds_runs = {p.seconds};
  p.products = j["products"].get<long long>();
  p.kappa_lo = j["kappa_lo"].get<double>();
  p.kappa_hi = json_number_or(j, "kappa_hi", 0);  // null = infinite
  p.rss_mb = json_number_or(j, "peak_rss_mb", 0);
  if (r.dense_checked) {
    p.dense_checked = true;
    p.dense_inside = p.kappa_lo <= r.dense_kappa * (1 + 1e-9) && (p.kappa_hi == 0 || r.dense_kappa <= p.kappa_hi * (1 + 1e-9));
  }
  return p;
}

// "12.3x" when both reached the target width with brackets that agree; otherwise who did not,
// in how many seconds, or that the brackets disagree.
std::string peer_verdict(const Row& r, const PeerResult& p, double budget) {
  char buf[160];
  if (p.status == "error")
    std::snprintf(buf, sizeof buf, "svds failed: %s", p.note.c_str());
  else if (!peer_agrees(r, p))
    std::snprintf(buf, sizeof buf, "DISAGREE: the brackets are disjoint (no speed ratio)");
  else if (jacond_reached(r) && peer_reached(p))
    std::snprintf(buf, sizeof buf, "jacond %.1fx faster", p.seconds / r.host.lz.report.seconds);
  else if (jacond_reached(r))
    std::snprintf(buf, sizeof buf, "svds: %s; jacond converged in %.1f s", p.note.c_str(), r.host.lz.report.seconds);
  else if (peer_reached(p))
    std::snprintf(buf, sizeof buf, "jacond did not converge in %g s; svds did in %.1f s", budget, p.seconds);
  else
    std::snprintf(buf, sizeof buf, "neither converged in %g s (svds: %s)", budget, p.note.c_str());
  return buf;
}

// The share of a route's first run spent inside its products.
double product_share(const RouteRun& run) {
  return run.seconds_runs.empty() || run.seconds_runs[0] <= 0 ? 0 : run.product_s / run.seconds_runs[0];
}

// "8.1x the host route; products 31% of its time (host 96%)", or, where one route did not
// converge, both product counts and times.
std::string device_verdict(const Row& r) {
  const RouteRun& g = r.device->run;
  const double share = product_share(g), host_share = product_share(r.host);
  char buf[200];
  if (jacond_reached(r) && g.lz.report.status == Status::kBracket)
    std::snprintf(buf, sizeof buf, "%.2fx the host route; products %.0f%% of its time (host %.0f%%)",
                  r.host.lz.report.seconds / g.lz.report.seconds, 100 * share, 100 * host_share);
  else
    std::snprintf(buf, sizeof buf, "%lld products in %.1f s (host: %lld in %.1f s); products %.0f%% of its time (host %.0f%%)",
                  static_cast<long long>(g.lz.report.products), g.lz.report.seconds,
                  static_cast<long long>(r.host.lz.report.products), r.host.lz.report.seconds, 100 * share, 100 * host_share);
  return buf;
}

void print_row(const Row& r, double budget) {
  const ConditionReport& c = r.host.lz.report;
  std::printf("%-10s %-7s %-6s %-20s %-13s %9.2f %9.2f %13.6e %13.6e %9lld %8.0f %8s", r.size.c_str(),
              r.init.c_str(), r.matrix.c_str(), r.method.c_str(), to_string(c.status).c_str(), r.host.lz.largest.seconds,
              c.seconds, c.kappa_lo, c.kappa_hi, static_cast<long long>(c.products), r.rss_mb,
              r.dense_checked ? (r.dense_inside ? "inside" : "OUTSIDE") : "-");
  if (r.method != "jacond-gkl")  // --compare-methods: bracket width, and when σ_min's upper end reached 1 %
    std::printf("  width %.4g  to-1%% %s", c.kappa_hi / c.kappa_lo,
                r.approach.products_1pct < 0 ? "-" : std::to_string(r.approach.products_1pct).c_str());
  std::printf("\n");
  if (r.device) {
    const ConditionReport& g = r.device->run.lz.report;
    std::printf("%-10s %-7s %-6s %-20s %-13s %9.2f %9.2f %13.6e %13.6e %9lld %8s %8s %s\n", "", "", "",
                r.device->route.c_str(), to_string(g.status).c_str(), r.device->run.lz.largest.seconds, g.seconds,
                g.kappa_lo, g.kappa_hi, static_cast<long long>(g.products), "-",
                r.dense_checked ? (r.device->dense_inside ? "inside" : "OUTSIDE") : "-", device_verdict(r).c_str());
  }
  for (const PeerResult& p : r.peers)
    std::printf("%-10s %-7s %-6s %-20s %-13s %9s %9.2f %13.6e %13.6e %9lld %8.0f %8s %s\n", "", "", "",
                ("scipy-" + p.solver).c_str(), p.status.c_str(), "-", p.seconds, p.kappa_lo,
                p.kappa_hi > 0 ? p.kappa_hi : std::numeric_limits<double>::infinity(), p.products, p.rss_mb,
                p.dense_checked ? (p.dense_inside ? "inside" : "OUTSIDE") : "-", peer_verdict(r, p, budget).c_str());
  std::fflush(stdout);
}

// bench_lanczos.csv's device_* columns (blank without --device): the device route's report, the
// seconds inside its products, and device_speedup = host seconds / device seconds where both bracketed.
std::string device_columns(const Row& r) {
  if (!r.device) return ",,,,,,,,,";
  const ConditionReport& g = r.device->run.lz.report;
  const bool both = jacond_reached(r) && g.status == Status::kBracket;
  std::ostringstream out;
  out << r.device->route << ',' << to_string(g.status) << ',' << fmt(g.kappa_lo) << ',' << fmt(g.kappa_hi) << ','
      << fmt(g.seconds) << ',' << g.products << ',' << fmt(r.device->run.product_s) << ','
      << (r.dense_checked ? (r.device->dense_inside ? "yes" : "no") : "") << ','
      << (both ? fmt(r.host.lz.report.seconds / g.seconds) : "") << ',' << joined(r.device->run.seconds_runs);
  return out.str();
}

std::string rows_csv(const std::vector<Row>& rows, int threads, const GklOptions& gkl) {
  std::ostringstream csv;
  csv << "size,init,matrix,n,d,heads,threads,tolerance,budget_s,status,sigma_max,sigma_min,kappa_lo,kappa_hi,"
         "t_sigma_max_s,t_total_s,certified_within_60s,products,peak_rss_mb,dense_kappa,dense_s,dense_inside,speed_ratio,"
         "t_total_runs,product_s,device,device_status,device_kappa_lo,device_kappa_hi,device_t_total_s,device_products,"
         "device_product_s,device_dense_inside,device_speedup,device_t_total_runs,note\n";
  for (const Row& r : rows) {
    const ConditionReport& c = r.host.lz.report;
    const bool cert60 = c.status == Status::kBracket && c.seconds <= 60.0;
    csv << r.size << ',' << r.init << ',' << r.matrix << ',' << r.n << ',' << r.d << ',' << r.heads << ',' << threads << ','
        << fmt(gkl.tolerance) << ',' << fmt(gkl.max_seconds) << ',' << to_string(c.status) << ',' << fmt(c.sigma_max) << ','
        << fmt(c.sigma_min) << ',' << fmt(c.kappa_lo) << ',' << fmt(c.kappa_hi) << ',' << fmt(r.host.lz.largest.seconds) << ','
        << fmt(c.seconds) << ',' << (cert60 ? "yes" : "no") << ',' << c.products << ',' << fmt(r.rss_mb) << ','
        << (r.dense_checked ? fmt(r.dense_kappa) : "") << ',' << (r.dense_checked ? fmt(r.dense_seconds) : "") << ','
        << (r.dense_checked ? (r.dense_inside ? "yes" : "no") : "") << ','
        << (r.dense_checked ? fmt(r.dense_seconds / c.seconds) : "") << ',' << joined(r.host.seconds_runs) << ','
        << fmt(r.host.product_s) << ',' << device_columns(r) << ",\"" << c.note << "\"\n";
  }
  return csv.str();
}

// Long format, one line per (row, route): jacond-gkl and each scipy solver side by side for pandas.
std::string peers_csv(const std::vector<Row>& rows, int threads, const GklOptions& gkl) {
  std::ostringstream csv;
  csv << "size,init,matrix,n,d,heads,threads,tolerance,budget_s,route,status,seconds,setup_s,products,kappa_lo,"
         "kappa_hi,peak_rss_mb,dense_kappa,dense_inside,jacond_seconds,speedup,seconds_runs,verdict,note\n";
  for (const Row& r : rows) {
    const ConditionReport& c = r.host.lz.report;
    const std::string head = r.size + ',' + r.init + ',' + r.matrix + ',' + std::to_string(r.n) + ',' +
                             std::to_string(r.d) + ',' + std::to_string(r.heads) + ',' + std::to_string(threads) + ',' +
                             fmt(gkl.tolerance) + ',' + fmt(gkl.max_seconds) + ',';
    const std::string dense = r.dense_checked ? fmt(r.dense_kappa) : "";
    csv << head << "jacond-gkl," << to_string(c.status) << ',' << fmt(c.seconds) << ",0," << c.products << ','
        << fmt(c.kappa_lo) << ',' << fmt(c.kappa_hi) << ',' << fmt(r.rss_mb) << ',' << dense << ','
        << (r.dense_checked ? (r.dense_inside ? "yes" : "no") : "") << ',' << fmt(c.seconds) << ",," << joined(r.host.seconds_runs)
        << ",,\"" << c.note << "\"\n";
    if (r.device) {  // speedup is the peers' (peer s / jacond s): the device's ratio is in its verdict
      const ConditionReport& g = r.device->run.lz.report;
      csv << head << r.device->route << ',' << to_string(g.status) << ',' << fmt(g.seconds) << ",0," << g.products << ','
          << fmt(g.kappa_lo) << ',' << fmt(g.kappa_hi) << ",," << dense << ','
          << (r.dense_checked ? (r.device->dense_inside ? "yes" : "no") : "") << ',' << fmt(c.seconds) << ",,"
          << joined(r.device->run.seconds_runs) << ",\"" << device_verdict(r) << "\",\"" << g.note << "\"\n";
    }
    for (const PeerResult& p : r.peers) {
      const bool both = jacond_reached(r) && peer_reached(p);
      csv << head << "scipy-" << p.solver << ',' << p.status << ',' << fmt(p.seconds) << ',' << fmt(p.setup_s) << ','
          << p.products << ',' << fmt(p.kappa_lo) << ','
          << (p.kappa_hi > 0 ? fmt(p.kappa_hi) : fmt(std::numeric_limits<double>::infinity())) << ','
          << fmt(p.rss_mb) << ',' << dense << ',' << (p.dense_checked ? (p.dense_inside ? "yes" : "no") : "") << ','
          << fmt(c.seconds) << ',' << (both ? fmt(p.seconds / c.seconds) : "") << ',' << joined(p.seconds_runs) << ",\""
          << peer_verdict(r, p, gkl.max_seconds) << "\",\"" << p.note << "\"\n";
    }
  }
  return csv.str();
}

// --compare-methods: one row per (matrix, method).
std::string methods_csv(const std::vector<Row>& rows, int threads, const GklOptions& gkl) {
  std::ostringstream csv;
  csv << "size,init,matrix,n,d,heads,nd,threads,tolerance,budget_s,method,basis,basis_mb,status,seconds,products,"
         "kappa_lo,kappa_hi,width,dense_kappa,dense_sigma_min,dense_inside,products_to_10pct,products_to_1pct,note\n";
  for (const Row& r : rows) {
    const ConditionReport& c = r.host.lz.report;
    const Index nd = r.n * r.d;
    const auto products_or_blank = [](Index p) { return p < 0 ? std::string() : std::to_string(p); };
    csv << r.size << ',' << r.init << ',' << r.matrix << ',' << r.n << ',' << r.d << ',' << r.heads << ',' << nd << ','
        << threads << ',' << fmt(gkl.tolerance) << ',' << fmt(gkl.max_seconds) << ',' << r.method << ',' << r.basis << ','
        << fmt(basis_bytes(nd, r.basis) / 1e6) << ',' << to_string(c.status) << ',' << fmt(c.seconds) << ','
        << c.products << ',' << fmt(c.kappa_lo) << ',' << fmt(c.kappa_hi) << ',' << fmt(c.kappa_hi / c.kappa_lo) << ','
        << (r.dense_checked ? fmt(r.dense_kappa) : "") << ',' << (r.dense_checked ? fmt(r.sigma_min_dense) : "") << ','
        << (r.dense_checked ? (r.dense_inside ? "yes" : "no") : "") << ','
        << products_or_blank(r.approach.products_10pct) << ',' << products_or_blank(r.approach.products_1pct) << ",\""
        << c.note << "\"\n";
  }
  return csv.str();
}

// Every estimate of every --compare-methods run (GklOptions::progress).
std::string trace_csv(const std::vector<Row>& rows) {
  std::ostringstream csv;
  csv << "size,init,matrix,method,end,products,steps,lo,hi,dense_sigma_min\n";
  for (const Row& r : rows)
    for (const GklProgress& p : r.trace)
      csv << r.size << ',' << r.init << ',' << r.matrix << ',' << r.method << ',' << (p.smallest ? "min" : "max") << ','
          << p.products << ',' << p.steps << ',' << fmt(p.lo) << ',' << fmt(p.hi) << ','
          << (r.dense_checked ? fmt(r.sigma_min_dense) : "") << '\n';
  return csv.str();
}

// --device: where the second jacond route's products run (null for cpu: the host route alone).
// cuda without a GPU in this LibTorch is a one-line error (exit 1): the flag is right, the machine is not.
std::shared_ptr<const OperatorDevice> bench_operator_device(const std::string& device, int threads) {
  if (device == "cpu") return nullptr;
  if (device == "torch-cpu") {
    torch::set_num_threads(threads);  // ATen's own pool, apart from OpenBLAS's (set_threads)
    return std::make_shared<models::TorchOperatorDevice>(torch::Device(torch::kCPU));
  }
  std::string why;
  std::shared_ptr<const OperatorDevice> cuda = models::cuda_operator_device(&why);
  if (!cuda) throw std::runtime_error("--device cuda: no usable GPU (" + why + ")");
  return cuda;
}

// The flags of `jacond bench lanczos`, parsed and checked.
struct BenchLanczosArgs {
  std::string sizes_spec = "vit-s,vit-b", inits_spec = "ours,timm", matrices_spec = "K_sab,K_ffn,K_sa",
              out_dir = "results/bench-lanczos", peers_spec = "arpack", methods_spec, device = "cpu";
  int threads = 2, repeats = 5;
  GklOptions gkl;
  bool check_dense = false;
  PeerSetup peer;
  double basis_memory_gb = 8;
  std::vector<Size> sizes;  // the specs parsed
  std::vector<std::string> inits, matrices;
  std::vector<Method> methods;
};

// The flags; std::nullopt after --help. Usage errors exit 2 (check_usage).
std::optional<BenchLanczosArgs> parse_bench_lanczos(int argc, char** argv) {
  BenchLanczosArgs a;
  GklOptions& gkl = a.gkl;
  gkl.max_seconds = 120;
  po::options_description desc("jacond bench lanczos: matrix-free kappa brackets at ViT sizes, against scipy svds");
  desc.add_options()("help,h", "this help")
      ("sizes", po::value(&a.sizes_spec)->default_value(a.sizes_spec),
       "comma list of vit-s | vit-b | dense6400 | dense12480 | nNdDhH (e.g. n65d192h3)")
      ("inits", po::value(&a.inits_spec)->default_value(a.inits_spec), "comma list of ours | timm | mimetic")
      ("matrices", po::value(&a.matrices_spec)->default_value(a.matrices_spec), "comma list of K_sab | K_ffn | K_sa")
      ("seconds", number_value(&gkl.max_seconds), "budget per matrix and route")
      ("tol", number_value(&gkl.tolerance), "target kappa_hi/kappa_lo - 1")
      ("basis", po::value(&gkl.max_basis)->default_value(gkl.max_basis), "Krylov basis before a restart")
      ("start-seed", po::value(&gkl.seed)->default_value(gkl.seed), "seed of the Gaussian start vectors (jacond and peers)")
      ("check-dense", po::bool_switch(&a.check_dense), "also run the dense route (only for nd <= 12500)")
      ("peers", po::value(&a.peers_spec)->default_value(a.peers_spec),
       "comma list of scipy svds solvers run on the same block: arpack | propack | lobpcg, or none")
      ("compare-methods", po::value(&a.methods_spec),
       "comma list of restart-K | unrestarted: run each solver configuration on each matrix (no peers), "
       "write bench_lanczos_methods.csv and bench_lanczos_trace.csv")
      ("basis-memory-gb", number_value(&a.basis_memory_gb), "memory for the unrestarted method's basis")
      ("python", po::value(&a.peer.python)->default_value(a.peer.python), "Python with torch, numpy and scipy")
      ("peer-script", po::value(&a.peer.script)->default_value(a.peer.script), "the SciPy route script")
      ("threads", po::value(&a.threads)->default_value(a.threads), "BLAS threads (jacond and the peers)")
      ("device", po::value(&a.device)->default_value(a.device),
       "cpu | cuda | torch-cpu: besides the host route, run jacond's route again with its products on this "
       "device (cuda: the GPU; torch-cpu: the same ATen code on the CPU), and report both and their ratio")
      ("repeats", po::value(&a.repeats)->default_value(a.repeats),
       "runs of a route that brackets in under 2 s, jacond's and each peer's; the median seconds is reported")
      ("out", po::value(&a.out_dir)->default_value(a.out_dir), "output directory");
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return std::nullopt;  // argv[0] = "lanczos"
  gkl.keep = std::max<Index>(1, gkl.max_basis / 3);
  check_usage([&] {
    for (const auto& m : split_commas(a.methods_spec)) a.methods.push_back(parse_method(m));
    if (!a.methods.empty()) {
      if (!vm["peers"].defaulted() && a.peers_spec != "none")
        throw std::invalid_argument("--compare-methods runs jacond's solvers only: drop --peers (or --peers none)");
      a.peers_spec = "none";
    }
    if (!(a.basis_memory_gb > 0)) throw std::invalid_argument("--basis-memory-gb must be > 0");
    a.sizes = parse_sizes(a.sizes_spec);
    a.inits = split_commas(a.inits_spec);
    a.matrices = split_commas(a.matrices_spec);
    for (const auto& [flag, list] : {std::pair<const char*, size_t>{"--sizes", a.sizes.size()}, {"--inits", a.inits.size()},
                                     {"--matrices", a.matrices.size()}})
      if (list == 0) throw std::invalid_argument(std::string(flag) + " is empty: nothing to measure");
    for (const auto& m : a.matrices)
      if (m != "K_sab" && m != "K_ffn" && m != "K_sa")
        throw std::invalid_argument("--matrices: unknown matrix '" + m + "' (K_sab | K_ffn | K_sa)");
    for (const auto& init : a.inits) parse_flag("--inits", [&] { return models::parse_init_scheme(init); });
    if (!(gkl.max_seconds > 0) || !(gkl.tolerance > 0) || gkl.max_basis < 2)
      throw std::invalid_argument("--seconds and --tol must be > 0 and --basis >= 2");
    if (a.threads < 1) throw std::invalid_argument("--threads must be >= 1");
    if (a.repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
    if (a.device != "cpu" && a.device != "cuda" && a.device != "torch-cpu")
      throw std::invalid_argument("--device must be cpu, cuda or torch-cpu, got '" + a.device + "'");
    if (a.device != "cpu" && !a.methods.empty())
      throw std::invalid_argument("--device compares the default route's two devices: drop --compare-methods");
    if (a.peers_spec != "none") a.peer.solvers = split_commas(a.peers_spec);
    for (const auto& s : a.peer.solvers)
      if (s != "arpack" && s != "propack" && s != "lobpcg")
        throw std::invalid_argument("--peers: unknown solver '" + s + "' (arpack | propack | lobpcg | none)");
    if (!a.peer.solvers.empty()) {
      if (!std::filesystem::exists(a.peer.script))
        throw std::invalid_argument("--peer-script: " + a.peer.script + " does not exist");
      if (::access(a.peer.python.c_str(), X_OK) != 0)
        throw std::invalid_argument("--python: " + a.peer.python + " is not executable");
    }
  });
  return a;
}

// Every size × init × matrix: each --compare-methods solver, or jacond's default route (again
// with its products on `products_device` where one is given) and each SciPy peer; a row each,
// printed as it comes.
std::vector<Row> measure_all(const BenchLanczosArgs& a, const OperatorDevice* products_device) {
  const GklOptions& gkl = a.gkl;
  std::vector<Row> rows;
  std::printf("%-10s %-7s %-6s %-20s %-13s %9s %9s %13s %13s %9s %8s %8s\n", "size", "init", "matrix", "route",
              "status", "t_smax_s", "t_total_s", "kappa_lo", "kappa_hi", "products", "rss_MB", "dense");
  for (const Size& sz : a.sizes)
    for (const auto& init : a.inits) {
      const models::TensorMap tensors = init_tensors(init, 2.0, 0.6, 3.0, "default", 0, sz.d, sz.heads, 4 * sz.d);
      const BlockWeights w = models::block_from_timm(tensors, 0, sz.heads);
      const Mat X = gaussian_tokens(sz.n, sz.d, 0);
      const BlockForward f = block_forward(w, X, SkipMode::kFull);  // K_sab, K_ffn with residuals
      const std::string dir = a.peer.solvers.empty() ? "" : write_peer_inputs(a.out_dir, sz, init, tensors, X);
      for (const auto& m : a.matrices) {
        const DenseTruth truth = a.check_dense ? dense_truth(sz, m, w, f) : DenseTruth{};
        for (const Method& method : a.methods) {
          const Index basis = method_basis(method, sz.n * sz.d, a.basis_memory_gb);
          rows.push_back(measure(sz, init, m, w, f, gkl, method, basis, truth, 1));
          print_row(rows.back(), gkl.max_seconds);
        }
        if (!a.methods.empty()) continue;
        rows.push_back(measure(sz, init, m, w, f, gkl, {"jacond-gkl", gkl.max_basis, gkl.keep}, gkl.max_basis, truth, a.repeats));
        if (products_device) measure_on_device(rows.back(), *products_device, w, f, gkl, a.repeats);
        for (const auto& solver : a.peer.solvers) {
          try {
            rows.back().peers.push_back(
                run_peer(a.peer, solver, dir, rows.back(), w.effective_logit_scale(), gkl, a.threads, a.repeats));
          } catch (const std::runtime_error& e) {  // recorded, and the run exits 1 once every table is written
            PeerResult failed;
            failed.solver = solver, failed.status = "error", failed.note = e.what();
            rows.back().peers.push_back(failed);
          }
        }
        print_row(rows.back(), gkl.max_seconds);
      }
    }
  return rows;
}

// DIR/bench_lanczos.csv, the peers' and the methods' tables where they ran, and run.json.
void write_results(const BenchLanczosArgs& a, const std::vector<Row>& rows, const OperatorDevice* products_device,
                   int argc, char** argv) {
  const bool peers = !a.peer.solvers.empty(), methods = !a.methods.empty();
  write_file_atomic(a.out_dir + "/bench_lanczos.csv", rows_csv(rows, a.threads, a.gkl));
  if (peers) write_file_atomic(a.out_dir + "/bench_lanczos_peers.csv", peers_csv(rows, a.threads, a.gkl));
  if (methods) {
    write_file_atomic(a.out_dir + "/bench_lanczos_methods.csv", methods_csv(rows, a.threads, a.gkl));
    write_file_atomic(a.out_dir + "/bench_lanczos_trace.csv", trace_csv(rows));
  }
  nlohmann::json meta = run_metadata(argc, argv, "bench");
  meta["benchmark"] = "lanczos";
  meta["rows"] = rows.size();
  meta["peers"] = a.peer.solvers;
  meta["compare_methods"] = a.methods_spec;
  meta["basis_memory_gb"] = a.basis_memory_gb;
  meta["peer_script"] = peers ? a.peer.script : "";
  meta["device"] = {{"name", a.device},
                    {"matrix_free", products_device ? products_device->description() : "host kernels only"}};
  meta["note"] = "peak_rss_mb is cumulative for the process (getrusage ru_maxrss); a peer's is its own process's";
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::printf("wrote %s/bench_lanczos.csv%s%s and run.json\n", a.out_dir.c_str(), peers ? ", bench_lanczos_peers.csv" : "",
              methods ? ", bench_lanczos_methods.csv, bench_lanczos_trace.csv" : "");
}

}  // namespace

int run_bench_lanczos(int argc, char** argv) {
  const std::optional<BenchLanczosArgs> parsed = parse_bench_lanczos(argc, argv);
  if (!parsed) return 0;
  const BenchLanczosArgs& a = *parsed;
  set_threads(a.threads);
  const std::shared_ptr<const OperatorDevice> products_device = bench_operator_device(a.device, a.threads);
  begin_output_set(a.out_dir, "bench", bench_tables());
  const std::vector<Row> rows = measure_all(a, products_device.get());
  write_results(a, rows, products_device.get(), argc, argv);
  check_brackets(rows);
  return 0;
}

}  // namespace jacond::cli
