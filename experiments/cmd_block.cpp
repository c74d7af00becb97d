// `jacond block`: condition reports of one block's Jacobians (analysis/block_report.h).
#include <boost/program_options.hpp>
#include <iostream>

#include "analysis/block_report.h"
#include "analysis/threads.h"
#include "experiments/block_source.h"
#include "experiments/cli_common.h"
#include "experiments/commands.h"

namespace jacond::cli {

namespace po = boost::program_options;

int run_block(int argc, char** argv) {
  BlockSource src;
  std::string skip = "none", kappa = "fast", out_dir;
  int threads = 2;
  po::options_description desc("jacond block: condition numbers of one ViT block's Jacobians\n"
                               "matrices: K_sa B_sa E_sa K_sab K_mlp K_ffn softmax attention");
  desc.add_options()("help,h", "this help");
  src.add_options(desc);
  desc.add_options()
      ("skip", po::value(&skip)->default_value(skip), "residuals: none | full | sab | ffn")
      ("kappa", po::value(&kappa)->default_value(kappa), "fast (LU/QR + Lanczos, exact) | svd (full spectrum)")
      ("threads", po::value(&threads)->default_value(threads), "BLAS/Eigen threads")
      ("out", po::value(&out_dir), "write DIR/results.csv and DIR/run.json");
  if (!parse_options(argc, argv, desc)) return 0;
  if (kappa != "fast" && kappa != "svd") throw std::invalid_argument("--kappa must be fast or svd, got '" + kappa + "'");
  if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
  set_threads(threads);
  const SkipMode mode = parse_skip_mode(skip);
  const LoadedBlock blk = load_block(src);

  BlockReportOptions opt;
  opt.route = kappa == "svd" ? KappaRoute::kSvd : KappaRoute::kFast;
  const std::vector<ConditionReport> reports = block_reports(blk.weights, blk.tokens, mode, opt);

  std::cout << "block: n=" << blk.tokens.rows() << " d=" << blk.weights.d << " heads=" << blk.weights.heads
            << " skip=" << skip << " logit_scale=" << blk.weights.effective_logit_scale()
            << (src.from_files() ? " weights=" + src.weights + " layer=" + std::to_string(src.layer)
                                 : " init=" + src.init + " seed=" + std::to_string(src.seed))
            << "\n";
  print_reports(reports);

  if (!out_dir.empty()) {
    ensure_directory(out_dir);
    ResultsTable table({"source", "init", "alpha", "beta", "c", "seed", "layer", "skip", "n", "d", "heads", "logit_scale"});
    const std::vector<std::string> knobs = {src.from_files() ? src.weights : "init", src.from_files() ? "" : src.init,
                                            fmt(src.alpha), fmt(src.beta), fmt(src.c), std::to_string(src.seed),
                                            std::to_string(src.layer), skip, std::to_string(blk.tokens.rows()),
                                            std::to_string(blk.weights.d), std::to_string(blk.weights.heads),
                                            fmt(blk.weights.effective_logit_scale())};
    for (const auto& r : reports) table.add(knobs, r);
    write_file_atomic(out_dir + "/results.csv", table.to_csv());
    nlohmann::json meta = run_metadata(argc, argv);
    meta["rows"] = table.size();
    write_file_atomic(out_dir + "/run.json", meta.dump(2) + "\n");
    std::cout << "wrote " << out_dir << "/results.csv (" << table.size() << " rows) and run.json\n";
  }
  return 0;
}

}  // namespace jacond::cli
