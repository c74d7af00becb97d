// `jacond audit CKPT...`: per-layer conditioning of checkpoints (models/track/conditioning.h).
//
// A CKPT is a checkpoint directory written by `jacond train` (step-XXXXXXX/ with meta.json), a
// run directory (all its checkpoints, in step order), or a timm-named ViT .safetensors file
// (config from its "config" metadata when jacond wrote it, otherwise inferred from the shapes
// plus --heads, required, and --skip/--norm). With data, the probe batch is the one training uses: the first
// --probe-size Fashion-MNIST test images (default: the checkpoint's own probe size).
// --data-free needs weights only: κ(W^V W^O), per head κ(W^V_h W^O_h) and κ(W^Q_h W^K_hᵀ) over
// their rank-d_h range, and every weight matrix's σ_max / κ.
#include <algorithm>
#include <boost/program_options.hpp>
#include <filesystem>
#include <optional>
#include <iostream>
#include <limits>
#include <new>
#include <string>
#include <type_traits>

#include "analysis/core/progress.h"
#include "analysis/core/threads.h"
#include "analysis/report/weight_report.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/device_option.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/shard.h"
#include "models/io/checkpoint.h"
#include "models/track/conditioning.h"
#include "models/data/fashion_mnist.h"
#include "models/data/token_graying.h"
#include "models/io/error_text.h"
#include "models/io/safetensors.h"

namespace jacond::cli {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

struct AuditTarget {
  std::string path;
  int64_t step = -1;
  models::ViTConfig cfg;
  models::TensorMap state;
  int64_t probe_size = 1;
  std::string token_graying = "none";  // the run's Token Graying, applied to the probe as in training
  double tg_eps = 1.0;
  bool has_config = true;  // false: a .safetensors file without jacond's config (shapes plus flags)
};

std::vector<std::string> expand(const std::string& path) {
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "meta.json")) {
    std::vector<std::string> out;
    for (const auto& e : models::list_checkpoints(path, models::CheckpointParts::kModel)) out.push_back(e.dir);
    if (out.empty()) throw std::runtime_error(path + ": neither a checkpoint nor a run directory with step-*/ checkpoints");
    return out;
  }
  if (!fs::exists(path)) throw std::runtime_error(path + ": no such file or directory");
  return {path};
}

// The flags that describe a file without jacond's config, and which of them were typed.
struct ArchitectureFlags {
  models::ViTConfig cfg;  // --skip, --norm (and --heads)
  bool heads = false, skip = false, norm = false;
};

// --heads, --skip and --norm describe files without jacond's config (one audit may mix them with
// checkpoints that have one); where a checkpoint's config says otherwise, its config is used, and
// a note says so rather than leaving the typed flag to look applied.
void note_flags_against_config(const std::string& path, const models::ViTConfig& cfg, const ArchitectureFlags& flags) {
  const auto note = [&](const std::string& flag, const std::string& typed, const std::string& saved) {
    if (typed != saved)
      std::cout << "note: " << path << " has jacond's config (" << flag << " " << saved << "); --" << flag << " " << typed
                << " applies to files without one\n";
  };
  if (flags.heads) note("heads", std::to_string(flags.cfg.heads), std::to_string(cfg.heads));
  if (flags.skip) note("skip", models::to_string(flags.cfg.skip), models::to_string(cfg.skip));
  if (flags.norm) note("norm", models::to_string(flags.cfg.norm), models::to_string(cfg.norm));
}

// A field of a checkpoint's meta.json section, its JSON type checked: nlohmann's value() says "type
// must be number, but is string", naming neither the file nor the key, and reads 1.5 or true as 1.
template <class T>
T meta_field(const nlohmann::json& section, const std::string& where, const char* key, T fallback) {
  if (!section.contains(key)) return fallback;
  const nlohmann::json& v = section.at(key);
  const char* wanted = std::is_same_v<T, std::string> ? "a string" : std::is_integral_v<T> ? "an integer" : "a number";
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
  else if constexpr (std::is_integral_v<T>)  // an unsigned past T's range would wrap negative
    ok = v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
  else ok = v.is_number();
  if (!ok) throw std::runtime_error(where + "." + key + " must be " + wanted + ", got " + models::printable(v.dump()));
  return v.get<T>();
}

