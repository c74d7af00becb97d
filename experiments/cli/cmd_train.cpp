// `jacond train`: trains a ViT on Fashion-MNIST with conditioning tracked (models/train/trainer.h).
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/device_option.h"
#include "experiments/cli/local_launch.h"
#include "models/dist/process_group.h"
#include "models/train/trainer.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {

// The options of one TrainConfig field (models/train/train_config.h): typed as the field,
// its default shown as written (number_value) unless the optimizer chooses it.
template <typename T>
po::typed_value<T>* field_value(const models::TrainField& f, T& field) {
  if (f.shown == models::TrainField::Default::kOptimizerChosen) return po::value(&field);
  if constexpr (std::is_same_v<T, double>) return number_value(&field);
  else if constexpr (std::is_same_v<T, bool>) return po::value(&field)->default_value(field)->implicit_value(true);  // --augment alone: true
  else return po::value(&field)->default_value(field);
}

// The flags of `jacond train`, parsed and checked.
struct TrainArgs {
  models::TrainConfig config;  // as typed (finalize() is the trainer's)
  std::string resume;
  int nproc = 1;
  models::dist::LaunchEnv launch;  // torchrun's or srun's variables, or none
  bool launched_here = false;      // a rank that `--nproc` started on this machine
  std::set<std::string> typed;     // the flags given on the command line (not defaulted)
};

// A flag that describes the other architecture would be ignored (--norm post trained a ConvMixer
// and recorded nothing of it): a usage error naming it. (--init is checked by value in
// TrainConfig::finalize: timm, PyTorch's default, is the ConvMixer's.)
void refuse_flags_of_the_other_arch(const std::string& arch, const std::set<std::string>& typed) {
  if (arch == "convmixer") {
    for (const char* flag : {"heads", "mlp-ratio", "norm", "drop-path", "alpha", "beta", "c", "mlp-init"})
      if (typed.count(flag))
        throw UsageError(std::string("--") + flag + " describes a ViT; --arch convmixer takes --dim, --depth, --patch, "
                         "--skip full|none and --kernel");
  } else if (typed.count("kernel")) {
    throw UsageError("--kernel is the ConvMixer's depthwise kernel: it goes with --arch convmixer");
  }
}

// A model flag the chosen ViT ignores is a usage error, as the other architecture's are: an α
// sweep under --init timm, or a drop-path sweep without residual branches, would train identical
// runs recorded as different. The init's knobs must also be finite (init_block's check, earlier).
void refuse_ignored_model_flags(const models::ViTConfig& m, const std::set<std::string>& typed) {
  const std::pair<const char*, double> knobs[] = {{"alpha", m.init.alpha}, {"beta", m.init.beta}, {"c", m.init.c}};
  for (const auto& [flag, value] : knobs) {
    if (!typed.count(flag)) continue;
    if (m.init.scheme != models::InitScheme::kOurs)
      throw UsageError(std::string("--") + flag + " is a knob of --init ours; --init " + models::to_string(m.init.scheme) +
                       " ignores it");
    if (!std::isfinite(value)) throw UsageError(std::string("--") + flag + " must be finite, got " + fmt(value));
  }
  if (typed.count("drop-path") && m.drop_path > 0 && m.skip == models::SkipKind::kNone)
    throw UsageError("--drop-path drops residual branches; --skip none has none");
}

// The ranks a run trains on: --nproc's, or the launcher's (a launched rank has both equal).
int world_of(const TrainArgs& a) { return std::max(a.nproc, a.launch.world_size); }

// Each rank takes batch / ranks images of every batch.
void check_batch_splits(int64_t batch, int world) {
  if (batch % world != 0)
    throw UsageError("--batch " + std::to_string(batch) + " does not split evenly over " + std::to_string(world) + " ranks");
}

