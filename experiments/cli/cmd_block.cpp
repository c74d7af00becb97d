// `jacond block`: condition reports of one block's Jacobians (analysis/report/block_report.h).
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>

#include "analysis/report/block_report.h"
#include "analysis/core/threads.h"
#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/device_option.h"
#include "models/init/init.h"
#include "models/track/conditioning.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {

// The flags of `jacond block`, parsed and checked.
struct BlockArgs {
  BlockSource src;  // weights and tokens: an init, or files
  std::string kappa = "fast", method = "auto", matrices = "all", certify = "none", device = "cpu", out_dir;
  int threads = 2;
  double host_memory_gb = 0;
  GklOptions gkl;
  BlockReportOptions opt;  // route (before auto is resolved), certificate, matrices
};

// The flags; std::nullopt after --help. Usage errors exit 2 (check_usage).
std::optional<BlockArgs> parse_block(int argc, char** argv) {
  BlockArgs a;
  GklOptions& gkl = a.gkl;
  po::options_description desc("jacond block: condition numbers of one ViT block's Jacobians");
  desc.add_options()("help,h", "this help");
  a.src.add_options(desc);
  desc.add_options()
      ("matrices", po::value(&a.matrices)->default_value(a.matrices),
       "comma list of K_sa B_sa E_sa K_sab K_mlp K_ffn softmax attention and the token matrices X_in LN1_out SA_out "
       "SAB_out LN2_out FFN_out FFN_block_out, or all; only these are computed")
      ("method", po::value(&a.method)->default_value(a.method),
       "auto (dense when its memory fits half of RAM and its predicted time fits --lanczos-seconds, "
        "else the host's schur route when it fits them, else lanczos; K_mlp/K_ffn exact by their per-token blocks wherever those fit) | dense (exact) | lanczos (matrix-free certified bracket; exit code 3 if a bracket did not "
        "converge)")
      ("kappa", po::value(&a.kappa)->default_value(a.kappa), "dense flavour: fast (LU/QR + Lanczos, exact) | svd (full spectrum) | mixed (fp32 LU refined to fp64 against the matrix-free operator: half the memory, exact; analysis/spectral/mixed_lu.h) | schur (the host's block LU in p = 2…8 pieces: 1/(2p) of fast's memory, exact; analysis/spectral/schur_lu.h)")
      ("certify", po::value(&a.certify)->default_value(a.certify),
       "inertia-count certificates of K_sa/B_sa/E_sa/K_sab (analysis/spectral/inertia.h): none | inertia | auto "
       "(when three LDL^T factorisations of the (2nd)^2 augmented matrix fit half of RAM and 3x --lanczos-seconds)")
      ("lanczos-seconds", number_value(&gkl.max_seconds), "seconds per matrix: lanczos budget, and auto's dense time budget")
      ("lanczos-tol", number_value(&gkl.tolerance), "lanczos: target kappa_hi/kappa_lo - 1")
      ("lanczos-basis", po::value(&gkl.max_basis)->default_value(gkl.max_basis), "lanczos: Krylov basis before a restart")
      ("threads", po::value(&a.threads)->default_value(a.threads), "BLAS/Eigen threads")
      ("host-memory", number_value(&a.host_memory_gb),
       "GB the exact route may hold on the host (0: 90% of RAM); a K_sa/B_sa/E_sa/K_sab whose full route "
       "(16 N^2 bytes) exceeds it takes the Schur route (4 N^2 and a panel; analysis/spectral/schur_lu.h)")
      ("out", po::value(&a.out_dir), "write DIR/results.csv and DIR/run.json");
  add_device_option(desc, &a.device);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return std::nullopt;
  const auto typed = [&](const char* flag) { return vm.count(flag) && !vm[flag].defaulted(); };
  check_usage([&] {
    a.src.validate(&vm);
    with_dense_flavour(KappaRoute::kFast, a.kappa);  // checks the value
    if (a.method == "lanczos" && typed("kappa"))
      throw std::invalid_argument("--kappa " + a.kappa + " picks the dense route's flavour; --method lanczos has none");
    if (a.method != "auto" && a.method != "dense" && a.method != "lanczos")
      throw std::invalid_argument("--method must be auto, dense or lanczos, got '" + a.method + "'");
    if (!(gkl.max_seconds > 0) || !(gkl.tolerance > 0) || gkl.max_basis < 2)
      throw std::invalid_argument("--lanczos-seconds and --lanczos-tol must be > 0 and --lanczos-basis >= 2");
    if (a.threads < 1) throw std::invalid_argument("--threads must be >= 1, got " + std::to_string(a.threads));
    check_kappa_on_device(a.kappa, a.device);
    if (!(a.host_memory_gb >= 0) || !std::isfinite(a.host_memory_gb))
      throw std::invalid_argument("--host-memory must be >= 0 GB (0: 90% of RAM), got " + fmt(a.host_memory_gb));
    a.opt.host_memory_bytes = a.host_memory_gb * 1e9;
    if (typed("host-memory") && (a.method == "lanczos" || (a.kappa != "fast" && a.kappa != "schur") || a.device != "cpu"))
      throw std::invalid_argument("--host-memory bounds the host's exact route (--kappa fast|schur on --device cpu), which "
                                  "--method " + a.method + " --kappa " + a.kappa + " --device " + a.device +
                                  " does not take");
    a.opt.route = parse_kappa_route(a.method);
    a.opt.certify = parse_flag("--certify", [&] { return parse_certify_mode(a.certify); });
    a.opt.matrices = parse_flag("--matrices", [&] { return parse_matrix_names(a.matrices, block_matrix_names()); });
    validate_device_name(a.device);
  });
  gkl.keep = std::max<Index>(1, gkl.max_basis / 3);
  return a;
}

