// TrainConfig: everything `jacond train` is told, and its one field table.
//
// Each field is declared once in the struct and once in for_each_train_field (below), which
// names its config.json key, its `jacond train` flag, its --help group and text. Everything
// else is derived from that table: to_json / from_json (config.json and checkpoint meta.json),
// the command's options and --help (experiments/cli/cmd_train.cpp), the resume overrides (flag
// typed -> config key), and the flag that finalize()'s errors name. Adding a field = one struct
// member + one table row (tests/models/test_train_config.cpp checks the round trip for every
// row and that every finalize() error names a flag of the table).
//
// The model (ViTConfig, models/vit/vit.h) is nested under "model" with its own to_json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/classifier/convmixer.h"
#include "models/vit/vit.h"

namespace jacond::models {

struct TrainConfig {
  ViTConfig model;
  // Architecture: "vit" (`model`) or "convmixer", the CNN control of "Always Skip Attention" §5
  // (models/classifier/convmixer.h), built from model.dim, depth, patch, skip (full | none) and
  // `kernel`; its parameters are PyTorch's defaults (model.init must be timm, the default).
  std::string arch = "vit";
  int64_t kernel = 5;  // convmixer: depthwise kernel size (odd)
  // Optimizer: "soap" or "adamw". Negative values mean "the optimizer's default":
  //   soap  lr 3e-3, betas (0.95, 0.95), eps 1e-8, wd 0.01 (the reference's defaults)
  //   adamw lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.05
  std::string optimizer = "soap";
  double lr = -1, beta1 = -1, beta2 = -1, eps = -1, weight_decay = -1;
  double shampoo_beta = -1;  // SOAP; < 0: beta2
  int64_t precondition_frequency = 10, max_precond_dim = 10000;
  double min_lr = 0;
  int64_t warmup_steps = 50;
  double clip_grad = 1.0;  // max global gradient norm; <= 0 disables clipping
  // Schedule: steps > 0 wins over epochs.
  int64_t batch = 128, steps = 0, epochs = 1;
  // Data.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t data_limit = 0, test_limit = 0;  // 0: whole split
  bool augment = false;
  int64_t crop_pad = 2;
  bool flip = true;
  // Token Graying ("Always Skip Attention" §5, models/data/token_graying.h) on every batch the
  // network sees (training after augmentation, evaluation, the tracking probe, audit's probe).
  std::string token_graying = "none";  // none | svd | dct (models/data/token_graying.h)
  double tg_eps = 0.95;
  // Run.
  int64_t threads = 2;  // per rank
  uint64_t seed = 0;
  // Data parallel (models/dist): how long a collective waits for the other ranks before the run
  // fails; it must exceed what rank 0 does alone between steps (tracking, checkpoints).
  double dist_timeout = 600;
  // The c10d backend: auto picks nccl on --device cuda (one GPU per rank, cuda:LOCAL_RANK) and
  // gloo on the CPU, as torch.distributed's default does.
  std::string dist_backend = "auto";  // auto | gloo | nccl
  std::string device = "cpu";
  std::string out_dir = "results/train";
  int64_t log_every = 1, print_every = 10, eval_every = 0;  // eval_every 0: at each epoch's end
  int64_t checkpoint_every = 100, keep = 3;
  /// Also write step 0 (the initialisation, before any update) on a fresh run, so that `jacond
  /// audit` sees where training started; --keep never removes it.
  bool checkpoint_init = false;
  /// Stop (with a checkpoint) after this step although the schedule runs to `steps`: a
  /// time-boxed or deliberately interrupted run. Not saved in checkpoints. 0: run to the end.
  int64_t stop_at = 0;
  // Conditioning tracking.
  int64_t track_every = 100;  // 0 disables
  int64_t probe_size = 1;     // first probe_size test images
  std::string track_method = "auto";  // auto | dense | svd | lanczos (analysis/report/block_report.h)
  double track_seconds = 10;          // lanczos route: time budget per matrix (then not-converged + best bracket)
  // The default keeps tracking under 10 % of training time at scripts/run_main.sh's settings
  // (skipless, ours, SOAP, d = 64, depth 4, n = 50, --track-every 100, 2 threads): 0.27 s per
  // call, 0.7 % of 100 steps (`jacond bench train ... --skip none --init ours`, README). K_sab
  // is the costly one there: its exact dense κ on the full space and the LayerNorm complement
  // (an LU and a QR of 3200 × 3200) costs about 2.7 s per layer, 11 s per call (25 %); ask for
  // it with --track-matrices, as run_main does, or read it from `jacond audit` afterwards.
  // A post-norm ViT's default is softmax,attention (its blocks have no K_ffn: finalize).
  std::string track_matrices = "K_ffn,softmax,attention";  // comma list or all, see models/track/conditioning.h
  // Data parallel: "layers" splits a ViT's tracking across the ranks by layer (rank r takes the
  // layers l ≡ r mod W; rank 0 gathers and writes the rows in the one-process order); "rank0"
  // tracks on rank 0 alone while the others wait. Measured in README "Data-parallel training".
  std::string track_split = "layers";
  // Where tracking's analysis runs: "same" (the run's --device: on cuda, the GPU's dense routes
  // and matrix-free products for the rows that have them, device_tracked_matrices; models/track/
  // conditioning.h TrackDevices) | "cpu" (the host, whatever --device). The probe's forward pass
  // runs where the model is, either way. A config saved without it (before 2026-11-28) reads "cpu".
  std::string track_device = "same";

