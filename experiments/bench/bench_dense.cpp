// `jacond bench dense`: the measurement and the driver (contract and comparison in bench_dense.h;
// tables and files in bench_dense_output.cpp).
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>

#include "analysis/core/scoped_env.h"
#include "analysis/core/threads.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "experiments/bench/bench_dense.h"
#include "experiments/bench/bench_tables.h"
#include "experiments/bench/python_route.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/device_option.h"
#include "models/device/torch_operator_device.h"
#include "models/init/init.h"
#include "models/io/safetensors.h"
#include "models/track/bridge.h"

namespace jacond::cli {
namespace bench_dense {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

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
    const std::optional<int64_t> N = parse_integer(item);
    if (!N) throw std::invalid_argument("--sizes: '" + item + "' is not an integer N = n*d");
    auto it = standard_sizes().find(*N);
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

std::string route_name(JacondRoute route, const DenseDevice& device) {
  const std::string base = route == JacondRoute::kFull    ? "jacond-full-spectrum"
                           : route == JacondRoute::kMixed ? "jacond-mixed-kappa"
                                                          : "jacond-exact-kappa";
  const std::string on = device.name() == "cpu" ? base : base + "-" + device.name();
  return route == JacondRoute::kExactAssembled ? on + "-assembled" : on;
}

// jacond in-process: forward + dense K + the route's κ, `repeat` times. K lives only inside one
// iteration, so at most one K (plus the κ routine's own copy) exists.
namespace {

// K_sa's κ by condition_fast_assembled: the forward pass on the host (its seconds in *forward_s),
// K on the device (its seconds in the report's note).
ConditionReport exact_assembled(const BlockWeights& w, const Mat& X, const DenseDevice& device,
                                const OperatorDevice* operators, double* forward_s) {
  if (!operators) throw std::invalid_argument("the assembled route needs the device's operator twin");
  const auto t0 = Clock::now();
  const BlockForward f = attention_only_forward(w, X);
  *forward_s = seconds_since(t0);
  const std::unique_ptr<TokenMap> map = operators->block_operator(w, f, "K_sa");
  std::optional<ConditionReport> r = device.condition_fast_assembled(*map, "K_sa");
  if (!r) throw std::runtime_error(device.name() + " declined to assemble K_sa (" + std::to_string(X.size()) + "^2)");
  return std::move(*r);
}

}  // namespace

RouteResult run_jacond_route(const BlockWeights& w, const Mat& X, JacondRoute route, int repeat,
                             const DenseDevice& device, const OperatorDevice* operators, const std::string& lu_solves) {
  // A CUDA route's row without a suffix is the default sweep, whatever the caller's environment says.
  std::optional<ScopedEnv> sweep;
  if (!lu_solves.empty() || device.name() == "cuda")
    sweep.emplace("JACOND_CUDA_LU_SOLVES", lu_solves.empty() ? std::string("getrs") : lu_solves);
  RouteResult best;
  best.route = route_name(route, device) + (lu_solves.empty() ? "" : "-" + lu_solves);
  std::vector<double> totals;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    double assembly = 0;
    ConditionReport rep;
    if (route == JacondRoute::kExactAssembled) {
      rep = exact_assembled(w, X, device, operators, &assembly);  // "assembly": the host's forward pass only
    } else {
      const AttentionCache cache = attention_forward(w, X);
      if (route == JacondRoute::kMixed) {  // K assembled straight into fp32; the fp64 truth is the operator
        MatF K32 = attention_jacobian_fp32(w, cache, AttentionPart::kFull);
        assembly = seconds_since(t0);
        const AttentionJacobianOp op(w, cache, AttentionPart::kFull);
        rep = device.condition_mixed(std::move(K32), linear_map(op), "K_sa");
      } else {
        Mat K = attention_jacobian(w, cache, AttentionPart::kFull);
        assembly = seconds_since(t0);
        rep = route == JacondRoute::kFull ? device.condition_svd(std::move(K), "K_sa") : device.condition_fast(std::move(K), "K_sa");
      }
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
      {"jacobian_s", "svd_s", "total_s", "total_s_runs", "sigma_max", "sigma_min", "torch_version", "threads"}, &run);
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
  r.total_s = j["total_s"].get<double>();  // the best repeat, as jacond's routes report theirs
  // The median of every repeat, by jacond's own median (run.json: "median in total_median_s"); the
  // best run is not one (it was, before the script listed its repeats).
  const auto totals = j["total_s_runs"].get<std::vector<double>>();
  if (totals.empty()) throw std::runtime_error("torch route (N=" + std::to_string(s.N()) + "): total_s_runs is empty");
  r.total_median_s = median(totals);
  r.sigma_max = j["sigma_max"].get<double>();
  r.sigma_min = j["sigma_min"].get<double>();
  // Same contract as analysis/spectral/condition.h: below the noise floor κ is not a number we give.
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

double kappa_tolerance(double kappa) { return std::max(kKappaRelTolFloor, kKappaTolFactor * kEps * kappa); }

Agreement compare(const RouteResult& a, const RouteResult& b) {
  Agreement g;
  if (!a.ran || !b.ran) return g;
  g.checked = true;
  // A route without κ (not-converged) is an outcome, not a disagreement: pass stays true (the run
  // does not fail for it: mixed_lu.h documents the refinement's failure where the fp32 LU no
  // longer preconditions K), but the verdict says there was nothing to agree on, never PASS.
  if (!gave_kappa(a) || !gave_kappa(b)) {
    const RouteResult& none = gave_kappa(a) ? b : a;
    g.verdict = kNoKappa;
    g.why = none.route + " gave no kappa (" + to_string(none.status) + (none.note.empty() ? "" : ": " + none.note) + ")";
    return g;
  }
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

namespace {

// The options of one `jacond bench dense` run.
struct Options {
  int threads = 2, repeat = 1;
  uint64_t seed = 0;
  std::string init = "timm", out_dir = "results/bench-dense", python = "/usr/bin/python3";
  std::string script = std::string(JACOND_SOURCE_DIR) + "/experiments/bench/torch_dense_route.py";
  std::string sizes = "1024,3200,6400", device = "cpu";
  std::shared_ptr<const DenseDevice> dense_device;  // --device other than cpu: a fourth route
  std::shared_ptr<const OperatorDevice> operator_device;  // its operator twin: the assembled route
  bool skip_python = false, skip_full = false;
  std::vector<Shape> shapes;
};

// Sizes: --sizes, and/or one custom --n --d --heads (which replaces the default list unless
// --sizes is given explicitly too). Two sizes with the same N would share a directory.
std::vector<Shape> shapes_from_options(const po::variables_map& vm, const std::string& sizes) {
  std::vector<Shape> shapes;
  const int custom = static_cast<int>(vm.count("n") + vm.count("d") + vm.count("heads"));
  if (custom != 0 && custom != 3) throw std::invalid_argument("--n, --d and --heads go together (one custom size)");
  if (custom == 0 || !vm["sizes"].defaulted()) shapes = parse_sizes(sizes);
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
  return shapes;
}

// Parses and checks the options; returns false for --help.
bool parse_bench_options(int argc, char** argv, Options& o) {
  po::options_description opts("jacond bench dense [options]\n\n"
                               "Times jacond's exact kappa(K_sa) (bare self-attention Jacobian) against PyTorch's\n"
                               "autograd.functional.jacobian + linalg.svdvals on the same weights, in one run.\n\n"
                               "options");
  // clang-format off
  opts.add_options()
    ("help,h", "print this help and exit")
    ("sizes", po::value(&o.sizes)->default_value(o.sizes),
     "comma-separated N = n*d: 1024=(n 32, d 32, 2 heads), 3200=(50, 64, 4), 6400=(100, 64, 4)")
    ("n", po::value<Index>(), "tokens of one custom size (with --d and --heads)")
    ("d", po::value<Index>(), "embedding dimension of the custom size")
    ("heads", po::value<Index>(), "heads of the custom size (d divisible by heads)")
    ("threads", po::value(&o.threads)->default_value(o.threads), "BLAS/Eigen threads here and torch threads there")
    ("init", po::value(&o.init)->default_value(o.init), "weights: timm | ours | mimetic (paper defaults)")
    ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the weights and of the tokens")
    ("out", po::value(&o.out_dir)->default_value(o.out_dir),
     "output directory: bench_dense.csv, run.json, size-N/{weights,tokens}.safetensors")
    ("python", po::value(&o.python)->default_value(o.python), "Python with torch and numpy")
    ("script", po::value(&o.script)->default_value(o.script),
     "the PyTorch route script")
    ("skip-python", po::bool_switch(&o.skip_python), "time jacond's routes only")
    ("skip-full", po::bool_switch(&o.skip_full),
     "leave out the full-spectrum route (dgesdd: 47 s at N = 6400 on 2 threads; the GPU measurements need only the exact routes)")
    ("repeat", po::value(&o.repeat)->default_value(o.repeat), "runs per route; the best is reported");
  // clang-format on
  add_device_option(opts, &o.device);
  po::variables_map vm;
  if (!parse_options(argc, argv, opts, nullptr, &vm)) return false;
  check_usage([&] {
    if (o.threads < 1) throw std::invalid_argument("--threads must be >= 1, got " + std::to_string(o.threads));
    if (o.repeat < 1) throw std::invalid_argument("--repeat must be >= 1, got " + std::to_string(o.repeat));
    parse_flag("--init", [&] { return models::parse_init_scheme(o.init); });
    o.shapes = shapes_from_options(vm, o.sizes);
    validate_device_name(o.device);
    if (!o.skip_python) {
      if (!fs::exists(o.script)) throw std::invalid_argument("--script: " + o.script + " does not exist");
      if (::access(o.python.c_str(), X_OK) != 0) throw std::invalid_argument("--python: " + o.python + " is not executable");
    }
  });
  return true;
}

// One size: weights and tokens written for the Python route, then the three routes and their
// agreement. A failing Python route is recorded (torch_failed) and its message returned in `error`.
SizeResult measure_size(const Options& o, const Shape& s, std::string& error) {
  SizeResult res;
  res.shape = s;
  res.dir = o.out_dir + "/size-" + std::to_string(s.N());
  ensure_directory(res.dir);
  models::TensorMap tensors;
  models::init_block(tensors, 0, s.d, s.heads, 4 * s.d,
                     models::InitConfig::for_scheme(models::parse_init_scheme(o.init), o.seed));
  const BlockWeights w = models::block_from_timm(tensors, 0, s.heads);
  res.logit_scale = w.effective_logit_scale();
  const Mat X = gaussian_tokens(s.n, s.d, o.seed);
  const std::map<std::string, std::string> meta = {{"init", o.init},
                                                   {"seed", std::to_string(o.seed)},
                                                   {"heads", std::to_string(s.heads)},
                                                   {"logit_scale", fmt(res.logit_scale)},
                                                   {"written_by", "jacond bench dense"}};
  models::save_safetensors(res.dir + "/weights.safetensors", tensors, meta);
  models::save_safetensors(res.dir + "/tokens.safetensors", {{"tokens", models::to_torch(X)}}, meta);

  std::printf("N=%lld (n=%lld, d=%lld, heads=%lld): jacond exact ...", static_cast<long long>(s.N()),
              static_cast<long long>(s.n), static_cast<long long>(s.d), static_cast<long long>(s.heads));
  std::fflush(stdout);
  // Untimed: the process's first factorisation starts the BLAS threads and first touches the
  // allocator's arenas (0.05–0.1 s at N 1024, more than the assembly it would be charged to), and
  // every ratio in this table has the exact route as one side. A few tokens suffice for that.
  run_jacond_route(w, X.topRows(std::min<Index>(s.n, 16)), JacondRoute::kExact, 1);
  res.exact = run_jacond_route(w, X, JacondRoute::kExact, o.repeat);
  std::printf(" %.3fs, full spectrum ...", res.exact.total_s);  // "skipped" with --skip-full
  std::fflush(stdout);
  if (!o.skip_full) {
    res.full = run_jacond_route(w, X, JacondRoute::kFull, o.repeat);
    std::printf(" %.3fs", res.full.total_s);
    res.exact_vs_full = compare(res.exact, res.full);
  } else {
    std::printf(" skipped");
  }
  // The routes timed against the CPU's exact one: (route, device, JACOND_CUDA_LU_SOLVES or "").
  std::vector<std::tuple<JacondRoute, const DenseDevice*, std::string>> versus{
      {JacondRoute::kMixed, cpu_dense_device().get(), ""}};
  if (o.dense_device) {
    versus.emplace_back(JacondRoute::kExact, o.dense_device.get(), "");
    // The route `jacond block --device cuda` takes: assembled on the device where LibTorch has CUDA
    // (smaller than kFastMinSize: condition_fast's CPU route, nothing to assemble); its σ_min sweep
    // the default way and each other way (dense_cuda.h, LuSolves), for the device to choose.
    const bool assembled = o.operator_device && s.N() >= kFastMinSize;
    if (assembled) versus.emplace_back(JacondRoute::kExactAssembled, o.dense_device.get(), "");
    if (o.device == "cuda" && s.N() >= kFastMinSize)
      for (const std::string& sweep : kCudaSweepVariants)
        versus.emplace_back(assembled ? JacondRoute::kExactAssembled : JacondRoute::kExact, o.dense_device.get(), sweep);
    versus.emplace_back(JacondRoute::kMixed, o.dense_device.get(), "");
  }
  for (const auto& [route, device, sweep] : versus) {
    std::printf(", %s%s ...", route_name(route, *device).c_str(), sweep.empty() ? "" : ("-" + sweep).c_str());
    std::fflush(stdout);
    VersusExact v;
    v.route = run_jacond_route(w, X, route, o.repeat, *device, o.operator_device.get(), sweep);
    v.agreement = compare(v.route, res.exact);
    std::printf(" %.3fs", v.route.total_s);
    res.versus_exact.push_back(v);
  }
  if (!o.skip_python) {
    std::printf(", torch ...");
    std::fflush(stdout);
    try {
      res.torch = run_torch_route(o.python, o.script, res.dir, s, res.logit_scale, o.threads, o.repeat);
    } catch (const std::runtime_error& e) {  // the subprocess failed: reported, then the run stops
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
  return res;
}

void print_banner(const Options& o) {
  std::printf("jacond bench dense: kappa(K_sa), K_sa = d vec SA(X)/d vec X of BARE multi-head self-attention\n"
              "  (qkv/proj with biases, logits / sqrt(d_h); no LayerNorm, no residual, so both routes differentiate\n"
              "  the same function). init=%s seed=%llu layer 0, X ~ N(0,1), fp64, threads=%d, repeat=%d (best).\n"
              "  jacond-exact: forward + closed-form dense K + LU/Lanczos; jacond-full: ... + dgesdd (all sigma);\n"
              "  jacond-mixed: ... K in fp32, its LU refined to fp64 against the matrix-free K_sa;\n"
              "  torch: autograd.functional.jacobian + linalg.svdvals in %s.\n",
              o.init.c_str(), static_cast<unsigned long long>(o.seed), o.threads, o.repeat,
              o.skip_python ? "(skipped)" : o.python.c_str());
  std::fflush(stdout);
}

}  // namespace
}  // namespace bench_dense

int run_bench_dense(int argc, char** argv) {
  using namespace bench_dense;
  Options o;
  if (!parse_bench_options(argc, argv, o)) return 0;
  set_threads(o.threads);
  if (o.device != "cpu") o.dense_device = select_dense_device(o.device);
  if (o.device == "cuda") {  // the assembled route where this LibTorch has CUDA (`jacond block`'s route there)
    std::string why;
    o.operator_device = models::cuda_operator_device(&why);
    if (!o.operator_device) std::cerr << "jacond bench dense: --device cuda: no assembled route: " << why << "\n";
  }
  begin_output_set(o.out_dir, "bench", bench_tables());
  print_banner(o);
  std::vector<SizeResult> results;
  std::string error;
  for (const Shape& s : o.shapes) {
    results.push_back(measure_size(o, s, error));
    if (!error.empty()) break;
  }
  print_tables(results);
  if (o.skip_python) std::printf("(torch skipped: rel diff and agree compare jacond-exact with jacond-full)\n");
  std::printf("\nagreement: |kappa_a - kappa_b|/kappa_b <= max(1e-6, 45*eps*kappa): sigma_min of a dense fp64 route is\n"
              "  off by O(eps*sigma_max), so relative kappa differences of O(eps*kappa) are noise (1e-6 up to kappa~1e8).\n");
  write_outputs(o.out_dir, argc, argv, results, o.init, o.seed, o.threads, o.repeat, o.python, o.script,
                o.skip_python, error, o.dense_device.get());
  std::printf("wrote %s/bench_dense.csv and %s/run.json\n", o.out_dir.c_str(), o.out_dir.c_str());
  if (!error.empty()) throw std::runtime_error(error);
  for (const auto& r : results)
    for (const Agreement* g : r.agreements())
      if (g->checked && !g->pass)
        throw std::runtime_error("kappa disagreement at N=" + std::to_string(r.shape.N()) + ": " + g->why);
  return 0;
}

}  // namespace jacond::cli
