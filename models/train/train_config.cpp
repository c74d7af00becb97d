#include "models/train/train_config.h"

#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "analysis/report/block_report.h"
#include "analysis/spectral/dense_cost.h"
#include "models/track/conditioning.h"

namespace jacond::models {

std::string train_flag(const std::string& key) {
  std::string flag;
  for_each_train_field(static_cast<const TrainConfig&>(TrainConfig{}), [&](const TrainField& f, const auto&) {
    if (key == f.key) flag = std::string("--") + f.flag;
  });
  if (flag.empty()) throw std::logic_error("train_flag: no TrainConfig field '" + key + "'");
  return flag;
}

namespace {
// Throws "--<flag of key> <what>" unless ok.
void require(bool ok, const char* key, const std::string& what) {
  if (!ok) throw std::invalid_argument(train_flag(key) + " " + what);
}
}  // namespace

std::string TrainConfig::resolved_dist_backend() const {
  if (dist_backend != "auto") return dist_backend;
  return device == "cuda" ? "nccl" : "gloo";
}

ConvMixerConfig TrainConfig::convmixer() const {
  ConvMixerConfig c;
  c.image_size = model.image_size;
  c.in_chans = model.in_chans;
  c.num_classes = model.num_classes;
  c.dim = model.dim;
  c.depth = model.depth;
  c.patch = model.patch;
  c.kernel = kernel;
  c.skip = model.skip == SkipKind::kFull;
  c.seed = seed;
  return c;
}

bool changeable_on_resume(const std::string& key) {
  static const std::set<std::string> keys = {
      "steps",     "epochs",        "threads",     "device",      "dist_timeout",     "dist_backend",
      "data_dir",  "out_dir",       "log_every",   "print_every", "eval_every",       "checkpoint_every",
      "checkpoint_init", "keep",      "track_every",   "probe_size",  "track_method", "track_seconds",   "track_matrices",
      "track_split", "track_device"};
  return keys.count(key) > 0;
}

std::vector<std::string> TrainConfig::device_tracked_matrices() const {
  if (arch != "vit" || track_every <= 0) return {};
  std::vector<std::string> names = tracked_matrices();
  if (names.empty()) names = {"K_sa", "B_sa", "E_sa", "K_sab", "K_mlp", "K_ffn"};  // all
  const std::set<std::string> dense = {"K_sa", "B_sa", "E_sa", "K_sab"}, tokenwise = {"K_mlp", "K_ffn"};
  std::vector<std::string> out;
  for (const std::string& m : names)
    if (dense.count(m) || (track_method == "lanczos" && tokenwise.count(m))) out.push_back(m);
  return out;
}

std::vector<std::string> TrainConfig::tracked_matrices() const {
  if (arch == "convmixer") return jacond::parse_matrix_names(track_matrices, convmixer_matrix_names());
  std::vector<std::string> names = parse_matrix_list(track_matrices);
  check_matrices_for(model.norm, names);
  return names;
}

namespace {
// The tracking set a run gets when --track-matrices is not typed (the ViT's default list): a
// ConvMixer tracks its four token matrices instead.
constexpr const char* kVitDefaultTracking = "K_ffn,softmax,attention";
}  // namespace

// The weights, their gradients and the optimizer's two moments in fp32 (16 bytes a weight of the
// blocks' matrices): a lower bound of what one CPU rank holds in host memory (activations, biases
// and SOAP's eigenbases come on top), so a refusal is never wrong there. Without it, --depth
// 100000000 allocated until the machine ran out, leaving an empty run directory behind a kill.
// On --device cuda they live in the GPU's memory, which this does not know: no check.
void TrainConfig::refuse_what_cannot_fit() const {
  const double memory = physical_memory_bytes();
  if (device != "cpu" || memory <= 0) return;  // 0: sysconf could not say
  const double d = static_cast<double>(model.dim), blocks = static_cast<double>(model.depth);
  const double weights = arch == "convmixer" ? blocks * (d * kernel * kernel + d * d)
                                             : blocks * (4.0 * d * d + 2.0 * d * static_cast<double>(model.hidden()));
  const double bytes = 16.0 * weights;
  if (bytes > memory)
    throw std::invalid_argument("--depth " + std::to_string(model.depth) + " --dim " + std::to_string(model.dim) +
                                ": the weights, gradients and optimizer moments alone need " +
                                std::to_string(static_cast<int64_t>(std::ceil(bytes / 1e9))) +
                                " GB, more than this machine's " + std::to_string(static_cast<int64_t>(memory / 1e9)) +
                                " GB");
}

void TrainConfig::finalize() {
  require(arch == "vit" || arch == "convmixer", "arch", "must be vit or convmixer, got '" + arch + "'");
  for_each_train_field(*this, [](const TrainField& f, const auto& field) {  // --lr inf wrote "lr": null
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, double>)
      require(std::isfinite(field), f.key, "must be a finite number, got " + std::to_string(field));
  });
  if (arch == "convmixer") {
    require(model.skip == SkipKind::kFull || model.skip == SkipKind::kNone, "arch",
            "convmixer: --skip must be full or none (one residual per block, around the spatial mixing)");
    require(model.init.scheme == InitScheme::kTimm, "arch",
            "convmixer: --init ours|mimetic are ViT inits (the ConvMixer uses PyTorch's defaults)");
    require(kernel >= 1 && kernel % 2 == 1, "kernel", "must be odd and >= 1, got " + std::to_string(kernel));
    try {
      convmixer().validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--arch ") + e.what());
    }
    if (track_matrices == kVitDefaultTracking) track_matrices = "all";
  } else {
    model.validate();
    // A post-norm ViT has no K_ffn (no LayerNorm before its MLP): its default tracks the per-head
    // matrices; a typed list is checked against what its blocks report.
    if (model.norm == NormPlacement::kPost && track_matrices == kVitDefaultTracking) track_matrices = "softmax,attention";
  }
  refuse_what_cannot_fit();
  const bool soap = optimizer == "soap";
  require(soap || optimizer == "adamw", "optimizer", "must be soap or adamw, got '" + optimizer + "'");
  if (lr < 0) lr = soap ? 3e-3 : 1e-3;
  if (beta1 < 0) beta1 = soap ? 0.95 : 0.9;
  if (beta2 < 0) beta2 = soap ? 0.95 : 0.999;
  if (eps < 0) eps = 1e-8;
  if (weight_decay < 0) weight_decay = soap ? 0.01 : 0.05;
  require(lr > 0, "lr", "must be positive");
  require(beta1 < 1, "beta1", "must be in [0, 1)");
  require(beta2 < 1, "beta2", "must be in [0, 1)");
  require(eps > 0, "eps", "must be positive");
  require(shampoo_beta < 1, "shampoo_beta", "must be < 1 (negative: β₂)");
  require(min_lr >= 0 && min_lr <= lr, "min_lr", "must be in [0, lr]");
  require(precondition_frequency >= 1, "precondition_frequency", "must be >= 1");
  require(max_precond_dim >= 1, "max_precond_dim", "must be >= 1");
  require(warmup_steps >= 0, "warmup_steps", "must be >= 0");
  require(batch >= 1, "batch", "must be >= 1");
  require(steps >= 0, "steps", "must be >= 0");
  require(epochs >= 0, "epochs", "must be >= 0");
  require(steps > 0 || epochs > 0, "steps", "or --epochs must be > 0");
  require(data_limit >= 0, "data_limit", "must be >= 0");
  require(test_limit >= 0, "test_limit", "must be >= 0");
  require(crop_pad >= 0, "crop_pad", "must be >= 0");
  require(token_graying == "none" || token_graying == "svd" || token_graying == "dct", "token_graying",
          "must be none, svd or dct, got '" + token_graying + "'");
  require(tg_eps > 0 && tg_eps <= 1, "tg_eps", "must be in (0, 1]");
  require(threads >= 1, "threads", "must be >= 1");
  require(device == "cpu" || device == "cuda", "device", "must be cpu or cuda, got '" + device + "'");
  require(log_every >= 1, "log_every", "must be >= 1");
  require(print_every >= 1, "print_every", "must be >= 1");
  require(eval_every >= 0, "eval_every", "must be >= 0");
  require(checkpoint_every >= 0, "checkpoint_every", "must be >= 0");
  require(keep >= 0, "keep", "must be >= 0");
  require(stop_at >= 0, "stop_at", "must be >= 0");
  require(track_every >= 0, "track_every", "must be >= 0");
  require(probe_size >= 1, "probe_size", "must be >= 1");
  require(track_seconds > 0, "track_seconds", "must be positive");
  require(dist_timeout > 0, "dist_timeout", "must be positive");
  // The collectives take it in milliseconds as an int64: a larger value overflowed into a negative
  // timeout (1e300 s: every rendezvous failed at once). 1e9 s, 31 years, is "never" already.
  constexpr double kMaxDistTimeoutSeconds = 1e9;
  if (dist_timeout > kMaxDistTimeoutSeconds) {
    std::ostringstream got;
    got << dist_timeout;  // 1e+300, not std::to_string's 301 digits
    require(false, "dist_timeout", "must be at most 1e9 seconds, got " + got.str());
  }
  require(dist_backend == "auto" || dist_backend == "gloo" || dist_backend == "nccl", "dist_backend",
          "must be auto, gloo or nccl, got '" + dist_backend + "'");
  require(resolved_dist_backend() == (device == "cuda" ? "nccl" : "gloo"), "dist_backend",
          dist_backend + " cannot average " + device + " gradients (gloo: --device cpu, nccl: --device cuda)");
  require(track_split == "layers" || track_split == "rank0", "track_split", "must be layers or rank0, got '" + track_split + "'");
  require(track_device == "same" || track_device == "cpu", "track_device", "must be same or cpu, got '" + track_device + "'");
  // The name parsers' messages list the valid names; prefix the flag.
  auto named = [](const char* key, auto&& parse) {
    try {
      parse();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(train_flag(key) + ": " + e.what());
    }
  };
  named("track_method", [&] { parse_kappa_route(track_method); });
  named("track_matrices", [&] { tracked_matrices(); });
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j{{"model", model.to_json()}};
  for_each_train_field(*this, [&](const TrainField& f, const auto& value) {
    if (f.saved) j[f.key] = value;
  });
  return j;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  TrainConfig c;
  try {
    if (j.contains("model")) c.model = ViTConfig::fields_from_json(j.at("model"));  // finalize() validates
    for_each_train_field(c, [&](const TrainField& f, auto& value) {
      if (f.saved && j.contains(f.key)) value = j.at(f.key).get<std::decay_t<decltype(value)>>();
    });
    // A run saved before track_device existed tracked on the host: it resumes as it ran.
    if (!j.contains("track_device")) c.track_device = "cpu";
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("train config: ") + e.what());
  }
  c.finalize();
  return c;
}

}  // namespace jacond::models
