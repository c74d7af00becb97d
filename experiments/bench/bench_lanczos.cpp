// `jacond bench lanczos`: matrix-free certified κ brackets (analysis/spectral/gkl.h) at ViT sizes.
//
// For each size (ViT-S: n 197, d 384, 6 heads; ViT-B: n 197, d 768, 12 heads) and init
// (ours, timm; paper defaults, seed 0, Gaussian tokens) and each matrix (K_sab and K_ffn with
// their residuals, bare K_sa), one condition_lanczos call with a 120 s budget and target
// κ_hi/κ_lo ≤ 1.01. Reported: time to the σ_max bracket, time to the certified κ bracket (or
// "not reached" with the best bracket at the cap), products, and the peak resident memory of
// the process (getrusage ru_maxrss, cumulative: it includes the forward caches and every
// earlier row). The targets: σ_max < 5 s, certified bracket < 60 s when κ ≤ 1e6, peak
// memory < 2 GB. With --check-dense, a size where the dense route still fits (n 100, d 64,
// 4 heads: nd = 6400) is also run through condition_fast on the dense matrices, for agreement
// (dense κ inside the bracket) and the speed ratio.
#include "experiments/bench/bench_lanczos.h"

#include <sys/resource.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/jacobians/block.h"
#include "analysis/spectral/condition.h"
#include "analysis/spectral/gkl.h"
#include "analysis/jacobians/jacobians.h"
#include "analysis/operators/operators.h"
#include "analysis/core/threads.h"
#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"
#include "models/init/init.h"