// The flags; std::nullopt after --help. Values are checked here, before any file is read or
// written: a bad one exits 2 (check_usage).
std::optional<TrainArgs> parse_train(int argc, char** argv) {
  TrainArgs a;
  models::TrainConfig& c = a.config;
  models::ViTConfig& m = c.model;
  std::string skip = "full", norm = "pre", init = "timm", mlp_init = "default";
  double alpha = 2.0, beta = 0.6, cc = 3.0;
  // The model's flags (ViTConfig, with the init scheme's knobs): fixed by the checkpoint when resuming.
  po::options_description model("model");
  model.add_options()
      ("dim", po::value(&m.dim)->default_value(m.dim), "embedding dimension d")
      ("depth", po::value(&m.depth)->default_value(m.depth), "number of blocks L")
      ("heads", po::value(&m.heads)->default_value(m.heads), "attention heads")
      ("patch", po::value(&m.patch)->default_value(m.patch), "patch size (divides 28)")
      ("mlp-ratio", number_value(&m.mlp_ratio), "MLP hidden width / d")
      ("skip", po::value(&skip)->default_value(skip), "full | none | no-ffn-skip (attention residual only) | no-sab-skip (MLP residual only) | rezero")
      ("norm", po::value(&norm)->default_value(norm), "LayerNorm placement: pre | post")
      ("drop-path", number_value(&m.drop_path), "stochastic depth rate (residual branches only)")
      ("init", po::value(&init)->default_value(init), "block init: timm | ours | mimetic (docs/design.md §3)")
      ("alpha", number_value(&alpha), "`ours`: α of T = αZ + βI (Q/K)")
      ("beta", number_value(&beta), "`ours`: β")
      ("c", number_value(&cc), "`ours`: scale c of W^V, W^O")
      ("mlp-init", po::value(&mlp_init)->default_value(mlp_init), "default | timm | dks");
  // Everything else: one option per row of the TrainConfig field table.
  std::map<std::string, po::options_description> groups;
  for (const char* g : {"optimizer", "data", "run", "tracking"})
    groups.emplace(g, po::options_description(std::string(g) == "tracking" ? "conditioning tracking" : g));
  models::for_each_train_field(c, [&](const models::TrainField& f, auto& field) {
    (std::string(f.group) == "model" ? model : groups.at(f.group)).add_options()(f.flag, field_value(f, field), f.help);
  });
  groups.at("run").add_options()("resume", po::value(&a.resume), "continue from a checkpoint dir or the newest in a run dir")(
      "nproc", po::value(&a.nproc)->default_value(a.nproc),
      "data parallel: start N ranks on this machine (--threads each; Gloo on cpu, NCCL on cuda with one GPU per rank); under a torchrun or srun launch of more than one process leave it out");
  po::options_description desc("jacond train: a ViT (or the ConvMixer control) on Fashion-MNIST, checkpoints and conditioning.csv");
  desc.add_options()("help,h", "this help");
  desc.add(model);
  for (const char* g : {"optimizer", "data", "run", "tracking"}) desc.add(groups.at(g));
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return std::nullopt;
  for (const auto& [flag, value] : vm)
    if (!value.defaulted()) a.typed.insert(flag);

  a.launched_here = std::getenv(kLocalLaunchVariable) != nullptr;
  check_usage([&] {
    a.launch = models::dist::read_launch_env();
    if (a.nproc < 1 || a.nproc > kMaxLocalRanks)
      throw UsageError("--nproc must be in [1, " + std::to_string(kMaxLocalRanks) + "] (the ranks of one machine)");
    // Refused where the launcher starts ranks itself; a world of one (a single-task Slurm job,
    // torchrun --nproc-per-node 1) is one process, which may start its own.
    if (a.nproc > 1 && a.launch.distributed() && !a.launched_here)
      throw UsageError("--nproc starts local ranks; under " + a.launch.launcher + " with " +
                       std::to_string(a.launch.world_size) + " ranks the launcher starts them: leave --nproc out");
    if (a.resume.empty()) check_batch_splits(c.batch, world_of(a));  // a resumed run's batch: run_train
    m.skip = parse_flag("--skip", [&] { return models::parse_skip_kind(skip); });
    m.norm = parse_flag("--norm", [&] { return models::parse_norm_placement(norm); });
    m.init = models::InitConfig::for_scheme(parse_flag("--init", [&] { return models::parse_init_scheme(init); }), c.seed);
    m.init.alpha = alpha;
    m.init.beta = beta;
    m.init.c = cc;
    if (mlp_init != "default") m.init.mlp = parse_flag("--mlp-init", [&] { return models::parse_mlp_init(mlp_init); });
    if (!a.resume.empty()) {
      for (const auto& o : model.options())
        if (a.typed.count(o->long_name()))
          throw UsageError("--" + o->long_name() + ": the checkpoint fixes the model; leave it out when resuming");
      if (a.typed.count("seed")) throw UsageError("--seed: the checkpoint fixes the seed; leave it out when resuming");
    }
    refuse_flags_of_the_other_arch(c.arch, a.typed);
    if (c.arch == "vit") refuse_ignored_model_flags(m, a.typed);
    models::for_each_train_field(c, [&](const models::TrainField& f, const auto& field) {
      // Negative is the "optimizer's default" these fields hold until finalize(): typed, it is an error.
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, double>)
        if (f.shown == models::TrainField::Default::kOptimizerChosen && a.typed.count(f.flag) && field < 0)
          throw UsageError("--" + std::string(f.flag) + " must be >= 0 (leave it out for the optimizer's default), got " +
                           fmt(field));
    });
    if (a.resume.empty()) {
      models::TrainConfig checked = c;  // finalize() fills in the optimizer's defaults; c stays as typed
      checked.finalize();
    }
  });
  return a;
}

