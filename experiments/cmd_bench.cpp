// `jacond bench dense`: jacond's exact κ(K_sa) against the route a PyTorch user would take,
// measured in the same run on the same weights and tokens (DESIGN §8: speed is measured by
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
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "analysis/block.h"
#include "analysis/condition.h"
#include "analysis/jacobians.h"
#include "analysis/threads.h"
#include "experiments/bench_lanczos.h"
#include "experiments/cli_common.h"
#include "experiments/python_route.h"
#include "experiments/commands.h"
#include "models/bridge.h"
#include "models/init.h"
#include "models/safetensors.h"


namespace jacond::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kEps = std::numeric_limits<double>::epsilon();
constexpr double kKappaRelTolFloor = 1e-6;  // relative κ agreement while eps·κ is small
constexpr double kKappaTolFactor = 45.0;    // C in max(1e-6, C·eps·κ): 1e-6 at κ ≈ 1e8

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Shape {
  Index n = 0, d = 0, heads = 0;
  Index N() const { return n * d; }
};

// The standard sizes of the benchmark: N = n·d -> (n, d, heads); every one has d_h = 16.
const std::map<Index, Shape>& standard_sizes() {
  static const std::map<Index, Shape> sizes = {
      {1024, {32, 32, 2}}, {3200, {50, 64, 4}}, {6400, {100, 64, 4}}};
  return sizes;
}

std::vector<Shape> parse_sizes(const std::string& spec) {
  std::vector<Shape> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t pos = 0;
    long long N = 0;
    try {
      N = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (item.empty() || pos != item.size())
      throw std::invalid_argument("--sizes: '" + item + "' is not an integer N = n*d");
    auto it = standard_sizes().find(N);
    if (it == standard_sizes().end()) {
      std::string known;
      for (const auto& [k, s] : standard_sizes())
        known += (known.empty() ? "" : ", ") + std::to_string(k) + "=(" + std::to_string(s.n) + "," +
                 std::to_string(s.d) + "," + std::to_string(s.heads) + ")";
      throw std::invalid_argument("--sizes: no standard (n, d, heads) for N = " + item + " (known: " + known +
                                  "); use --n --d --heads for a custom size");
    }
    out.push_back(it->second);
  }
  if (out.empty()) throw std::invalid_argument("--sizes: empty list");
  return out;
}

// One route's timings and spectrum ends for one size (the best of --repeat runs by total).
struct RouteResult {
  std::string route, method;
  double assembly_s = 0, kappa_s = 0, total_s = 0, total_median_s = 0;
  double sigma_max = 0, sigma_min = 0, kappa = 0;
  Status status = Status::kExact;
  std::string note;
  bool ran = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// jacond in-process: forward + dense K + (condition_fast | condition_svd), `repeat` times.
// K lives only inside one iteration, so at most one K (plus the κ routine's own copy) exists.
RouteResult run_jacond_route(const BlockWeights& w, const Mat& X, bool full_spectrum, int repeat) {
  RouteResult best;
  best.route = full_spectrum ? "jacond-full-spectrum" : "jacond-exact-kappa";
  std::vector<double> totals;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    double assembly = 0;
    ConditionReport rep;
    {
      Mat K;
      {
        const AttentionCache cache = attention_forward(w, X);
        K = attention_jacobian(w, cache, AttentionPart::kFull);
      }
      assembly = seconds_since(t0);
      rep = full_spectrum ? condition_svd(K, "K_sa") : condition_fast(std::move(K), "K_sa");
    }
    const double total = seconds_since(t0);
    totals.push_back(total);
    if (!best.ran || total < best.total_s) {
      best.ran = true;
      best.method = rep.method;
      best.assembly_s = assembly;
      best.total_s = total;
      best.kappa_s = total - assembly;
      best.sigma_max = rep.sigma_max;
      best.sigma_min = rep.sigma_min;
      best.kappa = rep.kappa;
      best.status = rep.status;
      best.note = rep.note;
    }
  }
  best.total_median_s = median(totals);
  return best;
}