namespace jacond::cli {
namespace {

namespace po = boost::program_options;

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

struct Size {
  std::string name;
  Index n, d, heads;
};

struct Row {
  std::string size, init, matrix;
  Index n, d, heads;
  LanczosCondition lz;
  double rss_mb = 0;
  bool dense_checked = false;
  double dense_kappa = 0, dense_seconds = 0;
  bool dense_inside = false;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(t);
  return out;
}

std::vector<Size> parse_sizes(const std::string& spec) {
  std::vector<Size> sizes;
  for (const auto& s : split_commas(spec)) {
    if (s == "vit-s") sizes.push_back({s, 197, 384, 6});
    else if (s == "vit-b") sizes.push_back({s, 197, 768, 12});
    else if (s == "dense6400") sizes.push_back({s, 100, 64, 4});
    else throw std::invalid_argument("--sizes: unknown size '" + s + "' (vit-s | vit-b | dense6400)");
  }
  return sizes;
}

// One matrix of one block: the GKL bracket, and with check_dense (nd ≤ 6400) the dense κ, which
// must lie inside the bracket.
Row measure(const Size& sz, const std::string& init, const std::string& m, const BlockWeights& w, const BlockForward& f,
            const GklOptions& gkl, bool check_dense) {
  Row r{sz.name, init, m, sz.n, sz.d, sz.heads, {}, 0, false, 0, 0, false};
  if (m == "K_sab") r.lz = condition_lanczos(SabJacobianOp(w, f), m, gkl);
  else if (m == "K_ffn") r.lz = condition_lanczos(FfnJacobianOp(w, f), m, gkl);
  else r.lz = condition_lanczos(AttentionJacobianOp(w, f.attn), m, gkl);
  r.rss_mb = peak_rss_mb();
  if (check_dense && sz.n * sz.d <= 6400) {
    const auto t0 = std::chrono::steady_clock::now();
    const Mat K = m == "K_sab" ? sab_jacobian(w, f) : m == "K_ffn" ? ffn_jacobian(w, f).to_dense()
                                                                   : attention_jacobian(w, f.attn);
    const ConditionReport d = condition_fast(K, m);
    r.dense_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.dense_checked = true;
    r.dense_kappa = d.kappa;
    r.dense_inside = r.lz.report.kappa_lo <= d.kappa * (1 + 1e-9) && d.kappa <= r.lz.report.kappa_hi * (1 + 1e-9);
  }
  return r;
}

void print_row(const Row& r) {
  const ConditionReport& c = r.lz.report;
  std::printf("%-9s %-5s %-6s %-13s %9.2f %9.2f %13.6e %13.6e %9lld %8.0f %8s\n", r.size.c_str(), r.init.c_str(),
              r.matrix.c_str(), to_string(c.status).c_str(), r.lz.largest.seconds, c.seconds, c.kappa_lo, c.kappa_hi,
              static_cast<long long>(c.products), r.rss_mb, r.dense_checked ? (r.dense_inside ? "inside" : "OUTSIDE") : "-");
  std::fflush(stdout);
}

std::string rows_csv(const std::vector<Row>& rows, int threads, const GklOptions& gkl) {
  std::ostringstream csv;
  csv << "size,init,matrix,n,d,heads,threads,tolerance,budget_s,status,sigma_max,sigma_min,kappa_lo,kappa_hi,"
         "t_sigma_max_s,t_total_s,certified_within_60s,products,peak_rss_mb,dense_kappa,dense_s,dense_inside,speed_ratio,note\n";
  for (const Row& r : rows) {
    const ConditionReport& c = r.lz.report;
    const bool cert60 = c.status == Status::kBracket && c.seconds <= 60.0;
    csv << r.size << ',' << r.init << ',' << r.matrix << ',' << r.n << ',' << r.d << ',' << r.heads << ',' << threads << ','
        << fmt(gkl.tolerance) << ',' << fmt(gkl.max_seconds) << ',' << to_string(c.status) << ',' << fmt(c.sigma_max) << ','
        << fmt(c.sigma_min) << ',' << fmt(c.kappa_lo) << ',' << fmt(c.kappa_hi) << ',' << fmt(r.lz.largest.seconds) << ','
        << fmt(c.seconds) << ',' << (cert60 ? "yes" : "no") << ',' << c.products << ',' << fmt(r.rss_mb) << ','
        << (r.dense_checked ? fmt(r.dense_kappa) : "") << ',' << (r.dense_checked ? fmt(r.dense_seconds) : "") << ','
        << (r.dense_checked ? (r.dense_inside ? "yes" : "no") : "") << ','
        << (r.dense_checked ? fmt(r.dense_seconds / c.seconds) : "") << ",\"" << c.note << "\"\n";
  }
  return csv.str();
}

}  // namespace

int run_bench_lanczos(int argc, char** argv) {
  std::string sizes_spec = "vit-s,vit-b", inits_spec = "ours,timm", matrices_spec = "K_sab,K_ffn,K_sa",
              out_dir = "results/bench-lanczos";
  int threads = 2;
  GklOptions gkl;
  gkl.max_seconds = 120;
  bool check_dense = false;
  po::options_description desc("jacond bench lanczos: certified matrix-free kappa brackets at ViT sizes");
  desc.add_options()("help,h", "this help")
      ("sizes", po::value(&sizes_spec)->default_value(sizes_spec), "comma list of vit-s | vit-b | dense6400")
      ("inits", po::value(&inits_spec)->default_value(inits_spec), "comma list of ours | timm | mimetic")
      ("matrices", po::value(&matrices_spec)->default_value(matrices_spec), "comma list of K_sab | K_ffn | K_sa")
      ("seconds", number_value(&gkl.max_seconds), "budget per matrix")
      ("tol", number_value(&gkl.tolerance), "target kappa_hi/kappa_lo - 1")
      ("basis", po::value(&gkl.max_basis)->default_value(gkl.max_basis), "Krylov basis before a restart")
      ("check-dense", po::bool_switch(&check_dense), "also run the dense route (only for nd <= 6400)")
      ("threads", po::value(&threads)->default_value(threads), "BLAS threads")
      ("out", po::value(&out_dir)->default_value(out_dir), "output directory");
  if (!parse_options(argc, argv, desc)) return 0;  // argv[0] = "lanczos"
  gkl.keep = std::max<Index>(1, gkl.max_basis / 3);
  std::vector<Size> sizes;
  std::vector<std::string> inits, matrices;
  check_usage([&] {
    sizes = parse_sizes(sizes_spec);
    inits = split_commas(inits_spec);
    matrices = split_commas(matrices_spec);
    for (const auto& m : matrices)
      if (m != "K_sab" && m != "K_ffn" && m != "K_sa")
        throw std::invalid_argument("--matrices: unknown matrix '" + m + "' (K_sab | K_ffn | K_sa)");
    for (const auto& init : inits) parse_flag("--inits", [&] { return models::parse_init_scheme(init); });
    if (!(gkl.max_seconds > 0) || !(gkl.tolerance > 0) || gkl.max_basis < 2)
      throw std::invalid_argument("--seconds and --tol must be > 0 and --basis >= 2");
    if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
  });
  set_threads(threads);
  ensure_directory(out_dir);

  std::vector<Row> rows;
  std::printf("%-9s %-5s %-6s %-13s %9s %9s %13s %13s %9s %8s %8s\n", "size", "init", "matrix", "status", "t_smax_s",
              "t_total_s", "kappa_lo", "kappa_hi", "products", "rss_MB", "dense");
  for (const Size& sz : sizes)
    for (const auto& init : inits) {
      const BlockWeights w = init_weights(init, 2.0, 0.6, 3.0, "default", 0, sz.d, sz.heads, 4 * sz.d, 0.0);
      const Mat X = gaussian_tokens(sz.n, sz.d, 0);
      const BlockForward f = block_forward(w, X, SkipMode::kFull);  // K_sab, K_ffn with residuals
      for (const auto& m : matrices) {
        rows.push_back(measure(sz, init, m, w, f, gkl, check_dense));
        print_row(rows.back());
      }
    }
  write_file_atomic(out_dir + "/bench_lanczos.csv", rows_csv(rows, threads, gkl));
  nlohmann::json meta = run_metadata(argc, argv);
  meta["benchmark"] = "lanczos";
  meta["rows"] = rows.size();
  meta["note"] = "peak_rss_mb is cumulative for the process (getrusage ru_maxrss)";
  write_file_atomic(out_dir + "/run.json", meta.dump(2) + "\n");
  std::printf("wrote %s/bench_lanczos.csv and run.json\n", out_dir.c_str());
  for (const Row& r : rows)
    if (r.dense_checked && !r.dense_inside) throw std::runtime_error("dense kappa outside the lanczos bracket for " + r.matrix);
  return 0;
}

}  // namespace jacond::cli