// The checkpoint's config as saved (bad data: exit 1). A saved value outside today's bounds (a
// dist_timeout of 1e300, saved before 1e9 s was the bound) does not stop a resume whose typed
// flags, of those a resume may change (`changeable`), replace it.
models::TrainConfig saved_config(const models::Checkpoint& checkpoint, const nlohmann::json& changeable, int64_t stop_at) {
  try {
    return models::resumed_config(checkpoint, nlohmann::json::object(), stop_at);
  } catch (const std::invalid_argument& bad_saved) {
    try {
      return models::resumed_config(checkpoint, changeable, stop_at);
    } catch (const std::invalid_argument&) {
      throw std::runtime_error(checkpoint.dir + "/meta.json: the run's config: " + bad_saved.what());
    }
  }
}

// The resumed run's config: the checkpoint's own (data: a bad one exits 1), with the flags typed
// beside --resume overriding it (a bad value exits 2). A typed flag that would change what the run
// trains on or how (models::changeable_on_resume) is a usage error unless it repeats the saved
// value; so is --epochs on a run that counts --steps (it would be ignored); so is a saved --batch that
// does not split over the `world` ranks (it was found by the started ranks, each exiting 1).
models::TrainConfig config_for_resume(const TrainArgs& a, const models::Checkpoint& checkpoint, int world) {
  models::TrainConfig c = a.config;
  const nlohmann::json typed_values = c.to_json();
  nlohmann::json overrides = nlohmann::json::object(), changeable = nlohmann::json::object();
  models::for_each_train_field(c, [&](const models::TrainField& f, const auto&) {
    if (!f.saved || !a.typed.count(f.flag)) return;
    overrides[f.key] = typed_values.at(f.key);
    if (models::changeable_on_resume(f.key)) changeable[f.key] = typed_values.at(f.key);
  });
  const models::TrainConfig saved = saved_config(checkpoint, changeable, c.stop_at);
  const nlohmann::json saved_values = saved.to_json();
  models::TrainConfig resumed;
  check_usage([&] { resumed = models::resumed_config(checkpoint, overrides, c.stop_at); });  // a bad value first
  const nlohmann::json resumed_values = resumed.to_json();
  models::for_each_train_field(c, [&](const models::TrainField& f, const auto&) {
    if (!overrides.contains(f.key) || models::changeable_on_resume(f.key)) return;
    if (resumed_values.at(f.key) != saved_values.at(f.key))
      throw UsageError("--" + std::string(f.flag) + " " + typed_values.at(f.key).dump() + " differs from the run's " +
                       saved_values.at(f.key).dump() +
                       ": a resumed run keeps what it trains on and how (start a new run to change it)");
  });
  if (const int64_t at = checkpoint.meta.value("step", int64_t{0}); c.stop_at > 0 && c.stop_at <= at)
    throw UsageError("--stop-at " + std::to_string(c.stop_at) + ": the run resumes at step " + std::to_string(at) +
                     " (" + checkpoint.dir + "); stop it later");
  if (a.typed.count("epochs") && !a.typed.count("steps") && saved.steps > 0)
    throw UsageError("--epochs: this run counts --steps (" + std::to_string(saved.steps) + "); extend it with --steps");
  check_batch_splits(resumed.batch, world);
  return resumed;
}

