// `jacond sweep`: κ(K_sa), κ(K_sab), κ(B_sa) and ‖E_sa‖ of the `ours` init over an α × β × c
// grid and seeds, as a tidy CSV (one row per grid point, seed and matrix).
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

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

namespace {

// The flags of `jacond sweep`, parsed and checked.
struct SweepArgs {
  std::string alpha_spec = "0:4:1", beta_spec = "0:2:0.5", c_spec = "3", skip = "none", kappa = "fast",
              certify = "none", out_dir, method = "auto", device = "cpu", shard_spec, init = "ours";
  GklOptions gkl;
  int seeds = 2, threads = 2;
  int64_t n = 16, d = 32, heads = 2, mlp_ratio = 4;
  double logit_scale = 0.0;
  std::vector<double> alphas, betas, cs;  // the ranges parsed
  SkipMode mode{};
  CertifyMode certify_mode{};
  Shard shard;
};

// The flags; std::nullopt after --help. Usage errors exit 2 (check_usage).
std::optional<SweepArgs> parse_sweep(int argc, char** argv) {
  SweepArgs a;
  po::options_description desc("jacond sweep: grid over alpha/beta/c of an init -> DIR/sweep.csv");
  desc.add_options()("help,h", "this help")
      ("alpha", po::value(&a.alpha_spec)->default_value(a.alpha_spec), "A0:A1:STEP or a value")
      ("beta", po::value(&a.beta_spec)->default_value(a.beta_spec), "B0:B1:STEP or a value")
      ("c", po::value(&a.c_spec)->default_value(a.c_spec), "C0:C1:STEP or a value")
      ("init", po::value(&a.init)->default_value(a.init), "ours | mimetic | timm (alpha/beta/c shape ours only: another init's grid is its seeds, alpha/beta/c nan)")
      ("seeds", po::value(&a.seeds)->default_value(a.seeds), "seeds per grid point (0..K-1)")
      ("n", po::value(&a.n)->default_value(a.n), "tokens")
      ("d", po::value(&a.d)->default_value(a.d), "embedding dimension")
      ("heads", po::value(&a.heads)->default_value(a.heads), "heads")
      ("mlp-ratio", po::value(&a.mlp_ratio)->default_value(a.mlp_ratio), "MLP hidden / d")
      ("logit-scale", number_value(&a.logit_scale), "0 = 1/sqrt(d_h)")
      ("skip", po::value(&a.skip)->default_value(a.skip), "none | full | no-ffn-skip | no-sab-skip")
      ("method", po::value(&a.method)->default_value(a.method),
       "auto (dense when its memory fits half of RAM and its predicted time fits --lanczos-seconds, "
        "else the host's schur route when it fits them, else lanczos; K_mlp/K_ffn exact by their per-token blocks wherever those fit) | dense | lanczos (matrix-free bracket, warm-started along the grid)")
      ("kappa", po::value(&a.kappa)->default_value(a.kappa), "dense flavour: fast | svd | mixed (fp32 LU refined to fp64) | schur (the host's block LU in p = 2…8 pieces, 1/(2p) of fast's memory)")
      ("lanczos-seconds", number_value(&a.gkl.max_seconds), "lanczos: seconds per matrix")
      ("lanczos-tol", number_value(&a.gkl.tolerance), "lanczos: target kappa_hi/kappa_lo - 1")
      ("certify", po::value(&a.certify)->default_value(a.certify), kCertifyHelp)
      ("threads", po::value(&a.threads)->default_value(a.threads), "BLAS/Eigen threads")
      ("shard", po::value(&a.shard_spec), "I/N: compute only block I of N of the grid points x seeds (join with jacond merge)")
      ("out", po::value(&a.out_dir)->default_value("results/sweep"), "output directory");
  add_device_option(desc, &a.device);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return std::nullopt;
  check_usage([&] {
    a.certify_mode = parse_flag("--certify", [&] { return parse_certify_mode(a.certify); });
    if (a.seeds < 1) throw std::invalid_argument("--seeds must be >= 1");
    if (a.n < 2) throw std::invalid_argument("--n must be >= 2");
    if (a.d < 1 || a.heads < 1 || a.mlp_ratio < 1 || a.d % a.heads != 0)
      throw std::invalid_argument("--d, --heads, --mlp-ratio must be >= 1 and --d divisible by --heads");
    if (a.threads < 1) throw std::invalid_argument("--threads must be >= 1");
    if (!(a.logit_scale >= 0) || !std::isfinite(a.logit_scale))  // as `block` (BlockSource::validate)
      throw std::invalid_argument("--logit-scale must be >= 0 (0: 1/sqrt(d_h)), got " + fmt(a.logit_scale));
    with_dense_flavour(KappaRoute::kFast, a.kappa);  // checks the value
    if (a.method == "lanczos" && vm.count("kappa") && !vm["kappa"].defaulted())  // as `block`
      throw std::invalid_argument("--kappa " + a.kappa + " picks the dense route's flavour; --method lanczos has none");
    if (a.method != "auto" && a.method != "dense" && a.method != "lanczos")
      throw std::invalid_argument("--method must be auto, dense or lanczos, got '" + a.method + "'");
    if (!(a.gkl.max_seconds > 0) || !(a.gkl.tolerance > 0))
      throw std::invalid_argument("--lanczos-seconds and --lanczos-tol must be > 0");
    a.alphas = parse_range(a.alpha_spec, "alpha");
    a.betas = parse_range(a.beta_spec, "beta");
    a.cs = parse_range(a.c_spec, "c");
    a.mode = parse_flag("--skip", [&] { return parse_skip_mode(a.skip); });
    parse_flag("--init", [&] { return models::parse_init_scheme(a.init); });
    if (a.init != "ours") {  // α, β, c shape `ours` only: another init's grid is its seeds
      for (const char* knob : {"alpha", "beta", "c"})
        if (!vm[knob].defaulted())
          throw std::invalid_argument(std::string("--") + knob + " is a knob of --init ours; --init " + a.init +
                                      " ignores it (its sweep is over --seeds)");
      a.alphas = a.betas = a.cs = {NAN};  // the table's alpha, beta, c: nan (no value)
    }
    validate_device_name(a.device);
    check_kappa_on_device(a.kappa, a.device);
    a.shard = parse_flag("--shard", [&] { return parse_shard(a.shard_spec); });
  });
  return a;
}

// The block reports' options: the route for the grid's size (auto resolved once), the sweep's
// four matrices and nothing else, the device.
BlockReportOptions sweep_options(const SweepArgs& a) {
  BlockReportOptions opt;
  opt.lanczos = a.gkl;
  opt.certify = a.certify_mode;
  select_devices(a.device, opt);
  opt.route = parse_kappa_route(a.method);
  resolve_auto(opt, a.n, a.d);
  opt.route = with_dense_flavour(opt.route, a.kappa);
  opt.matrices = {"K_sa", "B_sa", "E_sa", "K_sab"};  // the sweep's columns; nothing else is computed
  return opt;
}

// DIR/sweep.csv and DIR/run.json, whose grid says what determines the table (shard.h: merge
// refuses shards whose grids differ).
void write_sweep(const SweepArgs& a, const ResultsTable& table, const BlockReportOptions& opt, size_t total,
                 const ShardRecord& record, int argc, char** argv) {
  begin_output_set(a.out_dir);
  write_file_atomic(a.out_dir + "/sweep.csv", table.to_csv());
  nlohmann::json meta = run_metadata(argc, argv);
  meta["grid_points"] = total;
  meta["grid"] = {{"command", "sweep"}, {"alpha", a.alphas}, {"beta", a.betas}, {"c", a.cs}, {"init", a.init},
                  {"seeds", a.seeds}, {"n", a.n}, {"d", a.d}, {"heads", a.heads}, {"mlp_ratio", a.mlp_ratio},
                  {"logit_scale", a.logit_scale}, {"skip", a.skip}, {"method", a.method}, {"kappa", a.kappa},
                  {"certify", a.certify}, {"lanczos_seconds", a.gkl.max_seconds}, {"lanczos_tol", a.gkl.tolerance},
                  {"device", a.device}};
  if (a.shard.active()) meta["shard"] = record.to_json();
  if (const std::string chose = auto_decisions(opt, a.n, a.d, 0); !chose.empty())  // merge compares them (shard.h)
    meta["auto_decisions"] = {{"n=" + std::to_string(a.n) + " d=" + std::to_string(a.d), chose}};
  meta["device"] = device_json(opt);
  meta["note"] = "||E_sa||_2 is the sigma_max column of the E_sa rows";
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
}

}  // namespace