// A checkpoint directory `jacond train` wrote: its config, weights and the run's probe settings.
// optimizer.pt is not read (an audit of a run whose optimizer states were deleted is an audit).
AuditTarget load_checkpoint_dir(const std::string& path, const ArchitectureFlags& flags, bool data_free) {
  AuditTarget t;
  t.path = path;
  models::Checkpoint c = models::read_checkpoint(path, models::CheckpointParts::kModel);
  t.step = c.meta["step"].get<int64_t>();
  const std::string where = path + ": meta.json ";
  const std::string arch = meta_field(c.meta["model"], where + "model", "arch", std::string("vit"));
  if (arch != "vit")
    throw std::runtime_error(path + ": a " + models::printable(arch) +
                             " checkpoint; jacond audit analyses ViT blocks (the run's conditioning.csv has its token-matrix κ)");
  t.cfg = models::ViTConfig::from_json(c.meta["model"]);
  note_flags_against_config(path, t.cfg, flags);
  t.state = std::move(c.model);
  if (c.meta.contains("train") && !data_free) {  // the probe batch's settings; --data-free has none
    const nlohmann::json& train = c.meta["train"];
    if (!train.is_object()) throw std::runtime_error(where + "train must be an object, got " + models::printable(train.dump()));
    t.probe_size = meta_field(train, where + "train", "probe_size", int64_t{1});
    t.token_graying = meta_field(train, where + "train", "token_graying", std::string("none"));
    t.tg_eps = meta_field(train, where + "train", "tg_eps", 1.0);
  }
  return t;
}

// A .safetensors file: jacond's "config" metadata when it has one, else the tensors' shapes plus
// --heads (required: the tensors cannot say it, and a wrong head count gives valid-looking, wrong
// per-head κ), --skip and --norm (notes name what is assumed). --data-free reads the blocks alone,
// so a headless backbone or one without a class token's position is audited too.
AuditTarget load_safetensors_file(const std::string& path, const ArchitectureFlags& flags, bool data_free) {
  AuditTarget t;
  t.path = path;
  std::map<std::string, std::string> meta;
  t.state = models::load_safetensors(path, &meta);
  const std::optional<models::ViTConfig> cfg = models::ViTConfig::from_metadata(meta, path);
  if (cfg) {
    note_flags_against_config(path, *cfg, flags);
    t.cfg = *cfg;
  } else {
    t.has_config = false;
    if (!flags.heads) throw std::invalid_argument(path + " has no jacond config metadata: pass --heads (its head count)");
    if (!flags.norm) std::cout << assumed_pre_norm_note(path) << "\n";  // as `block`: pre- and post-norm blocks have the same tensors
    t.cfg = data_free ? models::infer_block_config(t.state, flags.cfg) : models::infer_config(t.state, flags.cfg);
    // The residual layout changes the tokens later blocks see, not the weights (ReZero's α is a tensor).
    if (!flags.skip && !data_free && t.cfg.skip != models::SkipKind::kRezero)
      std::cout << "note: " << path << " has no jacond config: read with every skip connection (timm's ViT); "
                << "pass --skip for another residual layout\n";
  }
  models::fill_absent_biases(t.state, t.cfg);  // Linears built without biases: zeros, the same function
  if (meta.count("step")) {
    const std::optional<int64_t> step = parse_integer(meta["step"]);
    if (!step) throw std::runtime_error(path + ": its 'step' metadata is not an integer: '" + models::printable(meta["step"]) + "'");
    t.step = *step;
  }
  return t;
}

// The config `t` was analysed with, for run.json: a data-free audit of a file without jacond's
// config read the blocks alone, so the embedding's fields it holds are defaults, not the file's.
nlohmann::json recorded_architecture(const AuditTarget& t, bool data_free) {
  nlohmann::json j = t.cfg.to_json();
  if (data_free && !t.has_config)
    for (const char* unread : {"image_size", "in_chans", "patch", "num_classes"}) j[unread] = nullptr;
  return j;
}

// Runs `load` (or an analysis) of the checkpoint `path`; an error that does not name the file
// gets its name in front, so a failure among many checkpoints says which one. Out of memory and
// usage errors pass as they are (main names them); LibTorch's keep their first line only.
template <class F>
auto naming_checkpoint(const std::string& path, F&& load) -> decltype(load()) {
  const auto named = [&](const std::string& what) {
    return what.find(path) != std::string::npos ? what : path + ": " + what;
  };
  try {
    return load();
  } catch (const UsageError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw std::runtime_error(named(what.substr(0, what.find('\n'))));
  } catch (const nlohmann::json::exception& e) {  // meta.json fields: nlohmann's id dropped, file text sanitized
    throw std::runtime_error(named(models::json_error_text(e)));
  } catch (const std::exception& e) {
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw std::runtime_error(path + ": " + e.what());
  }
}

