// `jacond bench dense`: what it prints and writes (tables, CSV, run.json); the measurement is in
// bench_dense.cpp, the contract in bench_dense.h.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "experiments/bench/bench_dense.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/device_option.h"

namespace jacond::cli::bench_dense {

namespace {

// A speed_ratio as "3.8x"; "n/a" where there is none (a route skipped, or one that gave no κ).
std::string ratio_str(double ratio) {
  if (!std::isfinite(ratio)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fx", ratio);
  return buf;
}

// A speed_ratio's CSV cell: empty where there is none, as for a route that was not compared.
std::string ratio_cell(double ratio) { return std::isfinite(ratio) ? fmt(ratio) : std::string(); }

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

// A split table's seconds: "skipped" for a route that did not run (--skip-full), not 0.000.
std::string split_seconds(const RouteResult& r, double seconds) { return r.ran ? sci(seconds, "%.3f") : "skipped"; }

// One row; `torch` is the torch route where it ran; `vs_exact` (a route of SizeResult::versus_exact)
// fills the columns against the CPU exact route. The speed ratios are speed_ratio's: empty for a
// route that gave no κ.
std::string csv_row(const SizeResult& s, const std::string& init, uint64_t seed, int threads, double logit_scale,
                    int repeat, const RouteResult& r, const Agreement& vs_torch, const RouteResult* torch,
                    const Agreement* vs_exact = nullptr) {
  const bool versus = vs_exact != nullptr;
  std::ostringstream os;
  os << s.shape.N() << ',' << s.shape.n << ',' << s.shape.d << ',' << s.shape.heads << ",K_sa," << init << ','
     << seed << ',' << threads << ',' << fmt(logit_scale) << ',' << repeat << ',' << r.route << ',' << r.method << ','
     << fmt(r.assembly_s) << ',' << fmt(r.kappa_s) << ',' << fmt(r.total_s) << ',' << fmt(r.total_median_s) << ','
     << (r.route == "torch" ? std::string("1") : torch ? ratio_cell(speed_ratio(*torch, r)) : std::string())
     << ',' << fmt(r.sigma_max) << ',' << fmt(r.sigma_min) << ',' << fmt(r.kappa) << ',' << to_string(r.status) << ','
     << (vs_torch.checked ? fmt(vs_torch.rel_diff) : "") << ',' << (vs_torch.checked ? fmt(vs_torch.tol) : "") << ','
     << vs_torch.verdict << ',' << (versus ? ratio_cell(speed_ratio(s.exact, r)) : "") << ','
     << (versus ? fmt(vs_exact->rel_diff) : "") << ',' << (versus ? vs_exact->verdict : "") << '\n';
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

// One size's entry of run.json: its shape, each route and how the routes agree.
nlohmann::json size_json(const SizeResult& s) {
  nlohmann::json j;
  j["N"] = s.shape.N();
  j["n"] = s.shape.n;
  j["d"] = s.shape.d;
  j["heads"] = s.shape.heads;
  j["logit_scale"] = s.logit_scale;
  j["dir"] = s.dir;
  j["jacond_exact"] = route_json(s.exact);
  if (s.full.ran) j["jacond_full"] = route_json(s.full);
  j["exact_vs_full"] = agreement_json(s.exact_vs_full);
  nlohmann::json versus = nlohmann::json::array();
  for (const auto& v : s.versus_exact) {
    nlohmann::json jv = route_json(v.route);
    jv["vs_cpu_exact"] = agreement_json(v.agreement);
    versus.push_back(jv);
  }
  j["versus_cpu_exact"] = versus;
  if (s.torch) {
    j["torch"] = route_json(s.torch->route);
    j["torch"]["wall_s"] = s.torch->wall_s;
    j["torch"]["script_output"] = s.torch->raw;
    j["exact_vs_torch"] = agreement_json(s.exact_vs_torch);
    j["full_vs_torch"] = agreement_json(s.full_vs_torch);
  }
  j["pass"] = s.pass();
  return j;
}

}  // namespace

void print_tables(const std::vector<SizeResult>& results) {
  std::printf("\n%6s %4s %3s %5s | %12s %12s %10s | %11s %10s | %14s %14s %9s %9s %8s\n", "N", "n", "d", "heads",
              "jacond-exact", "jacond-full", "torch", "torch/exact", "torch/full", "kappa jacond", "kappa torch",
              "rel diff", "tol", "agree");
  for (const auto& r : results) {
    const bool t = r.torch.has_value();
    const double torch_s = t ? r.torch->route.total_s : std::nan("");
    const RouteResult none;  // the torch route's place where it did not run: no ratio
    const RouteResult& torch = t ? r.torch->route : none;
    // Relative κ difference: the larger of jacond-exact and jacond-full vs torch (or exact vs
    // full when the torch route was skipped); the tolerance is the same for both comparisons.
    const Agreement& g = t ? r.exact_vs_torch : r.exact_vs_full;
    double rel = g.rel_diff;
    if (t && !std::isnan(r.full_vs_torch.rel_diff)) rel = std::max(rel, r.full_vs_torch.rel_diff);
    std::printf("%6lld %4lld %3lld %5lld | %11.3fs %12s %10s | %11s %10s | %14s %14s %9s %9s %8s\n",
                static_cast<long long>(r.shape.N()), static_cast<long long>(r.shape.n),
                static_cast<long long>(r.shape.d), static_cast<long long>(r.shape.heads), r.exact.total_s,
                r.full.ran ? (sci(r.full.total_s, "%.3f") + "s").c_str() : "skipped",
                t ? (sci(torch_s, "%.3f") + "s").c_str() : r.torch_failed ? "FAILED" : "skipped",
                ratio_str(speed_ratio(torch, r.exact)).c_str(), ratio_str(speed_ratio(torch, r.full)).c_str(),
                kappa_str(r.exact).c_str(), t ? kappa_str(r.torch->route).c_str() : "n/a", sci(rel).c_str(),
                sci(g.tol).c_str(), r.verdict().c_str());
  }
  std::printf("\nsplit (seconds): assembly = forward + dense K (jacond) | autograd jacobian (torch); "
              "kappa = LU+Lanczos | dgesdd | svdvals\n");
  std::printf("%6s | %10s %12s | %10s %12s | %12s %12s %10s\n", "N", "jc assembly", "jc LU+Lanczos", "jc assembly",
              "jc gesdd", "torch jacob.", "torch svdvals", "torch wall");
  for (const auto& r : results) {
    const bool t = r.torch.has_value();
    std::printf("%6lld | %11.3f %13.3f | %11s %12s | %12s %13s %10s\n", static_cast<long long>(r.shape.N()),
                r.exact.assembly_s, r.exact.kappa_s, split_seconds(r.full, r.full.assembly_s).c_str(),
                split_seconds(r.full, r.full.kappa_s).c_str(),
                t ? sci(r.torch->route.assembly_s, "%.3f").c_str() : "-",
                t ? sci(r.torch->route.kappa_s, "%.3f").c_str() : "-",
                t ? sci(r.torch->wall_s, "%.3f").c_str() : "-");
  }
  bool any = false;
  for (const auto& r : results) any = any || !r.versus_exact.empty();
  if (!any) return;
  std::printf("\nagainst the CPU exact route (same assembly on the host; mixed = fp32 LU refined to fp64, analysis/spectral/mixed_lu.h):\n");
  std::printf("%6s %-39s | %12s %12s %9s | %12s %12s | %14s %14s %9s %8s\n", "N", "route", "cpu total", "route total",
              "cpu/route", "cpu kappa_s", "rt kappa_s", "kappa cpu", "kappa route", "rel diff", "agree");
  for (const auto& r : results)
    for (const auto& v : r.versus_exact) {
      const RouteResult& g = v.route;
      std::printf("%6lld %-39s | %11.3fs %11.3fs %9s | %11.3fs %11.3fs | %14s %14s %9s %8s\n",
                  static_cast<long long>(r.shape.N()), g.route.c_str(), r.exact.total_s, g.total_s,
                  ratio_str(speed_ratio(r.exact, g)).c_str(), r.exact.kappa_s, g.kappa_s, kappa_str(r.exact).c_str(),
                  kappa_str(g).c_str(), sci(v.agreement.rel_diff).c_str(), v.agreement.verdict.c_str());
      if (!g.note.empty()) std::printf("%6s %-39s   %s\n", "", "", g.note.c_str());
    }
}

void write_outputs(const std::string& out_dir, int argc, char** argv, const std::vector<SizeResult>& results,
                   const std::string& init, uint64_t seed, int threads, int repeat, const std::string& python,
                   const std::string& script, bool skip_python, const std::string& error, const DenseDevice* device) {
  std::string csv =
      "N,n,d,heads,matrix,init,seed,threads,logit_scale,repeat,route,method,assembly_s,kappa_s,total_s,"
      "total_median_s,torch_over_this,sigma_max,sigma_min,kappa,status,kappa_rel_diff_vs_torch,kappa_tol,"
      "agree_with_torch,cpu_exact_over_this,kappa_rel_diff_vs_cpu_exact,agree_with_cpu_exact\n";
  nlohmann::json sizes = nlohmann::json::array();
  std::string torch_version;
  for (const auto& s : results) {
    const double lscale = s.logit_scale;
    const RouteResult* torch = s.torch ? &s.torch->route : nullptr;
    csv += csv_row(s, init, seed, threads, lscale, repeat, s.exact, s.exact_vs_torch, torch);
    if (s.full.ran) csv += csv_row(s, init, seed, threads, lscale, repeat, s.full, s.full_vs_torch, torch);
    for (const auto& v : s.versus_exact)
      csv += csv_row(s, init, seed, threads, lscale, repeat, v.route, Agreement{}, torch, &v.agreement);
    if (s.torch) {
      csv += csv_row(s, init, seed, threads, lscale, repeat, s.torch->route, Agreement{}, torch);
      torch_version = s.torch->torch_version;
    }
    sizes.push_back(size_json(s));
  }
  write_file_atomic(out_dir + "/bench_dense.csv", csv);

  nlohmann::json run = run_metadata(argc, argv, "bench");
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
  run["routes"]["jacond-mixed-kappa"] =
      "attention_forward + attention_jacobian, rounded to fp32 + condition_mixed (sgetrf, refined to fp64 against "
      "the matrix-free K_sa)";
  if (device) {
    run["routes"][route_name(JacondRoute::kExact, *device)] =
        "attention_forward + attention_jacobian (host) + condition_fast on " + device->description();
    run["routes"][route_name(JacondRoute::kExactAssembled, *device)] =
        "attention_forward (host) + K_sa assembled on the device from its operator twin's products "
        "(models/device) + condition_fast_assembled on " + device->description() +
        " (where this LibTorch has CUDA; its kappa seconds include the device assembly, its note splits them)";
    // The sweep variants, by the names their rows have (the assembled route's where it ran).
    for (const auto& s : results)
      for (const auto& v : s.versus_exact)
        for (const std::string& sweep : kCudaSweepVariants) {
          const std::string& name = v.route.route;
          const std::string tail = "-" + sweep;
          if (name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
            run["routes"][name] =
                "the route " + name.substr(0, name.size() - tail.size()) + " with JACOND_CUDA_LU_SOLVES=" + sweep + ": its sigma_min sweep by " +
                (sweep == "trsv" ? "four cublasDtrsv_64 on the LU factors"
                                 : "four cublasDtrmv_64 with the factors' inverses (cusolverDnXtrtri, in place)") +
                " where the default takes two cusolverDnXgetrs (analysis/cuda/dense_cuda.h, LuSolves)";
        }
    run["routes"][route_name(JacondRoute::kMixed, *device)] =
        "attention_forward + attention_jacobian (host), rounded to fp32 + condition_mixed on " + device->description();
    run["device"] = device_json(*device);
  }
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

}  // namespace jacond::cli::bench_dense
