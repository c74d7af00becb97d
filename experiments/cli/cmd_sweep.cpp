// `jacond sweep`: κ(K_sa), κ(K_sab), κ(B_sa) and ‖E_sa‖ of the `ours` init over an α × β × c
// grid and seeds, as a tidy CSV (one row per grid point, seed and matrix).
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "analysis/report/block_report.h"
#include "analysis/spectral/inertia.h"
#include "analysis/core/threads.h"
#include "experiments/cli/block_source.h"
#include "analysis/core/progress.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/device_option.h"
#include "experiments/cli/shard.h"
#include "models/init/init.h"

namespace jacond::cli {

namespace po = boost::program_options;

int run_sweep(int argc, char** argv) {
  std::string alpha_spec = "0:4:1", beta_spec = "0:2:0.5", c_spec = "3", skip = "none", kappa = "fast", certify = "none",
              out_dir;
  std::string method = "auto", device = "cpu", shard_spec;
  GklOptions gkl;
  std::string init = "ours";
  int seeds = 2, threads = 2;
  int64_t n = 16, d = 32, heads = 2, mlp_ratio = 4;
  double logit_scale = 0.0;
  po::options_description desc("jacond sweep: grid over alpha/beta/c of an init -> DIR/sweep.csv");
  desc.add_options()("help,h", "this help")
      ("alpha", po::value(&alpha_spec)->default_value(alpha_spec), "A0:A1:STEP or a value")
      ("beta", po::value(&beta_spec)->default_value(beta_spec), "B0:B1:STEP or a value")
      ("c", po::value(&c_spec)->default_value(c_spec), "C0:C1:STEP or a value")
      ("init", po::value(&init)->default_value(init), "ours | mimetic | timm (alpha/beta/c only affect ours)")
      ("seeds", po::value(&seeds)->default_value(seeds), "seeds per grid point (0..K-1)")
      ("n", po::value(&n)->default_value(n), "tokens")
      ("d", po::value(&d)->default_value(d), "embedding dimension")
      ("heads", po::value(&heads)->default_value(heads), "heads")
      ("mlp-ratio", po::value(&mlp_ratio)->default_value(mlp_ratio), "MLP hidden / d")
      ("logit-scale", number_value(&logit_scale), "0 = 1/sqrt(d_h)")
      ("skip", po::value(&skip)->default_value(skip), "none | full | no-ffn-skip | no-sab-skip")
      ("method", po::value(&method)->default_value(method),
       "auto (dense when its memory fits half of RAM and its predicted time fits --lanczos-seconds, "
        "else lanczos) | dense | lanczos (matrix-free bracket, warm-started along the grid)")
      ("kappa", po::value(&kappa)->default_value(kappa), "dense flavour: fast | svd | mixed (fp32 LU refined to fp64)")
      ("lanczos-seconds", number_value(&gkl.max_seconds), "lanczos: seconds per matrix")
      ("lanczos-tol", number_value(&gkl.tolerance), "lanczos: target kappa_hi/kappa_lo - 1")
      ("certify", po::value(&certify)->default_value(certify), kCertifyHelp)
      ("threads", po::value(&threads)->default_value(threads), "BLAS/Eigen threads")
      ("shard", po::value(&shard_spec), "I/N: compute only block I of N of the grid points x seeds (join with jacond merge)")
      ("out", po::value(&out_dir)->default_value("results/sweep"), "output directory");
  add_device_option(desc, &device);
  if (!parse_options(argc, argv, desc)) return 0;
  std::vector<double> alphas, betas, cs;
  SkipMode mode{};
  CertifyMode certify_mode{};
  Shard shard;
  check_usage([&] {
    certify_mode = parse_flag("--certify", [&] { return parse_certify_mode(certify); });
    if (seeds < 1) throw std::invalid_argument("--seeds must be >= 1");
    if (n < 2) throw std::invalid_argument("--n must be >= 2");
    if (d < 1 || heads < 1 || mlp_ratio < 1 || d % heads != 0)
      throw std::invalid_argument("--d, --heads, --mlp-ratio must be >= 1 and --d divisible by --heads");
    if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
    with_dense_flavour(KappaRoute::kFast, kappa);  // checks the value
    if (method != "auto" && method != "dense" && method != "lanczos")
      throw std::invalid_argument("--method must be auto, dense or lanczos, got '" + method + "'");
    if (!(gkl.max_seconds > 0) || !(gkl.tolerance > 0))
      throw std::invalid_argument("--lanczos-seconds and --lanczos-tol must be > 0");
    alphas = parse_range(alpha_spec, "alpha");
    betas = parse_range(beta_spec, "beta");
    cs = parse_range(c_spec, "c");
    mode = parse_flag("--skip", [&] { return parse_skip_mode(skip); });
    parse_flag("--init", [&] { return models::parse_init_scheme(init); });
    validate_device_name(device);
    shard = parse_flag("--shard", [&] { return parse_shard(shard_spec); });
  });
  set_threads(threads);
  ensure_directory(out_dir);

  BlockReportOptions opt;
  opt.lanczos = gkl;
  opt.certify = certify_mode;
  select_devices(device, opt);
  opt.route = parse_kappa_route(method);
  opt.route = resolve_route(opt, n, d);
  opt.route = with_dense_flavour(opt.route, kappa);
  opt.matrices = {"K_sa", "B_sa", "E_sa", "K_sab"};  // the sweep's columns; nothing else is computed
  std::map<std::string, GklWarmStart> warm;  // chained along the grid (lanczos route)
  opt.warm = &warm;
  ResultsTable table({"init", "alpha", "beta", "c", "seed", "skip", "n", "d", "heads", "logit_scale"});
  const size_t total = alphas.size() * betas.size() * cs.size() * seeds;
  const auto [first, last] = shard.range(total);
  ShardRecord record(shard, total);
  Progress progress = Progress::on_stderr("sweep", last - first);
  size_t item = 0;  // the position of (c, beta, alpha, seed) in the unsharded order
  for (double c : cs)
    for (double beta : betas)
      for (double alpha : alphas)
        for (int s = 0; s < seeds; ++s, ++item) {
          if (item < first || item >= last) continue;
          const size_t rows_before = table.size();
          const BlockWeights w = init_weights(init, alpha, beta, c, "default", s, d, heads, mlp_ratio * d, logit_scale);
          const Mat X = gaussian_tokens(n, d, static_cast<uint64_t>(s) ^ 0x5eedULL);
          const std::vector<std::string> knobs = {init, fmt(alpha), fmt(beta), fmt(c), std::to_string(s), skip,
                                                  std::to_string(n), std::to_string(d), std::to_string(heads),
                                                  fmt(w.effective_logit_scale())};
          for (const auto& r : block_reports(w, X, mode, opt)) table.add(knobs, r);
          record.item(item, table.size() - rows_before);
          progress.advance("alpha=" + fmt(alpha) + " beta=" + fmt(beta) + " c=" + fmt(c) + " seed=" + std::to_string(s));
        }
  progress.finish();
  write_file_atomic(out_dir + "/sweep.csv", table.to_csv());
  nlohmann::json meta = run_metadata(argc, argv);
  meta["grid_points"] = total;
  // What determines the table (shard.h): merge refuses shards whose grids differ.
  meta["grid"] = {{"command", "sweep"}, {"alpha", alphas}, {"beta", betas}, {"c", cs}, {"init", init}, {"seeds", seeds},
                  {"n", n}, {"d", d}, {"heads", heads}, {"mlp_ratio", mlp_ratio}, {"logit_scale", logit_scale},
                  {"skip", skip}, {"method", method}, {"kappa", kappa}, {"certify", certify},
                  {"lanczos_seconds", gkl.max_seconds}, {"lanczos_tol", gkl.tolerance}, {"device", device}};
  if (shard.active()) meta["shard"] = record.to_json();
  meta["device"] = device_json(opt);
  meta["note"] = "||E_sa||_2 is the sigma_max column of the E_sa rows";
  write_file_atomic(out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << out_dir << "/sweep.csv (" << table.size() << " rows, " << last - first << " grid points x seeds";
  if (shard.active()) std::cout << ": shard " << shard.index << "/" << shard.count << " of " << total;
  std::cout << ")\n";
  return 0;
}

}  // namespace jacond::cli