AuditTarget load_target(const std::string& path, const ArchitectureFlags& flags, bool data_free) {
  return naming_checkpoint(path, [&] {
    return fs::is_directory(path) ? load_checkpoint_dir(path, flags, data_free) : load_safetensors_file(path, flags, data_free);
  });
}

// The flags of `jacond audit`, parsed and checked.
struct AuditArgs {
  std::vector<std::string> paths;
  bool data_free = false;
  int64_t probe_size = 0, heads = 0;
  int threads = 2;
  double lanczos_seconds = 30;
  std::string data_dir = models::kFashionMnistDir, method = "auto", matrices = "all", out_dir, skip = "full",
              norm = "pre", certify = "none", device = "cpu", shard_spec;
  ArchitectureFlags flags;  // --skip, --norm (and --heads) for .safetensors files without jacond config
  models::TrackOptions opts;    // route, certificate, matrices
  Shard shard;
};

// The flags; std::nullopt after --help. Usage errors exit 2 (check_usage).
std::optional<AuditArgs> parse_audit(int argc, char** argv) {
  AuditArgs a;
  // The values the help lists are the parsers' own (a name added there shows up here).
  std::string skips, matrices;
  for (const models::SkipKind k : models::kSkipKinds) skips += (skips.empty() ? "" : " | ") + models::to_string(k);
  for (const auto& m : jacond::block_matrix_names()) matrices += (matrices.empty() ? "" : " ") + m;
  po::options_description desc("jacond audit CKPT...: per-layer conditioning of checkpoints");
  desc.add_options()("help,h", "this help")
      ("ckpt", po::value(&a.paths)->composing(), "checkpoint dirs, run dirs or .safetensors files (positional)")
      ("data-free", po::bool_switch(&a.data_free), "weights only: κ(W^V W^O), κ(W^Q_h W^K_hᵀ), spectral norms")
      ("probe-size", po::value(&a.probe_size)->default_value(0), "probe images (0: the checkpoint's own, else 1)")
      ("data-dir", po::value(&a.data_dir)->default_value(a.data_dir), "Fashion-MNIST files for the probe batch")
      ("method", po::value(&a.method)->default_value(a.method), "κ route: auto | dense (= fast) | svd | mixed (fp32 LU refined to fp64) | schur (the host's block LU in pieces) | lanczos")
      ("lanczos-seconds", number_value(&a.lanczos_seconds), "lanczos: seconds per matrix")
      ("certify", po::value(&a.certify)->default_value(a.certify), kCertifyHelp)
      ("matrices", po::value(&a.matrices)->default_value(a.matrices),
       ("comma list of " + matrices + " (the Jacobians at the probe batch), or all").c_str())
      ("heads", po::value(&a.heads)->default_value(0), "heads, required for .safetensors files without jacond config")
      ("skip", po::value(&a.skip)->default_value(a.skip),
       ("skip mode, for .safetensors files without jacond config: " + skips).c_str())
      ("norm", po::value(&a.norm)->default_value(a.norm), "pre | post, for .safetensors files without jacond config")
      ("threads", po::value(&a.threads)->default_value(a.threads), "BLAS/torch threads")
      ("shard", po::value(&a.shard_spec), "I/N: audit only block I of N of the checkpoints (join with jacond merge)")
      ("out", po::value(&a.out_dir), "write DIR/audit.csv and DIR/run.json");
  add_device_option(desc, &a.device);
  po::positional_options_description pos;
  pos.add("ckpt", -1);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, &pos, &vm)) return std::nullopt;
  const auto typed = [&](const char* flag) { return vm.count(flag) && !vm[flag].defaulted(); };
  a.flags.heads = typed("heads") && a.heads > 0, a.flags.skip = typed("skip"), a.flags.norm = typed("norm");
  check_usage([&] {
    if (a.paths.empty()) throw std::invalid_argument("give at least one checkpoint (jacond audit CKPT...)");
    for (const std::string& p : a.paths)
      if (p.empty()) throw std::invalid_argument("a CKPT argument is empty (jacond audit CKPT...: a checkpoint or run directory, or a .safetensors file)");
    if (a.threads < 1) throw std::invalid_argument("--threads must be >= 1");
    if (a.probe_size < 0) throw std::invalid_argument("--probe-size must be >= 0");
    if (a.heads < 0) throw std::invalid_argument("--heads must be >= 0 (0: from the checkpoint)");
    if (!(a.lanczos_seconds > 0)) throw std::invalid_argument("--lanczos-seconds must be positive");
    a.flags.cfg.skip = parse_flag("--skip", [&] { return models::parse_skip_kind(a.skip); });
    a.flags.cfg.norm = parse_flag("--norm", [&] { return models::parse_norm_placement(a.norm); });
    if (a.heads > 0) a.flags.cfg.heads = a.heads;
    a.opts.block.route = parse_flag("--method", [&] { return parse_kappa_route(a.method); });
    a.opts.block.certify = parse_flag("--certify", [&] { return parse_certify_mode(a.certify); });
    a.opts.matrices = parse_flag("--matrices", [&] { return models::parse_matrix_list(a.matrices); });
    // With data, the Jacobians at the probe batch (as jacond.audit in Python); the weights' own
    // products are --data-free's rows.
    for (const auto& m : a.opts.matrices)
      if (std::count(jacond::weight_matrix_names().begin(), jacond::weight_matrix_names().end(), m))
        throw UsageError("--matrices " + m + ": a weight product, reported by --data-free (leave out --matrices)");
    validate_device_name(a.device);
    a.shard = parse_flag("--shard", [&] { return parse_shard(a.shard_spec); });
    // --data-free reads the weights alone: the flags of the Jacobian route would be ignored.
    if (a.data_free)
      for (const char* flag : {"matrices", "method", "certify", "lanczos-seconds", "probe-size", "data-dir", "device"})
        if (typed(flag))
          throw UsageError(std::string("--") + flag + " sets up the Jacobians at a probe batch; --data-free reports "
                           "the weight products (W^V W^O, W^Q_h W^K_hᵀ) only");
  });
  a.opts.block.lanczos.max_seconds = a.lanczos_seconds;
  return a;
}