int run_sweep(int argc, char** argv) {
  const std::optional<SweepArgs> parsed = parse_sweep(argc, argv);
  if (!parsed) return 0;
  const SweepArgs& a = *parsed;
  set_threads(a.threads);
  refuse_forward_that_cannot_fit(a.n, a.d, a.heads, a.mlp_ratio);  // the same at every grid point
  check_output_directory(a.out_dir, "sweep");  // made when the table is written (nothing is left on a failure)
  BlockReportOptions opt = sweep_options(a);
  std::map<std::string, GklWarmStart> warm;  // chained along the grid (lanczos route)
  opt.warm = &warm;
  ResultsTable table({"init", "alpha", "beta", "c", "seed", "skip", "n", "d", "heads", "logit_scale"});
  const size_t total = a.alphas.size() * a.betas.size() * a.cs.size() * a.seeds;
  const auto [first, last] = a.shard.range(total);
  ShardRecord record(a.shard, total);
  Progress progress = Progress::on_stderr("sweep", last - first);
  size_t item = 0;  // the position of (c, beta, alpha, seed) in the unsharded order
  size_t not_converged = 0;
  for (double c : a.cs)
    for (double beta : a.betas)
      for (double alpha : a.alphas)
        for (int s = 0; s < a.seeds; ++s, ++item) {
          if (item < first || item >= last) continue;
          const size_t rows_before = table.size();
          const std::string point = "alpha=" + fmt(alpha) + " beta=" + fmt(beta) + " c=" + fmt(c) + " seed=" + std::to_string(s);
          const auto knob = [](double v) { return std::isnan(v) ? 0.0 : v; };  // timm, mimetic: ignored
          std::vector<ConditionReport> reports;
          double logit_scale = 0;
          try {  // a point's failure (e.g. an overflowing c) names the point
            const BlockWeights w = init_weights(a.init, knob(alpha), knob(beta), knob(c), "default", s, a.d, a.heads,
                                                a.mlp_ratio * a.d, a.logit_scale);
            logit_scale = w.effective_logit_scale();
            reports = block_reports(w, gaussian_tokens(a.n, a.d, static_cast<uint64_t>(s) ^ 0x5eedULL), a.mode, opt);
          } catch (const std::bad_alloc&) {
            throw;
          } catch (const std::exception& e) {
            throw std::runtime_error("sweep point " + point + ": " + e.what());
          }
          const std::vector<std::string> knobs = {a.init, fmt(alpha), fmt(beta), fmt(c), std::to_string(s), a.skip,
                                                  std::to_string(a.n), std::to_string(a.d), std::to_string(a.heads),
                                                  fmt(logit_scale)};
          for (const auto& r : reports) {
            table.add(knobs, r);
            not_converged += r.status == Status::kNotConverged;
          }
          record.item(item, table.size() - rows_before);
          progress.advance(point);
        }
  progress.finish();
  write_sweep(a, table, opt, total, record, argc, argv);
  std::cout << "wrote " << a.out_dir << "/sweep.csv (" << table.size() << " rows, " << last - first << " grid points x seeds";
  if (a.shard.active()) std::cout << ": shard " << a.shard.index << "/" << a.shard.count << " of " << total;
  std::cout << ")\n";
  warn_not_converged("sweep", not_converged, table.size());
  return 0;
}

}  // namespace jacond::cli