// ---------------------------------------------------------------------------------------------
// The Python route as a subprocess.

struct TorchResult {
  RouteResult route;
  double wall_s = 0;  // whole subprocess: interpreter start, imports, loading, repeats
  std::string torch_version;
  int threads = 0;
  nlohmann::json raw;
};

TorchResult run_torch_route(const std::string& python, const std::string& script, const std::string& dir,
                            const Shape& s, double logit_scale, int threads, int repeat) {
  const std::vector<std::string> argv = {python,
                                         script,
                                         "--weights",
                                         dir + "/weights.safetensors",
                                         "--tokens",
                                         dir + "/tokens.safetensors",
                                         "--heads",
                                         std::to_string(s.heads),
                                         "--layer",
                                         "0",
                                         "--logit-scale",
                                         fmt(logit_scale),
                                         "--threads",
                                         std::to_string(threads),
                                         "--repeat",
                                         std::to_string(repeat)};
  PythonRun run;
  const nlohmann::json j = run_python_json(
      argv, threads, dir, "torch route (N=" + std::to_string(s.N()) + ", " + python + " " + script + ")",
      {"jacobian_s", "svd_s", "total_s", "sigma_max", "sigma_min", "torch_version", "threads"}, &run);
  TorchResult t;
  t.raw = j;
  t.wall_s = run.wall_s;
  t.torch_version = j["torch_version"].get<std::string>();
  t.threads = j["threads"].get<int>();
  RouteResult& r = t.route;
  r.ran = true;
  r.route = "torch";
  r.method = "autograd.functional.jacobian+linalg.svdvals";
  r.assembly_s = j["jacobian_s"].get<double>();
  r.kappa_s = j["svd_s"].get<double>();
  r.total_s = r.total_median_s = j["total_s"].get<double>();
  r.sigma_max = j["sigma_max"].get<double>();
  r.sigma_min = j["sigma_min"].get<double>();
  // Same contract as analysis/condition.h: below the noise floor κ is not a number we give.
  const double tol = noise_floor(s.N(), s.N(), r.sigma_max);
  if (r.sigma_max > 0 && r.sigma_min > tol) {
    r.kappa = r.sigma_max / r.sigma_min;
    r.status = Status::kExact;
  } else {
    r.kappa = std::numeric_limits<double>::infinity();
    r.status = Status::kSingular;
  }
  if (t.threads != threads) r.note = "torch reports " + std::to_string(t.threads) + " threads";
  return t;
}

// ---------------------------------------------------------------------------------------------
// κ agreement (see the header comment).

struct Agreement {
  bool checked = false, pass = true;
  double rel_diff = std::numeric_limits<double>::quiet_NaN();
  double tol = std::numeric_limits<double>::quiet_NaN();
  std::string verdict = "n/a";  // PASS, FAIL, n/a
  std::string why;
};

double kappa_tolerance(double kappa) { return std::max(kKappaRelTolFloor, kKappaTolFactor * kEps * kappa); }

Agreement compare(const RouteResult& a, const RouteResult& b) {
  Agreement g;
  if (!a.ran || !b.ran) return g;
  g.checked = true;
  const bool sa = a.status == Status::kSingular, sb = b.status == Status::kSingular;
  if (sa || sb) {
    g.pass = sa && sb;
    g.verdict = g.pass ? "PASS" : "FAIL";
    g.why = g.pass ? "both singular (sigma_min under the noise floor)"
                   : std::string(sa ? a.route : b.route) + " finds K singular, the other does not";
    return g;
  }
  g.rel_diff = std::abs(a.kappa - b.kappa) / std::abs(b.kappa);
  g.tol = kappa_tolerance(std::max(a.kappa, b.kappa));
  g.pass = g.rel_diff <= g.tol;
  g.verdict = g.pass ? "PASS" : "FAIL";
  if (!g.pass)
    g.why = a.route + " kappa " + fmt(a.kappa) + " vs " + b.route + " kappa " + fmt(b.kappa) + ": relative difference " +
            fmt(g.rel_diff) + " > tolerance " + fmt(g.tol);
  return g;
}

