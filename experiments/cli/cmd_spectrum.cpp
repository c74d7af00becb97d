// `jacond spectrum`: the singular-value spectrum of one block's Jacobian, for plotting.
//
// Matrices (one block from --init or --weights/--tokens, experiments/cli/block_source.h):
//   K_sa, B_sa, E_sa   bare attention at LN1(X) and its Prop. 2 split        (nd × nd)
//   K_sab              X -> SA(LN1 X) (+ X with --skip full|no-ffn-skip)      (nd × nd)
//                      (a --weights file with jacond's config has its own skip; --skip must agree)
//   K_mlp              bare MLP at LN2(X1)                                    (nd × nd)
//   K_ffn              X1 -> MLP(LN2 X1) (+ X1 with --skip full|no-sab-skip)  (nd × nd)
//   J_l, Jhat_l        ∂X2/∂θ (attention params) and ∂X2/∂θ̂ (MLP params) of the block on its
//                      tokens: J_ℓ, Ĵ_ℓ of §4.2 for L = 1, m = 1 (nd × (4d²+4d), nd × (2d·hidden+hidden+d));
//                      refused for a --weights block with a branch scale on that branch (LayerScale
//                      ls1/ls2.gamma, ReZero rezero_attn/mlp): folded into W^O / W_2 for the block's
//                      function, the parameters would be the folded weights, not the stored ones
// Methods:
//   dense  all singular values (LAPACKE gesdd on the matrix assembled from products; with
//          --device cuda, cuSOLVER's gesvd on the GPU, method dense-svd-cuda) ->
//          spectrum.csv: index,sigma,sigma_over_max  (descending; min(rows, cols) rows)
//   slq    stochastic Lanczos quadrature density of KᵀK (or KKᵀ when K is wide), matrix-free
//          (analysis/spectral/slq.h): Rademacher probes, --steps Lanczos steps with full
//          reorthogonalisation, Gauss nodes/weights from the tridiagonal eigendecomposition,
//          Gaussian broadening of width --width in log10 σ ->
//          density.csv: log10_sigma,sigma,density        (density per unit log10 σ, ∫ = 1)
//          nodes.csv:   probe,sigma,weight,below_floor   (weights sum to 1)
//   auto   dense when the SVD's memory (half of physical memory) and predicted time
//          (--dense-seconds) fit, the rule of analysis/spectral/dense_cost.h; else slq (on
//          --device cuda: when the matrix fits half of RAM and gesvd fits the GPU's free memory)
// --matrix M writes DIR/spectrum.csv (or density.csv + nodes.csv); --matrices A,B,... computes
// only those and writes DIR/A/..., DIR/B/.... Every output directory also gets run.json
// (command line, sizes, method, products, seconds).
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "analysis/spectral/condition.h"
#include "analysis/operators/network.h"
#include "analysis/operators/operators.h"
#include "analysis/report/block_report.h"
#include "analysis/spectral/slq.h"
#include "analysis/core/threads.h"
#include "experiments/cli/block_source.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/device_option.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {

struct SpectrumOptions {
  std::string method = "auto", out_dir;
  std::shared_ptr<const DenseDevice> device = cpu_dense_device();  // --device: where the dense SVD runs
  int probes = 8, steps = 80, points = 400;
  double dense_seconds = 120;
  double width = 0.05;
};