// One line per bracketed row (lanczos, or certified) under the table; false when one of them
// did not converge.
bool print_brackets(const std::vector<ConditionReport>& reports) {
  bool all_converged = true;
  for (const auto& r : reports) {
    if (r.method.rfind("gkl", 0) != 0 && r.status != Status::kCertified) continue;
    all_converged = all_converged && r.status != Status::kNotConverged;
    std::printf("  %s%s: kappa in [%.6e, %.6e] (%s, %lld products, %.1f s) %s\n", r.matrix.c_str(),
                r.space == "full" ? "" : (" on " + r.space).c_str(), r.kappa_lo, r.kappa_hi, to_string(r.status).c_str(),
                static_cast<long long>(r.products), r.seconds, r.note.c_str());
  }
  return all_converged;
}

// The block's knobs, one value per column of block_knob_columns(): a knob the source does not have
// is "nan" (a number) or "" (a name), as sweep writes alpha, beta, c for an init without them.
const std::vector<std::string>& block_knob_columns() {
  static const std::vector<std::string> columns = {"source", "init", "alpha", "beta", "c", "mlp_init", "seed",
                                                   "layer", "tokens", "sample", "norm", "skip", "n", "d", "heads",
                                                   "mlp_ratio", "logit_scale", "route"};
  return columns;
}