// One checkpoint's per-layer reports: data-free from its weights, or on its probe batch of the
// Fashion-MNIST test split (loaded once into `test`), Token Graying as the run trained.
std::vector<models::LayerReport> audit_one(const AuditArgs& a, const std::string& path, const AuditTarget& t,
                                           std::optional<models::FashionMnistSplit>& test) {
  if (a.data_free) return models::data_free_conditioning(t.state, t.cfg);
  if (t.cfg.in_chans != 1 || t.cfg.image_size != 28)
    throw std::runtime_error(path + ": model takes [" + std::to_string(t.cfg.in_chans) + ", " +
                             std::to_string(t.cfg.image_size) + ", " + std::to_string(t.cfg.image_size) +
                             "] images, the Fashion-MNIST probe is [1, 28, 28]: use --data-free");
  if (!test) test = models::load_fashion_mnist(a.data_dir, "test");
  const int64_t m = a.probe_size > 0 ? a.probe_size : t.probe_size;
  const int64_t available = test->images.size(0);
  if (m < 1 || m > available)
    throw std::runtime_error((a.probe_size > 0 ? "--probe-size " : path + ": the run's probe_size ") + std::to_string(m) +
                             " is not in [1, " + std::to_string(available) + "] (the Fashion-MNIST test images)");
  const torch::Tensor probe = models::token_graying(models::normalize_images(test->images.narrow(0, 0, m)),
                                                    models::parse_token_graying(t.token_graying), t.tg_eps, t.cfg.patch);
  try {
    return models::state_conditioning(t.state, t.cfg, probe, a.opts);
  } catch (const std::invalid_argument& e) {  // e.g. --matrices K_ffn of a post-norm model
    throw std::runtime_error(path + ": " + e.what());
  }
}

// The checkpoint's reports on stdout, one table per layer (the probe's mean rows).
void print_audit(const AuditArgs& a, const std::string& path, const AuditTarget& t,
                 const std::vector<models::LayerReport>& reports) {
  std::cout << "== " << path << " (step " << t.step << ", d=" << t.cfg.dim << " depth=" << t.cfg.depth
            << " heads=" << t.cfg.heads << " skip=" << models::to_string(t.cfg.skip)
            << " init=" << models::to_string(t.cfg.init.scheme) << (a.data_free ? ", data-free" : "") << ")\n";
  for (int64_t l = 0; l < t.cfg.depth; ++l) {
    std::vector<ConditionReport> layer;
    for (const auto& r : reports)
      if (r.layer == l && r.probe <= 0) layer.push_back(r.report);
    std::cout << "-- layer " << l << "\n";
    print_reports(layer);
  }
}