// Where --nproc's ranks read their place (RANK, WORLD_SIZE, ... which launch_local_ranks sets):
// an outer launcher's variables of a world of one must not reach them. RANK wins over Slurm's
// SLURM_PROCID (models/dist/process_group.h); torchrun's agent-store variables have no
// counterpart there and would make every rank a client of a store nobody serves.
void clear_outer_launch_env() {
  for (const char* v : {"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"}) ::unsetenv(v);
}

// A rank of a data-parallel run joins its group once the run's --dist-timeout is known; a plain
// run has none.
std::unique_ptr<models::dist::RankGroup> join_ranks(const models::dist::LaunchEnv& launch,
                                                    const models::TrainConfig& cfg) {
  if (!launch.distributed()) return nullptr;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.dist_timeout * 1000));
  return std::make_unique<models::dist::RankGroup>(launch, timeout, std::nullopt,
                                                   models::dist::parse_dist_backend(cfg.resolved_dist_backend()));
}

// Where tracking's analysis runs: on the GPU the run trains on (a rank's own), else the host; the
// host too where no tracked matrix has a device route (the default set: the trainer says so).
models::TrackDevices track_devices(models::TrainConfig cfg, const models::dist::RankGroup* ranks) {
  cfg.finalize();  // the post-norm default set, the typed names checked (usage errors were caught before)
  if (cfg.device_tracked_matrices().empty()) return {};
  return select_track_devices(cfg.resolved_track_device(), ranks && ranks->device().is_cuda() ? ranks->device().index() : 0);
}

}  // namespace

int run_train(int argc, char** argv) {
  const std::optional<TrainArgs> parsed = parse_train(argc, argv);
  if (!parsed) return 0;
  const TrainArgs& a = *parsed;
  // Rank 0 makes the run directory; a run that fails before writing into it leaves none (the
  // launcher of --nproc undoes it too: its ranks are stopped by a signal, which unwinds nothing).
  OutputDirectoryGuard no_empty_out(a.launch.rank == 0 ? a.config.out_dir : std::string());
  if (a.nproc > 1 && !a.launched_here) {
    // A resumed run's flags and batch are checked once, here, before any rank starts.
    if (!a.resume.empty())
      config_for_resume(a, models::read_checkpoint(models::resolve_resume_checkpoint(a.resume)), world_of(a));
    clear_outer_launch_env();
    const int code = launch_local_ranks(a.nproc, argc, argv);
    if (code == 0) no_empty_out.keep();
    return code;
  }

  models::TrainResult r;
  std::string run_dir = a.config.out_dir;
  std::unique_ptr<models::dist::RankGroup> ranks;
  if (a.resume.empty()) {
    ranks = join_ranks(a.launch, a.config);
    r = models::train(a.config, nullptr, std::cout, ranks.get(), track_devices(a.config, ranks.get()));
  } else {
    const models::Checkpoint checkpoint = models::read_checkpoint(models::resolve_resume_checkpoint(a.resume));
    const models::TrainConfig resumed = config_for_resume(a, checkpoint, world_of(a));
    run_dir = resumed.out_dir;
    ranks = join_ranks(a.launch, resumed);
    r = models::train(resumed, &checkpoint, std::cout, ranks.get(), track_devices(resumed, ranks.get()));
  }
  if (a.launch.rank != 0) return 0;
  // The command that (last) wrote the run, for the captions of `jacond plot RUN`.
  write_file_atomic(run_dir + "/run.json", run_metadata(argc, argv).dump(2) + "\n");
  std::cout << "done: " << r.steps << " steps, last loss " << r.last_loss << ", test acc " << r.test_acc
            << ", checkpoint " << r.last_checkpoint << "\n";
  no_empty_out.keep();
  return 0;
}

}  // namespace jacond::cli