// Runs the chosen method on an operator and writes the CSV; returns the run.json fields.
template <typename Op>
nlohmann::json spectrum_of(const Op& op, const SpectrumOptions& o, uint64_t seed) {
  nlohmann::json info;
  const auto t0 = std::chrono::steady_clock::now();
  const bool dense =
      o.method == "dense" || (o.method == "auto" && o.device->fits(DenseRoute::kSvd, op.rows(), op.cols(), DenseBudget{0, o.dense_seconds}));
  info["rows"] = op.rows();
  info["cols"] = op.cols();
  std::ostringstream csv;
  if (dense) {
    Vec sv = o.device->singular_values(op.rows() < op.cols() ? dense_from_transpose_products(op) : dense_from_products(op));
    std::sort(sv.data(), sv.data() + sv.size(), std::greater<double>());
    const double tol = noise_floor(op.rows(), op.cols(), sv(0));
    const Index rank = (sv.array() > tol).count();
    csv << "index,sigma,sigma_over_max\n";
    for (Index i = 0; i < sv.size(); ++i) csv << i << "," << fmt(sv(i)) << "," << fmt(sv(i) / sv(0)) << "\n";
    info["method"] = o.device->svd_method();
    info["device"] = device_json(*o.device);
    info["sigma_max"] = sv(0);
    info["sigma_min"] = sv(sv.size() - 1);
    info["rank"] = rank;
    info["status"] = sv(sv.size() - 1) > tol ? "exact" : "singular";
    std::printf("%s: %lldx%lld sigma_max=%.6e sigma_min=%.6e rank=%lld (tol %.2e) %s\n",
                info["method"].get<std::string>().c_str(), static_cast<long long>(op.rows()), static_cast<long long>(op.cols()),
                sv(0), sv(sv.size() - 1),
                static_cast<long long>(rank), tol, sv(sv.size() - 1) > tol ? "exact" : "singular");
    if (!o.out_dir.empty()) write_file_atomic(o.out_dir + "/spectrum.csv", csv.str());
  } else {
    const SlqResult r = slq(op, o.probes, o.steps, seed);
    const std::vector<DensityPoint> rho = slq_density(r, o.points, o.width);
    csv << "log10_sigma,sigma,density\n";
    for (const DensityPoint& p : rho) csv << fmt(p.log10_sigma) << "," << fmt(p.sigma) << "," << fmt(p.density) << "\n";
    std::ostringstream nodes;
    nodes << "probe,sigma,weight,below_floor\n";
    for (const SlqNode& n : r.nodes) nodes << n.probe << "," << fmt(n.sigma) << "," << fmt(n.weight) << "," << (n.below_floor ? 1 : 0) << "\n";
    info["method"] = "slq";
    info["gram"] = r.gram_is_ktk ? "KtK" : "KKt";
    info["probes"] = r.probes;
    info["steps"] = r.steps;
    info["products"] = r.products;
    info["sigma_max_ritz"] = r.sigma_max_ritz;
    info["sigma_floor"] = r.sigma_floor;
    info["mass_below_floor"] = r.mass_below_floor;
    info["lowest_node_sigma"] = r.lowest_node_sigma;
    info["lowest_node_mass"] = r.lowest_node_mass;
    info["width_log10"] = o.width;
    info["note"] = "density.csv leaves out the nodes below sigma_floor (it integrates to 1 - mass_below_floor); below "
                   "lowest_node_sigma the density is not resolved: each probe's lowest node also carries every singular "
                   "value beneath it (a null space too), lowest_node_mass in all";
    std::printf("slq: %lldx%lld on %s, %d probes x %d steps, %lld products; sigma_max >= %.6e; not resolved below "
                "sigma %.2e (the lowest nodes, mass %.3e, carry every sigma beneath them); mass below the rounding "
                "floor %.3e (sigma < %.2e, left out of the density)\n",
                static_cast<long long>(op.rows()), static_cast<long long>(op.cols()), r.gram_is_ktk ? "K^T K" : "K K^T",
                r.probes, r.steps, static_cast<long long>(r.products), r.sigma_max_ritz, r.lowest_node_sigma,
                r.lowest_node_mass, r.mass_below_floor, r.sigma_floor);
    if (!o.out_dir.empty()) {
      write_file_atomic(o.out_dir + "/density.csv", csv.str());
      write_file_atomic(o.out_dir + "/nodes.csv", nodes.str());
    }
  }
  info["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

const std::vector<std::string>& spectrum_matrix_names() {
  static const std::vector<std::string> names{"K_sa", "B_sa", "E_sa", "K_sab", "K_mlp", "K_ffn", "J_l", "Jhat_l"};
  return names;
}

// The spectrum of one named matrix of the block (its operator, never a matrix not asked for).
nlohmann::json spectrum_of_matrix(const std::string& matrix, const BlockWeights& w, const BlockForward& f,
                                  SkipMode mode, const SpectrumOptions& o, uint64_t seed) {
  if (matrix == "K_sa" || matrix == "B_sa" || matrix == "E_sa") {
    const AttentionPart part = matrix == "K_sa" ? AttentionPart::kFull : matrix == "B_sa" ? AttentionPart::kB : AttentionPart::kE;
    return spectrum_of(AttentionJacobianOp(w, f.attn, part), o, seed);
  }
  if (matrix == "K_sab") return spectrum_of(SabJacobianOp(w, f), o, seed);
  if (matrix == "K_mlp") return spectrum_of(MlpJacobianOp(w, f.mlp), o, seed);
  if (matrix == "K_ffn") return spectrum_of(FfnJacobianOp(w, f), o, seed);
  Network net;  // J_l, Jhat_l: the block as a one-block network, one sample
  net.blocks = {w};
  net.skips = {mode};
  NetworkForward fwd;
  fwd.samples = {{f}};
  const ParamSelection sel = matrix == "J_l" ? ParamSelection::attention(0) : ParamSelection::mlp(0);
  return spectrum_of(ParamJacobianOp(net, fwd, sel), o, seed);
}

// The matrices asked for: --matrix (one, written flat into DIR) or --matrices (each into DIR/M).
std::vector<std::string> requested_matrices(const std::string& matrix, const std::string& matrices, bool& per_matrix_dirs) {
  if (!matrix.empty() && !matrices.empty()) throw std::invalid_argument("give --matrix or --matrices, not both");
  std::string list;
  for (const auto& m : spectrum_matrix_names()) list += (list.empty() ? "" : " | ") + m;
  if (matrix.empty() && matrices.empty()) throw std::invalid_argument("--matrix or --matrices is required (" + list + ")");
  per_matrix_dirs = !matrices.empty();
  const std::string spec = matrices.empty() ? matrix : matrices;
  std::vector<std::string> out =
      parse_flag(matrices.empty() ? "--matrix" : "--matrices", [&] { return parse_matrix_names(spec, spectrum_matrix_names()); });
  // --matrix writes flat into DIR, so a second matrix would replace the first's files: one name.
  if (!per_matrix_dirs && out.size() != 1)
    throw std::invalid_argument("--matrix " + matrix + ": --matrix takes one matrix; for several, or all, use --matrices "
                                "(each into DIR/<matrix>)");
  if (out.empty()) out = spectrum_matrix_names();  // "all"
  return out;
}

void write_run_json(int argc, char** argv, const std::string& dir, const std::string& matrix, const BlockSource& src,
                    const LoadedBlock& blk, const nlohmann::json& info) {
  nlohmann::json meta = run_metadata(argc, argv);
  meta["matrix"] = matrix;
  meta["skip"] = blk.skip_name;
  meta["source"] = src.from_files() ? src.weights : "init";
  meta["init"] = src.from_files() ? "" : src.init;
  meta["n"] = blk.tokens.rows();
  meta["d"] = blk.weights.d;
  meta["heads"] = blk.weights.heads;
  meta["logit_scale"] = blk.weights.effective_logit_scale();
  meta["result"] = info;
  write_file_atomic(dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << dir << "/" << (info["method"] == "slq" ? "density.csv, nodes.csv" : "spectrum.csv")
            << " and run.json\n";
}

// J_l / Jhat_l of a file block whose branch carries a scale (LayerScale, ReZero): block_from_timm
// folds it into W^O, b_O (attention) or W_2, b_2 (MLP), exact for the input Jacobians, but a
// parameter Jacobian would then be w.r.t. the folded weights (W diag(g)), whose κ is not the stored
// parameters'. Refused, as a property of the file (exit 1).
void refuse_folded_parameter_jacobians(const BlockSource& src, const LoadedBlock& blk,
                                       const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::string& key = name == "J_l" ? blk.attn_scale_key : name == "Jhat_l" ? blk.mlp_scale_key : "";
    if (key.empty()) continue;
    const bool rezero = key.find("rezero") != std::string::npos;
    throw std::invalid_argument(
        src.weights + " block " + std::to_string(src.layer) + " has a " + (rezero ? "ReZero" : "LayerScale") +
        " branch scale (" + key + "), folded into " + (name == "J_l" ? "W^O" : "W_2") + ": " + name +
        " would be the Jacobian w.r.t. the folded weights, not the stored parameters; leave " + name +
        " out of --matrix/--matrices");
  }
}

}  // namespace

int run_spectrum(int argc, char** argv) {
  BlockSource src;
  SpectrumOptions o;
  std::string matrix, matrices, device = "cpu";
  int threads = 2;
  po::options_description desc("jacond spectrum: singular values of one block's Jacobian (dense list or SLQ density) as CSV");
  desc.add_options()("help,h", "this help")
      ("matrix", po::value(&matrix), "one matrix: K_sa | B_sa | E_sa | K_sab | K_mlp | K_ffn | J_l | Jhat_l (output in DIR)")
      ("matrices", po::value(&matrices), "comma list of those (or all); only these are computed, each into DIR/<matrix>");
  src.add_options(desc);
  desc.add_options()
      ("method", po::value(&o.method)->default_value(o.method), "auto | dense | slq")
      ("dense-seconds", number_value(&o.dense_seconds), "auto: dense SVD when its predicted time is within this (and half of memory)")
      ("probes", po::value(&o.probes)->default_value(o.probes), "slq: Rademacher probes")
      ("steps", po::value(&o.steps)->default_value(o.steps), "slq: Lanczos steps per probe")
      ("points", po::value(&o.points)->default_value(o.points), "slq: grid points in log10 sigma")
      ("width", number_value(&o.width), "slq: Gaussian broadening in log10 sigma")
      ("threads", po::value(&threads)->default_value(threads), "BLAS/Eigen threads")
      ("out", po::value(&o.out_dir), "write DIR/spectrum.csv (dense) or DIR/density.csv + nodes.csv (slq), and run.json");
  add_device_option(desc, &device);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return 0;
  std::vector<std::string> names;
  bool per_matrix_dirs = false;
  check_usage([&] {
    src.validate(&vm, /*seed_used_with_files=*/true);  // --seed also seeds the SLQ probes
    names = requested_matrices(matrix, matrices, per_matrix_dirs);
    if (o.method != "auto" && o.method != "dense" && o.method != "slq")
      throw std::invalid_argument("--method must be auto, dense or slq, got '" + o.method + "'");
    if (o.probes < 1 || o.steps < 1) throw std::invalid_argument("--probes and --steps must be >= 1");
    if (o.points < 2) throw std::invalid_argument("--points must be >= 2");
    if (!(o.width > 0 && o.width <= 10)) throw std::invalid_argument("--width must be in (0, 10] decades");
    if (!(o.dense_seconds >= 0)) throw std::invalid_argument("--dense-seconds must be >= 0");
    if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
    validate_device_name(device);
  });
  if (!o.out_dir.empty()) check_output_directory(o.out_dir, "spectrum");
  OutputDirectoryGuard no_empty_out(o.out_dir);
  set_threads(threads);
  o.device = select_dense_device(device);
  const LoadedBlock blk = load_block(src);
  if (!blk.norm_note.empty()) std::cout << blk.norm_note << "\n";
  if (blk.post_norm)  // every spectrum operator puts LayerNorm before the attention
    throw std::invalid_argument(src.weights + " is a post-norm model (no LayerNorm before its branches): spectrum "
                                "analyses pre-norm blocks; `jacond block` reports its K_sa, B_sa and E_sa");
  refuse_folded_parameter_jacobians(src, blk, names);
  const BlockWeights& w = blk.weights;
  const BlockForward f = block_forward(w, blk.tokens, blk.skip);
  for (const std::string& name : names) {
    SpectrumOptions om = o;
    if (!o.out_dir.empty() && per_matrix_dirs) om.out_dir = o.out_dir + "/" + name;
    if (!om.out_dir.empty()) {
      begin_output_set(om.out_dir);
      remove_previous_files(om.out_dir, {"spectrum.csv", "density.csv", "nodes.csv"});  // by either method
    }
    std::cout << "spectrum of " << name << ": n=" << blk.tokens.rows() << " d=" << w.d << " heads=" << w.heads
              << " skip=" << blk.skip_name << " logit_scale=" << w.effective_logit_scale()
              << (src.from_files() ? " weights=" + src.weights : " init=" + src.init + " seed=" + std::to_string(src.seed))
              << "\n";
    const nlohmann::json info = spectrum_of_matrix(name, w, f, blk.skip, om, src.seed ^ 0x51c0ULL);
    if (!om.out_dir.empty()) write_run_json(argc, argv, om.out_dir, name, src, blk, info);
  }
  no_empty_out.keep();
  return 0;
}

}  // namespace jacond::cli