// DIR/audit.csv and DIR/run.json, whose grid says what determines the table (shard.h: merge
// refuses shards whose grids differ).
void write_audit(const AuditArgs& a, const std::string& csv, size_t rows, const std::vector<std::string>& listed,
                 const std::vector<std::string>& audited, const ShardRecord& record, const nlohmann::json& decisions,
                 const nlohmann::json& architectures, int argc, char** argv) {
  begin_output_set(a.out_dir);
  write_file_atomic(a.out_dir + "/audit.csv", csv);
  nlohmann::json meta = run_metadata(argc, argv);
  meta["rows"] = rows;
  meta["checkpoints"] = audited;
  meta["architectures"] = architectures;  // what each was analysed as: its config, or the shapes plus flags
  meta["grid"] = {{"command", "audit"}, {"checkpoints", listed}, {"data_free", a.data_free},
                  {"probe_size", a.probe_size}, {"data_dir", a.data_dir}, {"method", a.method},
                  {"lanczos_seconds", a.lanczos_seconds}, {"certify", a.certify}, {"matrices", a.matrices},
                  {"heads", a.heads}, {"skip", a.skip}, {"norm", a.norm}, {"device", a.device}};
  if (a.shard.active()) meta["shard"] = record.to_json();
  if (!decisions.empty()) meta["auto_decisions"] = decisions;  // merge compares them (shard.h)
  meta["device"] = device_json(a.opts.block);
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << a.out_dir << "/audit.csv (" << rows << " rows) and run.json\n";
}

}  // namespace

int run_audit(int argc, char** argv) {
  std::optional<AuditArgs> parsed = parse_audit(argc, argv);
  if (!parsed) return 0;
  AuditArgs& a = *parsed;
  if (!a.out_dir.empty()) check_output_directory(a.out_dir, "audit");
  torch::set_num_threads(a.threads);
  set_threads(a.threads);
  select_devices(a.device, a.opts.block);
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, jacond::GklWarmStart>> warm;  // Lanczos vectors carried forward
  a.opts.warm = &warm;

  std::vector<std::string> listed;  // every checkpoint named, in order: the unsharded items
  for (const auto& p : a.paths)
    for (auto& e : expand(p)) listed.push_back(e);
  const auto [first, last] = a.shard.range(listed.size());
  const std::vector<std::string> audited(listed.begin() + static_cast<std::ptrdiff_t>(first),
                                         listed.begin() + static_cast<std::ptrdiff_t>(last));
  ShardRecord record(a.shard, listed.size());

  std::optional<models::FashionMnistSplit> test;
  std::string csv = "checkpoint," + models::conditioning_csv_header() + "\n";
  size_t rows = 0, not_converged = 0;
  nlohmann::json decisions = nlohmann::json::object();  // auto's choices, by block size
  nlohmann::json architectures = nlohmann::json::array();  // the config each checkpoint was analysed with
  // One progress line per checkpoint (plain lines: the per-layer tables share the terminal).
  Progress progress("audit", audited.size(), std::cerr, /*tty=*/false, /*log_every=*/0.0);
  for (size_t item = first; item < last; ++item) {
    const std::string& path = listed[item];
    const AuditTarget t = load_target(path, a.flags, a.data_free);
    const std::vector<models::LayerReport> reports = naming_checkpoint(path, [&] { return audit_one(a, path, t, test); });
    architectures.push_back({{"checkpoint", path}, {"model", recorded_architecture(t, a.data_free)}});
    if (!a.data_free) {
      const bool ffn = a.opts.matrices.empty() || std::count(a.opts.matrices.begin(), a.opts.matrices.end(), "K_ffn") ||
                       std::count(a.opts.matrices.begin(), a.opts.matrices.end(), "K_mlp");
      const Index hidden = ffn ? t.cfg.hidden() : 0;
      if (const std::string chose = auto_decisions(a.opts.block, t.cfg.tokens(), t.cfg.dim, hidden); !chose.empty())
        decisions["n=" + std::to_string(t.cfg.tokens()) + " d=" + std::to_string(t.cfg.dim) + " hidden=" +
                  std::to_string(hidden)] = chose;
    }
    print_audit(a, path, t, reports);
    for (const auto& r : reports) {
      csv += csv_escape(path) + "," + models::conditioning_csv_row(t.step, r) + "\n";
      not_converged += r.report.status == Status::kNotConverged;
    }
    rows += reports.size();
    record.item(item, reports.size());
    if (audited.size() > 1) progress.advance(fs::path(path).filename().string());
  }
  if (!a.out_dir.empty()) write_audit(a, csv, rows, listed, audited, record, decisions, architectures, argc, argv);
  warn_not_converged("audit", not_converged, rows);
  return 0;
}

}  // namespace jacond::cli