// ---------------------------------------------------------------------------------------------

struct SizeResult {
  Shape shape;
  double logit_scale = 0;
  std::string dir;
  RouteResult exact, full;
  std::optional<TorchResult> torch;
  Agreement exact_vs_torch, full_vs_torch, exact_vs_full;
  bool torch_failed = false;
  bool pass() const { return !torch_failed && exact_vs_torch.pass && full_vs_torch.pass && exact_vs_full.pass; }
};

std::string ratio_str(double num, double den) {
  if (!(den > 0) || !std::isfinite(num)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fx", num / den);
  return buf;
}

std::string kappa_str(const RouteResult& r) {
  if (!r.ran) return "n/a";
  if (r.status == Status::kSingular) return "singular";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6e", r.kappa);
  return buf;
}

std::string sci(double x, const char* f = "%.2e") {
  if (std::isnan(x)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

void print_tables(const std::vector<SizeResult>& results) {
  std::printf("\n%6s %4s %3s %5s | %12s %12s %10s | %11s %10s | %14s %14s %9s %9s %6s\n", "N", "n", "d", "heads",
              "jacond-exact", "jacond-full", "torch", "torch/exact", "torch/full", "kappa jacond", "kappa torch",
              "rel diff", "tol", "agree");
  for (const auto& r : results) {
    const bool t = r.torch.has_value();
    const double torch_s = t ? r.torch->route.total_s : std::nan("");
    // Relative κ difference: the larger of jacond-exact and jacond-full vs torch (or exact vs
    // full when the torch route was skipped); the tolerance is the same for both comparisons.
    const Agreement& g = t ? r.exact_vs_torch : r.exact_vs_full;
    double rel = g.rel_diff;
    if (t && !std::isnan(r.full_vs_torch.rel_diff)) rel = std::max(rel, r.full_vs_torch.rel_diff);
    std::printf("%6lld %4lld %3lld %5lld | %11.3fs %11.3fs %10s | %11s %10s | %14s %14s %9s %9s %6s\n",
                static_cast<long long>(r.shape.N()), static_cast<long long>(r.shape.n),
                static_cast<long long>(r.shape.d), static_cast<long long>(r.shape.heads), r.exact.total_s,
                r.full.total_s, t ? (sci(torch_s, "%.3f") + "s").c_str() : r.torch_failed ? "FAILED" : "skipped",
                ratio_str(torch_s, r.exact.total_s).c_str(), ratio_str(torch_s, r.full.total_s).c_str(),
                kappa_str(r.exact).c_str(), t ? kappa_str(r.torch->route).c_str() : "n/a", sci(rel).c_str(),
                sci(g.tol).c_str(), r.pass() ? "PASS" : "FAIL");
  }
  std::printf("\nsplit (seconds): assembly = forward + dense K (jacond) | autograd jacobian (torch); "
              "kappa = LU+Lanczos | dgesdd | svdvals\n");
  std::printf("%6s | %10s %12s | %10s %12s | %12s %12s %10s\n", "N", "jc assembly", "jc LU+Lanczos", "jc assembly",
              "jc gesdd", "torch jacob.", "torch svdvals", "torch wall");
  for (const auto& r : results) {
    const bool t = r.torch.has_value();
    std::printf("%6lld | %11.3f %13.3f | %11.3f %12.3f | %12s %13s %10s\n", static_cast<long long>(r.shape.N()),
                r.exact.assembly_s, r.exact.kappa_s, r.full.assembly_s, r.full.kappa_s,
                t ? sci(r.torch->route.assembly_s, "%.3f").c_str() : "-",
                t ? sci(r.torch->route.kappa_s, "%.3f").c_str() : "-",
                t ? sci(r.torch->wall_s, "%.3f").c_str() : "-");
  }
}

std::string csv_row(const SizeResult& s, const std::string& init, uint64_t seed, int threads, double logit_scale,
                    int repeat, const RouteResult& r, const Agreement& vs_torch, double torch_total) {
  std::ostringstream os;
  os << s.shape.N() << ',' << s.shape.n << ',' << s.shape.d << ',' << s.shape.heads << ",K_sa," << init << ','
     << seed << ',' << threads << ',' << fmt(logit_scale) << ',' << repeat << ',' << r.route << ',' << r.method << ','
     << fmt(r.assembly_s) << ',' << fmt(r.kappa_s) << ',' << fmt(r.total_s) << ',' << fmt(r.total_median_s) << ','
     << (r.route == "torch" ? std::string("1") : std::isnan(torch_total) ? std::string() : fmt(torch_total / r.total_s))
     << ',' << fmt(r.sigma_max) << ',' << fmt(r.sigma_min) << ',' << fmt(r.kappa) << ',' << to_string(r.status) << ','
     << (vs_torch.checked ? fmt(vs_torch.rel_diff) : "") << ',' << (vs_torch.checked ? fmt(vs_torch.tol) : "") << ','
     << vs_torch.verdict << '\n';
  return os.str();
}

nlohmann::json route_json(const RouteResult& r) {
  nlohmann::json j;
  j["route"] = r.route;
  j["method"] = r.method;
  j["assembly_s"] = r.assembly_s;
  j["kappa_s"] = r.kappa_s;
  j["total_s"] = r.total_s;
  j["total_median_s"] = r.total_median_s;
  j["sigma_max"] = r.sigma_max;
  j["sigma_min"] = r.sigma_min;
  j["kappa"] = std::isfinite(r.kappa) ? nlohmann::json(r.kappa) : nlohmann::json(fmt(r.kappa));
  j["status"] = to_string(r.status);
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

nlohmann::json agreement_json(const Agreement& g) {
  nlohmann::json j;
  j["verdict"] = g.verdict;
  if (!std::isnan(g.rel_diff)) j["rel_diff"] = g.rel_diff;
  if (!std::isnan(g.tol)) j["tol"] = g.tol;
  if (!g.why.empty()) j["why"] = g.why;
  return j;
}

void write_outputs(const std::string& out_dir, int argc, char** argv, const std::vector<SizeResult>& results,
                   const std::string& init, uint64_t seed, int threads, int repeat, const std::string& python,
                   const std::string& script, bool skip_python, const std::string& error) {
  std::string csv =
      "N,n,d,heads,matrix,init,seed,threads,logit_scale,repeat,route,method,assembly_s,kappa_s,total_s,"
      "total_median_s,torch_over_this,sigma_max,sigma_min,kappa,status,kappa_rel_diff_vs_torch,kappa_tol,"
      "agree_with_torch\n";
  nlohmann::json sizes = nlohmann::json::array();
  std::string torch_version;
  for (const auto& s : results) {
    const double lscale = s.logit_scale;
    const double torch_total = s.torch ? s.torch->route.total_s : std::nan("");
    csv += csv_row(s, init, seed, threads, lscale, repeat, s.exact, s.exact_vs_torch, torch_total);
    csv += csv_row(s, init, seed, threads, lscale, repeat, s.full, s.full_vs_torch, torch_total);
    nlohmann::json j;
    j["N"] = s.shape.N();
    j["n"] = s.shape.n;
    j["d"] = s.shape.d;
    j["heads"] = s.shape.heads;
    j["logit_scale"] = lscale;
    j["dir"] = s.dir;
    j["jacond_exact"] = route_json(s.exact);
    j["jacond_full"] = route_json(s.full);
    j["exact_vs_full"] = agreement_json(s.exact_vs_full);
    if (s.torch) {
      csv += csv_row(s, init, seed, threads, lscale, repeat, s.torch->route, Agreement{}, torch_total);
      j["torch"] = route_json(s.torch->route);
      j["torch"]["wall_s"] = s.torch->wall_s;
      j["torch"]["script_output"] = s.torch->raw;
      j["exact_vs_torch"] = agreement_json(s.exact_vs_torch);
      j["full_vs_torch"] = agreement_json(s.full_vs_torch);
      torch_version = s.torch->torch_version;
    }
    j["pass"] = s.pass();
    sizes.push_back(j);
  }
  write_file_atomic(out_dir + "/bench_dense.csv", csv);

  nlohmann::json run = run_metadata(argc, argv);
  run["benchmark"] = "dense";
  run["matrix"] = "K_sa = d vec SA(X) / d vec X, bare multi-head self-attention (no LayerNorm, no residual), Eq. 10";
  run["init"] = init;
  run["seed"] = seed;
  run["layer"] = 0;
  run["hidden"] = "4d";
  run["tokens"] = "gaussian_tokens(n, d, seed): N(0, 1) entries";
  run["repeat"] = repeat;
  run["timing"] = "best of repeat by total; median in total_median_s";
  run["routes"] = {{"jacond-exact-kappa", "attention_forward + attention_jacobian + condition_fast (LU + Lanczos)"},
                   {"jacond-full-spectrum", "attention_forward + attention_jacobian + condition_svd (LAPACKE dgesdd)"},
                   {"torch", skip_python ? "skipped (--skip-python)"
                                         : "torch.autograd.functional.jacobian + torch.linalg.svdvals (" + script +
                                               ")"}};
  run["python"] = python;
  if (!torch_version.empty()) run["torch_version"] = torch_version;
  run["kappa_tolerance"] = "rel diff <= max(1e-6, 45*eps*kappa); both routes must agree on status singular";
  run["sizes"] = sizes;
  bool pass = error.empty();
  for (const auto& s : results) pass = pass && s.pass();
  run["pass"] = pass;
  if (!error.empty()) run["error"] = error;
  write_file_atomic(out_dir + "/run.json", run.dump(2) + "\n");
}

int run_bench_dense(int argc, char** argv, const po::variables_map& vm) {
  const int threads = vm["threads"].as<int>();
  const int repeat = vm["repeat"].as<int>();
  const uint64_t seed = vm["seed"].as<uint64_t>();
  const std::string init = vm["init"].as<std::string>();
  const std::string out_dir = vm["out"].as<std::string>();
  const std::string python = vm["python"].as<std::string>();
  const std::string script = vm["script"].as<std::string>();
  const bool skip_python = vm.count("skip-python") > 0;
  if (threads < 1) throw std::invalid_argument("--threads must be >= 1, got " + std::to_string(threads));
  if (repeat < 1) throw std::invalid_argument("--repeat must be >= 1, got " + std::to_string(repeat));

  // Sizes: --sizes, and/or one custom --n --d --heads (which replaces the default list unless
  // --sizes is given explicitly too).
  std::vector<Shape> shapes;
  const int custom = static_cast<int>(vm.count("n") + vm.count("d") + vm.count("heads"));
  if (custom != 0 && custom != 3) throw std::invalid_argument("--n, --d and --heads go together (one custom size)");
  if (custom == 0 || !vm["sizes"].defaulted()) shapes = parse_sizes(vm["sizes"].as<std::string>());
  if (custom == 3) {
    Shape s{vm["n"].as<Index>(), vm["d"].as<Index>(), vm["heads"].as<Index>()};
    if (s.n < 1 || s.d < 1 || s.heads < 1 || s.d % s.heads != 0)
      throw std::invalid_argument("custom size needs n, d, heads >= 1 and d divisible by heads, got n=" +
                                  std::to_string(s.n) + " d=" + std::to_string(s.d) + " heads=" + std::to_string(s.heads));
    shapes.push_back(s);
  }
  for (size_t i = 0; i < shapes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (shapes[i].N() == shapes[j].N())
        throw std::invalid_argument("two sizes with N = " + std::to_string(shapes[i].N()) + " (one directory each)");

  models::InitConfig cfg = models::InitConfig::for_scheme(models::parse_init_scheme(init), seed);
  if (!skip_python) {
    if (!fs::exists(script)) throw std::invalid_argument("--script: " + script + " does not exist");
    if (::access(python.c_str(), X_OK) != 0) throw std::invalid_argument("--python: " + python + " is not executable");
  }

  set_threads(threads);
  ensure_directory(out_dir);
  std::printf("jacond bench dense: kappa(K_sa), K_sa = d vec SA(X)/d vec X of BARE multi-head self-attention\n"
              "  (qkv/proj with biases, logits / sqrt(d_h); no LayerNorm, no residual, so both routes differentiate\n"
              "  the same function). init=%s seed=%llu layer 0, X ~ N(0,1), fp64, threads=%d, repeat=%d (best).\n"
              "  jacond-exact: forward + closed-form dense K + LU/Lanczos; jacond-full: ... + dgesdd (all sigma);\n"
              "  torch: autograd.functional.jacobian + linalg.svdvals in %s.\n",
              init.c_str(), static_cast<unsigned long long>(seed), threads, repeat,
              skip_python ? "(skipped)" : python.c_str());
  std::fflush(stdout);

  std::vector<SizeResult> results;
  std::string error;
  for (const Shape& s : shapes) {
    SizeResult res;
    res.shape = s;
    res.dir = out_dir + "/size-" + std::to_string(s.N());
    ensure_directory(res.dir);

    // Weights (timm names, fp64) and tokens, written for the Python route.
    models::TensorMap tensors;
    models::init_block(tensors, 0, s.d, s.heads, 4 * s.d, cfg);
    const BlockWeights w = models::block_from_timm(tensors, 0, s.heads);
    res.logit_scale = w.effective_logit_scale();
    const Mat X = gaussian_tokens(s.n, s.d, seed);
    const std::map<std::string, std::string> meta = {{"init", init},
                                                     {"seed", std::to_string(seed)},
                                                     {"heads", std::to_string(s.heads)},
                                                     {"logit_scale", fmt(w.effective_logit_scale())},
                                                     {"written_by", "jacond bench dense"}};
    models::save_safetensors(res.dir + "/weights.safetensors", tensors, meta);
    models::save_safetensors(res.dir + "/tokens.safetensors", {{"tokens", models::to_torch(X)}}, meta);
    tensors.clear();

    std::printf("N=%lld (n=%lld, d=%lld, heads=%lld): jacond exact ...", static_cast<long long>(s.N()),
                static_cast<long long>(s.n), static_cast<long long>(s.d), static_cast<long long>(s.heads));
    std::fflush(stdout);
    res.exact = run_jacond_route(w, X, false, repeat);
    std::printf(" %.3fs, full spectrum ...", res.exact.total_s);
    std::fflush(stdout);
    res.full = run_jacond_route(w, X, true, repeat);
    std::printf(" %.3fs", res.full.total_s);
    std::fflush(stdout);
    res.exact_vs_full = compare(res.exact, res.full);
    if (!skip_python) {
      std::printf(", torch ...");
      std::fflush(stdout);
      try {
        res.torch = run_torch_route(python, script, res.dir, s, w.effective_logit_scale(), threads, repeat);
      } catch (const std::exception& e) {
        error = e.what();
        res.torch_failed = true;
      }
      if (res.torch) {
        std::printf(" %.3fs", res.torch->route.total_s);
        res.exact_vs_torch = compare(res.exact, res.torch->route);
        res.full_vs_torch = compare(res.full, res.torch->route);
      }
    }
    std::printf("\n");
    std::fflush(stdout);
    results.push_back(std::move(res));
    if (!error.empty()) break;
  }

  print_tables(results);
  if (skip_python) std::printf("(torch skipped: rel diff and agree compare jacond-exact with jacond-full)\n");
  std::printf("\nagreement: |kappa_a - kappa_b|/kappa_b <= max(1e-6, 45*eps*kappa): sigma_min of a dense fp64 route is\n"
              "  off by O(eps*sigma_max), so relative kappa differences of O(eps*kappa) are noise (1e-6 up to kappa~1e8).\n");
  write_outputs(out_dir, argc, argv, results, init, seed, threads, repeat, python, script, skip_python, error);
  std::printf("wrote %s/bench_dense.csv and %s/run.json\n", out_dir.c_str(), out_dir.c_str());
  if (!error.empty()) throw std::runtime_error(error);
  for (const auto& r : results)
    for (const Agreement* g : {&r.exact_vs_torch, &r.full_vs_torch, &r.exact_vs_full})
      if (g->checked && !g->pass)
        throw std::runtime_error("kappa disagreement at N=" + std::to_string(r.shape.N()) + ": " + g->why);
  return 0;
}

}  // namespace

int run_bench(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "lanczos") return run_bench_lanczos(argc, argv);
  // `bench train` has options of its own (experiments/bench_train.cpp).
  if (argc >= 2 && std::string(argv[1]) == "train") return run_bench_train(argc - 1, argv + 1);
  po::options_description opts("jacond bench dense [options]\n\n"
                               "Times jacond's exact kappa(K_sa) (bare self-attention Jacobian) against PyTorch's\n"
                               "autograd.functional.jacobian + linalg.svdvals on the same weights, in one run.\n\n"
                               "options");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help and exit")
    ("sizes", po::value<std::string>()->default_value("1024,3200,6400"),
     "comma-separated N = n*d: 1024=(n 32, d 32, 2 heads), 3200=(50, 64, 4), 6400=(100, 64, 4)")
    ("n", po::value<Index>(), "tokens of one custom size (with --d and --heads)")
    ("d", po::value<Index>(), "embedding dimension of the custom size")
    ("heads", po::value<Index>(), "heads of the custom size (d divisible by heads)")
    ("threads", po::value<int>()->default_value(2), "BLAS/Eigen threads here and torch threads there")
    ("init", po::value<std::string>()->default_value("timm"), "weights: timm | ours | mimetic (paper defaults)")
    ("seed", po::value<uint64_t>()->default_value(0), "seed of the weights and of the tokens")
    ("out", po::value<std::string>()->default_value("results/bench-dense"),
     "output directory: bench_dense.csv, run.json, size-N/{weights,tokens}.safetensors")
    ("python", po::value<std::string>()->default_value("/usr/bin/python3"), "Python with torch and numpy")
    ("script", po::value<std::string>()->default_value(std::string(JACOND_SOURCE_DIR) +
                                                      "/experiments/bench/torch_dense_route.py"),
     "the PyTorch route script")
    ("skip-python", "time jacond's routes only")
    ("repeat", po::value<int>()->default_value(1), "runs per route; the best is reported");
  // clang-format on
  po::options_description hidden;
  hidden.add_options()("benchmark", po::value<std::string>(), "benchmark name");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("benchmark", 1);

  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: jacond bench <benchmark> [options]\n\nbenchmarks:\n  dense   exact kappa of the dense "
                 "K_sa vs the PyTorch route\n  lanczos matrix-free certified kappa brackets at ViT-S/B sizes (jacond bench lanczos --help)\n\n"
              << opts << "\n";
    return 0;
  }
  po::notify(vm);
  if (!vm.count("benchmark")) throw std::invalid_argument("missing benchmark name (available: dense, lanczos)");
  const std::string name = vm["benchmark"].as<std::string>();
  if (name != "dense") throw std::invalid_argument("unknown benchmark '" + name + "' (available: dense, lanczos)");
  return run_bench_dense(argc, argv, vm);
}

}  // namespace jacond::cli