std::vector<std::string> block_knobs(const BlockArgs& a, const LoadedBlock& blk, const BlockReportOptions& opt) {
  const BlockSource& src = a.src;
  const std::string none = "nan";
  const bool files = src.from_files();
  const bool ours = !files && models::parse_init_scheme(src.init) == models::InitScheme::kOurs;
  const auto init_knob = [&](double v) { return ours ? fmt(v) : none; };  // α, β, c: `ours` only
  std::string mlp_init;  // the MLP init the block was drawn with ("default" resolved)
  if (!files)
    mlp_init = models::to_string(src.mlp_init == "default" ? models::default_mlp_init(models::parse_init_scheme(src.init))
                                                           : models::parse_mlp_init(src.mlp_init));
  return {files ? src.weights : "init",
          files ? "" : src.init,
          init_knob(src.alpha),
          init_knob(src.beta),
          init_knob(src.c),
          mlp_init,
          files ? none : std::to_string(src.seed),
          files ? std::to_string(src.layer) : none,
          files ? src.tokens : "",
          blk.sample >= 0 ? std::to_string(blk.sample) : none,
          blk.post_norm ? "post" : "pre",
          blk.post_norm ? "" : blk.skip_name,
          std::to_string(blk.tokens.rows()),
          std::to_string(blk.weights.d),
          std::to_string(blk.weights.heads),
          fmt(static_cast<double>(blk.weights.hidden) / static_cast<double>(blk.weights.d)),
          fmt(blk.weights.effective_logit_scale()),
          to_string(opt.route)};
}

// DIR/results.csv (the reports, each with the block's knobs) and DIR/run.json.
void write_block_results(const BlockArgs& a, const LoadedBlock& blk, const BlockReportOptions& opt,
                         const std::vector<ConditionReport>& reports, int argc, char** argv) {
  begin_output_set(a.out_dir);
  ResultsTable table(block_knob_columns());
  const std::vector<std::string> knobs = block_knobs(a, blk, opt);
  for (const auto& r : reports) table.add(knobs, r);
  write_file_atomic(a.out_dir + "/results.csv", table.to_csv());
  nlohmann::json meta = run_metadata(argc, argv);
  meta["rows"] = table.size();
  meta["device"] = device_json(opt);
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << a.out_dir << "/results.csv (" << table.size() << " rows) and run.json\n";
}

}  // namespace

int run_block(int argc, char** argv) {
  const std::optional<BlockArgs> parsed = parse_block(argc, argv);
  if (!parsed) return 0;
  const BlockArgs& a = *parsed;
  if (!a.out_dir.empty()) check_output_directory(a.out_dir, "block");
  set_threads(a.threads);
  BlockReportOptions opt = a.opt;
  select_devices(a.device, opt);
  const LoadedBlock blk = load_block(a.src);
  if (!blk.norm_note.empty()) std::cout << blk.norm_note << "\n";
  if (blk.post_norm) {
    try {  // the rule train and audit apply (models/track/conditioning.h), with the file named
      models::check_matrices_for(models::NormPlacement::kPost, opt.matrices);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(a.src.weights + ": " + e.what());
    }
  }
  opt.lanczos = a.gkl;
  resolve_auto(opt, blk.tokens.rows(), blk.weights.d);
  opt.route = with_dense_flavour(opt.route, a.kappa);
  // A post-norm block's attention sees the block input itself; its skip mode changes none of these.
  const std::vector<ConditionReport> reports = blk.post_norm ? post_norm_block_reports(blk.weights, blk.tokens, opt)
                                                             : block_reports(blk.weights, blk.tokens, blk.skip, opt);

  std::cout << "block: n=" << blk.tokens.rows() << " d=" << blk.weights.d << " heads=" << blk.weights.heads
            << (blk.post_norm ? " norm=post" : " skip=" + blk.skip_name) << " logit_scale=" << blk.weights.effective_logit_scale()
            << (a.src.from_files() ? " weights=" + a.src.weights + " layer=" + std::to_string(a.src.layer)
                                   : " init=" + a.src.init + " seed=" + std::to_string(a.src.seed))
            << " device=" << device_description(opt) << "\n";
  print_reports(reports);
  const bool all_converged = print_brackets(reports);
  if (!a.out_dir.empty()) write_block_results(a, blk, opt, reports, argc, argv);
  if (!all_converged) {
    std::cerr << "jacond block: some lanczos brackets did not converge (status not-converged; best brackets reported)\n";
    return 3;
  }
  return 0;
}

}  // namespace jacond::cli