  /// The tracked matrices a device can take (block_report.h): K_sa, B_sa, E_sa and K_sab (the
  /// dense routes' full-space rows; under lanczos their products), and K_mlp, K_ffn under
  /// --track-method lanczos only (otherwise token by token on the host). The rest (softmax,
  /// attention, token matrices, the skipless rows' LayerNorm complement) stay on the host. Empty
  /// for a ConvMixer or with tracking off.
  std::vector<std::string> device_tracked_matrices() const;
  /// Where tracking's analysis runs: "cpu" or "cuda" (track_device resolved against device).
  std::string resolved_track_device() const { return track_device == "cpu" ? "cpu" : device; }
  /// dist_backend with auto resolved against device: "gloo" or "nccl".
  std::string resolved_dist_backend() const;
  /// The ConvMixer of a convmixer run (from model and kernel, seeded by `seed`).
  ConvMixerConfig convmixer() const;
  /// track_matrices parsed against the architecture's names (empty: all); std::invalid_argument
  /// listing the valid names otherwise.
  std::vector<std::string> tracked_matrices() const;

  /// Resolves the optimizer defaults above and checks every field. Throws std::invalid_argument
  /// naming the flag ("--warmup-steps must be >= 0"); the model's errors come from
  /// ViTConfig::validate.
  void finalize();
  /// Throws std::invalid_argument naming --depth and --dim when, on the CPU, the model's weights,
  /// gradients and optimizer moments alone exceed this machine's memory (part of finalize()).
  void refuse_what_cannot_fit() const;
  /// config.json: {"model": ..., key: value for every saved row of the table}.
  nlohmann::json to_json() const;
  /// Inverse of to_json; missing keys keep their defaults; a wrong type or a bad value throws
  /// std::invalid_argument (one line). The result is finalized.
  static TrainConfig from_json(const nlohmann::json& j);
};

/// One row of the field table.
struct TrainField {
  enum class Default {
    kShown,            // --help shows the struct's default
    kOptimizerChosen,  // negative until finalize() picks the optimizer's default; --help says which
  };
  const char* key;    // config.json key
  const char* flag;   // `jacond train` flag, without "--"
  const char* group;  // --help section: model | optimizer | data | run | tracking
  const char* help;
  Default shown = Default::kShown;
  bool saved = true;  // false: run control only, not part of config.json (stop_at)
};

/// Whether a resume may change the config.json field `key`: how long the run goes (steps; epochs
/// on a run that counts epochs), where and how it runs (threads, device, dist_timeout,
/// dist_backend, data_dir, out_dir) and what it logs, checkpoints and tracks (log/print/eval/
/// checkpoint periods, keep, the tracking fields). Never what it trains on or how (arch, the
/// optimizer, batch, seed, the data's limits, augmentation, Token Graying): a resumed run repeats
/// the uninterrupted one bit for bit, and config.json describes the whole run.
bool changeable_on_resume(const std::string& key);

/// Calls visit(row, field) for every TrainConfig field but `model`, in --help order.
/// Groups: model | optimizer | data | run | tracking.
/// `Config` is TrainConfig or const TrainConfig.
template <typename Config, typename Visit>
void for_each_train_field(Config& c, Visit&& visit) {
  using D = TrainField::Default;
  // model (beside the ViT's own flags, experiments/cli/cmd_train.cpp)
  visit(TrainField{"arch", "arch", "model", "vit | convmixer (the CNN control; --dim, --depth, --patch, --skip full|none, --kernel)"},
        c.arch);
  visit(TrainField{"kernel", "kernel", "model", "convmixer: depthwise kernel size (odd)"}, c.kernel);
  // optimizer
  visit(TrainField{"optimizer", "optimizer", "optimizer", "soap | adamw"}, c.optimizer);
  visit(TrainField{"lr", "lr", "optimizer", "peak learning rate (soap 3e-3, adamw 1e-3)", D::kOptimizerChosen}, c.lr);
  visit(TrainField{"min_lr", "min-lr", "optimizer", "cosine floor"}, c.min_lr);
  visit(TrainField{"beta1", "beta1", "optimizer", "first-moment β₁ (soap 0.95, adamw 0.9)", D::kOptimizerChosen}, c.beta1);
  visit(TrainField{"beta2", "beta2", "optimizer", "second-moment β₂ (soap 0.95, adamw 0.999)", D::kOptimizerChosen}, c.beta2);
  visit(TrainField{"eps", "eps", "optimizer", "ε (1e-8)", D::kOptimizerChosen}, c.eps);
  visit(TrainField{"weight_decay", "weight-decay", "optimizer", "decoupled weight decay (soap 0.01, adamw 0.05)",
                   D::kOptimizerChosen},
        c.weight_decay);
  visit(TrainField{"shampoo_beta", "shampoo-beta", "optimizer", "SOAP: EMA of L, R (<0: β₂)"}, c.shampoo_beta);
  visit(TrainField{"precondition_frequency", "precondition-frequency", "optimizer", "SOAP: eigenbasis refresh period"},
        c.precondition_frequency);
  visit(TrainField{"max_precond_dim", "max-precond-dim", "optimizer", "SOAP: longest side preconditioned"}, c.max_precond_dim);
  visit(TrainField{"warmup_steps", "warmup-steps", "optimizer", "linear warmup steps"}, c.warmup_steps);
  visit(TrainField{"clip_grad", "clip-grad", "optimizer", "max global grad norm (<=0: off)"}, c.clip_grad);
  // data
  visit(TrainField{"data_dir", "data-dir", "data", "Fashion-MNIST IDX .gz files"}, c.data_dir);
  visit(TrainField{"data_limit", "data-limit", "data", "use the first N training images (0: all)"}, c.data_limit);
  visit(TrainField{"test_limit", "test-limit", "data", "use the first N test images (0: all)"}, c.test_limit);
  visit(TrainField{"augment", "augment", "data", "random crop + flip"}, c.augment);
  visit(TrainField{"crop_pad", "crop-pad", "data", "random-crop padding"}, c.crop_pad);
  visit(TrainField{"flip", "flip", "data", "horizontal flips when augmenting"}, c.flip);
  visit(TrainField{"token_graying", "token-graying", "data",
                   "Token Graying of every input image: none | svd (sigma_max U (S/sigma_max)^eps V^T) | dct (the same power law on the DCT row/column energies)"},
        c.token_graying);
  visit(TrainField{"tg_eps", "tg-eps", "data", "Token Graying exponent eps in (0, 1] (1: identity)"}, c.tg_eps);
  // run
  visit(TrainField{"batch", "batch", "run", "batch size"}, c.batch);
  visit(TrainField{"steps", "steps", "run", "optimizer steps (wins over --epochs)"}, c.steps);
  visit(TrainField{"epochs", "epochs", "run", "epochs when --steps is 0"}, c.epochs);
  visit(TrainField{"threads", "threads", "run", "torch + BLAS threads"}, c.threads);
  visit(TrainField{"seed", "seed", "run", "seed of init, data order, augmentation"}, c.seed);
  visit(TrainField{"device", "device", "run", "cpu | cuda"}, c.device);
  visit(TrainField{"dist_timeout", "dist-timeout", "run",
                   "data parallel: seconds a collective waits for the other ranks before the run fails "
                   "(must exceed rank 0's tracking and checkpoint time)"},
        c.dist_timeout);
  visit(TrainField{"dist_backend", "dist-backend", "run",
                   "data parallel: auto (nccl on --device cuda, gloo on cpu) | gloo | nccl"},
        c.dist_backend);
  visit(TrainField{"out_dir", "out", "run", "run directory"}, c.out_dir);
  visit(TrainField{"log_every", "log-every", "run", "train_log.jsonl period"}, c.log_every);
  visit(TrainField{"print_every", "print-every", "run", "progress line period"}, c.print_every);
  visit(TrainField{"eval_every", "eval-every", "run", "test evaluation period (0: each epoch)"}, c.eval_every);
  visit(TrainField{"checkpoint_every", "checkpoint-every", "run", "checkpoint period (0: end only)"}, c.checkpoint_every);
  visit(TrainField{"checkpoint_init", "checkpoint-init", "run",
                   "also checkpoint step 0, the initialisation (never removed by --keep)"},
        c.checkpoint_init);
  visit(TrainField{"keep", "keep", "run", "checkpoints kept (0: all; a step-0 checkpoint is not counted)"}, c.keep);
  visit(TrainField{"stop_at", "stop-at", "run", "stop after this step (with a checkpoint); 0: run to the end",
                   D::kShown, /*saved=*/false},
        c.stop_at);
  // conditioning tracking
  visit(TrainField{"track_every", "track-every", "tracking", "conditioning period in steps (0: off)"}, c.track_every);
  visit(TrainField{"probe_size", "probe-size", "tracking", "probe images: the first N test images"}, c.probe_size);
  visit(TrainField{"track_method", "track-method", "tracking",
                   "κ route: auto (dense when it fits, analysis/report/block_report.h) | dense | svd | mixed | schur | lanczos"},
        c.track_method);
  visit(TrainField{"track_seconds", "track-seconds", "tracking",
                   "lanczos: seconds per matrix before reporting the best bracket as not-converged"},
        c.track_seconds);
  visit(TrainField{"track_matrices", "track-matrices", "tracking",
                   "comma list of K_sa,B_sa,E_sa,K_sab,K_mlp,K_ffn,softmax,attention, the token matrices "
                   "X_in,LN1_out,SA_out,SAB_out,LN2_out,FFN_out,FFN_block_out, the data-free matrices (per layer, "
                   "from the weights alone) W_VO,W_VO_h,W_QK_h,W_Q,W_K,W_V,W_O,W_1,W_2, or all (the block and token "
                   "matrices) (--norm post: K_sa,B_sa,E_sa,softmax,attention and the data-free ones; default "
                   "softmax,attention)"},
        c.track_matrices);
  visit(TrainField{"track_split", "track-split", "tracking",
                   "data parallel: layers (each rank tracks every W-th layer) | rank0 (rank 0 tracks alone)"},
        c.track_split);
  visit(TrainField{"track_device", "track-device", "tracking",
                   "where tracking's analysis runs: same (the run's --device) | cpu (the host)"},
        c.track_device);
}

/// "--flag" of the table row whose config key is `key`; throws std::logic_error for a key that
/// is not in the table (a programming error).
std::string train_flag(const std::string& key);

}  // namespace jacond::models
